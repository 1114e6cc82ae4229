"""flash_attn_varlen_func: paged attention over this rank's DCP shard, with the names and
meaning of vLLM's FlashAttention-3 call.

Two paths. The general one (prepare, then launch) reads every array (PyTorch, CuPy, JAX...),
checks it and finds the plan. A call whose arrays are all PyTorch tensors also has a
signature, every shape, stride, dtype and device with the scalar arguments: once a
signature has passed the general path, its calls take the steady-state path, which reads
only the signature and the data pointers, looks the signature up, and packs and launches.
Everything the checks looked at is in the signature, so they hold for every call that
matches it; what a signature cannot show (the alignment of the pointers) is checked by the
library at each run."""

import functools
import sys
import threading
from ctypes import byref, c_void_p

from . import _arrays, _cuda, _lib
from ._arrays import call_stream, empty, parse, stream_handle, workspace
from ._lib import ArgumentError, AttnArgs, AttnDesc
from ._runtime import (data_ptr, device, fast_strides, index_array, lock, order_after, same_device,
                       strides_for_c, thread_buffer)

CALL = "flash_attn_varlen_func"
plans = {}  # plan descriptor tuple -> Plan
calls = {}  # signature of a call of PyTorch tensors -> what its launches need (see _remember)
_MAX_CALLS = 4096  # signatures kept (shapes change with the batch): past it the table starts over
_pack = _lib.packer(AttnArgs).pack_into
_FP8_NAMES = ("fp8", "fp8_e4m3")  # kv_cache_dtype values of an e4m3 cache, as vLLM spells them
_FP8_TYPES = ("float8_e4m3fn", "uint8")  # element types an e4m3 cache may be given as


def bucket(n):
    """An upper bound for the descriptor: n itself up to 8, then the next of four steps per
    power of two (at most 25 % above n), so that lengths and batch sizes that change every
    decode step reuse a few plans instead of making one each."""
    if n <= 8:
        return n if n > 0 else 1
    step = 1 << (n.bit_length() - 3)
    return (n + step - 1) // step * step


def _bound(n, cap):
    return min(bucket(n), cap)


def bound_range(mk, cap):
    """The integers n whose _bound(n, cap) is mk, as (lo, hi), either end None when open: the
    max_seqlen_k values a plan made for the bound mk serves."""
    hi = None if mk >= cap else mk
    if _bound(0, cap) == mk:
        return None, hi
    lo, top = 1, mk  # _bound is monotonic: the first n with _bound(n) == mk
    while lo < top:
        mid = (lo + top) // 2
        if _bound(mid, cap) < mk:
            lo = mid + 1
        else:
            top = mid
    return lo, hi


class Plan:
    """A dcpattn_attn_plan, the workspace its runs use (allocated once, through the library of
    the arrays of the call that created it) and run, the function that issues it: the
    library's dcpattn_attn_run, called with the GIL kept. Tests and the overhead measurement
    of examples/vllm_style_decode.py replace run on a plan (a no-op, a recorder)."""

    __slots__ = ("handle", "dev", "cu_ctx", "run", "ws_owner", "ws", "ws_bytes", "variant", "num_splits")

    def __init__(self, desc, like, dev):
        lib = _lib.get()
        h = c_void_p()
        pushed = _cuda.enter(dev.cu_ctx)
        try:
            lib.check(lib.dcpattn_attn_plan_create(dev.ctx, byref(desc), byref(h)), "dcpattn_attn_plan_create")
            self.handle, self.dev, self.cu_ctx, self.run = h.value, dev, dev.cu_ctx, lib.attn_run_gil
            self.ws_bytes = lib.dcpattn_attn_workspace_size(h)
            self.ws_owner, self.ws = None, None
            if self.ws_bytes:
                self.ws_owner, self.ws = workspace(like, self.ws_bytes, dev.index, dev.cu_ctx)
        finally:
            _cuda.leave(pushed)
        self.variant = lib.dcpattn_attn_variant(h).decode()
        self.num_splits = lib.dcpattn_attn_num_splits(h)

    def __del__(self):
        try:
            _lib.get().dcpattn_attn_plan_destroy(self.handle)
        except Exception:
            pass


def make_plan(desc, like, dev_index):
    """The one place a plan meets the device (a context, a plan, a workspace): the CPU tests
    and benchmark replace it to run everything else without a GPU."""
    return Plan(desc, like, device(dev_index))


def _new_plan(key, values, like):
    """The plan of a descriptor seen for the first time: the descriptor and the arguments
    are checked on the host first (no GPU needed), then the plan is made."""
    lib = _lib.get()
    (dev, dtype, hq, hkv, dqk, dv, page, causal, scale, world, rank, inter, mb, mq, mt, mk, splits, kv_dtype,
     per_head, topk) = key
    desc = AttnDesc(dtype=_lib.BF16 if dtype == "bfloat16" else _lib.FP16, num_q_heads=hq, num_kv_heads=hkv,
                    head_dim=dqk, head_dim_v=dv, page_size=page, non_causal=0 if causal else 1,
                    softmax_scale=scale, dcp_world=world, dcp_rank=rank, dcp_interleave=inter, max_batch=mb,
                    max_q_len=mq, max_total_q=mt, max_seqlen_k=mk, num_splits=splits, kv_dtype=kv_dtype,
                    kv_scale_per_head=per_head, sparse_topk=topk)
    lib.check(lib.dcpattn_attn_desc_validate(byref(desc)), "dcpattn_attn_desc_validate")
    args = AttnArgs()
    _pack(args, 0, *values)
    lib.check(lib.dcpattn_attn_args_validate(byref(desc), byref(args)), "dcpattn_attn_args_validate")
    with lock:
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = make_plan(desc, like, dev)
    return plan


_local = threading.local()


def _thread_block():
    """This thread's argument block and its address, and its current-context word and
    address, in one lookup."""
    _local.block = thread_buffer(AttnArgs) + _cuda.current_word()
    return _local.block


def steady_entry(table, sig, max_seqlen_k):
    """The steady-state entry of a call signature in table, or None. max_seqlen_k only bounds
    the plan: an entry (lo, hi, ...) serves the values its plan was made for (a value outside
    takes the general path, which replaces it)."""
    e = table.get(sig)
    if e is not None and not ((e[0] is None or e[0] <= max_seqlen_k) and (e[1] is None or max_seqlen_k <= e[1])):
        return None
    return e


def _issue(plan, values, stream, producers=None):
    """Packs values into this thread's argument block and runs the plan on stream, with the
    plan's context current (after the producer streams, if any). The steady state's whole
    launch: _cuda.enter and leave are written out here."""
    try:
        buf, addr, cur, cur_addr = _local.block
    except AttributeError:
        buf, addr, cur, cur_addr = _thread_block()
    _cuda._drv.getcur(cur_addr)
    pushed = cur.value != plan.cu_ctx and _cuda.push(plan.cu_ctx)
    try:
        if producers:
            order_after(plan.dev, stream, producers)
        _pack(buf, 0, *values)
        s = plan.run(plan.handle, addr, plan.ws, plan.ws_bytes, stream)
    finally:
        if pushed:
            _cuda.leave(True)
    if s:
        _lib.get().check(s, "dcpattn_attn_run")


def launch(prepared):
    """Issues a prepared call (prepare's result)."""
    _issue(prepared[0], prepared[1], prepared[2], prepared[5])


def _kv_format(kv_cache_dtype, kdt, qdt, arg="k_cache", call=CALL, also=None):
    """Whether the cache (argument arg) is FP8 e4m3: kv_cache_dtype "fp8" / "fp8_e4m3" (a
    float8_e4m3fn or uint8 cache), or "auto" with a float8_e4m3fn cache; else the cache has q's
    type. also: (name, hint) of one more kv_cache_dtype the caller took before, for the messages."""
    if kv_cache_dtype in _FP8_NAMES:
        if kdt not in _FP8_TYPES:
            raise ArgumentError("%s dtype is %s with kv_cache_dtype = %r (float8_e4m3fn, or uint8 holding e4m3 "
                                "bytes, expected)" % (arg, kdt, kv_cache_dtype), call)
        fp8 = True
    elif kv_cache_dtype == "auto" or kv_cache_dtype is None:
        fp8 = kdt == "float8_e4m3fn"
        if not fp8 and kdt != qdt:
            raise ArgumentError("%s dtype is %s, q's is %s (an e4m3 cache: float8_e4m3fn, or uint8 with "
                                "kv_cache_dtype = 'fp8_e4m3'%s)" % (arg, kdt, qdt, "; " + also[1] if also else ""), call)
    else:
        names = "'auto', 'fp8', 'fp8_e4m3' or %r" % also[0] if also else "'auto', 'fp8' or 'fp8_e4m3'"
        raise ArgumentError("kv_cache_dtype = %r is not supported (%s)" % (kv_cache_dtype, names), call)
    return fp8


def _scale(x, name, hkv, strm, call=CALL):
    """An FP8 cache's k_scale or v_scale: a device float32 array of shape [], [1] or
    [num_kv_heads], as (pointer, per head, device, producer stream, keepalive)."""
    what = "a device float32 array of shape [1] or [num_kv_heads] = [%d]" % hkv
    if x is None:
        raise ArgumentError("%s is required with an FP8 KV cache: %s" % (name, what), call)
    if isinstance(x, (int, float)):
        raise ArgumentError("%s = %r: the kernel reads the scale on the device (a captured graph replays with the "
                            "value it holds then), so it must be %s" % (name, x, what), call)
    p, s, st, dt, dev, sy, keep = parse(x, name, strm, False, call)
    if dt != "float32":
        raise ArgumentError("%s dtype is %s (float32 expected)" % (name, dt), call)
    per_head = len(s) == 1 and s[0] == hkv > 1
    if not (len(s) == 0 or tuple(s) == (1,) or per_head):
        raise ArgumentError("%s must be [], [1] or [num_kv_heads] = [%d], got shape %s" % (name, hkv, tuple(s)), call)
    if per_head and st[0] != 1:
        raise ArgumentError("%s must be contiguous (strides %s)" % (name, tuple(st)), call)
    return p, per_head, dev, sy, keep


def prepare(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k, softmax_scale,
            causal, return_softmax_lse, cp_world_size, cp_rank, cp_tot_seqused_k, cp_kv_cache_interleave_size, out,
            num_splits, stream, softmax_lse, kv_cache_dtype="auto", k_scale=None, v_scale=None, descale=None):
    """Every check of flash_attn_varlen_func, the plan lookup and the outputs' allocation:
    all but the launch. Returns (plan, argument values, stream, out, lse, producer streams,
    keepalive, (lo, hi) of the max_seqlen_k values the plan serves, MLA with V given as a
    view of K, an FP8 cache) for launch()."""
    if k_cache is None or cu_seqlens_q is None or seqused_k is None or block_table is None \
            or max_seqlen_q is None or max_seqlen_k is None:
        missing = [n for n, v in (("k_cache", k_cache), ("cu_seqlens_q", cu_seqlens_q), ("seqused_k", seqused_k),
                                  ("block_table", block_table), ("max_seqlen_q", max_seqlen_q),
                                  ("max_seqlen_k", max_seqlen_k)) if v is None]
        raise ArgumentError("missing argument%s: %s" % ("s" if len(missing) > 1 else "", ", ".join(missing)), CALL)
    strm = call_stream(stream, q)
    qp, qs, qst, qdt, qdev, qsy, qkeep = parse(q, "q", strm, False, CALL)
    if len(qs) != 3:
        raise ArgumentError("q must be [total_q, num_heads, head_dim], got shape %s" % (tuple(qs),), CALL)
    if qdt != "bfloat16" and qdt != "float16":
        raise ArgumentError("q dtype is %s (bfloat16 or float16 expected)" % qdt, CALL)
    total_q, hq, dqk = qs
    kp, ks, kst, kdt, kdev, ksy, kkeep = parse(k_cache, "k_cache", strm, False, CALL)
    if len(ks) != 4 or ks[3] != dqk:
        raise ArgumentError("k_cache must be [num_pages, page_size, num_kv_heads, %d] (q's head_dim), got shape %s"
                            % (dqk, tuple(ks)), CALL)
    fp8 = _kv_format(kv_cache_dtype, kdt, qdt)
    if fp8 and descale:
        raise ArgumentError("%s is FlashAttention-3's FP8 descale, which dcpattn does not take: q stays 16-bit and "
                            "the cache's scales are k_scale and v_scale ([1] or [num_kv_heads])" % descale, CALL)
    num_pages, page, hkv = ks[0], ks[1], ks[2]
    mla_view = False
    if dqk == 576:  # MLA: V is the first 512 channels of each K row
        dv, vdev, vsy, vkeep = 512, kdev, None, None
        if v_cache is not None and v_cache is not k_cache:
            vp, vs, vst, vdt, vdev, vsy, vkeep = parse(v_cache, "v_cache", strm, False, CALL)
            if vp != kp or len(vs) != 4 or vs[3] not in (512, 576) or vdt != kdt \
                    or (vs[0], vs[1], vs[2], vst[0], vst[1], vst[2]) != (ks[0], ks[1], ks[2], kst[0], kst[1], kst[2]):
                raise ArgumentError("MLA (head_dim 576) reads V from the first 512 channels of k_cache's rows: "
                                    "v_cache must be None, k_cache or k_cache[..., :512]", CALL)
            mla_view = True
        vp = kp
    else:
        vp, vs, vst, vdt, vdev, vsy, vkeep = parse(v_cache, "v_cache", strm, False, CALL)
        if len(vs) != 4 or vs[0] != num_pages or vs[1] != page or vs[2] != hkv:
            raise ArgumentError("v_cache must be [num_pages, page_size, num_kv_heads, head_dim_v] with k_cache's "
                                "first three dimensions %s, got shape %s" % (tuple(ks[:3]), tuple(vs)), CALL)
        if vdt != kdt:
            raise ArgumentError("v_cache dtype is %s, k_cache's is %s" % (vdt, kdt), CALL)
        dv = vs[3]
    ksp = vsp = ksdev = vsdev = kssy = vssy = kskeep = vskeep = None
    per_head = False
    if fp8:
        ksp, per_head, ksdev, kssy, kskeep = _scale(k_scale, "k_scale", hkv, strm)
        vsp, v_per_head, vsdev, vssy, vskeep = _scale(v_scale, "v_scale", hkv, strm)
        if v_per_head != per_head:
            raise ArgumentError("k_scale is %s and v_scale %s: give both one scale or both one per KV head"
                                % (("per KV head", "per tensor") if per_head else ("per tensor", "per KV head")), CALL)
    world, rank, inter = int(cp_world_size), int(cp_rank), int(cp_kv_cache_interleave_size)
    batch, (cp, cs, _, cdev, csy, ckeep), (sp, _, _, sdev, ssy, skeep), (bp, bs, bst, bdev, bsy, bkeep), \
        (gp, _, _, gdev, gsy, gkeep) = sequence_arrays(CALL, cu_seqlens_q, seqused_k, block_table,
                                                       cp_tot_seqused_k, world, strm)
    op, ost, odev, osy, okeep, lp, lst, ldev, lsy, lkeep = given_outputs(CALL, out, softmax_lse, return_softmax_lse,
                                                                         qdt, total_q, hq, dv, strm)
    dev = qdev
    if qdev < 0 or not (qdev == kdev == vdev == cdev == sdev == bdev and gdev in (None, qdev)
                        and odev in (None, qdev) and ldev in (None, qdev) and ksdev in (None, qdev)
                        and vsdev in (None, qdev)):
        dev = same_device(CALL, (("q", qdev, qp), ("k_cache", kdev, kp), ("v_cache", vdev, vp),
                                 ("cu_seqlens_q", cdev, cp), ("seqused_k", sdev, sp), ("block_table", bdev, bp),
                                 ("cp_tot_seqused_k", gdev, gp), ("out", odev, op), ("softmax_lse", ldev, lp),
                                 ("k_scale", ksdev, ksp), ("v_scale", vsdev, vsp)))
    qst = fast_strides(CALL, "q", qs, qst)
    kst = fast_strides(CALL, "k_cache", ks, kst)
    # MLA: v strides 0 make the C API take k's (normalized) strides for v, as it requires
    vst = (0, 0, 0) if dqk == 576 else fast_strides(CALL, "v_cache", vs, vst)
    # the block table's row stride bounds max_seqlen_k / page_size in the C check; one row
    # has no row stride
    bt_stride = bst[0] if bs[0] > 1 else bs[1]
    cap = bs[1] * page
    mk = _bound(int(max_seqlen_k), cap)
    scale = float(softmax_scale) if softmax_scale is not None else 0.0
    key = (dev, qdt, hq, hkv, dqk, dv, page, bool(causal), scale, world, rank, inter, bucket(batch),
           max(1, int(max_seqlen_q)), bucket(total_q), mk, int(num_splits), _lib.FP8_E4M3 if fp8 else 0,
           int(per_head), 0)

    # outputs last: nothing is allocated for a call that fails its checks
    out, op, ost, lse, lp, lse_st, lse_sh = new_outputs(CALL, q, out, op, ost, softmax_lse, lp, lst,
                                                        return_softmax_lse, total_q, hq, dv, dev)
    values = (batch, qp, qst[0], qst[1], kp, kst[0], kst[1], kst[2], vp, vst[0], vst[1], vst[2], num_pages,
              bp, bt_stride, cp, sp, gp or 0, op, ost[0], ost[1], lp or 0, lse_st, lse_sh, ksp or 0, vsp or 0,
              0, 0, 0, 0)
    plan = plans.get(key)
    if plan is None:
        plan = _new_plan(key, values, q)
    producers = [s for s in (qsy, ksy, vsy, csy, ssy, bsy, gsy, osy, lsy, kssy, vssy) if s] if (
        qsy or ksy or vsy or csy or ssy or bsy or gsy or osy or lsy or kssy or vssy) else None
    # DLPack capsules: alive until the launch is issued
    keep = (qkeep, kkeep, vkeep, ckeep, skeep, bkeep, gkeep, okeep, lkeep, kskeep, vskeep) if (
        qkeep or kkeep or vkeep or ckeep or skeep or bkeep or gkeep or okeep or lkeep or kskeep or vskeep) else None
    return (plan, values, strm, out, lse, producers, keep, bound_range(mk, cap), mla_view, fp8)


def sequence_arrays(call, cu_seqlens_q, seqused_k, block_table, cp_tot_seqused_k, world, strm):
    """The per-sequence arrays of a paged call, each as index_array gives it (cp_tot_seqused_k all
    None when it is absent, which only a group of one rank may leave it), after the batch size
    that cu_seqlens_q sets: (batch, cu_seqlens_q, seqused_k, block_table, cp_tot_seqused_k)."""
    cu = index_array(call, "cu_seqlens_q", cu_seqlens_q, strm, 1, 1)
    batch = cu[1][0] - 1
    used = index_array(call, "seqused_k", seqused_k, strm, 1, batch)
    table = index_array(call, "block_table", block_table, strm, 2, batch)
    if cp_tot_seqused_k is not None:
        glob = index_array(call, "cp_tot_seqused_k", cp_tot_seqused_k, strm, 1, batch)
    elif world > 1:
        raise ArgumentError("cp_tot_seqused_k (every sequence's global length) is required when cp_world_size = %d"
                            % world, call)
    else:
        glob = (None,) * 6
    return batch, cu, used, table, glob


def given_outputs(call, out, softmax_lse, return_softmax_lse, qdt, total_q, hq, dv, strm):
    """The checks of the outputs a call is given: out [total_q, num_heads, head_dim_v] of q's
    dtype, softmax_lse float32 [num_heads, total_q] (FlashAttention's layout), read only when
    return_softmax_lse. Returns (pointer, C strides, device, producer stream, keepalive) of
    each, Nones for one not given."""
    op = ost = odev = osy = okeep = lp = lst = ldev = lsy = lkeep = None
    if out is not None:
        op, os_, ost, odt, odev, osy, okeep = parse(out, "out", strm, True, call)
        if os_ != (total_q, hq, dv) or odt != qdt:
            raise ArgumentError("out must be %s [%d, %d, %d] (total_q, num_heads, head_dim_v), got %s %s"
                                % (qdt, total_q, hq, dv, odt, tuple(os_)), call)
        ost = fast_strides(call, "out", os_, ost)
    if return_softmax_lse and softmax_lse is not None:
        lp, ls, lst, ldt, ldev, lsy, lkeep = parse(softmax_lse, "softmax_lse", strm, True, call)
        if ls != (hq, total_q) or ldt != "float32":
            raise ArgumentError("softmax_lse must be float32 [%d, %d] (num_heads, total_q), got %s %s"
                                % (hq, total_q, ldt, tuple(ls)), call)
        lst = strides_for_c(call, "softmax_lse", ls, lst, False)
    return op, ost, odev, osy, okeep, lp, lst, ldev, lsy, lkeep


def new_outputs(call, q, out, op, ost, softmax_lse, lp, lst, return_softmax_lse, total_q, hq, dv, dev):
    """The outputs a call was not given, allocated through q's library, as (out, its pointer,
    strides, lse or None, its pointer, lse_stride_t, lse_stride_h)."""
    if op is None:
        out = empty(q, (total_q, hq, dv), None, dev, "out", call)
        op, ost = data_ptr(out), (hq * dv, dv, 1)
    lse, lse_st, lse_sh = None, 0, 0
    if return_softmax_lse:
        if lp is None:
            lse = empty(q, (hq, total_q), "float32", dev, "softmax_lse", call)
            lp, lse_st, lse_sh = data_ptr(lse), 1, total_q
        else:
            lse, lse_st, lse_sh = softmax_lse, lst[1], lst[0]
    return out, op, ost, lse, lp, lse_st, lse_sh


_UNSUPPORTED = (
    ("cu_seqlens_k", None, "dcpattn reads a paged KV cache: pass block_table and seqused_k"),
    ("dropout_p", 0.0, "no dropout in inference"),
    ("softcap", 0.0, "no logit soft-capping"),
    ("alibi_slopes", None, "no ALiBi"),
    ("return_attn_probs", False, "attention probabilities are never materialized"),
    ("s_aux", None, "no attention sinks"),
    ("q_v", None, "MLA takes q as one [total_q, num_heads, 576] array"),
)


def _reject(**given):
    for name, default, why in _UNSUPPORTED:
        if given[name] != default:
            raise ArgumentError("%s = %r is not supported (%s)" % (name, given[name], why), CALL)
    ws = given["window_size"]
    if ws is not None and tuple(ws) != (-1, -1):
        raise ArgumentError("window_size = %r is not supported (no sliding window)" % (ws,), CALL)


def flash_attn_varlen_func(q, k_cache=None, v_cache=None, cu_seqlens_q=None, seqused_k=None, block_table=None,
                           max_seqlen_q=None, max_seqlen_k=None, softmax_scale=None, causal=True,
                           return_softmax_lse=False, cp_world_size=1, cp_rank=0, cp_tot_seqused_k=None,
                           cp_kv_cache_interleave_size=1, out=None, num_splits=0, *, k=None, v=None, stream=None,
                           softmax_lse=None, kv_cache_dtype="auto", k_scale=None, v_scale=None, cu_seqlens_k=None,
                           dropout_p=0.0, window_size=None, softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, scheduler_metadata=None, q_descale=None, k_descale=None,
                           v_descale=None, s_aux=None, q_v=None, fa_version=None):
    """Attention of every query row over this rank's shard of a paged KV cache, as vLLM's
    FlashAttention-3 call computes it (vllm_flash_attn.flash_attn_varlen_func, paged form).

    q            [total_q, num_heads, head_dim], bfloat16 or float16; sequence b's rows are
                 cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1
    k_cache      [num_pages, page_size, num_kv_heads, head_dim] (vLLM's `k`), any strides
                 whose last dimension is contiguous (a head-major cache, [num_pages,
                 num_kv_heads, page_size, head_dim] in memory, as its .transpose(1, 2))
    v_cache      [num_pages, page_size, num_kv_heads, head_dim_v] (vLLM's `v`). MLA, chosen
                 when head_dim is 576: V is the first 512 channels of k_cache's rows
                 (num_kv_heads 1); pass v_cache=None, k_cache or k_cache[..., :512]
    cu_seqlens_q int32 [batch + 1]; seqused_k int32 [batch], this rank's KV tokens;
    block_table  int32 [batch, max_pages], this rank's pages
    max_seqlen_q, max_seqlen_k  upper bounds of the query lengths and of seqused_k
    softmax_scale  None: 1/sqrt(head_dim)
    causal       bottom-right causal mask on the global sequence (the newest query token is
                 global position L - 1, its KV already in the cache)
    cp_world_size, cp_rank, cp_kv_cache_interleave_size  the DCP group: global token g is
                 on rank (g // I) % W at local index (g // (W * I)) * I + g % I
    cp_tot_seqused_k  int32 [batch], every sequence's global KV length (required when
                 cp_world_size > 1)
    out          [total_q, num_heads, head_dim_v] to write into; allocated when None (through
                 PyTorch or CuPy, q's library)
    num_splits   0 (default): the balanced schedule (the whole batch's work cut evenly over one
                 wave of CTAs from the real lengths); dcpattn.SPLITS_PER_SEQUENCE: each
                 sequence split alike, from the bounds; 1: no split-KV; n: n splits
    stream       the CUDA stream (int handle or stream object); None: PyTorch's current
                 stream when torch is imported, else the default stream
    softmax_lse  float32 [num_heads, total_q] to write the LSE into when
                 return_softmax_lse (allocated when None)
    kv_cache_dtype  "auto": the cache has q's type, or is float8_e4m3fn; "fp8" / "fp8_e4m3":
                 an e4m3 cache given as float8_e4m3fn or as uint8 bytes (MLA: V is the same
                 bytes as K's first 512). K = e4m3 value * k_scale, V = e4m3 value * v_scale
    k_scale, v_scale  an FP8 cache's scales: device float32 arrays of shape [] or [1] (one
                 scale) or [num_kv_heads] (one per KV head, both or neither), read by the
                 kernel when it runs (a captured graph replays with their values then);
                 ignored with a 16-bit cache

    Returns out, or (out, softmax_lse) with softmax_lse float32 [num_heads, total_q] (natural
    log; a row that sees no key has out 0 and lse -inf). The other keyword arguments are
    vLLM's: accepted at their neutral values; scheduler_metadata, fa_version and
    deterministic are ignored, and so are q/k/v_descale with a 16-bit cache (with an FP8
    one they are an error: the scales are k_scale and v_scale).

    After one call of PyTorch tensors, a call with the same shapes, strides, dtypes, devices
    and scalar arguments (and max_seqlen_k within the same plan bound) reads only those and
    the data pointers before its launch: a few microseconds of Python.
    """
    if k is not None or v is not None:
        if k_cache is not None or v_cache is not None:
            raise ArgumentError("give the cache as k_cache/v_cache or as k/v, not both", CALL)
        k_cache, v_cache = k, v
    if cu_seqlens_k is not None or dropout_p or softcap or alibi_slopes is not None or return_attn_probs \
            or s_aux is not None or q_v is not None or window_size is not None:
        _reject(cu_seqlens_k=cu_seqlens_k, dropout_p=dropout_p, softcap=softcap, alibi_slopes=alibi_slopes,
                return_attn_probs=return_attn_probs, s_aux=s_aux, q_v=q_v, window_size=window_size)
    descale = None
    if q_descale is not None or k_descale is not None or v_descale is not None:
        descale = "q_descale" if q_descale is not None else "k_descale" if k_descale is not None else "v_descale"
    sig = None
    if type(q) is (_arrays.tensor_type or _arrays.find_torch()):
        # the steady-state path: the signature of a call of PyTorch tensors (anything else
        # fails to make one and takes the general path)
        try:
            sig = (q.shape, q.is_contiguous() or q.stride(), q.dtype, q.get_device(),
                   k_cache.shape, k_cache.is_contiguous() or k_cache.stride(), k_cache.dtype, k_cache.get_device(),
                   0 if v_cache is None else 1 if v_cache is k_cache else
                   (v_cache.shape, v_cache.is_contiguous() or v_cache.stride(), v_cache.dtype, v_cache.get_device()),
                   cu_seqlens_q.shape, cu_seqlens_q.is_contiguous() or cu_seqlens_q.stride(), cu_seqlens_q.dtype,
                   cu_seqlens_q.get_device(),
                   seqused_k.shape, seqused_k.is_contiguous() or seqused_k.stride(), seqused_k.dtype,
                   seqused_k.get_device(),
                   block_table.shape, block_table.is_contiguous() or block_table.stride(), block_table.dtype,
                   block_table.get_device(),
                   cp_tot_seqused_k is None or
                   (cp_tot_seqused_k.shape, cp_tot_seqused_k.is_contiguous() or cp_tot_seqused_k.stride(),
                    cp_tot_seqused_k.dtype, cp_tot_seqused_k.get_device()),
                   out is None or (out.shape, out.is_contiguous() or out.stride(), out.dtype, out.get_device()),
                   softmax_lse is None or not return_softmax_lse or
                   (softmax_lse.shape, softmax_lse.is_contiguous() or softmax_lse.stride(), softmax_lse.dtype,
                    softmax_lse.get_device()),
                   k_scale is None or
                   (k_scale.shape, k_scale.is_contiguous() or k_scale.stride(), k_scale.dtype, k_scale.get_device()),
                   v_scale is None or
                   (v_scale.shape, v_scale.is_contiguous() or v_scale.stride(), v_scale.dtype, v_scale.get_device()),
                   max_seqlen_q, softmax_scale, causal, return_softmax_lse, cp_world_size, cp_rank,
                   cp_kv_cache_interleave_size, num_splits, kv_cache_dtype, descale)
            e = steady_entry(calls, sig, max_seqlen_k)
        except Exception:  # not all PyTorch tensors, or a scalar that cannot be hashed or compared
            sig = e = None
        if e is not None:
            _, _, plan, dev, raw_stream, new_out, new_lse, mla_view, fp8, batch, q0, q1, k0, k1, k2, v0, v1, v2, \
                pages, bts, o0, o1, l0, l1 = e
            kp = k_cache.data_ptr()
            vp = kp if v_cache is None or v_cache is k_cache else v_cache.data_ptr()
            if not mla_view or vp == kp:  # (else the general path says what is wrong)
                strm = raw_stream(dev) if stream is None else stream_handle(stream)
                if out is None:
                    out = new_out()
                lp = 0
                if return_softmax_lse:
                    if softmax_lse is None:
                        softmax_lse = new_lse()
                    lp = softmax_lse.data_ptr()
                if mla_view:
                    vp = kp
                _issue(plan, (batch, q.data_ptr(), q0, q1, kp, k0, k1, k2, vp, v0, v1, v2, pages,
                              block_table.data_ptr(), bts, cu_seqlens_q.data_ptr(), seqused_k.data_ptr(),
                              0 if cp_tot_seqused_k is None else cp_tot_seqused_k.data_ptr(), out.data_ptr(), o0, o1,
                              lp, l0, l1, k_scale.data_ptr() if fp8 else 0, v_scale.data_ptr() if fp8 else 0,
                              0, 0, 0, 0), strm)  # no sparse top-k ids, counts or sinks
                return (out, softmax_lse) if return_softmax_lse else out
    p = prepare(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, max_seqlen_q, max_seqlen_k, softmax_scale,
                causal, return_softmax_lse, cp_world_size, cp_rank, cp_tot_seqused_k, cp_kv_cache_interleave_size,
                out, num_splits, stream, softmax_lse, kv_cache_dtype, k_scale, v_scale, descale)
    launch(p)
    if sig is not None and p[5] is None and p[6] is None:
        _remember(sig, p, q, out is None, return_softmax_lse and softmax_lse is None)
    return (p[3], p[4]) if return_softmax_lse else p[3]


def _remember(sig, p, q, new_out, new_lse):
    """Makes a signature that passed the general path take the steady-state path: its plan,
    the values of the argument block that are not pointers, and how to allocate the outputs
    it was not given."""
    plan, v, _, out, lse, _, _, (lo, hi), mla_view, fp8 = p
    t = sys.modules["torch"]
    e = (lo, hi, plan, q.get_device(), _arrays.torch_stream(),
         functools.partial(t.empty, tuple(out.shape), dtype=out.dtype, device=out.device) if new_out else None,
         functools.partial(t.empty, tuple(lse.shape), dtype=lse.dtype, device=lse.device) if new_lse else None,
         mla_view, fp8, v[0], v[2], v[3], v[5], v[6], v[7], v[9], v[10], v[11], v[12], v[14], v[19], v[20], v[22],
         v[23])
    if len(calls) >= _MAX_CALLS:
        calls.clear()
    calls[sig] = e
