"""flash_mla_sparse_decode: sparse MLA (DeepSeek V3.2 / GLM-5 top-k attention) over this
rank's DCP shard of a paged MLA cache, the C API's desc.sparse_topk.

It shares flash_attn_varlen_func's machinery (_attention.py): the plan cache, keyed by the
same descriptor tuple with the top-k and the cache's type in it, and the two paths. The
general path reads and checks every array; a call of PyTorch tensors whose signature (every
shape, stride, dtype and device, and the scalar arguments) passed it once then takes the
steady-state path, which copies the argument block the general path packed and puts the
call's data pointers in it."""

import functools
import sys

from . import _arrays, _attention, _lib
from ._arrays import call_stream, parse, stream_handle
from ._attention import (_MAX_CALLS, _bound, _issue, _kv_format, _new_plan, _scale, bound_range, bucket, given_outputs,
                         new_outputs, sequence_arrays, steady_entry)
from ._lib import ArgumentError
from ._runtime import fast_strides, index_array, same_device, strides_for_c

CALL = "flash_mla_sparse_decode"
calls = {}  # signature of a call of PyTorch tensors -> (lo, hi, plan, device, stream, out, lse, block)
DQK, DV = 576, 512
DS_MLA_ROW = 656  # bytes of a DeepSeek FP8 row: 512 e4m3, 4 fp32 scales, 64 bf16 RoPE values
# the argument block's pointers, in the order the steady state reads them from the call
_Q, _K, _V, _BT, _CU, _USED, _GLOB, _OUT, _LSE, _KS, _VS, _IDS, _COUNT, _SINKS = \
    1, 4, 8, 13, 15, 16, 17, 18, 21, 24, 25, 26, 28, 29


def _cache(kv_cache, kv_cache_dtype, qdt, strm):
    """kv_cache as (pointer, pages, page size, C strides (page, token, head), dcpattn kv_dtype
    code, device, producer stream, keepalive)."""
    kp, ks, kst, kdt, kdev, ksy, kkeep = parse(kv_cache, "kv_cache", strm, False, CALL)
    if kv_cache_dtype == "fp8_ds_mla":
        if kdt != "uint8":
            raise ArgumentError("kv_cache dtype is %s with kv_cache_dtype = 'fp8_ds_mla' (uint8 rows of %d bytes "
                                "expected)" % (kdt, DS_MLA_ROW), CALL)
        if qdt != "bfloat16":
            raise ArgumentError("q dtype is %s with kv_cache_dtype = 'fp8_ds_mla' (bfloat16 expected)" % qdt, CALL)
        row, code = DS_MLA_ROW, _lib.FP8_DS_MLA
    elif _kv_format(kv_cache_dtype, kdt, qdt, "kv_cache", CALL,
                    ("fp8_ds_mla", "DeepSeek's FP8 cache: uint8 rows of %d bytes with kv_cache_dtype = 'fp8_ds_mla'"
                     % DS_MLA_ROW)):
        row, code = DQK, _lib.FP8_E4M3
    else:
        row, code = DQK, 0
    if not (len(ks) == 3 or len(ks) == 4 and ks[2] == 1) or ks[-1] != row:
        raise ArgumentError("kv_cache must be [num_pages, page_size, %d] or [num_pages, page_size, 1, %d] with "
                            "kv_cache_dtype = %r, got shape %s" % (row, row, kv_cache_dtype, tuple(ks)), CALL)
    st = strides_for_c(CALL, "kv_cache", ks, kst)
    return kp, ks[0], ks[1], (st[0], st[1], st[2] if len(ks) == 4 else 0), code, kdev, ksy, kkeep


def _ids(topk_indices, topk_count, sinks, total_q, hq, strm):
    """The top-k lists, the optional counts and sinks, checked, as (pointers, top-k, row
    stride, devices, producer streams, keepalives)."""
    ip, s, st, idev, isy, ikeep = index_array(CALL, "topk_indices", topk_indices, strm, 2, total_q)
    topk = s[1]
    if not 1 <= topk <= _lib.SPARSE_MAX_TOPK:
        raise ArgumentError("topk_indices has topk = %d ids per token, shape %s (1..%d)"
                            % (topk, tuple(s), _lib.SPARSE_MAX_TOPK), CALL)
    stride = st[0] if s[0] > 1 else topk
    if stride < topk:
        raise ArgumentError("topk_indices row stride is %d, less than its topk = %d (strides %s)"
                            % (stride, topk, tuple(st)), CALL)
    cp = cdev = csy = ckeep = sp = sdev = ssy = skeep = None
    if topk_count is not None:
        cp, _, _, cdev, csy, ckeep = index_array(CALL, "topk_count", topk_count, strm, 1, total_q)
    if sinks is not None:
        sp, ss, sst, sdt, sdev, ssy, skeep = parse(sinks, "sinks", strm, False, CALL)
        if tuple(ss) != (hq,) or sdt != "float32" or (hq > 1 and sst[0] != 1):
            raise ArgumentError("sinks must be a contiguous float32 [num_heads] = [%d], got %s %s with strides %s"
                                % (hq, sdt, tuple(ss), tuple(sst)), CALL)
    return (ip, cp, sp), topk, stride, (idev, cdev, sdev), (isy, csy, ssy), (ikeep, ckeep, skeep)


def prepare(q, kv_cache, block_table, cu_seqlens_q, seqused_k, topk_indices, max_seqlen_q, max_seqlen_k,
            softmax_scale, topk_count, sinks, kv_cache_dtype, return_softmax_lse, cp_world_size, cp_rank,
            cp_tot_seqused_k, cp_kv_cache_interleave_size, out, softmax_lse, stream, k_scale=None, v_scale=None):
    """Every check, the plan lookup and the outputs' allocation: all but the launch. Returns
    (plan, argument values, stream, out, lse, producer streams, keepalive, (lo, hi) of the
    max_seqlen_k values the plan serves)."""
    if max_seqlen_q is None or max_seqlen_k is None:
        raise ArgumentError("missing argument: %s" % ("max_seqlen_q" if max_seqlen_q is None else "max_seqlen_k"),
                            CALL)
    strm = call_stream(stream, q)
    qp, qs, qst, qdt, qdev, qsy, qkeep = parse(q, "q", strm, False, CALL)
    if len(qs) != 3 or qs[2] != DQK:
        raise ArgumentError("q must be [total_q, num_heads, %d], got shape %s" % (DQK, tuple(qs)), CALL)
    if qdt != "bfloat16" and qdt != "float16":
        raise ArgumentError("q dtype is %s (bfloat16 or float16 expected)" % qdt, CALL)
    total_q, hq = qs[0], qs[1]
    kp, num_pages, page, kst, kv_dtype, kdev, ksy, kkeep = _cache(kv_cache, kv_cache_dtype, qdt, strm)
    ksp = vsp = ksdev = vsdev = kssy = vssy = kskeep = vskeep = None
    if kv_dtype == _lib.FP8_E4M3:  # per-tensor scales, read on the device
        ksp, _, ksdev, kssy, kskeep = _scale(k_scale, "k_scale", 1, strm, CALL)
        vsp, _, vsdev, vssy, vskeep = _scale(v_scale, "v_scale", 1, strm, CALL)
    world, rank, inter = int(cp_world_size), int(cp_rank), int(cp_kv_cache_interleave_size)
    batch, (cp, cs, _, cdev, csy, ckeep), (sp, _, _, sdev, ssy, skeep), (bp, bs, bst, bdev, bsy, bkeep), \
        (gp, _, _, gdev, gsy, gkeep) = sequence_arrays(CALL, cu_seqlens_q, seqused_k, block_table,
                                                       cp_tot_seqused_k, world, strm)
    (ip, np_, snp), topk, ids_stride, (idev, ndev, sndev), (isy, nsy, snsy), ikeeps = \
        _ids(topk_indices, topk_count, sinks, total_q, hq, strm)
    op, ost, odev, osy, okeep, lp, lst, ldev, lsy, lkeep = given_outputs(CALL, out, softmax_lse, return_softmax_lse,
                                                                         qdt, total_q, hq, DV, strm)
    dev = same_device(CALL, (("q", qdev, qp), ("kv_cache", kdev, kp), ("cu_seqlens_q", cdev, cp),
                             ("seqused_k", sdev, sp), ("block_table", bdev, bp), ("topk_indices", idev, ip),
                             ("topk_count", ndev, np_), ("sinks", sndev, snp), ("cp_tot_seqused_k", gdev, gp),
                             ("out", odev, op), ("softmax_lse", ldev, lp), ("k_scale", ksdev, ksp),
                             ("v_scale", vsdev, vsp)))
    qst = fast_strides(CALL, "q", qs, qst)
    bt_stride = bst[0] if bs[0] > 1 else bs[1]
    cap = bs[1] * page
    mk = _bound(int(max_seqlen_k), cap)
    scale = float(softmax_scale) if softmax_scale is not None else 0.0
    # no causal mask and no split (desc.non_causal has no effect, num_splits 0 is the only split)
    key = (dev, qdt, hq, 1, DQK, DV, page, True, scale, world, rank, inter, bucket(batch),
           max(1, int(max_seqlen_q)), bucket(total_q), mk, 0, kv_dtype, 0, topk)

    out, op, ost, lse, lp, lse_st, lse_sh = new_outputs(CALL, q, out, op, ost, softmax_lse, lp, lst,
                                                        return_softmax_lse, total_q, hq, DV, dev)
    # V is the first 512 channels of K's rows: v_cache = k_cache, v strides 0 (K's)
    values = (batch, qp, qst[0], qst[1], kp, kst[0], kst[1], kst[2], kp, 0, 0, 0, num_pages, bp, bt_stride, cp, sp,
              gp or 0, op, ost[0], ost[1], lp or 0, lse_st, lse_sh, ksp or 0, vsp or 0, ip, ids_stride, np_ or 0,
              snp or 0)
    plan = _attention.plans.get(key)
    if plan is None:
        plan = _new_plan(key, values, q)
    syncs = (qsy, ksy, csy, ssy, bsy, isy, nsy, snsy, gsy, osy, lsy, kssy, vssy)
    keeps = (qkeep, kkeep, ckeep, skeep, bkeep, gkeep, okeep, lkeep, kskeep, vskeep) + ikeeps
    return (plan, values, strm, out, lse, [s for s in syncs if s] or None, [k for k in keeps if k] or None,
            bound_range(mk, cap))


def _sig(x):
    return None if x is None else (x.shape, x.is_contiguous() or x.stride(), x.dtype, x.get_device())


def flash_mla_sparse_decode(q, kv_cache, block_table, cu_seqlens_q, seqused_k, topk_indices, max_seqlen_q,
                            max_seqlen_k, softmax_scale=None, topk_count=None, sinks=None, kv_cache_dtype="auto",
                            return_softmax_lse=False, cp_world_size=1, cp_rank=0, cp_tot_seqused_k=None,
                            cp_kv_cache_interleave_size=1, out=None, softmax_lse=None, stream=None, k_scale=None,
                            v_scale=None):
    """Sparse MLA attention (DeepSeek V3.2 / GLM-5: each query token attends to the top-k
    tokens its indexer picked) over this rank's shard of a paged MLA cache, for decode
    context parallelism: the kernel keeps the ids this rank owns and finds them in its shard
    itself, with no filter pass. The arguments are flash_attn_varlen_func's; the top-k lists,
    counts and sinks are FlashMLA's sparse decode's indices, topk_length and attn_sink, per
    query token instead of per (sequence, query position).

    q            [total_q, num_heads, 576], bfloat16 or float16 (num_heads 1..128); sequence
                 b's tokens are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1
    kv_cache     this rank's pages, [num_pages, page_size, 576] of q's dtype; or e4m3,
                 float8_e4m3fn (or uint8 bytes with kv_cache_dtype="fp8_e4m3") with k_scale
                 and v_scale; or with kv_cache_dtype="fp8_ds_mla" uint8 [num_pages, page_size,
                 656] (DeepSeek's FP8 rows: 512 e4m3 values, 4 float32 scales, one per 128
                 values, 64 bfloat16 RoPE values; q bfloat16); also [num_pages, page_size, 1, D], as vLLM stores
                 MLA caches. V is the first 512 channels of each row. Pages of 16, 32, 64,
                 128, 192 or 256 tokens; any strides whose last dimension is contiguous (FP8:
                 multiples of 16 bytes)
    block_table  int32 [batch, max_pages], this rank's pages
    cu_seqlens_q int32 [batch + 1]; seqused_k int32 [batch], this rank's KV tokens
    topk_indices int32 [total_q, topk] (at least total_q rows, topk 1..2048, the row stride
                 may exceed topk): per query token, GLOBAL token positions of its sequence.
                 An id g is used iff 0 <= g < the sequence's global length and this rank
                 owns it, (g // I) % W == cp_rank; it is read at local index
                 (g // (W*I))*I + g % I through the block table. -1 (any id < 0), ids past
                 the length and other ranks' ids are skipped wherever they stand and never
                 read; an id listed twice counts twice. No causal mask: causality is the
                 indexer's
    max_seqlen_q, max_seqlen_k  upper bounds of the query lengths (1..16 per sequence) and
                 of seqused_k
    softmax_scale  None: 1/sqrt(576)
    topk_count   optional int32 [total_q]: only the first topk_count[t] ids of token t's
                 list (clamped to 0..topk)
    sinks        optional float32 [num_heads] attention sinks (a non-finite one is none): one
                 more logit per head with no value, applied on cp_rank 0 only, so that the
                 merge (merge_attn_states, merge_states) or dcp_combine of the W ranks'
                 partials gives unsharded attention with the sink once. Pass them on every
                 rank
    kv_cache_dtype  "auto": the cache has q's dtype, or is float8_e4m3fn; "fp8" / "fp8_e4m3": an
                 e4m3 cache (float8_e4m3fn or uint8); "fp8_ds_mla": DeepSeek's 656-byte rows
    k_scale, v_scale  an e4m3 cache's per-tensor scales (K = e4m3 value * k_scale, V = the
                 first 512 values * v_scale): device float32 arrays of shape [] or [1], read
                 by the kernel, so a captured graph replays with the values they hold then
    cp_world_size, cp_rank, cp_kv_cache_interleave_size, cp_tot_seqused_k, out, softmax_lse,
    stream       as flash_attn_varlen_func's (cp_tot_seqused_k is required when
                 cp_world_size > 1); out is [total_q, num_heads, 512]

    Returns out, or (out, softmax_lse) with softmax_lse float32 [num_heads, total_q] (natural
    log), the layout of flash_attn_varlen_func. A token that keeps no id has out 0 and lse
    -inf (on rank 0 with a finite sink: lse = the sink). Needs an sm_80 or newer GPU.

    Plans are cached as flash_attn_varlen_func's, one per top-k among the rest; after one
    call of PyTorch tensors, a call with the same shapes, strides, dtypes, devices and
    scalar arguments reads only those and the data pointers before its launch.
    """
    sig = None
    if type(q) is (_arrays.tensor_type or _arrays.find_torch()):
        try:
            sig = (_sig(q), _sig(kv_cache), _sig(block_table), _sig(cu_seqlens_q), _sig(seqused_k),
                   _sig(topk_indices), _sig(topk_count), _sig(sinks), _sig(cp_tot_seqused_k), _sig(out),
                   return_softmax_lse and _sig(softmax_lse), max_seqlen_q, softmax_scale, kv_cache_dtype,
                   return_softmax_lse, cp_world_size, cp_rank, cp_kv_cache_interleave_size, _sig(k_scale),
                   _sig(v_scale))
            e = steady_entry(calls, sig, max_seqlen_k)
        except Exception:  # not all PyTorch tensors, or a scalar that cannot be hashed or compared
            sig = e = None
        if e is not None:
            _, _, plan, dev, raw_stream, new_out, new_lse, block = e
            strm = raw_stream(dev) if stream is None else stream_handle(stream)
            if out is None:
                out = new_out()
            v = list(block)
            v[_Q], v[_K] = q.data_ptr(), kv_cache.data_ptr()
            v[_V], v[_BT], v[_CU], v[_USED], v[_OUT] = v[_K], block_table.data_ptr(), cu_seqlens_q.data_ptr(), \
                seqused_k.data_ptr(), out.data_ptr()
            v[_IDS] = topk_indices.data_ptr()
            if cp_tot_seqused_k is not None:
                v[_GLOB] = cp_tot_seqused_k.data_ptr()
            if topk_count is not None:
                v[_COUNT] = topk_count.data_ptr()
            if sinks is not None:
                v[_SINKS] = sinks.data_ptr()
            if k_scale is not None and v[_KS]:  # (an e4m3 cache's; a signature holds them or not)
                v[_KS], v[_VS] = k_scale.data_ptr(), v_scale.data_ptr()
            if return_softmax_lse:
                if softmax_lse is None:
                    softmax_lse = new_lse()
                v[_LSE] = softmax_lse.data_ptr()
            _issue(plan, v, strm)
            return (out, softmax_lse) if return_softmax_lse else out
    p = prepare(q, kv_cache, block_table, cu_seqlens_q, seqused_k, topk_indices, max_seqlen_q, max_seqlen_k,
                softmax_scale, topk_count, sinks, kv_cache_dtype, return_softmax_lse, cp_world_size, cp_rank,
                cp_tot_seqused_k, cp_kv_cache_interleave_size, out, softmax_lse, stream, k_scale, v_scale)
    _issue(p[0], p[1], p[2], p[5])
    if sig is not None and p[5] is None and p[6] is None:
        _remember(sig, p, q, out is None, return_softmax_lse and softmax_lse is None)
    return (p[3], p[4]) if return_softmax_lse else p[3]


def _remember(sig, p, q, new_out, new_lse):
    """Makes a signature that passed the general path take the steady-state path."""
    plan, values, _, out, lse, _, _, (lo, hi) = p
    t = sys.modules["torch"]
    e = (lo, hi, plan, q.get_device(), _arrays.torch_stream(),
         functools.partial(t.empty, tuple(out.shape), dtype=out.dtype, device=out.device) if new_out else None,
         functools.partial(t.empty, tuple(lse.shape), dtype=lse.dtype, device=lse.device) if new_lse else None,
         values)
    if len(calls) >= _MAX_CALLS:
        calls.clear()
    calls[sig] = e
