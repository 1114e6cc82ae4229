"""vllm_style_decode.py — one decode step of a DCP group, simulated on one GPU, through the
dcpattn Python package with the calls vLLM makes.

One paged KV cache holds every sequence whole (what a single GPU would have). The W ranks'
shards are built from it by the placement rule (global token g on rank (g // I) % W at local
index (g // (W*I))*I + g % I), each in its own paged cache with its own block table. A
decode step is each rank's flash_attn_varlen_func over its shard (cp_world_size, cp_rank,
cp_tot_seqused_k, cp_kv_cache_interleave_size) and the exact merge of the W partial
states (merge_states: what dcp_combine computes across real ranks). The merged output is
checked against unsharded attention (cp_world_size = 1 over the whole cache); the step is
timed eagerly and as a replayed CUDA graph. The host time of rank 0's call is measured
three ways, each the median of --rounds rounds of 100 back-to-back calls, the kinds taking
turns within a round: the whole call; the library's launch alone (dcpattn_attn_run on the
call's own argument block); and the call with its launch replaced by a no-op C function.
The package's own work is the first minus the second, and, without the GPU's part at all,
the third minus the no-op alone.

usage: python examples/vllm_style_decode.py [-W 4] [-I 1] [--batch 16] [--len 4096]
           [--q-len 1] [--mla] [--fp8] [--iters 100] [--rounds 101]
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
from dcpattn import _attention, _lib  # a call's launch, for the overhead measurement


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


def host_times(fns, rounds, n=100):
    """Median host microseconds per call of each of fns: rounds rounds, each timing n
    back-to-back calls of every fn in turn (the GPU drained first, so that no launch waits
    for room in its queue)."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for t, fn in zip(times, fns):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return [statistics.median(t) for t in times]


def launch_of(call):
    """(plan, a copy of the argument block, stream) of one flash_attn_varlen_func call,
    caught at its launch (each plan's run replaced for that call: the documented hook)."""
    seen, plans = [], list(_attention.plans.values())
    runs = [p.run for p in plans]

    def catch(plan):
        def run(handle, addr, ws, ws_bytes, stream):
            seen.append((plan, ctypes.string_at(addr, ctypes.sizeof(_lib.AttnArgs)), stream))
            return 0
        return run

    for p in plans:
        p.run = catch(p)
    try:
        dcpattn.flash_attn_varlen_func(**call)
    finally:
        for p, r in zip(plans, runs):
            p.run = r
    return seen[0]


def overhead(call, rounds):
    """Host microseconds of one call: (whole call, dcpattn_attn_run alone, call with a no-op
    launch, the no-op alone)."""
    dcpattn.flash_attn_varlen_func(**call)
    plan, block, stream = launch_of(call)
    buf = ctypes.create_string_buffer(block, len(block))
    addr, run = ctypes.addressof(buf), plan.run
    # a C function of the process that takes no arguments and returns 0, called as a launch is
    noop = ctypes.PyDLL(None).PyErr_Occurred
    noop.restype, noop.argtypes = ctypes.c_int, run.argtypes
    t_call, t_run = host_times([lambda: dcpattn.flash_attn_varlen_func(**call),
                                lambda: run(plan.handle, addr, plan.ws, plan.ws_bytes, stream)], rounds)
    plan.run = noop
    try:
        t_pkg, t_noop = host_times([lambda: dcpattn.flash_attn_varlen_func(**call),
                                    lambda: noop(plan.handle, addr, plan.ws, plan.ws_bytes, stream)], rounds)
    finally:
        plan.run = run
    return t_call, t_run, t_pkg, t_noop


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-W", type=int, default=4, help="ranks of the DCP group")
    ap.add_argument("-I", type=int, default=1, help="interleave (tokens per chunk)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--len", type=int, default=4096, help="mean global sequence length")
    ap.add_argument("--q-len", type=int, default=1, help="query tokens per sequence (MTP, speculative)")
    ap.add_argument("--mla", action="store_true", help="DeepSeek MLA (576/512, one latent head) instead of GQA")
    ap.add_argument("--fp8", action="store_true", help="an e4m3 KV cache, one scale for K and one for V")
    ap.add_argument("--iters", type=int, default=100, help="GPU timings: the median of this many steps")
    ap.add_argument("--rounds", type=int, default=101, help="host timings: the median of this many rounds")
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
    scales = {}
    if a.fp8:  # e4m3 bytes (kept as uint8, which every copy below handles) of K / k_scale
        ks, vs = torch.tensor([0.01], device=dev), torch.tensor([0.005], device=dev)
        k = (k.float() / ks).to(torch.float8_e4m3fn).view(torch.uint8)
        v = None if v is None else (v.float() / vs).to(torch.float8_e4m3fn).view(torch.uint8)  # (MLA: K's bytes)
        scales = dict(kv_cache_dtype="fp8_e4m3", k_scale=ks, v_scale=vs)
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
                    cp_tot_seqused_k=lens_t, cp_kv_cache_interleave_size=I, out=outs[r], softmax_lse=lses[r],
                    **scales)

    calls = [rank_call(r) for r in range(W)]

    def step():
        for c in calls:
            dcpattn.flash_attn_varlen_func(**c)
        dcpattn.merge_states(outs, [x.T for x in lses], out=merged)

    step()
    ref = dcpattn.flash_attn_varlen_func(q, k, v, cu, lens_t, bt, ql, max(lens), **scales)
    torch.cuda.synchronize()
    err = (merged.float() - ref.float()).abs().max().item()
    ok = err <= 2e-2 and not torch.isnan(merged).any()
    print("%s%s Hq=%d Hkv=%d D=%d/%d page %d, B=%d, global lengths %d..%d, q_len %d, W=%d, I=%d"
          % ("MLA" if a.mla else "GQA", " e4m3 cache" if a.fp8 else "", hq, hkv, dqk, dv, page, B, min(lens),
             max(lens), ql, W, I))
    print("W ranks + merge vs unsharded attention: max |difference| %.3g  %s"
          % (err, "ok" if ok else "MISMATCH"))

    t_step = cuda_time(step, a.iters)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    t_graph = cuda_time(g.replay, a.iters)
    t_one = cuda_time(lambda: dcpattn.flash_attn_varlen_func(q, k, v, cu, lens_t, bt, ql, max(lens), **scales),
                      a.iters)
    print("decode step (W attention calls + merge): %.1f us eager, %.1f us as a CUDA graph; "
          "unsharded attention on one GPU %.1f us" % (t_step, t_graph, t_one))

    t_call, t_run, t_pkg, t_noop = overhead(calls[0], a.rounds)
    pl = launch_of(calls[0])[0]
    print("rank 0's plan: %s, %d split(s), workspace %d bytes" % (pl.variant, pl.num_splits, pl.ws_bytes))
    print("host time per flash_attn_varlen_func call (median of %d rounds of 100): %.2f us, of which "
          "dcpattn_attn_run %.2f us: Python overhead %.2f us per call (goal < 15 us); with a no-op launch "
          "%.2f us, the no-op alone %.2f us: %.2f us" % (a.rounds, t_call, t_run, t_call - t_run, t_pkg, t_noop,
                                                         t_pkg - t_noop))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
