/* test_gpu_attn — the GQA attention family on a GPU through the public API
   (dcpattn_attn_plan_create / dcpattn_attn_run / dcpattn_merge), against the CPU reference
   of tests/ref.h on fresh random inputs (the seed comes from the clock and is printed;
   DCPATTN_TEST_SEED=N repeats a run).

   Every launch: out and lse poisoned with NaN (0xff bytes) first; unused cache slots, unused
   pages and the padding of q are NaN; pages in shuffled order (ref_shard_build); unused
   block-table entries point at an unused NaN page. After every launch nothing outside the
   out and lse tensors (head/token padding, rows past cu_seqlens_q[batch]) may have changed.

   Matrix
   - sweep: every head dim {64, 96, 128, 192, 256} x every group {1, 4, 6, 8, 16} (25 cases),
     page sizes {1, 16, 64}, W {1, 2, 4, 8} x I {1, 2, 16, 64}, a random rank, varlen q_len
     1..16 (or decode only), short sequences (L < W*I), causal and not, lse natural / base 2 /
     NULL, padded strides, a diagonal in fp16; each case runs num_splits 1, 0 (the balanced
     schedule), 16 (more splits than KV tiles) and DCPATTN_SPLITS_PER_SEQUENCE on the same
     inputs.
   - chunk: one varlen batch of q_len 1..16 plus a 200-token chunk, per head dim.
   - long: L ~ 5000 with num_splits 1, balanced, 64 and per-sequence.
   - skewed batches under the balanced schedule (the default): one long sequence among short
     ones, a single long sequence, 200 sequences of 1..64 keys (mostly empty shards), q_len up
     to 16, with the device's SMs and with 3 (few workers, long ranges).
   - one-GPU DCP: for q_len 1, 2, 3, 4, 8, 16: W launches (every rank, own plan, own shard),
     dcpattn_merge of the W partials equals a W = 1 dcpattn run and ref_attn_dense.
   - a batch whose sequences all have zero local tokens; an empty batch (batch = 0).
   - CUDA graph capture of a split run, replayed 3 times on new data, equals eager; a
     balanced run captured once and replayed with other lengths (seqused_k rewritten in
     place), bit for bit equal to eager runs with those lengths.
   - faults: workspace NULL / too small, misaligned q, out aliasing q or the cache.
   - FP8 (e4m3) cache: every head dim, groups 1..16, W {1, 3, 8} x I {1, 16, page size},
     q_len up to 16 (both the mma.sync and, on sm_90a, the wgmma tiles), per-tensor and
     per-KV-head scales, a cache of subnormal codes only, NaN (0x7f) in every unused slot,
     each with num_splits 1, 0 (balanced), 16 and per-sequence; the reference is computed
     from the dequantized cache in double, the baseline with it rounded to bf16/fp16. A
     captured run replayed after the scales' device values changed equals an eager run with
     the new scales and the reference.

   DCPATTN_TEST_QUICK=1 runs one case per feature (for compute-sanitizer).
   Without a GPU it says so and runs nothing. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>
#include <time.h>

#include "check.h"
#include "ref.h"

#define GPU_UTIL_CASE_FAIL
#define GPU_UTIL_ATTN /* the attention harness of gpu_util.h */
#include "gpu_util.h"

#define CHUNK_Q 200  /* the chunked-prefill query */

static uint64_t seed;
static int quick;
static int g_major; /* compute capability of device 0 */
static dcpattn_context *ctx;
static void *g_ws;        /* grow-only workspace, 256-byte aligned (cudaMalloc) */
static size_t g_ws_size;
static long long seen_zero_local_seqs, launches;

static double section_t0;
static long long section_launches;
static void section(const char *name) {
    double t = now_s();
    if (name) {
        printf("%-28s", name);
    } else {
        printf("%5lld launches %6.1f s\n", launches - section_launches, t - section_t0);
    }
    fflush(stdout);
    section_t0 = t;
    section_launches = launches;
}
static int rnd(int lo, int hi) { return hi <= lo ? lo : lo + (int)(ref_rand_u64(&seed) % (uint64_t)(hi - lo + 1)); }
static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* ---------------- plans and launches ---------------- */
static void *workspace_for(const dcpattn_attn_plan *plan) {
    size_t need = dcpattn_attn_workspace_size(plan);
    if (!need) return NULL;
    if (need > g_ws_size) {
        if (g_ws) CUDA_OK(cudaFree(g_ws));
        CUDA_OK(cudaMalloc(&g_ws, need));
        g_ws_size = need;
    }
    return g_ws;
}

/* A plan failure is a failure, except a non-power-of-two group rejected as unsupported
   (docs/faults.md allows that; it is reported, never silent). Returns 1 when a plan exists. */
static int plan_ok(dcpattn_status s, int group, const char *desc) {
    if (s == DCPATTN_STATUS_SUCCESS) return 1;
    if (s == DCPATTN_STATUS_UNSUPPORTED && !is_pow2(group)) {
        printf("note: %s: rejected as unsupported (%s)\n", desc, dcpattn_last_error());
        CHECK(1, "%s", desc);
        return 0;
    }
    CHECK(0, "%s: plan: %s: %s", desc, dcpattn_status_string(s), dcpattn_last_error());
    return 0;
}

static void describe(char *buf, size_t n, const char *what, const batch_data *bd, const rank_in *ri, const run_cfg *rc,
                     int splits_used) {
    size_t len;
    int b;
    len = (size_t)snprintf(buf, n,
                           "%s %s%s d%d g%d hkv%d ps%d%s %s W%d r%d I%d splits %d->%d lse %s pad %d extra_rows %d scale %g%s "
                           "max_q_len %d B%d q_len/L/local",
                           what, dt_name(bd->dtype),
                           bd->kv_dtype == DCPATTN_FP8_E4M3 ? (bd->per_head ? " kv e4m3 per-head" : " kv e4m3") : "",
                           bd->d, bd->hq / bd->hkv, bd->hkv, ri->ps, ri->sh.k_stride_t == bd->d && bd->hkv > 1 ? " head-major" : "",
                           rc->causal ? "causal" : "non-causal", ri->W, ri->r, ri->I, rc->splits, splits_used,
                           rc->lse_base2 == 2 ? "NULL" : rc->lse_base2 ? "base2" : "natural", ri->pad, rc->extra_rows,
                           rc->scale != 0 ? (double)rc->scale : 1.0 / sqrt((double)bd->d), rc->no_global ? " seqused_k_global NULL" : "", bd->max_q,
                           bd->batch);
    for (b = 0; b < bd->batch && len < n; b++)
        len += (size_t)snprintf(buf + len, n - len, " %d/%lld/%d", bd->qlen[b], (long long)bd->L[b],
                                ri->sh.seqused_k ? ri->sh.seqused_k[b] : -1);
}

/* Plans, poisons, launches and checks one configuration on one rank's inputs. lse_base2 2
   means lse NULL. Returns 1 if it ran and passed, 0 if it ran and failed, -1 if there is no
   output (no plan, or the run was refused). `keep` (optional) receives the output when it
   ran (the caller frees it); otherwise it is freed here. */
static int run_and_check(const char *what, const batch_data *bd, const rank_in *ri, const run_cfg *rc,
                         const ref_res *rr, double floor_mult, out_buf *keep) {
    dcpattn_attn_plan *plan = NULL;
    dcpattn_attn_args a;
    run_cfg pc = *rc;
    out_buf o;
    char desc[1024], msg[1024];
    dcpattn_status s;
    int ok;
    if (pc.lse_base2 == 2) pc.lse_base2 = 0;
    describe(desc, sizeof desc, what, bd, ri, rc, -1);
    if (!plan_ok(plan_for(ctx, bd, ri, &pc, &plan), bd->hq / bd->hkv, desc)) return -1;
    describe(desc, sizeof desc, what, bd, ri, rc, dcpattn_attn_num_splits(plan));
    snprintf(g_case, sizeof g_case, "%s [%s]", desc, dcpattn_attn_variant(plan));
    out_alloc(&o, bd->total_q + rc->extra_rows, bd->hq, bd->d, ri->pad, rc->lse_base2 != 2);
    rank_args(&a, ri, bd);
    if (rc->no_global) a.seqused_k_global = NULL;
    out_args(&a, &o);
    out_poison(&o, 0xff);
    s = dcpattn_attn_run(plan, &a, workspace_for(plan), dcpattn_attn_workspace_size(plan), 0);
    launches++;
    if (s != DCPATTN_STATUS_SUCCESS) {
        CHECK(0, "%s [%s]: run: %s: %s", desc, dcpattn_attn_variant(plan), dcpattn_status_string(s),
              dcpattn_last_error());
        dcpattn_attn_plan_destroy(plan);
        out_free(&o);
        return -1;
    }
    out_fetch(&o);
    ok = verdict(rr, &o, floor_mult, msg, sizeof msg);
    CHECK(ok, "%s [%s]: %s", desc, dcpattn_attn_variant(plan), msg);
    dcpattn_attn_plan_destroy(plan);
    if (keep)
        *keep = o;
    else
        out_free(&o);
    return ok;
}

/* ---------------- the attention case matrix ---------------- */
typedef struct acase {
    const char *what;
    int dtype, d, group, hkv, ps, causal;
    int W, I, rank;      /* rank -1: a random one */
    int batch, qlen_max; /* q_len random in 1..qlen_max per sequence (1: decode) */
    int chunk;           /* sequence 0 carries a CHUNK_Q-token query chunk */
    int L_min, L_max;    /* global lengths of the ordinary sequences */
    int n_short;         /* sequences with L < W*I: zero or few local tokens on some ranks */
    int splits[4], n_splits;
    int L_long;          /* > 0: the first ordinary sequence has this global length */
    int num_sms;         /* 0: the device's */
    int lse_mode;        /* 0 natural, 1 base 2, 2 NULL */
    int pad, extra_rows, no_global;
    float scale;
    int fp8; /* e4m3 cache: 1 per-tensor scales, 2 per-KV-head, 3 subnormal codes only */
    int q_exp; /* q times 2^q_exp (and scale times 2^-q_exp): query magnitudes outside fp16's range */
} acase;

/* Lengths of a case: short sequences first (the first with no token on the chosen rank
   where the rank allows it, the second with one local token and q_len >= 2 so that its
   first query rows see no key here), then ordinary ones, then the chunk. */
static void case_lengths(const acase *c, int r, int *qlen, int64_t *L) {
    int b, span = c->W * c->I;
    for (b = 0; b < c->batch; b++) {
        int q = rnd(1, c->qlen_max);
        int64_t l;
        if (c->chunk && b == c->batch - 1) {
            q = CHUNK_Q;
            l = rnd(CHUNK_Q, CHUNK_Q + c->L_max / 2);
        } else if (b < c->n_short && span > 1) {
            if (b == 0 && r >= 1)
                l = rnd(1, r * c->I); /* ends before rank r's first token */
            else if (b == 1 && r >= 1 && r * c->I + 1 < span)
                l = r * c->I + 1; /* exactly one token on rank r */
            else
                l = rnd(1, span - 1);
            if (q > l) q = (int)l;
            if (b == 1 && l >= 2 && q < 2 && c->qlen_max >= 2) q = 2;
        } else if (c->L_long && b == c->n_short) {
            l = c->L_long;
        } else {
            l = rnd(c->L_min > q ? c->L_min : q, c->L_max > q ? c->L_max : q);
        }
        qlen[b] = q;
        L[b] = l;
    }
}

/* whether no case before cases[i] has its description (the quick subset takes one of each) */
static int first_of_kind(const acase *cases, int i) {
    int j;
    for (j = 0; j < i; j++)
        if (strcmp(cases[j].what, cases[i].what) == 0) return 0;
    return 1;
}

static void attn_case(const acase *c) {
    batch_data bd;
    rank_in ri;
    ref_res rr;
    int qlen[MAXB], i, r;
    int64_t L[MAXB];
    run_cfg rc;
    r = c->rank >= 0 ? c->rank : rnd(0, c->W - 1);
    case_lengths(c, r, qlen, L);
    data_make(&bd, c->dtype, c->group * c->hkv, c->hkv, c->d, c->batch, qlen, L, &seed);
    if (c->fp8) data_set_fp8(&bd, c->fp8 == 2, c->fp8 == 3, &seed);
    if (c->q_exp) { /* bf16 queries; exact: a power of two */
        const int64_t nq = (int64_t)bd.total_q * bd.hq * bd.d;
        int64_t j;
        for (j = 0; j < nq; j++) bd.q[j] = ref_float_to_bf16(ldexpf(ref_bf16_to_float(bd.q[j]), c->q_exp));
    }
    if (bd.max_q < (c->chunk ? CHUNK_Q : c->qlen_max)) bd.max_q = c->chunk ? CHUNK_Q : c->qlen_max;
    rank_build(&ri, &bd, c->ps, c->W, r, c->I, c->pad, 0, &seed);
    seen_zero_local_seqs += ri.zero_local;
    memset(&rc, 0, sizeof rc);
    rc.causal = c->causal;
    rc.lse_base2 = c->lse_mode;
    rc.extra_rows = c->extra_rows;
    rc.no_global = c->no_global && c->W == 1;
    rc.scale = c->scale;
    rc.num_sms = c->num_sms;
    {
        ref_attn_inputs in;
        rank_ref_inputs(&in, &ri, &bd);
        if (rc.no_global) in.seqused_k_global = NULL;
        ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);
    }
    for (i = 0; i < c->n_splits; i++) {
        rc.splits = c->splits[i];
        run_and_check(c->what, &bd, &ri, &rc, &rr, 1.0, NULL);
    }
    ref_res_free(&rr);
    rank_free(&ri);
    data_free(&bd);
}

static const int HEAD_DIMS[5] = {64, 96, 128, 192, 256};
static const int GROUPS[5] = {1, 4, 6, 8, 16};
static const int PAGES[3] = {1, 16, 64};
static const int WORLDS[4] = {1, 2, 4, 8};
static const int INTERLEAVES[4] = {1, 2, 16, 64};

/* Sweep case k = 5*iD + iG of the head-dim x group cross product. */
static acase sweep_case(int k) {
    static const int QMAX[5] = {16, 1, 8, 3, 12};
    const int iD = k / 5, iG = k % 5, W = WORLDS[k % 4], I = INTERLEAVES[(k / 4) % 4]; /* k < 16: every (W, I) */
    const int group = GROUPS[iG];
    const acase c = {
        .what = "sweep",
        .dtype = iD == iG ? DCPATTN_FP16 : DCPATTN_BF16, /* each head dim and each group once in fp16 */
        .d = HEAD_DIMS[iD],
        .group = group,
        .hkv = group >= 8 ? 16 / group : group == 1 ? 8 : 2, /* 8..16 query heads */
        .ps = PAGES[k % 3],
        .causal = k % 6 != 5,
        .W = W,
        .I = I,
        .rank = -1,
        .batch = 3 + k % 3,
        .qlen_max = QMAX[(iD + iG) % 5],
        .L_min = 16,
        .L_max = 600,
        .n_short = W * I > 1 ? 2 : 0,
        .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE},
        .n_splits = 4,
        .lse_mode = k % 3,
        .pad = k % 4 == 2 ? 8 : 0,
        .extra_rows = k % 5 == 1 ? 5 : 0,
        .no_global = k % 8 == 0,
        .scale = k % 7 == 3 ? 0.3f : 0.0f,
    };
    return c;
}

/* Varlen batch of q_len 1..16 plus a 200-token chunk, one per head dim. */
static acase chunk_case(int i) {
    static const int G[5] = {16, 6, 4, 8, 1}, HKV[5] = {1, 1, 2, 1, 2}, DT[5] = {1, 2, 1, 1, 2};
    static const int PS[5] = {16, 1, 64, 1, 16}, CAUSAL[5] = {1, 1, 0, 1, 0};
    static const int W[5] = {1, 2, 4, 8, 2}, I[5] = {1, 16, 2, 1, 64};
    const acase c = {
        .what = "chunk",
        .dtype = DT[i],
        .d = HEAD_DIMS[i],
        .group = G[i],
        .hkv = HKV[i],
        .ps = PS[i],
        .causal = CAUSAL[i],
        .W = W[i],
        .I = I[i],
        .rank = -1,
        .batch = 5,
        .qlen_max = 16,
        .chunk = 1,
        .L_min = 16,
        .L_max = 400,
        .n_short = W[i] * I[i] > 1 ? 1 : 0,
        .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE},
        .n_splits = 4,
        .lse_mode = i % 3,
        .pad = i == 3 ? 16 : 0,
    };
    return c;
}

/* L ~ 5000, decode and MTP rows, splits 1, auto and 64 (fewer than the 79 KV tiles). */
static const acase LONG_CASE = {
    .what = "long", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 1, .ps = 64, .causal = 1,
    .W = 1, .I = 1, .rank = 0, .batch = 2, .qlen_max = 4, .L_min = 4500, .L_max = 5500,
    .splits = {1, 0, 64, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4,
};

/* Every sequence has zero tokens on rank 3 of W = 4, I = 16 (L <= 48): zeros and -inf. */
static const acase ZERO_LOCAL_CASE = {
    .what = "all-zero-local", .dtype = DCPATTN_BF16, .d = 128, .group = 4, .hkv = 2, .ps = 16, .causal = 1,
    .W = 4, .I = 16, .rank = 3, .batch = 3, .qlen_max = 4, .L_min = 1, .L_max = 48,
    .splits = {1, 0, 16}, .n_splits = 3,
};

/* Skewed batches under the balanced schedule (num_splits 0) and, for comparison, the
   per-sequence split; num_sms 3 leaves few workers, each with a long range over many pieces. */
static const acase SKEW_CASES[] = {
    {.what = "skew: one long among short", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 2, .ps = 16,
     .causal = 1, .W = 4, .I = 1, .rank = -1, .batch = 24, .qlen_max = 1, .L_min = 1, .L_max = 300, .n_short = 2,
     .splits = {0, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 2, .L_long = 24000},
    {.what = "skew: MTP, few workers", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 1, .ps = 64, .causal = 1,
     .W = 8, .I = 16, .rank = -1, .batch = 16, .qlen_max = 16, .L_min = 16, .L_max = 900, .n_short = 3,
     .splits = {0}, .n_splits = 1, .L_long = 30000, .num_sms = 3, .lse_mode = 1},
    {.what = "skew: mma.sync tiles, fp16", .dtype = DCPATTN_FP16, .d = 64, .group = 4, .hkv = 2, .ps = 1,
     .causal = 1, .W = 2, .I = 2, .rank = -1, .batch = 40, .qlen_max = 4, .L_min = 1, .L_max = 120, .n_short = 2,
     .splits = {0}, .n_splits = 1, .L_long = 8000, .pad = 8},
    {.what = "skew: head dim 256, q_len 16", .dtype = DCPATTN_BF16, .d = 256, .group = 6, .hkv = 1, .ps = 16,
     .causal = 1, .W = 1, .I = 1, .rank = 0, .batch = 6, .qlen_max = 16, .L_min = 16, .L_max = 200,
     .splits = {0}, .n_splits = 1, .L_long = 6000, .num_sms = 3, .lse_mode = 2},
    {.what = "single long sequence", .dtype = DCPATTN_BF16, .d = 128, .group = 16, .hkv = 1, .ps = 64,
     .causal = 1, .W = 2, .I = 64, .rank = 1, .batch = 1, .qlen_max = 8, .L_min = 40000, .L_max = 40000,
     .splits = {0}, .n_splits = 1},
    {.what = "200 short sequences, mostly empty shards", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 1,
     .ps = 16, .causal = 1, .W = 8, .I = 1, .rank = 5, .batch = 200, .qlen_max = 2, .L_min = 1, .L_max = 64,
     .splits = {0, 1}, .n_splits = 2},
};

/* ---------------- one-GPU simulated DCP ----------------
   W launches (one per rank, each its own plan and shard), dcpattn_merge of the W partial
   (out, lse) in the input type with natural lse, compared with a W = 1 dcpattn run over the
   unsharded cache and with ref_attn_dense. Each rank's partial is checked against ref_attn
   too. The merged output went through one more rounding (each partial is stored in the
   input type before the merge), so its floor is doubled. */
typedef struct dcase {
    int q_len, dtype, d, group, hkv, ps, causal, W, I, splits;
} dcase;

static void dcp_case(const dcase *c) {
    batch_data bd;
    rank_in ri;
    ref_res dense, rr;
    out_buf part[8], w1, merged;
    run_cfg rc;
    int qlen[MAXB], r, b, ok, have[8], have_w1, all = 1;
    int64_t L[MAXB];
    const int batch = 4, span = c->W * c->I;
    char desc[512], msg[1024];
    memset(have, 0, sizeof have);
    for (b = 0; b < batch; b++) {
        qlen[b] = c->q_len;
        if (b == 0) /* short: some ranks hold nothing */
            L[b] = span - 1 >= c->q_len ? rnd(c->q_len, span - 1) : rnd(c->q_len, c->q_len + span);
        else
            L[b] = rnd(c->q_len > 16 ? c->q_len : 16, 600);
    }
    data_make(&bd, c->dtype, c->group * c->hkv, c->hkv, c->d, batch, qlen, L, &seed);
    snprintf(desc, sizeof desc, "dcp %s d%d g%d hkv%d ps%d %s W%d I%d q_len %d splits %d L %lld %lld %lld %lld",
             dt_name(c->dtype), c->d, c->group, c->hkv, c->ps, c->causal ? "causal" : "non-causal", c->W, c->I,
             c->q_len, c->splits, (long long)L[0], (long long)L[1], (long long)L[2], (long long)L[3]);
    memset(&rc, 0, sizeof rc);
    rc.causal = c->causal;
    memset(&ri, 0, sizeof ri); /* only what ref_params reads: W = 1 */
    ri.ps = c->ps;
    ri.W = 1;
    ri.I = 1;
    ref_dense(&dense, ref_params(&bd, &ri, &rc), &bd);
    /* W = 1 over the unsharded cache */
    rank_build(&ri, &bd, c->ps, 1, 0, 1, 0, 0, &seed);
    rc.splits = 1;
    have_w1 = run_and_check("dcp W=1", &bd, &ri, &rc, &dense, 1.0, &w1) >= 0;
    if (!have_w1) all = 0;
    rank_free(&ri);
    /* the W ranks */
    rc.splits = c->splits;
    for (r = 0; r < c->W; r++) {
        ref_attn_inputs in;
        rank_build(&ri, &bd, c->ps, c->W, r, c->I, 0, 0, &seed);
        seen_zero_local_seqs += ri.zero_local;
        rank_ref_inputs(&in, &ri, &bd);
        ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);
        have[r] = run_and_check("dcp rank", &bd, &ri, &rc, &rr, 1.0, &part[r]) >= 0;
        if (!have[r]) all = 0;
        ref_res_free(&rr);
        rank_free(&ri);
    }
    if (all) {
        dcpattn_merge_args m;
        const void *o[8];
        const float *l[8];
        dcpattn_status s;
        for (r = 0; r < c->W; r++) {
            o[r] = part[r].d_out;
            l[r] = part[r].d_lse;
        }
        snprintf(g_case, sizeof g_case, "%s: merge of the W partials", desc);
        out_alloc(&merged, bd.total_q, bd.hq, bd.d, 0, 1);
        out_poison(&merged, 0xff);
        memset(&m, 0, sizeof m);
        m.num_states = c->W;
        m.rows = bd.total_q;
        m.heads = bd.hq;
        m.head_dim = bd.d;
        m.in_dtype = (dcpattn_dtype)c->dtype;
        m.out_dtype = (dcpattn_dtype)c->dtype;
        m.o = o;
        m.lse = l;
        m.out = merged.d_out;
        m.lse_out = merged.d_lse;
        s = dcpattn_merge(ctx, &m, 0);
        CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: merge: %s: %s", desc, dcpattn_status_string(s), dcpattn_last_error());
        if (s == DCPATTN_STATUS_SUCCESS) {
            ref_err e;
            double *w1d = (double *)xmalloc(sizeof(double) * (size_t)bd.total_q * bd.hq * bd.d);
            int64_t i, n = (int64_t)bd.total_q * bd.hq * bd.d;
            double tol_abs, tol_rel;
            out_fetch(&merged);
            ok = verdict(&dense, &merged, 2.0, msg, sizeof msg);
            CHECK(ok, "%s: merged vs ref_attn_dense: %s", desc, msg);
            /* merged vs the W = 1 dcpattn run: each is within its bound of the exact result,
               so they differ by at most the sum of the two bounds */
            for (i = 0; i < n; i++) w1d[i] = ref_load(w1.h_out, c->dtype, i);
            e = ref_compare(w1d, merged.h_out, c->dtype, n);
            tol_abs = 4 * dense.base.max_abs + 3 * abs_floor(c->dtype);
            tol_rel = 4 * dense.base.rel_fro + 3 * rel_floor(c->dtype);
            CHECK(ref_err_ok(&e, tol_abs, tol_rel), "%s: merged vs W=1 dcpattn: %s (tol %.3g/%.3g)", desc,
                  ref_err_str(&e), tol_abs, tol_rel);
            for (i = 0; i < (int64_t)bd.total_q * bd.hq; i++) w1d[i] = w1.h_lse[i];
            e = ref_compare(w1d, merged.h_lse, REF_FP32, (int64_t)bd.total_q * bd.hq);
            CHECK(ref_err_ok(&e, 2 * lse_tol(dense.lse_dtype, 0), 2 * lse_tol(dense.lse_dtype, 0)),
                  "%s: merged lse vs W=1 dcpattn lse: %s", desc, ref_err_str(&e));
            free(w1d);
        }
        out_free(&merged);
    }
    for (r = 0; r < c->W; r++)
        if (have[r]) out_free(&part[r]);
    if (have_w1) out_free(&w1);
    ref_res_free(&dense);
    data_free(&bd);
}

/* Captures one run of `plan` on `st` into an executable graph; *ok: the run was accepted. */
static cudaGraphExec_t capture_run(const dcpattn_attn_plan *plan, const dcpattn_attn_args *a, void *ws, size_t wsz,
                                   cudaStream_t st, const char *desc, int *ok) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    dcpattn_status s;
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    s = dcpattn_attn_run(plan, a, ws, wsz, (dcpattn_stream)st);
    CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run during capture: %s: %s", desc, dcpattn_status_string(s),
          dcpattn_last_error());
    CUDA_OK(cudaStreamEndCapture(st, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    cudaGraphDestroy(g);
    *ok = s == DCPATTN_STATUS_SUCCESS;
    return ge;
}

/* One replay step of a captured run: an eager run of the same arguments into `eager`, then the
   graph into `o`; both checked against the reference, and the graph bit for bit against eager. */
static void eager_then_replay(const dcpattn_attn_plan *plan, const dcpattn_attn_args *a, void *ws, size_t wsz,
                              cudaStream_t st, cudaGraphExec_t ge, out_buf *o, out_buf *eager, const ref_res *rr,
                              const char *desc, int rep) {
    dcpattn_attn_args ea = *a;
    char msg[1024];
    int same_out, same_lse;
    dcpattn_status s;
    out_args(&ea, eager);
    out_poison(eager, 0xff);
    s = dcpattn_attn_run(plan, &ea, ws, wsz, (dcpattn_stream)st);
    CHECK(s == DCPATTN_STATUS_SUCCESS, "%s replay %d: eager run: %s", desc, rep, dcpattn_last_error());
    CUDA_OK(cudaStreamSynchronize(st));
    out_fetch(eager);
    CHECK(verdict(rr, eager, 1.0, msg, sizeof msg), "%s replay %d: eager: %s", desc, rep, msg);
    out_poison(o, 0xff);
    CUDA_OK(cudaGraphLaunch(ge, st));
    CUDA_OK(cudaStreamSynchronize(st));
    out_fetch(o);
    launches += 2;
    same_out = memcmp(o->h_out, eager->h_out, sizeof(uint16_t) * (size_t)o->out_elems) == 0;
    same_lse = memcmp(o->h_lse, eager->h_lse, sizeof(float) * (size_t)o->lse_elems) == 0;
    CHECK(same_out && same_lse, "%s replay %d: graph differs from eager (out %s, lse %s)", desc, rep,
          same_out ? "same" : "differs", same_lse ? "same" : "differs");
    CHECK(verdict(rr, o, 1.0, msg, sizeof msg), "%s replay %d: graph: %s", desc, rep, msg);
}

/* FP8 (e4m3) caches: W {1, 3, 8} x I {1, 16, page}, every head dim, q_len up to 16. */
static const acase FP8_CASES[] = {
    {.what = "fp8", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 2, .ps = 16, .causal = 1, .W = 1, .I = 1,
     .rank = 0, .batch = 4, .qlen_max = 16, .L_min = 16, .L_max = 700, .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE},
     .n_splits = 4, .fp8 = 1},
    {.what = "fp8", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 2, .ps = 64, .causal = 1, .W = 3, .I = 16,
     .rank = -1, .batch = 5, .qlen_max = 1, .L_min = 16, .L_max = 900, .n_short = 2,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .lse_mode = 1, .fp8 = 2},
    {.what = "fp8", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 1, .ps = 16, .causal = 1, .W = 8, .I = 16,
     .rank = -1, .batch = 4, .qlen_max = 4, .L_min = 16, .L_max = 900, .n_short = 2,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .fp8 = 1},
    {.what = "fp8", .dtype = DCPATTN_FP16, .d = 64, .group = 4, .hkv = 2, .ps = 16, .causal = 1, .W = 3, .I = 16,
     .rank = -1, .batch = 4, .qlen_max = 16, .L_min = 16, .L_max = 500, .n_short = 2,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .lse_mode = 2, .pad = 8, .fp8 = 2},
    {.what = "fp8", .dtype = DCPATTN_BF16, .d = 96, .group = 6, .hkv = 2, .ps = 1, .causal = 1, .W = 8, .I = 1,
     .rank = -1, .batch = 3, .qlen_max = 3, .L_min = 16, .L_max = 600, .n_short = 2,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .fp8 = 2},
    {.what = "fp8", .dtype = DCPATTN_BF16, .d = 192, .group = 16, .hkv = 1, .ps = 64, .causal = 1, .W = 3, .I = 64,
     .rank = -1, .batch = 3, .qlen_max = 12, .L_min = 16, .L_max = 900, .n_short = 2,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .extra_rows = 5, .fp8 = 1},
    {.what = "fp8", .dtype = DCPATTN_FP16, .d = 256, .group = 1, .hkv = 8, .ps = 16, .causal = 0, .W = 1, .I = 1,
     .rank = 0, .batch = 3, .qlen_max = 2, .L_min = 16, .L_max = 400,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .fp8 = 2},
    /* at most 32 rows a KV head on the 64-row tile (sm_90a): stacked into one S pass, by the
       balanced schedule's own kernel (max_q_len x group <= 32) or per CTA (per-sequence split) */
    {.what = "fp8 stacked rows", .dtype = DCPATTN_BF16, .d = 128, .group = 16, .hkv = 2, .ps = 64, .causal = 1,
     .W = 8, .I = 16, .rank = -1, .batch = 5, .qlen_max = 2, .L_min = 16, .L_max = 900, .n_short = 2,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .fp8 = 1},
    {.what = "fp8 stacked rows", .dtype = DCPATTN_FP16, .d = 128, .group = 4, .hkv = 4, .ps = 16, .causal = 1,
     .W = 3, .I = 1, .rank = -1, .batch = 4, .qlen_max = 8, .L_min = 16, .L_max = 700, .n_short = 1,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .lse_mode = 1, .fp8 = 2},
    /* fp16 queries on the 64-row tile (sm_90a: S on e4m3 wgmma, Q split into hi + lo from fp16) */
    {.what = "fp8 fp16 q, 64-row tile", .dtype = DCPATTN_FP16, .d = 128, .group = 8, .hkv = 2, .ps = 16, .causal = 1, .W = 3, .I = 16,
     .rank = -1, .batch = 4, .qlen_max = 8, .L_min = 16, .L_max = 700, .n_short = 1,
     .splits = {1, 0, 16, DCPATTN_SPLITS_PER_SEQUENCE}, .n_splits = 4, .fp8 = 1},
    {.what = "fp8 subnormal codes", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 2, .ps = 16, .causal = 1,
     .W = 1, .I = 1, .rank = 0, .batch = 3, .qlen_max = 8, .L_min = 16, .L_max = 400,
     .splits = {1, 0}, .n_splits = 2, .fp8 = 3},
    {.what = "fp8 subnormal codes", .dtype = DCPATTN_FP16, .d = 128, .group = 8, .hkv = 2, .ps = 16, .causal = 1,
     .W = 1, .I = 1, .rank = 0, .batch = 3, .qlen_max = 1, .L_min = 16, .L_max = 400,
     .splits = {1, 0}, .n_splits = 2, .fp8 = 3},
    /* bf16 queries far above and below fp16's range (with an e4m3 cache the tiles compute in
       fp16 after rescaling Q by a power of two; q_len 8: the wgmma tile), the softmax scale set
       against them */
    {.what = "fp8 q x 2^20", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 2, .ps = 16, .causal = 1, .W = 3,
     .I = 16, .rank = -1, .batch = 3, .qlen_max = 2, .L_min = 16, .L_max = 600, .n_short = 1,
     .splits = {1, 0, 16}, .n_splits = 3, .scale = 0.08838834764831845f / 1048576.0f, .fp8 = 1, .q_exp = 20},
    {.what = "fp8 q x 2^20", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 2, .ps = 64, .causal = 1, .W = 2,
     .I = 64, .rank = -1, .batch = 3, .qlen_max = 8, .L_min = 16, .L_max = 700, .n_short = 1,
     .splits = {1, 0, 16}, .n_splits = 3, .scale = 0.08838834764831845f / 1048576.0f, .fp8 = 2, .q_exp = 20},
    {.what = "fp8 q x 2^-40", .dtype = DCPATTN_BF16, .d = 256, .group = 4, .hkv = 2, .ps = 16, .causal = 1, .W = 1,
     .I = 1, .rank = 0, .batch = 3, .qlen_max = 4, .L_min = 16, .L_max = 600,
     .splits = {1, 0}, .n_splits = 2, .scale = 0.0625f * 1099511627776.0f, .fp8 = 2, .q_exp = -40},
};

/* A captured FP8 run replayed after the scales' device values changed (per-KV-head scales,
   the balanced schedule and a 4-way split): the kernel reads the scales at run time, so the
   replay equals an eager run with the new values and the reference computed with them. */
static void fp8_graph_test(void) {
    static const int SPLITS[2] = {0, 4};
    batch_data bd;
    rank_in ri;
    ref_res rr;
    out_buf o, eager;
    run_cfg rc;
    dcpattn_attn_args a;
    cudaStream_t st;
    int qlen[MAXB], b, rep, k;
    int64_t L[MAXB];
    char desc[1024];
    for (b = 0; b < 4; b++) {
        qlen[b] = rnd(1, 8);
        L[b] = rnd(qlen[b] + 16, 800);
    }
    data_make(&bd, DCPATTN_BF16, 16, 2, 128, 4, qlen, L, &seed);
    data_set_fp8(&bd, 1, 0, &seed);
    bd.max_q = 8;
    rank_build(&ri, &bd, 16, 3, 1, 16, 0, 0, &seed);
    CUDA_OK(cudaStreamCreate(&st));
    for (k = 0; k < 2; k++) {
        dcpattn_attn_plan *plan = NULL;
        cudaGraphExec_t ge = NULL;
        int captured;
        void *ws;
        size_t wsz;
        memset(&rc, 0, sizeof rc);
        rc.causal = 1;
        rc.splits = SPLITS[k];
        describe(desc, sizeof desc, "fp8 graph, changed scales", &bd, &ri, &rc, -1);
        snprintf(g_case, sizeof g_case, "%s", desc);
        if (!plan_ok(plan_for(ctx, &bd, &ri, &rc, &plan), 8, desc)) continue;
        ws = workspace_for(plan);
        wsz = dcpattn_attn_workspace_size(plan);
        out_alloc(&o, bd.total_q, bd.hq, bd.d, 0, 1);
        out_alloc(&eager, bd.total_q, bd.hq, bd.d, 0, 1);
        rank_args(&a, &ri, &bd);
        out_args(&a, &o);
        ge = capture_run(plan, &a, ws, wsz, st, desc, &captured);
        for (rep = 0; rep < 3 && captured; rep++) {
            ref_attn_inputs in;
            int h;
            if (rep > 0) /* new scales in the same device words; the cache bytes stay */
                for (h = 0; h < bd.hkv; h++) {
                    bd.k_scale[h] *= rep == 1 ? 1.5f : 0.5f;
                    bd.v_scale[h] *= rep == 1 ? 0.25f : 3.0f;
                }
            CUDA_OK(cudaMemcpyAsync(ri.ks, bd.k_scale, sizeof(float) * MAX_HKV, cudaMemcpyHostToDevice, st));
            CUDA_OK(cudaMemcpyAsync(ri.vs, bd.v_scale, sizeof(float) * MAX_HKV, cudaMemcpyHostToDevice, st));
            rank_ref_inputs(&in, &ri, &bd);
            ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);
            eager_then_replay(plan, &a, ws, wsz, st, ge, &o, &eager, &rr, desc, rep);
            ref_res_free(&rr);
        }
        if (ge) cudaGraphExecDestroy(ge);
        out_free(&o);
        out_free(&eager);
        dcpattn_attn_plan_destroy(plan);
    }
    CUDA_OK(cudaStreamDestroy(st));
    rank_free(&ri);
    data_free(&bd);
}

/* ---------------- graph capture, empty batch, faults ----------------
   cluster: the 4 splits merge inside thread-block clusters (sm_90+: one launch, no
   workspace); else DCPATTN_NO_CLUSTER_MERGE=1: partials in the workspace and a merge launch. */
static void graph_and_fault_tests(int cluster) {
    batch_data bd;
    rank_in ri;
    ref_res rr;
    out_buf o, eager;
    run_cfg rc;
    dcpattn_attn_plan *plan = NULL;
    dcpattn_attn_args a;
    cudaStream_t st;
    cudaGraphExec_t ge = NULL;
    int captured;
    int qlen[MAXB], b, rep;
    int64_t L[MAXB];
    void *ws;
    size_t wsz;
    dcpattn_status s;
    char desc[1024];
    for (b = 0; b < 4; b++) {
        qlen[b] = rnd(1, 4);
        L[b] = rnd(qlen[b], 600);
    }
    qlen[0] = 1; /* one token globally: nothing on rank 1 */
    L[0] = 1;
    data_make(&bd, DCPATTN_BF16, 8, 1, 128, 4, qlen, L, &seed);
    bd.max_q = 4;
    rank_build(&ri, &bd, 16, 2, 1, 1, 0, 0, &seed);
    memset(&rc, 0, sizeof rc);
    rc.causal = 1;
    rc.splits = 4; /* > 1: the split merge (cluster or launch) is captured too */
    describe(desc, sizeof desc, cluster ? "graph, cluster merge" : "graph, merge kernel", &bd, &ri, &rc, 4);
    snprintf(g_case, sizeof g_case, "%s", desc);
    if (!cluster) setenv("DCPATTN_NO_CLUSTER_MERGE", "1", 1);
    s = plan_for(ctx, &bd, &ri, &rc, &plan);
    unsetenv("DCPATTN_NO_CLUSTER_MERGE");
    if (!plan_ok(s, 8, desc)) {
        rank_free(&ri);
        data_free(&bd);
        return;
    }
    CHECK(dcpattn_attn_num_splits(plan) == 4, "graph: plan has %d splits, asked for 4", dcpattn_attn_num_splits(plan));
    ws = workspace_for(plan);
    wsz = dcpattn_attn_workspace_size(plan);
    if (cluster && g_major >= 9)
        CHECK(wsz == 0, "graph: a cluster-merge plan needs no workspace (%zu bytes)", wsz);
    else
        CHECK(wsz > 0 && ws, "graph: a split plan needs a workspace (%zu bytes)", wsz);
    out_alloc(&o, bd.total_q, bd.hq, bd.d, 0, 1);
    out_alloc(&eager, bd.total_q, bd.hq, bd.d, 0, 1);
    CUDA_OK(cudaStreamCreate(&st));
    rank_args(&a, &ri, &bd);
    out_args(&a, &o);

    /* capture */
    out_poison(&o, 0xff);
    ge = capture_run(plan, &a, ws, wsz, st, desc, &captured);
    for (rep = 0; rep < 3 && captured; rep++) {
        ref_attn_inputs in;
        if (rep > 0) { /* new q and cache values (and a new page order) in the same buffers */
            data_fill(&bd, &seed);
            rank_build(&ri, &bd, 16, 2, 1, 1, 0, 1, &seed);
        }
        rank_ref_inputs(&in, &ri, &bd);
        ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);
        eager_then_replay(plan, &a, ws, wsz, st, ge, &o, &eager, &rr, desc, rep);
        ref_res_free(&rr);
    }
    if (ge) cudaGraphExecDestroy(ge);

    /* faults: rejected, and no output byte changes */
    {
        struct {
            const char *what;
            int kind;
            dcpattn_status want;
        } f[] = {
            {"workspace NULL", 0, DCPATTN_STATUS_WORKSPACE},
            {"workspace too small", 1, DCPATTN_STATUS_WORKSPACE},
            {"q misaligned by 2 bytes", 2, DCPATTN_STATUS_MISALIGNED},
            {"out aliasing q", 3, DCPATTN_STATUS_ALIASING},
            {"out aliasing the k cache", 4, DCPATTN_STATUS_ALIASING},
        };
        size_t qbytes = sizeof(uint16_t) * (size_t)ri.q_elems;
        size_t kbytes = sizeof(uint16_t) * (size_t)(ri.sh.num_pages * ri.sh.k_stride_page);
        uint16_t *hq = (uint16_t *)xmalloc(qbytes), *hk = (uint16_t *)xmalloc(kbytes);
        unsigned i;
        for (i = 0; i < sizeof f / sizeof f[0]; i++) {
            dcpattn_attn_args fa = a;
            int untouched;
            if (f[i].kind <= 1 && wsz == 0) continue; /* no workspace to get wrong */
            out_poison(&o, 0x5a);
            CUDA_OK(cudaDeviceSynchronize());
            if (f[i].kind == 2) fa.q = (const char *)ri.q + 2;
            if (f[i].kind == 3) fa.out = ri.q;
            if (f[i].kind == 4) fa.out = ri.k;
            s = dcpattn_attn_run(plan, &fa, f[i].kind == 0 ? NULL : ws, f[i].kind == 1 ? wsz - 256 : wsz,
                                 (dcpattn_stream)st);
            CUDA_OK(cudaStreamSynchronize(st));
            out_fetch(&o);
            CUDA_OK(cudaMemcpy(hq, ri.q, qbytes, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(hk, ri.k, kbytes, cudaMemcpyDeviceToHost));
            untouched = out_changed(&o, 0, 0x5a, 1) == 0 && memcmp(hq, ri.hq, qbytes) == 0 &&
                        memcmp(hk, ri.sh.k_cache, kbytes) == 0;
            CHECK(s == f[i].want && untouched, "fault %s: got %s (want %s)%s", f[i].what, dcpattn_status_string(s),
                  dcpattn_status_string(f[i].want), untouched ? "" : "; an output, q or k byte changed");
        }
        free(hq);
        free(hk);
    }

    /* empty batch: success, nothing written (with pointers, and with none at all) */
    {
        dcpattn_attn_args ea = a;
        out_poison(&o, 0x5a);
        ea.batch = 0;
        s = dcpattn_attn_run(plan, &ea, ws, wsz, (dcpattn_stream)st);
        CUDA_OK(cudaStreamSynchronize(st));
        out_fetch(&o);
        CHECK(s == DCPATTN_STATUS_SUCCESS && out_changed(&o, 0, 0x5a, 1) == 0,
              "empty batch (split plan): %s, %lld bytes written", dcpattn_status_string(s),
              (long long)out_changed(&o, 0, 0x5a, 1));
        memset(&ea, 0, sizeof ea);
        s = dcpattn_attn_run(plan, &ea, ws, wsz, (dcpattn_stream)st);
        CHECK(s == DCPATTN_STATUS_SUCCESS, "empty batch with NULL pointers: %s: %s", dcpattn_status_string(s),
              dcpattn_last_error());
    }
    dcpattn_attn_plan_destroy(plan);
    {
        dcpattn_attn_args ea = a;
        run_cfg one = rc;
        one.splits = 1;
        if (plan_for(ctx, &bd, &ri, &one, &plan) == DCPATTN_STATUS_SUCCESS) {
            out_poison(&o, 0x5a);
            ea.batch = 0;
            s = dcpattn_attn_run(plan, &ea, NULL, 0, (dcpattn_stream)st);
            CUDA_OK(cudaStreamSynchronize(st));
            out_fetch(&o);
            CHECK(s == DCPATTN_STATUS_SUCCESS && out_changed(&o, 0, 0x5a, 1) == 0,
                  "empty batch (no split, no workspace): %s", dcpattn_status_string(s));
            dcpattn_attn_plan_destroy(plan);
        } else {
            CHECK(0, "empty batch: plan: %s", dcpattn_last_error());
        }
    }
    CUDA_OK(cudaStreamDestroy(st));
    out_free(&o);
    out_free(&eager);
    rank_free(&ri);
    data_free(&bd);
}

/* The balanced schedule captured once (num_splits 0) and replayed with other lengths: each
   replay rewrites seqused_k and seqused_k_global in place (shorter global lengths, some with
   no key on this rank), runs eagerly with the same arguments, and compares bit for bit, then
   against the reference of those lengths. */
static void balanced_graph_test(void) {
    batch_data bd;
    rank_in ri;
    ref_res rr;
    out_buf o, eager;
    run_cfg rc;
    dcpattn_attn_plan *plan = NULL;
    dcpattn_attn_args a;
    cudaStream_t st;
    cudaGraphExec_t ge = NULL;
    int captured;
    int qlen[MAXB], b, rep;
    int64_t L[MAXB], L0[MAXB];
    void *ws;
    size_t wsz;
    char desc[1024];
    const int B = 20, W = 2, r = 1, I = 16;
    for (b = 0; b < B; b++) {
        qlen[b] = rnd(1, 8);
        L[b] = b == 3 ? 9000 : rnd(qlen[b] + 40, 700);
    }
    data_make(&bd, DCPATTN_BF16, 16, 2, 128, B, qlen, L, &seed);
    bd.max_q = 8;
    rank_build(&ri, &bd, 16, W, r, I, 0, 0, &seed);
    memcpy(L0, bd.L, sizeof L0);
    memset(&rc, 0, sizeof rc);
    rc.causal = 1;
    describe(desc, sizeof desc, "graph, balanced, changed lengths", &bd, &ri, &rc, 1);
    snprintf(g_case, sizeof g_case, "%s", desc);
    if (!plan_ok(plan_for(ctx, &bd, &ri, &rc, &plan), 8, desc)) {
        rank_free(&ri);
        data_free(&bd);
        return;
    }
    CHECK(dcpattn_attn_workers(plan) > 0, "graph, balanced: the default plan has no balanced schedule");
    ws = workspace_for(plan);
    wsz = dcpattn_attn_workspace_size(plan);
    out_alloc(&o, bd.total_q, bd.hq, bd.d, 0, 1);
    out_alloc(&eager, bd.total_q, bd.hq, bd.d, 0, 1);
    CUDA_OK(cudaStreamCreate(&st));
    rank_args(&a, &ri, &bd);
    out_args(&a, &o);
    ge = capture_run(plan, &a, ws, wsz, st, desc, &captured);
    for (rep = 0; rep < (quick ? 2 : 5) && captured; rep++) {
        ref_attn_inputs in;
        if (rep > 0) /* other global lengths, no longer than the cache holds */
            for (b = 0; b < B; b++) {
                const int64_t l = rep % 2 && b % 3 == 0 ? qlen[b] : rnd(qlen[b], (int)L0[b]);
                bd.L[b] = l;
                ri.sh.seqused_k_global[b] = (int32_t)l;
                ri.sh.seqused_k[b] = (int32_t)ref_local_len(l, W, r, I);
            }
        CUDA_OK(cudaMemcpy(ri.sk, ri.sh.seqused_k, sizeof(int32_t) * B, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(ri.skg, ri.sh.seqused_k_global, sizeof(int32_t) * B, cudaMemcpyHostToDevice));
        rank_ref_inputs(&in, &ri, &bd);
        ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);
        eager_then_replay(plan, &a, ws, wsz, st, ge, &o, &eager, &rr, desc, rep);
        ref_res_free(&rr);
    }
    if (ge) cudaGraphExecDestroy(ge);
    cudaStreamDestroy(st);
    dcpattn_attn_plan_destroy(plan);
    out_free(&o);
    out_free(&eager);
    rank_free(&ri);
    data_free(&bd);
}

int main(void) {
    check_line_buffered();
    static const dcase dcp[6] = {
        /* q_len, dtype, d, group, hkv, ps, causal, W, I, splits */
        {1, DCPATTN_BF16, 128, 8, 2, 16, 1, 4, 1, 0},
        {2, DCPATTN_FP16, 64, 16, 1, 1, 0, 2, 2, 16},
        {3, DCPATTN_BF16, 192, 6, 1, 64, 1, 8, 16, 0},
        {4, DCPATTN_BF16, 256, 4, 1, 16, 1, 4, 64, 16},
        {8, DCPATTN_FP16, 96, 1, 4, 64, 1, 8, 1, 0},
        {16, DCPATTN_BF16, 128, 4, 1, 1, 1, 2, 16, 16},
    };
    static const int quick_sweep[3] = {6, 13, 17};
    dcpattn_context_desc cd;
    int i;
    const char *env;
    double t0;
    acase c;
    if (!gpu_found("GPU tests")) return check_summary();
    env = getenv("DCPATTN_TEST_QUICK");
    quick = env && *env && strcmp(env, "0") != 0;
    env = getenv("DCPATTN_TEST_SEED");
    seed = env && *env ? (uint64_t)strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    printf("seed %llu (DCPATTN_TEST_SEED=%llu repeats this run)%s\n", (unsigned long long)seed,
           (unsigned long long)seed, quick ? ", quick subset" : "");
    t0 = now_s();
    gpu_use(0);
    CUDA_OK(cudaDeviceGetAttribute(&g_major, cudaDevAttrComputeCapabilityMajor, 0));
    memset(&cd, 0, sizeof cd);
    if (dcpattn_context_create(&cd, &ctx) != DCPATTN_STATUS_SUCCESS) {
        CHECK(0, "context: %s", dcpattn_last_error());
        return check_summary();
    }

    section("sweep (head dim x group)");
    for (i = 0; i < (quick ? 3 : 25); i++) {
        c = sweep_case(quick ? quick_sweep[i] : i);
        attn_case(&c);
    }
    section(NULL);
    section("varlen + 200-token chunk");
    for (i = 0; i < (quick ? 1 : 5); i++) {
        c = chunk_case(i);
        attn_case(&c);
    }
    section(NULL);
    section("long (L ~ 5000)");
    attn_case(&LONG_CASE);
    section(NULL);
    section("all zero local tokens");
    attn_case(&ZERO_LOCAL_CASE);
    section(NULL);
    section("skewed batches, balanced schedule");
    for (i = 0; i < (int)(sizeof SKEW_CASES / sizeof SKEW_CASES[0]); i++)
        if (!quick || i == 1) attn_case(&SKEW_CASES[i]);
    section(NULL);
    section("balanced schedule: graph replays with changed lengths");
    balanced_graph_test();
    section(NULL);
    section("one-GPU DCP + merge");
    for (i = 0; i < 6; i++)
        if (!quick || i == 3) dcp_case(&dcp[i]);
    section(NULL);
    section("FP8 (e4m3) cache");
    for (i = 0; i < (int)(sizeof FP8_CASES / sizeof FP8_CASES[0]); i++)  /* quick: the first of each kind */
        if (!quick || first_of_kind(FP8_CASES, i)) attn_case(&FP8_CASES[i]);
    section(NULL);
    section("FP8: graph replays, changed scales");
    fp8_graph_test();
    section(NULL);
    section("graph, faults, empty batch");
    graph_and_fault_tests(1);
    graph_and_fault_tests(0);
    section(NULL);

    /* the matrix really met what it is meant to meet */
    CHECK(seen_zero_local_seqs > 0, "no case had a sequence with zero local tokens");
    CHECK(gpu_seen_empty_rows > 0, "no case had a query row that sees no key on its rank");
    if (g_ws) cudaFree(g_ws);
    dcpattn_context_destroy(ctx);
    printf("%lld launches, %lld empty rows, %lld zero-local sequences; %.1f s (CPU reference %.1f s)\n", launches,
           gpu_seen_empty_rows, seen_zero_local_seqs, now_s() - t0, gpu_ref_seconds);
    return check_summary();
}
