/* test_sparse_cpu — sparse MLA without a GPU:
   - the top-k id -> rank -> local index -> page -> slot mapping of the reference against brute
     force over random W, I, page sizes and lengths, and through a real shard (each cache row
     carries its global position, so the row an id reaches names the id);
   - the 656-byte FP8 layout: offsets, scales, the dequantization error bound;
   - the reference's DCP identity: the W ranks' partials (sinks on rank 0 only) merged equal
     unsharded sparse attention with the sink, for W in {1, 2, 3, 8}, I in {1, 3, 64, page},
     ids with -1, ids past the length, repeats, per-token counts, tokens keeping nothing;
   - the reference against the dense one (ref_attn, code of its own) to 1e-12: each token's ids
     the causal prefix in order with -1 and ids past the length among them, every rank of W in
     {1, 2, 3}, bf16, fp16 and 656-byte rows whose quantization is exact, exact and
     input-precision math, the sink as documented (an error every rank shares, such as a wrong
     sign in the scores, keeps the DCP identity and fails here);
   - validation: each bad sparse descriptor or argument is rejected naming the field, good ones
     pass, and the generator's selection accepts exactly the descriptors the header accepts. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include "check.h"
#include "ref.h"

static uint64_t seed = 12345;

static int rnd(int n) { return (int)(ref_rand_u64(&seed) % (uint64_t)n); }

/* Shard r of W of B global sequences of MLA rows: NaN in unused slots, one spare page. */
static int shard_of(ref_shard *sh, int W, int r, int I, int ps, int dtype, int B, const int64_t *L,
                    const uint16_t *const *kg) {
    ref_shard_params sp;
    memset(&sp, 0, sizeof sp);
    sp.hkv = 1;
    sp.dqk = REF_SPARSE_DQK;
    sp.page_size = ps;
    sp.world = W;
    sp.rank = r;
    sp.interleave = I;
    sp.fill = dtype == REF_FP16 ? REF_FP16_NAN : REF_BF16_NAN;
    sp.extra_pages = 1;
    sp.seed = ref_rand_u64(&seed);
    sp.v_alias_k = 1;
    if (ref_shard_build(sh, &sp, B, L, kg, NULL) == 0) return 1;
    CHECK(0, "shard W=%d r=%d I=%d ps=%d: %s", W, r, I, ps, ref_error());
    return 0;
}

/* Sparse MLA reference parameters for rank r of W. */
static ref_attn_params params_of(int hq, int ps, int dtype, int W, int r, int I) {
    ref_attn_params p;
    memset(&p, 0, sizeof p);
    p.hq = hq;
    p.hkv = 1;
    p.dqk = REF_SPARSE_DQK;
    p.dv = REF_SPARSE_DV;
    p.page_size = ps;
    p.world = W;
    p.rank = r;
    p.interleave = I;
    p.dtype = dtype;
    return p;
}

/* The sparse inputs over shard sh: its bf16/fp16 cache, or (fp8) the same rows in the 656-byte
   layout, 0xff where unused, returned in *c8 for the caller to free. */
static void inputs_of(ref_sparse_inputs *in, const ref_shard *sh, int ps, int fp8, uint8_t **c8, int B,
                      const uint16_t *q, const int32_t *cu, const int32_t *ids, int64_t stride, int topk) {
    int64_t n;
    memset(in, 0, sizeof *in);
    in->batch = B;
    in->q = q;
    in->cache = sh->k_cache;
    *c8 = NULL;
    if (fp8) {
        *c8 = (uint8_t *)malloc((size_t)(sh->num_pages * ps * REF_FP8DS_ROW));
        memset(*c8, 0xff, (size_t)(sh->num_pages * ps * REF_FP8DS_ROW));
        for (n = 0; n < sh->num_pages * ps; n++)
            if (!isnan(ref_bf16_to_float(sh->k_cache[n * REF_SPARSE_DQK])))
                ref_fp8ds_quantize(sh->k_cache + n * REF_SPARSE_DQK, *c8 + n * REF_FP8DS_ROW);
        in->cache = *c8;
        in->cache_type = REF_FP8DS;
    }
    in->num_pages = sh->num_pages;
    in->block_table = sh->block_table;
    in->block_table_stride = sh->block_table_stride;
    in->cu_seqlens_q = cu;
    in->seqused_k = sh->seqused_k;
    in->seqused_k_global = sh->seqused_k_global;
    in->ids = ids;
    in->ids_stride = stride;
    in->topk = topk;
}

/* ---- mapping ---- */
static void test_mapping(void) {
    int it;
    for (it = 0; it < 300; it++) {
        const int W = 1 + rnd(8), I = 1 + rnd(70), ps = 1 + rnd(100);
        const int64_t L = rnd(3000);
        int64_t g, bad = 0, l;
        int r;
        for (g = -3; g < L + 5; g++) {
            int owners = 0;
            for (r = 0; r < W; r++) {
                const int64_t got = ref_sparse_local(g, L, W, r, I);
                int64_t want = -1;
                if (g >= 0 && g < L) /* brute force: the local index whose global position is g */
                    for (l = 0; l < ref_local_len(L, W, r, I); l++)
                        if (ref_global_of_local(l, W, r, I) == g) want = l;
                bad += got != want;
                owners += got >= 0;
            }
            bad += (g >= 0 && g < L) ? owners != 1 : owners != 0;
        }
        CHECK(bad == 0, "mapping W=%d I=%d L=%lld: %lld mismatches", W, I, (long long)L, (long long)bad);
        (void)ps;
    }
    /* through a shard: row channels 0 and 1 hold g % 256 and g / 256 (exact in bf16) */
    for (it = 0; it < 40; it++) {
        const int W = 1 + rnd(8), I = 1 + rnd(70), ps = 1 + rnd(64), r = rnd(W);
        const int64_t L = 1 + rnd(4000);
        uint16_t *kg = (uint16_t *)calloc((size_t)L * REF_SPARSE_DQK, 2);
        const uint16_t *kgc[1];
        ref_shard sh;
        int64_t g, bad = 0, kept = 0;
        for (g = 0; g < L; g++) {
            kg[g * REF_SPARSE_DQK] = ref_float_to_bf16((float)(g % 256));
            kg[g * REF_SPARSE_DQK + 1] = ref_float_to_bf16((float)(g / 256));
        }
        kgc[0] = kg;
        if (!shard_of(&sh, W, r, I, ps, REF_BF16, 1, &L, kgc)) {
            free(kg);
            continue;
        }
        for (g = -2; g < L + 3; g++) {
            const int64_t l = ref_sparse_local(g, L, W, r, I);
            const uint16_t *row;
            if (l < 0) continue;
            kept++;
            row = sh.k_cache + sh.block_table[l / ps] * sh.k_stride_page + (l % ps) * sh.k_stride_t;
            bad += ref_bf16_to_float(row[0]) + 256.0f * ref_bf16_to_float(row[1]) != (float)g;
        }
        CHECK(bad == 0 && kept == sh.seqused_k[0], "shard W=%d r=%d I=%d ps=%d L=%lld: %lld rows wrong, %lld kept of %d",
              W, r, I, ps, (long long)L, (long long)bad, (long long)kept, sh.seqused_k[0]);
        ref_shard_free(&sh);
        free(kg);
    }
}

/* ---- the 656-byte FP8 layout ---- */
static void test_fp8ds(void) {
    uint16_t row[REF_SPARSE_DQK];
    uint8_t q[REF_FP8DS_ROW];
    int it, d, bad = 0;
    for (it = 0; it < 50; it++) {
        const double amp = it == 0 ? 0 : ldexp(1.0, rnd(20) - 10);
        float sc[4];
        ref_fill_uniform(row, REF_SPARSE_DQK, REF_BF16, amp, &seed);
        if (it == 1) memset(row + 128, 0, 256); /* an all-zero block: scale 1, zeros */
        ref_fp8ds_quantize(row, q);
        memcpy(sc, q + 512, 16);
        for (d = 0; d < REF_SPARSE_DQK; d++) {
            const double v = ref_bf16_to_float(row[d]), got = ref_fp8ds_value(q, d);
            if (d >= 512) {
                uint16_t h;
                memcpy(&h, q + 528 + 2 * (d - 512), 2);
                bad += h != row[d] || got != v;
            } else {
                /* e4m3: 3 mantissa bits: within 2^-4 relative, or half the subnormal step */
                const double s = sc[d / 128];
                bad += !(fabs(got - v) <= fabs(v) / 16 + s * ldexp(1.0, -10)) || !(s > 0);
            }
        }
    }
    CHECK(bad == 0, "fp8ds: %d values outside the e4m3 bound", bad);
    /* the value of a known row: byte 0x38 = 1.0 times scale 2.5; RoPE bf16 1.5 */
    memset(q, 0, sizeof q);
    q[5] = 0x38;
    {
        const float two5 = 2.5f;
        const uint16_t one5 = ref_float_to_bf16(1.5f);
        memcpy(q + 512, &two5, 4);
        memcpy(q + 528 + 6, &one5, 2);
    }
    CHECK(ref_fp8ds_value(q, 5) == 2.5 && ref_fp8ds_value(q, 515) == 1.5 && ref_fp8ds_value(q, 200) == 0,
          "fp8ds layout: %g %g", ref_fp8ds_value(q, 5), ref_fp8ds_value(q, 515));
}

/* ---- the reference's DCP identity: merged shards == unsharded, sink on rank 0 ---- */
static void test_identity(void) {
    static const int worlds[] = {1, 2, 3, 8};
    int it;
    for (it = 0; it < 24; it++) {
        const int W = worlds[it % 4], ps = it % 3 == 0 ? 64 : 16;
        const int I = it % 4 == 0 ? 1 : it % 4 == 1 ? 3 : it % 4 == 2 ? 64 : ps;
        const int hq = 4, B = 2, topk = it % 2 ? 64 : 100, fp8 = it % 5 == 0;
        const int64_t stride = topk + (it % 3);
        int q_len[2] = {1 + rnd(4), 1 + rnd(3)};
        int64_t L[2] = {1 + rnd(400), 1 + rnd(200)};
        int32_t cu[3], *ids, *counts;
        uint16_t *kg[2], *q;
        const uint16_t *kgc[2];
        float sinks[4];
        double *ro[8], *rl[8], *uo, *ul, *mo, *ml;
        ref_attn_params p;
        int r, b, i, total_q;
        ref_err e, el;
        if (W == 8 && it % 3 == 0) L[1] = 30; /* most ranks own nothing of sequence 1 */
        cu[0] = 0;
        for (b = 0; b < B; b++) cu[b + 1] = cu[b] + q_len[b];
        total_q = cu[B];
        ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(total_q * stride));
        counts = (int32_t *)malloc(sizeof(int32_t) * (size_t)total_q);
        for (b = 0; b < B; b++) {
            kg[b] = (uint16_t *)malloc(2 * (size_t)(L[b] * REF_SPARSE_DQK));
            ref_fill_uniform(kg[b], L[b] * REF_SPARSE_DQK, REF_BF16, 1.0, &seed);
            kgc[b] = kg[b];
            for (i = 0; i < q_len[b]; i++) {
                const int t = cu[b] + i;
                ref_sparse_ids(ids + t * stride, stride, topk, L[b], q_len[b], i, t == 1, &seed);
                counts[t] = it % 2 ? rnd(topk + 20) - 5 : topk;
            }
        }
        q = (uint16_t *)malloc(2 * (size_t)(total_q * hq * REF_SPARSE_DQK));
        ref_fill_uniform(q, total_q * hq * REF_SPARSE_DQK, REF_BF16, 2.0, &seed);
        for (i = 0; i < hq; i++) sinks[i] = i == 3 ? -INFINITY : (float)(ref_rand_uniform(&seed) * 4);
        uo = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * REF_SPARSE_DV));
        ul = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
        mo = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * REF_SPARSE_DV));
        ml = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
        for (r = -1; r < W; r++) { /* r = -1: unsharded */
            ref_shard sh;
            ref_sparse_inputs in;
            uint8_t *c8;
            if (!shard_of(&sh, r < 0 ? 1 : W, r < 0 ? 0 : r, I, ps, REF_BF16, B, L, kgc)) break;
            inputs_of(&in, &sh, ps, fp8, &c8, B, q, cu, ids, stride, topk);
            in.counts = it % 2 ? counts : NULL;
            in.sinks = r <= 0 ? sinks : NULL;
            p = params_of(hq, ps, REF_BF16, r < 0 ? 1 : W, r < 0 ? 0 : r, I);
            if (r < 0) {
                CHECK(ref_sparse_attn(&p, &in, uo, ul) == 0, "ref unsharded: %s", ref_error());
            } else {
                ro[r] = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * REF_SPARSE_DV));
                rl[r] = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
                CHECK(ref_sparse_attn(&p, &in, ro[r], rl[r]) == 0, "ref rank %d: %s", r, ref_error());
            }
            free(c8);
            ref_shard_free(&sh);
        }
        {
            ref_merge_args m;
            memset(&m, 0, sizeof m);
            m.num_states = W;
            m.rows = total_q;
            m.heads = hq;
            m.head_dim = REF_SPARSE_DV;
            m.o = (const void *const *)ro;
            m.lse = (const void *const *)rl;
            ref_merge(&m, mo, ml);
        }
        e = ref_compare(uo, mo, REF_F64, (int64_t)total_q * hq * REF_SPARSE_DV);
        el = ref_compare(ul, ml, REF_F64, (int64_t)total_q * hq);
        CHECK(ref_err_ok(&e, 1e-12, 1e-12) && ref_err_ok(&el, 1e-12, 1e-12),
              "identity W=%d I=%d ps=%d topk=%d fp8=%d: out %s; lse %s", W, I, ps, topk, fp8, ref_err_str(&e),
              ref_err_str(&el));
        for (r = 0; r < W; r++) free(ro[r]), free(rl[r]);
        for (b = 0; b < B; b++) free(kg[b]);
        free(ids), free(counts), free(q), free(uo), free(ul), free(mo), free(ml);
    }
}

/* ---- the sparse reference against the dense one (ref_attn: its own code) ---- */
/* Keys whose 656-byte quantization is exact: e4m3 values times a power of two per 128-value
   block, each block holding its amax 448 * 2^k (scale 2^k); the dequantized row is the row. */
static void fill_fp8_exact(uint16_t *k, int64_t rows) {
    int64_t t;
    int blk, d;
    for (t = 0; t < rows; t++) {
        uint16_t *row = k + t * REF_SPARSE_DQK;
        for (blk = 0; blk < 4; blk++) {
            const int e = rnd(9) - 8;
            for (d = 0; d < 128; d++) {
                int c = rnd(0xff);
                if ((c & 0x7f) == 0x7f) c = 0x30; /* not NaN */
                row[blk * 128 + d] = ref_float_to_bf16((float)ldexp(ref_e4m3_to_double((uint8_t)c), e));
            }
            row[blk * 128 + rnd(128)] = ref_float_to_bf16((float)ldexp(rnd(2) ? 448 : -448, e));
        }
        ref_fill_uniform(row + 512, 64, REF_BF16, 1.0, &seed);
    }
}
static void test_dense(void) {
    int it, compared = 0;
    for (it = 0; it < 16; it++) {
        const int W = 1 + it % 3, ps = it % 2 ? 16 : 64, I = it % 4 == 0 ? 1 : it % 4 == 1 ? 3 : it % 4 == 2 ? 64 : ps;
        const int dtype = it % 5 == 4 ? REF_FP16 : REF_BF16, fp8 = dtype == REF_BF16 && it % 2, hq = 3;
        const int q_len = 1 + rnd(3), sinks_on = it % 3 == 1;
        const int64_t L = q_len + rnd(300), topk = 2 * L + 2;
        uint16_t *kg = (uint16_t *)malloc(2 * (size_t)(L * REF_SPARSE_DQK)), *q;
        const uint16_t *kgc[1];
        int32_t cu[2], *ids = (int32_t *)malloc(sizeof(int32_t) * (size_t)(q_len * topk));
        float sinks[3] = {1.5f, -INFINITY, -2.0f};
        double *uo, *ul, *so, *sl;
        int i, r, lowp;
        int64_t g, j;
        if (fp8) fill_fp8_exact(kg, L);
        else ref_fill_uniform(kg, L * REF_SPARSE_DQK, dtype, 1.0, &seed);
        kgc[0] = kg;
        q = (uint16_t *)malloc(2 * (size_t)(q_len * hq * REF_SPARSE_DQK));
        ref_fill_uniform(q, q_len * hq * REF_SPARSE_DQK, dtype, 3.0, &seed);
        cu[0] = 0, cu[1] = q_len;
        /* token i: the causal prefix 0 .. L - q_len + i in order, with -1 and ids past L among it */
        for (i = 0; i < q_len; i++) {
            int32_t *row = ids + i * topk;
            for (g = 0, j = 0; g <= L - q_len + i; g++) {
                const int u = rnd(6);
                if (u == 0) row[j++] = -1;
                if (u == 1) row[j++] = (int32_t)(L + rnd(9));
                row[j++] = (int32_t)g;
            }
            while (j < topk) row[j++] = -1;
        }
        uo = (double *)malloc(sizeof(double) * (size_t)(q_len * hq * REF_SPARSE_DV));
        so = (double *)malloc(sizeof(double) * (size_t)(q_len * hq * REF_SPARSE_DV));
        ul = (double *)malloc(sizeof(double) * (size_t)(q_len * hq));
        sl = (double *)malloc(sizeof(double) * (size_t)(q_len * hq));
        for (r = 0; r < W; r++)
            for (lowp = 0; lowp < 2; lowp++) {
                ref_shard sh;
                ref_attn_inputs din;
                ref_sparse_inputs in;
                ref_attn_params p;
                uint8_t *c8;
                ref_err e, el;
                int64_t n, k;
                if (!shard_of(&sh, W, r, I, ps, dtype, 1, &L, kgc)) continue;
                p = params_of(hq, ps, dtype, W, r, I);
                p.causal = 1;
                p.emulate_lowp = lowp;
                memset(&din, 0, sizeof din);
                din.batch = 1;
                din.q = q;
                din.cu_seqlens_q = cu;
                ref_shard_inputs(&sh, &din);
                CHECK(ref_attn(&p, &din, uo, ul) == 0, "dense: %s", ref_error());
                /* the sink as the documentation states it: lse' = log(exp(lse) + exp(s)), out
                   scaled by exp(lse - lse') (exact math only: lowp rounds out before the sink) */
                for (k = 0; sinks_on && !lowp && r == 0 && k < q_len * hq; k++) {
                    const double s = sinks[k % hq], l = ul[k];
                    if (!isfinite(s)) continue;
                    ul[k] = isfinite(l) ? (l > s ? l + log1p(exp(s - l)) : s + log1p(exp(l - s))) : s;
                    for (n = 0; n < REF_SPARSE_DV; n++) {
                        double *o = uo + k * REF_SPARSE_DV + n;
                        *o = isfinite(l) ? *o * exp(l - ul[k]) : 0;
                    }
                }
                inputs_of(&in, &sh, ps, fp8, &c8, 1, q, cu, ids, topk, (int)topk);
                in.sinks = sinks_on && !lowp && r == 0 ? sinks : NULL;
                CHECK(ref_sparse_attn(&p, &in, so, sl) == 0, "sparse: %s", ref_error());
                e = ref_compare(uo, so, REF_F64, (int64_t)q_len * hq * REF_SPARSE_DV);
                el = ref_compare(ul, sl, REF_F64, (int64_t)q_len * hq);
                CHECK(ref_err_ok(&e, 1e-12, 1e-12) && ref_err_ok(&el, 1e-12, 1e-12),
                      "sparse == dense W=%d r=%d I=%d ps=%d dtype=%d fp8=%d lowp=%d sinks=%d: out %s; lse max_abs %.3g "
                      "bad %lld", W, r, I, ps, dtype, fp8, lowp, sinks_on, ref_err_str(&e), el.max_abs, (long long)el.bad);
                compared += e.ref_norm > 0;
                free(c8);
                ref_shard_free(&sh);
            }
        free(kg), free(q), free(ids), free(uo), free(ul), free(so), free(sl);
    }
    CHECK(compared >= 40, "sparse == dense: %d comparisons with keys", compared);
}

/* ---- validation ---- */
static dcpattn_attn_desc sparse_desc(int topk) {
    dcpattn_attn_desc d;
    memset(&d, 0, sizeof d);
    d.num_q_heads = 128;
    d.num_kv_heads = 1;
    d.head_dim = 576;
    d.head_dim_v = 512;
    d.page_size = 64;
    d.max_batch = 4;
    d.max_q_len = 2;
    d.max_seqlen_k = 1000;
    d.sparse_topk = topk;
    return d;
}
static void expect(dcpattn_status got, dcpattn_status want, const char *field, const char *what) {
    CHECK(got == want && (want == DCPATTN_STATUS_SUCCESS || strstr(dcpattn_last_error(), field)),
          "%s: status %d (want %d), message '%s' should name %s", what, (int)got, (int)want, dcpattn_last_error(),
          field);
}
static void test_validation(void) {
    static char buf[1 << 20];
    char *base = (char *)(((uintptr_t)buf + 255) & ~(uintptr_t)255);
    dcpattn_attn_desc d;
    dcpattn_attn_args a;
    d = sparse_desc(2048);
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_SUCCESS, "", "topk 2048");
    d.kv_dtype = DCPATTN_FP8_DS_MLA;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_SUCCESS, "", "fp8ds");
    d.dtype = DCPATTN_FP16;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_UNSUPPORTED, "FP8_DS_MLA", "fp8ds with fp16");
    d = sparse_desc(-1);
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_INVALID_ARGUMENT, "sparse_topk = -1", "topk -1");
    d = sparse_desc(DCPATTN_SPARSE_MAX_TOPK + 1);
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_INVALID_ARGUMENT, "sparse_topk = 2049", "topk 2049");
    d = sparse_desc(64);
    d.head_dim = d.head_dim_v = 128;
    d.num_kv_heads = 8;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_UNSUPPORTED, "sparse_topk = 64 needs an MLA", "GQA sparse");
    d = sparse_desc(0);
    d.kv_dtype = DCPATTN_FP8_DS_MLA;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_UNSUPPORTED, "sparse_topk = 0", "dense fp8ds");
    d = sparse_desc(64);
    d.num_splits = 4;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_UNSUPPORTED, "num_splits = 4", "sparse splits");
    d = sparse_desc(64);
    d.num_splits = DCPATTN_SPLITS_BALANCED;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_UNSUPPORTED, "num_splits = -1", "sparse balanced");
    d = sparse_desc(64);
    d.kv_dtype = DCPATTN_FP8_E4M3;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_SUCCESS, "", "sparse e4m3");
    d.dtype = DCPATTN_FP16;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_SUCCESS, "", "sparse e4m3 with fp16");
    d = sparse_desc(64);
    d.kv_dtype = DCPATTN_FP32;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_UNSUPPORTED, "kv_dtype = 3", "sparse fp32 cache");
    d = sparse_desc(64);
    d.page_size = 48;
    expect(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_UNSUPPORTED, "page_size = 48", "sparse page 48");

    /* arguments: a good set, then one field broken at a time */
    d = sparse_desc(64);
    d.kv_dtype = DCPATTN_FP8_DS_MLA;
    memset(&a, 0, sizeof a);
    a.batch = 2;
    a.q = base;
    a.k_cache = a.v_cache = base + 0x70000;
    a.num_pages = 4;
    a.block_table = (const int32_t *)(base + 0x68000);
    a.cu_seqlens_q = a.seqused_k = (const int32_t *)(base + 0x68100);
    a.out = base + 0x30000;
    a.topk_ids = (const int32_t *)(base + 0x60000);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_SUCCESS, "", "good fp8ds args");
    a.k_stride_t = 650;
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "k_stride_t = 650", "fp8ds row stride");
    a.k_stride_t = 0;
    a.topk_ids = NULL;
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_INVALID_ARGUMENT, "topk_ids is NULL", "no ids");
    a.topk_ids = (const int32_t *)(base + 0x60002);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "topk_ids", "misaligned ids");
    a.topk_ids = (const int32_t *)(base + 0x60000);
    a.topk_ids_stride = 63;
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_INVALID_ARGUMENT, "topk_ids_stride = 63", "stride");
    a.topk_ids_stride = 0;
    a.sinks = (const float *)(base + 0x61001);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "sinks", "misaligned sinks");
    a.sinks = NULL;
    a.topk_count = (const int32_t *)(base + 0x61002);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "topk_count", "misaligned counts");
    a.topk_count = NULL;
    a.topk_ids = (const int32_t *)(base + 0x30000);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "topk_ids", "out over the ids");
    a.topk_ids = (const int32_t *)(base + 0x30000 - 64 * 4); /* row 0 ends where out begins; rows 1.. overlap it */
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "topk_ids", "out over a later row of ids");
    a.topk_ids = (const int32_t *)(base + 0x60000);
    a.batch = 0;
    a.topk_ids = NULL;
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_SUCCESS, "", "empty batch, no ids");

    /* the e4m3 cache with per-tensor scales: both scales required and 4-byte aligned */
    d.kv_dtype = DCPATTN_FP8_E4M3;
    a.batch = 2;
    a.topk_ids = (const int32_t *)(base + 0x60000);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_INVALID_ARGUMENT, "k_scale is NULL", "e4m3, no k_scale");
    a.k_scale = (const float *)(base + 0x61100);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_INVALID_ARGUMENT, "v_scale is NULL", "e4m3, no v_scale");
    a.v_scale = (const float *)(base + 0x61102);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "v_scale", "e4m3, misaligned v_scale");
    a.v_scale = (const float *)(base + 0x61104);
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_SUCCESS, "", "good e4m3 args");
    a.k_stride_t = 584;
    expect(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "k_stride_t = 584", "e4m3 row stride");
}

/* ---- the header and the generator accept the same sparse descriptors; the variant each
   arch takes: an FP8 cache (fp8ds, e4m3) on sm_90a the wgmma kernel (_sm90), all else the
   mma.sync one ---- */
static void test_agreement(void) {
    static const char *archs[] = {"sm_90a", "compute_80"};
    int a, x, kv, agreed = 0;
    for (a = 0; a < 2; a++) {
        dcpattn_context_desc cd;
        dcpattn_context *ctx = NULL;
        memset(&cd, 0, sizeof cd);
        cd.compile_only = 1;
        cd.arch = archs[a];
        cd.num_sms = 132;
        cd.cache_dir = "";
        if (dcpattn_context_create(&cd, &ctx) != DCPATTN_STATUS_SUCCESS) {
            CHECK(0, "context %s: %s", archs[a], dcpattn_last_error());
            continue;
        }
        for (kv = 0; kv < 4; kv++)
            for (x = 0; x < 400; x++) {
                dcpattn_attn_desc d = sparse_desc(x % 3 == 0 ? 1 + x * 7 : 64);
                char name[128];
                int c, lua;
                d.kv_dtype = kv == 1   ? DCPATTN_FP8_DS_MLA
                             : kv == 2 ? DCPATTN_FP16
                             : kv == 3 ? DCPATTN_FP8_E4M3
                                       : DCPATTN_DTYPE_DEFAULT; /* normalized */
                d.dtype = kv == 2 ? DCPATTN_FP16 : DCPATTN_BF16;
                if (x % 3 == 1) d.page_size = x;
                if (x % 3 == 2) d.num_q_heads = x;
                c = dcpattn_attn_desc_validate(&d) == DCPATTN_STATUS_SUCCESS;
                pthread_mutex_lock(&ctx->lock);
                lua = dcpattn__select_attn(ctx, &d, name, sizeof name) == DCPATTN_STATUS_SUCCESS;
                pthread_mutex_unlock(&ctx->lock);
                CHECK(c == lua, "sparse %s x=%d kv=%d: the header %s, the generator %s (%s)", archs[a], x, kv,
                      c ? "accepts" : "rejects", lua ? "accepts" : "rejects", lua ? name : dcpattn_last_error());
                if (c && lua) {
                    /* (sm_90a: at most 16 heads take the narrow tile) */
                    const int narrow = a == 0 && d.num_q_heads <= 16;
                    const char *want = kv == 1   ? (a == 0 ? (narrow ? "sparse_bf16_kvfp8ds_m16_sm90" : "sparse_bf16_kvfp8ds_m64_sm90")
                                                           : "sparse_bf16_kvfp8ds_m64")
                                       : kv == 2 ? "sparse_fp16_m64"
                                       : kv == 3 ? (a == 0 ? (narrow ? "sparse_bf16_kve4m3_m16_sm90" : "sparse_bf16_kve4m3_m64_sm90")
                                                           : "sparse_bf16_kve4m3_m64")
                                                 : "sparse_bf16_m64";
                    CHECK(strcmp(name, want) == 0, "sparse %s x=%d: variant %s, want %s", archs[a], x, name, want);
                }
                agreed += c == lua;
            }
        dcpattn_context_destroy(ctx);
    }
    CHECK(agreed == 3200, "%d of 3200 sparse descriptors agreed", agreed);
}

int main(void) {
    test_mapping();
    test_fp8ds();
    test_identity();
    test_dense();
    test_validation();
    test_agreement();
    return check_summary();
}
