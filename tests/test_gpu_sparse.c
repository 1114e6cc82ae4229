/* test_gpu_sparse — sparse MLA (desc.sparse_topk) through the public API, against the float64
   CPU reference (tests/ref.h, ref_sparse_attn) on fresh random inputs: for every rank r of W
   in {1, 2, 3, 8}, interleaves 1, 3, 16, 64 and a page, pages of 16..256, top-k 64, 512 and
   2048, q_len 1..16 varlen, Hq 4..128 (also 20 and 80: partial head blocks; at most 16 on sm_90:
   the narrow tile), bf16, fp16 and
   the 656-byte FP8 cache; ids with about 30 % -1, ids past the length, repeats, tokens whose
   list is all -1 and ranks that own nothing, optional per-token counts, padded id rows, sinks
   (rank 0). Outputs are poisoned (NaN) before every launch, unused cache slots and pages are
   NaN (FP8: 0xff bytes, NaN values and NaN scales, also in every row no id names): a read of
   one shows. Each rank's out and lse are held to twice the error of the same math in the
   input precision plus a floor (out 2e-3; lse 2e-3 absolute, 1e-4 relative); then the W
   partials, merged by dcpattn_merge, must equal unsharded sparse attention with the sink.
   Some cases capture the run in a CUDA graph, change the ids on the device and replay: the
   result must follow the new ids. On sm_90 the FP8 cases take the wgmma kernel (variant
   ..._sm90, which keeps its kept rows in the workspace; every other plan needs none) and run a
   second time in a context of arch compute_80, whose plans take the mma.sync kernel that serves
   every other GPU. Then the dequantization alone, value by value (dequant_case: Q = 0, every
   e4m3 encoding under scales of every kind, on both kernels). Without a GPU it says so and
   runs nothing.

   Every reference of a case is built before its GPU work, and the rank references merged on
   the CPU must equal the unsharded one. `test_gpu_sparse --ref-only` does that CPU half alone,
   with no GPU, and prints the seconds of each case and the rows compared (DCPATTN_TEST_SEED
   fixes the inputs, default 1): 2.3 s of CPU for all 12 cases on an x86-64 core. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>

#include "check.h"
#include "ref.h"
#define GPU_UTIL_CASE_FAIL
#include "gpu_util.h"

enum { DQK = 576, DV = 512, SMAXB = 4, SMAXW = 8 };
/* sp_case.fp8: the cache */
enum { KV16 = 0, FP8DS = 1, E4M3 = 2 };
static const double FLOOR = 2e-3; /* as tests/test_gpu_mla.c */

static uint64_t seed;

typedef struct sp_case {
    int fp8; /* KV16 (the dtype's rows), FP8DS (656-byte rows), E4M3 (576 bytes, per-tensor scales) */
    int dtype, hq, ps, W, I, topk, B;
    int q_len[SMAXB];
    int64_t L[SMAXB];
    int counts, sinks, base2, stride_pad, graph;
} sp_case;

/* One reference output and its baseline (the same math in the input precision). */
typedef struct sp_ref {
    double *o, *l, *bo, *bl;
} sp_ref;

typedef struct sp_rank {
    ref_shard sh;
    void *cache; /* as the kernel reads it: sh.k_cache, or the FP8 rows */
    size_t cache_bytes;
    sp_ref ref, replay; /* replay: with ids2 (graph cases, last rank) */
} sp_rank;

/* A case's inputs and every reference it is compared with, built before the GPU runs. */
typedef struct sp_data {
    int32_t cu[SMAXB + 1];
    int total_q, max_q;
    int64_t stride, rows, no;
    uint16_t *kg[SMAXB], *q;
    uint8_t *kg8[SMAXB]; /* FP8 cases: the global rows, each quantized once */
    float scales[2];     /* E4M3: k_scale, v_scale */
    int32_t *ids, *ids2, *counts;
    float sinks[128];
    sp_rank rank[SMAXW];
    sp_ref own;                 /* the unsharded reference where W > 1 */
    const sp_ref *unsharded;    /* with the sink: &own, or rank 0's where W = 1 */
    int64_t with_keys, empty;   /* unsharded rows that attend to a key; rows with lse -inf */
} sp_data;

static void case_name(const sp_case *c, char *what, size_t n) {
    snprintf(what, n, "sparse %s hq=%d ps=%d W=%d I=%d topk=%d B=%d counts=%d sinks=%d base2=%d pad=%d graph=%d",
             c->fp8 == FP8DS ? "fp8ds" : c->fp8 == E4M3 ? (c->dtype == DCPATTN_FP16 ? "fp16/e4m3" : "bf16/e4m3")
             : c->dtype == DCPATTN_FP16 ? "fp16" : "bf16", c->hq, c->ps, c->W, c->I, c->topk, c->B,
             c->counts, c->sinks, c->base2, c->stride_pad, c->graph);
}

/* Shard sh (world W, rank r) of the global keys, and its cache as the kernel reads it:
   bf16/fp16 rows of 576 (NaN where unused), or FP8 rows of 656 or 576 bytes (0xff where
   unused) copied from d->kg8. */
static int raw_row(const sp_case *c) { return c->fp8 == FP8DS ? REF_FP8DS_ROW : DQK; }
static void shard(sp_rank *rk, const sp_case *c, const sp_data *d, int W, int r, int spare, uint64_t page_seed) {
    ref_shard_params sp;
    ref_shard *sh = &rk->sh;
    const uint16_t *kgc[SMAXB];
    int64_t slots, l;
    int b;
    uint8_t *c8;
    for (b = 0; b < c->B; b++) kgc[b] = d->kg[b];
    memset(&sp, 0, sizeof sp);
    sp.hkv = 1;
    sp.dqk = DQK;
    sp.page_size = c->ps;
    sp.world = W;
    sp.rank = r;
    sp.interleave = c->I;
    sp.fill = c->dtype == DCPATTN_FP16 ? REF_FP16_NAN : REF_BF16_NAN;
    sp.extra_pages = 2 * spare;
    sp.bt_extra_cols = spare;
    sp.seed = page_seed;
    sp.v_alias_k = 1;
    CHECK(ref_shard_build(sh, &sp, c->B, c->L, kgc, NULL) == 0, "shard W=%d r=%d: %s", W, r, ref_error());
    slots = sh->num_pages * c->ps;
    if (!c->fp8) {
        rk->cache = sh->k_cache;
        rk->cache_bytes = (size_t)(slots * DQK) * 2;
        return;
    }
    c8 = (uint8_t *)malloc((size_t)(slots * raw_row(c)));
    memset(c8, 0xff, (size_t)(slots * raw_row(c)));
    for (b = 0; b < c->B; b++)
        for (l = 0; l < sh->seqused_k[b]; l++) {
            const int64_t page = sh->block_table[b * sh->block_table_stride + l / c->ps];
            memcpy(c8 + (page * c->ps + l % c->ps) * raw_row(c), d->kg8[b] + ref_global_of_local(l, W, r, c->I) * raw_row(c),
                   (size_t)raw_row(c));
        }
    rk->cache = c8;
    rk->cache_bytes = (size_t)(slots * raw_row(c));
}
static void shard_free(sp_rank *rk) {
    if (rk->cache != rk->sh.k_cache) free(rk->cache);
    ref_shard_free(&rk->sh);
}

/* f = the reference of rank r of W over rk's shard with the given ids and sinks: exact, and
   the same math in the input precision (the baseline). */
static void refs(const sp_case *c, const sp_data *d, int W, int r, const sp_rank *rk, const int32_t *ids,
                 const float *sinks, sp_ref *f) {
    ref_attn_params p;
    ref_sparse_inputs in;
    f->o = (double *)malloc(sizeof(double) * (size_t)d->no);
    f->bo = (double *)malloc(sizeof(double) * (size_t)d->no);
    f->l = (double *)malloc(sizeof(double) * (size_t)d->rows);
    f->bl = (double *)malloc(sizeof(double) * (size_t)d->rows);
    memset(&in, 0, sizeof in);
    in.batch = c->B;
    in.q = d->q;
    in.cache = rk->cache;
    in.cache_type = c->fp8 == FP8DS ? REF_FP8DS : c->fp8 == E4M3 ? REF_E4M3 : 0;
    in.num_pages = rk->sh.num_pages;
    in.block_table = rk->sh.block_table;
    in.block_table_stride = rk->sh.block_table_stride;
    in.cu_seqlens_q = d->cu;
    in.seqused_k = rk->sh.seqused_k;
    in.seqused_k_global = rk->sh.seqused_k_global;
    in.ids = ids;
    in.ids_stride = d->stride;
    in.topk = c->topk;
    in.counts = c->counts ? d->counts : NULL;
    in.sinks = sinks;
    memset(&p, 0, sizeof p);
    p.hq = c->hq;
    p.hkv = 1;
    p.dqk = DQK;
    p.dv = DV;
    p.page_size = c->ps;
    p.world = W;
    p.rank = r;
    p.interleave = c->I;
    p.lse_base2 = c->base2;
    p.dtype = c->dtype;
    p.k_scale = &d->scales[0];
    p.v_scale = &d->scales[1];
    CHECK(ref_sparse_attn(&p, &in, f->o, f->l) == 0, "ref: %s", ref_error());
    p.emulate_lowp = 1;
    CHECK(ref_sparse_attn(&p, &in, f->bo, f->bl) == 0, "ref lowp: %s", ref_error());
}
static void ref_free(sp_ref *f) {
    free(f->o), free(f->l), free(f->bo), free(f->bl);
    memset(f, 0, sizeof *f);
}

/* The CPU half of a case: random inputs, each rank's shard, cache and references, and the
   unsharded reference, which the rank references merged on the CPU must equal (the partials
   the GPU merges are compared with it, so a reference that broke the DCP identity would
   fail every W > 1 case). */
static void prepare(const sp_case *c, const char *what, sp_data *d) {
    const int B = c->B, topk = c->topk;
    int64_t k;
    int b, i, r;
    memset(d, 0, sizeof *d);
    d->stride = topk + c->stride_pad;
    d->max_q = 1;
    for (b = 0; b < B; b++) {
        d->cu[b + 1] = d->cu[b] + c->q_len[b];
        if (c->q_len[b] > d->max_q) d->max_q = c->q_len[b];
    }
    d->total_q = d->cu[B];
    d->rows = (int64_t)d->total_q * c->hq;
    d->no = d->rows * DV;
    for (b = 0; b < B; b++) {
        d->kg[b] = (uint16_t *)malloc(2 * (size_t)(c->L[b] * DQK + 1));
        ref_fill_uniform(d->kg[b], c->L[b] * DQK, c->dtype, 1.0, &seed);
    }
    d->q = (uint16_t *)malloc(2 * (size_t)(d->rows * DQK));
    ref_fill_uniform(d->q, d->rows * DQK, c->dtype, 3.0, &seed);
    d->ids = (int32_t *)malloc(4 * (size_t)(d->total_q * d->stride));
    d->ids2 = (int32_t *)malloc(4 * (size_t)(d->total_q * d->stride));
    d->counts = (int32_t *)malloc(4 * (size_t)d->total_q);
    for (b = 0; b < B; b++)
        for (i = 0; i < c->q_len[b]; i++) {
            const int t = d->cu[b] + i;
            ref_sparse_ids(d->ids + t * d->stride, d->stride, topk, c->L[b], c->q_len[b], i, t == 1, &seed);
            ref_sparse_ids(d->ids2 + t * d->stride, d->stride, topk, c->L[b], c->q_len[b], i, 0, &seed);
            d->counts[t] = t % 3 == 2 ? 0 : (int32_t)(ref_rand_u64(&seed) % (uint64_t)(topk + 10)) - 3;
        }
    for (i = 0; i < c->hq; i++) d->sinks[i] = i % 7 == 6 ? -INFINITY : (float)(ref_rand_uniform(&seed) * 6);
    /* FP8: only the rows an id names are quantized (most of the time of a long sequence); the
       rest stay 0xff, NaN like an unused slot, so that reading one shows. E4M3: the bytes of the
       values over 1/32 (within e4m3's range), k_scale and v_scale two different values near it */
    d->scales[0] = (float)(0.02 + 0.02 * ref_rand_uniform(&seed));
    d->scales[1] = (float)(0.01 + 0.04 * ref_rand_uniform(&seed));
    for (b = 0; c->fp8 && b < B; b++) {
        const int rr = raw_row(c);
        d->kg8[b] = (uint8_t *)malloc((size_t)(c->L[b] * rr + 1));
        memset(d->kg8[b], 0xff, (size_t)(c->L[b] * rr + 1));
        for (k = (int64_t)d->cu[b] * d->stride; k < (int64_t)d->cu[b + 1] * d->stride; k++) {
            const int32_t id[2] = {d->ids[k], d->ids2[k]};
            for (i = 0; i < 2; i++) {
                uint8_t *row = d->kg8[b] + (int64_t)id[i] * rr;
                const uint16_t *src = d->kg[b] + (int64_t)id[i] * DQK;
                int e;
                if (id[i] < 0 || id[i] >= c->L[b] || row[0] != 0xff) continue; /* e4m3 0xff: NaN, never quantized */
                if (c->fp8 == FP8DS) ref_fp8ds_quantize(src, row);
                else
                    for (e = 0; e < DQK; e++) row[e] = ref_double_to_e4m3(ref_h2d(src[e], c->dtype) * 32.0);
            }
        }
    }

    for (r = 0; r < c->W; r++) {
        sp_rank *rk = &d->rank[r];
        const float *sinks = c->sinks && r == 0 ? d->sinks : NULL;
        shard(rk, c, d, c->W, r, 1, ref_rand_u64(&seed));
        refs(c, d, c->W, r, rk, d->ids, sinks, &rk->ref);
        if (c->graph && r == c->W - 1) refs(c, d, c->W, r, rk, d->ids2, sinks, &rk->replay);
    }
    d->unsharded = &d->rank[0].ref; /* W = 1: rank 0, which holds the sink, is unsharded attention */
    if (c->W > 1) {
        sp_rank whole;
        ref_merge_args m;
        const void *os[SMAXW], *ls[SMAXW];
        double *mo = (double *)malloc(sizeof(double) * (size_t)d->no);
        double *ml = (double *)malloc(sizeof(double) * (size_t)d->rows);
        ref_err eo, el;
        memset(&whole, 0, sizeof whole);
        shard(&whole, c, d, 1, 0, 0, 0);
        refs(c, d, 1, 0, &whole, d->ids, c->sinks ? d->sinks : NULL, &d->own);
        shard_free(&whole);
        d->unsharded = &d->own;
        for (r = 0; r < c->W; r++) os[r] = d->rank[r].ref.o, ls[r] = d->rank[r].ref.l;
        memset(&m, 0, sizeof m);
        m.num_states = c->W;
        m.rows = d->total_q;
        m.heads = c->hq;
        m.head_dim = DV;
        m.o = os;
        m.lse = ls;
        m.lse_base2_in = m.lse_base2_out = c->base2;
        ref_merge(&m, mo, ml);
        eo = ref_compare(d->own.o, mo, REF_F64, d->no);
        el = ref_compare(d->own.l, ml, REF_F64, d->rows);
        CHECK(ref_err_ok(&eo, 1e-12, 1e-12) && ref_err_ok(&el, 1e-12, 1e-12),
              "%s: the rank references merged != the unsharded one: out %s", what, ref_err_str(&eo));
        free(mo), free(ml);
    }
    for (k = 0; k < d->rows; k++) {
        const double *o = d->unsharded->o + k * DV;
        for (i = 0; i < DV && o[i] == 0; i++) continue;
        d->with_keys += i < DV;
        d->empty += d->unsharded->l[k] == -INFINITY;
    }
}

static void release(const sp_case *c, sp_data *d) {
    int b, r;
    for (r = 0; r < c->W; r++) {
        shard_free(&d->rank[r]);
        ref_free(&d->rank[r].ref);
        if (d->rank[r].replay.o) ref_free(&d->rank[r].replay);
    }
    if (d->own.o) ref_free(&d->own);
    for (b = 0; b < c->B; b++) free(d->kg[b]), free(d->kg8[b]);
    free(d->q), free(d->ids), free(d->ids2), free(d->counts);
}

/* out and lse of one launch against f, within twice the baseline's error plus the floors */
static int compare(const sp_case *c, const sp_data *d, const sp_ref *f, const uint16_t *out, const float *lse,
                   double floor, ref_err *eo, ref_err *el, ref_err *bo) {
    ref_err bl;
    *eo = ref_compare(f->o, out, c->dtype, d->no);
    *bo = ref_compare(f->o, f->bo, REF_F64, d->no);
    *el = ref_compare(f->l, lse, REF_FP32, d->rows);
    /* lse: 2x the baseline's error (a dequantized FP8 value rounded to bf16) + the floor */
    bl = ref_compare(f->l, f->bl, REF_F64, d->rows);
    return ref_err_within(eo, bo, floor, floor) && ref_err_within(el, &bl, 2e-3, 1e-4);
}

/* A sparse MLA plan's descriptor, W = 1 (the caller sets the DCP fields for more) */
static void sparse_desc(dcpattn_attn_desc *dd, int dtype, int fp8, int hq, int ps, int B, int max_q, int total_q,
                        int max_seqlen_k, int topk) {
    memset(dd, 0, sizeof *dd);
    dd->dtype = (dcpattn_dtype)dtype;
    dd->kv_dtype = fp8 == FP8DS ? DCPATTN_FP8_DS_MLA : fp8 == E4M3 ? DCPATTN_FP8_E4M3 : DCPATTN_DTYPE_DEFAULT;
    dd->num_q_heads = hq;
    dd->num_kv_heads = 1;
    dd->head_dim = DQK;
    dd->head_dim_v = DV;
    dd->page_size = ps;
    dd->dcp_world = 1;
    dd->dcp_interleave = 1;
    dd->max_batch = B;
    dd->max_q_len = max_q;
    dd->max_total_q = total_q;
    dd->max_seqlen_k = max_seqlen_k;
    dd->sparse_topk = topk;
}

/* A sparse run's arguments (K and V the same cache) */
static void sparse_args(dcpattn_attn_args *a, int B, const void *q, const void *k, int64_t num_pages,
                        const int32_t *bt, int64_t bt_stride, const int32_t *cu, const int32_t *used, void *out,
                        float *lse, const int32_t *ids, int64_t ids_stride) {
    memset(a, 0, sizeof *a);
    a->batch = B;
    a->q = q;
    a->k_cache = a->v_cache = k;
    a->num_pages = num_pages;
    a->block_table = bt;
    a->block_table_stride = bt_stride;
    a->cu_seqlens_q = cu;
    a->seqused_k = used;
    a->out = out;
    a->lse = lse;
    a->topk_ids = ids;
    a->topk_ids_stride = ids_stride;
}

/* rows compared over all cases, printed at the end: a run that compared nothing shows */
static int64_t g_rows, g_rows_with_keys;

static void run_case(dcpattn_context *ctx, int sm90, const sp_case *c, const char *what, const sp_data *d) {
    const int B = c->B, hq = c->hq, topk = c->topk, W = c->W;
    const int64_t rows = d->rows, no = d->no;
    void *d_out[SMAXW];
    float *d_lse[SMAXW];
    void *d_q, *d_m;
    float *d_ml;
    int32_t *d_ids, *d_counts, *d_cu;
    float *d_sinks, *d_scales;
    int r;

    d_q = gpu_upload(d->q, 2 * (size_t)(rows * DQK));
    d_ids = (int32_t *)gpu_upload(d->ids, 4 * (size_t)(d->total_q * d->stride));
    d_counts = (int32_t *)gpu_upload(d->counts, 4 * (size_t)d->total_q);
    d_cu = (int32_t *)gpu_upload(d->cu, 4 * (size_t)(B + 1));
    d_sinks = (float *)gpu_upload(d->sinks, 4 * (size_t)hq);
    d_scales = (float *)gpu_upload(d->scales, sizeof d->scales);

    for (r = 0; r < W; r++) {
        const sp_rank *rk = &d->rank[r];
        const ref_shard *sh = &rk->sh;
        dcpattn_attn_desc dd;
        dcpattn_attn_args a;
        dcpattn_attn_plan *plan = NULL;
        void *d_k, *d_ws = NULL;
        size_t ws = 0;
        int32_t *d_bt, *d_used, *d_glob;
        uint16_t *h_out = (uint16_t *)malloc(2 * (size_t)no);
        float *h_lse = (float *)malloc(4 * (size_t)rows);
        ref_err eo, bo, el;
        dcpattn_status s;

        d_k = gpu_upload(rk->cache, rk->cache_bytes);
        d_bt = (int32_t *)gpu_upload(sh->block_table, 4 * (size_t)(B * sh->block_table_stride));
        d_used = (int32_t *)gpu_upload(sh->seqused_k, 4 * (size_t)B);
        d_glob = (int32_t *)gpu_upload(sh->seqused_k_global, 4 * (size_t)B);
        d_out[r] = gpu_poisoned(2 * (size_t)no, 0xff);
        d_lse[r] = (float *)gpu_poisoned(4 * (size_t)rows, 0xff);

        sparse_desc(&dd, c->dtype, c->fp8, hq, c->ps, B, d->max_q, d->total_q, (int)(sh->block_table_stride * c->ps),
                    topk);
        dd.dcp_world = W;
        dd.dcp_rank = r;
        dd.dcp_interleave = c->I;
        dd.lse_base2 = c->base2;
        s = dcpattn_attn_plan_create(ctx, &dd, &plan);
        CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: plan: %s", what, dcpattn_last_error());
        if (s == DCPATTN_STATUS_SUCCESS) {
            const char *v = dcpattn_attn_variant(plan);
            const int wg = sm90 && c->fp8 != KV16; /* the wgmma kernel: its rows in the workspace */
            ws = dcpattn_attn_workspace_size(plan);
            CHECK(strncmp(v, "sparse_", 7) == 0 && (strstr(v, "_sm90") != NULL) == wg &&
                      (wg ? ws == (((size_t)B * d->max_q * ((hq + 63) / 64) * topk * 8 + 255) & ~(size_t)255) : ws == 0),
                  "%s: variant %s, workspace %zu", what, v, ws);
            if (ws) CUDA_OK(cudaMalloc(&d_ws, ws));
            sparse_args(&a, B, d_q, d_k, sh->num_pages, d_bt, sh->block_table_stride, d_cu, d_used, d_out[r], d_lse[r],
                        d_ids, d->stride);
            a.seqused_k_global = d_glob;
            a.topk_count = c->counts ? d_counts : NULL;
            a.sinks = c->sinks ? d_sinks : NULL; /* every rank passes them; rank 0 applies them */
            a.k_scale = c->fp8 == E4M3 ? d_scales : NULL;
            a.v_scale = c->fp8 == E4M3 ? d_scales + 1 : NULL;
            s = dcpattn_attn_run(plan, &a, d_ws, ws, 0);
            CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run: %s", what, dcpattn_last_error());
            CUDA_OK(cudaDeviceSynchronize());
            gpu_download(h_out, d_out[r], 2 * (size_t)no);
            gpu_download(h_lse, d_lse[r], 4 * (size_t)rows);
            CHECK(compare(c, d, &rk->ref, h_out, h_lse, FLOOR, &eo, &el, &bo),
                  "%s r=%d: out %s (baseline %.3g / %.3g); lse max_abs %.3g bad %lld", what, r, ref_err_str(&eo),
                  bo.max_abs, bo.rel_fro, el.max_abs, (long long)el.bad);
            g_rows += rows;
            if (c->graph && r == W - 1) { /* capture, change the ids on the device, replay */
                cudaStream_t st;
                cudaGraph_t gr;
                cudaGraphExec_t ge;
                ref_err go, gl, gbo;
                CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
                CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
                s = dcpattn_attn_run(plan, &a, d_ws, ws, st);
                CUDA_OK(cudaStreamEndCapture(st, &gr));
                CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: run in capture: %s", what, dcpattn_last_error());
                CUDA_OK(cudaGraphInstantiate(&ge, gr, 0));
                CUDA_OK(cudaMemcpy(d_ids, d->ids2, 4 * (size_t)(d->total_q * d->stride), cudaMemcpyHostToDevice));
                CUDA_OK(cudaMemset(d_out[r], 0xff, 2 * (size_t)no));
                CUDA_OK(cudaMemset(d_lse[r], 0xff, 4 * (size_t)rows));
                CUDA_OK(cudaGraphLaunch(ge, st));
                CUDA_OK(cudaStreamSynchronize(st));
                gpu_download(h_out, d_out[r], 2 * (size_t)no);
                gpu_download(h_lse, d_lse[r], 4 * (size_t)rows);
                CHECK(compare(c, d, &rk->replay, h_out, h_lse, FLOOR, &go, &gl, &gbo),
                      "%s r=%d: graph replay with new ids: out %s", what, r, ref_err_str(&go));
                g_rows += rows;
                /* the ids back, and this rank's partial with them for the merge below */
                CUDA_OK(cudaMemcpy(d_ids, d->ids, 4 * (size_t)(d->total_q * d->stride), cudaMemcpyHostToDevice));
                CUDA_OK(cudaGraphLaunch(ge, st));
                CUDA_OK(cudaStreamSynchronize(st));
                CUDA_OK(cudaGraphExecDestroy(ge));
                CUDA_OK(cudaGraphDestroy(gr));
                CUDA_OK(cudaStreamDestroy(st));
            }
            {
                int64_t empty = 0, i;
                for (i = 0; i < rows; i++) empty += rk->ref.l[i] == -INFINITY;
                printf("  %-110s r=%d out %.2e lse %.2e empty rows %lld/%lld\n", what, r, eo.max_abs, el.max_abs,
                       (long long)empty, (long long)rows);
            }
            dcpattn_attn_plan_destroy(plan);
        }
        cudaFree(d_k), cudaFree(d_bt), cudaFree(d_used), cudaFree(d_glob), cudaFree(d_ws);
        free(h_out), free(h_lse);
    }

    /* the W partials merged (dcpattn_merge) == unsharded sparse attention with the sink */
    {
        dcpattn_merge_args m;
        const void *os[SMAXW];
        const float *ls[SMAXW];
        uint16_t *h_m = (uint16_t *)malloc(2 * (size_t)no);
        float *h_ml = (float *)malloc(4 * (size_t)rows);
        ref_err eo, bo, el;
        d_m = gpu_poisoned(2 * (size_t)no, 0xff);
        d_ml = (float *)gpu_poisoned(4 * (size_t)rows, 0xff);
        for (r = 0; r < W; r++) os[r] = d_out[r], ls[r] = d_lse[r];
        memset(&m, 0, sizeof m);
        m.num_states = W;
        m.rows = d->total_q;
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
        /* the partials were rounded to the dtype once more before the merge: twice the floor */
        CHECK(compare(c, d, d->unsharded, h_m, h_ml, 2 * FLOOR, &eo, &el, &bo),
              "%s: merged out %s (baseline %.3g / %.3g); lse max_abs %.3g bad %lld", what, ref_err_str(&eo),
              bo.max_abs, bo.rel_fro, el.max_abs, (long long)el.bad);
        g_rows += rows;
        g_rows_with_keys += d->with_keys;
        cudaFree(d_m), cudaFree(d_ml);
        free(h_m), free(h_ml);
    }
    for (r = 0; r < W; r++) cudaFree(d_out[r]), cudaFree(d_lse[r]);
    cudaFree(d_q), cudaFree(d_ids), cudaFree(d_counts), cudaFree(d_cu), cudaFree(d_sinks), cudaFree(d_scales);
}

/* Dequantization, value by value: Q = 0 makes every score 0, so a token whose kept ids all name
   copies of one 656-byte row gets out = that row's V exactly (P = 1 for each, l = their count,
   lse = log(count)). Token t of sequence b keeps 64 - 8 (t % 3) ids (the rest -1), all naming
   copies of its own row, whose 512 bytes walk through every e4m3 encoding but the NaNs and
   whose four scales come from one kind per (token, block): powers of two, other bf16 values,
   any fp32, and values of 128 and more (bf16 or not). Each value must be bf16(e4m3 * scale),
   rounded to nearest, or within 2^-7 of an ulp of that where the product lies near a tie (the
   kernels round a product of the scale's two bf16 halves, or of fp32). Hq 128 and 16, q_len 4,
   on every kernel that reads the FP8 cache (ctx80: the mma.sync one as well). */
static void dequant_case(dcpattn_context *ctx, int hq, const char *what) {
    enum { B = 3, QL = 4, TOPK = 64, PS = 64 };
    const int T = B * QL, L = QL * TOPK, pages = B * L / PS;
    const int64_t rows = (int64_t)T * hq;
    uint8_t *cache = (uint8_t *)calloc((size_t)B * L, REF_FP8DS_ROW);
    uint16_t *q = (uint16_t *)calloc((size_t)(rows * DQK), 2), *out = (uint16_t *)malloc((size_t)(rows * DV) * 2);
    float *lse = (float *)malloc(4 * (size_t)rows);
    int32_t ids[B * QL * TOPK], bt[B * (L / PS)], used[B], cu[B + 1], kept[B * QL];
    uint8_t rowv[B * QL][REF_FP8DS_ROW];
    dcpattn_attn_desc dd;
    dcpattn_attn_args a;
    dcpattn_attn_plan *plan = NULL;
    void *d_k, *d_q, *d_out, *d_ws = NULL;
    float *d_lse;
    int32_t *d_ids, *d_bt, *d_used, *d_cu;
    size_t ws;
    int64_t bad = 0, checked = 0, i;
    int b, t, k, d;
    for (t = 0; t < T; t++) { /* token t's row */
        uint8_t *r = rowv[t];
        const int off = (int)(ref_rand_u64(&seed) % 256);
        for (d = 0; d < 512; d++) {
            const uint8_t e = (uint8_t)((d + off) % 256);
            r[d] = (e & 0x7f) == 0x7f ? (uint8_t)(e & 0x80) : e; /* NaN -> a signed zero */
        }
        for (k = 0; k < 4; k++) {
            const int kind = (t + k) % 5, ex = (int)(ref_rand_u64(&seed) % 27) - 20;
            const float m = 1.0f + (float)(1 + ref_rand_u64(&seed) % 127) / 128.0f;
            const float sc = kind == 0 ? ldexpf(1.0f, ex)                                 /* 2^-20 .. 2^6 */
                     : kind == 1 ? ldexpf(m, ex)                                    /* bf16, not a power of two */
                     : kind == 2 ? (float)ldexp(1.0 + ref_rand_uniform(&seed) * 0.99, ex) /* any fp32 */
                     : kind == 3 ? ldexpf(m, 7 + (ex + 20) % 14)                    /* bf16, 2^7 .. 2^21 */
                                 : (float)ldexp(1.5 + ref_rand_uniform(&seed) * 0.4, 7);
            memcpy(r + 512 + 4 * k, &sc, 4);
        }
        for (d = 0; d < 64; d++) { /* RoPE: finite bf16 */
            const uint16_t h = ref_float_to_bf16((float)(ref_rand_uniform(&seed) * 2 - 1));
            memcpy(r + 528 + 2 * d, &h, 2);
        }
    }
    cu[0] = 0;
    for (b = 0; b < B; b++) {
        used[b] = L;
        cu[b + 1] = cu[b] + QL;
        for (i = 0; i < L / PS; i++) bt[b * (L / PS) + i] = (int32_t)(b * (L / PS) + (L / PS - 1 - i)); /* reversed */
        for (t = 0; t < QL; t++) {
            const int tok = b * QL + t;
            kept[tok] = TOPK - 8 * (t % 3);
            for (k = 0; k < TOPK; k++) { /* ids t*64 .. t*64 + kept - 1, rotated, then -1 */
                const int slot = (k + 5 * t) % TOPK;
                ids[tok * TOPK + slot] = k < kept[tok] ? t * TOPK + k : -1;
            }
            for (k = 0; k < TOPK; k++) { /* the copies: global id g = t*64 + k of sequence b */
                const int g = t * TOPK + k, page = bt[b * (L / PS) + g / PS];
                memcpy(cache + ((int64_t)page * PS + g % PS) * REF_FP8DS_ROW, rowv[tok], REF_FP8DS_ROW);
            }
        }
    }
    d_k = gpu_upload(cache, (size_t)B * L * REF_FP8DS_ROW);
    d_q = gpu_upload(q, 2 * (size_t)(rows * DQK));
    d_ids = (int32_t *)gpu_upload(ids, sizeof ids);
    d_bt = (int32_t *)gpu_upload(bt, sizeof bt);
    d_used = (int32_t *)gpu_upload(used, sizeof used);
    d_cu = (int32_t *)gpu_upload(cu, sizeof cu);
    d_out = gpu_poisoned(2 * (size_t)(rows * DV), 0xff);
    d_lse = (float *)gpu_poisoned(4 * (size_t)rows, 0xff);
    sparse_desc(&dd, DCPATTN_BF16, 1, hq, PS, B, QL, T, L, TOPK);
    DC_OK(dcpattn_attn_plan_create(ctx, &dd, &plan));
    ws = dcpattn_attn_workspace_size(plan);
    if (ws) CUDA_OK(cudaMalloc(&d_ws, ws));
    sparse_args(&a, B, d_q, d_k, pages, d_bt, L / PS, d_cu, d_used, d_out, d_lse, d_ids, TOPK);
    DC_OK(dcpattn_attn_run(plan, &a, d_ws, ws, 0));
    CUDA_OK(cudaDeviceSynchronize());
    gpu_download(out, d_out, 2 * (size_t)(rows * DV));
    gpu_download(lse, d_lse, 4 * (size_t)rows);
    for (i = 0; i < rows; i++) {
        const int tok = (int)(i / hq);
        const uint8_t *r = rowv[tok];
        if (fabs((double)lse[i] - log((double)kept[tok])) > 1e-5) bad++;
        for (d = 0; d < DV; d++) {
            float sc;
            double e, got, ulp;
            int ex;
            memcpy(&sc, r + 512 + 4 * (d / 128), 4);
            e = ref_e4m3_to_double(r[d]) * (double)sc;
            got = (double)ref_bf16_to_float(out[i * DV + d]);
            frexp(e, &ex);
            ulp = ldexp(1.0, ex - 8); /* bf16: 8 significant bits */
            checked++;
            if (!(fabs(got - e) <= ulp * (0.5 + 1.0 / 128))) {
                if (bad < 5)
                    fprintf(stderr, "  %s: token %d head %d channel %d: e4m3 0x%02x scale %a: got %a, want %a\n",
                            what, tok, (int)(i % hq), d, r[d], (double)sc, got, e);
                bad++;
            }
        }
    }
    CHECK(bad == 0, "%s: %lld of %lld values (and lse) not bf16(e4m3 * scale)", what, (long long)bad,
          (long long)checked);
    printf("  %-110s values %lld, bad %lld\n", what, (long long)checked, (long long)bad);
    g_rows += rows;
    dcpattn_attn_plan_destroy(plan);
    cudaFree(d_k), cudaFree(d_q), cudaFree(d_ids), cudaFree(d_bt), cudaFree(d_used), cudaFree(d_cu);
    cudaFree(d_out), cudaFree(d_lse), cudaFree(d_ws);
    free(cache), free(q), free(out), free(lse);
}

int main(int argc, char **argv) {
    check_line_buffered();
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
        /* the e4m3 cache with per-tensor scales (sm_90: the wgmma kernel, then mma.sync) */
        {2, DCPATTN_BF16, 128, 64, 1, 1, 2048, 2, {2, 1}, {5000, 2100}, 0, 1, 0, 0, 1},
        {2, DCPATTN_FP16, 64, 64, 2, 1, 512, 2, {2, 5}, {1500, 300}, 1, 1, 0, 16, 0},
        {2, DCPATTN_BF16, 16, 128, 3, 64, 64, 3, {1, 3, 16}, {900, 3000, 40}, 0, 1, 1, 0, 0},
        {2, DCPATTN_BF16, 32, 64, 8, 3, 512, 2, {4, 1}, {9000, 700}, 1, 1, 0, 0, 1},
        /* fewer than 16 heads (sm_90: the narrow tile of 16, rows past Hq empty) */
        {1, DCPATTN_BF16, 8, 64, 2, 3, 512, 2, {3, 2}, {4000, 300}, 1, 1, 0, 16, 1},
        {2, DCPATTN_FP16, 4, 192, 1, 1, 64, 2, {2, 1}, {500, 90}, 0, 1, 1, 0, 0},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    const int ref_only = argc > 1 && strcmp(argv[1], "--ref-only") == 0;
    dcpattn_context *ctx = NULL, *ctx80 = NULL;
    double total = 0;
    int sm90 = 0;
    int64_t rows = 0, with_keys = 0, empty = 0;
    int i;
    if (argc > 1 && !ref_only) {
        fprintf(stderr, "usage: %s [--ref-only]\n", argv[0]);
        return 2;
    }
    if (ref_only) {
        const char *env = getenv("DCPATTN_TEST_SEED");
        seed = env && *env ? (uint64_t)strtoull(env, NULL, 10) : 1;
        printf("seed %llu\n", (unsigned long long)seed);
    } else if (!gpu_test_begin(&seed, &ctx)) {
        return check_summary();
    } else {
        dcpattn_context_desc cd;
        int major = 0;
        CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
        sm90 = major == 9;
        memset(&cd, 0, sizeof cd);
        cd.arch = "compute_80";
        if (sm90) DC_OK(dcpattn_context_create(&cd, &ctx80));
    }
    for (i = 0; i < n; i++) {
        sp_data d;
        char what[320];
        double t0 = now_s(), dt;
        case_name(&cases[i], what, sizeof what);
        snprintf(g_case, sizeof g_case, "%s", what);
        prepare(&cases[i], what, &d);
        dt = now_s() - t0;
        total += dt;
        rows += d.rows, with_keys += d.with_keys, empty += d.empty;
        printf("  %-110s reference %6.2f s, rows %lld (%lld attend to keys, %lld empty)\n", what, dt,
               (long long)d.rows, (long long)d.with_keys, (long long)d.empty);
        fflush(stdout);
        if (!ref_only) {
            run_case(ctx, sm90, &cases[i], what, &d);
            if (ctx80 && cases[i].fp8) { /* the mma.sync kernel on the same inputs */
                char w80[340];
                snprintf(w80, sizeof w80, "%s compute_80", what);
                snprintf(g_case, sizeof g_case, "%s", w80);
                run_case(ctx80, 0, &cases[i], w80, &d);
            }
        }
        release(&cases[i], &d);
    }
    if (!ref_only) { /* the dequantization, value by value, on every kernel that reads the FP8 cache */
        static const int heads[2] = {128, 16};
        for (i = 0; i < 2; i++) {
            char what[80];
            snprintf(what, sizeof what, "sparse fp8ds dequantization hq=%d", heads[i]);
            snprintf(g_case, sizeof g_case, "%s", what);
            dequant_case(ctx, heads[i], what);
            if (ctx80) {
                snprintf(what, sizeof what, "sparse fp8ds dequantization hq=%d compute_80", heads[i]);
                snprintf(g_case, sizeof g_case, "%s", what);
                dequant_case(ctx80, heads[i], what);
            }
        }
    }
    printf("%d cases, reference %.2f s; unsharded rows %lld: %lld attend to keys, %lld empty\n", n, total,
           (long long)rows, (long long)with_keys, (long long)empty);
    if (!ref_only) {
        printf("GPU rows compared %lld (merged rows that attend to keys %lld)\n", (long long)g_rows,
               (long long)g_rows_with_keys);
        CHECK(g_rows_with_keys > 0, "no merged row attended to a key");
        dcpattn_context_destroy(ctx);
        dcpattn_context_destroy(ctx80);
    }
    CHECK(with_keys > 0 && empty > 0, "the references hold %lld rows with keys, %lld empty", (long long)with_keys,
          (long long)empty);
    return check_summary();
}
