"""GPU (PyTorch and an sm_80 or newer CUDA device needed; skipped otherwise):
flash_mla_sparse_decode against a float64 reference written here.

A case is a batch of sequences with mixed query lengths and global lengths from a few tokens
(fewer than W*I: some ranks own none of them) to a few thousand, sharded over W ranks with
interleave I into paged caches whose unused slots and pages are NaN (an FP8 cache: 0xff
bytes, NaN values and scales). Every query token has a list of global ids with -1s, ids past
the length, repeats, one list all -1, and valid ids in the row padding past topk (never to be
read). The reference gathers, per rank r, the ids the rank keeps (0 <= g < L, (g // I) % W ==
r) from its cache at local index (g // (I*W))*I + g % I through its block table, takes the
softmax over them in float64 and, on rank 0, folds the sink into the normalizer. The W
partials merged with merge_attn_states must equal unsharded sparse attention with the sink.
DeepSeek's 656-byte FP8 rows are built here from random values: 512 e4m3 values, 4 float32
scales (max |v| / 448 of each 128), 64 bfloat16 RoPE values; the e4m3 cache with per-tensor
scales (fmt "e4m3", "fp16_e4m3") is 576 e4m3 bytes a row, K = e4m3 * k_scale, V = the first 512
* v_scale."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the GPU tests need it")
if not torch.cuda.is_available():
    pytest.skip("no GPU found (torch.cuda.is_available() is False): the GPU tests need one",
                allow_module_level=True)
if torch.cuda.get_device_capability(0) < (8, 0):
    pytest.skip("sparse MLA needs an sm_80 or newer GPU; this one is sm_%d%d" % torch.cuda.get_device_capability(0),
                allow_module_level=True)

import dcpattn  # noqa: E402
from dcpattn import _sparse  # noqa: E402

DEV = torch.device("cuda", 0)
DQK, DV = 576, 512
# as test_gpu.py: max |error| against float64 of out (rounded to the input type after the
# probabilities were rounded to it) and of the float32 lse
TOL = {torch.bfloat16: (2e-2, 1.5e-2), torch.float16: (3e-3, 3e-3)}


def fp8_ds_rows(k):
    """DeepSeek's 656-byte rows (uint8 [n, 656]) of the values k [n, 576]."""
    n = k.shape[0]
    nope = k[:, :DV].float().reshape(n, 4, 128)
    scale = (nope.abs().amax(-1) / 448).clamp_min(1e-6)                                     # n, 4
    e4m3 = (nope / scale[..., None]).to(torch.float8_e4m3fn).view(torch.uint8).reshape(n, DV)
    scales = scale.contiguous().view(torch.uint8).reshape(n, 16)
    rope = k[:, DV:].to(torch.bfloat16).contiguous().view(torch.uint8).reshape(n, 128)
    return torch.cat([e4m3, scales, rope], 1)


def fp8_ds_values(rows):
    """float64 [n, 576] of 656-byte rows as the kernel reads them: e4m3 * its scale, RoPE."""
    n = rows.shape[0]
    e4m3 = rows[:, :DV].contiguous().view(torch.float8_e4m3fn).double().reshape(n, 4, 128)
    scales = rows[:, DV:DV + 16].contiguous().view(torch.float32).double()
    rope = rows[:, DV + 16:].contiguous().view(torch.bfloat16).double()
    return torch.cat([(e4m3 * scales[..., None]).reshape(n, DV), rope], 1)


class SparseCase:
    """A batch of global sequences, their query tokens' top-k lists, and W shards."""

    def __init__(self, fmt, world, inter, hq, seed, topk=128, qlens=(1, 3, 16, 2), page=64, pad=16, counts=True,
                 sinks=True, four_d=False):
        self.fp8, self.world, self.inter, self.hq, self.topk, self.page = fmt == "fp8_ds_mla", world, inter, hq, \
            topk, page
        self.e4m3 = fmt.endswith("e4m3")  # 576 e4m3 bytes a row, per-tensor k_scale and v_scale
        self.dtype = torch.float16 if fmt.startswith("fp16") else torch.bfloat16
        self.four_d = four_d
        g = self.gen = torch.Generator().manual_seed(seed)
        self.qlens, self.batch = list(qlens), len(qlens)
        short = world * inter
        lens = [qlens[0] + int(torch.randint(0, max(short, 2), (1,), generator=g))]  # may be < W*I
        lens += [max(q, int(torch.randint(40, 1500, (1,), generator=g))) for q in qlens[1:-1]]
        lens += [max(qlens[-1], int(torch.randint(2500, 3500, (1,), generator=g)))]
        self.lens = lens
        self.cu = [0]
        for q in qlens:
            self.cu.append(self.cu[-1] + q)
        self.total_q = self.cu[-1]
        self.q = ((torch.rand((self.total_q, hq, DQK), generator=g) * 2 - 1) * 3).to(self.dtype).to(DEV)
        # each sequence's keys as the cache holds them: dtype rows, or 656-byte rows
        vals = [((torch.rand((L, DQK), generator=g) * 2 - 1)).to(self.dtype) for L in lens]
        if self.e4m3:  # the bytes of the values over 1/32; the scales two values near it
            self.rows = [(v.float() * 32).to(torch.float8_e4m3fn).view(torch.uint8).to(DEV) for v in vals]
            self.ks = (0.02 + 0.02 * torch.rand(1, generator=g)).to(DEV)
            self.vs = (0.01 + 0.04 * torch.rand(1, generator=g)).to(DEV)
        else:
            self.rows = [fp8_ds_rows(v).to(DEV) if self.fp8 else v.to(DEV) for v in vals]
        # the top-k lists: ids within the causal prefix, about 25 % -1, some past the length,
        # repeats; token 1's list all -1; the row padding holds valid ids the kernel must skip
        ids = torch.empty((self.total_q, topk + pad), dtype=torch.int64)
        for b, (ql, L) in enumerate(zip(qlens, lens)):
            for i in range(ql):
                t = self.cu[b] + i
                row = torch.randint(0, L - ql + i + 1, (topk + pad,), generator=g)
                u = torch.rand(topk, generator=g)
                row[:topk][u < 0.25] = -1
                row[:topk][(u >= 0.25) & (u < 0.3)] = L + torch.randint(0, 100, (1,), generator=g)
                rep = torch.randint(0, topk, (topk // 8,), generator=g)
                row[rep] = row[torch.randint(0, topk, (topk // 8,), generator=g)]
                if t == 1:
                    row[:topk] = -1
                ids[t] = row
        self.ids_full = ids.to(torch.int32).to(DEV)
        self.ids = self.ids_full[:, :topk]  # row stride topk + pad
        self.counts = None
        if counts:
            c = torch.randint(-3, topk + 10, (self.total_q,), generator=g)
            c[2::3] = 0
            self.counts = c.to(torch.int32).to(DEV)
        self.sinks = None
        if sinks:
            s = torch.rand(hq, generator=g) * 6
            s[6::7] = float("-inf")  # no sink for these heads
            self.sinks = s.to(DEV)
        self.cu_t = torch.tensor(self.cu, dtype=torch.int32, device=DEV)
        self.lens_t = torch.tensor(lens, dtype=torch.int32, device=DEV)

    def shard(self, rank, world=None, inter=None):
        """Rank's paged cache (unused slots and pages NaN), block table and lengths; world 1
        gives the whole sequence in one cache."""
        W, I, P = world or self.world, inter or self.inter, self.page
        toks = [dcpattn.rank_tokens(L, W, rank, I) for L in self.lens]
        need = [(len(t) + P - 1) // P for t in toks]
        num_pages = sum(need) + 3
        width = max(max(need), 1) + 1
        perm = torch.randperm(num_pages, generator=self.gen).tolist()
        bt = torch.full((self.batch, width), perm[-1], dtype=torch.int32)
        row = 656 if self.fp8 else DQK
        if self.fp8 or self.e4m3:
            cache = torch.full((num_pages, P, row), 0xFF, dtype=torch.uint8, device=DEV)
        else:
            cache = torch.full((num_pages, P, row), float("nan"), dtype=self.dtype, device=DEV)
        at = 0
        for b, t in enumerate(toks):
            bt[b, :need[b]] = torch.tensor(perm[at:at + need[b]], dtype=torch.int32)
            at += need[b]
            if t:
                j = torch.arange(len(t))
                cache[bt[b, j // P].long().to(DEV), (j % P).to(DEV)] = self.rows[b][torch.tensor(t, device=DEV)]
        used = torch.tensor([len(t) for t in toks], dtype=torch.int32, device=DEV)
        return dict(cache=cache.unsqueeze(2) if self.four_d else cache, bt=bt.to(DEV), used=used,
                    max_used=max(max(len(t) for t in toks), 1), world=W, inter=I, rank=rank)

    def reference(self, sh, sinks=True):
        """float64 out [total_q, hq, 512] and lse [total_q, hq] of sparse attention over the
        shard sh: each token's kept ids gathered through the block table; the sink folded in
        on rank 0."""
        W, I, r, P = sh["world"], sh["inter"], sh["rank"], self.page
        cache = sh["cache"].view(torch.uint8) if self.e4m3 else sh["cache"]  # (bytes: indexable)
        cache = cache.reshape(cache.shape[0], P, -1)
        scale = DQK ** -0.5
        out = torch.zeros((self.total_q, self.hq, DV), dtype=torch.float64, device=DEV)
        lse = torch.full((self.total_q, self.hq), float("-inf"), dtype=torch.float64, device=DEV)
        for b, L in enumerate(self.lens):
            for t in range(self.cu[b], self.cu[b + 1]):
                n = self.topk if self.counts is None else min(max(int(self.counts[t]), 0), self.topk)
                g = self.ids[t, :n].long()
                g = g[(g >= 0) & (g < L) & ((g // I) % W == r)]
                if g.numel() == 0:
                    continue
                local = (g // (I * W)) * I + g % I
                rows = cache[sh["bt"][b, local // P].long(), local % P]
                if self.e4m3:
                    e = rows.view(torch.float8_e4m3fn).double()
                    kv, v = e * self.ks.double(), e[:, :DV] * self.vs.double()
                else:
                    kv = fp8_ds_values(rows) if self.fp8 else rows.double()             # n, 576
                    v = kv[:, :DV]
                s = scale * self.q[t].double() @ kv.T                                    # hq, n
                m = torch.logsumexp(s, -1)
                out[t] = torch.exp(s - m[:, None]) @ v
                lse[t] = m
        if sinks and self.sinks is not None and r == 0:
            sk = self.sinks.double()[None, :].expand_as(lse)
            has = torch.isfinite(sk)
            new = torch.where(has, torch.logaddexp(lse, sk), lse)
            out *= torch.nan_to_num(torch.exp(lse - new), nan=0.0)[..., None]
            lse = new
        return out, lse

    def attention(self, sh, **kw):
        args = dict(topk_count=self.counts, sinks=self.sinks, return_softmax_lse=True,
                    kv_cache_dtype="fp8_ds_mla" if self.fp8 else "fp8_e4m3" if self.e4m3 else "auto",
                    cp_world_size=sh["world"],
                    cp_rank=sh["rank"], cp_kv_cache_interleave_size=sh["inter"],
                    cp_tot_seqused_k=self.lens_t if sh["world"] > 1 else None)
        if self.e4m3:
            args.update(k_scale=self.ks, v_scale=self.vs)
        args.update(kw)
        return dcpattn.flash_mla_sparse_decode(self.q, sh["cache"], sh["bt"], self.cu_t, sh["used"], self.ids,
                                               max(self.qlens), sh["max_used"], **args)


def check(what, out, lse, ref_out, ref_lse, dtype, tol_mult=1.0):
    """out against ref_out, lse ([T, H]) against ref_lse; rows with no key and no sink
    exactly 0 / -inf."""
    tol_o, tol_l = (t * tol_mult for t in TOL[dtype])
    o, ld = out.double(), lse.double()
    assert not torch.isnan(o).any(), "%s: NaN in out" % what
    assert not torch.isnan(ld).any(), "%s: NaN in lse" % what
    empty = torch.isinf(ref_lse)
    assert (o[empty] == 0).all(), "%s: rows that keep no id are not 0" % what
    assert (ld[empty] == float("-inf")).all(), "%s: rows that keep no id do not have lse -inf" % what
    err = (o - ref_out).abs().max().item()
    assert err <= tol_o, "%s: max |out - reference| = %.3g > %.3g" % (what, err, tol_o)
    lerr = (ld[~empty] - ref_lse[~empty]).abs().max().item() if (~empty).any() else 0.0
    assert lerr <= tol_l, "%s: max |lse - reference| = %.3g > %.3g" % (what, lerr, tol_l)


def merged(outs, lses):
    """The W partials merged two at a time with merge_attn_states (lse [H, T])."""
    o, l = outs[0], lses[0]
    for o2, l2 in zip(outs[1:], lses[1:]):
        no, nl = torch.empty_like(o), torch.empty_like(l)
        assert dcpattn.merge_attn_states(no, o, l, o2, l2, nl) is None
        o, l = no, nl
    return o, l


@pytest.mark.parametrize("hq", [16, 128])
@pytest.mark.parametrize("world, inter", [(1, 1), (1, 64), (3, 1), (3, 64)])
@pytest.mark.parametrize("fmt", ["bf16", "fp8_ds_mla", "e4m3"])
def test_sparse_dcp_attention_and_merge(fmt, world, inter, hq):
    c = SparseCase(fmt, world, inter, hq, seed=100 * world + inter + hq + {"bf16": 0, "fp8_ds_mla": 7, "e4m3": 11}[fmt],
                   four_d=hq == 128)
    outs, lses = [], []
    for r in range(world):
        sh = c.shard(r)
        out, lse = c.attention(sh)
        assert out.shape == (c.total_q, hq, DV) and out.dtype == c.dtype
        assert lse.shape == (hq, c.total_q) and lse.dtype == torch.float32  # flash_attn_varlen_func's layout
        check("%s hq=%d W=%d I=%d rank %d" % (fmt, hq, world, inter, r), out, lse.T, *c.reference(sh), c.dtype)
        outs.append(out)
        lses.append(lse)
    # unsharded sparse attention with the sink: one cache holding every token
    ref = c.reference(c.shard(0, 1, 1))
    mo, ml = merged(outs, lses)
    check("%s hq=%d W=%d I=%d merged" % (fmt, hq, world, inter), mo, ml.T, *ref, c.dtype, 1.0 + 0.5 * (world - 1))


def test_fp16_top2048_no_counts_no_padding():
    """fp16 q and cache, vLLM's top-k of 2048 with rows of exactly topk, no counts, no
    sinks, W 3, I 3, pages of 16."""
    c = SparseCase("fp16", 3, 3, 32, seed=9, topk=2048, qlens=(2, 1, 5), page=16, pad=0, counts=False, sinks=False)
    assert c.ids.stride(0) == 2048
    outs, lses = [], []
    for r in range(3):
        sh = c.shard(r)
        out, lse = c.attention(sh)
        check("fp16 rank %d" % r, out, lse.T, *c.reference(sh), c.dtype)
        outs.append(out)
        lses.append(lse)
    mo, ml = merged(outs, lses)
    check("fp16 merged", mo, ml.T, *c.reference(c.shard(0, 1, 1)), c.dtype, 2.0)


def test_sinks_apply_on_rank_0_only():
    """Every rank is given the sinks; a rank other than 0 computes what it computes without
    them, and rank 0's rows that keep no id have out 0 and lse = the sink."""
    c = SparseCase("bf16", 2, 1, 16, seed=31)
    sh1 = c.shard(1)
    with_sinks = c.attention(sh1)
    without = c.attention(sh1, sinks=None)
    assert torch.equal(with_sinks[0], without[0]) and torch.equal(with_sinks[1], without[1])
    out, lse = c.attention(c.shard(0))
    fin = torch.isfinite(c.sinks)
    assert (out[1] == 0).all() and torch.allclose(lse[fin, 1], c.sinks[fin], rtol=0, atol=1e-5)  # token 1: no id
    assert (lse[~fin, 1] == float("-inf")).all()


def test_steady_state_path_and_graph_replay(monkeypatch):
    """A signature's second call takes the steady-state path and computes what the first
    computed; after one eager call the step is captured with nothing allocated, and a replay
    follows new ids written into the same tensor."""
    c = SparseCase("fp8_ds_mla", 3, 64, 64, seed=57)
    shards = [c.shard(r) for r in range(3)]
    general = []
    prepare = _sparse.prepare
    monkeypatch.setattr(_sparse, "prepare", lambda *a: general.append(1) or prepare(*a))
    dcpattn.clear_cache()
    first = c.attention(shards[1])
    second = c.attention(shards[1])
    assert len(general) == 1 and len(_sparse.calls) == 1
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert first[0].data_ptr() != second[0].data_ptr()

    outs = [torch.empty((c.total_q, c.hq, DV), dtype=c.dtype, device=DEV) for _ in range(3)]
    lses = [torch.empty((c.hq, c.total_q), device=DEV) for _ in range(3)]

    def step():
        for r in range(3):
            c.attention(shards[r], out=outs[r], softmax_lse=lses[r])

    step()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        step()
        allocated = torch.cuda.memory_stats()["allocation.all.allocated"] - before
    assert allocated == 0, "the captured step allocated %d times" % allocated
    new_ids = c.ids_full.flip(0)  # other tokens' lists (ids past a shorter sequence's length are skipped)
    c.ids_full.copy_(new_ids)
    replay_checked(g, c, shards, outs, lses, "graph replay")


def replay_checked(g, c, shards, outs, lses, what):
    """Poisons the outputs, replays the graph and checks each rank's against its reference."""
    for o, l in zip(outs, lses):
        o.fill_(float("nan"))
        l.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    for r, sh in enumerate(shards):
        check("%s rank %d" % (what, r), outs[r], lses[r].T, *c.reference(sh), c.dtype)


def test_e4m3_fp16_graph_replay_with_new_scales():
    """fp16 q over an e4m3 cache given as float8_e4m3fn ("auto"), W 2, I 16: a captured call
    replayed after the scales' values changed in place follows them (the kernel reads them)."""
    c = SparseCase("fp16_e4m3", 2, 16, 32, seed=23, qlens=(1, 4, 2))
    shards = [c.shard(r) for r in range(2)]
    for sh in shards:
        sh["cache"] = sh["cache"].view(torch.float8_e4m3fn)
    outs = [torch.empty((c.total_q, c.hq, DV), dtype=c.dtype, device=DEV) for _ in range(2)]
    lses = [torch.empty((c.hq, c.total_q), device=DEV) for _ in range(2)]

    def step():
        for r in range(2):
            c.attention(shards[r], out=outs[r], softmax_lse=lses[r], kv_cache_dtype="auto")

    step()
    torch.cuda.synchronize()
    for r in range(2):
        check("e4m3 fp16 eager rank %d" % r, outs[r], lses[r].T, *c.reference(shards[r]), c.dtype)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    c.ks.mul_(1.5)
    c.vs.mul_(0.25)
    replay_checked(g, c, shards, outs, lses, "e4m3 fp16 replay with new scales")
