/* test_gpu_mla — the MLA decode kernel (Dqk 576, Dv 512, one latent KV head, V = the first
   512 channels of each K row) through the public API, against the CPU reference on fresh
   random inputs: outputs poisoned (NaN) before every launch, unused cache slots and padding
   NaN, DCP masks for W in {1, 2, 8} and I in {1, 64}, pages of 16/32/64/128/192, varlen
   q_len 1..4, Hq 16..128, one split and several, shards that hold nothing for some or all
   rows, and a padded token stride; and the balanced schedule (DCPATTN_SPLITS_BALANCED, num_sms
   set for 2..7 workers per row tile, so that sequences are cut between CTAs and merged in the
   launch), each also replayed twice from a CUDA graph into poisoned outputs
   and compared bit for bit with the direct run (a replay reuses its run's token). The narrow
   tiles (Hq x q_len <= 16 and <= 32, Hq 1 to 32) under the same masks, splits, schedules and
   caches.
   An FP8 (e4m3) cache: rows of 576 bytes, key channel c = byte * k_scale, value channel c
   (c < 512) = the same byte * v_scale, both scales random per run and read from device floats;
   the bytes uniform over the 254 finite codes (subnormals and +-448 both occur), 0x7f in every
   unused slot and 0xff in the row padding; W in {1, 3, 8} x I in {1, 16, page size}, q_len up
   to 16, Hq 16, 20 and 128, bf16 and fp16 queries, bf16 queries times 2^20 and 2^-40; every
   FP8 case with several splits or the balanced schedule is replayed from a graph after new
   scale values were written into the same device floats, against the reference with the new
   scales and bit for bit against a direct run with them. The tolerance is the same for both
   caches: twice the error of the same math in the query's precision (the reference with
   emulate_lowp, which rounds a dequantized FP8 value to that precision too) plus a floor.
   Every case runs twice on fresh inputs, once with DCPATTN_TEST_QUICK=1 (for
   compute-sanitizer). Without a GPU it says so and runs nothing. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>
#include <time.h>

#include "check.h"
#include "ref.h"
#include "gpu_util.h"

enum { DQK = 576, DV = 512, MAXB = 8 };

static uint64_t seed;

typedef struct mla_case {
    int dtype, hq, page_size, world, rank, interleave, causal, splits, lse_base2;
    int batch;
    int q_len[MAXB];   /* per sequence */
    int64_t L[MAXB];   /* global lengths */
    int pad_t;         /* extra elements per token row (0: contiguous rows of 576; FP8: bytes, a
                          multiple of 16) */
    int ramp;          /* 1: K row j scaled by 1 + j / 32, so later tiles keep topping the row
                          maxima (every warpgroup raises them and hands the raise over) */
    int workers;       /* > 0: the balanced schedule with this many workers per row tile */
    int fp8;           /* 1: an e4m3 cache with per-tensor scales */
    int q_exp;         /* q times 2^q_exp and the softmax scale times 2^-q_exp (bf16 queries
                          outside fp16's range; 0: the default scale) */
} mla_case;

/* The exact reference (r_o, r_l) and the same math in the query's precision (b_o, the
   tolerance baseline). */
static void references(ref_attn_params rp, const ref_attn_inputs *in, double *r_o, double *r_l, double *b_o,
                       const char *what) {
    rp.emulate_lowp = 0;
    CHECK(ref_attn(&rp, in, r_o, r_l) == 0, "%s: ref: %s", what, ref_error());
    rp.emulate_lowp = 1;
    CHECK(ref_attn(&rp, in, b_o, NULL) == 0, "%s: ref lowp: %s", what, ref_error());
}

/* A launch's host copies against the references: out within twice the baseline's error plus
   a floor, lse within 2e-3 (1e-4 relative), for every tile and cache (an e4m3 cache's tiles are
   converted to fp16, whose MMAs accumulate in fp32); the errors in *eo and *el. */
static void check_result(const char *what, const char *run, int dt, int64_t n_out, int64_t n_lse, const double *r_o,
                         const double *r_l, const double *b_o, const uint16_t *h_out, const float *h_lse, ref_err *eo,
                         ref_err *el) {
    const ref_err bo = ref_compare(r_o, b_o, REF_F64, n_out);
    *eo = ref_compare(r_o, h_out, dt, n_out);
    *el = ref_compare(r_l, h_lse, REF_FP32, n_lse);
    CHECK(ref_err_within(eo, &bo, 2e-3, 2e-3), "%s: %s: out %s (baseline %.3g / %.3g)", what, run, ref_err_str(eo),
          bo.max_abs, bo.rel_fro);
    CHECK(ref_err_ok(el, 2e-3, 1e-4), "%s: %s: lse %s", what, run, ref_err_str(el));
}

/* Every byte of out and lse 0xff (NaN), in the order of `st`. */
static void poison_on(cudaStream_t st, void *d_out, float *d_lse, int64_t n_out, int64_t n_lse) {
    CUDA_OK(cudaMemsetAsync(d_out, 0xff, (size_t)n_out * 2, st));
    CUDA_OK(cudaMemsetAsync(d_lse, 0xff, (size_t)n_lse * 4, st));
}

/* A graph replay into poisoned outputs, and its host copies. */
static void replay(cudaGraphExec_t ge, cudaStream_t st, void *d_out, float *d_lse, uint16_t *h_out, float *h_lse,
                   int64_t n_out, int64_t n_lse) {
    poison_on(st, d_out, d_lse, n_out, n_lse);
    CUDA_OK(cudaGraphLaunch(ge, st));
    CUDA_OK(cudaStreamSynchronize(st));
    gpu_download(h_out, d_out, (size_t)n_out * 2);
    gpu_download(h_lse, d_lse, (size_t)n_lse * 4);
}

static void run_case(dcpattn_context *ctx, const mla_case *c) {
    const int B = c->batch, hq = c->hq, dt = c->dtype, esz = c->fp8 ? 1 : 2; /* bytes per cache element */
    const uint16_t nan_bits = c->fp8 ? REF_E4M3_NAN : dt == DCPATTN_FP16 ? REF_FP16_NAN : REF_BF16_NAN;
    /* the softmax scale against q's power of two (float, as the kernel takes it) */
    const float sm_scale = c->q_exp ? ldexpf(1.0f / 24.0f, -c->q_exp) : 0.0f;
    int32_t cu[MAXB + 1];
    int max_q = 1, b, i;
    int64_t total_q, max_local = 0, n, n_out, n_lse, codes_sub = 0, codes_max = 0;
    uint16_t *kg[MAXB], *q, *h_out;
    const uint16_t *kgc[MAXB];
    unsigned char *kc;
    float *h_lse, ks = 0, vs = 0;
    double *r_o, *r_l, *b_o;
    ref_shard_params sp;
    ref_shard sh;
    ref_attn_params rp;
    ref_attn_inputs in;
    dcpattn_attn_desc d;
    dcpattn_attn_args a;
    dcpattn_attn_plan *plan = NULL;
    dcpattn_status s;
    void *d_q, *d_k, *d_out, *d_ws = NULL;
    float *d_lse, *d_ks = NULL, *d_vs = NULL;
    int32_t *d_bt, *d_cu, *d_used, *d_glob;
    int64_t st_t, kc_elems;
    size_t ws = 0;
    ref_err eo, el;
    char what[320];

    cu[0] = 0;
    for (b = 0; b < B; b++) {
        cu[b + 1] = cu[b] + c->q_len[b];
        if (c->q_len[b] > max_q) max_q = c->q_len[b];
    }
    total_q = cu[B];
    n_out = total_q * hq * DV;
    n_lse = total_q * hq;
    if (c->fp8) { /* per run, away from 1: a kernel that drops or swaps a scale fails */
        ks = (float)(0.01 + 0.005 * ref_rand_uniform(&seed));
        vs = (float)(0.022 + 0.018 * ref_rand_uniform(&seed));
    }
    snprintf(what, sizeof what,
             "mla %s%s hq=%d ps=%d W=%d r=%d I=%d causal=%d splits=%d base2=%d B=%d pad=%d ramp=%d workers=%d q_exp=%d",
             dt == DCPATTN_FP16 ? "fp16" : "bf16", c->fp8 ? " kv e4m3" : "", hq, c->page_size, c->world, c->rank,
             c->interleave, c->causal, c->splits, c->lse_base2, B, c->pad_t, c->ramp, c->workers, c->q_exp);

    /* global K per sequence (e4m3: one code per uint16_t, as ref.h takes it), q */
    for (b = 0; b < B; b++) {
        kg[b] = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(c->L[b] * DQK + 1));
        if (c->fp8) {
            for (n = 0; n < c->L[b] * DQK; n++) { /* 254 codes: 0x7f and 0xff are NaN */
                const unsigned u = (unsigned)(ref_rand_u64(&seed) % 254);
                kg[b][n] = (uint16_t)(u < 0x7f ? u : u + 1);
                codes_sub += (kg[b][n] & 0x78) == 0 && (kg[b][n] & 7) != 0;
                codes_max += (kg[b][n] & 0x7f) == 0x7e;
            }
        } else {
            ref_fill_uniform(kg[b], c->L[b] * DQK, dt, 1.0, &seed);
        }
        if (c->ramp)
            for (n = 0; n < c->L[b] * DQK; n++)
                kg[b][n] = ref_d2h(ref_h2d(kg[b][n], dt) * (1.0 + (double)(n / DQK) / 32.0), dt);
        kgc[b] = kg[b];
    }
    if (c->fp8)
        CHECK(codes_sub > 0 && codes_max > 0, "%s: %lld subnormal codes, %lld of +-448", what, (long long)codes_sub,
              (long long)codes_max);
    q = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(total_q * hq * DQK));
    ref_fill_uniform(q, total_q * hq * DQK, dt, 3.0, &seed);
    if (c->q_exp) /* exact: a power of two within bf16's range */
        for (n = 0; n < total_q * hq * DQK; n++) q[n] = ref_float_to_bf16(ldexpf(ref_bf16_to_float(q[n]), c->q_exp));

    memset(&sp, 0, sizeof sp);
    sp.hkv = 1;
    sp.dqk = DQK;
    sp.dv = DV;
    sp.page_size = c->page_size;
    sp.world = c->world;
    sp.rank = c->rank;
    sp.interleave = c->interleave;
    sp.fill = nan_bits;
    sp.extra_pages = 2;
    sp.bt_extra_cols = 1;
    sp.bt_fill = 0;
    sp.seed = ref_rand_u64(&seed);
    sp.v_alias_k = 1;
    CHECK(ref_shard_build(&sh, &sp, B, c->L, kgc, NULL) == 0, "%s: shard: %s", what, ref_error());
    for (b = 0; b < B; b++)
        if (sh.seqused_k[b] > max_local) max_local = sh.seqused_k[b];

    /* the cache as the kernel sees it: token rows of 576 + pad_t elements, padding NaN (e4m3:
       0xff, the other NaN code than the unused slots' 0x7f) */
    st_t = DQK + c->pad_t;
    kc_elems = sh.num_pages * c->page_size * st_t;
    kc = (unsigned char *)malloc((size_t)(kc_elems * esz));
    if (c->fp8)
        memset(kc, 0xff, (size_t)kc_elems);
    else
        ref_fill_bits((uint16_t *)kc, kc_elems, nan_bits);
    for (n = 0; n < sh.num_pages * c->page_size; n++) {
        const uint16_t *row = sh.k_cache + n * sh.k_stride_t;
        if (c->fp8)
            for (i = 0; i < DQK; i++) kc[n * st_t + i] = (unsigned char)row[i];
        else
            memcpy(kc + n * st_t * 2, row, DQK * sizeof(uint16_t));
    }

    /* references: exact, and the same math in the input precision (the tolerance baseline) */
    memset(&rp, 0, sizeof rp);
    rp.hq = hq;
    rp.hkv = 1;
    rp.dqk = DQK;
    rp.dv = DV;
    rp.page_size = c->page_size;
    rp.causal = c->causal;
    rp.scale = (double)sm_scale;
    rp.world = c->world;
    rp.rank = c->rank;
    rp.interleave = c->interleave;
    rp.lse_base2 = c->lse_base2;
    rp.dtype = dt;
    if (c->fp8) {
        rp.kv_dtype = REF_E4M3;
        rp.k_scale = &ks; /* read at every reference: the graph test changes them */
        rp.v_scale = &vs;
    }
    memset(&in, 0, sizeof in);
    in.batch = B;
    in.q = q;
    in.cu_seqlens_q = cu;
    ref_shard_inputs(&sh, &in);
    r_o = (double *)malloc(sizeof(double) * (size_t)n_out);
    b_o = (double *)malloc(sizeof(double) * (size_t)n_out);
    r_l = (double *)malloc(sizeof(double) * (size_t)n_lse);
    references(rp, &in, r_o, r_l, b_o, what);

    /* device: inputs uploaded, outputs NaN-poisoned */
    d_q = gpu_upload(q, (size_t)(total_q * hq * DQK) * 2);
    d_k = gpu_upload(kc, (size_t)(kc_elems * esz));
    if (c->fp8) {
        d_ks = (float *)gpu_upload(&ks, sizeof ks);
        d_vs = (float *)gpu_upload(&vs, sizeof vs);
    }
    d_bt = (int32_t *)gpu_upload(sh.block_table, (size_t)(B * sh.block_table_stride) * 4);
    d_cu = (int32_t *)gpu_upload(cu, (size_t)(B + 1) * 4);
    d_used = (int32_t *)gpu_upload(sh.seqused_k, (size_t)B * 4);
    d_glob = (int32_t *)gpu_upload(sh.seqused_k_global, (size_t)B * 4);
    d_out = gpu_poisoned((size_t)n_out * 2, 0xff);
    d_lse = (float *)gpu_poisoned((size_t)n_lse * 4, 0xff);

    memset(&d, 0, sizeof d);
    d.dtype = (dcpattn_dtype)dt;
    if (c->fp8) d.kv_dtype = DCPATTN_FP8_E4M3;
    d.num_q_heads = hq;
    d.num_kv_heads = 1;
    d.head_dim = DQK;
    d.head_dim_v = DV;
    d.page_size = c->page_size;
    d.softmax_scale = sm_scale;
    d.non_causal = !c->causal;
    d.dcp_world = c->world;
    d.dcp_rank = c->rank;
    d.dcp_interleave = c->interleave;
    d.lse_base2 = c->lse_base2;
    d.max_batch = B;
    d.max_q_len = max_q;
    d.max_total_q = (int)total_q; /* the buffers hold exactly total_q rows */
    d.max_seqlen_k = (int)(max_local > 0 ? max_local : 1);
    d.num_splits = c->workers ? DCPATTN_SPLITS_BALANCED : c->splits;
    if (c->workers) d.num_sms = c->workers * (int)((max_q * hq + 63) / 64); /* workers x row tiles */
    s = dcpattn_attn_plan_create(ctx, &d, &plan);
    CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: plan: %s", what, dcpattn_last_error());
    if (s == DCPATTN_STATUS_SUCCESS) {
        const char *variant = dcpattn_attn_variant(plan);
        CHECK(strncmp(variant, "mla_", 4) == 0 && (strstr(variant, "_kve4m3_") != NULL) == (c->fp8 != 0),
              "%s: variant %s", what, variant);
        CHECK(dcpattn_attn_num_splits(plan) == c->splits, "%s: %d splits planned", what, dcpattn_attn_num_splits(plan));
        CHECK(dcpattn_attn_workers(plan) == c->workers, "%s: %d workers planned", what, dcpattn_attn_workers(plan));
        ws = dcpattn_attn_workspace_size(plan);
        if (ws) d_ws = gpu_poisoned(ws, 0xff); /* dirty: no word of it may pass for a flag, no state for one */
        memset(&a, 0, sizeof a);
        a.batch = B;
        a.q = d_q;
        a.k_cache = d_k;
        a.v_cache = d_k; /* V aliases K */
        if (c->pad_t) {
            a.k_stride_t = a.v_stride_t = st_t;
            a.k_stride_page = a.v_stride_page = st_t * c->page_size;
            a.k_stride_h = a.v_stride_h = DQK;
        }
        a.num_pages = sh.num_pages;
        a.block_table = d_bt;
        a.block_table_stride = sh.block_table_stride;
        a.cu_seqlens_q = d_cu;
        a.seqused_k = d_used;
        a.seqused_k_global = d_glob;
        a.out = d_out;
        a.lse = d_lse;
        a.k_scale = d_ks;
        a.v_scale = d_vs;
        s = dcpattn_attn_run(plan, &a, d_ws, ws, 0);
        CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run: %s", what, dcpattn_last_error());
        CUDA_OK(cudaDeviceSynchronize());
        h_out = (uint16_t *)malloc((size_t)n_out * 2);
        h_lse = (float *)malloc((size_t)n_lse * 4);
        gpu_download(h_out, d_out, (size_t)n_out * 2);
        gpu_download(h_lse, d_lse, (size_t)n_lse * 4);
        check_result(what, "run", dt, n_out, n_lse, r_o, r_l, b_o, h_out, h_lse, &eo, &el);
        /* two graph replays (one token) into poisoned outputs: the same bits; FP8 then a third
           after new scales */
        if (c->workers || (c->fp8 && c->splits > 1)) {
            cudaStream_t st;
            cudaGraph_t g;
            cudaGraphExec_t ge;
            uint16_t *g_out = (uint16_t *)malloc((size_t)n_out * 2);
            float *g_lse = (float *)malloc((size_t)n_lse * 4);
            CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
            CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            s = dcpattn_attn_run(plan, &a, d_ws, ws, st);
            CUDA_OK(cudaStreamEndCapture(st, &g));
            CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run in capture: %s", what, dcpattn_last_error());
            CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
            for (i = 0; i < 2; i++) {
                replay(ge, st, d_out, d_lse, g_out, g_lse, n_out, n_lse);
                CHECK(memcmp(g_out, h_out, (size_t)n_out * 2) == 0 && memcmp(g_lse, h_lse, (size_t)n_lse * 4) == 0,
                      "%s: graph replay %d differs from the direct run", what, i + 1);
            }
            if (c->fp8) {
                /* new scale values in the same device floats (the cache bytes stay): the kernel
                   reads them at run time, so the replay follows them */
                ks *= (float)(1.5 + 0.25 * ref_rand_uniform(&seed));
                vs *= (float)(0.3 + 0.1 * ref_rand_uniform(&seed));
                CUDA_OK(cudaMemcpyAsync(d_ks, &ks, sizeof ks, cudaMemcpyHostToDevice, st));
                CUDA_OK(cudaMemcpyAsync(d_vs, &vs, sizeof vs, cudaMemcpyHostToDevice, st));
                replay(ge, st, d_out, d_lse, g_out, g_lse, n_out, n_lse);
                references(rp, &in, r_o, r_l, b_o, what);
                check_result(what, "graph replay after new scales", dt, n_out, n_lse, r_o, r_l, b_o, g_out, g_lse, &eo,
                             &el);
                /* a direct run with the new scales: the replay's bits */
                poison_on(st, d_out, d_lse, n_out, n_lse);
                s = dcpattn_attn_run(plan, &a, d_ws, ws, st);
                CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run after new scales: %s", what, dcpattn_last_error());
                CUDA_OK(cudaStreamSynchronize(st));
                gpu_download(h_out, d_out, (size_t)n_out * 2);
                gpu_download(h_lse, d_lse, (size_t)n_lse * 4);
                CHECK(memcmp(g_out, h_out, (size_t)n_out * 2) == 0 && memcmp(g_lse, h_lse, (size_t)n_lse * 4) == 0,
                      "%s: the replay after new scales differs from a direct run with them", what);
            }
            CUDA_OK(cudaGraphExecDestroy(ge));
            CUDA_OK(cudaGraphDestroy(g));
            CUDA_OK(cudaStreamDestroy(st));
            free(g_out);
            free(g_lse);
        }
        {
            int64_t empty = 0;
            for (n = 0; n < n_lse; n++) empty += r_l[n] == -INFINITY;
            printf("  %-118s out %.2e lse %.2e empty rows %lld/%lld\n", what, eo.max_abs, el.max_abs, (long long)empty,
                   (long long)n_lse);
        }
        free(h_out);
        free(h_lse);
        dcpattn_attn_plan_destroy(plan);
    }
    cudaFree(d_q); cudaFree(d_k); cudaFree(d_out); cudaFree(d_lse); cudaFree(d_bt); cudaFree(d_cu);
    cudaFree(d_used); cudaFree(d_glob);
    if (d_ws) cudaFree(d_ws);
    if (d_ks) cudaFree(d_ks);
    if (d_vs) cudaFree(d_vs);
    for (b = 0; b < B; b++) free(kg[b]);
    free(q); free(kc); free(r_o); free(r_l); free(b_o);
    ref_shard_free(&sh);
}

int main(void) {
    check_line_buffered();
    static const mla_case cases[] = {
        /* dtype, hq, ps, W, r, I, causal, splits, base2, B, q_len[], L[], pad, ramp, workers, fp8, q_exp */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 2, 3, 4}, {333, 70, 1, 512}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 16, 64, 2, 1, 1, 1, 3, 0, 3, {4, 1, 2}, {901, 2, 260}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 128, 64, 8, 3, 1, 1, 1, 0, 3, {2, 2, 2}, {1500, 5, 27}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 128, 16, 8, 7, 64, 1, 4, 1, 3, {1, 4, 3}, {2000, 600, 130}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 128, 64, 1, 0, 1, 0, 2, 0, 2, {3, 1}, {400, 129}, 0, 0, 0, 0, 0},
        {DCPATTN_FP16, 16, 32, 2, 0, 64, 1, 1, 0, 3, {2, 3, 1}, {700, 64, 65}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 128, 16, 2, 1, 1, 1, 1, 1, 2, {2, 1}, {500, 300}, 64, 0, 0, 0, 0},
        {DCPATTN_BF16, 16, 16, 8, 5, 64, 1, 2, 0, 2, {4, 1}, {300, 100}, 0, 0, 0, 0, 0}, /* rank 5 holds nothing */
        {DCPATTN_BF16, 32, 64, 1, 0, 1, 1, 5, 0, 2, {4, 3}, {1000, 64}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 64, 16, 2, 0, 1, 1, 1, 0, 2, {3, 4}, {257, 9}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 128, 64, 1, 0, 1, 1, 1, 0, 2, {2, 1}, {1500, 700}, 0, 1, 0, 0, 0},
        {DCPATTN_BF16, 16, 32, 2, 1, 16, 1, 3, 0, 3, {4, 1, 2}, {2200, 90, 640}, 0, 1, 0, 0, 0},
        {DCPATTN_FP16, 32, 16, 1, 0, 1, 1, 1, 0, 1, {3}, {1100}, 0, 1, 0, 0, 0},
        /* pages of 128 and 192 tokens (a tile is one 64-token box at an offset in its page) */
        {DCPATTN_BF16, 64, 128, 2, 1, 16, 1, 1, 0, 3, {2, 4, 1}, {900, 333, 70}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 128, 192, 1, 0, 1, 1, 2, 0, 2, {2, 3}, {1300, 190}, 8, 1, 0, 0, 0},
        /* the balanced schedule: W workers per row tile; sequences cut between them, one of
           them over all 6 (its last piece merges five states), empty shards and sequences */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 2, 3, 4}, {333, 70, 1, 512}, 0, 0, 3, 0, 0},
        {DCPATTN_BF16, 128, 64, 8, 3, 1, 1, 1, 0, 3, {2, 2, 2}, {1500, 5, 27}, 0, 0, 2, 0, 0},
        {DCPATTN_BF16, 128, 16, 8, 7, 64, 1, 1, 1, 3, {1, 4, 3}, {2000, 600, 130}, 0, 0, 5, 0, 0},
        {DCPATTN_BF16, 16, 16, 8, 5, 64, 1, 1, 0, 2, {4, 1}, {300, 100}, 0, 0, 3, 0, 0}, /* rank 5 holds nothing */
        {DCPATTN_BF16, 64, 64, 1, 0, 1, 1, 1, 0, 1, {3}, {2200}, 0, 1, 6, 0, 0},
        {DCPATTN_FP16, 32, 32, 2, 1, 16, 1, 1, 0, 3, {4, 1, 2}, {2200, 90, 640}, 0, 1, 4, 0, 0},
        {DCPATTN_BF16, 128, 192, 1, 0, 1, 0, 1, 0, 2, {2, 3}, {1300, 190}, 8, 0, 7, 0, 0},
        {DCPATTN_BF16, 16, 64, 2, 0, 1, 1, 1, 0, 8, {1, 1, 2, 1, 3, 1, 1, 4}, {900, 20, 2, 640, 1300, 64, 130, 7}, 0, 0, 5, 0, 0},
        /* a sequence cut into 13 and 11 pieces: heads (pieces 3, 7, 11) add the states of their
           groups, the last piece adds the heads' and the tail's */
        {DCPATTN_BF16, 16, 64, 1, 0, 1, 1, 1, 0, 1, {1}, {4160}, 0, 0, 13, 0, 0},
        {DCPATTN_BF16, 128, 64, 2, 1, 16, 1, 1, 0, 4, {2, 1, 3, 2}, {9000, 300, 5, 700}, 0, 1, 11, 0, 0},
        /* fewer units than workers: workers without keys between the pieces of a sequence */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 1, {2}, {600}, 0, 0, 20, 0, 0},
        {DCPATTN_BF16, 16, 64, 1, 0, 1, 1, 1, 0, 1, {2}, {150}, 0, 0, 6, 0, 0},
        {DCPATTN_BF16, 32, 16, 1, 0, 1, 1, 1, 0, 3, {1, 2, 1}, {10, 140, 1}, 0, 0, 7, 0, 0},
        /* an e4m3 cache: W {1, 3, 8} x I {1, 16, the page size}, pages of 16 to 192, varlen q_len up
           to 16, Hq 16, 20 and 128, bf16 and fp16 queries; one split, several (each also replayed
           from a graph after new scales), a shard that holds nothing */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 16, 3, 8}, {300, 120, 2, 200}, 0, 0, 0, 1, 0},
        {DCPATTN_BF16, 128, 64, 3, 1, 16, 1, 4, 0, 3, {2, 1, 3}, {300, 40, 150}, 0, 0, 0, 1, 0},
        {DCPATTN_BF16, 20, 32, 8, 5, 32, 1, 3, 0, 3, {16, 1, 7}, {1300, 300, 9}, 0, 0, 0, 1, 0},
        {DCPATTN_FP16, 16, 128, 3, 2, 128, 1, 1, 0, 3, {4, 16, 1}, {1000, 500, 130}, 0, 0, 0, 1, 0},
        {DCPATTN_FP16, 128, 16, 8, 0, 1, 1, 2, 0, 2, {2, 3}, {900, 8}, 0, 0, 0, 1, 0},
        {DCPATTN_BF16, 16, 192, 1, 0, 192, 0, 5, 1, 2, {16, 1}, {200, 90}, 16, 0, 0, 1, 0},
        {DCPATTN_BF16, 16, 16, 8, 7, 16, 1, 2, 0, 2, {4, 1}, {100, 50}, 0, 0, 0, 1, 0}, /* rank 7 holds nothing */
        /* the balanced schedule on an e4m3 cache (graph replays with new scales too) */
        {DCPATTN_BF16, 20, 64, 3, 0, 1, 1, 1, 0, 4, {1, 16, 2, 5}, {900, 150, 3, 500}, 0, 0, 4, 1, 0},
        {DCPATTN_FP16, 20, 16, 8, 7, 16, 1, 1, 0, 3, {8, 1, 2}, {2500, 500, 60}, 0, 0, 3, 1, 0},
        {DCPATTN_BF16, 128, 32, 1, 0, 1, 1, 1, 0, 2, {2, 1}, {200, 70}, 0, 0, 5, 1, 0},
        /* the narrow tile of 16 rows (Hq x q_len <= 16, S and O transposed): one
           split and several, DCP masks, a shard that holds nothing, rising row maxima, no causal
           mask, Hq down to 1 with q_len 16; the balanced schedule (a sequence cut into 13 pieces,
           more workers than units); an e4m3 cache, also balanced and with bf16 queries times 2^20 */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 1, 1, 1}, {333, 70, 1, 512}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 16, 64, 2, 1, 1, 1, 3, 0, 3, {1, 1, 1}, {901, 2, 260}, 0, 0, 0, 0, 0},
        {DCPATTN_FP16, 8, 32, 2, 0, 64, 1, 1, 0, 3, {2, 1, 2}, {700, 64, 65}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 4, 16, 8, 5, 64, 1, 2, 0, 2, {4, 1}, {300, 100}, 0, 0, 0, 0, 0}, /* rank 5 holds nothing */
        {DCPATTN_BF16, 16, 64, 1, 0, 1, 1, 1, 0, 2, {1, 1}, {1500, 700}, 0, 1, 0, 0, 0},
        {DCPATTN_BF16, 1, 192, 1, 0, 1, 0, 2, 1, 2, {16, 3}, {1300, 190}, 8, 1, 0, 0, 0},
        {DCPATTN_BF16, 2, 128, 2, 1, 16, 1, 1, 0, 3, {8, 4, 1}, {900, 333, 70}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 1, 1, 1}, {333, 70, 1, 512}, 0, 0, 3, 0, 0},
        {DCPATTN_BF16, 16, 64, 1, 0, 1, 1, 1, 0, 1, {1}, {4160}, 0, 0, 13, 0, 0},
        {DCPATTN_BF16, 8, 64, 2, 0, 1, 1, 1, 0, 8, {1, 1, 2, 1, 2, 1, 1, 2}, {900, 20, 2, 640, 1300, 64, 130, 7}, 0, 1, 5, 0, 0},
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 1, {1}, {600}, 0, 0, 20, 0, 0},
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 1, 1, 1}, {300, 120, 2, 200}, 0, 0, 0, 1, 0},
        {DCPATTN_FP16, 4, 128, 3, 2, 128, 1, 3, 0, 3, {4, 2, 1}, {1000, 500, 130}, 0, 0, 0, 1, 0},
        {DCPATTN_BF16, 16, 16, 8, 7, 16, 1, 2, 0, 2, {1, 1}, {100, 50}, 0, 0, 0, 1, 0}, /* rank 7 holds nothing */
        {DCPATTN_BF16, 16, 64, 3, 0, 1, 1, 1, 0, 4, {1, 1, 1, 1}, {900, 150, 3, 500}, 0, 0, 4, 1, 0},
        {DCPATTN_BF16, 2, 64, 8, 3, 64, 1, 1, 0, 3, {8, 2, 1}, {2000, 600, 64}, 0, 0, 0, 1, 20},
        {DCPATTN_BF16, 8, 192, 1, 0, 192, 0, 5, 1, 2, {2, 1}, {200, 90}, 16, 0, 0, 1, 0},
        /* the narrow tile of 32 rows (Hq 16 at q_len 2, Hq 32 at q_len 1, ...), the same kinds */
        {DCPATTN_BF16, 16, 64, 2, 1, 1, 1, 1, 0, 3, {2, 1, 2}, {901, 2, 260}, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, 32, 16, 8, 5, 64, 1, 3, 0, 3, {1, 1, 1}, {2000, 600, 130}, 0, 1, 0, 0, 0},
        {DCPATTN_FP16, 16, 192, 1, 0, 1, 0, 1, 1, 2, {2, 1}, {1300, 190}, 8, 0, 0, 0, 0},
        {DCPATTN_BF16, 8, 64, 2, 0, 16, 1, 1, 0, 4, {4, 3, 1, 4}, {900, 150, 3, 500}, 0, 0, 4, 0, 0},
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 1, {2}, {4160}, 0, 1, 13, 0, 0},
        {DCPATTN_BF16, 16, 64, 3, 1, 16, 1, 2, 0, 3, {2, 2, 1}, {300, 40, 150}, 0, 0, 0, 1, 0},
        {DCPATTN_FP16, 32, 16, 8, 3, 16, 1, 1, 0, 3, {1, 1, 1}, {2500, 500, 60}, 0, 0, 3, 1, 0},
        {DCPATTN_BF16, 2, 32, 1, 0, 1, 1, 1, 0, 2, {16, 9}, {300, 90}, 0, 0, 0, 1, -40},
        /* bf16 queries far above and below fp16's range, the softmax scale set against them:
           the kernel's fp16 tiles take Q rescaled by a power of two */
        {DCPATTN_BF16, 16, 64, 8, 3, 64, 1, 1, 0, 3, {16, 2, 1}, {2000, 600, 64}, 0, 0, 0, 1, 20},
        {DCPATTN_BF16, 128, 16, 1, 0, 16, 1, 1, 0, 2, {2, 1}, {150, 70}, 0, 0, 0, 1, -40},
    };
    dcpattn_context *ctx;
    int i, rep;
    if (!gpu_test_begin(&seed, &ctx)) return check_summary();
    /* DCPATTN_TEST_QUICK=1 (for compute-sanitizer): one pass instead of two */
    for (rep = 0; rep < (getenv("DCPATTN_TEST_QUICK") && atoi(getenv("DCPATTN_TEST_QUICK")) ? 1 : 2); rep++)
        /* fresh random inputs each time */
        for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) run_case(ctx, &cases[i]);
    dcpattn_context_destroy(ctx);
    return check_summary();
}
