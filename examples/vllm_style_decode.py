"""vllm_style_decode.py — one decode step of a DCP group, simulated on one GPU, through the
dcpattn Python package with the calls vLLM makes.

One paged KV cache holds every sequence whole (what a single GPU would have). The W ranks'
shards are built from it by the placement rule (global token g on rank (g // I) % W at local
index (g // (W*I))*I + g % I), each in its own paged cache with its own block table. A
decode step is each rank's flash_attn_varlen_func over its shard (cp_world_size, cp_rank,
cp_tot_seqused_k, cp_kv_cache_interleave_size) and the exact merge of the W partial
states (merge_states: what dcp_combine computes across real ranks). The merged output is
checked against unsharded attention (cp_world_size = 1 over the whole cache); the step is
timed eagerly and as a replayed CUDA graph; the host time of a call is split into the
library's launch and the Python package's own overhead.

usage: python examples/vllm_style_decode.py [-W 4] [-I 1] [--batch 16] [--len 4096]
           [--q-len 1] [--mla] [--iters 100]
Needs PyTorch, a CUDA GPU (MLA: Hopper) and build/libdcpattn.so (`make`)."""

import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

try:
    import dcpattn
except ImportError:  # not installed: the package of this repository
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import dcpattn
from dcpattn import _attention, _lib  # the call's two halves, for the overhead measurement


def paged(lens, hkv, d, page, dtype, dev, gen):
    """A pool of pages holding sequences of the given lengths in random pages: (k, v, block
    table); v is None for MLA (d = 576: V is K's first 512 channels)."""
    need = [(L + page - 1) // page for L in lens]
    pool = sum(need)
    k = ((torch.rand((pool, page, hkv, d), generator=gen) * 2 - 1) * 2).to(dtype).to(dev)
    v = None if d == 576 else (torch.rand((pool, page, hkv, d), generator=gen) * 2 - 1).to(dtype).to(dev)
    perm = torch.randperm(pool, generator=gen)
    bt = torch.zeros((len(lens), max(need)), dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        bt[b, :n] = perm[at:at + n]
        at += n
    return k, v, bt.to(dev)


def shard(k, v, bt, lens, world, rank, inter, page):
    """Rank `rank`'s own paged cache: its tokens of every sequence, copied out of the whole
    cache in local order."""
    toks = [torch.tensor(dcpattn.rank_tokens(L, world, rank, inter), dtype=torch.long, device=k.device)
            for L in lens]
    need = [(len(t) + page - 1) // page for t in toks]
    kr = torch.zeros((max(sum(need), 1),) + tuple(k.shape[1:]), dtype=k.dtype, device=k.device)
    vr = None if v is None else torch.zeros((kr.shape[0],) + tuple(v.shape[1:]), dtype=v.dtype, device=v.device)
    btr = torch.zeros((len(lens), max(max(need), 1)), dtype=torch.int32, device=k.device)
    at = 0
    for b, t in enumerate(toks):
        btr[b, :need[b]] = torch.arange(at, at + need[b], dtype=torch.int32)
        at += need[b]
        if len(t):
            src = (bt[b, t // page].long(), t % page)
            j = torch.arange(len(t), device=k.device)
            dst = (btr[b, j // page].long(), j % page)
            kr[dst] = k[src]
            if v is not None:
                vr[dst] = v[src]
    used = torch.tensor([len(t) for t in toks], dtype=torch.int32, device=k.device)
    return kr, vr, btr, used, max(len(t) for t in toks)


def cuda_time(fn, iters):
    """Median GPU time of fn() in microseconds (CUDA events around each call)."""
    times = []
    for _ in range(iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(times)


def host_time(fn, n):
    """Host microseconds per call of fn(), n calls back to back (launches queue on the GPU)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-W", type=int, default=4, help="ranks of the DCP group")
    ap.add_argument("-I", type=int, default=1, help="interleave (tokens per chunk)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--len", type=int, default=4096, help="mean global sequence length")
    ap.add_argument("--q-len", type=int, default=1, help="query tokens per sequence (MTP, speculative)")
    ap.add_argument("--mla", action="store_true", help="DeepSeek MLA (576/512, one latent head) instead of GQA")
    ap.add_argument("--iters", type=int, default=100)
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    gen = torch.Generator().manual_seed(0)
    W, I, B, ql = a.W, a.I, a.batch, a.q_len
    hq, hkv, dqk, page = (16, 1, 576, 64) if a.mla else (32, 8, 128, 16)
    dtype = torch.bfloat16
    lens = [max(ql, a.len + int(d)) for d in torch.randint(-a.len // 2, a.len // 2 + 1, (B,), generator=gen)]

    # the whole cache, the query rows (all query heads: vLLM gathers them over the group)
    k, v, bt = paged(lens, hkv, dqk, page, dtype, dev, gen)
    q = ((torch.rand((B * ql, hq, dqk), generator=gen) * 2 - 1) * 2).to(dtype).to(dev)
    cu = torch.arange(0, B * ql + 1, ql, dtype=torch.int32, device=dev)
    lens_t = torch.tensor(lens, dtype=torch.int32, device=dev)
    ranks = [shard(k, v, bt, lens, W, r, I, page) for r in range(W)]
    dv = 512 if a.mla else dqk
    outs = [torch.empty((B * ql, hq, dv), dtype=dtype, device=dev) for _ in range(W)]
    lses = [torch.empty((hq, B * ql), device=dev) for _ in range(W)]
    merged = torch.empty_like(outs[0])

    def rank_call(r):
        kr, vr, btr, used, max_used = ranks[r]
        return dict(q=q, k_cache=kr, v_cache=vr, cu_seqlens_q=cu, seqused_k=used, block_table=btr, max_seqlen_q=ql,
                    max_seqlen_k=max_used, return_softmax_lse=True, cp_world_size=W, cp_rank=r,
                    cp_tot_seqused_k=lens_t, cp_kv_cache_interleave_size=I, out=outs[r], softmax_lse=lses[r])

    calls = [rank_call(r) for r in range(W)]

    def step():
        for c in calls:
            dcpattn.flash_attn_varlen_func(**c)
        dcpattn.merge_states(outs, [x.T for x in lses], out=merged)

    step()
    ref = dcpattn.flash_attn_varlen_func(q, k, v, cu, lens_t, bt, ql, max(lens))
    torch.cuda.synchronize()
    err = (merged.float() - ref.float()).abs().max().item()
    ok = err <= 2e-2 and not torch.isnan(merged).any()
    print("%s Hq=%d Hkv=%d D=%d/%d page %d, B=%d, global lengths %d..%d, q_len %d, W=%d, I=%d"
          % ("MLA" if a.mla else "GQA", hq, hkv, dqk, dv, page, B, min(lens), max(lens), ql, W, I))
    print("W ranks + merge vs unsharded attention: max |difference| %.3g  %s"
          % (err, "ok" if ok else "MISMATCH"))

    t_step = cuda_time(step, a.iters)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    t_graph = cuda_time(g.replay, a.iters)
    t_one = cuda_time(lambda: dcpattn.flash_attn_varlen_func(q, k, v, cu, lens_t, bt, ql, max(lens)), a.iters)
    print("decode step (W attention calls + merge): %.1f us eager, %.1f us as a CUDA graph; "
          "unsharded attention on one GPU %.1f us" % (t_step, t_graph, t_one))

    # host cost of one call: the whole Python call, and the library's launch alone (ctypes,
    # the argument block already packed); the difference is the package's own work
    c0 = calls[0]
    n = 200
    t_call = min(host_time(lambda: dcpattn.flash_attn_varlen_func(**c0), n) for _ in range(5))
    p = _attention.prepare(c0["q"], c0["k_cache"], c0["v_cache"], cu, c0["seqused_k"], c0["block_table"], ql,
                           c0["max_seqlen_k"], None, True, True, W, 0, lens_t, I, c0["out"], 0, None, c0["softmax_lse"])
    lib, pl, stream = _lib.get(), p[0], p[2]
    print("rank 0's plan: %s, %d split(s), workspace %d bytes" % (pl.variant, pl.num_splits, pl.ws_bytes))
    block = _lib.AttnArgs()
    _attention._pack(block, 0, *p[1])
    addr = ctypes.addressof(block)
    t_c = min(host_time(lambda: lib.attn_run_gil(pl.handle, addr, pl.ws, pl.ws_bytes, stream), n) for _ in range(5))
    print("host time per flash_attn_varlen_func call: %.1f us, of which dcpattn_attn_run %.1f us: "
          "Python overhead %.1f us per call (goal < 15 us)" % (t_call, t_c, t_call - t_c))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
