"""The DCP combine across the ranks of a group over the caller's NCCL communicator
(dcpattn_dcp_combine), and the hang-free wait (dcpattn_dcp_wait)."""

from ctypes import byref, c_size_t

from . import _cuda, _lib
from ._arrays import call_stream, empty, parse, stream_handle, workspace
from ._lib import ArgumentError, DcpCombineArgs
from ._runtime import data_ptr, device, dtype_code, dtype_name, lock, order_after, same_device, strides_for_c

CALL = "dcp_combine"
_pack = _lib.packer(DcpCombineArgs).pack_into
_TRANSPORTS = {"a2a": _lib.DCP_A2A, "ag_rs": _lib.DCP_AG_RS, _lib.DCP_A2A: _lib.DCP_A2A,
               _lib.DCP_AG_RS: _lib.DCP_AG_RS}
_LAYOUTS = {"scatter": _lib.DCP_SCATTER, "replicate": _lib.DCP_REPLICATE, _lib.DCP_SCATTER: _lib.DCP_SCATTER,
            _lib.DCP_REPLICATE: _lib.DCP_REPLICATE}
_DTYPES = {None: 0, "bfloat16": _lib.BF16, "float16": _lib.FP16, "float32": _lib.FP32}

# argument shapes seen (everything but the pointers) -> the workspace their combine uses,
# its kernels already loaded (dcpattn_dcp_combine_prepare), so that a captured combine
# allocates and loads nothing
workspaces = {}
# device -> [(owner, ptr, bytes), ...]: the combine workspace of each device, grown when a
# combine needs more; the smaller ones stay alive for graphs that recorded them
_pools = {}


def comm_handle(comm):
    """An ncclComm_t given as an int (torch.distributed's _comm_ptr()), a ctypes pointer
    (vLLM's PyNcclCommunicator.comm) or None."""
    if comm is None:
        return 0
    if isinstance(comm, int):
        return comm
    if hasattr(comm, "value"):
        return int(comm.value or 0)
    raise ArgumentError("comm: %r is not an ncclComm_t (an int or a ctypes pointer)" % (comm,), CALL)


def _workspace(key, values, like, dev):
    """The workspace (pointer, bytes) for a configuration seen for the first time: its size
    from the library, its kernels loaded, the device's pool grown if it is too small."""
    lib = _lib.get()
    a = DcpCombineArgs()
    _pack(a, 0, *values)
    need = c_size_t()
    lib.check(lib.dcpattn_dcp_combine_workspace_size(byref(a), byref(need)), "dcpattn_dcp_combine_workspace_size")
    if not need.value:  # every check the buffers allow, on the host, before any device work
        lib.check(lib.dcpattn_dcp_combine_validate(byref(a)), "dcpattn_dcp_combine_validate")
    d = device(dev)
    with lock:
        pool = _pools.setdefault(dev, [])
        pushed = _cuda.enter(d.cu_ctx)
        try:
            lib.check(lib.dcpattn_dcp_combine_prepare(d.ctx, byref(a)), "dcpattn_dcp_combine_prepare")
            if need.value and (not pool or pool[-1][2] < need.value):
                size = max(need.value, pool[-1][2] * 5 // 4 if pool else 0)
                owner, ptr = workspace(like, size, dev, d.cu_ctx)
                pool.append((owner, ptr, size))
        finally:
            _cuda.leave(pushed)
        ws = (pool[-1][1], pool[-1][2]) if need.value else (0, 0)
        workspaces[key] = ws
    return ws


def dcp_combine(o, lse, comm=None, *, world_size=1, rank=0, layout="scatter", transport="a2a", out=None,
                out_lse=None, return_lse=False, out_dtype=None, comm_dtype=None, rows_limit=None, lse_base2_in=False,
                lse_base2_out=False, stream=None):
    """Merges the partial states of the W ranks of a DCP group (dcpattn_dcp_combine).

    o          this rank's partial output [T, H, Dv] (bfloat16, float16 or float32)
    lse        its float32 LSE [T, H] (any strides: FlashAttention's [H, T] LSE is passed
               as lse.T, the head-major layout with which the a2a/scatter combine sends o
               and lse without packing them)
    comm       the group's ncclComm_t (an int, e.g. torch.distributed's
               group._get_backend(torch.device("cuda"))._comm_ptr(), or a ctypes pointer,
               e.g. vLLM's PyNcclCommunicator.comm); None only with world_size = 1. Its size,
               rank and device must be world_size, rank and o's device, and every rank must
               call with the same shapes, dtypes, strides, transport and layout
    layout     "scatter": this rank receives heads [rank*H/W, (rank+1)*H/W), out [T, H/W, Dv];
               "replicate": every rank receives all heads, out [T, H, Dv]
    transport  "a2a": one all-to-all then a merge; "ag_rs": all-gather of the LSE, a local
               rescale, a reduce-scatter (all-reduce when replicated) in comm_dtype
    out, out_lse  written when given, else allocated (out_lse with return_lse); out_dtype
               and comm_dtype default to o's dtype
    rows_limit optional int32 device array whose first element bounds the rows the kernels
               touch (e.g. cu_seqlens_q[batch:])
    Returns out, or (out, out_lse). Calls on one device share one workspace: issue them in
    one stream order."""
    strm = call_stream(stream, o)
    world, rnk = int(world_size), int(rank)
    tr, lay = _TRANSPORTS.get(transport), _LAYOUTS.get(layout)
    if tr is None or lay is None:
        raise ArgumentError("transport = %r (\"a2a\" or \"ag_rs\"), layout = %r (\"scatter\" or \"replicate\")"
                            % (transport, layout), CALL)
    op, os_, ost, odt, odev, osy, okeep = parse(o, "o", strm, False, CALL)
    if len(os_) != 3:
        raise ArgumentError("o must be [T, H, Dv], got shape %s" % (tuple(os_),), CALL)
    T, H, D = os_
    in_code = dtype_code(CALL, "o", odt)
    ost = strides_for_c(CALL, "o", os_, ost)
    lp, ls, lst, ldt, ldev, lsy, lkeep = parse(lse, "lse", strm, False, CALL)
    if tuple(ls) != (T, H) or ldt != "float32":
        raise ArgumentError("lse must be float32 [%d, %d] (T, H), got %s %s" % (T, H, ldt, tuple(ls)), CALL)
    lst = strides_for_c(CALL, "lse", ls, lst, False)
    if not 1 <= world <= _lib.MAX_MERGE_STATES:
        raise ArgumentError("world_size = %d (1..%d)" % (world, _lib.MAX_MERGE_STATES), CALL)
    if H % world:
        raise ArgumentError("H = %d heads over world_size = %d ranks (H must be a multiple of it)" % (H, world), CALL)
    hout = H // world if lay == _lib.DCP_SCATTER else H
    handle = comm_handle(comm)
    if world > 1 and not handle:
        raise ArgumentError("comm (the group's ncclComm_t) is required with world_size = %d" % world, CALL)
    out_dt = dtype_name(out_dtype)
    comm_code = _DTYPES.get(dtype_name(comm_dtype), -1)
    if comm_code < 0:
        raise ArgumentError("comm_dtype = %r (bfloat16, float16 or float32)" % (comm_dtype,), CALL)
    arrays = [("o", odev, op), ("lse", ldev, lp)]
    producers = [osy, lsy]
    keep = [okeep, lkeep]  # DLPack capsules: alive until the launch is issued
    outp = lop = rlp = 0
    if out is not None:
        outp, s, outst, dt, dev, sy, kp = parse(out, "out", strm, True, CALL)
        if tuple(s) != (T, hout, D) or (out_dt is not None and dt != out_dt):
            raise ArgumentError("out must be %s[%d, %d, %d], got %s %s" % (out_dt + " " if out_dt else "", T, hout,
                                                                           D, dt, tuple(s)), CALL)
        out_dt = dt
        outst = strides_for_c(CALL, "out", s, outst)
        arrays.append(("out", dev, outp))
        producers.append(sy)
        keep.append(kp)
    out_code = dtype_code(CALL, "out", out_dt or odt)
    if out_lse is not None:
        lop, s, lost, dt, dev, sy, kp = parse(out_lse, "out_lse", strm, True, CALL)
        if tuple(s) != (T, hout) or dt != "float32":
            raise ArgumentError("out_lse must be float32 [%d, %d], got %s %s" % (T, hout, dt, tuple(s)), CALL)
        lost = strides_for_c(CALL, "out_lse", s, lost, False)
        arrays.append(("out_lse", dev, lop))
        producers.append(sy)
        keep.append(kp)
    if rows_limit is not None:
        rlp, s, _, dt, dev, sy, kp = parse(rows_limit, "rows_limit", strm, False, CALL)
        if dt != "int32" or not s or s[0] < 1:
            raise ArgumentError("rows_limit must be an int32 array of at least one element, got %s %s"
                                % (dt, tuple(s)), CALL)
        arrays.append(("rows_limit", dev, rlp))
        producers.append(sy)
        keep.append(kp)
    dev = same_device(CALL, arrays)
    if out is None:
        out = empty(o, (T, hout, D), None if (out_dt or odt) == odt else out_dt, dev, "out", CALL)
        outp, outst = data_ptr(out), (hout * D, D, 1)
    if out_lse is None and return_lse:
        out_lse = empty(o, (T, hout), "float32", dev, "out_lse", CALL)
        lop, lost = data_ptr(out_lse), (hout, 1)
    if lop == 0:
        lost = (0, 0)
    values = [world, rnk, T, H, D, tr, lay, in_code, out_code, comm_code, op, ost[0], ost[1], lp, lst[0], lst[1],
              outp, outst[0], outst[1], lop, lost[0], lost[1], rlp, int(bool(lse_base2_in)),
              int(bool(lse_base2_out)), 0, 0]
    key = (dev, tuple(values[:10]), tuple(ost[:2]), tuple(lst), tuple(outst[:2]), tuple(lost), bool(lop),
           bool(rlp), values[23], values[24])
    ws = workspaces.get(key)
    if ws is None:
        ws = _workspace(key, values, o, dev)
    values[25], values[26] = ws
    lib = _lib.get()
    d = device(dev)
    a = DcpCombineArgs()
    pushed = _cuda.enter(d.cu_ctx)
    try:
        if any(producers):
            order_after(d, strm, [p for p in producers if p])
        _pack(a, 0, *values)
        # without the GIL: NCCL may wait for the other ranks, which may be threads of this process
        s = lib.dcpattn_dcp_combine(d.ctx, handle, byref(a), strm)
    finally:
        _cuda.leave(pushed)
    if s:
        lib.check(s, "dcpattn_dcp_combine")
    return (out, out_lse) if (return_lse or out_lse is not None) else out


def dcp_wait(comm=None, stream=None, timeout_ms=-1):
    """Waits for `stream` (default: as dcp_combine) without hanging (dcpattn_dcp_wait):
    returns when it is done; raises DcpattnError with status NCCL when the communicator
    reports an asynchronous error (a peer died), TIMEOUT after timeout_ms (< 0: no limit).
    The communicator is left as it is."""
    lib = _lib.get()
    strm = stream_handle(stream) if stream is not None else call_stream(None, None)
    lib.check(lib.dcpattn_dcp_wait(comm_handle(comm), strm, int(timeout_ms)), "dcpattn_dcp_wait")
