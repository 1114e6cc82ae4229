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
     NULL, padded strides, a diagonal in fp16; each case runs num_splits 1, auto and 16 on
     the same inputs (16 is more splits than KV tiles).
   - chunk: one varlen batch of q_len 1..16 plus a 200-token chunk, per head dim.
   - long: L ~ 5000 with num_splits 1, auto and 64.
   - one-GPU DCP: for q_len 1, 2, 3, 4, 8, 16: W launches (every rank, own plan, own shard),
     dcpattn_merge of the W partials equals a W = 1 dcpattn run and ref_attn_dense.
   - a batch whose sequences all have zero local tokens; an empty batch (batch = 0).
   - CUDA graph capture of a split run, replayed 3 times on new data, equals eager.
   - faults: workspace NULL / too small, misaligned q, out aliasing q or the cache.

   DCPATTN_TEST_QUICK=1 runs one case per feature (for compute-sanitizer).
   Without a GPU it says so and runs nothing. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>
#include <time.h>

#include "check.h"
#include "ref.h"

/* A CUDA error (an illegal address in a kernel is sticky) ends the run: it names the case
   that was running and still prints the summary line. */
static char g_case[1280];
static void case_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  while running: %s\n", g_case);
    check_failed_++;
    check_summary();
    exit(1);
}
#define GPU_UTIL_FAIL case_fail
#include "gpu_util.h"

#define MAXB 8       /* sequences per batch */
#define Q_TAIL 8     /* NaN rows after q's last row: max_total_q - total_q may reach it */
#define CHUNK_Q 200  /* the chunked-prefill query */

static uint64_t seed;
static int quick;
static dcpattn_context *ctx;
static void *g_ws;        /* grow-only workspace, 256-byte aligned (cudaMalloc) */
static size_t g_ws_size;
static double ref_seconds;
static long long seen_empty_rows, seen_zero_local_seqs, launches;

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
static const char *dt_name(int t) { return t == DCPATTN_FP16 ? "fp16" : "bf16"; }
static uint16_t nan_bits(int t) { return t == DCPATTN_FP16 ? REF_FP16_NAN : REF_BF16_NAN; }
static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

/* ---------------- tolerances (DESIGN.md 8) ----------------
   out: the error against ref_attn in double may be at most twice the error of the same math
   done in the input precision (ref_attn with emulate_lowp = 1: probabilities and out rounded
   to bf16/fp16) plus a floor. The floor covers what the emulation does not model: fp32
   instead of double accumulation, probabilities rounded against a running maximum rather
   than the final one, split partials. fp16 keeps 3 more mantissa bits than bf16, so its
   floors are 8x smaller. NaN never passes (ref_err_within counts it as bad). */
static double abs_floor(int t) { return t == DCPATTN_FP16 ? 2.5e-4 : 2e-3; }
static double rel_floor(int t) { return t == DCPATTN_FP16 ? 2.5e-4 : 2e-3; }
/* lse is fp32 and compared in fp32. The kernel's scores are exact-product fp32 dot products
   (error ~1e-6) but the row sum may be taken over probabilities already rounded to the input
   type (the P that feeds P.V), which moves the sum by up to one half-ulp of that type in
   relative terms (bf16 2^-9 ~ 2e-3, fp16 2^-12 ~ 2.4e-4) and lse by as much in absolute
   value; merges add fp32 exp/log rounding. 1e-2 (bf16) and 2e-3 (fp16) leave a margin of
   about 5x; base-2 lse is larger by 1/ln 2 and so is its tolerance. An empty row must be
   -inf exactly (ref_compare3 counts anything else as bad). */
static double lse_tol(int t, int base2) {
    double v = t == DCPATTN_FP16 ? 2e-3 : 1e-2;
    return base2 ? v / REF_LN2 : v;
}

/* ---------------- one batch of global sequences (host) ---------------- */
typedef struct batch_data {
    int dtype, batch, hq, hkv, d, total_q;
    int max_q; /* the plan's max_q_len: >= every q_len (the case's bound, so the variant,
                  which depends on it, is the same in every run) */
    int qlen[MAXB];
    int64_t L[MAXB];
    int32_t cu[MAXB + 1];
    uint16_t *k[MAXB], *v[MAXB]; /* global [L, hkv, d] */
    uint16_t *q;                 /* [total_q, hq, d] contiguous */
} batch_data;

/* New random values (same shapes). Logit std = amp^2/3 independent of d (scale 1/sqrt(d)):
   amp 2 gives ~1.3, attention neither uniform nor one-hot. */
static void data_fill(batch_data *bd) {
    int b;
    for (b = 0; b < bd->batch; b++) {
        int64_t n = bd->L[b] * bd->hkv * bd->d;
        ref_fill_uniform(bd->k[b], n, bd->dtype, 2.0, &seed);
        ref_fill_uniform(bd->v[b], n, bd->dtype, 1.0, &seed);
    }
    ref_fill_uniform(bd->q, (int64_t)bd->total_q * bd->hq * bd->d, bd->dtype, 2.0, &seed);
}

static void data_make(batch_data *bd, int dtype, int hq, int hkv, int d, int batch, const int *qlen,
                      const int64_t *L) {
    int b;
    memset(bd, 0, sizeof *bd);
    bd->dtype = dtype;
    bd->batch = batch;
    bd->hq = hq;
    bd->hkv = hkv;
    bd->d = d;
    bd->cu[0] = 0;
    bd->max_q = 1;
    for (b = 0; b < batch; b++) {
        bd->qlen[b] = qlen[b];
        bd->L[b] = L[b];
        bd->cu[b + 1] = bd->cu[b] + qlen[b];
        if (qlen[b] > bd->max_q) bd->max_q = qlen[b];
        bd->k[b] = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)(L[b] * hkv * d));
        bd->v[b] = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)(L[b] * hkv * d));
    }
    bd->total_q = bd->cu[batch];
    bd->q = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)bd->total_q * hq * d);
    data_fill(bd);
}

static void data_free(batch_data *bd) {
    int b;
    for (b = 0; b < bd->batch; b++) {
        free(bd->k[b]);
        free(bd->v[b]);
    }
    free(bd->q);
    memset(bd, 0, sizeof *bd);
}

/* ---------------- one rank's inputs: host shard and device copies ---------------- */
typedef struct rank_in {
    int W, r, I, ps, pad;
    ref_shard sh;
    uint16_t *hq; /* host q with the strides below; padding NaN */
    int64_t q_st, q_sh, q_elems;
    void *q, *k, *v;
    int32_t *bt, *cu, *sk, *skg;
    int max_local, zero_local;
} rank_in;

/* Host q with padded strides: pad extra elements per head and per token, all NaN, and
   Q_TAIL NaN rows at the end. (The host validation sizes q by max_total_q rows when it checks
   out/lse for overlap, so q is allocated for as many rows as the plan's bound.) */
static void rank_make_q(rank_in *ri, const batch_data *bd) {
    int64_t t, h;
    ri->q_sh = bd->d + ri->pad;
    ri->q_st = bd->hq * ri->q_sh + ri->pad;
    ri->q_elems = ((int64_t)bd->total_q + Q_TAIL) * ri->q_st;
    if (!ri->hq) ri->hq = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)(ri->q_elems ? ri->q_elems : 1));
    ref_fill_bits(ri->hq, ri->q_elems, nan_bits(bd->dtype));
    for (t = 0; t < bd->total_q; t++)
        for (h = 0; h < bd->hq; h++)
            memcpy(ri->hq + t * ri->q_st + h * ri->q_sh, bd->q + (t * bd->hq + h) * bd->d,
                   sizeof(uint16_t) * (size_t)bd->d);
}

/* Shards the batch for (W, r, I) with NaN in every unused slot and page, points unused
   block-table entries at an unused (NaN) page, and uploads. With `reuse` the device
   buffers of a previous call with the same shapes are refilled (graph replays). */
static void rank_build(rank_in *ri, const batch_data *bd, int ps, int W, int r, int I, int pad, int reuse) {
    ref_shard_params sp;
    int b, u;
    int64_t i, kelems, velems;
    unsigned char *used;
    if (reuse) {
        ref_shard_free(&ri->sh);
    } else {
        memset(ri, 0, sizeof *ri);
    }
    ri->W = W;
    ri->r = r;
    ri->I = I;
    ri->ps = ps;
    ri->pad = pad;
    memset(&sp, 0, sizeof sp);
    sp.hkv = bd->hkv;
    sp.dqk = bd->d;
    sp.page_size = ps;
    sp.world = W;
    sp.rank = r;
    sp.interleave = I;
    sp.dtype = bd->dtype;
    sp.fill = nan_bits(bd->dtype);
    sp.extra_pages = 2;
    sp.bt_extra_cols = 1;
    sp.bt_fill = 0;
    sp.seed = ref_rand_u64(&seed);
    if (ref_shard_build(&ri->sh, &sp, bd->batch, bd->L, (const uint16_t *const *)bd->k,
                        (const uint16_t *const *)bd->v)) {
        fprintf(stderr, "ref_shard_build: %s\n", ref_error());
        exit(1);
    }
    /* unused block-table entries -> the first page no sequence uses (exists: extra_pages) */
    used = (unsigned char *)calloc((size_t)ri->sh.num_pages, 1);
    if (!used) exit(1);
    for (b = 0; b < bd->batch; b++) {
        int64_t np = ((int64_t)ri->sh.seqused_k[b] + ps - 1) / ps;
        for (i = 0; i < np; i++) used[ri->sh.block_table[b * ri->sh.block_table_stride + i]] = 1;
    }
    for (u = 0; u < ri->sh.num_pages && used[u]; u++) {
    }
    for (b = 0; b < bd->batch; b++) {
        int64_t np = ((int64_t)ri->sh.seqused_k[b] + ps - 1) / ps;
        for (i = np; i < ri->sh.block_table_stride; i++) ri->sh.block_table[b * ri->sh.block_table_stride + i] = u;
    }
    free(used);
    ri->max_local = 0;
    ri->zero_local = 0;
    for (b = 0; b < bd->batch; b++) {
        if (ri->sh.seqused_k[b] > ri->max_local) ri->max_local = ri->sh.seqused_k[b];
        if (ri->sh.seqused_k[b] == 0) ri->zero_local++;
    }
    rank_make_q(ri, bd);
    kelems = ri->sh.num_pages * ri->sh.k_stride_page;
    velems = ri->sh.num_pages * ri->sh.v_stride_page;
    if (!reuse) {
        CUDA_OK(cudaMalloc(&ri->q, sizeof(uint16_t) * (size_t)(ri->q_elems ? ri->q_elems : 8)));
        CUDA_OK(cudaMalloc(&ri->k, sizeof(uint16_t) * (size_t)kelems));
        CUDA_OK(cudaMalloc(&ri->v, sizeof(uint16_t) * (size_t)velems));
        CUDA_OK(cudaMalloc((void **)&ri->bt, sizeof(int32_t) * (size_t)(bd->batch ? bd->batch : 1) *
                                                 (size_t)ri->sh.block_table_stride));
        CUDA_OK(cudaMalloc((void **)&ri->cu, sizeof(int32_t) * (MAXB + 1)));
        CUDA_OK(cudaMalloc((void **)&ri->sk, sizeof(int32_t) * MAXB));
        CUDA_OK(cudaMalloc((void **)&ri->skg, sizeof(int32_t) * MAXB));
    }
    CUDA_OK(cudaMemcpy(ri->q, ri->hq, sizeof(uint16_t) * (size_t)ri->q_elems, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ri->k, ri->sh.k_cache, sizeof(uint16_t) * (size_t)kelems, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ri->v, ri->sh.v_cache, sizeof(uint16_t) * (size_t)velems, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ri->bt, ri->sh.block_table, sizeof(int32_t) * (size_t)bd->batch * (size_t)ri->sh.block_table_stride,
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ri->cu, bd->cu, sizeof(int32_t) * (size_t)(bd->batch + 1), cudaMemcpyHostToDevice));
    if (bd->batch) {
        CUDA_OK(cudaMemcpy(ri->sk, ri->sh.seqused_k, sizeof(int32_t) * (size_t)bd->batch, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(ri->skg, ri->sh.seqused_k_global, sizeof(int32_t) * (size_t)bd->batch,
                           cudaMemcpyHostToDevice));
    }
}

static void rank_free(rank_in *ri) {
    cudaFree(ri->q);
    cudaFree(ri->k);
    cudaFree(ri->v);
    cudaFree(ri->bt);
    cudaFree(ri->cu);
    cudaFree(ri->sk);
    cudaFree(ri->skg);
    free(ri->hq);
    ref_shard_free(&ri->sh);
    memset(ri, 0, sizeof *ri);
}

static void rank_args(dcpattn_attn_args *a, const rank_in *ri, const batch_data *bd) {
    memset(a, 0, sizeof *a);
    a->batch = bd->batch;
    a->q = ri->q;
    a->q_stride_t = ri->q_st;
    a->q_stride_h = ri->q_sh;
    a->k_cache = ri->k;
    a->k_stride_page = ri->sh.k_stride_page;
    a->k_stride_t = ri->sh.k_stride_t;
    a->k_stride_h = ri->sh.k_stride_h;
    a->v_cache = ri->v;
    a->v_stride_page = ri->sh.v_stride_page;
    a->v_stride_t = ri->sh.v_stride_t;
    a->v_stride_h = ri->sh.v_stride_h;
    a->num_pages = ri->sh.num_pages;
    a->block_table = ri->bt;
    a->block_table_stride = ri->sh.block_table_stride;
    a->cu_seqlens_q = ri->cu;
    a->seqused_k = ri->sk;
    a->seqused_k_global = ri->skg;
}

static void rank_ref_inputs(ref_attn_inputs *in, const rank_in *ri, const batch_data *bd) {
    memset(in, 0, sizeof *in);
    in->batch = bd->batch;
    in->q = ri->hq;
    in->q_stride_t = ri->q_st;
    in->q_stride_h = ri->q_sh;
    ref_shard_inputs(&ri->sh, in);
    in->cu_seqlens_q = bd->cu;
}

/* ---------------- outputs (device, poisoned) and their host copies ---------------- */
typedef struct out_buf {
    int rows, hq, dv, has_lse;       /* rows allocated (>= total_q) */
    int64_t st, sh, lst, lsh;        /* element strides of out and lse */
    int64_t out_elems, lse_elems;
    void *d_out;
    float *d_lse;
    uint16_t *h_out;
    float *h_lse;
} out_buf;

static void out_alloc(out_buf *o, int rows, int hq, int dv, int pad, int has_lse) {
    memset(o, 0, sizeof *o);
    o->rows = rows > 0 ? rows : 1;
    o->hq = hq;
    o->dv = dv;
    o->has_lse = has_lse;
    o->sh = dv + pad;
    o->st = hq * o->sh + pad;
    o->lsh = pad ? 2 : 1;
    o->lst = hq * o->lsh + (pad ? 3 : 0);
    o->out_elems = o->rows * o->st;
    o->lse_elems = o->rows * o->lst;
    CUDA_OK(cudaMalloc(&o->d_out, sizeof(uint16_t) * (size_t)o->out_elems));
    o->h_out = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)o->out_elems);
    if (has_lse) {
        CUDA_OK(cudaMalloc((void **)&o->d_lse, sizeof(float) * (size_t)o->lse_elems));
        o->h_lse = (float *)xmalloc(sizeof(float) * (size_t)o->lse_elems);
    }
}
static void out_free(out_buf *o) {
    cudaFree(o->d_out);
    if (o->d_lse) cudaFree(o->d_lse);
    free(o->h_out);
    free(o->h_lse);
    memset(o, 0, sizeof *o);
}
static void out_poison(out_buf *o, int byte) {
    CUDA_OK(cudaMemset(o->d_out, byte, sizeof(uint16_t) * (size_t)o->out_elems));
    if (o->d_lse) CUDA_OK(cudaMemset(o->d_lse, byte, sizeof(float) * (size_t)o->lse_elems));
}
static void out_fetch(out_buf *o) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(o->h_out, o->d_out, sizeof(uint16_t) * (size_t)o->out_elems, cudaMemcpyDeviceToHost));
    if (o->d_lse)
        CUDA_OK(cudaMemcpy(o->h_lse, o->d_lse, sizeof(float) * (size_t)o->lse_elems, cudaMemcpyDeviceToHost));
}
static void out_args(dcpattn_attn_args *a, const out_buf *o) {
    a->out = o->d_out;
    a->out_stride_t = o->st;
    a->out_stride_h = o->sh;
    a->lse = o->has_lse ? o->d_lse : NULL;
    a->lse_stride_t = o->lst;
    a->lse_stride_h = o->lsh;
}
/* Bytes of the host copies that differ from `byte`, outside the first `total_q` rows of the
   tensors (all = 1: everywhere). */
static int64_t out_changed(const out_buf *o, int total_q, int byte, int all) {
    int64_t e, n = 0;
    const uint16_t pat16 = (uint16_t)(byte & 0xff) * 0x0101u;
    uint32_t pat32 = (uint32_t)pat16 * 0x00010001u;
    for (e = 0; e < o->out_elems; e++) {
        int64_t t = e / o->st, rem = e % o->st, h = rem / o->sh, d = rem % o->sh;
        int inside = !all && t < total_q && h < o->hq && d < o->dv;
        if (!inside && o->h_out[e] != pat16) n++;
    }
    if (o->has_lse)
        for (e = 0; e < o->lse_elems; e++) {
            int64_t t = e / o->lst, rem = e % o->lst;
            int inside = !all && t < total_q && rem % o->lsh == 0 && rem / o->lsh < o->hq;
            uint32_t bits;
            memcpy(&bits, &o->h_lse[e], 4);
            if (!inside && bits != pat32) n++;
        }
    return n;
}

/* ---------------- reference results ---------------- */
typedef struct ref_res {
    double *out, *lse; /* exact (double), [total_q, hq, dv] and [total_q, hq] */
    ref_err base;      /* error of the same math in the input precision */
    int total_q, hq, dv, dtype, base2;
} ref_res;

static void ref_res_alloc(ref_res *rr, int total_q, int hq, int dv, int dtype, int base2) {
    memset(rr, 0, sizeof *rr);
    rr->total_q = total_q;
    rr->hq = hq;
    rr->dv = dv;
    rr->dtype = dtype;
    rr->base2 = base2;
    rr->out = (double *)xmalloc(sizeof(double) * (size_t)total_q * hq * dv);
    rr->lse = (double *)xmalloc(sizeof(double) * (size_t)total_q * hq);
}
static void ref_res_free(ref_res *rr) {
    free(rr->out);
    free(rr->lse);
    memset(rr, 0, sizeof *rr);
}

/* ref_attn exact and with emulate_lowp; the latter's error is the baseline. */
static void ref_sharded(ref_res *rr, ref_attn_params p, const ref_attn_inputs *in, int total_q) {
    double t0 = now_s(), *emu;
    ref_res_alloc(rr, total_q, p.hq, p.dqk, p.dtype, p.lse_base2);
    emu = (double *)xmalloc(sizeof(double) * (size_t)total_q * p.hq * p.dqk);
    p.emulate_lowp = 0;
    if (ref_attn(&p, in, rr->out, rr->lse)) {
        fprintf(stderr, "ref_attn: %s\n", ref_error());
        exit(1);
    }
    p.emulate_lowp = 1;
    if (ref_attn(&p, in, emu, NULL)) {
        fprintf(stderr, "ref_attn: %s\n", ref_error());
        exit(1);
    }
    rr->base = ref_compare(rr->out, emu, REF_F64, (int64_t)total_q * p.hq * p.dqk);
    free(emu);
    ref_seconds += now_s() - t0;
}

/* ref_attn_dense per sequence (unsharded, contiguous), exact and emulated. */
static void ref_dense(ref_res *rr, ref_attn_params p, const batch_data *bd) {
    double t0 = now_s(), *emu;
    int b, pass;
    const int64_t row = (int64_t)bd->hq * bd->d;
    ref_res_alloc(rr, bd->total_q, bd->hq, bd->d, bd->dtype, p.lse_base2);
    emu = (double *)xmalloc(sizeof(double) * (size_t)bd->total_q * (size_t)row);
    for (pass = 0; pass < 2; pass++) {
        p.emulate_lowp = pass;
        for (b = 0; b < bd->batch; b++)
            if (ref_attn_dense(&p, bd->qlen[b], bd->L[b], bd->q + bd->cu[b] * row, bd->k[b], bd->v[b],
                               (pass ? emu : rr->out) + bd->cu[b] * row, pass ? NULL : rr->lse + bd->cu[b] * bd->hq)) {
                fprintf(stderr, "ref_attn_dense: %s\n", ref_error());
                exit(1);
            }
    }
    rr->base = ref_compare(rr->out, emu, REF_F64, (int64_t)bd->total_q * row);
    free(emu);
    ref_seconds += now_s() - t0;
}

/* Verdict of one launch against a reference: out within tolerance (floor x floor_mult),
   lse within tolerance, rows the reference calls empty exactly 0 and -inf, nothing written
   outside the tensors. Fills msg with what failed; returns 1 when all is well. */
static int verdict(const ref_res *rr, const out_buf *o, double floor_mult, char *msg, size_t n) {
    ref_err eo, el;
    char so[256], sl[256];
    int64_t t, h, d, empty = 0, nonzero = 0, changed;
    int ok_o, ok_l = 1;
    size_t len = 0;
    msg[0] = 0;
    eo = ref_compare3(rr->out, o->h_out, rr->dtype, rr->total_q, rr->hq, rr->dv, o->st, o->sh);
    ok_o = ref_err_within(&eo, &rr->base, floor_mult * abs_floor(rr->dtype), floor_mult * rel_floor(rr->dtype));
    snprintf(so, sizeof so, "%s", ref_err_str(&eo));
    if (o->has_lse) {
        double tol = lse_tol(rr->dtype, rr->base2);
        el = ref_compare3(rr->lse, o->h_lse, REF_FP32, rr->total_q, rr->hq, 1, o->lst, o->lsh);
        ok_l = ref_err_ok(&el, tol, tol);
        snprintf(sl, sizeof sl, "%s", ref_err_str(&el));
    }
    for (t = 0; t < rr->total_q; t++)
        for (h = 0; h < rr->hq; h++) {
            if (!(rr->lse[t * rr->hq + h] == -INFINITY)) continue;
            empty++;
            for (d = 0; d < rr->dv; d++)
                if (ref_load(o->h_out, rr->dtype, t * o->st + h * o->sh + d) != 0.0) nonzero++;
        }
    seen_empty_rows += empty;
    changed = out_changed(o, rr->total_q, 0xff, 0);
    if (!ok_o)
        len += (size_t)snprintf(msg + len, n - len, "out %s (allowed 2x %.3g/%.3g + %.3g/%.3g); ", so,
                                rr->base.max_abs, rr->base.rel_fro, floor_mult * abs_floor(rr->dtype),
                                floor_mult * rel_floor(rr->dtype));
    if (!ok_l && len < n) len += (size_t)snprintf(msg + len, n - len, "lse %s (tol %.3g); ", sl, lse_tol(rr->dtype, rr->base2));
    if (nonzero && len < n)
        len += (size_t)snprintf(msg + len, n - len, "%lld values of %lld empty rows not exactly 0; ",
                                (long long)nonzero, (long long)empty);
    if (changed && len < n)
        len += (size_t)snprintf(msg + len, n - len, "%lld elements outside out/lse written; ", (long long)changed);
    return ok_o && ok_l && !nonzero && !changed;
}

/* ---------------- plans and launches ---------------- */
typedef struct run_cfg {
    int causal, lse_base2, splits, extra_rows, no_global;
    float scale; /* 0: default */
} run_cfg;

static dcpattn_status plan_for(const batch_data *bd, const rank_in *ri, const run_cfg *rc, dcpattn_attn_plan **plan) {
    dcpattn_attn_desc ad;
    memset(&ad, 0, sizeof ad);
    ad.dtype = (dcpattn_dtype)bd->dtype;
    ad.num_q_heads = bd->hq;
    ad.num_kv_heads = bd->hkv;
    ad.head_dim = bd->d;
    ad.page_size = ri->ps;
    ad.non_causal = !rc->causal;
    ad.softmax_scale = rc->scale;
    ad.dcp_world = ri->W;
    ad.dcp_rank = ri->r;
    ad.dcp_interleave = ri->I;
    ad.lse_base2 = rc->lse_base2;
    ad.max_batch = bd->batch > 0 ? bd->batch : 1;
    ad.max_q_len = bd->max_q;
    ad.max_total_q = bd->total_q + rc->extra_rows > 0 ? bd->total_q + rc->extra_rows : 1;
    ad.max_seqlen_k = ri->max_local;
    ad.num_splits = rc->splits;
    return dcpattn_attn_plan_create(ctx, &ad, plan);
}

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
   (FAULTS.md allows that; it is reported, never silent). Returns 1 when a plan exists. */
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
                           "%s %s d%d g%d hkv%d ps%d %s W%d r%d I%d splits %d->%d lse %s pad %d extra_rows %d%s%s "
                           "max_q_len %d B%d q_len/L/local",
                           what, dt_name(bd->dtype), bd->d, bd->hq / bd->hkv, bd->hkv, ri->ps,
                           rc->causal ? "causal" : "non-causal", ri->W, ri->r, ri->I, rc->splits, splits_used,
                           rc->lse_base2 == 2 ? "NULL" : rc->lse_base2 ? "base2" : "natural", ri->pad, rc->extra_rows,
                           rc->scale != 0 ? " scale 0.3" : "", rc->no_global ? " seqused_k_global NULL" : "", bd->max_q,
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
    if (!plan_ok(plan_for(bd, ri, &pc, &plan), bd->hq / bd->hkv, desc)) return -1;
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

static ref_attn_params ref_params(const batch_data *bd, const rank_in *ri, const run_cfg *rc) {
    ref_attn_params p;
    memset(&p, 0, sizeof p);
    p.hq = bd->hq;
    p.hkv = bd->hkv;
    p.dqk = bd->d;
    p.page_size = ri->ps;
    p.causal = rc->causal;
    p.scale = rc->scale != 0 ? (double)rc->scale : 1.0 / sqrt((double)bd->d);
    p.world = ri->W;
    p.rank = ri->r;
    p.interleave = ri->I;
    p.lse_base2 = rc->lse_base2 == 1;
    p.dtype = bd->dtype;
    return p;
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
    int lse_mode;        /* 0 natural, 1 base 2, 2 NULL */
    int pad, extra_rows, no_global;
    float scale;
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
        } else {
            l = rnd(c->L_min > q ? c->L_min : q, c->L_max > q ? c->L_max : q);
        }
        qlen[b] = q;
        L[b] = l;
    }
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
    data_make(&bd, c->dtype, c->group * c->hkv, c->hkv, c->d, c->batch, qlen, L);
    if (bd.max_q < (c->chunk ? CHUNK_Q : c->qlen_max)) bd.max_q = c->chunk ? CHUNK_Q : c->qlen_max;
    rank_build(&ri, &bd, c->ps, c->W, r, c->I, c->pad, 0);
    seen_zero_local_seqs += ri.zero_local;
    memset(&rc, 0, sizeof rc);
    rc.causal = c->causal;
    rc.lse_base2 = c->lse_mode;
    rc.extra_rows = c->extra_rows;
    rc.no_global = c->no_global && c->W == 1;
    rc.scale = c->scale;
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
        .splits = {1, 0, 16},
        .n_splits = 3,
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
        .splits = {1, 0, 16},
        .n_splits = 3,
        .lse_mode = i % 3,
        .pad = i == 3 ? 16 : 0,
    };
    return c;
}

/* L ~ 5000, decode and MTP rows, splits 1, auto and 64 (fewer than the 79 KV tiles). */
static const acase LONG_CASE = {
    .what = "long", .dtype = DCPATTN_BF16, .d = 128, .group = 8, .hkv = 1, .ps = 64, .causal = 1,
    .W = 1, .I = 1, .rank = 0, .batch = 2, .qlen_max = 4, .L_min = 4500, .L_max = 5500,
    .splits = {1, 0, 64}, .n_splits = 3,
};

/* Every sequence has zero tokens on rank 3 of W = 4, I = 16 (L <= 48): zeros and -inf. */
static const acase ZERO_LOCAL_CASE = {
    .what = "all-zero-local", .dtype = DCPATTN_BF16, .d = 128, .group = 4, .hkv = 2, .ps = 16, .causal = 1,
    .W = 4, .I = 16, .rank = 3, .batch = 3, .qlen_max = 4, .L_min = 1, .L_max = 48,
    .splits = {1, 16}, .n_splits = 2,
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
    data_make(&bd, c->dtype, c->group * c->hkv, c->hkv, c->d, batch, qlen, L);
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
    rank_build(&ri, &bd, c->ps, 1, 0, 1, 0, 0);
    rc.splits = 1;
    have_w1 = run_and_check("dcp W=1", &bd, &ri, &rc, &dense, 1.0, &w1) >= 0;
    if (!have_w1) all = 0;
    rank_free(&ri);
    /* the W ranks */
    rc.splits = c->splits;
    for (r = 0; r < c->W; r++) {
        ref_attn_inputs in;
        rank_build(&ri, &bd, c->ps, c->W, r, c->I, 0, 0);
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
            CHECK(ref_err_ok(&e, 2 * lse_tol(c->dtype, 0), 2 * lse_tol(c->dtype, 0)),
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

/* ---------------- graph capture, empty batch, faults ---------------- */
static void graph_and_fault_tests(void) {
    batch_data bd;
    rank_in ri;
    ref_res rr;
    out_buf o, eager;
    run_cfg rc;
    dcpattn_attn_plan *plan = NULL;
    dcpattn_attn_args a;
    cudaStream_t st;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    int qlen[MAXB], b, rep, ok;
    int64_t L[MAXB];
    void *ws;
    size_t wsz;
    dcpattn_status s;
    char desc[1024], msg[1024];
    for (b = 0; b < 4; b++) {
        qlen[b] = rnd(1, 4);
        L[b] = rnd(qlen[b], 600);
    }
    qlen[0] = 1; /* one token globally: nothing on rank 1 */
    L[0] = 1;
    data_make(&bd, DCPATTN_BF16, 8, 1, 128, 4, qlen, L);
    bd.max_q = 4;
    rank_build(&ri, &bd, 16, 2, 1, 1, 0, 0);
    memset(&rc, 0, sizeof rc);
    rc.causal = 1;
    rc.splits = 4; /* > 1: the split merge launch is captured too */
    describe(desc, sizeof desc, "graph", &bd, &ri, &rc, 4);
    snprintf(g_case, sizeof g_case, "%s", desc);
    if (!plan_ok(plan_for(&bd, &ri, &rc, &plan), 8, desc)) {
        rank_free(&ri);
        data_free(&bd);
        return;
    }
    CHECK(dcpattn_attn_num_splits(plan) == 4, "graph: plan has %d splits, asked for 4", dcpattn_attn_num_splits(plan));
    ws = workspace_for(plan);
    wsz = dcpattn_attn_workspace_size(plan);
    CHECK(wsz > 0 && ws, "graph: a split plan needs a workspace (%zu bytes)", wsz);
    out_alloc(&o, bd.total_q, bd.hq, bd.d, 0, 1);
    out_alloc(&eager, bd.total_q, bd.hq, bd.d, 0, 1);
    CUDA_OK(cudaStreamCreate(&st));
    rank_args(&a, &ri, &bd);
    out_args(&a, &o);

    /* capture */
    out_poison(&o, 0xff);
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    s = dcpattn_attn_run(plan, &a, ws, wsz, (dcpattn_stream)st);
    CHECK(s == DCPATTN_STATUS_SUCCESS, "graph: run during capture: %s: %s", dcpattn_status_string(s),
          dcpattn_last_error());
    CUDA_OK(cudaStreamEndCapture(st, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (rep = 0; rep < 3 && s == DCPATTN_STATUS_SUCCESS; rep++) {
        ref_attn_inputs in;
        dcpattn_attn_args ea = a;
        int same_out, same_lse;
        if (rep > 0) { /* new q and cache values (and a new page order) in the same buffers */
            data_fill(&bd);
            rank_build(&ri, &bd, 16, 2, 1, 1, 0, 1);
        }
        rank_ref_inputs(&in, &ri, &bd);
        ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);
        /* eager */
        out_args(&ea, &eager);
        out_poison(&eager, 0xff);
        s = dcpattn_attn_run(plan, &ea, ws, wsz, (dcpattn_stream)st);
        CHECK(s == DCPATTN_STATUS_SUCCESS, "graph: eager run: %s", dcpattn_last_error());
        CUDA_OK(cudaStreamSynchronize(st));
        out_fetch(&eager);
        ok = verdict(&rr, &eager, 1.0, msg, sizeof msg);
        CHECK(ok, "%s replay %d: eager: %s", desc, rep, msg);
        /* replay */
        out_poison(&o, 0xff);
        CUDA_OK(cudaGraphLaunch(ge, st));
        CUDA_OK(cudaStreamSynchronize(st));
        out_fetch(&o);
        launches += 2;
        same_out = memcmp(o.h_out, eager.h_out, sizeof(uint16_t) * (size_t)o.out_elems) == 0;
        same_lse = memcmp(o.h_lse, eager.h_lse, sizeof(float) * (size_t)o.lse_elems) == 0;
        CHECK(same_out && same_lse, "%s replay %d: graph differs from eager (out %s, lse %s)", desc, rep,
              same_out ? "same" : "differs", same_lse ? "same" : "differs");
        ok = verdict(&rr, &o, 1.0, msg, sizeof msg);
        CHECK(ok, "%s replay %d: graph: %s", desc, rep, msg);
        ref_res_free(&rr);
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);

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
        if (plan_for(&bd, &ri, &one, &plan) == DCPATTN_STATUS_SUCCESS) {
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

int main(void) {
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
    section("one-GPU DCP + merge");
    for (i = 0; i < 6; i++)
        if (!quick || i == 3) dcp_case(&dcp[i]);
    section(NULL);
    section("graph, faults, empty batch");
    graph_and_fault_tests();
    section(NULL);

    /* the matrix really met what it is meant to meet */
    CHECK(seen_zero_local_seqs > 0, "no case had a sequence with zero local tokens");
    CHECK(seen_empty_rows > 0, "no case had a query row that sees no key on its rank");
    if (g_ws) cudaFree(g_ws);
    dcpattn_context_destroy(ctx);
    printf("%lld launches, %lld empty rows, %lld zero-local sequences; %.1f s (CPU reference %.1f s)\n", launches,
           seen_empty_rows, seen_zero_local_seqs, now_s() - t0, ref_seconds);
    return check_summary();
}
