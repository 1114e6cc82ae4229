"""GPU: flash_attn_varlen_func on CuPy and JAX arrays (where those libraries are installed)
gives the bits it gives on PyTorch tensors of the same memory: the package reads CuPy's
__cuda_array_interface__ and JAX's DLPack, and allocates its outputs through CuPy."""

import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the GPU tests need it")
if not torch.cuda.is_available():
    pytest.skip("no GPU found (torch.cuda.is_available() is False): the GPU tests need one",
                allow_module_level=True)

import dcpattn  # noqa: E402
from test_gpu import Case  # noqa: E402


def _case():
    c = Case("gqa", 3, 16, seed=23, dtype=torch.bfloat16)
    sh = c.shard(1)
    out, lse = c.attention(1, sh)
    torch.cuda.synchronize()
    return c, sh, out, lse


def test_cupy_arrays():
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    # CuPy has no bfloat16: an fp16 case
    c = Case("gqa", 3, 16, seed=29, dtype=torch.float16)
    sh = c.shard(2)
    ref_out, ref_lse = c.attention(2, sh)
    torch.cuda.synchronize()
    a = cp.asarray  # zero-copy views of the same device memory (__cuda_array_interface__)
    out, lse = dcpattn.flash_attn_varlen_func(
        a(c.q), a(sh["k"]), a(sh["v"]), a(c.cu_t), a(sh["used"]), a(sh["bt"]), max(c.qlens), sh["max_used"],
        return_softmax_lse=True, cp_world_size=3, cp_rank=2, cp_tot_seqused_k=a(c.lens_t),
        cp_kv_cache_interleave_size=16)
    assert isinstance(out, cp.ndarray) and isinstance(lse, cp.ndarray)  # allocated through CuPy
    cp.cuda.Device().synchronize()
    assert torch.equal(torch.as_tensor(out, device="cuda"), ref_out)
    assert torch.equal(torch.as_tensor(lse, device="cuda"), ref_lse)


def test_jax_arrays():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU's memory to the others
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    jdl = pytest.importorskip("jax.dlpack", reason="JAX has no dlpack module")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    c, sh, ref_out, ref_lse = _case()
    try:  # JAX arrays over the same memory (or JAX's copy of it), read through their __dlpack__
        args = [jdl.from_dlpack(t) for t in (c.q, sh["k"], sh["v"], c.cu_t, sh["used"], sh["bt"], c.lens_t)]
    except Exception as e:  # this JAX build cannot take PyTorch's memory: nothing of dcpattn's to test
        pytest.skip("JAX could not import PyTorch's arrays: %s" % e)
    jq, jk, jv, jcu, jused, jbt, jlens = args
    out = torch.empty_like(ref_out)
    lse = torch.empty_like(ref_lse)
    dcpattn.flash_attn_varlen_func(
        jq, jk, jv, jcu, jused, jbt, max(c.qlens), sh["max_used"],
        return_softmax_lse=True, cp_world_size=3, cp_rank=1, cp_tot_seqused_k=jlens,
        cp_kv_cache_interleave_size=16, out=out, softmax_lse=lse)
    torch.cuda.synchronize()
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
