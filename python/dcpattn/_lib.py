"""libdcpattn.so through ctypes: where it is found, the mirrors of the C structs, the
function prototypes, and the exceptions.

The structs below mirror include/dcpattn.h field by field; tests/test_layout.py compiles a C
program that prints every sizeof and offsetof and compares them with these classes, so a
header change that breaks the mirror fails the tests instead of corrupting memory."""

import ctypes
import os
import struct
import threading
from ctypes import POINTER, Structure, c_char_p, c_float, c_int, c_int64, c_size_t, c_void_p

__all__ = ["DcpattnError", "ArgumentError", "LibraryNotFoundError"]

# The header's DCPATTN_STATUS_LIST, in order (checked against the header by the tests).
STATUS_NAMES = (
    "SUCCESS", "INVALID_ARGUMENT", "UNSUPPORTED", "MISALIGNED", "ALIASING", "OVERFLOW", "WORKSPACE",
    "OUT_OF_MEMORY", "NO_DRIVER", "NO_CONTEXT", "NO_NVRTC", "NO_NCCL", "NOT_COMPILED", "GENERATOR",
    "COMPILE", "CUDA", "CAPTURE", "NCCL", "TIMEOUT", "INTERNAL",
)
STATUS = {name: i for i, name in enumerate(STATUS_NAMES)}

# dcpattn_dtype (FP8_E4M3, FP8_DS_MLA: a KV cache only), dcpattn_dcp_transport, dcpattn_dcp_layout and the two limits
BF16, FP16, FP32, FP8_E4M3, FP8_DS_MLA = 1, 2, 3, 4, 5
DCP_A2A, DCP_AG_RS = 1, 2
DCP_SCATTER, DCP_REPLICATE = 0, 1
SPLITS_BALANCED = -1
SPLITS_PER_SEQUENCE = -2
MAX_MERGE_STATES = 64
SPARSE_MAX_TOPK = 2048
CONSTANTS = {
    "DCPATTN_BF16": BF16, "DCPATTN_FP16": FP16, "DCPATTN_FP32": FP32, "DCPATTN_FP8_E4M3": FP8_E4M3, "DCPATTN_FP8_DS_MLA": FP8_DS_MLA,
    "DCPATTN_DCP_A2A": DCP_A2A, "DCPATTN_DCP_AG_RS": DCP_AG_RS,
    "DCPATTN_DCP_SCATTER": DCP_SCATTER, "DCPATTN_DCP_REPLICATE": DCP_REPLICATE,
    "DCPATTN_SPLITS_BALANCED": SPLITS_BALANCED, "DCPATTN_SPLITS_PER_SEQUENCE": SPLITS_PER_SEQUENCE, "DCPATTN_MAX_MERGE_STATES": MAX_MERGE_STATES,
    "DCPATTN_SPARSE_MAX_TOPK": SPARSE_MAX_TOPK,
}


class ContextDesc(Structure):
    _fields_ = [("data_dir", c_char_p), ("aot_dir", c_char_p), ("arch", c_char_p), ("compile_only", c_int),
                ("log_level", c_int), ("log", c_void_p), ("log_user", c_void_p), ("cache_dir", c_char_p),
                ("num_sms", c_int), ("lock_timeout_ms", c_int)]


class AttnDesc(Structure):
    _fields_ = [("dtype", c_int), ("num_q_heads", c_int), ("num_kv_heads", c_int), ("head_dim", c_int),
                ("head_dim_v", c_int), ("page_size", c_int), ("non_causal", c_int), ("softmax_scale", c_float),
                ("dcp_world", c_int), ("dcp_rank", c_int), ("dcp_interleave", c_int), ("lse_base2", c_int),
                ("max_batch", c_int), ("max_q_len", c_int), ("max_total_q", c_int), ("max_seqlen_k", c_int),
                ("num_splits", c_int), ("num_sms", c_int), ("kv_dtype", c_int), ("kv_scale_per_head", c_int),
                ("sparse_topk", c_int)]


class AttnArgs(Structure):
    _fields_ = [("batch", c_int),
                ("q", c_void_p), ("q_stride_t", c_int64), ("q_stride_h", c_int64),
                ("k_cache", c_void_p), ("k_stride_page", c_int64), ("k_stride_t", c_int64), ("k_stride_h", c_int64),
                ("v_cache", c_void_p), ("v_stride_page", c_int64), ("v_stride_t", c_int64), ("v_stride_h", c_int64),
                ("num_pages", c_int64), ("block_table", c_void_p), ("block_table_stride", c_int64),
                ("cu_seqlens_q", c_void_p), ("seqused_k", c_void_p), ("seqused_k_global", c_void_p),
                ("out", c_void_p), ("out_stride_t", c_int64), ("out_stride_h", c_int64),
                ("lse", c_void_p), ("lse_stride_t", c_int64), ("lse_stride_h", c_int64),
                ("k_scale", c_void_p), ("v_scale", c_void_p),
                ("topk_ids", c_void_p), ("topk_ids_stride", c_int64), ("topk_count", c_void_p), ("sinks", c_void_p)]


class MergeArgs(Structure):
    _fields_ = [("num_states", c_int), ("rows", c_int), ("heads", c_int), ("head_dim", c_int),
                ("in_dtype", c_int), ("out_dtype", c_int), ("o", c_void_p), ("lse", c_void_p),
                ("o_stride_t", c_int64), ("o_stride_h", c_int64), ("lse_stride_t", c_int64), ("lse_stride_h", c_int64),
                ("out", c_void_p), ("lse_out", c_void_p), ("out_stride_t", c_int64), ("out_stride_h", c_int64),
                ("lse_out_stride_t", c_int64), ("lse_out_stride_h", c_int64),
                ("lse_base2_in", c_int), ("lse_base2_out", c_int)]


class DcpCombineArgs(Structure):
    _fields_ = [("world", c_int), ("rank", c_int), ("rows", c_int), ("heads", c_int), ("head_dim", c_int),
                ("transport", c_int), ("layout", c_int), ("in_dtype", c_int), ("out_dtype", c_int),
                ("comm_dtype", c_int),
                ("o", c_void_p), ("o_stride_t", c_int64), ("o_stride_h", c_int64),
                ("lse", c_void_p), ("lse_stride_t", c_int64), ("lse_stride_h", c_int64),
                ("out", c_void_p), ("out_stride_t", c_int64), ("out_stride_h", c_int64),
                ("lse_out", c_void_p), ("lse_out_stride_t", c_int64), ("lse_out_stride_h", c_int64),
                ("rows_limit", c_void_p), ("lse_base2_in", c_int), ("lse_base2_out", c_int),
                ("workspace", c_void_p), ("workspace_bytes", c_size_t)]


# C name -> mirror, for the layout test
STRUCTS = {
    "dcpattn_context_desc": ContextDesc,
    "dcpattn_attn_desc": AttnDesc,
    "dcpattn_attn_args": AttnArgs,
    "dcpattn_merge_args": MergeArgs,
    "dcpattn_dcp_combine_args": DcpCombineArgs,
}

_PACK_CODES = {c_int: "i", c_int64: "q", c_float: "f", c_void_p: "Q", c_char_p: "Q", c_size_t: "Q"}


def packer(cls):
    """A struct.Struct whose pack_into writes the fields of cls, in _fields_ order, at the
    offsets ctypes gives them: one call fills an argument block instead of one ctypes
    attribute store per field (the run path's cost)."""
    assert ctypes.sizeof(c_void_p) == 8, "dcpattn needs a 64-bit platform"
    fmt, pos = "=", 0
    for name, typ in cls._fields_:
        off = getattr(cls, name).offset
        if off > pos:
            fmt += "%dx" % (off - pos)
        fmt += _PACK_CODES[typ]
        pos = off + ctypes.sizeof(typ)
    if ctypes.sizeof(cls) > pos:
        fmt += "%dx" % (ctypes.sizeof(cls) - pos)
    s = struct.Struct(fmt)
    assert s.size == ctypes.sizeof(cls)
    return s


class DcpattnError(RuntimeError):
    """A dcpattn call returned a non-zero status, or the arguments were rejected before any
    call. Attributes: status (the dcpattn_status code), name (its enum name without the
    DCPATTN_STATUS_ prefix), status_string (dcpattn_status_string) and detail
    (dcpattn_last_error, or the Python check's message)."""

    def __init__(self, status, detail, call="dcpattn", status_string=None):
        self.status = status
        self.name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else "UNKNOWN"
        if status_string is None:
            status_string = _lib.dcpattn_status_string(status).decode() if _lib is not None else \
                self.name.lower().replace("_", " ")
        self.status_string = status_string
        self.detail = detail
        self.call = call
        super().__init__("%s: %s (DCPATTN_STATUS_%s): %s" % (call, self.status_string, self.name, detail))


class ArgumentError(DcpattnError, ValueError):
    """Arguments rejected by the package's own checks (shapes, dtypes, devices, strides)
    before anything was launched: status INVALID_ARGUMENT."""

    def __init__(self, detail, call="dcpattn"):
        super().__init__(STATUS["INVALID_ARGUMENT"], detail, call, "invalid argument")


class LibraryNotFoundError(RuntimeError):
    """libdcpattn.so could not be loaded."""


def _source_repo():
    """The repository this package sits in (python/dcpattn/ inside it), or the one its wheel
    was built from (recorded at build time)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repos = [os.path.dirname(os.path.dirname(here))]
    try:
        from . import _build_info  # written into the wheel by the build backend

        if _build_info.SOURCE_REPO:
            repos.append(_build_info.SOURCE_REPO)
    except ImportError:
        pass
    return [r for r in repos if os.path.isfile(os.path.join(r, "include", "dcpattn.h"))]


def candidates():
    """(description, path or soname) in the order they are tried."""
    env = os.environ.get("DCPATTN_LIBRARY")
    if env:
        return [("$DCPATTN_LIBRARY", env)]
    out = [("the repository's build/", os.path.join(r, "build", "libdcpattn.so")) for r in _source_repo()]
    out.append(("the system loader", "libdcpattn.so"))
    # make install's default prefix, which the loader searches only once ldconfig has run
    out.append(("the default install prefix", "/usr/local/lib/libdcpattn.so"))
    return out


_S = c_int  # dcpattn_status
_FUNCTIONS = [
    ("dcpattn_status_string", c_char_p, [c_int]),
    ("dcpattn_last_error", c_char_p, []),
    ("dcpattn_version", c_char_p, []),
    ("dcpattn_context_create", _S, [c_void_p, POINTER(c_void_p)]),
    ("dcpattn_context_destroy", None, [c_void_p]),
    ("dcpattn_attn_desc_validate", _S, [c_void_p]),
    ("dcpattn_attn_args_validate", _S, [c_void_p, c_void_p]),
    ("dcpattn_attn_plan_create", _S, [c_void_p, c_void_p, POINTER(c_void_p)]),
    ("dcpattn_attn_plan_destroy", None, [c_void_p]),
    ("dcpattn_attn_workspace_size", c_size_t, [c_void_p]),
    ("dcpattn_attn_num_splits", c_int, [c_void_p]),
    ("dcpattn_attn_variant", c_char_p, [c_void_p]),
    ("dcpattn_attn_run", _S, [c_void_p, c_void_p, c_void_p, c_size_t, c_void_p]),
    ("dcpattn_merge_validate", _S, [c_void_p]),
    ("dcpattn_merge", _S, [c_void_p, c_void_p, c_void_p]),
    ("dcpattn_dcp_combine_validate", _S, [c_void_p]),
    ("dcpattn_dcp_combine_workspace_size", _S, [c_void_p, POINTER(c_size_t)]),
    ("dcpattn_dcp_combine_prepare", _S, [c_void_p, c_void_p]),
    ("dcpattn_dcp_combine", _S, [c_void_p, c_void_p, c_void_p, c_void_p]),
    ("dcpattn_dcp_wait", _S, [c_void_p, c_void_p, c_int]),
]


class Library:
    """The loaded library: its functions as attributes (lib.dcpattn_merge, ...), and the
    launch-only entry points once more as lib.attn_run_gil and lib.merge_gil, through
    ctypes.PyDLL, which keeps the GIL across the call: they take a few microseconds and
    never wait, and releasing and taking back the GIL around them is a measurable part of a
    call's cost."""

    def __init__(self, path):
        self.path = path
        cdll, pydll = ctypes.CDLL(path), ctypes.PyDLL(path)
        for name, res, args in _FUNCTIONS:
            f = getattr(cdll, name)
            f.restype, f.argtypes = res, args
            setattr(self, name, f)
        self.attn_run_gil = pydll.dcpattn_attn_run
        self.merge_gil = pydll.dcpattn_merge
        for f, name in ((self.attn_run_gil, "dcpattn_attn_run"), (self.merge_gil, "dcpattn_merge")):
            f.restype, f.argtypes = _S, getattr(self, name).argtypes
        self.version = self.dcpattn_version().decode()

    def check(self, status, call):
        if status:
            raise DcpattnError(status, self.dcpattn_last_error().decode(errors="replace"), call,
                               self.dcpattn_status_string(status).decode())


_lib = None
_lock = threading.Lock()


def get():
    """The library, loaded on first use; LibraryNotFoundError says what was tried and how to
    build it."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            _lib = _load()
    return _lib


def _load():
    from . import __version__

    tried = []
    for where, path in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s: %s does not exist" % (where, path))
            continue
        try:
            lib = Library(path)
        except OSError as e:
            tried.append("%s: %s" % (where, e))
            continue
        # the struct mirrors are this package's version's: a library of another version may
        # lay its structs out differently
        if lib.version.split(".")[:2] != __version__.split(".")[:2]:
            tried.append("%s: %s is version %s, this package is %s" % (where, path, lib.version, __version__))
            continue
        return lib
    raise LibraryNotFoundError(
        "dcpattn: libdcpattn.so could not be loaded. Tried:\n  " + "\n  ".join(tried) +
        "\nBuild it with `make` in the dcpattn repository (it writes build/libdcpattn.so; "
        "`make install` also copies it to $(PREFIX)/lib), or set DCPATTN_LIBRARY to its path.")
