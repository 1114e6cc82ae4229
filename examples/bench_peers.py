#!/usr/bin/env python3
"""bench_peers.py - the peers of dcpattn's benchmark (docs/performance.md).

  flex        torch.nn.attention.flex_attention, compiled with torch.compile, the DCP mask as a
              mask_mod (query row i at global position p = L - q_len + i sees local key l iff
              g(l) = (l // I)*W*I + r*I + l % I <= p), return_lse, enable_gqa; contiguous KV (not
              on an e4m3 cache, which it cannot read);
  sdpa        F.scaled_dot_product_attention: no mask at q_len 1, a boolean DCP mask at q_len > 1;
              the q_len x group query rows of one KV head packed into the query dimension (each
              KV byte read once, no enable_gqa expansion; MLA: V copied out of K, contiguous;
              G1F, G2F, M1F, M2F: the e4m3 cache dequantized to bf16 in eager ops first, inside
              the timed call, the fallback a user without an FP8 kernel writes);
  eager       the merge of docs/contract.md 5 in eager torch ops (R1, R2);
  flashinfer  FlashInfer's paged kernels on the paged cache of the benchmark (same page size, a
              random block table, bf16, same heads and local lengths): GQA q_len 1 through
              BatchDecodeWithPagedKVCacheWrapper (CUDA-core and tensor-core decode), q_len > 1
              through BatchPrefillWithPagedKVCacheWrapper (causal; FA2 and FA3 backends) and the
              tensor-core decode wrapper; MLA through BatchMLAPagedAttentionWrapper (FA3, FA2) on
              the 576-wide cache (CKV and KPE are views of one page); G1F and G2F (an e4m3 cache,
              per-tensor k_scale and v_scale) through the same decode and FA2 prefill wrappers
              with kv_data_type float8_e4m3fn, M1F and M2F through the MLA wrapper's FP8 cache
              (one per-tensor scale as ckv_scale and kpe_scale); every variant returns the LSE, as
              a DCP rank must; the fastest correct variant is the row's time;
  flashmla    FlashMLA's dense bf16 SM90 decode (page 64, the same 576-wide cache; not M1F, M2F:
              it reads no e4m3 dense cache), built by
              examples/peers/build_flashmla.sh; --flashmla-so names the extension. On SP1 (sparse
              MLA, W 1) its sparse FP8 SM90 decode on the same 656-byte rows, pages of 64 and
              top-k ids, given as cache slots (page * 64 + offset, FlashMLA's form: the mapping
              is outside the timed call); --flashmla-sparse-so names that extension. It takes 64
              or 128 query heads (SP2's 16: skipped).
  FlashInfer and FlashMLA have no DCP mask: at q_len > 1 they run the plain causal mask on the
  same shard (row i sees the first S - q_len + 1 + i local keys); the line says
  "mask": "causal, not DCP" where that differs from the DCP mask of the case and
  "DCP (= causal here)" where the two coincide (W = 1, or M1's q_len 2 on rank 0).

One JSON object per line on stdout (compact separators), first a header line:
  {"torch":..., "device":...}
  {"case":"G1/q1","peer":"flex","status":"ok","us":...,"gbps":...,"tflops":...,"bytes":...}
  {"case":"G1/q1","peer":"flex","status":"skipped","reason":"..."}
  {"case":"M1/q2","peer":"flashmla","status":"wrong","max_err":...,"reason":"..."}
Times: CUDA events, median of --reps runs after warm-up. Bytes and FLOPs use the benchmark's
formulas without split partials (KV once + q + out + lse; 4*rows*S*D or 2*rows*S*(Dqk+Dv)),
so a time ratio equals the GB/s ratio. A paged peer's output is first checked against a float32
torch reference on the first and the last sequence of the batch (max |out - ref| / max |ref|
under --tol, finite); one that fails is reported "wrong", with no time. Plan and JIT time are
outside the timed loop: "plan_first_s" is the first plan() of a variant (FlashInfer compiles or
loads its module there), "plan_warm_ms" a second one; FlashMLA's first call computes its
schedule ("plan_first_ms"), the timed calls reuse it. Bounded by --budget seconds: what does
not fit is reported as skipped. A case id this script does not know is reported as skipped.

FlashInfer is imported from the machine's packages or, after them, from $BENCH_PEERS_SITE
(default /tmp/site, where examples/peers/gpu_peers.sh installs the carried wheels); its JIT
cache lives under $FLASHINFER_WORKSPACE_BASE (default /tmp/flashinfer-ws).

  --prebuild   compile the FlashInfer modules the paged peers use (in parallel) and exit;
  --list       print the case table (one JSON line per case) and exit;
  --selftest   check the paged layout, the masks and the reference on the CPU and exit."""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
import warnings

T0 = time.monotonic()
PEERS = ("eager", "sdpa", "flashinfer", "flashmla", "flex")


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


def rand_u64(state):
    """tests/ref.h ref_rand_u64 (splitmix64); state is a one-element list"""
    m = (1 << 64) - 1
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & m
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def skewed_glens():
    """the global lengths of examples/bench.cu's S2 (64, lognormal) and S4 (256, 1..64), one stream"""
    s = [0x5EED5EED]
    s2 = []
    for b in range(64):
        u1 = float((rand_u64(s) >> 11) + 1) / 9007199254740993.0
        u2 = float(rand_u64(s) >> 11) / 9007199254740992.0
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)
        keys = int(min(131072.0, max(16.0, 2048.0 * math.exp(1.2 * z))))
        s2.append(pick_L(131072 if b == 0 else keys, 8, 3, 16))
    s4 = [1 + rand_u64(s) % 64 for _ in range(256)]
    return s2, s4


class Case:
    """one attention case of examples/bench.cu: the same heads, page size, DCP layout and local
    lengths; glens (the global length of each sequence) or S_rest (sequences 1.. hold S_rest local
    keys, sequence 0 holds S) make a skewed batch"""

    def __init__(self, cid, mla, B, Hq, Hkv, Dqk, Dv, S, page, W, r, I, qlens, S_rest=0, glens=None, fp8=False):
        self.id, self.mla, self.B, self.Hq, self.Hkv, self.Dqk, self.Dv = cid, mla, B, Hq, Hkv, Dqk, Dv
        self.fp8 = fp8  # an e4m3 cache with per-tensor scales (bytes counted as read: one per element)
        self.S, self.page, self.W, self.r, self.I, self.qlens = S, page, W, r, I, qlens
        if glens is not None:
            self.glob = list(glens)
            self.used = [local_len(g, W, r, I) for g in glens]
        else:
            L = pick_L(S, W, r, I)
            L_rest = pick_L(S_rest, W, r, I) if S_rest > 0 else L
            self.glob = [L if b == 0 or S_rest <= 0 else L_rest for b in range(B)]
            self.used = [S if b == 0 or S_rest <= 0 else S_rest for b in range(B)]
        self.keys = sum(self.used)
        self.skewed = glens is not None or S_rest > 0

    def nvis(self, b, q_len, causal):
        """local keys row i of sequence b sees: the DCP mask, or the plain causal one"""
        S, L = self.used[b], self.glob[b]
        if causal:
            return [max(0, min(S, S - q_len + 1 + i)) for i in range(q_len)]
        return [min(S, local_len(L - q_len + i + 1, self.W, self.r, self.I)) for i in range(q_len)]

    def causal_is_dcp(self, q_len):
        return all(self.nvis(b, q_len, True) == self.nvis(b, q_len, False) for b in range(self.B))

    def sizes(self, q_len):
        """bytes and FLOPs of examples/bench.cu without split partials"""
        rows = self.B * self.Hq * q_len
        kv = self.keys * self.Hkv * (self.Dqk + (0 if self.mla else self.Dv)) * (1 if self.fp8 else 2)
        nbytes = kv + rows * self.Dqk * 2 + rows * self.Dv * 2 + rows * 4
        per = 2 * (self.Dqk + self.Dv) if self.mla else 4 * self.Dqk
        return nbytes, per * self.Hq * q_len * self.keys

    def describe(self):
        return {"case": self.id, "mla": self.mla, "B": self.B, "Hq": self.Hq, "Hkv": self.Hkv, "Dqk": self.Dqk,
                "Dv": self.Dv, "fp8": self.fp8, "page": self.page, "W": self.W, "r": self.r, "I": self.I, "q_lens": self.qlens,
                "keys": self.keys, "max_local": max(self.used), "min_local": min(self.used)}


def make_cases():
    """examples/bench.cu's attention cases (keep the two tables equal: --list prints this one)"""
    s2, s4 = skewed_glens()
    s2_even = sum(local_len(g, 8, 3, 16) for g in s2) // 64
    s4_even = max(1, sum(local_len(g, 8, 0, 1) for g in s4) // 256)
    cs = [
        Case("G1", False, 64, 64, 8, 128, 128, 8192, 16, 4, 1, 1, [1, 2, 4, 8]),
        Case("G2", False, 8, 64, 8, 128, 128, 65536, 64, 8, 3, 16, [1, 2, 4, 8]),
        Case("G1F", False, 64, 64, 8, 128, 128, 8192, 16, 4, 1, 1, [1, 2, 4, 8], fp8=True),
        Case("G2F", False, 8, 64, 8, 128, 128, 65536, 64, 8, 3, 16, [1, 2, 4, 8], fp8=True),
        Case("M1", True, 32, 128, 1, 576, 512, 8192, 64, 8, 0, 1, [2]),
        Case("M2", True, 128, 16, 1, 576, 512, 8192, 64, 1, 0, 1, [1]),
        Case("M1F", True, 32, 128, 1, 576, 512, 8192, 64, 8, 0, 1, [2], fp8=True),
        Case("M2F", True, 128, 16, 1, 576, 512, 8192, 64, 1, 0, 1, [1], fp8=True),
        Case("S1", False, 32, 64, 8, 128, 128, 65536, 16, 4, 1, 1, [1, 4], S_rest=2048),
        Case("S1E", False, 32, 64, 8, 128, 128, 4032, 16, 4, 1, 1, [1, 4]),
        Case("S2", False, 64, 64, 8, 128, 128, 131072, 16, 8, 3, 16, [2], glens=s2),
        Case("S2E", False, 64, 64, 8, 128, 128, s2_even, 16, 8, 3, 16, [2]),
        Case("S3", True, 32, 128, 1, 576, 512, 65536, 64, 8, 0, 1, [2], S_rest=2048),
        Case("S3E", True, 32, 128, 1, 576, 512, 4032, 64, 8, 0, 1, [2]),
        Case("S3M", True, 128, 16, 1, 576, 512, 65536, 64, 1, 0, 1, [1], S_rest=2048),
        Case("S3ME", True, 128, 16, 1, 576, 512, 2544, 64, 1, 0, 1, [1]),
        Case("S4", False, 256, 64, 8, 128, 128, 64, 16, 8, 0, 1, [1], glens=s4),
        Case("S4E", False, 256, 64, 8, 128, 128, s4_even, 16, 8, 0, 1, [1]),
    ]
    return {c.id: c for c in cs}


# contiguous-KV peers (sdpa, flex) run the standard cases only
CONTIG = ("G1", "G2", "M1", "M2", "G1F", "G2F", "M1F", "M2F")
MERGE = [("R1", 8, 256, 128, 512), ("R2", 4, 4096, 64, 128)]
PLAN_VARIANTS = {"gqa1": ("decode", "decode-tc"), "gqa": ("prefill-fa3", "prefill-fa2", "decode-tc"),
                 "mla": ("mla-fa3", "mla-fa2"), "gqa1-e4m3": ("decode-e4m3",), "gqa-e4m3": ("prefill-fa2-e4m3",),
                 "mla-e4m3": ("mla-fa3-e4m3", "mla-fa2-e4m3")}
E4M3_SCALES = (1.0 / 64, 1.0 / 128)  # k_scale, v_scale of the FP8 cases: e4m3 values up to 64 and 128


def e4m3_scales(c):
    """(k_scale, v_scale) of an e4m3 case; MLA's V is K's first 512 bytes, so one scale for both"""
    return (E4M3_SCALES[0],) * 2 if c.mla else E4M3_SCALES


# ---------------------------------------------------------------- the paged cache and reference

def build_paged(torch, c, dev, gen, extra=64):
    """the benchmark's paged cache: pages in a random order (a random block table), bf16 values in
    [-1, 1), `extra` unused pages with their own values; MLA keeps one 576-wide page (V = its first
    512 channels)"""
    pp = [(s + c.page - 1) // c.page for s in c.used]
    total = sum(pp)
    num_pages = total + extra
    perm = torch.randperm(num_pages, generator=gen).to(torch.int32)
    k = torch.empty((num_pages, c.page, c.Hkv, c.Dqk), dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    v = None if c.mla else torch.empty((num_pages, c.page, c.Hkv, c.Dv), dtype=torch.bfloat16,
                                       device=dev).uniform_(-1, 1)
    ks, vs = e4m3_scales(c) if c.fp8 else (1.0, 1.0)
    if c.fp8:  # e4m3 codes of the same uniform values, dequantized by k_scale and v_scale
        k = (k.float() / ks).to(torch.float8_e4m3fn)
        v = None if v is None else (v.float() / vs).to(torch.float8_e4m3fn)
    indptr = [0]
    for n in pp:
        indptr.append(indptr[-1] + n)
    maxp = max(1, max(pp))
    bt = torch.empty((c.B, maxp), dtype=torch.int32)
    bt[:] = perm[total]  # the padding of short rows names an unused page
    for b in range(c.B):
        bt[b, :pp[b]] = perm[indptr[b]:indptr[b + 1]]
    last = [s - (n - 1) * c.page if n else 0 for s, n in zip(c.used, pp)]
    i32 = dict(dtype=torch.int32, device=dev)
    return {"k": k, "v": v, "k_scale": ks, "v_scale": vs, "pp": pp, "bt": bt.to(dev), "bt_host": bt,
            "indptr": torch.tensor(indptr, **i32), "indices": perm[:total].to(dev),
            "last": torch.tensor(last, **i32), "seqlens": torch.tensor(c.used, **i32)}


def seq_kv(torch, c, pg, b):
    """the keys and values of sequence b gathered through the block table, float32"""
    pages = pg["bt_host"][b, :pg["pp"][b]].long().to(pg["k"].device)
    S = c.used[b]
    k = pg["k"][pages].reshape(-1, c.Hkv, pg["k"].shape[-1])[:S].float() * pg["k_scale"]
    v = k[..., :c.Dv] if c.mla else pg["v"][pages].reshape(-1, c.Hkv, c.Dv)[:S].float() * pg["v_scale"]
    return k, v


def reference(torch, c, pg, q, b, nvis, scale):
    """float32 attention of sequence b: q [q_len, Hq, Dqk]; row i sees the first nvis[i] local keys"""
    k, v = seq_kv(torch, c, pg, b)
    T, group = q.shape[0], c.Hq // c.Hkv
    qf = q.float().view(T, c.Hkv, group, c.Dqk)
    s = torch.einsum("tkgd,skd->tkgs", qf, k) * scale
    lim = torch.tensor(nvis, device=s.device).view(T, 1, 1, 1)
    s = s.masked_fill(torch.arange(k.shape[0], device=s.device).view(1, 1, 1, -1) >= lim, -math.inf)
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # a row that sees no key: zeros
    return torch.einsum("tkgs,skd->tkgd", p, v).reshape(T, c.Hq, c.Dv)


def rel_err(torch, out, ref):
    out = out.float()
    if not bool(torch.isfinite(out).all()):
        return math.inf
    return float((out - ref).abs().max()) / max(float(ref.abs().max()), 1e-30)


# ---------------------------------------------------------------- FlashInfer and FlashMLA

def flashinfer_specs(torch, variants):
    """the FlashInfer JIT specs the paged peers' wrappers ask for (bf16, int32 indices, no RoPE,
    no window, no soft cap), by variant"""
    from flashinfer.jit import gen_batch_decode_module, gen_batch_mla_module, gen_batch_prefill_module
    bf, i32 = torch.bfloat16, torch.int32
    specs = {}
    for name in variants:
        base, kv = variant_kv(torch, name)
        if base == "decode":
            specs[name] = gen_batch_decode_module(bf, kv, bf, i32, 128, 128, 0, False, False)
        elif base in ("decode-tc", "prefill-fa2"):
            specs[name] = gen_batch_prefill_module("fa2", bf, kv, bf, i32, 128, 128, 0, False, False, False)
        elif base == "prefill-fa3":
            specs[name] = gen_batch_prefill_module("fa3", bf, kv, bf, i32, 128, 128, 0, False, False, False)
        elif base in ("mla-fa3", "mla-fa2"):
            specs[name] = gen_batch_mla_module(base[4:], bf, kv, bf, i32, 512, 64, False)
    return specs


def variant_kv(torch, name):
    """a variant's name without its "-e4m3" suffix, and its KV dtype"""
    if name.endswith("-e4m3"):
        return name[:-5], torch.float8_e4m3fn
    return name, torch.bfloat16


def module_state(spec):
    try:
        return "prebuilt" if spec.is_aot else "cached" if spec.is_compiled else "jit"
    except Exception:  # noqa: BLE001
        return "unknown"


def flashinfer_variant(torch, fi, name, c, pg, q, q_len, scale, ws):
    """(plan, run) of one FlashInfer variant on the paged cache; run returns out [B, q_len, Hq, Dv]"""
    B, bf = c.B, torch.bfloat16
    dev = q.device
    qo_indptr = torch.arange(0, B + 1, dtype=torch.int32, device=dev) * q_len
    if c.mla:
        kv = pg["k"][:, :, 0, :]  # [pages, page, 576]: CKV and KPE are views of the same page
        ckv, kpe = kv[..., :c.Dv], kv[..., c.Dv:]
        qf = q.view(B * q_len, c.Hq, c.Dqk)
        q_nope, q_pe = qf[..., :c.Dv], qf[..., c.Dv:]
        base, kvt = variant_kv(torch, name)
        w = fi.mla.BatchMLAPagedAttentionWrapper(ws, backend=base[4:])
        # an e4m3 cache: one per-tensor scale for the latent part and the RoPE part alike
        scales = {"ckv_scale": pg["k_scale"], "kpe_scale": pg["k_scale"]} if c.fp8 else {}

        def plan():
            w.plan(qo_indptr, pg["indptr"], pg["indices"], pg["seqlens"], c.Hq, c.Dv, c.Dqk - c.Dv, c.page,
                   q_len > 1, scale, bf, kvt)

        def run():
            return w.run(q_nope, q_pe, ckv, kpe, return_lse=True, **scales)[0].view(B, q_len, c.Hq, c.Dv)
        return plan, run
    kv = (pg["k"], pg["v"])
    qf = q.view(B * q_len, c.Hq, c.Dqk)
    base, kvt = variant_kv(torch, name)
    # an e4m3 cache: its per-tensor scales as FlashInfer takes them (k_scale joins the softmax
    # scale, v_scale multiplies the output)
    scales = {"k_scale": pg["k_scale"], "v_scale": pg["v_scale"]} if c.fp8 else {}
    if base.startswith("decode"):
        w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=base == "decode-tc")
        extra = {"q_len_per_req": q_len} if q_len > 1 else {}

        def plan():
            w.plan(pg["indptr"], pg["indices"], pg["last"], c.Hq, c.Hkv, c.Dqk, c.page, pos_encoding_mode="NONE",
                   q_data_type=bf, kv_data_type=kvt, sm_scale=scale, **extra)
    else:
        w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=base[8:])

        def plan():
            w.plan(qo_indptr, pg["indptr"], pg["indices"], pg["last"], c.Hq, c.Hkv, c.Dqk, c.page, causal=True,
                   sm_scale=scale, q_data_type=bf, kv_data_type=kvt)

    def run():
        return w.run(qf, kv, return_lse=True, **scales)[0].view(B, q_len, c.Hq, c.Dv)
    return plan, run


def default_flashmla_so():
    if os.environ.get("FLASHMLA_SO"):
        return os.environ["FLASHMLA_SO"]
    built = os.path.join(os.environ.get("FLASHMLA_BUILD", "/tmp/flashmla"), "build", "flashmla_dense.so")
    ahead = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".peers", "flashmla", "prebuilt",
                         "flashmla_dense.so")
    return built if os.path.exists(built) or not os.path.exists(ahead) else os.path.normpath(ahead)


def default_flashmla_sparse_so(dense_so):
    if os.environ.get("FLASHMLA_SPARSE_SO"):
        return os.environ["FLASHMLA_SPARSE_SO"]
    return os.path.join(os.path.dirname(dense_so), "flashmla_sparse.so")


# The sparse MLA cases of the benchmark (examples/bench.cu SP1, SP2) at W = 1: per sequence L
# keys in pages of 64, per query token a distinct top-k of them; FP8 rows of 656 bytes (512 e4m3
# values without NaN, 4 fp32 scales of 2^-9 .. 2^-7, 64 bf16 RoPE values in +-1), q in +-3.
SPARSE = {"SP1": {"B": 128, "Hq": 128, "q_len": 2, "topk": 2048, "L": 4096},
          "SP2": {"B": 128, "Hq": 16, "q_len": 2, "topk": 2048, "L": 4096}}


def load_flashmla(torch, path, name, what):
    """FlashMLA's extension `name` at path: (module, None), or (None, why not)."""
    if not os.path.exists(path):
        return None, "%s not built (examples/peers/build_flashmla.sh)" % path
    if torch.cuda.get_device_capability(0) != (9, 0):
        return None, "FlashMLA's %s runs on SM90 only" % what
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod, None
    except Exception as e:  # noqa: BLE001
        return None, "load %s: %s" % (path, e)


# ---------------------------------------------------------------- self-test (CPU)

def selftest():
    count = [0, 0]

    def check(ok, what):
        count[0 if ok else 1] += 1
        if not ok:
            print("FAIL %s" % what)

    cases = make_cases()
    for c in cases.values():
        for b in (0, c.B - 1):
            check(local_len(c.glob[b], c.W, c.r, c.I) == c.used[b], "%s local length of sequence %d" % (c.id, b))
    check(cases["S2"].used[0] == 131072 and min(cases["S2"].used) >= 1, "S2 lengths")
    # the DCP row limit against its definition (g(l) <= p) on a small layout
    for (W, r, I) in ((4, 1, 1), (8, 3, 16), (8, 0, 1), (1, 0, 1)):
        c = Case("T", False, 1, 8, 2, 16, 16, 300, 16, W, r, I, [5])
        L = c.glob[0]
        for i in range(5):
            p = L - 5 + i
            brute = sum(1 for l in range(300) if (l // I) * W * I + r * I + l % I <= p)
            check(c.nvis(0, 5, False)[i] == brute, "DCP row limit W=%d r=%d I=%d row %d" % (W, r, I, i))
    check(cases["M1"].causal_is_dcp(2) and cases["S3"].causal_is_dcp(2), "M1/S3: causal = DCP")
    check(not cases["G1"].causal_is_dcp(4) and cases["G1"].causal_is_dcp(2), "G1: causal != DCP at q_len 4")
    # the paged layout and the reference against a contiguous computation (SDPA, fp32)
    try:
        import torch
    except ImportError as e:
        print("skipped: the paged layout checks need torch (%s)" % e)
        print("%d passed, %d failed" % (count[0], count[1]))
        return 1 if count[1] else 0
    gen = torch.Generator().manual_seed(1)
    for mla, fp8 in ((False, False), (True, False), (False, True)):
        c = Case("T", mla, 3, 8 if not mla else 4, 2 if not mla else 1, 64 if not mla else 80,
                 64 if not mla else 64, 100, 16, 4, 1, 1, [3], S_rest=37, fp8=fp8)
        pg = build_paged(torch, c, "cpu", gen)
        q = (torch.rand((c.B, 3, c.Hq, c.Dqk), generator=gen) * 8 - 4).to(torch.bfloat16)
        scale = 1.0 / math.sqrt(c.Dqk)
        for b in range(c.B):
            nv = c.nvis(b, 3, False)
            ref = reference(torch, c, pg, q[b], b, nv, scale)
            k, v = seq_kv(torch, c, pg, b)
            grp = c.Hq // c.Hkv
            kk = k.repeat_interleave(grp, dim=1).transpose(0, 1)
            vv = v.repeat_interleave(grp, dim=1).transpose(0, 1)
            mask = torch.arange(k.shape[0]).view(1, -1) < torch.tensor(nv).view(-1, 1)
            o = torch.nn.functional.scaled_dot_product_attention(q[b].float().transpose(0, 1), kk, vv,
                                                                 attn_mask=mask, scale=scale)
            err = rel_err(torch, o.transpose(0, 1), ref)
            check(err < 1e-5, "reference = SDPA (mla=%s, fp8=%s, sequence %d): %g" % (mla, fp8, b, err))
            if b > 0:  # sequences 1 and 2 have the same length: each one's pages fail the other's check
                wrong = rel_err(torch, reference(torch, c, pg, q[b], 3 - b, nv, scale), ref)
                check(wrong > 10 * 2e-2, "another sequence's pages fail (mla=%s, %d): %g" % (mla, b, wrong))
            # the block table maps the sequence's tokens: token t of sequence b sits in page bt[b, t // page]
            t = c.used[b] - 1
            pgid = int(pg["bt_host"][b, t // c.page])
            check(torch.equal(pg["k"][pgid, t % c.page].float() * pg["k_scale"], k[t]), "block table, sequence %d" % b)
            if fp8:  # the e4m3 codes dequantize to the uniform values within e4m3's rounding
                check(bool((k.abs() <= 1.0).all()) and float(k.abs().max()) > 0.5, "e4m3 cache values, sequence %d" % b)
            # FlashInfer reads the CSR form, FlashMLA the block table: the same pages
            ip = pg["indptr"].tolist()
            check(pg["indices"][ip[b]:ip[b + 1]].tolist() == pg["bt_host"][b, :pg["pp"][b]].tolist(),
                  "CSR pages = block table, sequence %d" % b)
            check(int(pg["last"][b]) + (pg["pp"][b] - 1) * c.page == c.used[b], "last page length, sequence %d" % b)
    print("%d passed, %d failed" % (count[0], count[1]))
    return 1 if count[1] else 0


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=100.0, help="seconds for everything")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma list of case ids")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma list of peers (%s)" % ",".join(PEERS))
    ap.add_argument("--tol", type=float, default=2e-2, help="max |out - ref| / max |ref| of a correct peer")
    ap.add_argument("--flashmla-so", default=default_flashmla_so(),
                    help="FlashMLA's dense decode extension: $FLASHMLA_SO, else the one examples/peers/"
                         "build_flashmla.sh built, else one compiled ahead in .peers/flashmla/prebuilt")
    ap.add_argument("--flashmla-sparse-so", default=None,
                    help="FlashMLA's sparse decode extension: $FLASHMLA_SPARSE_SO, else flashmla_sparse.so next "
                         "to the dense one")
    ap.add_argument("--prebuild", action="store_true", help="compile FlashInfer's modules and exit")
    ap.add_argument("--list", action="store_true", help="print the case table and exit")
    ap.add_argument("--selftest", action="store_true", help="CPU checks of the layout and reference")
    args = ap.parse_args()
    if args.flashmla_sparse_so is None:
        args.flashmla_sparse_so = default_flashmla_sparse_so(args.flashmla_so)
    only = [x for x in args.only.split(",") if x]
    peers = [x for x in args.peers.split(",") if x]
    for p in peers:
        if p not in PEERS:
            ap.error("--peers: unknown peer %r (known: %s)" % (p, ", ".join(PEERS)))
    # FlashInfer's JIT cache and workspace under /tmp unless the caller chose; the packages that
    # examples/peers/gpu_peers.sh installed there (after the machine's own)
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", "/tmp/flashinfer-ws")
    site = os.environ.get("BENCH_PEERS_SITE", "/tmp/site")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)
    if args.list:
        for c in make_cases().values():
            emit(c.describe())
        return 0
    if args.selftest:
        return selftest()

    warnings.filterwarnings("ignore")
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001
        emit({"case": "*", "peer": "*", "status": "skipped", "reason": "import torch: %s" % e})
        return 1 if args.prebuild else 0
    if args.prebuild:
        return prebuild(torch)
    if not torch.cuda.is_available():
        emit({"case": "*", "peer": "*", "status": "skipped", "reason": "torch sees no CUDA device"})
        return 0
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    emit({"torch": torch.__version__, "device": torch.cuda.get_device_name(0)})

    cases = make_cases()
    known = set(cases) | {m[0] for m in MERGE} | set(SPARSE)
    for x in only:
        if x not in known:
            emit({"case": x, "peer": "*", "status": "skipped", "reason": "case not known to bench_peers.py"})

    def wanted(cid):
        return not only or cid in only

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

    def report_checked(key, peer, err, extra, fn, nbytes, flops):
        # a peer's result after its check against the reference: "wrong", or timed
        extra["max_err"] = err if math.isfinite(err) else "inf"
        if not err <= args.tol:
            obj = {"case": key, "peer": peer, "status": "wrong",
                   "reason": "output differs from the float32 reference (max_err over --tol %g)" % args.tol}
            obj.update(extra)
            emit(obj)
        else:
            report(key, peer, bench(fn), nbytes, flops, extra)

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
        if not wanted(cid) or "eager" not in peers:
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

    # ---------------- SDPA on contiguous KV ----------------
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

    contig = [cases[x] for x in CONTIG if wanted(x)]
    for c in contig if "sdpa" in peers else []:
        B, Hq, Hkv, Dqk, Dv, S, W, r, I, mla = c.B, c.Hq, c.Hkv, c.Dqk, c.Dv, c.S, c.W, c.r, c.I, c.mla
        L = c.glob[0]
        scale = 1.0 / math.sqrt(Dqk)
        if left() < 10:
            for q_len in c.qlens:
                skip("%s/q%d" % (c.id, q_len), "sdpa", "time budget spent")
            continue
        try:
            k = rand((B, Hkv, S, Dqk))
            v = k[..., :Dv] if mla else rand((B, Hkv, S, Dv))
            if c.fp8:  # the fallback a user writes for an e4m3 cache: dequantize, then SDPA
                ks, vs = e4m3_scales(c)
                k = (k.float() / ks).to(torch.float8_e4m3fn)
                v = k[..., :Dv] if mla else (v.float() / vs).to(torch.float8_e4m3fn)
        except Exception as e:  # noqa: BLE001
            for q_len in c.qlens:
                skip("%s/q%d" % (c.id, q_len), "sdpa", e)
            continue
        for q_len in c.qlens:
            key = "%s/q%d" % (c.id, q_len)
            nbytes, flops = c.sizes(q_len)
            q = rand((B, Hq, q_len, Dqk), amp=4.0)
            if left() < 5:
                skip(key, "sdpa", "time budget spent")
                continue
            try:
                # the query rows of one KV head packed as [group*q_len] rows (row g*q_len + i is
                # query token i), so SDPA reads each KV byte once and needs no enable_gqa
                group = Hq // Hkv
                qp = q.view(B, Hkv, group * q_len, Dqk)
                mask = None if q_len == 1 else dcp_bool_mask(L, q_len, S, W, r, I).repeat(group, 1)
                vv = v.contiguous() if mla else v
                if c.fp8:
                    fn = lambda: F.scaled_dot_product_attention(  # noqa: E731
                        qp, k.to(torch.bfloat16) * ks, vv.to(torch.bfloat16) * vs, attn_mask=mask, scale=scale)
                else:
                    fn = lambda: F.scaled_dot_product_attention(qp, k, vv, attn_mask=mask, scale=scale)  # noqa: E731
                us = bench(fn, reps=max(5, args.reps // 2) if mla else args.reps)
                report(key, "sdpa", us, nbytes, flops, {"mask": mask is not None, "v_copy": mla,
                                                       "rows_packed": True, "dequantize": bool(c.fp8)})
                del vv
            except Exception as e:  # noqa: BLE001
                skip(key, "sdpa", e)
            torch.cuda.empty_cache()
        del k, v
        torch.cuda.empty_cache()

    # ---------------- the paged peers: FlashInfer, then FlashMLA ----------------
    paged = [c for c in cases.values() if wanted(c.id)]
    if not only:  # a bare run: the standard cases and the committed skewed one
        paged = [c for c in paged if c.id in CONTIG or c.id == "S3"]
    fi = fi_err = None
    if "flashinfer" in peers:
        try:
            import flashinfer as fi
        except Exception as e:  # noqa: BLE001
            fi_err = "import flashinfer: %s" % e
    fm = fm_err = None
    if "flashmla" in peers:
        fm, fm_err = load_flashmla(torch, args.flashmla_so, "flashmla_dense", "dense decode")
    ws = None
    gen = torch.Generator().manual_seed(args.seed)
    reserve = 20 if "flex" in peers else 0  # leave FlexAttention a little of the budget
    for c in paged:
        todo = [p for p in ("flashinfer", "flashmla") if p in peers and (p == "flashinfer" or c.mla)]
        if not todo:
            continue
        keys = ["%s/q%d" % (c.id, q) for q in c.qlens]
        why = None
        if min(c.used) < 1:
            why = "a sequence with no local key (an empty shard): the peer's paged API needs one"
        elif left() < 15 + reserve:
            why = "time budget spent (%.0f s budget)" % args.budget
        if why:
            for key in keys:
                for p in todo:
                    skip(key, p, why)
            continue
        scale = 1.0 / math.sqrt(c.Dqk)
        try:
            torch.cuda.empty_cache()
            pg = build_paged(torch, c, dev, gen)
        except Exception as e:  # noqa: BLE001
            for key in keys:
                for p in todo:
                    skip(key, p, e)
            continue
        vseq = sorted({0, c.B - 1})
        for q_len, key in zip(c.qlens, keys):
            nbytes, flops = c.sizes(q_len)
            q = rand((c.B, q_len, c.Hq, c.Dqk), amp=4.0)
            mask = ("none (q_len 1)" if q_len == 1 else "DCP (= causal here)" if c.causal_is_dcp(q_len)
                    else "causal, not DCP")
            refs = {b: reference(torch, c, pg, q[b], b, c.nvis(b, q_len, True), scale) for b in vseq}
            common = {"mask": mask, "keys": c.keys, "B": c.B}
            if "flashinfer" in todo:
                if fi is None:
                    skip(key, "flashinfer", fi_err)
                else:
                    kind = ("mla" if c.mla else "gqa1" if q_len == 1 else "gqa") + ("-e4m3" if c.fp8 else "")
                    res, best = {}, None
                    if ws is None:
                        ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
                    for name in PLAN_VARIANTS[kind]:
                        if left() < 5 + reserve:
                            res[name] = {"status": "skipped", "reason": "time budget spent"}
                            continue
                        try:
                            try:
                                state = module_state(flashinfer_specs(torch, [name])[name])
                            except Exception:  # noqa: BLE001
                                state = "unknown"
                            plan, run = flashinfer_variant(torch, fi, name, c, pg, q, q_len, scale, ws)
                            t = time.monotonic()
                            plan()
                            torch.cuda.synchronize()
                            first = time.monotonic() - t
                            t = time.monotonic()
                            plan()
                            torch.cuda.synchronize()
                            warm = time.monotonic() - t
                            out = run()
                            torch.cuda.synchronize()
                            err = max(rel_err(torch, out[b], refs[b]) for b in vseq)
                            r = {"plan_first_s": round(first, 3), "plan_warm_ms": round(warm * 1e3, 3),
                                 "module": state, "max_err": err if math.isfinite(err) else "inf"}
                            if not err <= args.tol:
                                r.update(status="wrong")
                            else:
                                r.update(status="ok", us=round(bench(run), 3))
                                if best is None or r["us"] < res[best]["us"]:
                                    best = name
                            res[name] = r
                            del out
                        except Exception as e:  # noqa: BLE001
                            print("flashinfer %s %s: %s" % (key, name, traceback.format_exc(limit=3)), file=sys.stderr)
                            res[name] = {"status": "error", "reason": ("%s: %s" % (type(e).__name__, e))[:300]}
                    # the per-variant results go last: bench.cu reads the first "status" and "us"
                    extra = dict(common, version=getattr(fi, "__version__", "?"))
                    if best is not None:
                        extra.update(variant=best, plan_first_s=res[best]["plan_first_s"],
                                     plan_warm_ms=res[best]["plan_warm_ms"], max_err=res[best]["max_err"])
                        extra["variants"] = res
                        report(key, "flashinfer", res[best]["us"], nbytes, flops, extra)
                    else:
                        wrong = any(r.get("status") == "wrong" for r in res.values())
                        why = ("output differs from the float32 reference (max_err over --tol %g)" % args.tol if wrong
                               else next((r["reason"] for r in res.values() if "reason" in r), "no variant ran"))
                        obj = {"case": key, "peer": "flashinfer", "status": "wrong" if wrong else "skipped",
                               "reason": why}
                        obj.update(extra)
                        obj["variants"] = res
                        emit(obj)
            if "flashmla" in todo:
                if fm is None:
                    skip(key, "flashmla", fm_err)
                elif c.page != 64:
                    skip(key, "flashmla", "FlashMLA's dense decode needs page 64")
                elif c.fp8:
                    skip(key, "flashmla", "FlashMLA's dense decode reads a bf16 cache (its FP8 cache is the sparse "
                         "decode's 656-byte rows)")
                elif left() < 5 + reserve:
                    skip(key, "flashmla", "time budget spent")
                else:
                    try:
                        qc = q.contiguous()
                        causal = q_len > 1
                        t = time.monotonic()
                        out, _, md, ns = fm.dense_decode_fwd(qc, pg["k"], c.Dv, pg["seqlens"], pg["bt"], scale,
                                                             causal, None, None)
                        torch.cuda.synchronize()
                        first = time.monotonic() - t
                        err = max(rel_err(torch, out[b], refs[b]) for b in vseq)
                        extra = dict(common, plan_first_ms=round(first * 1e3, 3), extension=args.flashmla_so)
                        fn = lambda: fm.dense_decode_fwd(qc, pg["k"], c.Dv, pg["seqlens"], pg["bt"], scale,  # noqa: E731
                                                         causal, md, ns)
                        report_checked(key, "flashmla", err, extra, fn, nbytes, flops)
                        del out
                    except Exception as e:  # noqa: BLE001
                        print("flashmla %s: %s" % (key, traceback.format_exc(limit=3)), file=sys.stderr)
                        skip(key, "flashmla", "%s: %s" % (type(e).__name__, e))
            del refs, q
        del pg
        torch.cuda.empty_cache()
    del ws
    torch.cuda.empty_cache()

    # ---------------- sparse MLA: FlashMLA's sparse FP8 decode (asked for by id only) ----------------
    sparse = [cid for cid in SPARSE if only and cid in only]
    if sparse and "flashmla" in peers:
        fs, fs_err = load_flashmla(torch, args.flashmla_sparse_so, "flashmla_sparse", "sparse FP8 decode")
        for cid in sparse:
            sc = SPARSE[cid]
            B, Hq, s_q, topk, L = sc["B"], sc["Hq"], sc["q_len"], sc["topk"], sc["L"]
            if fs is None:
                skip(cid, "flashmla", fs_err)
                continue
            if Hq not in (64, 128):
                skip(cid, "flashmla", "FlashMLA's sparse decode takes 64 or 128 query heads, not %d" % Hq)
                continue
            if left() < 10 + reserve:
                skip(cid, "flashmla", "time budget spent")
                continue
            try:
                torch.cuda.empty_cache()
                pages = L // 64
                nblk = B * pages
                kv = torch.empty((nblk, 64, 1, 656), dtype=torch.uint8, device=dev)
                e8 = torch.randint(0, 256, (nblk, 64, 512), dtype=torch.uint8, device=dev)
                e8 = torch.where((e8 & 0x7F) == 0x7F, e8 ^ 1, e8)  # no NaN
                kv[:, :, 0, :512] = e8
                scl = torch.pow(2.0, -7.0 - torch.randint(0, 3, (nblk, 64, 4), device=dev).float())
                kv[:, :, 0, 512:528] = scl.contiguous().view(torch.uint8).view(nblk, 64, 16)
                rope = rand((nblk, 64, 64))
                kv[:, :, 0, 528:] = rope.contiguous().view(torch.uint8).view(nblk, 64, 128)
                bt = torch.randperm(nblk, device=dev, dtype=torch.int32).view(B, pages)
                ids = torch.rand((B, s_q, L), device=dev).argsort(-1)[..., :topk].to(torch.int32)
                slots = (torch.gather(bt, 1, (ids // 64).view(B, -1).long()).view(B, s_q, topk) * 64 +
                         ids % 64).to(torch.int32).contiguous()
                q = rand((B, s_q, Hq, 576), amp=3.0)
                scale = 1.0 / math.sqrt(576)
                kept = B * s_q * topk
                nbytes = kept * 656 * ((Hq + 63) // 64) + q.numel() * 2 + B * s_q * Hq * (512 * 2 + 4) + kept * 4
                flops = 2 * Hq * (576 + 512) * kept
                t = time.monotonic()
                out, lse, md, ns = fs.sparse_decode_fwd(q, kv, slots, None, None, None, None, None, None, None, 512,
                                                        scale)
                torch.cuda.synchronize()
                first = time.monotonic() - t
                err = 0.0
                flat = kv.view(nblk * 64, 656)
                for b in sorted({0, B - 1}):  # the float32 reference of the dequantized rows
                    rows = flat[slots[b].long().view(-1)]
                    vals = rows[:, :512].contiguous().view(torch.float8_e4m3fn).float()
                    sc4 = rows[:, 512:528].contiguous().view(torch.float32)
                    k = torch.cat([(vals.view(-1, 4, 128) * sc4.unsqueeze(-1)).view(-1, 512),
                                   rows[:, 528:].contiguous().view(torch.bfloat16).float()], 1).view(s_q, topk, 576)
                    sco = torch.einsum("shd,skd->shk", q[b].float(), k) * scale
                    ref = torch.einsum("shk,skd->shd", torch.softmax(sco, -1), k[..., :512])
                    err = max(err, rel_err(torch, out[b], ref))
                extra = {"mask": "top-k ids as cache slots", "plan_first_ms": round(first * 1e3, 3),
                         "extension": args.flashmla_sparse_so}
                fn = lambda: fs.sparse_decode_fwd(q, kv, slots, None, None, md, ns, None, None, None,  # noqa: E731
                                                  512, scale)
                report_checked(cid, "flashmla", err, extra, fn, nbytes, flops)
                del out, lse, kv, q
            except Exception as e:  # noqa: BLE001
                print("flashmla %s: %s" % (cid, traceback.format_exc(limit=3)), file=sys.stderr)
                skip(cid, "flashmla", "%s: %s" % (type(e).__name__, e))
        torch.cuda.empty_cache()

    # ---------------- FlexAttention last: each shape compiles (seconds each) ----------------
    if "flex" in peers and contig:
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
        for c in contig:
            B, Hq, Hkv, Dqk, Dv, S, W, r, I, mla = c.B, c.Hq, c.Hkv, c.Dqk, c.Dv, c.S, c.W, c.r, c.I, c.mla
            L = c.glob[0]
            scale = 1.0 / math.sqrt(Dqk)
            kv = None
            for q_len in c.qlens:
                key = "%s/q%d" % (c.id, q_len)
                nbytes, flops = c.sizes(q_len)
                if c.fp8:
                    skip(key, "flex", "FlexAttention cannot read an e4m3 cache")
                    continue
                if flex_err is not None:
                    skip(key, "flex", "flex_attention unavailable: %s" % flex_err)
                    continue
                if left() < 15:
                    skip(key, "flex", "time budget spent (%.0f s budget)" % args.budget)
                    continue
                try:
                    if kv is None:
                        torch.cuda.empty_cache()
                        k = rand((B, Hkv, S, Dqk))
                        kv = (k, k[..., :Dv] if mla else rand((B, Hkv, S, Dv)))
                    k, v = kv
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
                        kv = (k, v)
                        out = flex_c(q, k, v, **kw)
                    torch.cuda.synchronize()
                    compile_s = time.monotonic() - t_c
                    del out
                    us = bench(lambda: flex_c(q, k, v, **kw))
                    report(key, "flex", us, nbytes, flops, {"compile_s": round(compile_s, 2)})
                except Exception as e:  # noqa: BLE001
                    print("flex %s: %s" % (key, traceback.format_exc(limit=2)), file=sys.stderr)
                    skip(key, "flex", "%s: %s" % (type(e).__name__, e))
            del kv
            torch.cuda.empty_cache()
    emit({"case": "*", "peer": "*", "status": "done", "seconds": round(time.monotonic() - T0, 1)})
    return 0


def prebuild(torch):
    """compile the FlashInfer modules of every variant at once (each a ninja build) and say how long"""
    from concurrent.futures import ThreadPoolExecutor
    try:
        import flashinfer  # noqa: F401
        names = sorted({n for v in PLAN_VARIANTS.values() for n in v})
        specs = flashinfer_specs(torch, names)
    except Exception as e:  # noqa: BLE001
        print("flashinfer prebuild: skipped: %s: %s" % (type(e).__name__, e))
        return 1
    uniq = {}
    for name, s in specs.items():
        uniq.setdefault(s.name, (name, s))

    def one(item):
        name, s = item
        t = time.monotonic()
        state = module_state(s)
        if state in ("prebuilt",):
            return name, state, 0.0, None
        try:
            s.build()
            return name, state, time.monotonic() - t, None
        except Exception as e:  # noqa: BLE001
            return name, state, time.monotonic() - t, "%s: %s" % (type(e).__name__, str(e)[-2000:])

    rc = 0
    with ThreadPoolExecutor(max_workers=len(uniq)) as ex:
        for name, state, secs, err in ex.map(one, uniq.values()):
            print("flashinfer module %-12s %-8s %6.1f s %s" % (name, state, secs, "FAILED: " + err if err else "ok"),
                  flush=True)
            rc |= err is not None
    return rc


if __name__ == "__main__":
    sys.exit(main())
