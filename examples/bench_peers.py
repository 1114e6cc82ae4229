#!/usr/bin/env python3
"""bench_peers.py - the peers of dcpattn's benchmark (docs/performance.md), on the same shapes with
their own random data (contiguous, unpaged KV):

  flex   torch.nn.attention.flex_attention, compiled with torch.compile, the DCP mask as a
         mask_mod (query row i at global position p = L - q_len + i sees local key l iff
         g(l) = (l // I)*W*I + r*I + l % I <= p), return_lse, enable_gqa;
  sdpa   F.scaled_dot_product_attention: no mask at q_len 1, a boolean DCP mask at q_len > 1;
         the q_len x group query rows of one KV head packed into the query dimension (each
         KV byte read once, no enable_gqa expansion; MLA: V copied out of K, contiguous);
  eager  the merge of docs/contract.md 5 in eager torch ops (R1, R2).

One JSON object per line on stdout (compact separators), first a header line:
  {"torch":..., "device":...}
  {"case":"G1/q1","peer":"flex","status":"ok","us":...,"gbps":...,"tflops":...,"bytes":...}
  {"case":"G1/q1","peer":"flex","status":"skipped","reason":"..."}
Times: CUDA events, median of --reps runs after warm-up. Bytes and FLOPs use the benchmark's
formulas without split partials (KV once + q + out + lse; 4*rows*S*D or 2*rows*S*(Dqk+Dv)),
so a time ratio equals the GB/s ratio. Bounded by --budget seconds: what does not fit is
reported as skipped. Cheap peers (eager merge, SDPA) run before the compiled ones."""
import argparse
import json
import math
import statistics
import sys
import time
import traceback
import warnings

T0 = time.monotonic()


def emit(obj):
    print(json.dumps(obj, separators=(",", ":")), flush=True)


def local_len(L, W, r, I):
    if L <= 0:
        return 0
    span = W * I
    rem = min(max(L % span - r * I, 0), I)
    return (L // span) * I + rem


def pick_L(S, W, r, I):
    """smallest global length with local_len == S (as the C benchmark picks it)"""
    lo, hi = 0, S * W + W * I
    while lo < hi:
        mid = (lo + hi) // 2
        if local_len(mid, W, r, I) >= S:
            hi = mid
        else:
            lo = mid + 1
    assert local_len(lo, W, r, I) == S
    return lo


# id, mla, B, Hq, Hkv, Dqk, Dv, S, W, r, I, q_lens  (same as examples/bench.cu)
ATTN = [
    ("G1", False, 64, 64, 8, 128, 128, 8192, 4, 1, 1, [1, 2, 4, 8]),
    ("G2", False, 8, 64, 8, 128, 128, 65536, 8, 3, 16, [1, 2, 4, 8]),
    ("M1", True, 32, 128, 1, 576, 512, 8192, 8, 0, 1, [2]),
    ("M2", True, 128, 16, 1, 576, 512, 8192, 1, 0, 1, [1]),
]
MERGE = [("R1", 8, 256, 128, 512), ("R2", 4, 4096, 64, 128)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=100.0, help="seconds for everything")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma list of case ids")
    args = ap.parse_args()
    only = set(x for x in args.only.split(",") if x)

    warnings.filterwarnings("ignore")
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        emit({"case": "*", "peer": "*", "status": "skipped", "reason": "import torch: %s" % e})
        return 0
    if not torch.cuda.is_available():
        emit({"case": "*", "peer": "*", "status": "skipped", "reason": "torch sees no CUDA device"})
        return 0
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    emit({"torch": torch.__version__, "device": torch.cuda.get_device_name(0)})

    def left():
        return args.budget - (time.monotonic() - T0)

    def bench(fn, reps=args.reps, warm=3):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
        ev[0].record()
        for i in range(reps):
            fn()
            ev[i + 1].record()
        torch.cuda.synchronize()
        return statistics.median(ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(reps))

    def report(key, peer, us, nbytes, flops, extra=None):
        obj = {"case": key, "peer": peer, "status": "ok", "us": round(us, 3),
               "gbps": round(nbytes / (us * 1e-6) * 1e-9, 2), "bytes": nbytes}
        if flops:
            obj["flops"] = flops
            obj["tflops"] = round(flops / (us * 1e-6) * 1e-12, 3)
        if extra:
            obj.update(extra)
        emit(obj)

    def skip(key, peer, why):
        emit({"case": key, "peer": peer, "status": "skipped", "reason": str(why).strip().splitlines()[0][:300]
              if str(why).strip() else type(why).__name__})

    def rand(shape, amp=1.0, dtype=torch.bfloat16):
        return ((torch.rand(shape, device=dev, dtype=torch.float32) * 2 - 1) * amp).to(dtype)

    # ---------------- eager merge (docs/contract.md 5) ----------------
    def merge(o, lse):
        # o [N, T, H, D] bf16, lse [N, T, H] fp32 natural log; non-finite = empty
        lse = torch.where(torch.isfinite(lse), lse, torch.full_like(lse, -math.inf))
        m = lse.amax(0)
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        w = torch.exp(lse - m_safe)  # empty states: exp(-inf) = 0
        s = w.sum(0)
        out = (w.unsqueeze(-1) * o.float()).sum(0) / s.clamp_min(1e-30).unsqueeze(-1)
        out = torch.where((s > 0).unsqueeze(-1), out, torch.zeros_like(out)).to(o.dtype)
        lse_out = torch.where(s > 0, m_safe + torch.log(s), torch.full_like(s, -math.inf))
        return out, lse_out

    for cid, W, T, H, D in MERGE:
        if only and cid not in only:
            continue
        try:
            o = rand((W, T, H, D))
            lse = (torch.rand((W, T, H), device=dev) * 8 - 4)
            lse[0, ::61] = -math.inf
            nbytes = W * (T * H * D * 2 + T * H * 4) + T * H * D * 2 + T * H * 4
            us = bench(lambda: merge(o, lse))
            report(cid, "eager", us, nbytes, 0)
            del o, lse
        except Exception as e:  # noqa: BLE001
            skip(cid, "eager", e)
    torch.cuda.empty_cache()

    # ---------------- attention: data per case, SDPA first, then FlexAttention ----------------
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        import inspect
        flex_params = inspect.signature(flex_attention).parameters
        import torch._dynamo
        for name in ("cache_size_limit", "recompile_limit"):  # one compile per shape: 10 shapes
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 64)
        flex_c = torch.compile(flex_attention, dynamic=False)
        flex_err = None
    except Exception as e:  # noqa: BLE001
        flex_err = e

    def dcp_bool_mask(L, q_len, S, W, r, I):
        p = L - q_len + torch.arange(q_len, device=dev).unsqueeze(1)
        l_idx = torch.arange(S, device=dev).unsqueeze(0)
        g = (l_idx // I) * (W * I) + r * I + l_idx % I
        return g <= p  # [q_len, S]

    def make_mask_mod(L, q_len, W, r, I):
        def mask_mod(b, h, q_idx, kv_idx):
            p = L - q_len + q_idx
            g = (kv_idx // I) * (W * I) + r * I + kv_idx % I
            return g <= p
        return mask_mod

    pending_flex = []
    for cid, mla, B, Hq, Hkv, Dqk, Dv, S, W, r, I, qlens in ATTN:
        if only and cid not in only:
            continue
        L = pick_L(S, W, r, I)
        scale = 1.0 / math.sqrt(Dqk)
        if left() < 10:
            for q_len in qlens:
                skip("%s/q%d" % (cid, q_len), "sdpa", "time budget spent")
                skip("%s/q%d" % (cid, q_len), "flex", "time budget spent")
            continue
        try:
            k = rand((B, Hkv, S, Dqk))
            v = k[..., :Dv] if mla else rand((B, Hkv, S, Dv))
        except Exception as e:  # noqa: BLE001
            for q_len in qlens:
                skip("%s/q%d" % (cid, q_len), "sdpa", e)
                skip("%s/q%d" % (cid, q_len), "flex", e)
            continue
        for q_len in qlens:
            key = "%s/q%d" % (cid, q_len)
            rows = B * Hq * q_len
            kv_bytes = B * S * Hkv * (Dqk + (0 if mla else Dv)) * 2
            nbytes = kv_bytes + rows * Dqk * 2 + rows * Dv * 2 + rows * 4
            flops = 2 * rows * S * (Dqk + Dv) if mla else 4 * rows * S * Dqk
            q = rand((B, Hq, q_len, Dqk), amp=4.0)
            if left() < 5:
                skip(key, "sdpa", "time budget spent")
            else:
                try:
                    # the query rows of one KV head packed as [group*q_len] rows (row g*q_len + i is
                    # query token i), so SDPA reads each KV byte once and needs no enable_gqa
                    group = Hq // Hkv
                    qp = q.view(B, Hkv, group * q_len, Dqk)
                    mask = None if q_len == 1 else dcp_bool_mask(L, q_len, S, W, r, I).repeat(group, 1)
                    vv = v.contiguous() if mla else v
                    fn = lambda: F.scaled_dot_product_attention(qp, k, vv, attn_mask=mask, scale=scale)
                    us = bench(fn, reps=max(5, args.reps // 2) if mla else args.reps)
                    report(key, "sdpa", us, nbytes, flops, {"mask": mask is not None, "v_copy": mla,
                                                           "rows_packed": True})
                    del vv
                except Exception as e:  # noqa: BLE001
                    skip(key, "sdpa", e)
            torch.cuda.empty_cache()
            pending_flex.append((key, mla, B, Hq, Hkv, Dqk, Dv, S, W, r, I, q_len, L, scale, nbytes, flops))
        del k, v
        torch.cuda.empty_cache()

    # FlexAttention last: each shape compiles (seconds each)
    cache = {}
    for (key, mla, B, Hq, Hkv, Dqk, Dv, S, W, r, I, q_len, L, scale, nbytes, flops) in pending_flex:
        if flex_err is not None:
            skip(key, "flex", "flex_attention unavailable: %s" % flex_err)
            continue
        if left() < 15:
            skip(key, "flex", "time budget spent (%.0f s budget)" % args.budget)
            continue
        try:
            ck = key.split("/")[0]
            if ck not in cache:
                cache.clear()
                torch.cuda.empty_cache()
                k = rand((B, Hkv, S, Dqk))
                v = k[..., :Dv] if mla else rand((B, Hkv, S, Dv))
                cache[ck] = (k, v)
            k, v = cache[ck]
            q = rand((B, Hq, q_len, Dqk), amp=4.0)
            bm = create_block_mask(make_mask_mod(L, q_len, W, r, I), B=None, H=None, Q_LEN=q_len, KV_LEN=S,
                                   device=dev)
            kw = dict(block_mask=bm, scale=scale, enable_gqa=True)
            if "return_lse" in flex_params:
                kw["return_lse"] = True
            elif "return_aux" in flex_params:
                from torch.nn.attention.flex_attention import AuxRequest
                kw["return_aux"] = AuxRequest(lse=True)
            t_c = time.monotonic()
            try:
                out = flex_c(q, k, v, **kw)
            except Exception:  # noqa: BLE001
                if not mla:
                    raise
                v = v.contiguous()  # MLA: V as its own tensor (reads more bytes)
                cache[ck] = (k, v)
                out = flex_c(q, k, v, **kw)
            torch.cuda.synchronize()
            compile_s = time.monotonic() - t_c
            del out
            us = bench(lambda: flex_c(q, k, v, **kw))
            report(key, "flex", us, nbytes, flops, {"compile_s": round(compile_s, 2)})
        except Exception as e:  # noqa: BLE001
            print("flex %s: %s" % (key, traceback.format_exc(limit=2)), file=sys.stderr)
            skip(key, "flex", "%s: %s" % (type(e).__name__, e))
    emit({"case": "*", "peer": "*", "status": "done", "seconds": round(time.monotonic() - T0, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
