"""Arrays that only describe themselves: __cuda_array_interface__ objects and DLPack
producers over made-up pointers, for the checks that run before any device work."""

import ctypes
from ctypes import c_int64

from dcpattn._arrays import DLManagedTensor, DLManagedTensorVersioned, contiguous

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_NAMES = {False: b"dltensor", True: b"dltensor_versioned"}  # alive as long as the capsules
TYPESTR = {"float16": "<f2", "float32": "<f4", "int32": "<i4", "int64": "<i8", "float64": "<f8", "uint8": "|u1"}
DLTYPE = {"bfloat16": (4, 16), "float16": (2, 16), "float32": (2, 32), "int32": (0, 32), "int64": (0, 64),
          "uint8": (1, 8), "float8_e4m3fn": (10, 8)}
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8, "float64": 8, "uint8": 1,
            "float8_e4m3fn": 1}
_next = [0x7f0000000000]


def address(nbytes):
    """A made-up, 256-byte aligned device address range that no other fake array overlaps."""
    p = _next[0]
    _next[0] += (nbytes + 4096) // 256 * 256 + 256
    return p


class CAI:
    """An object with only __cuda_array_interface__ (version 3)."""

    def __init__(self, shape, dtype="float16", ptr=None, strides=None, readonly=False, stream=None, typestr=None):
        n = ITEMSIZE.get(dtype, 2)
        size = 1
        for s in shape:
            size *= s
        self.ptr = address(size * n) if ptr is None else ptr
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr or TYPESTR[dtype], "data": (self.ptr, readonly),
            "strides": None if strides is None else tuple(s * n for s in strides), "version": 3}
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream


class DL:
    """A DLPack producer: __dlpack_device__ and __dlpack__ (a capsule without a deleter)."""

    def __init__(self, shape, dtype="bfloat16", ptr=None, strides=None, device=(2, 0), byte_offset=0,
                 versioned=False, lanes=1, readonly=False):
        n = ITEMSIZE.get(dtype, 2)
        size = 1
        for s in shape:
            size *= s
        self.ptr = address(size * n + byte_offset) if ptr is None else ptr
        self.device, self.versioned, self.streams = device, versioned, []
        self._shape = (c_int64 * max(len(shape), 1))(*shape)
        self._strides = (c_int64 * max(len(shape), 1))(*(strides or contiguous(shape)))
        self.m = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        if versioned:
            self.m.version.major, self.m.flags = 1, 1 if readonly else 0
        t = self.m.dl_tensor
        t.data, t.byte_offset, t.ndim = self.ptr, byte_offset, len(shape)
        t.device.device_type, t.device.device_id = device
        t.dtype.code, t.dtype.bits = DLTYPE[dtype]
        t.dtype.lanes = lanes
        t.shape = ctypes.cast(self._shape, type(t.shape))
        t.strides = ctypes.cast(self._strides, type(t.strides)) if strides is not None else None

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return _new_capsule(ctypes.addressof(self.m), _NAMES[self.versioned], None)


def attention_inputs(make=DL, dtype="bfloat16", total_q=6, hq=8, hkv=2, d=128, dv=None, pages=12, page=16, batch=2,
                     max_pages=4, **change):
    """Well-formed flash_attn_varlen_func arguments (as keyword arguments) of fake arrays."""
    dv = dv or d
    kw = dict(q=make((total_q, hq, d), dtype), k_cache=make((pages, page, hkv, d), dtype),
              v_cache=make((pages, page, hkv, dv), dtype), cu_seqlens_q=make((batch + 1,), "int32"),
              seqused_k=make((batch,), "int32"), block_table=make((batch, max_pages), "int32"),
              max_seqlen_q=3, max_seqlen_k=50)
    kw.update(change)
    return kw
