"""dcpattn from Python: attention over a rank's shard of a paged KV cache under decode
context parallelism (DCP), exact merges of partial attention states, and the DCP combine
over NCCL, on any CUDA array (PyTorch, CuPy, JAX: __cuda_array_interface__ or DLPack),
through libdcpattn.so and ctypes.

    import dcpattn
    out, lse = dcpattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_seqlens_q, seqused_k,
                                              block_table, max_seqlen_q, max_seqlen_k,
                                              return_softmax_lse=True, cp_world_size=W,
                                              cp_rank=r, cp_tot_seqused_k=global_lens)
    out, lse = dcpattn.flash_mla_sparse_decode(q, kv_cache, block_table, cu_seqlens_q, seqused_k,
                                               topk_indices, max_seqlen_q, max_seqlen_k,
                                               sinks=sinks, kv_cache_dtype="fp8_ds_mla",
                                               return_softmax_lse=True, cp_world_size=W, cp_rank=r,
                                               cp_tot_seqused_k=global_lens)
    dcpattn.merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse)
    merged = dcpattn.merge_states([o0, o1, o2], [lse0.T, lse1.T, lse2.T])
    mine = dcpattn.dcp_combine(out, lse.T, comm, world_size=W, rank=r)

Importing needs no GPU, no PyTorch and no library: libdcpattn.so is loaded at the first
call, from $DCPATTN_LIBRARY, else the repository's build/ (where `make` writes it), else
the system loader (`make install` puts it in $(PREFIX)/lib). Every call runs on the stream
given as stream=, else PyTorch's current stream when torch is imported, else the default
stream. Plans (kernel choice, workspace) are cached by descriptor, with bounds rounded up
to a few steps per power of two: after one eager call of a shape, a call compiles nothing,
allocates only the outputs it is not given, and can be captured in a CUDA graph
(torch.cuda.graph); a call of PyTorch tensors whose shapes, strides, dtypes and devices
were seen before skips straight to its launch. An FP8 (e4m3) KV cache is taken for GQA and MLA:
kv_cache_dtype="fp8_e4m3" (or a float8_e4m3fn cache) with device float32 k_scale and
v_scale, as vLLM names them. Sparse MLA (DeepSeek V3.2 / GLM-5 top-k attention) takes
per query token a list of global token positions; each rank's kernel keeps the ones it owns,
and sinks are applied on rank 0 so that the merge of the ranks' partials applies them once.
Every dcpattn failure raises DcpattnError (status, name, status_string, detail); arguments
rejected by the package's own checks raise ArgumentError, a DcpattnError and a ValueError.
"""

__version__ = "0.1.0"

from . import _lib  # noqa: E402
from ._lib import ArgumentError, DcpattnError, LibraryNotFoundError, SPLITS_BALANCED, SPLITS_PER_SEQUENCE  # noqa: E402
from ._attention import flash_attn_varlen_func  # noqa: E402
from ._sparse import flash_mla_sparse_decode  # noqa: E402
from ._merge import merge_attn_states, merge_states  # noqa: E402
from ._combine import dcp_combine, dcp_wait  # noqa: E402
from ._runtime import clear_cache  # noqa: E402
from ._placement import local_len, rank_tokens  # noqa: E402

__all__ = ["flash_attn_varlen_func", "flash_mla_sparse_decode", "merge_attn_states", "merge_states", "dcp_combine", "dcp_wait",
           "nccl_comm_from_torch", "local_len", "rank_tokens", "clear_cache", "library_path", "DcpattnError",
           "ArgumentError", "LibraryNotFoundError", "SPLITS_BALANCED", "SPLITS_PER_SEQUENCE", "__version__"]


def library_path():
    """The path of the libdcpattn.so in use (loading it if it is not yet)."""
    from . import _lib

    return _lib.get().path


def nccl_comm_from_torch(group=None):
    """The raw ncclComm_t (an int) of a torch.distributed NCCL process group (default: the
    world group) on the current device, for dcp_combine. PyTorch creates a group's
    communicator at its first collective: run one first (e.g. a barrier). A communicator
    works only with the NCCL library that made it: unless $DCPATTN_NCCL_LIBRARY says
    otherwise, dcpattn is pointed at the libnccl PyTorch loaded (an error when PyTorch has
    NCCL linked in statically, where no other library can use its communicators)."""
    import os
    import re

    import torch
    import torch.distributed as dist

    group = group or dist.group.WORLD
    ptr = group._get_backend(torch.device("cuda", torch.cuda.current_device()))._comm_ptr()
    if not ptr:
        raise DcpattnError(_lib.STATUS["INVALID_ARGUMENT"], "the process group has no NCCL communicator yet: run a "
                           "collective on it first", "nccl_comm_from_torch")
    if not os.environ.get("DCPATTN_NCCL_LIBRARY"):
        with open("/proc/self/maps") as f:
            found = sorted(set(re.findall(r"(/\S*libnccl\.so[.\d]*)$", f.read(), re.M)))
        if not found:
            raise DcpattnError(_lib.STATUS["NO_NCCL"], "this PyTorch has NCCL linked in statically: its communicators "
                               "cannot be used by another library", "nccl_comm_from_torch")
        os.environ["DCPATTN_NCCL_LIBRARY"] = found[0]
    return ptr
