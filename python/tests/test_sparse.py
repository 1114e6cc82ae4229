"""CPU: flash_mla_sparse_decode. Its descriptor and argument block hold what
tests/test_gpu_sparse.c gives the C API for the same arrays; bad arguments are exceptions
naming the argument and its value, raised before anything is launched; the steady-state path
(PyTorch tensors, faketorch here) launches the block the general path packs. Plans and
launches come from offline.py; the library's host checks run."""

import os
import subprocess
import sys
import types

import pytest

import dcpattn
import faketorch
from conftest import PYTHON_DIR
from dcpattn import ArgumentError, DcpattnError, _attention, _lib, _sparse
from faketorch import Tensor
from fakes import DL
from offline import Recorder, offline

FIELDS = [f for f, _ in _lib.AttnArgs._fields_]


@pytest.fixture
def lib():
    try:
        return dcpattn.library_path()
    except dcpattn.LibraryNotFoundError:
        pytest.skip("libdcpattn.so is not built (make build/libdcpattn.so)")


@pytest.fixture
def rec(lib):
    r = Recorder()
    with offline(r) as made:
        r.made = made
        yield r


def sparse_inputs(make=DL, dtype="bfloat16", total_q=6, hq=16, pages=10, page=64, batch=2, max_pages=4, topk=64,
                  fp8=False, **change):
    """Well-formed flash_mla_sparse_decode arguments (keyword arguments) of fake arrays."""
    row = 656 if fp8 else 576
    kw = dict(q=make((total_q, hq, 576), dtype), kv_cache=make((pages, page, row), "uint8" if fp8 else dtype),
              block_table=make((batch, max_pages), "int32"), cu_seqlens_q=make((batch + 1,), "int32"),
              seqused_k=make((batch,), "int32"), topk_indices=make((total_q, topk), "int32"), max_seqlen_q=3,
              max_seqlen_k=200, out=make((total_q, hq, 512), dtype))
    if fp8:
        kw["kv_cache_dtype"] = "fp8_ds_mla"
    kw.update(change)
    return kw


def launched(rec):
    return dict(zip(FIELDS, rec.launches[-1][1]))


def test_bf16_block_and_descriptor_are_the_c_tests(rec):
    """W = 1, a 3-D bf16 cache, lists of exactly topk: the C test's case 1 (its zero strides
    are these, the C API's defaults for contiguous arrays)."""
    kw = sparse_inputs()
    out = dcpattn.flash_mla_sparse_decode(**kw)
    assert out is kw["out"]
    p = lambda name: kw[name].ptr  # noqa: E731
    assert launched(rec) == dict(
        batch=2, q=p("q"), q_stride_t=16 * 576, q_stride_h=576, k_cache=p("kv_cache"), k_stride_page=64 * 576,
        k_stride_t=576, k_stride_h=0, v_cache=p("kv_cache"), v_stride_page=0, v_stride_t=0, v_stride_h=0,
        num_pages=10, block_table=p("block_table"), block_table_stride=4, cu_seqlens_q=p("cu_seqlens_q"),
        seqused_k=p("seqused_k"), seqused_k_global=0, out=p("out"), out_stride_t=16 * 512, out_stride_h=512, lse=0,
        lse_stride_t=0, lse_stride_h=0, k_scale=0, v_scale=0, topk_ids=p("topk_indices"), topk_ids_stride=64,
        topk_count=0, sinks=0)
    assert rec.made[0].desc == dict(
        dtype=_lib.BF16, num_q_heads=16, num_kv_heads=1, head_dim=576, head_dim_v=512, page_size=64, non_causal=0,
        softmax_scale=0.0, dcp_world=1, dcp_rank=0, dcp_interleave=1, lse_base2=0, max_batch=2, max_q_len=3,
        max_total_q=6, max_seqlen_k=224, num_splits=0, num_sms=0, kv_dtype=0, kv_scale_per_head=0, sparse_topk=64)


def test_fp8_ds_mla_dcp_block_and_descriptor(rec):
    """A rank of a DCP group (W 3, rank 1, I 64) over DeepSeek's 656-byte rows in vLLM's 4-D
    layout, id rows padded to 80, counts, sinks, lse given: every sparse field of the block."""
    ids_buf = DL((6, 80), "int32")
    kw = sparse_inputs(fp8=True, hq=128, kv_cache=DL((10, 64, 1, 656), "uint8"),
                       topk_indices=DL((6, 64), "int32", ptr=ids_buf.ptr, strides=(80, 1)),
                       topk_count=DL((6,), "int32"), sinks=DL((128,), "float32"), out=DL((6, 128, 512)),
                       return_softmax_lse=True, softmax_lse=DL((128, 6), "float32"), cp_world_size=3, cp_rank=1,
                       cp_kv_cache_interleave_size=64, cp_tot_seqused_k=DL((2,), "int32"), softmax_scale=0.1)
    out, lse = dcpattn.flash_mla_sparse_decode(**kw)
    assert out is kw["out"] and lse is kw["softmax_lse"]
    b = launched(rec)
    assert (b["k_cache"], b["k_stride_page"], b["k_stride_t"], b["k_stride_h"]) == (kw["kv_cache"].ptr, 64 * 656, 656,
                                                                                    0)
    assert (b["v_cache"], b["v_stride_page"], b["v_stride_t"], b["v_stride_h"]) == (kw["kv_cache"].ptr, 0, 0, 0)
    assert (b["topk_ids"], b["topk_ids_stride"], b["topk_count"], b["sinks"]) == (
        ids_buf.ptr, 80, kw["topk_count"].ptr, kw["sinks"].ptr)
    assert (b["seqused_k_global"], b["lse"], b["lse_stride_t"], b["lse_stride_h"]) == (
        kw["cp_tot_seqused_k"].ptr, kw["softmax_lse"].ptr, 1, 6)
    assert (b["out_stride_t"], b["out_stride_h"], b["k_scale"], b["v_scale"]) == (128 * 512, 512, 0, 0)
    d = rec.made[0].desc
    assert (d["kv_dtype"], d["sparse_topk"], d["num_q_heads"], d["dcp_world"], d["dcp_rank"], d["dcp_interleave"],
            d["num_splits"]) == (_lib.FP8_DS_MLA, 64, 128, 3, 1, 64, 0)
    assert abs(d["softmax_scale"] - 0.1) < 1e-7


def test_e4m3_block_and_descriptor(rec):
    """The e4m3 cache with per-tensor scales (float8_e4m3fn, and uint8 bytes named by
    kv_cache_dtype), fp16 queries: the C descriptor's kv_dtype and the scales in the block."""
    for cache, name in ((DL((10, 64, 576), "float8_e4m3fn"), "auto"), (DL((10, 64, 1, 576), "uint8"), "fp8_e4m3")):
        ks, vs = DL((1,), "float32"), DL((), "float32")
        kw = sparse_inputs(dtype="float16", kv_cache=cache, kv_cache_dtype=name, k_scale=ks, v_scale=vs)
        dcpattn.flash_mla_sparse_decode(**kw)
        b = launched(rec)
        assert (b["k_cache"], b["k_stride_page"], b["k_stride_t"], b["k_scale"], b["v_scale"]) == (
            cache.ptr, 64 * 576, 576, ks.ptr, vs.ptr)
        d = rec.made[-1].desc
        assert (d["dtype"], d["kv_dtype"], d["kv_scale_per_head"], d["sparse_topk"]) == (
            _lib.FP16, _lib.FP8_E4M3, 0, 64)


def test_plans_are_cached_by_descriptor(rec):
    """Calls of one descriptor share a plan; the top-k and the cache's type are in it."""
    for change in ({}, dict(max_seqlen_k=210), {}, dict(topk_indices=DL((6, 128), "int32")),
                   dict(fp8=True), dict(fp8=True)):
        dcpattn.flash_mla_sparse_decode(**sparse_inputs(**change))
    assert [r[0] for r in rec.launches] == [1, 1, 1, 2, 3, 3]
    # the dense call of the same shapes is another plan
    dcpattn.flash_attn_varlen_func(DL((6, 16, 576)), DL((10, 64, 1, 576)), None, DL((3,), "int32"), DL((2,), "int32"),
                                   DL((2, 4), "int32"), 3, 200, out=DL((6, 16, 512)))
    assert rec.launches[-1][0] == 4 and rec.made[3].desc["sparse_topk"] == 0


@pytest.mark.parametrize("change, message", [
    (dict(q=DL((6, 16, 512))), r"q must be \[total_q, num_heads, 576\], got shape \(6, 16, 512\)"),
    (dict(q=DL((6, 16, 576), "float32")), r"q dtype is float32 \(bfloat16 or float16 expected\)"),
    (dict(q=DL((6, 16, 576), device=(1, 0))), r"q is on DLPack device type 1 \(CPU\)"),
    (dict(q=DL((6, 16, 576), strides=(16 * 584, 584, 2))), "q: the last dimension must be contiguous"),
    (dict(kv_cache=DL((10, 64, 576), "float16")), "kv_cache dtype is float16, q's is bfloat16"),
    (dict(kv_cache=DL((10, 64, 656), "uint8")), r"kv_cache dtype is uint8, q's is bfloat16 \(an e4m3 cache: "
                                                r"float8_e4m3fn, or uint8 with kv_cache_dtype = 'fp8_e4m3'; DeepSeek's "
                                                r"FP8 cache: uint8 rows of 656 bytes with kv_cache_dtype = 'fp8_ds_mla'\)"),
    (dict(kv_cache=DL((10, 64, 512))), r"kv_cache must be \[num_pages, page_size, 576\] or \[num_pages, page_size, 1, "
                                       r"576\] with kv_cache_dtype = 'auto', got shape \(10, 64, 512\)"),
    (dict(kv_cache=DL((10, 64, 2, 576))), r"kv_cache must be .* got shape \(10, 64, 2, 576\)"),
    (dict(kv_cache=DL((10, 64, 576), strides=(64 * 577, 577, 2))), "kv_cache: the last dimension must be contiguous"),
    (dict(fp8=True, kv_cache=DL((10, 64, 576), "uint8")), r"kv_cache must be \[num_pages, page_size, 656\] or "
                                                          r"\[num_pages, page_size, 1, 656\] with kv_cache_dtype = "
                                                          r"'fp8_ds_mla', got shape \(10, 64, 576\)"),
    (dict(fp8=True, kv_cache=DL((10, 64, 656), "float8_e4m3fn")),
     r"kv_cache dtype is float8_e4m3fn with kv_cache_dtype = 'fp8_ds_mla' \(uint8 rows of 656 bytes expected\)"),
    (dict(fp8=True, dtype="float16"), r"q dtype is float16 with kv_cache_dtype = 'fp8_ds_mla' \(bfloat16 expected\)"),
    (dict(kv_cache_dtype="fp8_e5m2"), r"kv_cache_dtype = 'fp8_e5m2' is not supported \('auto', 'fp8', 'fp8_e4m3' or "
                                      r"'fp8_ds_mla'\)"),
    (dict(kv_cache_dtype="fp8_e4m3"), r"kv_cache dtype is bfloat16 with kv_cache_dtype = 'fp8_e4m3' \(float8_e4m3fn, "
                                      r"or uint8 holding e4m3 bytes, expected\)"),
    (dict(kv_cache=DL((10, 64, 576), "float8_e4m3fn")), r"k_scale is required with an FP8 KV cache"),
    (dict(kv_cache=DL((10, 64, 576), "float8_e4m3fn"), k_scale=DL((1,), "float32")),
     r"v_scale is required with an FP8 KV cache"),
    (dict(kv_cache=DL((10, 64, 576), "float8_e4m3fn"), k_scale=0.5, v_scale=DL((1,), "float32")),
     r"k_scale = 0.5: the kernel reads the scale on the device"),
    (dict(kv_cache=DL((10, 64, 576), "float8_e4m3fn"), k_scale=DL((2,), "float32"), v_scale=DL((1,), "float32")),
     r"k_scale must be \[\], \[1\] or \[num_kv_heads\] = \[1\], got shape \(2,\)"),
    (dict(topk_indices=DL((6, 64), "int64")), r"topk_indices dtype is int64 \(int32 expected\)"),
    (dict(topk_indices=DL((64,), "int32")), r"topk_indices must have 2 dimensions, got shape \(64,\)"),
    (dict(topk_indices=DL((5, 64), "int32")), "topk_indices has 5 rows, the batch needs 6"),
    (dict(topk_indices=DL((6, 4096), "int32")), r"topk_indices has topk = 4096 ids per token, shape \(6, 4096\) "
                                                r"\(1..2048\)"),
    (dict(topk_indices=DL((6, 0), "int32")), r"topk_indices has topk = 0 ids per token"),
    (dict(topk_indices=DL((6, 64), "int32", strides=(32, 1))), r"topk_indices row stride is 32, less than its topk = "
                                                               r"64 \(strides \(32, 1\)\)"),
    (dict(topk_indices=DL((6, 64), "int32", strides=(0, 1))), "topk_indices row stride is 0"),
    (dict(topk_indices=DL((6, 64), "int32", strides=(128, 2))), "topk_indices must be contiguous in its last "
                                                                "dimension"),
    (dict(topk_indices=DL((6, 64), "int32", device=(2, 1))), "arrays on different devices: .*topk_indices on cuda:1"),
    (dict(topk_count=DL((6,), "int64")), r"topk_count dtype is int64 \(int32 expected\)"),
    (dict(topk_count=DL((4,), "int32")), "topk_count has 4 rows, the batch needs 6"),
    (dict(topk_count=DL((6,), "int32", strides=(2,))), "topk_count must be contiguous"),
    (dict(sinks=DL((8,), "float32")), r"sinks must be a contiguous float32 \[num_heads\] = \[16\], got float32 \(8,\)"),
    (dict(sinks=DL((16,), "bfloat16")), r"sinks must be .* got bfloat16 \(16,\)"),
    (dict(sinks=DL((16,), "float32", strides=(2,))), r"sinks must be .* with strides \(2,\)"),
    (dict(sinks=DL((16,), "float32", device=(2, 1))), "arrays on different devices: .*sinks on cuda:1"),
    (dict(block_table=DL((2, 4), "int64")), r"block_table dtype is int64 \(int32 expected\)"),
    (dict(seqused_k=DL((1,), "int32")), "seqused_k has 1 rows, the batch needs 2"),
    (dict(cu_seqlens_q=DL((3,), "float32")), r"cu_seqlens_q dtype is float32"),
    (dict(cp_world_size=2), r"cp_tot_seqused_k \(every sequence's global length\) is required when cp_world_size = 2"),
    (dict(cp_world_size=2, cp_tot_seqused_k=DL((1,), "int32")), "cp_tot_seqused_k has 1 rows, the batch needs 2"),
    (dict(out=DL((6, 16, 576))), r"out must be bfloat16 \[6, 16, 512\] \(total_q, num_heads, head_dim_v\), got "
                                 r"bfloat16 \(6, 16, 576\)"),
    (dict(out=DL((6, 16, 512), "float16")), r"out must be bfloat16 \[6, 16, 512\]"),
    (dict(return_softmax_lse=True, softmax_lse=DL((6, 16), "float32")),
     r"softmax_lse must be float32 \[16, 6\] \(num_heads, total_q\), got float32 \(6, 16\)"),
    (dict(out=None), "out= is required: dcpattn allocates arrays only through PyTorch or CuPy"),
    (dict(max_seqlen_k=None), "missing argument: max_seqlen_k"),
])
def test_checks(rec, change, message):
    kw = sparse_inputs(**{k: change.pop(k) for k in ("fp8", "dtype") if k in change})
    kw.update(change)
    with pytest.raises(ArgumentError, match=message) as e:
        dcpattn.flash_mla_sparse_decode(**kw)
    assert str(e.value).startswith("flash_mla_sparse_decode: invalid argument (DCPATTN_STATUS_INVALID_ARGUMENT): ")
    assert not rec.launches and not rec.made


@pytest.mark.parametrize("change, status, detail", [
    (dict(q=DL((6, 256, 576)), out=DL((6, 256, 512))), "UNSUPPORTED", "num_q_heads <= 128"),
    (dict(kv_cache=DL((10, 48, 576))), "UNSUPPORTED", "MLA page_size = 48"),
    (dict(fp8=True, kv_cache=DL((10, 64, 656), "uint8", strides=(64 * 664, 664, 1))), "MISALIGNED",
     "k_stride_t = 664"),
    (dict(cp_world_size=3, cp_rank=3, cp_tot_seqused_k=DL((2,), "int32")), "INVALID_ARGUMENT", "dcp_rank = 3"),
    (dict(softmax_scale=-1.0), "INVALID_ARGUMENT", "softmax_scale = -1"),
    (dict(cp_kv_cache_interleave_size=-1), "INVALID_ARGUMENT", "dcp_interleave = -1"),
])
def test_c_checks_through_the_library(rec, change, status, detail):
    kw = sparse_inputs(**{k: change.pop(k) for k in ("fp8",) if k in change})
    kw.update(change)
    with pytest.raises(DcpattnError) as e:
        dcpattn.flash_mla_sparse_decode(**kw)
    assert e.value.name == status and detail in e.value.detail, e.value
    assert e.value.call in ("dcpattn_attn_desc_validate", "dcpattn_attn_args_validate")
    assert not rec.launches and not rec.made


# --- the steady-state path (faketorch) -------------------------------------------------

@pytest.fixture
def env(lib, monkeypatch):
    t, rec = faketorch.module(), Recorder()
    with offline(rec, torch=t) as made:
        general = []
        prepare = _sparse.prepare
        monkeypatch.setattr(_sparse, "prepare", lambda *a: general.append(1) or prepare(*a))
        yield types.SimpleNamespace(t=t, rec=rec, made=made, general=general)


def torch_inputs(t, fp8=False, **change):
    kw = dict(q=Tensor((6, 16, 576), t.bfloat16), kv_cache=Tensor((10, 64, 656 if fp8 else 576),
                                                                  t.uint8 if fp8 else t.bfloat16),
              block_table=Tensor((2, 4), t.int32), cu_seqlens_q=Tensor((3,), t.int32), seqused_k=Tensor((2,), t.int32),
              topk_indices=Tensor((6, 64), t.int32), max_seqlen_q=3, max_seqlen_k=200)
    if fp8:
        kw["kv_cache_dtype"] = "fp8_ds_mla"
    kw.update(change)
    return kw


def dcp(t):
    ids = Tensor((6, 96), t.int32)
    return torch_inputs(t, fp8=True, kv_cache=Tensor((10, 64, 1, 656), t.uint8),
                        topk_indices=Tensor((6, 64), t.int32, ptr=ids.data_ptr(), stride=(96, 1)),
                        topk_count=Tensor((6,), t.int32), sinks=Tensor((16,), t.float32), return_softmax_lse=True,
                        cp_world_size=4, cp_rank=3, cp_tot_seqused_k=Tensor((2,), t.int32),
                        cp_kv_cache_interleave_size=64, out=Tensor((6, 16, 512), t.bfloat16),
                        softmax_lse=Tensor((16, 6), t.float32))


CALLS = {
    "bf16, out allocated": lambda t: torch_inputs(t),
    "bf16, lse allocated, sinks": lambda t: torch_inputs(t, return_softmax_lse=True, sinks=Tensor((16,), t.float32)),
    "fp8_ds_mla dcp rank, everything given": dcp,
    "explicit stream": lambda t: torch_inputs(t, stream=0x1234),
    "e4m3 with its scales": lambda t: torch_inputs(t, kv_cache=Tensor((10, 64, 576), t.uint8), kv_cache_dtype="fp8",
                                                   k_scale=Tensor((1,), t.float32), v_scale=Tensor((), t.float32)),
}


def renew(kw):
    """The same call over new tensors of the same shapes, strides, dtypes and devices."""
    return {k: Tensor(x.shape, x.dtype, stride=x.stride(), dev=x.get_device()) if isinstance(x, Tensor) else x
            for k, x in kw.items()}


def with_outputs(res, block):
    """A launched block with the pointers of the outputs the call returned (allocated anew by
    each call that is not given them)."""
    out, lse = res if isinstance(res, tuple) else (res, None)
    b = list(block)
    b[FIELDS.index("out")] = out.data_ptr()
    if lse is not None:
        b[FIELDS.index("lse")] = lse.data_ptr()
    return tuple(b)


def pointers(kw, block):
    """The block with the call's input pointers where the general path puts them."""
    b = list(block)
    for arg, field in (("q", "q"), ("kv_cache", "k_cache"), ("kv_cache", "v_cache"), ("block_table", "block_table"),
                       ("cu_seqlens_q", "cu_seqlens_q"), ("seqused_k", "seqused_k"), ("topk_indices", "topk_ids"),
                       ("cp_tot_seqused_k", "seqused_k_global"), ("topk_count", "topk_count"), ("sinks", "sinks"),
                       ("k_scale", "k_scale"), ("v_scale", "v_scale")):
        if kw.get(arg) is not None:
            b[FIELDS.index(field)] = kw[arg].data_ptr()
    return tuple(b)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_steady_state_launches_what_the_general_path_packs(env, name):
    kw = CALLS[name](env.t)
    first = dcpattn.flash_mla_sparse_decode(**kw)
    assert len(env.general) == 1 and len(_sparse.calls) == 1
    general = env.rec.launches[-1][1]
    kw = renew(kw)
    res = dcpattn.flash_mla_sparse_decode(**kw)
    assert len(env.general) == 1, "the second call of a signature took the general path"
    handle, fast, stream = env.rec.launches[-1]
    assert fast == with_outputs(res, pointers(kw, general)) and fast != general
    assert stream == kw.get("stream", faketorch.STREAM)
    _sparse.calls.clear()
    again = dcpattn.flash_mla_sparse_decode(**kw)
    assert len(env.general) == 2 and env.rec.launches[-1][0] == handle
    assert env.rec.launches[-1][1] == with_outputs(again, fast) and len(env.made) == 1
    assert isinstance(first, tuple) == bool(kw.get("return_softmax_lse"))


@pytest.mark.parametrize("change, message", [
    (lambda t: dict(sinks=Tensor((8,), t.float32)), r"sinks must be a contiguous float32 \[num_heads\] = \[16\]"),
    (lambda t: dict(sinks=Tensor((16,), t.float32, dev=1)), "sinks on cuda:1"),
    (lambda t: dict(topk_count=Tensor((6,), t.int64)), "topk_count dtype is int64"),
    (lambda t: dict(topk_indices=Tensor((6, 4096), t.int32)), "topk_indices has topk = 4096"),
    (lambda t: dict(topk_indices=Tensor((6, 64), t.int32, stride=(32, 1))), "topk_indices row stride is 32"),
    (lambda t: dict(q=Tensor((6, 16, 576), t.float16), out=Tensor((6, 16, 512), t.float16)),
     "q dtype is float16 with kv_cache_dtype = 'fp8_ds_mla'"),
    (lambda t: dict(kv_cache=Tensor((10, 64, 1, 576), t.uint8)), r"kv_cache must be \[num_pages, page_size, 656\]"),
    (lambda t: dict(cp_tot_seqused_k=None), "cp_tot_seqused_k .* is required when cp_world_size = 4"),
    (lambda t: dict(softmax_lse=Tensor((6, 16), t.float32)), r"softmax_lse must be float32 \[16, 6\]"),
])
def test_checks_hold_after_warm_up(env, change, message):
    kw = dcp(env.t)
    dcpattn.flash_mla_sparse_decode(**kw)
    dcpattn.flash_mla_sparse_decode(**renew(kw))
    assert len(env.general) == 1
    n = len(env.rec.launches)
    kw.update(change(env.t))
    with pytest.raises(ArgumentError, match=message):
        dcpattn.flash_mla_sparse_decode(**kw)
    assert len(env.rec.launches) == n


def test_max_seqlen_k_picks_the_plan_the_general_path_picks(env):
    kw = torch_inputs(env.t, block_table=Tensor((2, 40), env.t.int32))
    for mk, general in ((1500, 1), (1536, 1), (1537, 2), (1500, 3)):
        dcpattn.flash_mla_sparse_decode(**dict(kw, max_seqlen_k=mk))
        assert len(env.general) == general, mk
    assert [env.made[r[0] - 1].desc["max_seqlen_k"] for r in env.rec.launches] == [1536, 1536, 1792, 1536]


def test_clear_cache_forgets_the_signatures(env):
    kw = torch_inputs(env.t)
    dcpattn.flash_mla_sparse_decode(**kw)
    dcpattn.clear_cache()
    dcpattn.flash_mla_sparse_decode(**kw)
    assert len(env.general) == 2 and len(env.made) == 2


_THROUGH = r'''
import dcpattn
from test_sparse import sparse_inputs
from fakes import DL
for name, kw in (("bf16", sparse_inputs()), ("fp16 4-D", sparse_inputs(dtype="float16",
                 kv_cache=DL((10, 64, 1, 576), "float16"))),
                 ("fp8_ds_mla dcp", sparse_inputs(fp8=True, topk_indices=DL((6, 2048), "int32"),
                  topk_count=DL((6,), "int32"), sinks=DL((16,), "float32"), cp_world_size=8, cp_rank=7,
                  cp_kv_cache_interleave_size=3, cp_tot_seqused_k=DL((2,), "int32"), return_softmax_lse=True,
                  softmax_lse=DL((16, 6), "float32"))),
                 ("e4m3", sparse_inputs(kv_cache=DL((10, 64, 576), "float8_e4m3fn"), k_scale=DL((1,), "float32"),
                  v_scale=DL((1,), "float32")))):
    try:
        dcpattn.flash_mla_sparse_decode(**kw)
    except dcpattn.DcpattnError as e:
        assert e.name == "NO_DRIVER" and not isinstance(e, dcpattn.ArgumentError), (name, e)
        print(name, "ok:", e)
'''


def test_valid_arguments_pass_every_host_check(lib):
    """With no CUDA driver to be had, valid calls fail only where the device is needed."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR + os.pathsep + os.path.dirname(__file__),
               DCPATTN_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
    r = subprocess.run([sys.executable, "-c", _THROUGH], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(" ok: ") == 4, r.stdout


def test_signature_names():
    import inspect

    names = list(inspect.signature(dcpattn.flash_mla_sparse_decode).parameters)
    assert names[:8] == ["q", "kv_cache", "block_table", "cu_seqlens_q", "seqused_k", "topk_indices", "max_seqlen_q",
                         "max_seqlen_k"]
    assert {"topk_count", "sinks", "kv_cache_dtype", "cp_tot_seqused_k", "softmax_lse", "stream"} <= set(names)
