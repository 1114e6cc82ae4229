"""Exact merges of partial attention states: vLLM's two-way merge_attn_states and an N-way
merge_states (dcpattn_merge)."""

import ctypes
import struct
from ctypes import byref, c_void_p

from . import _cuda, _lib
from ._arrays import call_stream, empty, parse
from ._lib import ArgumentError, MergeArgs
from ._runtime import (data_ptr, device, dtype_code, dtype_name, lock, order_after, same_device, strides_for_c,
                       thread_buffer)

_pack = _lib.packer(MergeArgs).pack_into
_ptr_structs = {}
_loaded = set()  # (device, in dtype, out dtype) merged once: the kernel is loaded, the call cannot compile
_ITEMSIZE = {_lib.BF16: 2, _lib.FP16: 2, _lib.FP32: 4}


def _states(call, what, xs, ndim, stream, names=None):
    """A sequence of arrays (named names[i], else what[i]), or one array stacked along a
    first dimension, as (pointers, shape, strides, dtype, devices, producers, keepalive) of
    the states; every state must have the same shape, dtype and strides (the C API takes
    one stride pair for all)."""
    if isinstance(xs, (list, tuple)):
        if not xs:
            raise ArgumentError("%s is empty" % what, call)
        ptrs, devs, prods, keep = [], [], [], []
        first = None
        for i, x in enumerate(xs):
            try:
                p, s, st, dt, dev, sy, kp = parse(x, what, stream, False, call)
            except ArgumentError:  # again, to name the state in the message
                parse(x, names[i] if names else "%s[%d]" % (what, i), stream, False, call)
                raise
            if first is None:
                first = (s, st, dt)
            elif s != first[0] or dt != first[2] or (st != first[1] and strides_for_c(call, what, s, st, ndim == 3)
                                                       != strides_for_c(call, what, first[0], first[1], ndim == 3)):
                name = names[i] if names else "%s[%d]" % (what, i)
                raise ArgumentError("%s is %s %s with strides %s, %s is %s %s with strides %s: the states must have "
                                    "the same shape, dtype and strides"
                                    % (name, dt, tuple(s), tuple(st), names[0] if names else what + "[0]",
                                       first[2], tuple(first[0]), tuple(first[1])), call)
            ptrs.append(p)
            devs.append((names[i] if names else what, dev, p))
            prods.append(sy)
            keep.append(kp)
        s, st, dt = first
        if len(s) != ndim:
            raise ArgumentError("%s must have %d dimensions, got shape %s"
                                % (names[0] if names else what + "[0]", ndim, tuple(s)), call)
        return ptrs, tuple(s), strides_for_c(call, what, s, st, ndim == 3), dt, devs, prods, keep
    p, s, st, dt, dev, sy, kp = parse(xs, what, stream, False, call)
    if len(s) != ndim + 1:
        raise ArgumentError("%s must be a sequence of arrays or one array of %d dimensions (states first), got "
                            "shape %s" % (what, ndim + 1, tuple(s)), call)
    step = st[0] * (4 if dt in ("float32", "int32") else 2)
    st = strides_for_c(call, what, s[1:], st[1:], ndim == 3)
    return [p + i * step for i in range(s[0])], tuple(s[1:]), st, dt, [(what, dev, p)], [sy], [kp]


def _run(call, dev, stream, n, rows, heads, dim, in_code, out_code, optrs, o_st, lptrs, l_st, out_ptr, out_st,
         lo_ptr, lo_st, base2_in, base2_out, producers):
    if not 1 <= n <= _lib.MAX_MERGE_STATES:
        raise ArgumentError("%d states (1..%d)" % (n, _lib.MAX_MERGE_STATES), call)
    if rows == 0:
        return
    lib = _lib.get()
    key = (dev, in_code, out_code)
    first = key not in _loaded
    if first:
        # the first merge of these dtypes on this device may compile its kernel: without the
        # GIL, with its own argument block, checked on the host before anything else
        ob, lb, a = (c_void_p * n)(*optrs), (c_void_p * n)(*lptrs), MergeArgs()
        _pack(a, 0, n, rows, heads, dim, in_code, out_code, ctypes.addressof(ob), ctypes.addressof(lb),
              o_st[0], o_st[1], l_st[0], l_st[1], out_ptr, lo_ptr, out_st[0], out_st[1], lo_st[0], lo_st[1],
              base2_in, base2_out)
        lib.check(lib.dcpattn_merge_validate(byref(a)), "dcpattn_merge_validate")
    d = device(dev)
    pushed = _cuda.enter(d.cu_ctx)
    try:
        if producers:
            order_after(d, stream, producers)
        if first:
            s = lib.dcpattn_merge(d.ctx, byref(a), stream)
            if not s:
                with lock:
                    _loaded.add(key)
        else:
            buf, addr, ob, oaddr, lb, laddr = thread_buffer(MergeArgs, _lib.MAX_MERGE_STATES)
            ps = _ptr_structs.get(n) or _ptr_structs.setdefault(n, struct.Struct("=%dQ" % n))
            ps.pack_into(ob, 0, *optrs)
            ps.pack_into(lb, 0, *lptrs)
            _pack(buf, 0, n, rows, heads, dim, in_code, out_code, oaddr, laddr, o_st[0], o_st[1], l_st[0], l_st[1],
                  out_ptr, lo_ptr, out_st[0], out_st[1], lo_st[0], lo_st[1], base2_in, base2_out)
            s = lib.merge_gil(d.ctx, addr, stream)
    finally:
        _cuda.leave(pushed)
    if s:
        lib.check(s, "dcpattn_merge")


def _output(call, name, x, shape, dtype, stream, last_contiguous):
    p, s, st, dt, dev, sy, kp = parse(x, name, stream, True, call)
    if tuple(s) != tuple(shape) or (dtype is not None and dt != dtype):
        raise ArgumentError("%s must be %s%s, got %s %s" % (name, dtype + " " if dtype else "", list(shape), dt,
                                                             tuple(s)), call)
    return p, strides_for_c(call, name, s, st, last_contiguous), dt, dev, sy, kp


def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None, *,
                      stream=None):
    """vLLM's merge_attn_states: the exact merge of two partial attention states.

    prefix_output, suffix_output  [num_tokens, num_heads, head_size], bfloat16, float16 or
                                  float32, the same strides
    prefix_lse, suffix_lse        float32 [num_heads, num_tokens] (FlashAttention's layout),
                                  natural log; a non-finite LSE marks an empty state
    output                        [num_tokens, num_heads, head_size] (bfloat16, float16 or
                                  float32), written; may be prefix_output itself
    output_lse                    float32 [num_heads, num_tokens], written when given
    Returns None, as vLLM's does."""
    call = "merge_attn_states"
    strm = call_stream(stream, prefix_output)
    optrs, oshape, o_st, in_dt, odevs, oprods, okeep = _states(call, "outputs", [prefix_output, suffix_output], 3,
                                                               strm, ("prefix_output", "suffix_output"))
    T, H, D = oshape
    lptrs, lshape, l_st, l_dt, ldevs, lprods, lkeep = _states(call, "lses", [prefix_lse, suffix_lse], 2, strm,
                                                              ("prefix_lse", "suffix_lse"))
    if lshape != (H, T) or l_dt != "float32":
        raise ArgumentError("prefix_lse and suffix_lse must be float32 [%d, %d] (num_heads, num_tokens), got %s %s"
                            % (H, T, l_dt, lshape), call)
    in_code = dtype_code(call, "prefix_output", in_dt)
    out_ptr, out_st, out_dt, out_dev, out_sy, out_keep = _output(call, "output", output, oshape, None, strm, True)
    out_code = dtype_code(call, "output", out_dt)
    lo_ptr, lo_st, lo_dev, lo_sy, lo_keep = 0, (0, 0), None, None, None
    if output_lse is not None:
        lo_ptr, lo_st, _, lo_dev, lo_sy, lo_keep = _output(call, "output_lse", output_lse, (H, T), "float32", strm,
                                                           False)
    dev = same_device(call, odevs + ldevs + [("output", out_dev, out_ptr), ("output_lse", lo_dev, lo_ptr)])
    _run(call, dev, strm, 2, T, H, D, in_code, out_code, optrs, o_st[:2], lptrs, (l_st[1], l_st[0]), out_ptr,
         out_st[:2], lo_ptr, (lo_st[1], lo_st[0]), 0, 0, [p for p in oprods + lprods + [out_sy, lo_sy] if p])


def merge_states(outs, lses, out=None, out_lse=None, *, return_lse=False, out_dtype=None, lse_base2_in=False,
                 lse_base2_out=False, stream=None):
    """The exact merge of N partial attention states (dcpattn_merge; N = 1..64).

    outs   N arrays [T, H, D] (bfloat16, float16 or float32, the same strides), or one
           array [N, T, H, D]
    lses   N float32 arrays [T, H], or one [N, T, H]; natural log (base 2 with
           lse_base2_in); a non-finite LSE marks an empty state. FlashAttention's [H, T]
           LSE is passed transposed (lse.T: a view, no copy)
    out    [T, H, D] to write (may be outs[0] itself); allocated when None, of out_dtype
           ("bfloat16", "float16", "float32"; None: the inputs' dtype)
    out_lse  float32 [T, H] to write the merged LSE into (allocated with return_lse)
    Returns out, or (out, out_lse) with return_lse or out_lse. Rows whose states are all
    empty get zeros and -inf."""
    call = "merge_states"
    out_dtype = dtype_name(out_dtype)
    first = outs[0] if isinstance(outs, (list, tuple)) and outs else outs
    strm = call_stream(stream, first)
    optrs, oshape, o_st, in_dt, odevs, oprods, okeep = _states(call, "outs", outs, 3, strm)
    T, H, D = oshape
    lptrs, lshape, l_st, l_dt, ldevs, lprods, lkeep = _states(call, "lses", lses, 2, strm)
    if len(lptrs) != len(optrs):
        raise ArgumentError("%d outs and %d lses" % (len(optrs), len(lptrs)), call)
    if lshape != (T, H) or l_dt != "float32":
        raise ArgumentError("lses must be float32 [%d, %d] (T, H) each, got %s %s" % (T, H, l_dt, lshape), call)
    in_code = dtype_code(call, "outs", in_dt)
    out_ptr, out_dev, lo_dev, out_sy, lo_sy = 0, None, None, None, None
    keep = [okeep, lkeep]  # DLPack capsules: alive until the launch is issued
    if out is not None:
        out_ptr, out_st, out_dt, out_dev, out_sy, kp = _output(call, "out", out, oshape, out_dtype, strm, True)
        keep.append(kp)
    else:
        out_dt = out_dtype or in_dt
    out_code = dtype_code(call, "out", out_dt)
    lo_ptr, lo_st = 0, (0, 0)
    if out_lse is not None:
        lo_ptr, lo_st, _, lo_dev, lo_sy, kp = _output(call, "out_lse", out_lse, (T, H), "float32", strm, False)
        keep.append(kp)
    dev = same_device(call, odevs + ldevs + [("out", out_dev, out_ptr), ("out_lse", lo_dev, lo_ptr)])
    if out is None:
        out = empty(first, oshape, None if out_dt == in_dt else out_dt, dev, "out", call)
        out_ptr, out_st = data_ptr(out), (H * D, D, 1)
    if out_lse is None and return_lse:
        out_lse = empty(first, (T, H), "float32", dev, "out_lse", call)
        lo_ptr, lo_st = data_ptr(out_lse), (H, 1)
    _run(call, dev, strm, len(optrs), T, H, D, in_code, out_code, optrs, o_st[:2], lptrs, l_st, out_ptr, out_st[:2],
         lo_ptr, lo_st, int(bool(lse_base2_in)), int(bool(lse_base2_out)),
         [p for p in oprods + lprods + [out_sy, lo_sy] if p])
    return (out, out_lse) if (return_lse or out_lse is not None) else out
