"""The few CUDA driver calls the package makes itself (ctypes on libcuda.so.1, as the C
library opens it): the primary context of a device made current around a call, the device
of a raw pointer (__cuda_array_interface__ has no device field), an event wait between two
streams, and device memory for callers whose arrays come from neither PyTorch nor CuPy."""

import ctypes
import os
import threading
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_void_p

from ._lib import STATUS, ArgumentError, DcpattnError

_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_EVENT_DISABLE_TIMING = 2


class _Driver:
    def __init__(self):
        path = os.environ.get("DCPATTN_CUDA_LIBRARY") or "libcuda.so.1"
        lib = ctypes.CDLL(path)
        # cuCtxGetCurrent runs on every call: through PyDLL, without releasing the GIL, and
        # given the address of a thread's word as an int (no byref object per call)
        self.getcur = ctypes.PyDLL(path).cuCtxGetCurrent
        self.getcur.restype, self.getcur.argtypes = c_int, [c_void_p]
        for name, args in (("cuInit", [c_uint]), ("cuDeviceGet", [POINTER(c_int), c_int]),
                           ("cuDevicePrimaryCtxRetain", [POINTER(c_void_p), c_int]),
                           ("cuCtxPushCurrent_v2", [c_void_p]), ("cuCtxPopCurrent_v2", [POINTER(c_void_p)]),
                           ("cuPointerGetAttribute", [c_void_p, c_int, c_void_p]),
                           ("cuEventCreate", [POINTER(c_void_p), c_uint]), ("cuEventRecord", [c_void_p, c_void_p]),
                           ("cuStreamWaitEvent", [c_void_p, c_void_p, c_uint]),
                           ("cuMemAlloc_v2", [POINTER(c_void_p), c_size_t]), ("cuMemFree_v2", [c_void_p]),
                           ("cuGetErrorString", [c_int, POINTER(ctypes.c_char_p)])):
            f = getattr(lib, name)
            f.restype, f.argtypes = c_int, args
            setattr(self, name, f)

    def check(self, r, what):
        if r:
            msg = ctypes.c_char_p()
            self.cuGetErrorString(r, byref(msg))
            raise DcpattnError(STATUS["CUDA"], "%s failed: CUDA error %d (%s)" %
                               (what, r, (msg.value or b"?").decode()), "dcpattn")


_drv = None
_lock = threading.Lock()


def driver():
    global _drv
    if _drv is None:
        with _lock:
            if _drv is None:
                try:
                    d = _Driver()
                except OSError as e:
                    raise DcpattnError(STATUS["NO_DRIVER"], "CUDA driver: %s" % e, "dcpattn") from None
                d.check(d.cuInit(0), "cuInit")
                _drv = d
    return _drv


def primary_context(index):
    d = driver()
    dev, ctx = c_int(), c_void_p()
    d.check(d.cuDeviceGet(byref(dev), index), "cuDeviceGet(%d)" % index)
    d.check(d.cuDevicePrimaryCtxRetain(byref(ctx), dev.value), "cuDevicePrimaryCtxRetain(%d)" % index)
    return ctx.value


_local = threading.local()


def current_word():
    """This thread's word for cuCtxGetCurrent and its address: `_drv.getcur(address)` puts
    the current context in word.value (a thread's own, as another thread may run between the
    call and the read)."""
    try:
        return _local.word
    except AttributeError:
        w = c_void_p()
        _local.word = (w, ctypes.addressof(w))
        return _local.word


def push(cu_ctx):
    _drv.check(_drv.cuCtxPushCurrent_v2(cu_ctx), "cuCtxPushCurrent")
    return True


def enter(cu_ctx):
    """Makes cu_ctx current unless it is; True when it was pushed (leave() pops it)."""
    cur, addr = current_word()
    _drv.getcur(addr)
    return cur.value != cu_ctx and push(cu_ctx)


def leave(pushed):
    if pushed:
        _drv.cuCtxPopCurrent_v2(byref(c_void_p()))


def pointer_device(ptr, name):
    d = driver()
    dev = c_int(-1)
    r = d.cuPointerGetAttribute(byref(dev), _POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    if r:
        raise ArgumentError("%s: data pointer 0x%x is not CUDA device memory (CUDA error %d)" % (name, ptr, r))
    return dev.value


class Event:
    """One event per device for stream-to-stream waits; recorded and waited on at once, so
    reusing it is safe."""

    def __init__(self):
        d = driver()
        ev = c_void_p()
        d.check(d.cuEventCreate(byref(ev), _EVENT_DISABLE_TIMING), "cuEventCreate")
        self.handle = ev.value

    def order(self, waiter, producer):
        d = _drv
        d.check(d.cuEventRecord(self.handle, producer), "cuEventRecord")
        d.check(d.cuStreamWaitEvent(waiter, self.handle, 0), "cuStreamWaitEvent")


class DeviceBuffer:
    """cuMemAlloc'd bytes in a device's primary context (the current one when created)."""

    def __init__(self, nbytes, cu_ctx):
        d = driver()
        p = c_void_p()
        d.check(d.cuMemAlloc_v2(byref(p), max(nbytes, 1)), "cuMemAlloc(%d)" % nbytes)
        self.ptr, self.cu_ctx = p.value, cu_ctx

    def __del__(self):
        try:
            pushed = enter(self.cu_ctx)
            _drv.cuMemFree_v2(self.ptr)
            leave(pushed)
        except Exception:  # interpreter shutdown: the process frees it
            pass
