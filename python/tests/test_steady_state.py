"""CPU: flash_attn_varlen_func's steady-state path (calls of PyTorch tensors whose signature
passed the general path) launches the argument block the general path packs for the same
arguments, and every argument a check looks at still reaches that check after warm-up.
faketorch tensors; plans and launches from offline.py (the library's host checks run)."""

import types

import pytest

import dcpattn
import faketorch
from dcpattn import ArgumentError, _attention
from faketorch import Tensor
from fakes import DL
from offline import Recorder, offline

OUT, LSE = 18, 21  # the out and lse pointers' places in the argument block


@pytest.fixture
def env(monkeypatch):
    try:
        dcpattn.library_path()
    except dcpattn.LibraryNotFoundError:
        pytest.skip("libdcpattn.so is not built (make build/libdcpattn.so)")
    t, rec = faketorch.module(), Recorder()
    with offline(rec, torch=t) as made:
        general = []
        prepare = _attention.prepare
        monkeypatch.setattr(_attention, "prepare", lambda *a: general.append(1) or prepare(*a))
        yield types.SimpleNamespace(t=t, rec=rec, made=made, general=general)


def gqa(t, **change):
    B, hq, hkv, d, page = 3, 8, 2, 128, 16
    kw = dict(q=Tensor((5, hq, d), t.bfloat16), k_cache=Tensor((12, page, hkv, d), t.bfloat16),
              v_cache=Tensor((12, page, hkv, d), t.bfloat16), cu_seqlens_q=Tensor((B + 1,), t.int32),
              seqused_k=Tensor((B,), t.int32), block_table=Tensor((B, 4), t.int32), max_seqlen_q=3,
              max_seqlen_k=50)
    kw.update(change)
    return kw


def decode(t, **change):
    """A DCP rank's decode call with every output given."""
    kw = dict(cp_world_size=4, cp_rank=3, cp_tot_seqused_k=Tensor((3,), t.int32), cp_kv_cache_interleave_size=16,
              return_softmax_lse=True, out=Tensor((5, 8, 128), t.bfloat16), softmax_lse=Tensor((8, 5), t.float32))
    kw.update(change)
    return gqa(t, **kw)


def strided(t):
    """q with padded rows; K and V in head-major pages (vLLM's HND layout), not contiguous."""
    hnd = (16 * 2 * 128, 128, 16 * 128, 1)
    return gqa(t, q=Tensor((5, 8, 128), t.float16, stride=(8 * 136, 136, 1)),
               k_cache=Tensor((12, 16, 2, 128), t.float16, stride=hnd),
               v_cache=Tensor((12, 16, 2, 128), t.float16, stride=hnd), return_softmax_lse=True, causal=False,
               softmax_scale=0.07, num_splits=dcpattn.SPLITS_PER_SEQUENCE)


def mla(t, view=False, same=False):
    k = Tensor((4, 64, 1, 576), t.bfloat16)
    v = Tensor((4, 64, 1, 512), t.bfloat16, ptr=k.data_ptr(), stride=k.stride()) if view else k if same else None
    return gqa(t, q=Tensor((5, 16, 576), t.bfloat16), k_cache=k, v_cache=v, block_table=Tensor((3, 4), t.int32),
               max_seqlen_k=200, return_softmax_lse=True)


def fp8(t, per_head=False, dtype="float8_e4m3fn", kv_cache_dtype="auto"):
    dt = getattr(t, dtype)
    shape = (2,) if per_head else ()
    return gqa(t, k_cache=Tensor((12, 16, 2, 128), dt), v_cache=Tensor((12, 16, 2, 128), dt),
               kv_cache_dtype=kv_cache_dtype, k_scale=Tensor(shape, t.float32), v_scale=Tensor(shape, t.float32))


CALLS = {
    "gqa, out allocated": gqa,
    "decode, every output given": decode,
    "lse allocated, V is K": lambda t: (lambda kw: dict(kw, v_cache=kw["k_cache"]))(gqa(t, return_softmax_lse=True)),
    "strided fp16 non-causal": strided,
    "mla, v None": mla,
    "mla, v is k": lambda t: mla(t, same=True),
    "mla, v a view of k": lambda t: mla(t, view=True),
    "fp8 per tensor": fp8,
    "fp8 per head as uint8": lambda t: fp8(t, True, "uint8", "fp8_e4m3"),
    "explicit stream": lambda t: decode(t, stream=0x1234),
}


def renew(kw):
    """The same call over new tensors: same shapes, strides, dtypes and devices, other data
    (V is still K, and MLA's view of K still a view of the new K)."""
    new, seen = {}, {}
    for name, x in kw.items():
        if not isinstance(x, Tensor):
            new[name] = x
        elif id(x) in seen:
            new[name] = seen[id(x)]
        elif name == "v_cache" and x.data_ptr() == kw["k_cache"].data_ptr():
            new[name] = Tensor(x.shape, x.dtype, ptr=new["k_cache"].data_ptr(), stride=x.stride())
        else:
            new[name] = seen[id(x)] = Tensor(x.shape, x.dtype, stride=x.stride(), dev=x.get_device())
    return new


def block_of(res, block):
    """A launched block with the out and lse pointers of the arrays the call returned: they are
    allocated anew by each call that is not given them."""
    out, lse = res if isinstance(res, tuple) else (res, None)
    b = list(block)
    b[OUT] = out.data_ptr()
    if lse is not None:
        b[LSE] = lse.data_ptr()
    return tuple(b)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_steady_state_launches_what_the_general_path_packs(env, name):
    kw = CALLS[name](env.t)
    first = dcpattn.flash_attn_varlen_func(**kw)
    assert len(env.general) == 1 and len(_attention.calls) == 1
    assert block_of(first, env.rec.launches[-1][1]) == env.rec.launches[-1][1]
    kw = renew(kw)
    res = dcpattn.flash_attn_varlen_func(**kw)
    assert len(env.general) == 1, "the second call of a signature took the general path"
    handle, fast, stream = env.rec.launches[-1]
    assert block_of(res, fast) == fast and stream == kw.get("stream", faketorch.STREAM)
    _attention.calls.clear()
    res = dcpattn.flash_attn_varlen_func(**kw)
    assert len(env.general) == 2
    assert env.rec.launches[-1][0] == handle and block_of(res, fast) == env.rec.launches[-1][1]
    assert len(env.made) == 1


@pytest.mark.parametrize("change, message", [
    (lambda t: dict(k_cache=Tensor((12, 16, 2, 128), t.bfloat16, dev=1)), "arrays on different devices: .*k_cache on "
                                                                          "cuda:1"),
    (lambda t: dict(q=Tensor((5, 8, 128), t.bfloat16, dev=-1)), "q is on"),
    (lambda t: dict(out=Tensor((5, 8, 128), t.float16)), r"out must be bfloat16 \[5, 8, 128\]"),
    (lambda t: dict(out=Tensor((5, 8, 64), t.bfloat16)), r"out must be bfloat16 \[5, 8, 128\]"),
    (lambda t: dict(softmax_lse=Tensor((5, 8), t.float32)), r"softmax_lse must be float32 \[8, 5\]"),
    (lambda t: dict(block_table=Tensor((3, 4), t.int64)), "block_table dtype is int64"),
    (lambda t: dict(seqused_k=Tensor((2,), t.int32)), "seqused_k has 2 rows, the batch needs 3"),
    (lambda t: dict(cp_tot_seqused_k=None), "cp_tot_seqused_k .* is required when cp_world_size = 4"),
    (lambda t: dict(q=Tensor((5, 8, 128), t.bfloat16, stride=(1024, 1, 8))), "q: the last dimension must be "
                                                                             "contiguous"),
    (lambda t: dict(max_seqlen_k=None), "missing argument: max_seqlen_k"),
    (lambda t: dict(kv_cache_dtype="fp8_e5m2"), "kv_cache_dtype = 'fp8_e5m2' is not supported"),
    (lambda t: dict(k_descale=1.0, kv_cache_dtype="fp8", k_cache=Tensor((12, 16, 2, 128), t.uint8),
                    v_cache=Tensor((12, 16, 2, 128), t.uint8), k_scale=Tensor((1,), t.float32),
                    v_scale=Tensor((1,), t.float32)), "k_descale is FlashAttention-3's FP8 descale"),
])
def test_checks_hold_after_warm_up(env, change, message):
    kw = decode(env.t)
    dcpattn.flash_attn_varlen_func(**kw)
    dcpattn.flash_attn_varlen_func(**renew(kw))
    assert len(env.general) == 1
    launched = len(env.rec.launches)
    kw.update(change(env.t))
    with pytest.raises(ArgumentError, match=message):
        dcpattn.flash_attn_varlen_func(**kw)
    assert len(env.rec.launches) == launched


def test_fp8_checks_hold_after_warm_up(env):
    kw = fp8(env.t, per_head=True)
    dcpattn.flash_attn_varlen_func(**kw)
    for change, message in ((dict(k_scale=None), "k_scale is required with an FP8 KV cache"),
                            (dict(v_scale=Tensor((2,), env.t.float16)), r"v_scale dtype is float16 \(float32"),
                            (dict(k_scale=Tensor((2,), env.t.float32, dev=1)), "k_scale on cuda:1"),
                            (dict(v_scale=Tensor((1,), env.t.float32)), "k_scale is per KV head and v_scale per "
                                                                        "tensor")):
        with pytest.raises(ArgumentError, match=message):
            dcpattn.flash_attn_varlen_func(**dict(kw, **change))


def test_mla_view_of_another_cache_is_rejected_after_warm_up(env):
    kw = mla(env.t, view=True)
    dcpattn.flash_attn_varlen_func(**kw)
    other = Tensor((4, 64, 1, 512), env.t.bfloat16, stride=kw["k_cache"].stride())
    with pytest.raises(ArgumentError, match="MLA .* v_cache must be None, k_cache or k_cache"):
        dcpattn.flash_attn_varlen_func(**dict(kw, v_cache=other))


def test_max_seqlen_k_picks_the_plan_the_general_path_picks(env):
    """A signature's entry serves the max_seqlen_k values of its plan's bound; another value
    takes the general path, which finds (or makes) the plan of its own bound."""
    kw = decode(env.t, block_table=Tensor((3, 200), env.t.int32))
    bounds = []
    for mk, general in ((1500, 1), (1536, 1), (1281, 1), (1537, 2), (1792, 2), (1500, 3)):
        dcpattn.flash_attn_varlen_func(**dict(kw, max_seqlen_k=mk))
        assert len(env.general) == general, mk
        bounds.append(env.made[env.rec.launches[-1][0] - 1].desc["max_seqlen_k"])
    assert bounds == [1536, 1536, 1536, 1792, 1792, 1536] and len(env.made) == 2


def test_bound_ranges():
    for cap in (7, 16, 100, 1000, 4096, 100000):
        for n in (0, 1, 5, 8, 9, 15, 16, 17, 99, 100, 101, 640, 999, 1000, 5000, 65537):
            mk = _attention._bound(n, cap)
            lo, hi = _attention.bound_range(mk, cap)
            assert (lo is None or lo <= max(n, 0)) and (hi is None or n <= hi), (cap, n, lo, hi)
            if lo is not None:
                assert _attention._bound(lo, cap) == mk and _attention._bound(lo - 1, cap) < mk
            if hi is not None:
                assert _attention._bound(hi + 1, cap) > mk
            else:
                assert mk == cap or _attention._bound(10 ** 9, cap) == mk


def test_other_arrays_take_the_general_path(env):
    """A call with any array that is not a PyTorch tensor has no signature: it is checked
    in full each time."""
    kw = decode(env.t, out=DL((5, 8, 128)))
    for _ in range(3):
        dcpattn.flash_attn_varlen_func(**kw)
    assert len(env.general) == 3 and not _attention.calls
