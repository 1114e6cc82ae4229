"""GPU (PyTorch and a CUDA device needed; skipped otherwise): every entry point against a
float64 reference on random DCP cases.

A case is a batch of sequences with mixed query lengths (1..16) and global lengths from a
few tokens (shorter than W*I: some ranks hold nothing of them) to a few thousand, sharded
over W ranks with interleave I by the placement rule into paged caches whose unused slots
and pages are NaN. Each rank's flash_attn_varlen_func is checked against attention over its
shard with the DCP mask; merge_states / merge_attn_states over the W partials against
attention over the whole sequence; rows that see no key must be exactly 0 and -inf. An FP8
(e4m3) cache is checked against attention over its dequantized values (byte * scale)."""

import os
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the GPU tests need it")
if not torch.cuda.is_available():
    pytest.skip("no GPU found (torch.cuda.is_available() is False): the GPU tests need one",
                allow_module_level=True)

import dcpattn  # noqa: E402
from conftest import PYTHON_DIR  # noqa: E402

DEV = torch.device("cuda", 0)
HOPPER = torch.cuda.get_device_capability(0) == (9, 0)
# max |error| against float64: out rounded to the input type after probabilities rounded to
# it (bf16 2^-9, fp16 2^-12 relative) and, merged, once more; lse in float32 over a row sum of
# rounded probabilities (DESIGN's tolerance comment in tests/gpu_util.h)
TOL = {torch.bfloat16: (2e-2, 1.5e-2), torch.float16: (3e-3, 3e-3)}
SHAPES = {"gqa": dict(hq=8, hkv=2, dqk=128, dv=128, page=16), "mla": dict(hq=16, hkv=1, dqk=576, dv=512, page=64)}


def needs_family(family):
    if family == "mla" and not HOPPER:
        pytest.skip("the MLA kernels need sm_90a (Hopper); this GPU is sm_%d%d" % torch.cuda.get_device_capability(0))


class Case:
    """A batch of global sequences (q, K, V on the GPU) and its W shards."""

    def __init__(self, family, world, inter, seed, dtype=torch.bfloat16, batch=5, causal=True, fp8=None):
        """fp8: None (a cache of dtype), or the shape of the e4m3 cache's scales: () or (1,)
        (one scale for K, one for V) or "per head" ([num_kv_heads])."""
        s = SHAPES[family]
        self.family, self.world, self.inter, self.dtype, self.causal = family, world, inter, dtype, causal
        self.hq, self.hkv, self.dqk, self.dv, self.page = s["hq"], s["hkv"], s["dqk"], s["dv"], s["page"]
        g = torch.Generator().manual_seed(seed)
        qlens = torch.randint(1, 17, (batch,), generator=g).tolist()
        qlens[0], qlens[1] = 1, 16
        short = world * inter
        lens = [qlens[0] + int(torch.randint(0, max(short, 2), (1,), generator=g))]  # may be < W*I
        lens += [max(q, int(torch.randint(40, 1300, (1,), generator=g))) for q in qlens[1:-1]]
        lens += [max(qlens[-1], int(torch.randint(2500, 3500, (1,), generator=g)))]
        self.qlens, self.lens, self.batch = qlens, lens, batch
        self.cu = [0]
        for q in qlens:
            self.cu.append(self.cu[-1] + q)
        self.total_q = self.cu[-1]
        self.gen = g
        self.q = self.rand((self.total_q, self.hq, self.dqk), 2.0)
        self.k = [self.rand((L, self.hkv, self.dqk), 2.0) for L in lens]
        self.v = [kk[..., :512] if family == "mla" else self.rand((L, self.hkv, self.dv), 1.0)
                  for kk, L in zip(self.k, lens)]
        if family == "mla":  # V is the first 512 channels of K: keep them small like V
            for kk in self.k:
                kk[..., :512] *= 0.5
        self.mla = family == "mla"
        self.fp8 = fp8 is not None
        if self.fp8:
            # e4m3 bytes of K / k_scale (|K| <= 2, scales >= 0.02: within e4m3's 448); the
            # reference reads the dequantized cache, bytes * scale, in float64
            n = self.hkv if fp8 == "per head" else 1
            shape = (n,) if fp8 == "per head" else fp8
            self.ks = (0.02 + 0.03 * torch.rand(n, generator=g)).reshape(shape).to(DEV)
            self.vs = (0.01 + 0.015 * torch.rand(n, generator=g)).reshape(shape).to(DEV)
            self.k8 = [(kk.float() / self.ks.reshape(1, -1, 1)).to(torch.float8_e4m3fn).view(torch.uint8)
                       for kk in self.k]
            # (MLA: V is the first 512 of the same bytes, dequantized with its own scale)
            self.v8 = [kk8[..., :512] for kk8 in self.k8] if self.mla else \
                [(vv.float() / self.vs.reshape(1, -1, 1)).to(torch.float8_e4m3fn).view(torch.uint8) for vv in self.v]
            self.dequantize()
        self.cu_t = torch.tensor(self.cu, dtype=torch.int32, device=DEV)
        self.lens_t = torch.tensor(lens, dtype=torch.int32, device=DEV)

    def dequantize(self):
        """The reference's K and V from the e4m3 bytes and the scales' current values."""
        e4m3 = torch.float8_e4m3fn
        self.k = [b.view(e4m3).double() * self.ks.double().reshape(1, -1, 1) for b in self.k8]
        self.v = [b.view(e4m3).double() * self.vs.double().reshape(1, -1, 1) for b in self.v8]

    def rand(self, shape, amp):
        return ((torch.rand(shape, generator=self.gen) * 2 - 1) * amp).to(self.dtype).to(DEV)

    def shard(self, rank):
        """This rank's paged cache (NaN wherever no token is), block table and lengths."""
        W, I, P = self.world, self.inter, self.page
        toks = [dcpattn.rank_tokens(L, W, rank, I) for L in self.lens]
        need = [(len(t) + P - 1) // P for t in toks]
        num_pages = sum(need) + 3
        width = max(max(need), 1) + 1
        perm = torch.randperm(num_pages, generator=self.gen).tolist()
        unused = perm[-1]
        bt = torch.full((self.batch, width), unused, dtype=torch.int32)
        # an e4m3 cache is built as its bytes (uint8), NaN (0x7f) in every unused slot
        dt, nan = (torch.uint8, 0x7F) if self.fp8 else (self.dtype, float("nan"))
        src_k, src_v = (self.k8, self.v8) if self.fp8 else (self.k, self.v)
        k = torch.full((num_pages, P, self.hkv, self.dqk), nan, dtype=dt, device=DEV)
        v = None if self.family == "mla" else torch.full((num_pages, P, self.hkv, self.dv), nan, dtype=dt,
                                                         device=DEV)
        at = 0
        for b, t in enumerate(toks):
            bt[b, :need[b]] = torch.tensor(perm[at:at + need[b]], dtype=torch.int32)
            at += need[b]
            if t:
                j = torch.arange(len(t))
                pages, slots = bt[b, j // P].long().to(DEV), (j % P).to(DEV)
                idx = torch.tensor(t, device=DEV)
                k[pages, slots] = src_k[b][idx]
                if v is not None:
                    v[pages, slots] = src_v[b][idx]
        used = torch.tensor([len(t) for t in toks], dtype=torch.int32, device=DEV)
        return dict(k=k, v=v, bt=bt.to(DEV), used=used, max_used=max(max(len(t) for t in toks), 1))

    def reference(self, rank=None, scale=None):
        """float64 out [total_q, hq, dv] and lse [total_q, hq] of attention over rank's shard
        with the DCP mask (rank None: over the whole sequence, W = 1)."""
        W, I = (1, 1) if rank is None else (self.world, self.inter)
        r = 0 if rank is None else rank
        scale = scale or self.dqk ** -0.5
        group = self.hq // self.hkv
        out = torch.zeros((self.total_q, self.hq, self.dv), dtype=torch.float64, device=DEV)
        lse = torch.full((self.total_q, self.hq), float("-inf"), dtype=torch.float64, device=DEV)
        for b, (ql, L) in enumerate(zip(self.qlens, self.lens)):
            idx = torch.tensor(dcpattn.rank_tokens(L, W, r, I), dtype=torch.long, device=DEV)
            if idx.numel() == 0:
                continue
            kk = self.k[b][idx].double().repeat_interleave(group, 1).transpose(0, 1)   # hq, n, d
            vv = self.v[b][idx].double().repeat_interleave(group, 1).transpose(0, 1)   # hq, n, dv
            qq = self.q[self.cu[b]:self.cu[b + 1]].double().transpose(0, 1)             # hq, ql, d
            s = scale * qq @ kk.transpose(1, 2)                                          # hq, ql, n
            if self.causal:
                limit = torch.tensor([dcpattn.local_len(L - ql + i + 1, W, r, I) for i in range(ql)], device=DEV)
                s = s.masked_fill(torch.arange(idx.numel(), device=DEV)[None, :] >= limit[:, None], float("-inf"))
            m = torch.logsumexp(s, -1)                                                   # hq, ql
            p = torch.nan_to_num(torch.exp(s - m[..., None]), nan=0.0)
            out[self.cu[b]:self.cu[b + 1]] = (p @ vv).transpose(0, 1)
            lse[self.cu[b]:self.cu[b + 1]] = m.transpose(0, 1)
        return out, lse

    def attention(self, rank, shard, **kw):
        W = self.world
        args = dict(return_softmax_lse=True, causal=self.causal, cp_world_size=W, cp_rank=rank,
                    cp_kv_cache_interleave_size=self.inter, cp_tot_seqused_k=self.lens_t if W > 1 else None)
        k, v = shard["k"], shard["v"]
        if self.fp8:  # as float8_e4m3fn unless the call says the bytes are e4m3
            args.update(k_scale=self.ks, v_scale=self.vs)
            if "kv_cache_dtype" not in kw:
                k = k.view(torch.float8_e4m3fn)
                v = None if v is None else v.view(torch.float8_e4m3fn)  # (MLA: V is K's bytes)
        args.update(kw)
        v = args.pop("v_cache", v)
        # host values only: this also runs inside a CUDA graph capture
        return dcpattn.flash_attn_varlen_func(self.q, k, v, self.cu_t, shard["used"], shard["bt"],
                                              max(self.qlens), shard["max_used"], **args)


def check(what, out, lse, ref_out, ref_lse, dtype, tol_mult=1.0):
    """out against ref_out, lse ([T, H] view) against ref_lse; empty rows exactly 0 / -inf."""
    tol_o, tol_l = (t * tol_mult for t in TOL[dtype])
    o = out.double()
    assert not torch.isnan(o).any(), "%s: NaN in out" % what
    empty = torch.isinf(ref_lse)
    assert (o[empty] == 0).all(), "%s: rows that see no key are not 0" % what
    err = (o - ref_out).abs().max().item()
    assert err <= tol_o, "%s: max |out - reference| = %.3g > %.3g" % (what, err, tol_o)
    if lse is not None:
        ld = lse.double()
        assert not torch.isnan(ld).any(), "%s: NaN in lse" % what
        assert (ld[empty] == float("-inf")).all(), "%s: rows that see no key do not have lse -inf" % what
        assert torch.isfinite(ld[~empty]).all(), "%s: a row that sees keys has a non-finite lse" % what
        lerr = (ld[~empty] - ref_lse[~empty]).abs().max().item() if (~empty).any() else 0.0
        assert lerr <= tol_l, "%s: max |lse - reference| = %.3g > %.3g" % (what, lerr, tol_l)
    return err


@pytest.mark.parametrize("inter", [1, 16])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("family", ["gqa", "mla"])
def test_dcp_attention_and_merge(family, world, inter):
    needs_family(family)
    c = Case(family, world, inter, seed=1000 * world + inter + (7 if family == "mla" else 0))
    outs, lses = [], []
    for r in range(world):
        sh = c.shard(r)
        kw = {}
        if family == "mla" and r % 2:
            kw["v_cache"] = sh["k"][..., :512]  # the other MLA spelling: V as a view of K
        out, lse = c.attention(r, sh, **kw)
        assert out.shape == (c.total_q, c.hq, c.dv) and out.dtype == c.dtype
        assert lse.shape == (c.hq, c.total_q) and lse.dtype == torch.float32  # FlashAttention's layout
        check("%s W=%d I=%d rank %d" % (family, world, inter, r), out, lse.T, *c.reference(r), c.dtype)
        outs.append(out)
        lses.append(lse)
    ref = c.reference()
    merged, merged_lse = dcpattn.merge_states(outs, [l.T for l in lses], return_lse=True)
    check("%s W=%d I=%d merged" % (family, world, inter), merged, merged_lse, *ref, c.dtype, 1.5)
    if world == 2:
        output, output_lse = torch.empty_like(outs[0]), torch.empty_like(lses[0])
        assert dcpattn.merge_attn_states(output, outs[0], lses[0], outs[1], lses[1], output_lse) is None
        check("merge_attn_states", output, output_lse.T, *ref, c.dtype, 1.5)


def test_gqa_fp16_strided_noncausal_and_splits():
    c = Case("gqa", 3, 4, seed=77, dtype=torch.float16, causal=False)
    outs, lses = [], []
    for r in range(3):
        sh = c.shard(r)
        # padded rows and heads: every stride a multiple of 8 elements, none contiguous
        big = torch.full((c.total_q, c.hq, c.dv + 8), float("nan"), dtype=c.dtype, device=DEV)
        out = big[:, :, :c.dv]
        lse = torch.full((c.hq, c.total_q + 3), float("nan"), device=DEV)[:, :c.total_q]
        res = c.attention(r, sh, out=out, softmax_lse=lse, num_splits=(1, 4, 0)[r], softmax_scale=0.07)
        assert res[0] is out and res[1] is lse
        assert torch.isnan(big[:, :, c.dv:]).all(), "wrote outside out's view"
        check("fp16 rank %d" % r, out, lse.T, *c.reference(r, scale=0.07), c.dtype)
        outs.append(out)
        lses.append(lse)
    merged = dcpattn.merge_states(outs, [l.T for l in lses], out_dtype="float32")
    assert merged.dtype == torch.float32
    check("fp16 merged", merged, None, *c.reference(scale=0.07), c.dtype, 1.5)


def test_mla_balanced_schedule():
    needs_family("mla")
    c = Case("mla", 2, 1, seed=5, batch=6)
    sh = c.shard(1)
    out, lse = c.attention(1, sh, num_splits=dcpattn.SPLITS_BALANCED)
    check("mla balanced", out, lse.T, *c.reference(1), c.dtype)


@pytest.mark.parametrize("inter", [1, 16])
@pytest.mark.parametrize("world", [1, 3])
def test_fp8_cache(world, inter):
    """An e4m3 cache (float8_e4m3fn, one scale each for K and V) against attention over the
    dequantized cache, each rank and merged."""
    c = Case("gqa", world, inter, seed=300 + 10 * world + inter, fp8=(1,) if inter == 1 else ())
    outs, lses = [], []
    for r in range(world):
        out, lse = c.attention(r, c.shard(r))
        check("fp8 W=%d I=%d rank %d" % (world, inter, r), out, lse.T, *c.reference(r), c.dtype)
        outs.append(out)
        lses.append(lse)
    merged = dcpattn.merge_states(outs, [l.T for l in lses])
    check("fp8 W=%d I=%d merged" % (world, inter), merged, None, *c.reference(), c.dtype, 1.5)


@pytest.mark.parametrize("inter", [1, 64])
@pytest.mark.parametrize("world", [1, 3])
def test_mla_fp8_cache(world, inter):
    """MLA over an e4m3 cache (576 bytes a row; V the first 512 of them, with v_scale), each
    rank and merged, the cache given as float8_e4m3fn and as uint8 bytes."""
    needs_family("mla")
    c = Case("mla", world, inter, seed=500 + 10 * world + inter, fp8=(1,))
    outs, lses = [], []
    for r in range(world):
        kw = dict(kv_cache_dtype="fp8_e4m3") if r % 2 else {}
        out, lse = c.attention(r, c.shard(r), **kw)
        check("mla fp8 W=%d I=%d rank %d" % (world, inter, r), out, lse.T, *c.reference(r), c.dtype)
        outs.append(out)
        lses.append(lse)
    merged = dcpattn.merge_states(outs, [l.T for l in lses])
    check("mla fp8 W=%d I=%d merged" % (world, inter), merged, None, *c.reference(), c.dtype, 1.5)


def test_fp8_cache_per_head_scales_as_bytes():
    """Per-KV-head scales, the cache given as uint8 with kv_cache_dtype="fp8_e4m3"; fp16 q."""
    c = Case("gqa", 3, 16, seed=41, dtype=torch.float16, fp8="per head")
    for r in range(3):
        out, lse = c.attention(r, c.shard(r), kv_cache_dtype="fp8_e4m3")
        check("fp8 per head rank %d" % r, out, lse.T, *c.reference(r), c.dtype)
    with pytest.raises(dcpattn.ArgumentError, match="k_scale is required with an FP8 KV cache"):
        c.attention(0, c.shard(0), k_scale=None)


def test_fp8_graph_replay_with_changed_scales():
    """The kernel reads the scales when it runs: a captured step replayed after their device
    values changed computes attention over the cache dequantized with the new ones."""
    c = Case("gqa", 3, 16, seed=43, fp8="per head")
    shards = [c.shard(r) for r in range(3)]
    outs = [torch.empty((c.total_q, c.hq, c.dv), dtype=c.dtype, device=DEV) for _ in range(3)]
    lses = [torch.empty((c.hq, c.total_q), device=DEV) for _ in range(3)]
    merged = torch.empty_like(outs[0])

    def step():
        for r in range(3):
            c.attention(r, shards[r], out=outs[r], softmax_lse=lses[r])
        dcpattn.merge_states(outs, [l.T for l in lses], out=merged)

    step()
    torch.cuda.synchronize()
    check("fp8 eager", merged, None, *c.reference(), c.dtype, 1.5)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for fk, fv in ((1.5, 0.25), (0.5, 3.0)):
        c.ks.mul_(fk)
        c.vs.mul_(fv)
        c.dequantize()
        merged.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check("fp8 replay, k_scale x%g, v_scale x%g" % (fk, fv), merged, None, *c.reference(), c.dtype, 1.5)


def test_steady_state_path_with_pytorch(monkeypatch):
    """A signature's second call takes the steady-state path (no checks, no plan lookup) and
    computes what the first computed."""
    c = Case("gqa", 2, 1, seed=17, fp8=(1,))
    sh = c.shard(1)
    general = []
    prepare = dcpattn._attention.prepare
    monkeypatch.setattr(dcpattn._attention, "prepare", lambda *a: general.append(1) or prepare(*a))
    dcpattn.clear_cache()
    first = c.attention(1, sh)
    second = c.attention(1, sh)
    assert len(general) == 1 and len(dcpattn._attention.calls) == 1
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert first[0].data_ptr() != second[0].data_ptr()


class DLPackOnly:
    """A torch tensor seen only through DLPack."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


class CAIOnly:
    """A torch tensor seen only through __cuda_array_interface__ v3, with a producer stream."""

    def __init__(self, t, stream=None):
        d = dict(t.__cuda_array_interface__)
        d["version"] = 3
        if stream is not None:
            d["stream"] = stream
        self.__cuda_array_interface__ = d


def test_foreign_arrays_give_the_same_bits():
    """DLPack producers and __cuda_array_interface__ producers take the same path to the
    same kernel as torch tensors."""
    c = Case("gqa", 2, 1, seed=11, dtype=torch.float16)
    sh = c.shard(0)
    ref_out, ref_lse = c.attention(0, sh)
    side = torch.cuda.Stream()
    for wrap in (DLPackOnly, lambda t: CAIOnly(t, side.cuda_stream)):
        out = torch.empty_like(ref_out)
        lse = torch.empty_like(ref_lse)
        res = dcpattn.flash_attn_varlen_func(
            wrap(c.q), wrap(sh["k"]), wrap(sh["v"]), wrap(c.cu_t), wrap(sh["used"]), wrap(sh["bt"]), max(c.qlens),
            sh["max_used"], return_softmax_lse=True, cp_world_size=2, cp_rank=0,
            cp_tot_seqused_k=wrap(c.lens_t), out=wrap(out), softmax_lse=wrap(lse))
        assert isinstance(res[0], (DLPackOnly, CAIOnly))
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
    with pytest.raises(dcpattn.ArgumentError, match="out= is required"):
        dcpattn.flash_attn_varlen_func(DLPackOnly(c.q), sh["k"], sh["v"], c.cu_t, sh["used"], sh["bt"],
                                       max(c.qlens), 100, cp_world_size=2, cp_tot_seqused_k=c.lens_t)


def test_streams():
    """The current PyTorch stream by default, an explicit stream= otherwise."""
    c = Case("gqa", 1, 1, seed=3)
    sh = c.shard(0)
    ref = c.reference(0)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out, lse = c.attention(0, sh)
    s.synchronize()
    check("current stream", out, lse.T, *ref, c.dtype)
    s2 = torch.cuda.Stream()
    s2.wait_stream(torch.cuda.current_stream())
    out2, lse2 = c.attention(0, sh, stream=s2)
    s2.synchronize()
    assert torch.equal(out2, out) and torch.equal(lse2, lse)


@pytest.mark.parametrize("family", ["gqa", "mla"])
def test_graph_capture_and_replay(family):
    """After one eager call the step (W ranks' attention and the merge) is captured with
    nothing allocated or compiled, and every replay computes the step for the new q."""
    needs_family(family)
    c = Case(family, 2, 16 if family == "gqa" else 1, seed=21)
    shards = [c.shard(r) for r in range(2)]
    outs = [torch.empty((c.total_q, c.hq, c.dv), dtype=c.dtype, device=DEV) for _ in range(2)]
    lses = [torch.empty((c.hq, c.total_q), device=DEV) for _ in range(2)]
    merged = torch.empty_like(outs[0])
    merged_lse = torch.empty((c.total_q, c.hq), device=DEV)

    def step():
        for r in range(2):
            c.attention(r, shards[r], out=outs[r], softmax_lse=lses[r])
        dcpattn.merge_states(outs, [l.T for l in lses], out=merged, out_lse=merged_lse)

    step()
    torch.cuda.synchronize()
    eager = merged.clone()
    plans = len(dcpattn._attention.plans)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        step()
        allocated = torch.cuda.memory_stats()["allocation.all.allocated"] - before
    assert allocated == 0, "the captured step allocated %d times" % allocated
    assert len(dcpattn._attention.plans) == plans, "the captured step made a plan"
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(merged, eager), "a replay on the same q differs from the eager step"
    for i in range(3):
        c.q.copy_(c.rand(c.q.shape, 2.0))
        merged.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check("%s replay %d" % (family, i), merged, merged_lse, *c.reference(), c.dtype, 1.5)


def test_merge_attn_states_like_vllm():
    """Non-finite LSE (vLLM's +inf included) is an empty state; output may be prefix_output."""
    g = torch.Generator().manual_seed(9)
    T, H, D = 37, 6, 128
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        o = [(torch.rand((T, H, D), generator=g) * 2 - 1).to(dtype).to(DEV) for _ in range(2)]
        lse = [(torch.randn((H, T), generator=g) * 3).to(DEV) for _ in range(2)]
        lse[0][:, 3], lse[1][:, 3] = float("inf"), float("-inf")   # both empty
        lse[0][:, 5], lse[1][:, 7] = float("nan"), float("-inf")   # one empty
        o[1][7] = float("nan")                                     # an empty state's o is never read
        w = [torch.where(torch.isfinite(l), l, torch.tensor(float("-inf"), device=DEV)).double() for l in lse]
        m = torch.logsumexp(torch.stack(w), 0)                     # H, T
        a = [torch.nan_to_num(torch.exp(x - m), nan=0.0).T[..., None] for x in w]
        ref = sum(ai * torch.nan_to_num(oi.double(), nan=0.0) for ai, oi in zip(a, o))
        out_lse = torch.empty((H, T), device=DEV)
        dcpattn.merge_attn_states(o[0], o[0], lse[0], o[1], lse[1], out_lse)   # in place
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
        err = (o[0].double() - ref).abs().max().item()
        assert err <= tol, "merge_attn_states %s: max |out - reference| = %.3g" % (dtype, err)
        assert torch.equal(torch.isinf(out_lse), torch.isinf(m)) and (o[0][3] == 0).all()
        fin = torch.isfinite(m)
        assert (out_lse.double()[fin] - m[fin]).abs().max().item() <= 1e-4


def test_merge_states_stacked_base2():
    g = torch.Generator().manual_seed(4)
    N, T, H, D = 5, 19, 4, 64
    o = (torch.rand((N, T, H, D), generator=g) * 2 - 1).to(DEV)
    lse2 = (torch.randn((N, T, H), generator=g) * 2).to(DEV)
    lse2[:, 2] = float("-inf")
    out, out_lse = dcpattn.merge_states(o, lse2, out_dtype="bfloat16", lse_base2_in=True, return_lse=True)
    assert out.dtype == torch.bfloat16
    ln = lse2.double() * torch.log(torch.tensor(2.0, dtype=torch.float64))
    m = torch.logsumexp(ln, 0)
    ref = (torch.nan_to_num(torch.exp(ln - m), nan=0.0)[..., None] * o.double()).sum(0)
    check("merge_states stacked", out, out_lse, ref, m, torch.bfloat16)


@pytest.fixture(scope="module")
def nccl_group_of_one():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("this PyTorch has no NCCL backend")
    store = tempfile.NamedTemporaryFile(prefix="dcpattn-pg-", delete=False)
    store.close()
    os.unlink(store.name)
    dist.init_process_group("nccl", init_method="file://" + store.name, rank=0, world_size=1, device_id=DEV)
    try:
        dist.all_reduce(torch.ones(1, device=DEV))
        torch.cuda.synchronize()
        try:
            comm = dcpattn.nccl_comm_from_torch()  # also points dcpattn at PyTorch's libnccl
        except AttributeError:
            pytest.skip("this PyTorch's ProcessGroupNCCL has no _comm_ptr()")
        except dcpattn.DcpattnError as e:
            if e.name != "NO_NCCL":
                raise
            pytest.skip(e.detail)
        yield comm
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("transport", ["a2a", "ag_rs"])
@pytest.mark.parametrize("layout", ["scatter", "replicate"])
def test_dcp_combine_group_of_one(nccl_group_of_one, transport, layout):
    """W = 1 through a real torch.distributed NCCL communicator, and without one: the
    combine of one state is the state (rows with an empty state become 0)."""
    g = torch.Generator().manual_seed(2)
    T, H, D = 33, 8, 128
    o = (torch.rand((T, H, D), generator=g) * 2 - 1).to(torch.bfloat16).to(DEV)
    lse_ht = (torch.randn((H, T), generator=g) * 3).to(DEV)   # FlashAttention's layout, passed as .T
    lse_ht[:, 4] = float("-inf")
    ref = o.double().clone()
    ref[4] = 0
    for comm in (nccl_group_of_one, None):
        out, out_lse = dcpattn.dcp_combine(o, lse_ht.T, comm, world_size=1, rank=0, transport=transport,
                                           layout=layout, return_lse=True)
        dcpattn.dcp_wait(comm, timeout_ms=60000)
        assert out.shape == (T, H, D) and out_lse.shape == (T, H)
        check("combine %s %s comm=%s" % (transport, layout, bool(comm)), out, out_lse, ref, lse_ht.T.double(),
              torch.bfloat16, 0.05)
    with pytest.raises(dcpattn.DcpattnError, match="the communicator has 1 ranks") as e:
        dcpattn.dcp_combine(o, lse_ht.T, nccl_group_of_one, world_size=2, rank=0, transport=transport, layout=layout)
    assert e.value.name == "INVALID_ARGUMENT"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="the multi-GPU combine needs 2 or more GPUs")
def test_dcp_combine_across_gpus(tmp_path):
    """W = every visible GPU, one process each (python/tests/combine_worker.py)."""
    world = min(torch.cuda.device_count(), 8)
    store = str(tmp_path / "store")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    procs = [subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "combine_worker.py"),
                               str(r), str(world), store], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)
