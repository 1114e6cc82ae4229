"""What the entry points share: one dcpattn context per device (created in that device's
primary context, the one PyTorch and CuPy use), the checks that several of them make, the
ordering after producer streams, and the cache lock."""

import ctypes
import threading
from ctypes import byref, c_void_p

from . import _cuda, _lib
from ._arrays import UNKNOWN_DEVICE, parse
from ._lib import ArgumentError

lock = threading.RLock()  # every cache miss (contexts, plans, workspaces) runs under it


class Device:
    __slots__ = ("index", "cu_ctx", "ctx", "event", "__weakref__")

    def __init__(self, index):
        lib = _lib.get()
        self.index, self.event = index, None
        self.cu_ctx = _cuda.primary_context(index)
        ctx = c_void_p()
        pushed = _cuda.enter(self.cu_ctx)
        try:
            lib.check(lib.dcpattn_context_create(byref(_lib.ContextDesc()), byref(ctx)), "dcpattn_context_create")
        finally:
            _cuda.leave(pushed)
        self.ctx = ctx.value


_devices = {}


def device(index):
    d = _devices.get(index)
    if d is None:
        with lock:
            d = _devices.get(index)
            if d is None:
                d = _devices[index] = Device(index)
    return d


def order_after(dev, stream, producers):
    """Makes `stream` wait for the streams a __cuda_array_interface__ v3 producer named
    (1 and 0 are both the legacy default stream)."""
    for p in set(producers):
        if p is None or p == stream or (p == 1 and stream == 0):
            continue
        if dev.event is None:
            dev.event = _cuda.Event()
        dev.event.order(stream, p)


def same_device(call, arrays):
    """The one device of (name, device, ptr) triples, finding the device of raw pointers
    (__cuda_array_interface__) from the driver; a mismatch is an ArgumentError."""
    first = arrays[0][1]
    if first >= 0 and all(a[1] == first or a[1] is None for a in arrays):
        return first
    found = {}
    for name, dev, ptr in arrays:
        if dev == UNKNOWN_DEVICE:
            dev = _cuda.pointer_device(ptr, name) if ptr else None
        if dev is not None:
            found.setdefault(dev, []).append(name)
    if len(found) > 1:
        raise ArgumentError("arrays on different devices: " + "; ".join(
            "%s on cuda:%d" % (", ".join(names), d) for d, names in sorted(found.items())), call)
    return next(iter(found)) if found else 0


def strides_for_c(call, name, shape, strides, last_contiguous=True):
    """Element strides as the C API takes them: a dimension of extent <= 1 gets 0 (the
    API's default: its stride is never used, and an odd one would fail the alignment
    checks); the last dimension must be contiguous (unless last_contiguous is False: LSE
    arrays); negative and broadcast (0) strides are rejected, since 0 means "contiguous" to
    the C API."""
    out = []
    for n, s in zip(shape, strides):
        if n <= 1:
            out.append(0)
        elif s <= 0:
            raise ArgumentError("%s: stride %d in strides %s (negative and broadcast strides are not supported)"
                                % (name, s, tuple(strides)), call)
        else:
            out.append(s)
    if last_contiguous and len(shape) and shape[-1] > 1 and strides[-1] != 1:
        raise ArgumentError("%s: the last dimension must be contiguous (strides %s)" % (name, tuple(strides)), call)
    return out


def fast_strides(call, name, shape, strides):
    """strides_for_c at the cost of two tests where nothing needs fixing: the last stride 1
    and no 0 stride (a negative one has been rejected when the array was read, and PyTorch
    has none). The strides of extent-1 dimensions then reach the C API as they are; PyTorch
    gives them the contiguous value, which its checks take."""
    if strides[-1] == 1 and 0 not in strides:
        return strides
    return strides_for_c(call, name, shape, strides)


def index_array(call, name, x, stream, ndim, min_rows):
    """An int32 array (cu_seqlens_q, seqused_k, block_table...) with at least min_rows
    rows and a contiguous last dimension."""
    p, s, st, dt, dev, sync, keep = parse(x, name, stream, False, call)
    if len(s) != ndim:
        raise ArgumentError("%s must have %d dimension%s, got shape %s" % (name, ndim, "s" if ndim > 1 else "",
                                                                           tuple(s)), call)
    if dt != "int32":
        raise ArgumentError("%s dtype is %s (int32 expected)" % (name, dt), call)
    if s[0] < min_rows:
        raise ArgumentError("%s has %d rows, the batch needs %d" % (name, s[0], min_rows), call)
    if s[-1] > 1 and st[-1] != 1:
        raise ArgumentError("%s must be contiguous in its last dimension (strides %s)" % (name, tuple(st)), call)
    return p, s, st, dev, sync, keep


def dtype_code(call, name, dt):
    code = {"bfloat16": _lib.BF16, "float16": _lib.FP16, "float32": _lib.FP32}.get(dt)
    if code is None:
        raise ArgumentError("%s dtype is %s (bfloat16, float16 or float32 expected)" % (name, dt), call)
    return code


def dtype_name(dt):
    """A dtype given as a name or as a library's dtype object ("torch.bfloat16" -> "bfloat16")."""
    return None if dt is None else str(dt).rpartition(".")[2]


def data_ptr(x):
    """The device pointer of an array dcpattn allocated (PyTorch or CuPy)."""
    p = getattr(x, "data_ptr", None)
    return p() if p is not None else x.data.ptr


_tls = threading.local()


def thread_buffer(struct_cls, pointers=0):
    """This thread's ctypes buffer for one argument block of struct_cls, its address and, when
    asked, two host arrays of `pointers` device pointers with their addresses: a block is
    filled and handed to the library by one thread at a time (another thread may run between
    any two bytecodes)."""
    d = _tls.__dict__
    b = d.get(struct_cls)
    if b is None:
        buf = ctypes.create_string_buffer(ctypes.sizeof(struct_cls))
        b = [buf, ctypes.addressof(buf)]
        for _ in range(2 if pointers else 0):
            arr = (c_void_p * pointers)()
            b += [arr, ctypes.addressof(arr)]
        b = d[struct_cls] = tuple(b)
    return b


def clear_cache():
    """Forgets every plan and workspace (contexts stay). Graphs captured before keep the
    pointers they recorded: replaying them afterwards needs the caller to keep the cache."""
    from . import _attention, _combine, _sparse

    with lock:
        _attention.calls.clear()
        _sparse.calls.clear()
        _attention.plans.clear()
        _combine.workspaces.clear()
