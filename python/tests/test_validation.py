"""CPU: bad arguments are exceptions that name the argument and its value, raised before
anything is launched: the package's own checks (ArgumentError) and, through the library,
the C API's host checks (DcpattnError with the status and dcpattn_last_error()'s detail).
Every array here is a fake over made-up pointers: no test reaches a launch (those that get
through every check run in a subprocess without a CUDA driver)."""

import os
import subprocess
import sys

import pytest

import dcpattn
from conftest import PYTHON_DIR
from dcpattn import ArgumentError, DcpattnError
from fakes import DL, attention_inputs


def attn(**change):
    kw = attention_inputs()
    kw.update(change)
    return dcpattn.flash_attn_varlen_func(**kw)


def library():
    try:
        return dcpattn.library_path()
    except dcpattn.LibraryNotFoundError:
        pytest.skip("libdcpattn.so is not built (make build/libdcpattn.so)")


@pytest.mark.parametrize("change, message", [
    (dict(q=DL((6, 8))), r"q must be \[total_q, num_heads, head_dim\], got shape \(6, 8\)"),
    (dict(q=DL((6, 8, 128), "float32")), "q dtype is float32 \\(bfloat16 or float16 expected\\)"),
    (dict(k_cache=DL((12, 16, 2, 64))), r"k_cache must be \[num_pages, page_size, num_kv_heads, 128\]"),
    (dict(k_cache=DL((12, 16, 2, 128), "float16")), "k_cache dtype is float16, q's is bfloat16"),
    (dict(v_cache=DL((12, 8, 2, 128))), r"v_cache must be .* first three dimensions \(12, 16, 2\)"),
    (dict(cu_seqlens_q=DL((3,), "int64")), r"cu_seqlens_q dtype is int64 \(int32 expected\)"),
    (dict(seqused_k=DL((1,), "int32")), "seqused_k has 1 rows, the batch needs 2"),
    (dict(block_table=DL((8,), "int32")), r"block_table must have 2 dimensions, got shape \(8,\)"),
    (dict(block_table=DL((2, 4), "int32", strides=(8, 2))), "block_table must be contiguous in its last dimension"),
    (dict(cp_world_size=2), "cp_tot_seqused_k .* is required when cp_world_size = 2"),
    (dict(out=DL((6, 8, 64))), r"out must be bfloat16 \[6, 8, 128\] .* got bfloat16 \(6, 8, 64\)"),
    (dict(out=DL((6, 8, 128), "float16")), r"out must be bfloat16 \[6, 8, 128\]"),
    (dict(return_softmax_lse=True, softmax_lse=DL((6, 8), "float32")),
     r"softmax_lse must be float32 \[8, 6\] \(num_heads, total_q\)"),
    (dict(k_cache=DL((12, 16, 2, 128), device=(2, 1))), "arrays on different devices: .*k_cache on cuda:1"),
    (dict(q=DL((6, 8, 128), device=(1, 0))), r"q is on DLPack device type 1 \(CPU\)"),
    (dict(q=DL((6, 8, 128), strides=(2048, 256, 2))), "q: the last dimension must be contiguous"),
    (dict(q=DL((6, 8, 128), strides=(0, 128, 1))), r"q: stride 0 in strides \(0, 128, 1\) .*broadcast"),
    (dict(seqused_k=None, block_table=None), "missing arguments: seqused_k, block_table"),
    (dict(alibi_slopes=DL((8,), "float32")), "alibi_slopes = .* is not supported \\(no ALiBi\\)"),
    (dict(softcap=30.0), "softcap = 30.0 is not supported"),
    (dict(window_size=(128, 0)), "window_size = \\(128, 0\\) is not supported"),
    (dict(cu_seqlens_k=DL((3,), "int32")), "cu_seqlens_k = .* is not supported .*block_table"),
    (dict(k=DL((12, 16, 2, 128))), "give the cache as k_cache/v_cache or as k/v, not both"),
])
def test_flash_attn_varlen_func_checks(change, message):
    with pytest.raises(ArgumentError, match=message) as e:
        attn(**change)
    assert isinstance(e.value, ValueError) and e.value.name == "INVALID_ARGUMENT"
    assert str(e.value).startswith("flash_attn_varlen_func: invalid argument (DCPATTN_STATUS_INVALID_ARGUMENT): ")


def fp8_attn(**change):
    kw = dict(k_cache=DL((12, 16, 2, 128), "float8_e4m3fn"), v_cache=DL((12, 16, 2, 128), "float8_e4m3fn"),
              k_scale=DL((1,), "float32"), v_scale=DL((1,), "float32"), out=DL((6, 8, 128)))
    kw.update(change)
    return attn(**kw)


@pytest.mark.parametrize("change, message", [
    (dict(kv_cache_dtype="fp8_e5m2"), r"kv_cache_dtype = 'fp8_e5m2' is not supported \('auto', 'fp8' or 'fp8_e4m3'\)"),
    (dict(kv_cache_dtype="fp8", k_cache=DL((12, 16, 2, 128)), v_cache=DL((12, 16, 2, 128))),
     r"k_cache dtype is bfloat16 with kv_cache_dtype = 'fp8' \(float8_e4m3fn, or uint8 holding e4m3 bytes"),
    (dict(k_cache=DL((12, 16, 2, 128), "uint8"), v_cache=DL((12, 16, 2, 128), "uint8")),
     r"k_cache dtype is uint8, q's is bfloat16 \(an e4m3 cache: float8_e4m3fn, or uint8 with kv_cache_dtype"),
    (dict(v_cache=DL((12, 16, 2, 128), "uint8")), "v_cache dtype is uint8, k_cache's is float8_e4m3fn"),
    (dict(k_scale=None), r"k_scale is required with an FP8 KV cache: a device float32 array of shape \[1\] or "
                         r"\[num_kv_heads\] = \[2\]"),
    (dict(v_scale=0.5), r"v_scale = 0.5: the kernel reads the scale on the device \(a captured graph replays"),
    (dict(k_scale=DL((1,), "float16")), r"k_scale dtype is float16 \(float32 expected\)"),
    (dict(k_scale=DL((3,), "float32")), r"k_scale must be \[\], \[1\] or \[num_kv_heads\] = \[2\], got shape \(3,\)"),
    (dict(k_scale=DL((2, 1), "float32")), r"k_scale must be .* got shape \(2, 1\)"),
    (dict(k_scale=DL((2,), "float32", strides=(2,)), v_scale=DL((2,), "float32")),
     r"k_scale must be contiguous \(strides \(2,\)\)"),
    (dict(v_scale=DL((2,), "float32")), "k_scale is per tensor and v_scale per KV head: give both one scale or both"),
    (dict(k_scale=DL((1,), "float32", device=(1, 0))), r"k_scale is on DLPack device type 1 \(CPU\)"),
    (dict(v_scale=DL((1,), "float32", device=(2, 1))), "arrays on different devices: .*v_scale on cuda:1"),
    (dict(k_descale=DL((2, 2), "float32")), "k_descale is FlashAttention-3's FP8 descale, which dcpattn does not take"),
    (dict(q=DL((6, 16, 576)), k_cache=DL((4, 64, 1, 576), "float8_e4m3fn"), v_cache=None, out=DL((6, 16, 512)),
          k_scale=None), "k_scale is required with an FP8 KV cache"),
    (dict(q=DL((6, 16, 576)), k_cache=DL((4, 64, 1, 576), "uint8"), v_cache=None, out=DL((6, 16, 512)),
          kv_cache_dtype="fp8_e4m3", k_scale=DL((2,), "float32")),
     r"k_scale must be \[\], \[1\] or \[num_kv_heads\] = \[1\], got shape \(2,\)"),
])
def test_fp8_checks(change, message):
    with pytest.raises(ArgumentError, match=message):
        fp8_attn(**change)


def test_fp8_c_checks_through_the_library():
    """The FP8 cache's strides are multiples of 16 elements (16-byte rows of e4m3)."""
    library()
    k = DL((12, 16, 2, 128), "uint8", strides=(16 * 2 * 136, 2 * 136, 136, 1))
    with pytest.raises(DcpattnError, match="k_stride_h = 136 .*multiple of 16 elements") as e:
        fp8_attn(k_cache=k, v_cache=DL((12, 16, 2, 128), "uint8"), kv_cache_dtype="fp8")
    assert e.value.name == "MISALIGNED"


def test_scales_are_ignored_with_a_16_bit_cache():
    """vLLM passes k_scale and v_scale whatever the cache: a 16-bit cache reads neither."""
    library()
    with pytest.raises(DcpattnError, match="head_dim = 100") as e:  # the C checks are reached
        attn(q=DL((6, 8, 100)), k_cache=DL((12, 16, 2, 100)), v_cache=DL((12, 16, 2, 100)), out=DL((6, 8, 100)),
             k_scale=1.0, v_scale="anything")
    assert e.value.name == "UNSUPPORTED"


def test_mla_reads_v_from_k():
    k = DL((4, 64, 1, 576))
    with pytest.raises(ArgumentError, match="MLA .* v_cache must be None, k_cache or k_cache"):
        attn(q=DL((6, 16, 576)), k_cache=k, v_cache=DL((4, 64, 1, 512)))


@pytest.mark.parametrize("change, status, detail", [
    (dict(q=DL((6, 8, 100)), k_cache=DL((12, 16, 2, 100)), v_cache=DL((12, 16, 2, 100)), out=DL((6, 8, 100))),
     "UNSUPPORTED", "head_dim = 100"),
    (dict(cp_world_size=2, cp_rank=2, cp_tot_seqused_k=DL((2,), "int32")), "INVALID_ARGUMENT", "dcp_rank = 2"),
    (dict(num_splits=100), "INVALID_ARGUMENT", "num_splits = 100"),
    (dict(q=DL((6, 8, 128), strides=(8 * 130, 130, 1))), "MISALIGNED", "q_stride_h = 130"),
    (dict(q=DL((6, 16, 576)), k_cache=DL((4, 64, 2, 576)), v_cache=None, out=DL((6, 16, 512))), "UNSUPPORTED",
     "MLA (head_dim 576/512) needs num_kv_heads = 1"),
])
def test_c_checks_through_the_library(change, status, detail):
    library()
    change.setdefault("out", DL((6, 8, 128)))
    with pytest.raises(DcpattnError) as e:
        attn(**change)
    assert e.value.name == status and e.value.status == dcpattn._lib.STATUS[status]
    assert detail in e.value.detail and detail in str(e.value)
    assert e.value.status_string == dcpattn._lib.get().dcpattn_status_string(e.value.status).decode()
    assert e.value.call in ("dcpattn_attn_desc_validate", "dcpattn_attn_args_validate")


def test_merge_checks():
    o = [DL((4, 8, 64)), DL((4, 8, 64))]
    lse = [DL((4, 8), "float32"), DL((4, 8), "float32")]
    with pytest.raises(ArgumentError, match=r"outs\[1\] is bfloat16 \(4, 8, 64\) with strides \(1024, 64, 1\), "
                                            r"outs\[0\]"):
        dcpattn.merge_states([o[0], DL((4, 8, 64), strides=(1024, 64, 1))], lse)
    with pytest.raises(ArgumentError, match=r"lses must be float32 \[4, 8\]"):
        dcpattn.merge_states(o, [DL((8, 4), "float32")] * 2)
    with pytest.raises(ArgumentError, match="2 outs and 3 lses"):
        dcpattn.merge_states(o, lse + [DL((4, 8), "float32")])
    with pytest.raises(ArgumentError, match="outs is empty"):
        dcpattn.merge_states([], [])
    with pytest.raises(ArgumentError, match=r"prefix_lse and suffix_lse must be float32 \[8, 4\]"):
        dcpattn.merge_attn_states(DL((4, 8, 64)), o[0], lse[0], o[1], lse[1])
    with pytest.raises(ArgumentError, match=r"output must be \[4, 8, 64\]"):
        dcpattn.merge_attn_states(DL((4, 8, 32)), o[0], DL((8, 4), "float32"), o[1], DL((8, 4), "float32"))
    with pytest.raises(ArgumentError, match="out= is required: dcpattn allocates arrays only through PyTorch"):
        dcpattn.merge_states(o, lse)


def test_merge_c_checks_through_the_library():
    library()
    o = [DL((4, 8, 20)), DL((4, 8, 20))]
    lse = [DL((4, 8), "float32"), DL((4, 8), "float32")]
    with pytest.raises(DcpattnError, match="head_dim = 20 is not a multiple of 16 bytes") as e:
        dcpattn.merge_states(o, lse, out=DL((4, 8, 20)))
    assert e.value.name == "UNSUPPORTED"


def test_combine_checks():
    o, lse = DL((4, 6, 64)), DL((4, 6), "float32")
    with pytest.raises(ArgumentError, match="H = 6 heads over world_size = 4 ranks"):
        dcpattn.dcp_combine(o, lse, 1234, world_size=4, rank=0)
    with pytest.raises(ArgumentError, match="comm .* is required with world_size = 2"):
        dcpattn.dcp_combine(o, lse, None, world_size=2, rank=0)
    with pytest.raises(ArgumentError, match=r"world_size = 0 \(1\.\.64\)"):
        dcpattn.dcp_combine(o, lse, 1234, world_size=0, rank=0)
    with pytest.raises(ArgumentError, match=r"world_size = 65 \(1\.\.64\)"):
        dcpattn.dcp_combine(DL((4, 65, 64)), DL((4, 65), "float32"), 1234, world_size=65, rank=0)
    with pytest.raises(ArgumentError, match="transport = 'nvls'"):
        dcpattn.dcp_combine(o, lse, transport="nvls")
    with pytest.raises(ArgumentError, match=r"out must be \[4, 3, 64\]"):
        dcpattn.dcp_combine(o, lse, 1234, world_size=2, rank=1, out=DL((4, 6, 64)))
    with pytest.raises(ArgumentError, match=r"lse must be float32 \[4, 6\]"):
        dcpattn.dcp_combine(o, DL((6, 4), "float32"))
    with pytest.raises(ArgumentError, match="comm: 'x' is not an ncclComm_t"):
        dcpattn.dcp_combine(o, lse, "x", out=DL((4, 6, 64)))


def test_combine_c_checks_through_the_library():
    library()
    with pytest.raises(DcpattnError, match="head_dim = 12 is not a multiple of 16 bytes") as e:
        dcpattn.dcp_combine(DL((4, 2, 12)), DL((4, 2), "float32"), 1234, world_size=2, rank=0,
                            out=DL((4, 1, 12)))
    assert e.value.name == "UNSUPPORTED" and e.value.call == "dcpattn_dcp_combine_workspace_size"


_THROUGH = r'''
import dcpattn, fakes
from fakes import DL
def expect_no_driver(what, f, *a, **kw):
    try:
        f(*a, **kw)
    except dcpattn.DcpattnError as e:
        assert e.name == "NO_DRIVER" and not isinstance(e, dcpattn.ArgumentError), (what, e)
        print(what, "ok:", e)
        return
    raise AssertionError(what + ": no error")
kw = fakes.attention_inputs()
kw.update(out=DL((6, 8, 128)), return_softmax_lse=True, softmax_lse=DL((8, 6), "float32"), cp_world_size=2,
          cp_rank=1, cp_tot_seqused_k=DL((2,), "int32"), cp_kv_cache_interleave_size=16,
          window_size=(-1, -1), q_descale=DL((2, 2), "float32"), scheduler_metadata=DL((4,), "int32"), fa_version=3)
expect_no_driver("gqa", dcpattn.flash_attn_varlen_func, **kw)
k = DL((4, 64, 1, 576))
for scales in ((DL((1,), "float32"), DL((), "float32")), (DL((2,), "float32"), DL((2,), "float32"))):
    kw8 = fakes.attention_inputs(k_cache=DL((12, 16, 2, 128), "uint8"), v_cache=DL((12, 16, 2, 128), "uint8"))
    expect_no_driver("fp8", dcpattn.flash_attn_varlen_func, **kw8, kv_cache_dtype="fp8", k_scale=scales[0],
                     v_scale=scales[1], out=DL((6, 8, 128)))
hm = (16 * 2 * 128, 128, 16 * 128, 1)  # head-major pages: [num_pages, num_kv_heads, page_size, head_dim] memory
kw8 = fakes.attention_inputs(k_cache=DL((12, 16, 2, 128), "uint8", strides=hm),
                             v_cache=DL((12, 16, 2, 128), "uint8", strides=hm))
expect_no_driver("fp8 head-major", dcpattn.flash_attn_varlen_func, **kw8, kv_cache_dtype="fp8",
                 k_scale=DL((1,), "float32"), v_scale=DL((1,), "float32"), out=DL((6, 8, 128)))
expect_no_driver("mla", dcpattn.flash_attn_varlen_func, DL((6, 16, 576)), k, None, DL((3,), "int32"),
                 DL((2,), "int32"), DL((2, 4), "int32"), 3, 200, out=DL((6, 16, 512)),
                 num_splits=dcpattn.SPLITS_BALANCED)
o = [DL((4, 8, 64)), DL((4, 8, 64))]
expect_no_driver("merge_states", dcpattn.merge_states, o, [DL((4, 8), "float32")] * 2, out=DL((4, 8, 64)))
expect_no_driver("merge_states stacked", dcpattn.merge_states, DL((3, 4, 8, 64), "float16"),
                 DL((3, 4, 8), "float32"), out=DL((4, 8, 64), "float32"), out_lse=DL((4, 8), "float32"))
expect_no_driver("merge_attn_states", dcpattn.merge_attn_states, DL((4, 8, 64)), o[0], DL((8, 4), "float32"), o[1],
                 DL((8, 4), "float32"), DL((8, 4), "float32"))
for transport in ("a2a", "ag_rs"):
    for layout, heads in (("scatter", 4), ("replicate", 8)):
        expect_no_driver("combine " + transport + " " + layout, dcpattn.dcp_combine, DL((4, 8, 64)),
                         DL((4, 8), "float32"), 0x1234, world_size=2, rank=1, transport=transport, layout=layout,
                         out=DL((4, heads, 64)), out_lse=DL((4, heads), "float32"))
'''


def test_valid_arguments_pass_every_host_check():
    """With no CUDA driver to be had, valid calls fail only where the device is needed."""
    library()
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.path.dirname(__file__),
               DCPATTN_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    r = subprocess.run([sys.executable, "-c", _THROUGH], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(" ok: ") == 12


def test_cai_arrays_take_their_device_from_the_driver(monkeypatch):
    """__cuda_array_interface__ has no device: it comes from the pointer (here a stand-in
    for cuPointerGetAttribute), and a mismatch is reported before any device work."""
    from dcpattn import _cuda
    from fakes import CAI

    kw = attention_inputs(make=CAI, dtype="float16")
    k_ptr = kw["k_cache"].ptr
    monkeypatch.setattr(_cuda, "pointer_device", lambda ptr, name: 1 if ptr == k_ptr else 0)
    with pytest.raises(ArgumentError, match=r"arrays on different devices: q, v_cache, cu_seqlens_q, seqused_k, "
                                            r"block_table, out on cuda:0; k_cache on cuda:1"):
        dcpattn.flash_attn_varlen_func(**kw, out=CAI((6, 8, 128), "float16"), stream=0)


def test_vllm_keyword_names():
    """Every keyword of vLLM's flash_attn_varlen_func (vllm_flash_attn, FlashAttention-3)
    is accepted by name."""
    import inspect

    vllm = ("q k v max_seqlen_q cu_seqlens_q max_seqlen_k cu_seqlens_k seqused_k q_v dropout_p softmax_scale causal "
            "window_size softcap alibi_slopes deterministic return_attn_probs block_table return_softmax_lse out "
            "scheduler_metadata q_descale k_descale v_descale num_splits fa_version s_aux cp_world_size cp_rank "
            "cp_tot_seqused_k").split()
    params = inspect.signature(dcpattn.flash_attn_varlen_func).parameters
    assert [n for n in vllm if n not in params] == []


def test_plan_bounds_take_few_values():
    """Lengths and batch sizes that change every step map to a few descriptor bounds: n
    itself up to 8, then at most 25 % above n, four values per power of two."""
    from dcpattn._attention import bucket

    seen = set()
    for n in range(0, 1 << 17):
        b = bucket(n)
        assert b >= max(n, 1) and (n <= 8 and b == max(n, 1) or b <= n * 1.25), (n, b)
        seen.add(b)
    assert len(seen) <= 8 + 4 * 14


def test_comm_handles():
    import ctypes

    from dcpattn._combine import comm_handle

    assert comm_handle(None) == 0 and comm_handle(0x1234) == 0x1234
    assert comm_handle(ctypes.c_void_p(0x5678)) == 0x5678 and comm_handle(ctypes.c_void_p()) == 0
