/* test_gpu_mla — the MLA decode kernel (Dqk 576, Dv 512, one latent KV head, V = the first
   512 channels of each K row) through the public API, against the CPU reference on fresh
   random inputs: outputs poisoned (NaN) before every launch, unused cache slots and padding
   NaN, DCP masks for W in {1, 2, 8} and I in {1, 64}, pages of 16/32/64/128/192, varlen
   q_len 1..4, Hq 16..128, one split and several, shards that hold nothing for some or all
   rows, and a padded token stride; and the balanced schedule (DCPATTN_SPLITS_BALANCED, num_sms
   set for 2..7 workers per row tile, so that sequences are cut between CTAs and merged in the
   launch), each also replayed twice from a CUDA graph into poisoned outputs
   and compared bit for bit with the direct run (a replay reuses its run's token). Every case
   runs twice on fresh inputs, once with DCPATTN_TEST_QUICK=1 (for compute-sanitizer). Without
   a GPU it says so and runs nothing. */
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
    int pad_t;         /* extra elements per token row (0: contiguous rows of 576) */
    int ramp;          /* 1: K row j scaled by 1 + j / 32, so later tiles keep topping the row
                          maxima (every warpgroup raises them and hands the raise over) */
    int workers;       /* > 0: the balanced schedule with this many workers per row tile */
} mla_case;

static void run_case(dcpattn_context *ctx, const mla_case *c) {
    const int B = c->batch, hq = c->hq, dt = c->dtype;
    const uint16_t nan_bits = dt == DCPATTN_FP16 ? REF_FP16_NAN : REF_BF16_NAN;
    int32_t cu[MAXB + 1];
    int max_q = 1, b, i;
    int64_t total_q, max_local = 0, n;
    uint16_t *kg[MAXB], *q, *h_out, *kc;
    const uint16_t *kgc[MAXB];
    float *h_lse;
    double *r_o, *r_l, *b_o, *b_l;
    ref_shard_params sp;
    ref_shard sh;
    ref_attn_params rp;
    ref_attn_inputs in;
    dcpattn_attn_desc d;
    dcpattn_attn_args a;
    dcpattn_attn_plan *plan = NULL;
    dcpattn_status s;
    void *d_q, *d_k, *d_out, *d_ws = NULL;
    float *d_lse;
    int32_t *d_bt, *d_cu, *d_used, *d_glob;
    int64_t st_t, kc_elems;
    size_t ws = 0;
    ref_err eo, bo, el;
    char what[256];

    cu[0] = 0;
    for (b = 0; b < B; b++) {
        cu[b + 1] = cu[b] + c->q_len[b];
        if (c->q_len[b] > max_q) max_q = c->q_len[b];
    }
    total_q = cu[B];
    snprintf(what, sizeof what,
             "mla %s hq=%d ps=%d W=%d r=%d I=%d causal=%d splits=%d base2=%d B=%d pad=%d ramp=%d workers=%d",
             dt == DCPATTN_FP16 ? "fp16" : "bf16", hq, c->page_size, c->world, c->rank, c->interleave, c->causal,
             c->splits, c->lse_base2, B, c->pad_t, c->ramp, c->workers);

    /* global K per sequence, q */
    for (b = 0; b < B; b++) {
        kg[b] = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(c->L[b] * DQK + 1));
        ref_fill_uniform(kg[b], c->L[b] * DQK, dt, 1.0, &seed);
        if (c->ramp)
            for (n = 0; n < c->L[b] * DQK; n++)
                kg[b][n] = ref_d2h(ref_h2d(kg[b][n], dt) * (1.0 + (double)(n / DQK) / 32.0), dt);
        kgc[b] = kg[b];
    }
    q = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(total_q * hq * DQK));
    ref_fill_uniform(q, total_q * hq * DQK, dt, 3.0, &seed);

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

    /* the cache as the kernel sees it: token rows of 576 + pad_t elements, padding NaN */
    st_t = DQK + c->pad_t;
    kc_elems = sh.num_pages * c->page_size * st_t;
    kc = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)kc_elems);
    ref_fill_bits(kc, kc_elems, nan_bits);
    for (n = 0; n < sh.num_pages * c->page_size; n++)
        memcpy(kc + n * st_t, sh.k_cache + n * sh.k_stride_t, DQK * sizeof(uint16_t));

    /* references: exact, and the same math in the input precision (the tolerance baseline) */
    memset(&rp, 0, sizeof rp);
    rp.hq = hq;
    rp.hkv = 1;
    rp.dqk = DQK;
    rp.dv = DV;
    rp.page_size = c->page_size;
    rp.causal = c->causal;
    rp.world = c->world;
    rp.rank = c->rank;
    rp.interleave = c->interleave;
    rp.lse_base2 = c->lse_base2;
    rp.dtype = dt;
    memset(&in, 0, sizeof in);
    in.batch = B;
    in.q = q;
    in.cu_seqlens_q = cu;
    ref_shard_inputs(&sh, &in);
    r_o = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * DV));
    b_o = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * DV));
    r_l = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
    b_l = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
    CHECK(ref_attn(&rp, &in, r_o, r_l) == 0, "%s: ref: %s", what, ref_error());
    rp.emulate_lowp = 1;
    CHECK(ref_attn(&rp, &in, b_o, b_l) == 0, "%s: ref lowp: %s", what, ref_error());

    /* device: inputs uploaded, outputs NaN-poisoned */
    d_q = gpu_upload(q, (size_t)(total_q * hq * DQK) * 2);
    d_k = gpu_upload(kc, (size_t)kc_elems * 2);
    d_bt = (int32_t *)gpu_upload(sh.block_table, (size_t)(B * sh.block_table_stride) * 4);
    d_cu = (int32_t *)gpu_upload(cu, (size_t)(B + 1) * 4);
    d_used = (int32_t *)gpu_upload(sh.seqused_k, (size_t)B * 4);
    d_glob = (int32_t *)gpu_upload(sh.seqused_k_global, (size_t)B * 4);
    d_out = gpu_poisoned((size_t)(total_q * hq * DV) * 2, 0xff);
    d_lse = (float *)gpu_poisoned((size_t)(total_q * hq) * 4, 0xff);

    memset(&d, 0, sizeof d);
    d.dtype = (dcpattn_dtype)dt;
    d.num_q_heads = hq;
    d.num_kv_heads = 1;
    d.head_dim = DQK;
    d.head_dim_v = DV;
    d.page_size = c->page_size;
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
        CHECK(strncmp(dcpattn_attn_variant(plan), "mla_", 4) == 0, "%s: variant %s", what, dcpattn_attn_variant(plan));
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
        s = dcpattn_attn_run(plan, &a, d_ws, ws, 0);
        CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run: %s", what, dcpattn_last_error());
        CUDA_OK(cudaDeviceSynchronize());
        h_out = (uint16_t *)malloc((size_t)(total_q * hq * DV) * 2);
        h_lse = (float *)malloc((size_t)(total_q * hq) * 4);
        gpu_download(h_out, d_out, (size_t)(total_q * hq * DV) * 2);
        gpu_download(h_lse, d_lse, (size_t)(total_q * hq) * 4);
        eo = ref_compare(r_o, h_out, dt, total_q * hq * DV);
        bo = ref_compare(r_o, b_o, REF_F64, total_q * hq * DV); /* baseline: low-precision ref vs exact */
        el = ref_compare(r_l, h_lse, REF_FP32, total_q * hq);
        CHECK(ref_err_within(&eo, &bo, 2e-3, 2e-3), "%s: out %s (baseline %.3g / %.3g)", what, ref_err_str(&eo),
              bo.max_abs, bo.rel_fro);
        CHECK(ref_err_ok(&el, 2e-3, 1e-4), "%s: lse %s", what, ref_err_str(&el));
        if (c->workers) { /* two graph replays (one token) into poisoned outputs: the same bits */
            cudaStream_t st;
            cudaGraph_t g;
            cudaGraphExec_t ge;
            uint16_t *g_out = (uint16_t *)malloc((size_t)(total_q * hq * DV) * 2);
            float *g_lse = (float *)malloc((size_t)(total_q * hq) * 4);
            CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
            CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            s = dcpattn_attn_run(plan, &a, d_ws, ws, st);
            CUDA_OK(cudaStreamEndCapture(st, &g));
            CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run in capture: %s", what, dcpattn_last_error());
            CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
            for (i = 0; i < 2; i++) {
                CUDA_OK(cudaMemset(d_out, 0xff, (size_t)(total_q * hq * DV) * 2));
                CUDA_OK(cudaMemset(d_lse, 0xff, (size_t)(total_q * hq) * 4));
                CUDA_OK(cudaGraphLaunch(ge, st));
                CUDA_OK(cudaStreamSynchronize(st));
                gpu_download(g_out, d_out, (size_t)(total_q * hq * DV) * 2);
                gpu_download(g_lse, d_lse, (size_t)(total_q * hq) * 4);
                CHECK(memcmp(g_out, h_out, (size_t)(total_q * hq * DV) * 2) == 0 &&
                          memcmp(g_lse, h_lse, (size_t)(total_q * hq) * 4) == 0,
                      "%s: graph replay %d differs from the direct run", what, i + 1);
            }
            CUDA_OK(cudaGraphExecDestroy(ge));
            CUDA_OK(cudaGraphDestroy(g));
            CUDA_OK(cudaStreamDestroy(st));
            free(g_out);
            free(g_lse);
        }
        {
            int64_t empty = 0;
            for (i = 0; i < total_q * hq; i++) empty += r_l[i] == -INFINITY;
            printf("  %-100s out %.2e lse %.2e empty rows %lld/%lld\n", what, eo.max_abs, el.max_abs, (long long)empty,
                   (long long)(total_q * hq));
        }
        free(h_out);
        free(h_lse);
        dcpattn_attn_plan_destroy(plan);
    }
    cudaFree(d_q); cudaFree(d_k); cudaFree(d_out); cudaFree(d_lse); cudaFree(d_bt); cudaFree(d_cu);
    cudaFree(d_used); cudaFree(d_glob);
    if (d_ws) cudaFree(d_ws);
    for (b = 0; b < B; b++) free(kg[b]);
    free(q); free(kc); free(r_o); free(r_l); free(b_o); free(b_l);
    ref_shard_free(&sh);
}

int main(void) {
    static const mla_case cases[] = {
        /* dtype, hq, ps, W, r, I, causal, splits, base2, B, q_len[], L[], pad, ramp, workers */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 2, 3, 4}, {333, 70, 1, 512}, 0, 0, 0},
        {DCPATTN_BF16, 16, 64, 2, 1, 1, 1, 3, 0, 3, {4, 1, 2}, {901, 2, 260}, 0, 0, 0},
        {DCPATTN_BF16, 128, 64, 8, 3, 1, 1, 1, 0, 3, {2, 2, 2}, {1500, 5, 27}, 0, 0, 0},
        {DCPATTN_BF16, 128, 16, 8, 7, 64, 1, 4, 1, 3, {1, 4, 3}, {2000, 600, 130}, 0, 0, 0},
        {DCPATTN_BF16, 128, 64, 1, 0, 1, 0, 2, 0, 2, {3, 1}, {400, 129}, 0, 0, 0},
        {DCPATTN_FP16, 16, 32, 2, 0, 64, 1, 1, 0, 3, {2, 3, 1}, {700, 64, 65}, 0, 0, 0},
        {DCPATTN_BF16, 128, 16, 2, 1, 1, 1, 1, 1, 2, {2, 1}, {500, 300}, 64, 0, 0},
        {DCPATTN_BF16, 16, 16, 8, 5, 64, 1, 2, 0, 2, {4, 1}, {300, 100}, 0, 0, 0}, /* rank 5 holds nothing */
        {DCPATTN_BF16, 32, 64, 1, 0, 1, 1, 5, 0, 2, {4, 3}, {1000, 64}, 0, 0, 0},
        {DCPATTN_BF16, 64, 16, 2, 0, 1, 1, 1, 0, 2, {3, 4}, {257, 9}, 0, 0, 0},
        {DCPATTN_BF16, 128, 64, 1, 0, 1, 1, 1, 0, 2, {2, 1}, {1500, 700}, 0, 1, 0},
        {DCPATTN_BF16, 16, 32, 2, 1, 16, 1, 3, 0, 3, {4, 1, 2}, {2200, 90, 640}, 0, 1, 0},
        {DCPATTN_FP16, 32, 16, 1, 0, 1, 1, 1, 0, 1, {3}, {1100}, 0, 1, 0},
        /* pages of 128 and 192 tokens (a tile is one 64-token box at an offset in its page) */
        {DCPATTN_BF16, 64, 128, 2, 1, 16, 1, 1, 0, 3, {2, 4, 1}, {900, 333, 70}, 0, 0, 0},
        {DCPATTN_BF16, 128, 192, 1, 0, 1, 1, 2, 0, 2, {2, 3}, {1300, 190}, 8, 1, 0},
        /* the balanced schedule: W workers per row tile; sequences cut between them, one of
           them over all 6 (its last piece merges five states), empty shards and sequences */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 4, {1, 2, 3, 4}, {333, 70, 1, 512}, 0, 0, 3},
        {DCPATTN_BF16, 128, 64, 8, 3, 1, 1, 1, 0, 3, {2, 2, 2}, {1500, 5, 27}, 0, 0, 2},
        {DCPATTN_BF16, 128, 16, 8, 7, 64, 1, 1, 1, 3, {1, 4, 3}, {2000, 600, 130}, 0, 0, 5},
        {DCPATTN_BF16, 16, 16, 8, 5, 64, 1, 1, 0, 2, {4, 1}, {300, 100}, 0, 0, 3}, /* rank 5 holds nothing */
        {DCPATTN_BF16, 64, 64, 1, 0, 1, 1, 1, 0, 1, {3}, {2200}, 0, 1, 6},
        {DCPATTN_FP16, 32, 32, 2, 1, 16, 1, 1, 0, 3, {4, 1, 2}, {2200, 90, 640}, 0, 1, 4},
        {DCPATTN_BF16, 128, 192, 1, 0, 1, 0, 1, 0, 2, {2, 3}, {1300, 190}, 8, 0, 7},
        {DCPATTN_BF16, 16, 64, 2, 0, 1, 1, 1, 0, 8, {1, 1, 2, 1, 3, 1, 1, 4}, {900, 20, 2, 640, 1300, 64, 130, 7}, 0, 0, 5},
        /* a sequence cut into 13 and 11 pieces: heads (pieces 3, 7, 11) add the states of their
           groups, the last piece adds the heads' and the tail's */
        {DCPATTN_BF16, 16, 64, 1, 0, 1, 1, 1, 0, 1, {1}, {4160}, 0, 0, 13},
        {DCPATTN_BF16, 128, 64, 2, 1, 16, 1, 1, 0, 4, {2, 1, 3, 2}, {9000, 300, 5, 700}, 0, 1, 11},
        /* fewer units than workers: workers without keys between the pieces of a sequence */
        {DCPATTN_BF16, 16, 16, 1, 0, 1, 1, 1, 0, 1, {2}, {600}, 0, 0, 20},
        {DCPATTN_BF16, 16, 64, 1, 0, 1, 1, 1, 0, 1, {2}, {150}, 0, 0, 6},
        {DCPATTN_BF16, 32, 16, 1, 0, 1, 1, 1, 0, 3, {1, 2, 1}, {10, 140, 1}, 0, 0, 7},
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
