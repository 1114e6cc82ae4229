"""A stand-in for the part of PyTorch the package reads: a module object (install it as
sys.modules["torch"] only through offline.offline(), which puts everything back) whose
Tensor has PyTorch's accessors (data_ptr, shape, stride, dtype, get_device, device,
is_contiguous) over made-up CUDA pointers, and torch.empty that hands out new ones."""

import functools
import types

from fakes import ITEMSIZE, address, contiguous


class dtype:
    def __init__(self, name):
        self.name = name
        self.itemsize = ITEMSIZE[name]

    def __repr__(self):
        return "torch." + self.name


class device:
    def __init__(self, index):
        self.type, self.index = "cuda", index

    def __repr__(self):
        return "device(type='cuda', index=%d)" % self.index


class Tensor:
    """A CUDA tensor that only describes itself. Its accessors are C callables (bound
    methods of ints and tuples) held in slots, so that reading them costs about what
    PyTorch's C accessors cost, on every Python version."""

    __slots__ = ("shape", "dtype", "data_ptr", "stride", "get_device", "is_contiguous")

    def __init__(self, shape, dt, ptr=None, stride=None, dev=0):
        self.shape, self.dtype = tuple(shape), dt
        stride = tuple(stride) if stride is not None else contiguous(self.shape)
        n = 1
        for s in self.shape:
            n *= s
        self.data_ptr = (address(n * dt.itemsize) if ptr is None else ptr).__index__
        self.stride = functools.partial(tuple, stride)
        self.get_device = dev.__index__
        self.is_contiguous = _contiguous(self.shape, stride).__bool__

    device = property(lambda self: device(self.get_device()))


def _contiguous(shape, stride):
    """PyTorch's rule: the strides of extent-1 dimensions, and any of an empty tensor, do not
    count."""
    if 0 in shape:
        return True
    want = 1
    for n, s in zip(reversed(shape), reversed(stride)):
        if n != 1:
            if s != want:
                return False
            want *= n
    return True


Tensor.__module__ = "torch"  # what the package's allocation looks at (library_of)
STREAM = 0x5717EA  # what torch's current stream of every device is here


def module():
    t = types.ModuleType("torch")
    for name in ITEMSIZE:
        setattr(t, name, dtype(name))
    t.Tensor = Tensor
    t.empty = lambda shape, dtype, device: Tensor(shape, dtype, dev=device.index)
    t._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda dev: STREAM)
    t.cuda = types.SimpleNamespace(is_initialized=lambda: True)
    return t
