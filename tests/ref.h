/* ref.h — the CPU reference of dcpattn: DCP placement, attention over a paged shard, merge,
   bf16/fp16 conversions and the error metric. Header-only C99 (also compiles as C++, so .cu
   host code may include it), double precision, no dependency on dcpattn.h. The numbers in
   docs/contract.md 2-5 are defined here once for every CPU test, GPU test and example.

   PLACEMENT (docs/contract.md 2; W world, r rank, I interleave; W, I >= 1)
     int64_t ref_local_len(int64_t L, int W, int r, int I)        tokens of a global prefix L on r (L <= 0: 0)
     int64_t ref_global_of_local(int64_t l, int W, int r, int I)  local index -> global position
     int     ref_owner(int64_t g, int W, int I)                   rank holding global token g
     int64_t ref_local_index(int64_t g, int W, int I)             local index of g on its owner
     Causal row limit: query row i of q_len, global length L: p = L - q_len + i, and it sees
     the local keys l < ref_local_len(p + 1, W, r, I).

   ELEMENT TYPES  (values equal dcpattn_dtype's, so DCPATTN_BF16 etc. may be passed)
     REF_BF16 = 1, REF_FP16 = 2, REF_FP32 = 3, REF_E4M3 = 4 (OCP FP8 e4m3fn, KV caches only),
     REF_F64 = 5; where a 16-bit type is expected, 0 means bf16 (as DCPATTN_DTYPE_DEFAULT does).
     float    ref_bf16_to_float(uint16_t)   uint16_t ref_float_to_bf16(float)   round to nearest even
     float    ref_fp16_to_float(uint16_t)   uint16_t ref_float_to_fp16(float)   NaN stays NaN, overflow -> inf
     float    ref_round_bf16(float)         float    ref_round_fp16(float)      x -> 16 bits -> float
     double   ref_h2d(uint16_t bits, int dtype)      uint16_t ref_d2h(double, int dtype)
     double   ref_round_to(double v, int type)     v rounded to REF_BF16/FP16/FP32 (REF_F64: v)
     double   ref_load(const void *p, int type, int64_t i)   element i of a typed array, as double
     REF_BF16_NAN, REF_FP16_NAN: quiet NaN bit patterns (poison for unused cache slots).
     double   ref_e4m3_to_double(uint8_t)   exact: NaN for 0x7f/0xff, +-0, subnormals m*2^-9, max 448
     uint8_t  ref_double_to_e4m3(double)    nearest, ties to even mantissa, saturating to
                                            +-448 (infinities too); NaN -> 0x7f
     REF_E4M3_NAN: 0x7f.

   RANDOM (splitmix64; deterministic for a seed)
     uint64_t ref_rand_u64(uint64_t *state)   double ref_rand_uniform(uint64_t *state)  in [-1, 1)
     void ref_fill_uniform(uint16_t *dst, int64_t n, int dtype, double amp, uint64_t *state)
     void ref_fill_bits(uint16_t *dst, int64_t n, uint16_t bits)

   ATTENTION OVER ONE RANK'S PAGED SHARD (docs/contract.md 1-4)
     ref_attn_params p = {0}; p.hq, p.hkv, p.dqk, p.dv (0: dqk), p.page_size, p.causal,
       p.scale (0: 1/sqrt(dqk)), p.world/rank/interleave (0 world or interleave: 1),
       p.lse_base2, p.dtype (of q, k, v), p.emulate_lowp (see below).
       FP8 cache: p.kv_dtype = REF_E4M3 (0: dtype), p.k_scale, p.v_scale (float [1], or
       [hkv] with p.kv_scale_per_head); the caches then hold one e4m3 byte per uint16_t
       element, and a key or value is that byte's value times its scale, in double.
     ref_attn_inputs in = {0}; the host copies of dcpattn_attn_args: batch, q (+ strides),
       k_cache / v_cache (+ page, token, head strides; v may equal k for MLA), num_pages,
       block_table (+ row stride), cu_seqlens_q, seqused_k, seqused_k_global (0: = seqused_k,
       only when W = 1). A stride of 0 means contiguous, as in dcpattn; block_table_stride
       0 means ceil(max_b seqused_k[b] / page_size).
     int ref_attn(const ref_attn_params *p, const ref_attn_inputs *in, double *out, double *lse)
       out: double [total_q, hq, dv], lse: double [total_q, hq] (natural, or log2 if
       p.lse_base2; may be 0). Empty row: out 0, lse -inf. Returns 0, or -1 with
       ref_error() saying why (seqused_k != local_len(seqused_k_global), page index out of
       range, bad parameters, no memory). const char *ref_error(void) is that message.
     int ref_attn_dense(const ref_attn_params *p, int q_len, int64_t L, const uint16_t *q,
                        const uint16_t *k, const uint16_t *v, double *out, double *lse)
       unsharded attention of one sequence (world/rank/interleave ignored: W = 1) over
       contiguous q [q_len, hq, dqk], k [L, hkv, dqk], v [L, hkv, dv].
     p.emulate_lowp = 1 does "the same math in the input precision" (docs/contract.md 10): the
       probabilities exp(s - max) are rounded to p.dtype before the P·V product (the row sum
       is not) and out is rounded to p.dtype; a dequantized FP8 key or value is rounded to
       p.dtype too. Its error against the exact result is the
       baseline a kernel's error is compared with (ref_err_within).

   SHARDING HELPER
     ref_shard_params sp = {0}; hkv, dqk, dv (0: dqk), page_size, world, rank, interleave,
       dtype, fill (bits of every unused slot, e.g. REF_BF16_NAN), extra_pages (unused
       pages added to the pool), bt_extra_cols, bt_fill (unused block-table entries),
       seed (page order), v_alias_k (MLA: no v cache, V = first dv channels of K), head_major
       (each page head-major, [hkv, page_size, d], instead of token-major).
     int ref_shard_build(ref_shard *s, const ref_shard_params *sp, int batch,
                         const int64_t *seqlen_global, const uint16_t *const *k_global,
                         const uint16_t *const *v_global)
       k_global[b]: [L_b, hkv, dqk], v_global[b]: [L_b, hkv, dv] (ignored with v_alias_k).
       Fills s->k_cache, s->v_cache [num_pages, page_size, hkv, d] (contiguous, or with
       head_major [num_pages, hkv, page_size, d]; strides in s->k_stride_page etc.), s->block_table [batch, block_table_stride], s->seqused_k,
       s->seqused_k_global, s->num_pages. Pages are handed out in a shuffled order.
     void ref_shard_inputs(const ref_shard *s, ref_attn_inputs *in)  cache fields of `in`
     void ref_shard_free(ref_shard *s)

   MERGE (docs/contract.md 5)
     ref_merge_args a = {0}; num_states, rows, heads, head_dim, o (array of num_states
       pointers), o_type (REF_F64 default, REF_FP32, REF_BF16, REF_FP16), lse (array of
       pointers), lse_type (REF_F64 default or REF_FP32), strides (0: contiguous),
       lse_base2_in, lse_base2_out.
     void ref_merge(const ref_merge_args *a, double *out, double *lse_out)
       out: double [rows, heads, head_dim], lse_out: double [rows, heads] (may be 0).
       Non-finite lse = empty state (its o is never read); all empty -> 0 and -inf.

   ERROR METRIC (docs/contract.md 10: NaN never passes)
     ref_err ref_compare(const double *ref, const void *got, int got_type, int64_t n)
     ref_err ref_compare3(const double *ref, const void *got, int got_type,
                          int64_t n0, int64_t n1, int64_t n2, int64_t got_s0, int64_t got_s1)
       ref contiguous [n0, n1, n2]; got strided (s0, s1; 0 = contiguous; last dim dense).
       max_abs and rel_fro (||got - ref||_F / ||ref||_F, or ||got - ref||_F when ref is 0)
       over the finite reference entries; `bad` counts entries where got is not finite but
       ref is, or ref is not finite and got differs (an empty row's -inf must be -inf).
     int ref_err_ok(const ref_err *e, double max_abs_tol, double rel_tol)
     int ref_err_within(const ref_err *e, const ref_err *baseline, double abs_floor, double rel_floor)
       e <= 2 * baseline + floor, both metrics, and no bad entry.
     const char *ref_err_str(const ref_err *e)   (static buffer)

   SPARSE MLA (docs/contract.md, "Sparse MLA"; Dqk 576, Dv 512, one KV head)
     REF_FP8DS = 6: DeepSeek's 656-byte cache row: 512 e4m3 values, 4 fp32 scales (one per
       128 values), 64 bf16 RoPE values.
     void ref_fp8ds_quantize(const uint16_t *row, uint8_t *out)  576 bf16 values -> a 656-byte
       row: per 128-value block scale = amax / 448 (1 for an all-zero block), e4m3 = nearest
       of value / scale; the RoPE values copied.
     double ref_fp8ds_value(const uint8_t *row, int d)   channel d of a 656-byte row, dequantized
     int64_t ref_sparse_local(int64_t g, int64_t L, int W, int r, int I)
       the local index on rank r of top-k id g of a sequence of global length L, or -1 when
       the id is skipped (g < 0, g >= L, or another rank's).
     ref_sparse_inputs in = {0}; batch, q ([total_q, hq, 576] contiguous), cache and
       cache_type (0 or the dtype: rows of 576 16-bit values; REF_E4M3: rows of 576 e4m3
       bytes, key = byte * p.k_scale[0], value = byte * p.v_scale[0]; REF_FP8DS: rows of 656 bytes),
       cache strides (elements of the cache type: 16-bit values or bytes), block_table (+ row
       stride), cu_seqlens_q, seqused_k, seqused_k_global (0: = seqused_k), ids [total_q,
       ids_stride], topk, counts (optional [total_q]), sinks (optional [hq]; pass them for
       rank 0 and for unsharded attention only).
     int ref_sparse_attn(const ref_attn_params *p, const ref_sparse_inputs *in, double *out,
                         double *lse)
       p: hq, dqk 576, dv 512, page_size, world, rank, interleave, scale, lse_base2, dtype,
       emulate_lowp (a dequantized FP8 value is then rounded to bf16, an e4m3 one to dtype, as
       well), k_scale and v_scale (REF_E4M3). Each kept id is
       one key (repeats count); a token keeping none: out 0, lse -inf, or with a finite sink
       s: out 0, lse s. A sink s joins as lse' = log(exp(lse) + exp(s)), out *= exp(lse - lse').
       Returns 0, or -1 with ref_error() (inconsistent lengths, block table out of range).
     void ref_sparse_ids(int32_t *ids, int64_t stride, int topk, int64_t L, int q_len, int i,
                         int none, uint64_t *state)
       a test list for query row i of a sequence of global length L: about 30 % -1, 8 % ids
       past L, 7 % repeats of an earlier entry, the rest causal (<= L - q_len + i); none = 1:
       all -1. Entries topk..stride-1 are INT32_MAX (padding, never read).
*/
#ifndef DCPATTN_TEST_REF_H
#define DCPATTN_TEST_REF_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define REF_FN static __attribute__((unused))
#else
#define REF_FN static
#endif

enum { REF_BF16 = 1, REF_FP16 = 2, REF_FP32 = 3, REF_E4M3 = 4, REF_F64 = 5 };
#define REF_BF16_NAN ((uint16_t)0x7fc0)
#define REF_E4M3_NAN ((uint8_t)0x7f)
#define REF_FP16_NAN ((uint16_t)0x7e00)
#define REF_LN2 0.69314718055994530942

/* ---------------- error message of the last failed ref_ call ---------------- */
static char ref_error_buf_[512];
REF_FN const char *ref_error(void) { return ref_error_buf_; }
REF_FN int ref_fail_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ref_error_buf_, sizeof ref_error_buf_, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---------------- placement ---------------- */
REF_FN int64_t ref_local_len(int64_t L, int W, int r, int I) {
    int64_t span = (int64_t)W * I, rem;
    if (L <= 0) return 0;
    rem = L % span - (int64_t)r * I;
    if (rem < 0) rem = 0;
    if (rem > I) rem = I;
    return (L / span) * I + rem;
}
REF_FN int64_t ref_global_of_local(int64_t l, int W, int r, int I) {
    return (l / I) * W * (int64_t)I + (int64_t)r * I + l % I;
}
REF_FN int ref_owner(int64_t g, int W, int I) { return (int)((g / I) % W); }
REF_FN int64_t ref_local_index(int64_t g, int W, int I) {
    return (g / ((int64_t)W * I)) * I + g % I;
}

/* ---------------- 16-bit floats ---------------- */
REF_FN float ref_bits_to_float_(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }
REF_FN uint32_t ref_float_bits_(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }

REF_FN float ref_bf16_to_float(uint16_t h) { return ref_bits_to_float_((uint32_t)h << 16); }
REF_FN uint16_t ref_float_to_bf16(float f) {
    uint32_t x = ref_float_bits_(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
REF_FN float ref_fp16_to_float(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, sign = (uint32_t)(h & 0x8000u) << 16;
    if (e == 0) { /* subnormal: m * 2^-24, exact in float */
        float v = (float)m * 5.9604644775390625e-08f;
        return (h & 0x8000) ? -v : v;
    }
    if (e == 31) return ref_bits_to_float_(sign | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0));
    return ref_bits_to_float_(sign | ((e + 112u) << 23) | (m << 13));
}
REF_FN uint16_t ref_float_to_fp16(float f) {
    uint32_t x = ref_float_bits_(f), ax = x & 0x7fffffffu, e;
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) { /* below 2^-14: subnormal; a * 2^24 is exact in double */
        double m = rint((double)ref_bits_to_float_(ax) * 16777216.0);
        return (uint16_t)(sign | (uint16_t)m); /* m == 1024 is the smallest normal: right */
    }
    e = ax - 0x38000000u; /* rebias 127 -> 15 */
    e += 0xfffu + ((e >> 13) & 1u);
    return (uint16_t)(sign | (uint16_t)(e >> 13));
}
REF_FN float ref_round_bf16(float f) { return ref_bf16_to_float(ref_float_to_bf16(f)); }
REF_FN float ref_round_fp16(float f) { return ref_fp16_to_float(ref_float_to_fp16(f)); }
/* e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal, S.1111.111
   is NaN, there is no infinity. */
REF_FN double ref_e4m3_to_double(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    /* powers of two as exact integer shifts and divisions: ldexp was most of the time spent
       quantizing large FP8 caches */
    const double mag = e == 15 && m == 7 ? NAN : e == 0 ? (double)m / 512 : (double)((8 + m) << e) / 1024;
    return b & 0x80 ? -mag : mag;
}
REF_FN uint8_t ref_double_to_e4m3(double x) {
    /* the nearest of the 127 finite magnitudes (codes 0..0x7e ascend), found by bisection:
       plainly right, and fast enough to quantize caches of 10^5 rows */
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const double a = fabs(x);
    int lo = 0, hi = 0x7e;
    double dlo, dhi;
    if (isnan(x)) return REF_E4M3_NAN;
    if (a >= 448.0) return (uint8_t)(sign | 0x7e);
    while (hi - lo > 1) { /* value(lo) <= a < value(hi) */
        const int mid = (lo + hi) / 2;
        if (ref_e4m3_to_double((uint8_t)mid) <= a) lo = mid;
        else hi = mid;
    }
    dlo = a - ref_e4m3_to_double((uint8_t)lo);
    dhi = ref_e4m3_to_double((uint8_t)hi) - a;
    return (uint8_t)(sign | (dlo < dhi || (dlo == dhi && !(lo & 1)) ? lo : hi));
}

REF_FN double ref_h2d(uint16_t bits, int dtype) {
    return dtype == REF_FP16 ? (double)ref_fp16_to_float(bits) : (double)ref_bf16_to_float(bits);
}
REF_FN uint16_t ref_d2h(double v, int dtype) {
    return dtype == REF_FP16 ? ref_float_to_fp16((float)v) : ref_float_to_bf16((float)v);
}
REF_FN double ref_round_to(double v, int dtype) {
    if (dtype == REF_F64) return v;
    if (dtype == REF_FP32) return (double)(float)v;
    return ref_h2d(ref_d2h(v, dtype), dtype);
}
REF_FN double ref_load(const void *p, int type, int64_t i) {
    switch (type) {
    case REF_FP32: return (double)((const float *)p)[i];
    case REF_F64: return ((const double *)p)[i];
    case REF_FP16: return (double)ref_fp16_to_float(((const uint16_t *)p)[i]);
    case REF_E4M3: return ref_e4m3_to_double(((const uint8_t *)p)[i]);
    default: return (double)ref_bf16_to_float(((const uint16_t *)p)[i]);
    }
}

/* ---------------- random ---------------- */
REF_FN uint64_t ref_rand_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
REF_FN double ref_rand_uniform(uint64_t *s) {
    return (double)(ref_rand_u64(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}
REF_FN void ref_fill_uniform(uint16_t *dst, int64_t n, int dtype, double amp, uint64_t *s) {
    int64_t i;
    for (i = 0; i < n; i++) dst[i] = ref_d2h(amp * ref_rand_uniform(s), dtype);
}
REF_FN void ref_fill_bits(uint16_t *dst, int64_t n, uint16_t bits) {
    int64_t i;
    for (i = 0; i < n; i++) dst[i] = bits;
}

/* ---------------- attention ---------------- */
typedef struct ref_attn_params {
    int hq, hkv, dqk, dv;        /* dv 0: dqk */
    int page_size;               /* tokens per page (ref_attn only) */
    int causal;                  /* 1: bottom-right causal on the global sequence */
    double scale;                /* 0: 1/sqrt(dqk) */
    int world, rank, interleave; /* W (0: 1), r, I (0: 1) */
    int lse_base2;               /* lse out as log2 */
    int dtype;                   /* q, k, v: REF_BF16 (or 0) or REF_FP16 */
    int emulate_lowp;            /* round P to dtype before P·V and out to dtype */
    int kv_dtype;                /* 0: dtype; REF_E4M3: FP8 cache with the scales below */
    const float *k_scale, *v_scale;
    int kv_scale_per_head;       /* scales [hkv], else [1] */
} ref_attn_params;

typedef struct ref_attn_inputs {
    int batch;
    const uint16_t *q; /* [total_q, hq, dqk] */
    int64_t q_stride_t, q_stride_h;
    const uint16_t *k_cache; /* [num_pages, page_size, hkv, dqk] */
    int64_t k_stride_page, k_stride_t, k_stride_h;
    const uint16_t *v_cache; /* [num_pages, page_size, hkv, dv]; may equal k_cache */
    int64_t v_stride_page, v_stride_t, v_stride_h;
    int64_t num_pages;
    const int32_t *block_table; /* [batch, block_table_stride] */
    int64_t block_table_stride;
    const int32_t *cu_seqlens_q;     /* [batch + 1] */
    const int32_t *seqused_k;        /* [batch] local tokens */
    const int32_t *seqused_k_global; /* [batch] global length; 0: = seqused_k (W = 1) */
} ref_attn_inputs;

/* where the keys of one sequence live: paged (bt != 0) or contiguous rows of stride st */
typedef struct ref_kv_view_ {
    const uint16_t *base;
    const int32_t *bt;
    int64_t page_size, sp, st, sh, num_pages;
} ref_kv_view_;

REF_FN const uint16_t *ref_kv_at_(const ref_kv_view_ *v, int64_t l, int h) {
    if (!v->bt) return v->base + l * v->st + h * v->sh;
    return v->base + (int64_t)v->bt[l / v->page_size] * v->sp + (l % v->page_size) * v->st +
           h * v->sh;
}

typedef struct ref_norm_params_ {
    int hq, hkv, dqk, dv, W, r, I, dtype, fp8;
    double scale;
} ref_norm_params_;

REF_FN int ref_norm_(const ref_attn_params *p, ref_norm_params_ *n) {
    n->fp8 = p->kv_dtype == REF_E4M3;
    n->hq = p->hq;
    n->hkv = p->hkv;
    n->dqk = p->dqk;
    n->dv = p->dv ? p->dv : p->dqk;
    n->W = p->world ? p->world : 1;
    n->r = p->rank;
    n->I = p->interleave ? p->interleave : 1;
    n->dtype = p->dtype ? p->dtype : REF_BF16;
    n->scale = p->scale != 0 ? p->scale : 1.0 / sqrt((double)p->dqk);
    if (n->hq <= 0 || n->hkv <= 0 || n->hq % n->hkv || n->dqk <= 0 || n->dv <= 0)
        return ref_fail_("ref: bad heads/dims hq=%d hkv=%d dqk=%d dv=%d", p->hq, p->hkv,
                         p->dqk, p->dv);
    if (n->W < 1 || n->r < 0 || n->r >= n->W || n->I < 1)
        return ref_fail_("ref: bad placement W=%d r=%d I=%d", n->W, n->r, n->I);
    if (n->dtype != REF_BF16 && n->dtype != REF_FP16)
        return ref_fail_("ref: dtype %d is not bf16 or fp16", n->dtype);
    if (p->kv_dtype != 0 && p->kv_dtype != n->dtype && !n->fp8)
        return ref_fail_("ref: kv_dtype %d is not 0, dtype or REF_E4M3", p->kv_dtype);
    if (n->fp8 && (!p->k_scale || !p->v_scale))
        return ref_fail_("ref: an e4m3 cache needs k_scale and v_scale");
    return 0;
}

/* Element d of the key (v = 0) or value (v = 1) row at `row` of KV head kvh, dequantized. */
REF_FN double ref_kv_(const ref_attn_params *p, const ref_norm_params_ *n, const uint16_t *row, int d, int kvh, int v) {
    double x;
    if (!n->fp8) return ref_h2d(row[d], n->dtype);
    x = ref_e4m3_to_double((uint8_t)row[d]) * (double)(v ? p->v_scale : p->k_scale)[p->kv_scale_per_head ? kvh : 0];
    return p->emulate_lowp ? ref_round_to(x, n->dtype) : x;
}

/* The first `len` keys and values of KV head kvh, dequantized once (ref_kv_) into kd
   [len][dqk] and vd [len][dv], for every query row of the head to read. */
REF_FN void ref_decode_kv_(const ref_attn_params *p, const ref_norm_params_ *n, const ref_kv_view_ *kv,
                           const ref_kv_view_ *vv, int kvh, int64_t len, double *kd, double *vd) {
    int64_t j;
    int d;
    for (j = 0; j < len; j++) {
        const uint16_t *k = ref_kv_at_(kv, j, kvh), *v = ref_kv_at_(vv, j, kvh);
        for (d = 0; d < n->dqk; d++) kd[j * n->dqk + d] = ref_kv_(p, n, k, d, kvh, 0);
        for (d = 0; d < n->dv; d++) vd[j * n->dv + d] = ref_kv_(p, n, v, d, kvh, 1);
    }
}

/* One (query row, head): softmax over the first `limit` keys of kd / vd (ref_decode_kv_).
   s: scratch[limit + dqk]. */
REF_FN void ref_attn_row_(const ref_attn_params *p, const ref_norm_params_ *n, const uint16_t *qrow,
                          const double *kd, const double *vd, int64_t limit, double *s, double *o, double *lse) {
    int64_t j;
    int d;
    double m = -INFINITY, sum = 0, *qd = s + (limit > 0 ? limit : 0);
    for (d = 0; d < n->dv; d++) o[d] = 0;
    if (limit <= 0) {
        if (lse) *lse = -INFINITY;
        return;
    }
    for (d = 0; d < n->dqk; d++) qd[d] = ref_h2d(qrow[d], n->dtype);
    for (j = 0; j < limit; j++) {
        const double *k = kd + j * n->dqk;
        double dot = 0;
        for (d = 0; d < n->dqk; d++) dot += qd[d] * k[d];
        s[j] = dot * n->scale;
        if (s[j] > m) m = s[j];
    }
    for (j = 0; j < limit; j++) {
        const double *v = vd + j * n->dv;
        double e = exp(s[j] - m), pe = p->emulate_lowp ? ref_round_to(e, n->dtype) : e;
        sum += e;
        for (d = 0; d < n->dv; d++) o[d] += pe * v[d];
    }
    for (d = 0; d < n->dv; d++) {
        o[d] /= sum;
        if (p->emulate_lowp) o[d] = ref_round_to(o[d], n->dtype);
    }
    if (lse) {
        *lse = m + log(sum);
        if (p->lse_base2) *lse /= REF_LN2;
    }
}

/* One sequence: its q_len query tokens (rows at q, strides q_st and q_sh) against its `used` keys
   of kv / vv (global length glob: the causal limits of the DCP shard), KV head by KV head, each
   head's keys and values decoded once. out / lse: the sequence's first row. scratch: ref_scratch_
   of at least `used` keys. */
REF_FN void ref_attn_seq_(const ref_attn_params *p, const ref_norm_params_ *n, const ref_kv_view_ *kv,
                          const ref_kv_view_ *vv, const uint16_t *q, int64_t q_st, int64_t q_sh, int q_len,
                          int64_t used, int64_t glob, double *scratch, double *out, double *lse) {
    const int group = n->hq / n->hkv;
    double *kd = scratch + used + n->dqk, *vd = kd + used * n->dqk;
    int i, h, kvh;
    if (q_len <= 0) return;
    for (kvh = 0; kvh < n->hkv; kvh++) {
        ref_decode_kv_(p, n, kv, vv, kvh, used, kd, vd);
        for (i = 0; i < q_len; i++) {
            int64_t limit = p->causal ? ref_local_len(glob - q_len + i + 1, n->W, n->r, n->I) : used;
            if (limit > used) limit = used;
            for (h = kvh * group; h < (kvh + 1) * group; h++)
                ref_attn_row_(p, n, q + i * q_st + h * q_sh, kd, vd, limit, scratch, out + ((int64_t)i * n->hq + h) * n->dv,
                              lse ? lse + (int64_t)i * n->hq + h : 0);
        }
    }
}
/* Scratch of ref_attn_seq_ for sequences of up to len keys (free() it), or NULL. */
REF_FN double *ref_scratch_(const ref_norm_params_ *n, int64_t len) {
    if (len < 0) len = 0;
    return (double *)malloc(sizeof(double) * (size_t)(len + n->dqk + len * (n->dqk + n->dv) + 1));
}

REF_FN int ref_attn(const ref_attn_params *p, const ref_attn_inputs *in, double *out, double *lse) {
    ref_norm_params_ n;
    int b;
    int64_t max_used = 0, bt_stride, q_st, q_sh;
    ref_kv_view_ kv, vv;
    double *s;
    if (ref_norm_(p, &n)) return -1;
    if (p->page_size < 1) return ref_fail_("ref: page_size %d", p->page_size);
    if (in->batch < 0) return ref_fail_("ref: batch %d", in->batch);
    if (!in->seqused_k_global && n.W != 1) return ref_fail_("ref: seqused_k_global needed when W > 1");
    for (b = 0; b < in->batch; b++) {
        int64_t used = in->seqused_k[b];
        int64_t glob = in->seqused_k_global ? in->seqused_k_global[b] : used;
        if (used < 0 || glob < 0) return ref_fail_("ref: negative length in sequence %d", b);
        if (ref_local_len(glob, n.W, n.r, n.I) != used)
            return ref_fail_("ref: sequence %d: seqused_k %lld != local_len(%lld) = %lld", b,
                             (long long)used, (long long)glob,
                             (long long)ref_local_len(glob, n.W, n.r, n.I));
        if (in->cu_seqlens_q[b + 1] < in->cu_seqlens_q[b])
            return ref_fail_("ref: cu_seqlens_q decreases at %d", b);
        if (used > max_used) max_used = used;
    }
    bt_stride = in->block_table_stride ? in->block_table_stride
                                       : (max_used + p->page_size - 1) / p->page_size;
    for (b = 0; b < in->batch; b++) {
        int64_t pg, npg = ((int64_t)in->seqused_k[b] + p->page_size - 1) / p->page_size;
        for (pg = 0; pg < npg; pg++) {
            int32_t e = in->block_table[b * bt_stride + pg];
            if (e < 0 || e >= in->num_pages)
                return ref_fail_("ref: block_table[%d][%lld] = %d outside [0, %lld)", b,
                                 (long long)pg, e, (long long)in->num_pages);
        }
    }
    q_sh = in->q_stride_h ? in->q_stride_h : n.dqk;
    q_st = in->q_stride_t ? in->q_stride_t : n.hq * q_sh;
    kv.base = in->k_cache;
    kv.page_size = p->page_size;
    kv.sh = in->k_stride_h ? in->k_stride_h : n.dqk;
    kv.st = in->k_stride_t ? in->k_stride_t : n.hkv * kv.sh;
    kv.sp = in->k_stride_page ? in->k_stride_page : p->page_size * kv.st;
    kv.num_pages = in->num_pages;
    vv = kv;
    vv.base = in->v_cache;
    vv.sh = in->v_stride_h ? in->v_stride_h : n.dv;
    vv.st = in->v_stride_t ? in->v_stride_t : n.hkv * vv.sh;
    vv.sp = in->v_stride_page ? in->v_stride_page : p->page_size * vv.st;
    s = ref_scratch_(&n, max_used);
    if (!s) return ref_fail_("ref: out of memory");
    for (b = 0; b < in->batch; b++) {
        const int q0 = in->cu_seqlens_q[b];
        const int64_t used = in->seqused_k[b];
        kv.bt = vv.bt = in->block_table + b * bt_stride;
        ref_attn_seq_(p, &n, &kv, &vv, in->q + q0 * q_st, q_st, q_sh, in->cu_seqlens_q[b + 1] - q0, used,
                      in->seqused_k_global ? in->seqused_k_global[b] : used, s, out + (int64_t)q0 * n.hq * n.dv,
                      lse ? lse + (int64_t)q0 * n.hq : 0);
    }
    free(s);
    return 0;
}

REF_FN int ref_attn_dense(const ref_attn_params *p, int q_len, int64_t L, const uint16_t *q,
                          const uint16_t *k, const uint16_t *v, double *out, double *lse) {
    ref_attn_params p1 = *p;
    ref_norm_params_ n;
    ref_kv_view_ kv, vv;
    double *s;
    p1.world = 1;
    p1.rank = 0;
    p1.interleave = 1;
    if (ref_norm_(&p1, &n)) return -1;
    if (q_len < 0 || L < 0) return ref_fail_("ref: q_len %d, L %lld", q_len, (long long)L);
    memset(&kv, 0, sizeof kv);
    kv.base = k;
    kv.sh = n.dqk;
    kv.st = (int64_t)n.hkv * n.dqk;
    vv = kv;
    vv.base = v;
    vv.sh = n.dv;
    vv.st = (int64_t)n.hkv * n.dv;
    s = ref_scratch_(&n, L);
    if (!s) return ref_fail_("ref: out of memory");
    ref_attn_seq_(&p1, &n, &kv, &vv, q, (int64_t)n.hq * n.dqk, n.dqk, q_len, L, L, s, out, lse);
    free(s);
    return 0;
}

/* ---------------- sharding ---------------- */
typedef struct ref_shard_params {
    int hkv, dqk, dv;            /* dv 0: dqk */
    int page_size;
    int world, rank, interleave; /* 0 world or interleave: 1 */
    int dtype;                   /* unused by the copy; kept for the caller's bookkeeping */
    uint16_t fill;               /* bits of every unused cache slot (e.g. REF_BF16_NAN) */
    int extra_pages;             /* unused pages in the pool */
    int bt_extra_cols;           /* unused block-table columns */
    int32_t bt_fill;             /* value of unused block-table entries */
    uint64_t seed;               /* page order */
    int v_alias_k;               /* MLA: V is the first dv channels of K; no v cache */
    int head_major;              /* pages [page_size, hkv, d] (0) or [hkv, page_size, d] (1) */
} ref_shard_params;

typedef struct ref_shard {
    int batch;
    int64_t num_pages;
    uint16_t *k_cache, *v_cache; /* v_cache == k_cache with v_alias_k */
    int64_t k_stride_page, k_stride_t, k_stride_h;
    int64_t v_stride_page, v_stride_t, v_stride_h;
    int32_t *block_table;
    int64_t block_table_stride;
    int32_t *seqused_k, *seqused_k_global;
} ref_shard;

REF_FN void ref_shard_free(ref_shard *s) {
    if (s->v_cache != s->k_cache) free(s->v_cache);
    free(s->k_cache);
    free(s->block_table);
    free(s->seqused_k);
    free(s->seqused_k_global);
    memset(s, 0, sizeof *s);
}

REF_FN int ref_shard_build(ref_shard *s, const ref_shard_params *sp, int batch,
                           const int64_t *seqlen_global, const uint16_t *const *k_global,
                           const uint16_t *const *v_global) {
    int W = sp->world ? sp->world : 1, I = sp->interleave ? sp->interleave : 1, r = sp->rank;
    int dv = sp->dv ? sp->dv : sp->dqk, ps = sp->page_size, b, h;
    int64_t total = 0, maxp = 0, i, next = 0, kelems, velems;
    int64_t *perm;
    uint64_t rng = sp->seed;
    memset(s, 0, sizeof *s);
    if (W < 1 || r < 0 || r >= W || I < 1 || ps < 1 || sp->hkv < 1 || sp->dqk < 1 || batch < 0 ||
        sp->extra_pages < 0 || sp->bt_extra_cols < 0 || (sp->v_alias_k && dv > sp->dqk))
        return ref_fail_("ref_shard_build: bad parameters");
    for (b = 0; b < batch; b++) {
        int64_t np = (ref_local_len(seqlen_global[b], W, r, I) + ps - 1) / ps;
        total += np;
        if (np > maxp) maxp = np;
    }
    s->batch = batch;
    s->num_pages = total + sp->extra_pages;
    s->block_table_stride = maxp + sp->bt_extra_cols;
    if (s->block_table_stride < 1) s->block_table_stride = 1;
    s->k_stride_h = sp->head_major ? (int64_t)ps * sp->dqk : sp->dqk;
    s->k_stride_t = sp->head_major ? sp->dqk : (int64_t)sp->hkv * sp->dqk;
    s->k_stride_page = (int64_t)ps * sp->hkv * sp->dqk;
    if (sp->v_alias_k) {
        s->v_stride_h = s->k_stride_h;
        s->v_stride_t = s->k_stride_t;
        s->v_stride_page = s->k_stride_page;
    } else {
        s->v_stride_h = sp->head_major ? (int64_t)ps * dv : dv;
        s->v_stride_t = sp->head_major ? dv : (int64_t)sp->hkv * dv;
        s->v_stride_page = (int64_t)ps * sp->hkv * dv;
    }
    kelems = (s->num_pages > 0 ? s->num_pages : 1) * s->k_stride_page;
    velems = (s->num_pages > 0 ? s->num_pages : 1) * s->v_stride_page;
    s->k_cache = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)kelems);
    s->v_cache = sp->v_alias_k ? s->k_cache : (uint16_t *)malloc(sizeof(uint16_t) * (size_t)velems);
    s->block_table = (int32_t *)malloc(sizeof(int32_t) * (size_t)((batch ? batch : 1) * s->block_table_stride));
    s->seqused_k = (int32_t *)malloc(sizeof(int32_t) * (size_t)(batch ? batch : 1));
    s->seqused_k_global = (int32_t *)malloc(sizeof(int32_t) * (size_t)(batch ? batch : 1));
    perm = (int64_t *)malloc(sizeof(int64_t) * (size_t)(s->num_pages ? s->num_pages : 1));
    if (!s->k_cache || !s->v_cache || !s->block_table || !s->seqused_k || !s->seqused_k_global || !perm) {
        free(perm);
        ref_shard_free(s);
        return ref_fail_("ref_shard_build: out of memory");
    }
    ref_fill_bits(s->k_cache, kelems, sp->fill);
    if (!sp->v_alias_k) ref_fill_bits(s->v_cache, velems, sp->fill);
    for (i = 0; i < batch * s->block_table_stride; i++) s->block_table[i] = sp->bt_fill;
    for (i = 0; i < s->num_pages; i++) perm[i] = i;
    for (i = s->num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(ref_rand_u64(&rng) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (b = 0; b < batch; b++) {
        int64_t L = seqlen_global[b], n = ref_local_len(L, W, r, I), l;
        int64_t np = (n + ps - 1) / ps, pg;
        for (pg = 0; pg < np; pg++) s->block_table[b * s->block_table_stride + pg] = (int32_t)perm[next++];
        for (l = 0; l < n; l++) {
            int64_t g = ref_global_of_local(l, W, r, I);
            int64_t page = s->block_table[b * s->block_table_stride + l / ps], slot = l % ps;
            for (h = 0; h < sp->hkv; h++) {
                memcpy(s->k_cache + page * s->k_stride_page + slot * s->k_stride_t + h * s->k_stride_h,
                       k_global[b] + (g * sp->hkv + h) * sp->dqk, sizeof(uint16_t) * (size_t)sp->dqk);
                if (!sp->v_alias_k)
                    memcpy(s->v_cache + page * s->v_stride_page + slot * s->v_stride_t + h * s->v_stride_h,
                           v_global[b] + (g * sp->hkv + h) * dv, sizeof(uint16_t) * (size_t)dv);
            }
        }
        s->seqused_k[b] = (int32_t)n;
        s->seqused_k_global[b] = (int32_t)L;
    }
    free(perm);
    return 0;
}

REF_FN void ref_shard_inputs(const ref_shard *s, ref_attn_inputs *in) {
    in->k_cache = s->k_cache;
    in->k_stride_page = s->k_stride_page;
    in->k_stride_t = s->k_stride_t;
    in->k_stride_h = s->k_stride_h;
    in->v_cache = s->v_cache;
    in->v_stride_page = s->v_stride_page;
    in->v_stride_t = s->v_stride_t;
    in->v_stride_h = s->v_stride_h;
    in->num_pages = s->num_pages;
    in->block_table = s->block_table;
    in->block_table_stride = s->block_table_stride;
    in->seqused_k = s->seqused_k;
    in->seqused_k_global = s->seqused_k_global;
}

/* ---------------- merge ---------------- */
typedef struct ref_merge_args {
    int num_states, rows, heads, head_dim;
    const void *const *o; /* num_states arrays of o_type */
    int o_type;           /* REF_F64 (or 0), REF_FP32, REF_BF16, REF_FP16 */
    int64_t o_stride_t, o_stride_h;     /* 0: heads*head_dim, head_dim */
    const void *const *lse; /* num_states arrays of lse_type */
    int lse_type;           /* REF_F64 (or 0) or REF_FP32 */
    int64_t lse_stride_t, lse_stride_h; /* 0: heads, 1 */
    int lse_base2_in, lse_base2_out;
} ref_merge_args;

REF_FN void ref_merge(const ref_merge_args *a, double *out, double *lse_out) {
    int t, h, n, d;
    int o_type = a->o_type ? a->o_type : REF_F64, lse_type = a->lse_type ? a->lse_type : REF_F64;
    int64_t o_sh = a->o_stride_h ? a->o_stride_h : a->head_dim;
    int64_t o_st = a->o_stride_t ? a->o_stride_t : (int64_t)a->heads * o_sh;
    int64_t l_sh = a->lse_stride_h ? a->lse_stride_h : 1;
    int64_t l_st = a->lse_stride_t ? a->lse_stride_t : (int64_t)a->heads * l_sh;
    for (t = 0; t < a->rows; t++) {
        for (h = 0; h < a->heads; h++) {
            double m = -INFINITY, sum = 0, *o = out + ((int64_t)t * a->heads + h) * a->head_dim;
            int any = 0;
            for (d = 0; d < a->head_dim; d++) o[d] = 0;
            for (n = 0; n < a->num_states; n++) {
                double l = ref_load(a->lse[n], lse_type, t * l_st + h * l_sh);
                if (a->lse_base2_in) l *= REF_LN2;
                if (isfinite(l)) {
                    any = 1;
                    if (l > m) m = l;
                }
            }
            if (!any) {
                if (lse_out) lse_out[(int64_t)t * a->heads + h] = -INFINITY;
                continue;
            }
            for (n = 0; n < a->num_states; n++) {
                double l = ref_load(a->lse[n], lse_type, t * l_st + h * l_sh), w;
                if (a->lse_base2_in) l *= REF_LN2;
                if (!isfinite(l)) continue; /* empty: its o may be garbage, never read */
                w = exp(l - m);
                sum += w;
                for (d = 0; d < a->head_dim; d++) o[d] += w * ref_load(a->o[n], o_type, t * o_st + h * o_sh + d);
            }
            for (d = 0; d < a->head_dim; d++) o[d] /= sum;
            if (lse_out) {
                double l = m + log(sum);
                lse_out[(int64_t)t * a->heads + h] = a->lse_base2_out ? l / REF_LN2 : l;
            }
        }
    }
}

/* ---------------- error metric ---------------- */
typedef struct ref_err {
    double max_abs;    /* max |got - ref| over finite ref entries */
    double rel_fro;    /* ||got - ref||_F / ||ref||_F (absolute when ||ref|| = 0) */
    double ref_norm;   /* ||ref||_F */
    int64_t n;         /* entries compared */
    int64_t bad;       /* non-finite mismatches: NaN never passes */
    int64_t worst;     /* flat index (into ref) of the largest error or first bad entry; -1 none */
    double worst_ref, worst_got;
} ref_err;

REF_FN ref_err ref_compare3(const double *ref, const void *got, int got_type, int64_t n0, int64_t n1,
                            int64_t n2, int64_t s0, int64_t s1) {
    ref_err e;
    int64_t i0, i1, i2, first_bad = -1;
    double se = 0, sr = 0;
    int type = got_type ? got_type : REF_F64;
    if (!s1) s1 = n2;
    if (!s0) s0 = n1 * s1;
    memset(&e, 0, sizeof e);
    e.worst = -1;
    for (i0 = 0; i0 < n0; i0++)
        for (i1 = 0; i1 < n1; i1++)
            for (i2 = 0; i2 < n2; i2++) {
                int64_t k = (i0 * n1 + i1) * n2 + i2;
                double r = ref[k], g = ref_load(got, type, i0 * s0 + i1 * s1 + i2), d;
                e.n++;
                if (!isfinite(r)) {
                    /* -inf (an empty row's lse) must be exactly -inf; a NaN ref never passes */
                    if (isnan(r) || r != g) {
                        e.bad++;
                        if (first_bad < 0) first_bad = k, e.worst_ref = r, e.worst_got = g;
                    }
                    continue;
                }
                if (!isfinite(g)) {
                    e.bad++;
                    if (first_bad < 0) first_bad = k, e.worst_ref = r, e.worst_got = g;
                    continue;
                }
                d = fabs(g - r);
                se += d * d;
                sr += r * r;
                if (d > e.max_abs || e.worst < 0) {
                    if (d > e.max_abs) e.max_abs = d;
                    if (first_bad < 0) e.worst = k, e.worst_ref = r, e.worst_got = g;
                }
            }
    if (first_bad >= 0) e.worst = first_bad;
    e.ref_norm = sqrt(sr);
    e.rel_fro = sr > 0 ? sqrt(se) / sqrt(sr) : sqrt(se);
    return e;
}
REF_FN ref_err ref_compare(const double *ref, const void *got, int got_type, int64_t n) {
    return ref_compare3(ref, got, got_type, 1, 1, n, 0, 0);
}
REF_FN int ref_err_ok(const ref_err *e, double max_abs_tol, double rel_tol) {
    return e->bad == 0 && e->max_abs <= max_abs_tol && e->rel_fro <= rel_tol;
}
REF_FN int ref_err_within(const ref_err *e, const ref_err *baseline, double abs_floor, double rel_floor) {
    return baseline->bad == 0 &&
           ref_err_ok(e, 2 * baseline->max_abs + abs_floor, 2 * baseline->rel_fro + rel_floor);
}
REF_FN const char *ref_err_str(const ref_err *e) {
    static char buf[256];
    snprintf(buf, sizeof buf, "max_abs %.3g rel_fro %.3g bad %lld of %lld (worst [%lld] ref %.9g got %.9g)",
             e->max_abs, e->rel_fro, (long long)e->bad, (long long)e->n, (long long)e->worst,
             e->worst_ref, e->worst_got);
    return buf;
}

/* ---------------- sparse MLA ---------------- */
enum { REF_FP8DS = 6, REF_FP8DS_ROW = 656, REF_SPARSE_DQK = 576, REF_SPARSE_DV = 512 };

REF_FN void ref_fp8ds_quantize(const uint16_t *row, uint8_t *out) {
    int blk, d;
    for (blk = 0; blk < 4; blk++) {
        double amax = 0;
        float sc;
        for (d = 0; d < 128; d++) {
            double v = fabs((double)ref_bf16_to_float(row[blk * 128 + d]));
            if (v > amax) amax = v;
        }
        sc = amax > 0 ? (float)(amax / 448.0) : 1.0f;
        memcpy(out + 512 + 4 * blk, &sc, 4);
        for (d = 0; d < 128; d++)
            out[blk * 128 + d] = ref_double_to_e4m3((double)ref_bf16_to_float(row[blk * 128 + d]) / (double)sc);
    }
    memcpy(out + 528, row + 512, 128);
}
REF_FN double ref_fp8ds_value(const uint8_t *row, int d) {
    float sc;
    uint16_t h;
    if (d >= 512) {
        memcpy(&h, row + 528 + 2 * (d - 512), 2);
        return (double)ref_bf16_to_float(h);
    }
    memcpy(&sc, row + 512 + 4 * (d / 128), 4);
    return ref_e4m3_to_double(row[d]) * (double)sc;
}
REF_FN int64_t ref_sparse_local(int64_t g, int64_t L, int W, int r, int I) {
    if (g < 0 || g >= L || ref_owner(g, W, I) != r) return -1;
    return ref_local_index(g, W, I);
}

typedef struct ref_sparse_inputs {
    int batch;
    const uint16_t *q;         /* [total_q, hq, 576] */
    const void *cache;         /* rows of 576 16-bit values, of 576 e4m3 bytes (REF_E4M3, with
                                  the params' k_scale and v_scale) or of 656 bytes (REF_FP8DS) */
    int cache_type;            /* 0 or the dtype; REF_E4M3; REF_FP8DS */
    int64_t stride_page, stride_t; /* in elements of the cache type; 0: contiguous rows */
    int64_t num_pages;
    const int32_t *block_table;
    int64_t block_table_stride;
    const int32_t *cu_seqlens_q, *seqused_k, *seqused_k_global;
    const int32_t *ids;        /* [total_q, ids_stride] */
    int64_t ids_stride;        /* 0: topk */
    int topk;
    const int32_t *counts;     /* optional [total_q] */
    const float *sinks;        /* optional [hq] */
} ref_sparse_inputs;

REF_FN int ref_sparse_attn(const ref_attn_params *p, const ref_sparse_inputs *in, double *out, double *lse) {
    ref_norm_params_ n;
    const int fp8 = in->cache_type == REF_FP8DS, e4 = in->cache_type == REF_E4M3, D = REF_SPARSE_DQK,
              DV = REF_SPARSE_DV;
    const int64_t row = fp8 ? REF_FP8DS_ROW : D;
    const int64_t st = in->stride_t ? in->stride_t : row, sp = in->stride_page ? in->stride_page : p->page_size * st;
    const int64_t ids_st = in->ids_stride ? in->ids_stride : in->topk;
    double *keys, *vals, *s, *qd;
    int b, i, h, j, d;
    if (ref_norm_(p, &n)) return -1;
    if (n.dqk != D || n.dv != DV || n.hkv != 1) return ref_fail_("ref_sparse: dims %d/%d, hkv %d", n.dqk, n.dv, n.hkv);
    if (p->page_size < 1 || in->topk < 0) return ref_fail_("ref_sparse: page_size %d, topk %d", p->page_size, in->topk);
    if (e4 && (!p->k_scale || !p->v_scale)) return ref_fail_("ref_sparse: an e4m3 cache needs k_scale and v_scale");
    /* rows rounded up to 4 (zeros past the last key): the scores are taken 4 keys at a time;
       vals: the values where they differ from the keys (an e4m3 cache: v_scale, not k_scale),
       after the keys in the same block */
    keys = (double *)calloc((size_t)((in->topk + 4) / 4 * 4 * D + (e4 ? (in->topk + 1) * DV : 0)), sizeof(double));
    vals = e4 ? keys + (in->topk + 4) / 4 * 4 * D : keys;
    s = (double *)malloc(sizeof(double) * (size_t)(in->topk + 4 + D));
    if (!keys || !s) {
        free(keys);
        free(s);
        return ref_fail_("ref_sparse: out of memory");
    }
    qd = s + in->topk + 4; /* the query row in double, converted once per head */
    for (b = 0; b < in->batch; b++) {
        const int q0 = in->cu_seqlens_q[b], q_len = in->cu_seqlens_q[b + 1] - q0;
        const int64_t used = in->seqused_k[b], glob = in->seqused_k_global ? in->seqused_k_global[b] : used;
        if (ref_local_len(glob, n.W, n.r, n.I) != used) {
            free(keys);
            free(s);
            return ref_fail_("ref_sparse: sequence %d: seqused_k %lld != local_len(%lld)", b, (long long)used,
                             (long long)glob);
        }
        for (i = 0; i < q_len; i++) {
            const int64_t t = q0 + i;
            int cnt = in->counts ? in->counts[t] : in->topk, nk = 0;
            if (cnt < 0) cnt = 0;
            if (cnt > in->topk) cnt = in->topk;
            for (j = 0; j < cnt; j++) { /* the kept keys, dequantized, in list order */
                const int64_t l = ref_sparse_local(in->ids[t * ids_st + j], glob, n.W, n.r, n.I);
                int32_t page;
                if (l < 0) continue;
                page = in->block_table[b * in->block_table_stride + l / p->page_size];
                if (page < 0 || page >= in->num_pages) {
                    free(keys);
                    free(s);
                    return ref_fail_("ref_sparse: block_table[%d][%lld] = %d", b, (long long)(l / p->page_size), page);
                }
                for (d = 0; d < D; d++) {
                    const int64_t at = page * sp + (l % p->page_size) * st;
                    double v;
                    if (e4) { /* as ref_kv_: the dequantized value, rounded to dtype in the baseline */
                        const double x = ref_e4m3_to_double(((const uint8_t *)in->cache)[at + d]);
                        v = x * (double)p->k_scale[0];
                        if (d < DV) {
                            const double y = x * (double)p->v_scale[0];
                            vals[(int64_t)nk * DV + d] = p->emulate_lowp ? ref_round_to(y, n.dtype) : y;
                        }
                        if (p->emulate_lowp) v = ref_round_to(v, n.dtype);
                    } else {
                        v = fp8 ? ref_fp8ds_value((const uint8_t *)in->cache + at, d)
                                : ref_h2d(((const uint16_t *)in->cache)[at + d], n.dtype);
                        if (fp8 && p->emulate_lowp) v = ref_round_to(v, REF_BF16);
                    }
                    keys[(int64_t)nk * D + d] = v;
                }
                nk++;
            }
            memset(keys + (int64_t)nk * D, 0, sizeof(double) * (size_t)((4 - nk % 4) % 4 * D));
            for (h = 0; h < n.hq; h++) {
                const uint16_t *qr = in->q + (t * n.hq + h) * D;
                double *o = out + (t * n.hq + h) * DV, m = -INFINITY, sum = 0, l2;
                for (d = 0; d < DV; d++) o[d] = 0;
                for (d = 0; d < D; d++) qd[d] = ref_h2d(qr[d], n.dtype);
                for (j = 0; j < nk; j += 4) { /* four sums side by side, each in channel order */
                    const double *k = keys + (int64_t)j * D;
                    double dot[4] = {0, 0, 0, 0};
                    int x;
                    for (d = 0; d < D; d++) {
                        dot[0] += qd[d] * k[d];
                        dot[1] += qd[d] * k[D + d];
                        dot[2] += qd[d] * k[2 * D + d];
                        dot[3] += qd[d] * k[3 * D + d];
                    }
                    for (x = 0; x < 4 && j + x < nk; x++) {
                        s[j + x] = dot[x] * n.scale;
                        if (s[j + x] > m) m = s[j + x];
                    }
                }
                for (j = 0; j < nk; j++) {
                    double e = exp(s[j] - m), pe = p->emulate_lowp ? ref_round_to(e, n.dtype) : e;
                    sum += e;
                    const double *vr = e4 ? vals + (int64_t)j * DV : keys + (int64_t)j * D;
                    for (d = 0; d < DV; d++) o[d] += pe * vr[d];
                }
                l2 = nk ? m + log(sum) : -INFINITY;
                for (d = 0; d < DV; d++) o[d] = nk ? o[d] / sum : 0;
                if (in->sinks && isfinite((double)in->sinks[h])) {
                    const double sk = (double)in->sinks[h], mm = l2 > sk ? l2 : sk;
                    const double l3 = mm + log(exp(l2 - mm) + exp(sk - mm));
                    for (d = 0; d < DV; d++) o[d] *= exp(l2 - l3);
                    l2 = l3;
                }
                if (p->emulate_lowp)
                    for (d = 0; d < DV; d++) o[d] = ref_round_to(o[d], n.dtype);
                if (lse) lse[t * n.hq + h] = p->lse_base2 && isfinite(l2) ? l2 / REF_LN2 : l2;
            }
        }
    }
    free(keys);
    free(s);
    return 0;
}

REF_FN void ref_sparse_ids(int32_t *ids, int64_t stride, int topk, int64_t L, int q_len, int i, int none,
                           uint64_t *state) {
    const int64_t p = L - q_len + i;
    int j;
    for (j = 0; j < topk; j++) {
        const int u = (int)(ref_rand_u64(state) % 100);
        if (none || u < 30) ids[j] = -1;
        else if (u < 38) ids[j] = (int32_t)(L + (int64_t)(ref_rand_u64(state) % 50));
        else if (u < 45 && j > 0) ids[j] = ids[ref_rand_u64(state) % (uint64_t)j];
        else ids[j] = (int32_t)(p >= 0 ? (int64_t)(ref_rand_u64(state) % (uint64_t)(p + 1)) : 0);
    }
    for (j = topk; j < stride; j++) ids[j] = 0x7fffffff;
}

#endif /* DCPATTN_TEST_REF_H */
