"""The attention entry points' whole host path without a GPU, for the CPU tests and benchmark:
plans come from a stand-in of _attention.make_plan (the one place a plan meets the device)
whose run is given (a Recorder, or NOOP), the driver's current-context query is NOOP, and,
when asked, PyTorch is faketorch. offline() puts every piece of package state it touches
back when it ends."""

import contextlib
import ctypes
import sys

from dcpattn import _arrays, _attention, _cuda, _lib, _sparse

# a C function of this process that takes no arguments and returns 0 (no Python error is
# set), called like a launch function (through PyDLL, with five arguments it ignores): the
# price of reaching the library without its work
NOOP = ctypes.PyDLL(None).PyErr_Occurred
NOOP.restype, NOOP.argtypes = ctypes.c_int, {n: a for n, _, a in _lib._FUNCTIONS}["dcpattn_attn_run"]
_GETCUR = ctypes.PyDLL(None).PyErr_Occurred  # another function object: its own argtypes
_GETCUR.restype, _GETCUR.argtypes = ctypes.c_int, [ctypes.c_void_p]


_unpack = _lib.packer(_lib.AttnArgs).unpack


class Recorder:
    """A plan's run that keeps (plan handle, argument block as a tuple of its fields, stream)
    of every launch."""

    def __init__(self):
        self.launches = []

    def __call__(self, handle, addr, ws, ws_bytes, stream):
        self.launches.append((handle, _unpack(ctypes.string_at(addr, ctypes.sizeof(_lib.AttnArgs))), stream))
        return 0


class FakePlan:
    """A plan of the given descriptor (kept as a dict) whose handle is its number, 1 up."""

    def __init__(self, desc, run, dev_index, number):
        self.desc = {f: getattr(desc, f) for f, _ in desc._fields_}
        self.handle, self.dev, self.cu_ctx, self.run = number, dev_index, None, run
        self.ws_owner, self.ws, self.ws_bytes, self.variant, self.num_splits = None, 0, 0, "offline", 1


class _Driver:
    getcur = _GETCUR  # writes nothing: the thread's current context stays NULL, the plans' cu_ctx


@contextlib.contextmanager
def offline(run=NOOP, torch=None):
    """Within it, plans are FakePlans launching through `run`; torch (a module, e.g.
    faketorch.module()) replaces sys.modules["torch"]. Yields the list of plans made."""
    made = []

    def make_plan(desc, like, dev_index):
        made.append(FakePlan(desc, run, dev_index, len(made) + 1))
        return made[-1]

    saved = [(_attention, "make_plan"), (_attention, "plans"), (_attention, "calls"), (_sparse, "calls"),
             (_cuda, "_drv"),
             (_arrays, "tensor_type"), (_arrays, "_torch_dtypes"), (_arrays, "_raw_stream")]
    saved = [(m, name, getattr(m, name)) for m, name in saved]
    had_torch, old_torch = "torch" in sys.modules, sys.modules.get("torch")
    _attention.make_plan, _attention.plans, _attention.calls, _sparse.calls = make_plan, {}, {}, {}
    _cuda._drv = _Driver()
    _cuda.current_word()[0].value = None  # what a real driver may have left in this thread's word
    if torch is not None:
        sys.modules["torch"] = torch
        _arrays.tensor_type, _arrays._torch_dtypes, _arrays._raw_stream = None, {}, None
    try:
        yield made
    finally:
        for m, name, value in saved:
            setattr(m, name, value)
        if torch is not None:
            if had_torch:
                sys.modules["torch"] = old_torch
            else:
                del sys.modules["torch"]
