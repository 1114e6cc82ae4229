"""CUDA arrays of any library, seen as (pointer, shape, strides, dtype, device), without
importing any array library: PyTorch tensors through their own accessors when torch is
already imported (the cheapest path), then __cuda_array_interface__ (v2/v3), then DLPack
(__dlpack__ / __dlpack_device__). Also: the stream of a call, and allocation through the
library the caller's arrays come from."""

import ctypes
import sys
from ctypes import POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p

from . import _cuda
from ._lib import ArgumentError

UNKNOWN_DEVICE = -2  # __cuda_array_interface__ has no device field: found from the pointer when needed

# parse() returns (ptr, shape, strides, dtype, device, producer_stream, keepalive):
# strides in elements; dtype a name ("bfloat16", "int32", ...); producer_stream the stream a
# __cuda_array_interface__ v3 producer asks the consumer to order after (None: none);
# keepalive what must live until the launch was issued (a DLPack capsule).

_CAI_TYPES = {"<f2": "float16", "<f4": "float32", "<f8": "float64", "<i4": "int32", "<i8": "int64",
              "|u1": "uint8", "|i1": "int8", "<u4": "uint32", "<i2": "int16", "<u2": "uint16"}
_DL_TYPES = {(2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16", (0, 32): "int32",
             (0, 64): "int64", (1, 8): "uint8", (0, 8): "int8", (0, 16): "int16", (1, 32): "uint32",
             (10, 8): "float8_e4m3fn"}
_DL_DEVICES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm",
               11: "ROCm host", 13: "CUDA managed", 14: "oneAPI"}
_DL_CUDA, _DL_CUDA_MANAGED = 2, 13
_DL_FLAG_READ_ONLY = 1


class _DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _DLDevice), ("ndim", c_int32), ("dtype", _DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class _DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p), ("flags", c_uint64),
                ("dl_tensor", DLTensor)]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = c_void_p, [ctypes.py_object, ctypes.c_char_p]

tensor_type = None  # torch.Tensor, once torch has been imported by someone
_torch_dtypes = {}


def find_torch():
    global tensor_type
    t = sys.modules.get("torch")
    tt = getattr(t, "Tensor", None) if t is not None else None
    if tt is not None and getattr(t, "bfloat16", None) is not None:
        _torch_dtypes.update({t.bfloat16: "bfloat16", t.float16: "float16", t.float32: "float32",
                              t.float64: "float64", t.int32: "int32", t.int64: "int64", t.uint8: "uint8"})
        if getattr(t, "float8_e4m3fn", None) is not None:
            _torch_dtypes[t.float8_e4m3fn] = "float8_e4m3fn"
        tensor_type = tt
    return tensor_type


def is_torch(x):
    tt = tensor_type or find_torch()
    return tt is not None and isinstance(x, tt)


def contiguous(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


def describe(x):
    t = type(x)
    return "%s.%s" % (t.__module__, t.__qualname__)


def parse(x, name, stream=0, writable=False, call="dcpattn"):
    """x as (ptr, shape, strides, dtype, device, producer_stream, keepalive); `stream` is the
    stream the call runs on, handed to a DLPack producer; `call` names the entry point in
    errors."""
    tt = tensor_type or find_torch()
    if tt is not None and isinstance(x, tt):
        dev = x.get_device()
        if dev < 0:
            raise ArgumentError("%s is on %s: dcpattn takes CUDA arrays" % (name, x.device), call)
        return (x.data_ptr(), x.shape, x.stride(), _torch_dtypes.get(x.dtype) or str(x.dtype), dev, None, None)
    if x is None:
        raise ArgumentError("%s is None: a CUDA array is required" % name, call)
    try:
        cai = x.__cuda_array_interface__
    except AttributeError:
        cai = None
    except Exception as e:  # e.g. a dtype the interface cannot express: DLPack may
        if not hasattr(x, "__dlpack__"):
            raise ArgumentError("%s: __cuda_array_interface__ of %s failed: %s" % (name, describe(x), e),
                                call) from None
        cai = None
    # an element type the interface cannot name (bfloat16 is "<V2" to some): DLPack names it
    if cai is not None and (not hasattr(x, "__dlpack__") or cai.get("typestr") in _CAI_TYPES):
        return _from_cai(cai, name, writable, call)
    if hasattr(x, "__dlpack__"):
        return _from_dlpack(x, name, stream, writable, call)
    raise ArgumentError("%s: %s is not a CUDA array (it has neither __cuda_array_interface__ nor __dlpack__)"
                        % (name, describe(x)), call)


def _from_cai(cai, name, writable, call):
    try:
        shape = tuple(int(n) for n in cai["shape"])
        typestr = cai["typestr"]
        ptr, readonly = cai["data"]
        strides = cai.get("strides")
    except (KeyError, TypeError, ValueError) as e:
        raise ArgumentError("%s: malformed __cuda_array_interface__ (%s: %s)" % (name, type(e).__name__, e),
                            call) from None
    if cai.get("mask") is not None:
        raise ArgumentError("%s: masked arrays (__cuda_array_interface__ with a mask) are not supported" % name, call)
    if typestr[:1] == "=":  # native order: little-endian on every platform CUDA runs on
        typestr = "<" + typestr[1:]
    dtype = _CAI_TYPES.get(typestr)
    if dtype is None:
        dtype = "typestr %r" % typestr
        if typestr[1:] in ("V2", "b2"):
            dtype += " (bfloat16 cannot be named by __cuda_array_interface__: pass such arrays through DLPack)"
    try:
        itemsize = int(typestr[2:])
    except ValueError:
        raise ArgumentError("%s: __cuda_array_interface__ typestr %r" % (name, typestr), call) from None
    if strides is None:
        est = contiguous(shape)
    else:
        est = []
        for s in strides:
            if s % itemsize:
                raise ArgumentError("%s: byte stride %d is not a multiple of the element size %d"
                                    % (name, s, itemsize), call)
            est.append(s // itemsize)
        est = tuple(est)
    if len(est) != len(shape):
        raise ArgumentError("%s: %d strides for %d dimensions" % (name, len(est), len(shape)), call)
    _no_negative(est, name, call)
    if writable and readonly:
        raise ArgumentError("%s is read-only (__cuda_array_interface__ data[1] is True)" % name, call)
    return (ptr or 0, shape, est, dtype, UNKNOWN_DEVICE, cai.get("stream"), None)


def _no_negative(strides, name, call):
    if any(s < 0 for s in strides):
        raise ArgumentError("%s: negative strides %s are not supported" % (name, tuple(strides)), call)


def _require_cuda(dev_type, name, call):
    if dev_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise ArgumentError("%s is on DLPack device type %d (%s): dcpattn takes CUDA arrays"
                            % (name, dev_type, _DL_DEVICES.get(dev_type, "unknown")), call)


def _from_dlpack(x, name, stream, writable, call):
    dev_fn = getattr(x, "__dlpack_device__", None)
    if dev_fn is not None:  # before __dlpack__, which a CPU producer may refuse a stream for
        _require_cuda(int(dev_fn()[0]), name, call)
    # DLPack's stream numbers for CUDA: 1 = the legacy default stream (0 is reserved), 2 = per-thread
    cap = x.__dlpack__(stream=stream or 1)
    ptr, shape, strides, dtype, (dev_type, dev_id), readonly = read_capsule(cap, name, call)
    _require_cuda(dev_type, name, call)
    _no_negative(strides, name, call)
    if writable and readonly:
        raise ArgumentError("%s is read-only (DLPack flag READ_ONLY)" % name, call)
    return (ptr, shape, strides, dtype, dev_id, None, cap)


def read_capsule(cap, name="array", call="dcpattn"):
    """A DLPack capsule (legacy "dltensor" or versioned) as (pointer, shape, element
    strides, dtype, (device type, device id), read-only); the capsule is not consumed."""
    cname = _capsule_name(cap)
    readonly = False
    if cname == b"dltensor":
        t = DLManagedTensor.from_address(_capsule_pointer(cap, cname)).dl_tensor
    elif cname == b"dltensor_versioned":
        m = DLManagedTensorVersioned.from_address(_capsule_pointer(cap, cname))
        readonly = bool(m.flags & _DL_FLAG_READ_ONLY)
        t = m.dl_tensor
    else:
        raise ArgumentError("%s: __dlpack__ returned a capsule named %r" % (name, cname), call)
    n = t.ndim
    shape = tuple(t.shape[i] for i in range(n))
    strides = tuple(t.strides[i] for i in range(n)) if t.strides else contiguous(shape)
    key = (t.dtype.code, t.dtype.bits)
    dtype = _DL_TYPES.get(key) if t.dtype.lanes == 1 else None
    if dtype is None:
        dtype = "DLPack type (code %d, bits %d, lanes %d)" % (key[0], key[1], t.dtype.lanes)
    return ((t.data or 0) + t.byte_offset, shape, strides, dtype, (t.device.device_type, t.device.device_id),
            readonly)


def stream_handle(stream):
    """An explicit stream= argument as a CUstream handle (int)."""
    if isinstance(stream, int):
        return stream
    f = getattr(stream, "__cuda_stream__", None)
    if f is not None:
        v = f() if callable(f) else f
        return int(v[1])
    for attr in ("cuda_stream", "ptr", "handle", "value"):  # torch, CuPy, Numba, ctypes
        h = getattr(stream, attr, None)
        if h is not None:
            return int(getattr(h, "value", h) or 0)
    raise ArgumentError("stream: %s is not a CUDA stream (an int handle, or an object with __cuda_stream__, "
                        ".cuda_stream, .ptr or .handle)" % describe(stream))


_raw_stream = None


def call_stream(stream, q):
    """The stream of a call: the explicit one; else PyTorch's current stream on q's device
    when torch is imported (and has initialized CUDA); else the legacy default stream (0)."""
    if stream is not None:
        return stream_handle(stream)
    t = sys.modules.get("torch")
    if t is None:
        return 0
    if is_torch(q):
        dev = q.get_device()
        if dev < 0:
            return 0  # parse() rejects q
    elif not t.cuda.is_initialized():
        return 0
    else:
        dev = device_hint(q)
    return (_raw_stream or torch_stream())(dev)


def torch_stream():
    """PyTorch's current stream handle of a device, as a function of the device index: its
    internal accessor where it has one (a fraction of torch.cuda.current_stream's cost)."""
    global _raw_stream
    if _raw_stream is None:
        t = sys.modules["torch"]
        _raw_stream = getattr(t._C, "_cuda_getCurrentRawStream", None) or \
            (lambda d: t.cuda.current_stream(d).cuda_stream)
    return _raw_stream


def device_hint(x):
    f = getattr(x, "__dlpack_device__", None)
    if f is not None:
        return int(f()[1])
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None and cai.get("data", (0,))[0]:
        return _cuda.pointer_device(cai["data"][0], "q")
    return sys.modules["torch"].cuda.current_device()


def library_of(x):
    return type(x).__module__.partition(".")[0]


def empty(like, shape, dtype, dev, name, call):
    """An uninitialized array from like's library, of like's dtype (dtype None) or of the
    named one ("float32", ...)."""
    lib = library_of(like)
    if lib == "torch":
        t = sys.modules["torch"]
        return t.empty(shape, dtype=getattr(t, dtype) if dtype else like.dtype, device=like.device)
    if lib == "cupy":
        cp = sys.modules["cupy"]
        with cp.cuda.Device(dev):
            return cp.empty(shape, dtype=cp.dtype(dtype) if dtype else like.dtype)
    raise ArgumentError("%s= is required: dcpattn allocates arrays only through PyTorch or CuPy, and the inputs "
                        "are %s" % (name, describe(like)), call)


def workspace(like, nbytes, dev, cu_ctx):
    """(owner, 256-byte aligned pointer) of nbytes of device memory from like's library
    (cuMemAlloc when it is neither PyTorch nor CuPy)."""
    lib = library_of(like)
    if lib == "torch":
        t = sys.modules["torch"]
        buf = t.empty(nbytes + 256, dtype=t.uint8, device=like.device)
        ptr = buf.data_ptr()
    elif lib == "cupy":
        cp = sys.modules["cupy"]
        with cp.cuda.Device(dev):
            buf = cp.empty(nbytes + 256, dtype=cp.uint8)
        ptr = buf.data.ptr
    else:
        buf = _cuda.DeviceBuffer(nbytes + 256, cu_ctx)
        ptr = buf.ptr
    return buf, (ptr + 255) & ~255
