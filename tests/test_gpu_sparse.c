/* test_gpu_sparse — sparse MLA (desc.sparse_topk) through the public API, against the float64
   CPU reference (tests/ref.h, ref_sparse_attn) on fresh random inputs: for every rank r of W
   in {1, 2, 3, 8}, interleaves 1, 3, 16, 64 and a page, pages of 16..256, top-k 64, 512 and
   2048, q_len 1..16 varlen, Hq 16..128 (also 20 and 80: partial head blocks), bf16, fp16 and
   the 656-byte FP8 cache; ids with about 30 % -1, ids past the length, repeats, tokens whose
   list is all -1 and ranks that own nothing, optional per-token counts, padded id rows, sinks
   (rank 0). Outputs are poisoned (NaN) before every launch, unused cache slots and pages are
   NaN (FP8: 0xff bytes, NaN values and NaN scales): a read of one shows. Each rank's out is
   held to twice the error of the same math in the input precision (plus a floor), its lse
   to 2e-3; then the W partials, merged by dcpattn_merge, must equal unsharded sparse attention
   with the sink. Some cases capture the run in a CUDA graph, change the ids on the device and
   replay: the result must follow the new ids. Without a GPU it says so and runs nothing. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>

#include "check.h"
#include "ref.h"
#include "gpu_util.h"

enum { DQK = 576, DV = 512, SMAXB = 4, SMAXW = 8 };
static const double FLOOR = 2e-3; /* as tests/test_gpu_mla.c */

static uint64_t seed;

typedef struct sp_case {
    int fp8, dtype, hq, ps, W, I, topk, B;
    int q_len[SMAXB];
    int64_t L[SMAXB];
    int counts, sinks, base2, stride_pad, graph;
} sp_case;

/* Rank r's cache as the kernel reads it: bf16/fp16 rows of 576 (NaN where unused), or
   656-byte FP8 rows (0xff where unused). */
static void *rank_cache(const ref_shard *sh, const sp_case *c, size_t *bytes) {
    const int64_t slots = sh->num_pages * c->ps;
    int64_t n;
    if (!c->fp8) {
        *bytes = (size_t)(slots * DQK) * 2;
        return sh->k_cache;
    }
    {
        uint8_t *c8 = (uint8_t *)malloc((size_t)(slots * REF_FP8DS_ROW));
        memset(c8, 0xff, (size_t)(slots * REF_FP8DS_ROW));
        for (n = 0; n < slots; n++)
            if (!isnan(ref_bf16_to_float(sh->k_cache[n * DQK])))
                ref_fp8ds_quantize(sh->k_cache + n * DQK, c8 + n * REF_FP8DS_ROW);
        *bytes = (size_t)(slots * REF_FP8DS_ROW);
        return c8;
    }
}

static void refs(const sp_case *c, int world, int rank, const ref_sparse_inputs *in, double *o, double *l, double *bo,
                 double *bl) {
    ref_attn_params p;
    memset(&p, 0, sizeof p);
    p.hq = c->hq;
    p.hkv = 1;
    p.dqk = DQK;
    p.dv = DV;
    p.page_size = c->ps;
    p.world = world;
    p.rank = rank;
    p.interleave = c->I;
    p.lse_base2 = c->base2;
    p.dtype = c->dtype;
    CHECK(ref_sparse_attn(&p, in, o, l) == 0, "ref: %s", ref_error());
    p.emulate_lowp = 1;
    CHECK(ref_sparse_attn(&p, in, bo, bl) == 0, "ref lowp: %s", ref_error());
}

static void run_case(dcpattn_context *ctx, const sp_case *c) {
    const int B = c->B, hq = c->hq, topk = c->topk, W = c->W;
    const int64_t stride = topk + c->stride_pad;
    int32_t cu[SMAXB + 1], *ids, *ids2, *counts;
    uint16_t *kg[SMAXB], *q;
    const uint16_t *kgc[SMAXB];
    float sinks[128];
    int b, i, r, max_q = 1, total_q;
    int64_t rows, no;
    double *r_o, *r_l, *b_o, *b_l;
    void *d_out[SMAXW];
    float *d_lse[SMAXW];
    void *d_q, *d_m;
    float *d_ml;
    int32_t *d_ids, *d_counts, *d_cu;
    float *d_sinks;
    char what[320];

    cu[0] = 0;
    for (b = 0; b < B; b++) {
        cu[b + 1] = cu[b] + c->q_len[b];
        if (c->q_len[b] > max_q) max_q = c->q_len[b];
    }
    total_q = cu[B];
    rows = (int64_t)total_q * hq;
    no = rows * DV;
    snprintf(what, sizeof what, "sparse %s hq=%d ps=%d W=%d I=%d topk=%d B=%d counts=%d sinks=%d base2=%d pad=%d graph=%d",
             c->fp8 ? "fp8ds" : c->dtype == DCPATTN_FP16 ? "fp16" : "bf16", hq, c->ps, W, c->I, topk, B, c->counts,
             c->sinks, c->base2, c->stride_pad, c->graph);

    for (b = 0; b < B; b++) {
        kg[b] = (uint16_t *)malloc(2 * (size_t)(c->L[b] * DQK + 1));
        ref_fill_uniform(kg[b], c->L[b] * DQK, c->dtype, 1.0, &seed);
        kgc[b] = kg[b];
    }
    q = (uint16_t *)malloc(2 * (size_t)(rows * DQK));
    ref_fill_uniform(q, rows * DQK, c->dtype, 3.0, &seed);
    ids = (int32_t *)malloc(4 * (size_t)(total_q * stride));
    ids2 = (int32_t *)malloc(4 * (size_t)(total_q * stride));
    counts = (int32_t *)malloc(4 * (size_t)total_q);
    for (b = 0; b < B; b++)
        for (i = 0; i < c->q_len[b]; i++) {
            const int t = cu[b] + i;
            ref_sparse_ids(ids + t * stride, stride, topk, c->L[b], c->q_len[b], i, t == 1, &seed);
            ref_sparse_ids(ids2 + t * stride, stride, topk, c->L[b], c->q_len[b], i, 0, &seed);
            counts[t] = t % 3 == 2 ? 0 : (int32_t)(ref_rand_u64(&seed) % (uint64_t)(topk + 10)) - 3;
        }
    for (i = 0; i < hq; i++) sinks[i] = i % 7 == 6 ? -INFINITY : (float)(ref_rand_uniform(&seed) * 6);
    r_o = (double *)malloc(sizeof(double) * (size_t)no);
    b_o = (double *)malloc(sizeof(double) * (size_t)no);
    r_l = (double *)malloc(sizeof(double) * (size_t)rows);
    b_l = (double *)malloc(sizeof(double) * (size_t)rows);

    d_q = gpu_upload(q, 2 * (size_t)(rows * DQK));
    d_ids = (int32_t *)gpu_upload(ids, 4 * (size_t)(total_q * stride));
    d_counts = (int32_t *)gpu_upload(counts, 4 * (size_t)total_q);
    d_cu = (int32_t *)gpu_upload(cu, 4 * (size_t)(B + 1));
    d_sinks = (float *)gpu_upload(sinks, 4 * (size_t)hq);

    for (r = 0; r < W; r++) {
        ref_shard_params sp;
        ref_shard sh;
        ref_sparse_inputs in;
        dcpattn_attn_desc d;
        dcpattn_attn_args a;
        dcpattn_attn_plan *plan = NULL;
        void *cache, *d_k;
        int32_t *d_bt, *d_used, *d_glob;
        size_t cbytes;
        uint16_t *h_out = (uint16_t *)malloc(2 * (size_t)no);
        float *h_lse = (float *)malloc(4 * (size_t)rows);
        ref_err eo, bo, el, bl;
        dcpattn_status s;

        memset(&sp, 0, sizeof sp);
        sp.hkv = 1;
        sp.dqk = DQK;
        sp.page_size = c->ps;
        sp.world = W;
        sp.rank = r;
        sp.interleave = c->I;
        sp.fill = c->dtype == DCPATTN_FP16 ? REF_FP16_NAN : REF_BF16_NAN;
        sp.extra_pages = 2;
        sp.bt_extra_cols = 1;
        sp.seed = ref_rand_u64(&seed);
        sp.v_alias_k = 1;
        CHECK(ref_shard_build(&sh, &sp, B, c->L, kgc, NULL) == 0, "%s: shard: %s", what, ref_error());
        cache = rank_cache(&sh, c, &cbytes);
        memset(&in, 0, sizeof in);
        in.batch = B;
        in.q = q;
        in.cache = cache;
        in.cache_type = c->fp8 ? REF_FP8DS : 0;
        in.num_pages = sh.num_pages;
        in.block_table = sh.block_table;
        in.block_table_stride = sh.block_table_stride;
        in.cu_seqlens_q = cu;
        in.seqused_k = sh.seqused_k;
        in.seqused_k_global = sh.seqused_k_global;
        in.ids = ids;
        in.ids_stride = stride;
        in.topk = topk;
        in.counts = c->counts ? counts : NULL;
        in.sinks = c->sinks && r == 0 ? sinks : NULL;
        refs(c, W, r, &in, r_o, r_l, b_o, b_l);

        d_k = gpu_upload(cache, cbytes);
        d_bt = (int32_t *)gpu_upload(sh.block_table, 4 * (size_t)(B * sh.block_table_stride));
        d_used = (int32_t *)gpu_upload(sh.seqused_k, 4 * (size_t)B);
        d_glob = (int32_t *)gpu_upload(sh.seqused_k_global, 4 * (size_t)B);
        d_out[r] = gpu_poisoned(2 * (size_t)no, 0xff);
        d_lse[r] = (float *)gpu_poisoned(4 * (size_t)rows, 0xff);

        memset(&d, 0, sizeof d);
        d.dtype = (dcpattn_dtype)c->dtype;
        d.kv_dtype = c->fp8 ? DCPATTN_FP8_DS_MLA : DCPATTN_DTYPE_DEFAULT;
        d.num_q_heads = hq;
        d.num_kv_heads = 1;
        d.head_dim = DQK;
        d.head_dim_v = DV;
        d.page_size = c->ps;
        d.dcp_world = W;
        d.dcp_rank = r;
        d.dcp_interleave = c->I;
        d.lse_base2 = c->base2;
        d.max_batch = B;
        d.max_q_len = max_q;
        d.max_total_q = total_q;
        d.max_seqlen_k = (int)(sh.block_table_stride * c->ps);
        d.sparse_topk = topk;
        s = dcpattn_attn_plan_create(ctx, &d, &plan);
        CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: plan: %s", what, dcpattn_last_error());
        if (s == DCPATTN_STATUS_SUCCESS) {
            CHECK(strncmp(dcpattn_attn_variant(plan), "sparse_", 7) == 0 && dcpattn_attn_workspace_size(plan) == 0,
                  "%s: variant %s, workspace %zu", what, dcpattn_attn_variant(plan), dcpattn_attn_workspace_size(plan));
            memset(&a, 0, sizeof a);
            a.batch = B;
            a.q = d_q;
            a.k_cache = a.v_cache = d_k;
            a.num_pages = sh.num_pages;
            a.block_table = d_bt;
            a.block_table_stride = sh.block_table_stride;
            a.cu_seqlens_q = d_cu;
            a.seqused_k = d_used;
            a.seqused_k_global = d_glob;
            a.out = d_out[r];
            a.lse = d_lse[r];
            a.topk_ids = d_ids;
            a.topk_ids_stride = stride;
            a.topk_count = c->counts ? d_counts : NULL;
            a.sinks = c->sinks ? d_sinks : NULL; /* every rank passes them; rank 0 applies them */
            s = dcpattn_attn_run(plan, &a, NULL, 0, 0);
            CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run: %s", what, dcpattn_last_error());
            CUDA_OK(cudaDeviceSynchronize());
            gpu_download(h_out, d_out[r], 2 * (size_t)no);
            gpu_download(h_lse, d_lse[r], 4 * (size_t)rows);
            eo = ref_compare(r_o, h_out, c->dtype, no);
            bo = ref_compare(r_o, b_o, REF_F64, no);
            el = ref_compare(r_l, h_lse, REF_FP32, rows);
            CHECK(ref_err_within(&eo, &bo, FLOOR, FLOOR), "%s r=%d: out %s (baseline %.3g / %.3g)",
                  what, r, ref_err_str(&eo), bo.max_abs, bo.rel_fro);
            /* lse: 2x the baseline's error (a dequantized FP8 value rounded to bf16) + the floor */
            bl = ref_compare(r_l, b_l, REF_F64, rows);
            CHECK(ref_err_within(&el, &bl, 2e-3, 1e-4), "%s r=%d: lse %s", what, r, ref_err_str(&el));
            if (c->graph && r == W - 1) { /* capture, change the ids on the device, replay */
                cudaStream_t st;
                cudaGraph_t gr;
                cudaGraphExec_t ge;
                double *g_o = (double *)malloc(sizeof(double) * (size_t)no), *g_l = (double *)malloc(sizeof(double) * (size_t)rows);
                double *gb_o = (double *)malloc(sizeof(double) * (size_t)no), *gb_l = (double *)malloc(sizeof(double) * (size_t)rows);
                CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
                CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                s = dcpattn_attn_run(plan, &a, NULL, 0, st);
                CUDA_OK(cudaStreamEndCapture(st, &gr));
                CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run in capture: %s", what, dcpattn_last_error());
                CUDA_OK(cudaGraphInstantiate(&ge, gr, 0));
                CUDA_OK(cudaMemcpy(d_ids, ids2, 4 * (size_t)(total_q * stride), cudaMemcpyHostToDevice));
                CUDA_OK(cudaMemset(d_out[r], 0xff, 2 * (size_t)no));
                CUDA_OK(cudaMemset(d_lse[r], 0xff, 4 * (size_t)rows));
                CUDA_OK(cudaGraphLaunch(ge, st));
                CUDA_OK(cudaStreamSynchronize(st));
                gpu_download(h_out, d_out[r], 2 * (size_t)no);
                gpu_download(h_lse, d_lse[r], 4 * (size_t)rows);
                in.ids = ids2;
                refs(c, W, r, &in, g_o, g_l, gb_o, gb_l);
                eo = ref_compare(g_o, h_out, c->dtype, no);
                bo = ref_compare(g_o, gb_o, REF_F64, no);
                el = ref_compare(g_l, h_lse, REF_FP32, rows);
                bl = ref_compare(g_l, gb_l, REF_F64, rows);
                CHECK(ref_err_within(&eo, &bo, FLOOR, FLOOR) && ref_err_within(&el, &bl, 2e-3, 1e-4),
                      "%s r=%d: graph replay with new ids: out %s", what, r, ref_err_str(&eo));
                /* the ids back, and this rank's partial with them for the merge below */
                CUDA_OK(cudaMemcpy(d_ids, ids, 4 * (size_t)(total_q * stride), cudaMemcpyHostToDevice));
                CUDA_OK(cudaGraphLaunch(ge, st));
                CUDA_OK(cudaStreamSynchronize(st));
                CUDA_OK(cudaGraphExecDestroy(ge));
                CUDA_OK(cudaGraphDestroy(gr));
                CUDA_OK(cudaStreamDestroy(st));
                free(g_o), free(g_l), free(gb_o), free(gb_l);
            }
            {
                int64_t empty = 0;
                for (i = 0; i < rows; i++) empty += r_l[i] == -INFINITY;
                printf("  %-110s r=%d out %.2e lse %.2e empty rows %lld/%lld\n", what, r, eo.max_abs, el.max_abs,
                       (long long)empty, (long long)rows);
            }
            dcpattn_attn_plan_destroy(plan);
        }
        cudaFree(d_k), cudaFree(d_bt), cudaFree(d_used), cudaFree(d_glob);
        if (cache != sh.k_cache) free(cache);
        ref_shard_free(&sh);
        free(h_out), free(h_lse);
    }

    /* the W partials merged (dcpattn_merge) == unsharded sparse attention with the sink */
    {
        ref_shard_params sp;
        ref_shard sh;
        ref_sparse_inputs in;
        dcpattn_merge_args m;
        const void *os[SMAXW];
        const float *ls[SMAXW];
        uint16_t *h_m = (uint16_t *)malloc(2 * (size_t)no);
        float *h_ml = (float *)malloc(4 * (size_t)rows);
        void *cache;
        size_t cbytes;
        ref_err eo, bo, el, bl;
        memset(&sp, 0, sizeof sp);
        sp.hkv = 1;
        sp.dqk = DQK;
        sp.page_size = c->ps;
        sp.fill = REF_BF16_NAN;
        sp.v_alias_k = 1;
        CHECK(ref_shard_build(&sh, &sp, B, c->L, kgc, NULL) == 0, "%s: unsharded: %s", what, ref_error());
        cache = rank_cache(&sh, c, &cbytes);
        memset(&in, 0, sizeof in);
        in.batch = B;
        in.q = q;
        in.cache = cache;
        in.cache_type = c->fp8 ? REF_FP8DS : 0;
        in.num_pages = sh.num_pages;
        in.block_table = sh.block_table;
        in.block_table_stride = sh.block_table_stride;
        in.cu_seqlens_q = cu;
        in.seqused_k = sh.seqused_k;
        in.seqused_k_global = sh.seqused_k_global;
        in.ids = ids;
        in.ids_stride = stride;
        in.topk = topk;
        in.counts = c->counts ? counts : NULL;
        in.sinks = c->sinks ? sinks : NULL;
        refs(c, 1, 0, &in, r_o, r_l, b_o, b_l);
        d_m = gpu_poisoned(2 * (size_t)no, 0xff);
        d_ml = (float *)gpu_poisoned(4 * (size_t)rows, 0xff);
        for (r = 0; r < W; r++) os[r] = d_out[r], ls[r] = d_lse[r];
        memset(&m, 0, sizeof m);
        m.num_states = W;
        m.rows = total_q;
        m.heads = hq;
        m.head_dim = DV;
        m.in_dtype = (dcpattn_dtype)c->dtype;
        m.o = os;
        m.lse = ls;
        m.out = d_m;
        m.lse_out = d_ml;
        m.lse_base2_in = m.lse_base2_out = c->base2;
        DC_OK(dcpattn_merge(ctx, &m, 0));
        CUDA_OK(cudaDeviceSynchronize());
        gpu_download(h_m, d_m, 2 * (size_t)no);
        gpu_download(h_ml, d_ml, 4 * (size_t)rows);
        eo = ref_compare(r_o, h_m, c->dtype, no);
        bo = ref_compare(r_o, b_o, REF_F64, no);
        el = ref_compare(r_l, h_ml, REF_FP32, rows);
        /* the partials were rounded to the dtype once more before the merge: twice the floor */
        CHECK(ref_err_within(&eo, &bo, 2 * FLOOR, 2 * FLOOR), "%s: merged out %s (baseline %.3g / %.3g)",
              what, ref_err_str(&eo), bo.max_abs, bo.rel_fro);
        bl = ref_compare(r_l, b_l, REF_F64, rows);
        CHECK(ref_err_within(&el, &bl, 2e-3, 1e-4), "%s: merged lse %s", what, ref_err_str(&el));
        cudaFree(d_m), cudaFree(d_ml);
        if (cache != sh.k_cache) free(cache);
        ref_shard_free(&sh);
        free(h_m), free(h_ml);
    }
    for (r = 0; r < W; r++) cudaFree(d_out[r]), cudaFree(d_lse[r]);
    cudaFree(d_q), cudaFree(d_ids), cudaFree(d_counts), cudaFree(d_cu), cudaFree(d_sinks);
    for (b = 0; b < B; b++) free(kg[b]);
    free(q), free(ids), free(ids2), free(counts), free(r_o), free(r_l), free(b_o), free(b_l);
}

int main(void) {
    static const sp_case cases[] = {
        /* fp8, dtype, hq, ps, W, I, topk, B, q_len[], L[], counts, sinks, base2, stride_pad, graph */
        {0, DCPATTN_BF16, 16, 64, 1, 1, 64, 3, {1, 3, 16}, {100, 3000, 40}, 0, 0, 0, 0, 0},
        {0, DCPATTN_BF16, 64, 16, 2, 1, 512, 2, {2, 5}, {1500, 300}, 1, 1, 0, 0, 0},
        {0, DCPATTN_BF16, 128, 64, 3, 3, 512, 2, {1, 4}, {2000, 9}, 0, 1, 1, 8, 0},
        {1, DCPATTN_BF16, 128, 64, 1, 1, 2048, 2, {2, 1}, {5000, 2100}, 0, 1, 0, 0, 0},
        {1, DCPATTN_BF16, 16, 64, 8, 64, 2048, 3, {2, 1, 3}, {9000, 100, 700}, 1, 1, 0, 0, 0},
        {1, DCPATTN_BF16, 64, 128, 2, 128, 512, 2, {16, 3}, {4000, 200}, 0, 0, 0, 16, 0},
        {0, DCPATTN_FP16, 32, 32, 8, 1, 64, 4, {1, 2, 3, 4}, {50, 500, 5, 1000}, 0, 1, 0, 0, 0},
        {0, DCPATTN_BF16, 128, 16, 8, 16, 2048, 1, {2}, {20000}, 0, 1, 0, 0, 1},
        {0, DCPATTN_BF16, 20, 256, 3, 64, 64, 2, {1, 2}, {3000, 64}, 1, 1, 0, 0, 1},
        {1, DCPATTN_BF16, 128, 192, 2, 3, 64, 2, {8, 1}, {600, 1}, 0, 1, 1, 0, 1},
        {0, DCPATTN_BF16, 80, 64, 1, 1, 512, 1, {3}, {1000}, 0, 1, 0, 0, 0},
        {1, DCPATTN_BF16, 16, 64, 1, 1, 2048, 4, {1, 1, 2, 1}, {70000, 3000, 2048, 5}, 1, 0, 0, 0, 1},
    };
    dcpattn_context *ctx;
    int i;
    if (!gpu_test_begin(&seed, &ctx)) return check_summary();
    for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) run_case(ctx, &cases[i]);
    dcpattn_context_destroy(ctx);
    return check_summary();
}
