/* test_cpu.c — CPU tests of the DCP contract on the reference (no GPU, no library code):
   1. placement and mask formulas against brute force;
   2. 16-bit conversions and the error metric;
   3. the identity "shard -> per-rank attention -> merge = unsharded attention";
   4. merge edge cases (empty states, all empty, single state, extreme LSE).
   Build: gcc -std=c99 -Wall -Wextra -Werror -fsanitize=address,undefined -Itests
          tests/test_cpu.c -o build/test_cpu -lm */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ref.h"

/* ------------------------------------------------------------------ 1. placement */
static void test_placement(void) {
    static const int Is[] = {1, 2, 3, 16, 64};
    int W, r, ii;
    for (W = 1; W <= 8; W++)
        for (ii = 0; ii < 5; ii++)
            for (r = 0; r < W; r++) {
                int I = Is[ii];
                int64_t L, g, errs = 0;
                int64_t glist[301]; /* global position of each local index of rank r, g < 301 */
                int64_t nloc = 0;
                char first[200] = "";
#define NOTE_ERR(...)                                                   \
    do {                                                                \
        if (!errs++) snprintf(first, sizeof first, __VA_ARGS__);        \
    } while (0)
                /* local_len(L) counts the tokens of [0, L) that rank r owns */
                for (L = 0; L <= 300; L++) {
                    if (L > 0 && ref_owner(L - 1, W, I) == r) glist[nloc++] = L - 1;
                    if (ref_local_len(L, W, r, I) != nloc)
                        NOTE_ERR("local_len(%lld) = %lld, count %lld", (long long)L,
                                 (long long)ref_local_len(L, W, r, I), (long long)nloc);
                }
                /* local indices are dense and increasing in g; global_of_local inverts them */
                for (g = 0; g < 300; g++) {
                    int o = ref_owner(g, W, I);
                    int64_t l = ref_local_index(g, W, I);
                    if (o < 0 || o >= W) NOTE_ERR("owner(%lld) = %d", (long long)g, o);
                    if (ref_global_of_local(l, W, o, I) != g)
                        NOTE_ERR("global_of_local(local_index(%lld)) = %lld", (long long)g,
                                 (long long)ref_global_of_local(l, W, o, I));
                    if (o == r && (l >= nloc || glist[l] != g))
                        NOTE_ERR("local_index(%lld) = %lld is not its rank in the owned list",
                                 (long long)g, (long long)l);
                }
                /* the causal row limit: query row i of q_len at p = L - q_len + i sees the local
                   keys with g(l) <= p, and those are exactly l < local_len(p + 1). Every
                   (q_len <= 20, i) has d = q_len - i in 1..20, so p = L - d covers them all. */
                for (L = 0; L <= 300; L++) {
                    int64_t n = ref_local_len(L, W, r, I);
                    int d;
                    for (d = 1; d <= 20; d++) {
                        int64_t p = L - d, limit = ref_local_len(p + 1, W, r, I), cnt = 0, l;
                        for (l = 0; l < n; l++) {
                            int vis = ref_global_of_local(l, W, r, I) <= p;
                            cnt += vis;
                            if (vis != (l < limit))
                                NOTE_ERR("L %lld p %lld: key %lld visible %d, limit %lld",
                                         (long long)L, (long long)p, (long long)l, vis,
                                         (long long)limit);
                        }
                        if (cnt != limit || limit > n)
                            NOTE_ERR("L %lld p %lld: %lld visible, local_len(p+1) = %lld",
                                     (long long)L, (long long)p, (long long)cnt, (long long)limit);
                    }
                }
#undef NOTE_ERR
                CHECK(errs == 0, "placement W=%d r=%d I=%d: %lld errors, first: %s", W, r, I,
                      (long long)errs, first);
            }
    /* spot values from docs/contract.md 2: W=4, I=2: token 9 is on rank 0 (9/2 % 4 = 0), local 3 */
    CHECK(ref_owner(9, 4, 2) == 0 && ref_local_index(9, 4, 2) == 3, "W=4 I=2 token 9");
    CHECK(ref_global_of_local(3, 4, 0, 2) == 9, "W=4 I=2 rank 0 local 3");
    CHECK(ref_local_len(10, 4, 0, 2) == 4 && ref_local_len(10, 4, 1, 2) == 2 &&
              ref_local_len(10, 4, 3, 2) == 2,
          "W=4 I=2 L=10 local lengths");
    CHECK(ref_local_len(-5, 4, 0, 2) == 0 && ref_local_len(-100, 2, 1, 16) == 0,
          "negative prefix has no tokens");
}

/* ------------------------------------------------------------------ 2. conversions, metric */
static int is_even_bits(uint16_t h) { return (h & 1) == 0; }

/* f rounds to h: h is the nearest value (ties to the even one) among h-1, h, h+1 */
static int nearest_ok(float f, uint16_t h, float (*dec)(uint16_t)) {
    double v = dec(h), dv = fabs((double)f - v);
    int k;
    for (k = -1; k <= 1; k += 2) {
        uint16_t n = (uint16_t)(h + k);
        double w, dw;
        if (((n ^ h) & 0x8000) != 0) continue; /* crossed the sign: not a neighbour */
        w = dec(n);
        if (isnan(w) || isinf(w)) continue;
        dw = fabs((double)f - w);
        if (dw < dv) return 0;
        if (dw == dv && !is_even_bits(h)) return 0;
    }
    return 1;
}

static void test_conversions(void) {
    uint32_t x;
    int errs_b = 0, errs_h = 0, errs_rb = 0, errs_rh = 0, i;
    uint64_t rng = 12345;
    /* every 16-bit pattern survives a round trip through float (NaN stays NaN) */
    for (x = 0; x < 65536; x++) {
        uint16_t h = (uint16_t)x;
        float fb = ref_bf16_to_float(h), fh = ref_fp16_to_float(h);
        if (isnan(fb) ? !isnan(ref_bf16_to_float(ref_float_to_bf16(fb))) : ref_float_to_bf16(fb) != h) errs_b++;
        if (isnan(fh) ? !isnan(ref_fp16_to_float(ref_float_to_fp16(fh))) : ref_float_to_fp16(fh) != h) errs_h++;
    }
    CHECK(errs_b == 0, "bf16 round trip: %d errors", errs_b);
    CHECK(errs_h == 0, "fp16 round trip: %d errors", errs_h);
    /* random floats of every magnitude round to the nearest, ties to even */
    for (i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)ref_rand_u64(&rng);
        float f;
        if (i % 4 == 0) bits = (bits & 0xffff0000u) | 0x8000u; /* bf16 halfway points */
        if (i % 4 == 1) bits = (bits & 0xffffe000u) | 0x1000u; /* fp16 halfway points (normal range) */
        memcpy(&f, &bits, 4);
        if (isnan(f) || isinf(f)) continue;
        if (fabsf(f) < 3.38e38f && !nearest_ok(f, ref_float_to_bf16(f), ref_bf16_to_float)) errs_rb++;
        if (fabsf(f) < 65504.f && !nearest_ok(f, ref_float_to_fp16(f), ref_fp16_to_float)) errs_rh++;
    }
    CHECK(errs_rb == 0, "float -> bf16 nearest-even: %d errors", errs_rb);
    CHECK(errs_rh == 0, "float -> fp16 nearest-even: %d errors", errs_rh);
    CHECK(ref_float_to_bf16(1.0f) == 0x3f80 && ref_float_to_bf16(1.0f + 1.0f / 256) == 0x3f80 &&
              ref_float_to_bf16(1.0f + 3.0f / 256) == 0x3f82 && ref_float_to_bf16(-2.0f) == 0xc000,
          "bf16 spot values");
    CHECK(ref_float_to_fp16(1.0f) == 0x3c00 && ref_float_to_fp16(65504.f) == 0x7bff &&
              ref_float_to_fp16(65519.f) == 0x7bff && ref_float_to_fp16(65520.f) == 0x7c00 &&
              ref_float_to_fp16(-1e9f) == 0xfc00 && ref_float_to_fp16((float)ldexp(1, -24)) == 0x0001 &&
              ref_float_to_fp16((float)ldexp(1, -25)) == 0x0000 &&
              ref_float_to_fp16((float)ldexp(3, -25)) == 0x0002 &&
              ref_float_to_fp16((float)ldexp(1, -14)) == 0x0400,
          "fp16 spot values");
    CHECK(isnan(ref_round_bf16(NAN)) && isnan(ref_round_fp16(NAN)) && isinf(ref_round_bf16(INFINITY)) &&
              ref_round_fp16(-INFINITY) == -INFINITY,
          "NaN and inf survive rounding");
    CHECK(isnan(ref_bf16_to_float(REF_BF16_NAN)) && isnan(ref_fp16_to_float(REF_FP16_NAN)), "NaN poison bits");
}

/* templates/common.cuh, e4m3x4_to, step by step on the CPU: prmt places bytes 0, 1 (2, 3) at the
   high bytes of two 16-bit halves, a mask and a shift move sign, exponent and mantissa into
   T's fields, and a multiply by 2^(bias(T) - 7) rebiases (exact in double here). */
static uint32_t prmt_emul(uint32_t a, uint32_t b, uint32_t sel) {
    const uint64_t bytes = (uint64_t)a | (uint64_t)b << 32;
    uint32_t d = 0;
    int i;
    for (i = 0; i < 4; i++) d |= (uint32_t)((bytes >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return d;
}
static void e4m3x4_emul(int dtype, uint32_t w, double out[4]) {
    const uint32_t x[2] = {prmt_emul(w, 0, 0x1404u), prmt_emul(w, 0, 0x3424u)};
    int i, half;
    for (i = 0; i < 2; i++) {
        const uint32_t h = dtype == REF_FP16 ? (x[i] & 0x80008000u) | ((x[i] >> 1) & 0x3f803f80u)
                                             : (x[i] & 0x80008000u) | ((x[i] >> 4) & 0x07f007f0u);
        for (half = 0; half < 2; half++)
            out[2 * i + half] = ref_h2d((uint16_t)(h >> (16 * half)), dtype) * (dtype == REF_FP16 ? 256.0 : ldexp(1, 120));
    }
}

/* templates/gqa.cuh, q_tile_to_e4m3 (f32x2_to_e4m3x2_hilo), on the CPU: a query element x, scaled
   by the power of two that puts the tile's largest magnitude L in [2^7, 2^8), becomes hi =
   e4m3(x) and lo = e4m3(x - hi) (nearest, saturating, as cvt.rn.satfinite; x - hi is exact in
   fp32). Every bf16 magnitude up to L: hi + lo == x from 2^-9 L on, else within 2^-17 L; every
   fp16 one: within 2^-8 x + 2^-17 L. */
static void test_q_e4m3_split(void) {
    static const double LARGEST[3] = {128.0, 200.0, 255.0};
    int i, b, bad_bf16 = 0, bad_fp16 = 0, n = 0;
    for (i = 0; i < 3; i++) {
        const double L = LARGEST[i];
        for (b = 0; b < 0x10000; b++) {
            const int bf = b < 0x8000; /* the first half: bf16 bits, the second: fp16 bits */
            const uint16_t h = (uint16_t)(b & 0x7fff);
            const double x = bf ? ref_bf16_to_float(h) : ref_fp16_to_float(h);
            double hi, lo, err;
            if (!(x <= L)) continue; /* also NaN */
            hi = ref_e4m3_to_double(ref_double_to_e4m3(x));
            lo = ref_e4m3_to_double(ref_double_to_e4m3(x - hi));
            err = fabs(hi + lo - x);
            n++;
            if (bf && (x >= ldexp(L, -9) ? err != 0 : err > ldexp(L, -17))) bad_bf16++;
            if (!bf && err > ldexp(x, -8) + ldexp(L, -17)) bad_fp16++;
        }
    }
    CHECK(n > 3 * 30000 && bad_bf16 == 0, "Q as e4m3 hi + lo: %d of the bf16 values below the largest not held", bad_bf16);
    CHECK(bad_fp16 == 0, "Q as e4m3 hi + lo: %d of the fp16 values below the largest off by more than 2^-8", bad_fp16);
}

static void test_e4m3(void) {
    int c, nan = 0, errs_int = 0, errs_kern = 0, errs_rt = 0, errs_near = 0, dt, i;
    uint64_t rng = 777;
    /* every encoding against integer arithmetic: a finite e4m3 value times 2^9 is the integer
       m (exponent 0) or (8 + m) << (e - 1) */
    for (c = 0; c < 256; c++) {
        const int e = (c >> 3) & 15, m = c & 7;
        const double v = ref_e4m3_to_double((uint8_t)c);
        long v512;
        if (e == 15 && m == 7) {
            nan += isnan(v) != 0;
            continue;
        }
        v512 = e == 0 ? m : (long)(8 + m) << (e - 1);
        if (isnan(v) || v * 512.0 != (c & 0x80 ? -(double)v512 : (double)v512) || (signbit(v) != 0) != (c >= 0x80))
            errs_int++;
    }
    CHECK(nan == 2 && errs_int == 0, "e4m3 decode: %d NaN encodings (want 0x7f, 0xff), %d wrong values", nan, errs_int);
    CHECK(ref_e4m3_to_double(0x00) == 0 && !signbit(ref_e4m3_to_double(0x00)) && ref_e4m3_to_double(0x80) == 0 &&
              signbit(ref_e4m3_to_double(0x80)) && ref_e4m3_to_double(0x01) == ldexp(1, -9) &&
              ref_e4m3_to_double(0x07) == ldexp(7, -9) && ref_e4m3_to_double(0x08) == ldexp(1, -6) &&
              ref_e4m3_to_double(0x38) == 1.0 && ref_e4m3_to_double(0x7e) == 448.0 &&
              ref_e4m3_to_double(0xfe) == -448.0 && ref_e4m3_to_double(0xb9) == -1.125,
          "e4m3 spot values");
    for (c = 1; c <= 0x7e; c++)
        if (!(ref_e4m3_to_double((uint8_t)c) > ref_e4m3_to_double((uint8_t)(c - 1)))) errs_int++;
    CHECK(errs_int == 0, "e4m3 magnitudes not increasing with the code");
    /* the kernel's conversion, emulated, for every byte in every position of the word (NaN
       bytes become +-480: the kernel never reads them) */
    for (dt = REF_BF16; dt <= REF_FP16; dt++)
        for (c = 0; c < 256; c++)
            for (i = 0; i < 4; i++) {
                const uint32_t w = (uint32_t)c << (8 * i) | (uint32_t)(0x38u << (8 * ((i + 1) & 3)));
                const double want = (c & 0x7f) == 0x7f ? (c & 0x80 ? -480.0 : 480.0) : ref_e4m3_to_double((uint8_t)c);
                double got[4];
                e4m3x4_emul(dt, w, got);
                if (got[i] != want || signbit(got[i]) != signbit(want) || got[(i + 1) & 3] != 1.0) errs_kern++;
            }
    CHECK(errs_kern == 0, "kernel e4m3 -> bf16/fp16 bit placement: %d errors", errs_kern);
    /* the encoder: every finite code round-trips; saturation; ties to the even code */
    for (c = 0; c < 256; c++)
        if ((c & 0x7f) != 0x7f && ref_double_to_e4m3(ref_e4m3_to_double((uint8_t)c)) != c) errs_rt++;
    CHECK(errs_rt == 0, "e4m3 encode(decode(c)) != c for %d codes", errs_rt);
    CHECK(ref_double_to_e4m3(448.0) == 0x7e && ref_double_to_e4m3(464.0) == 0x7e && ref_double_to_e4m3(1e30) == 0x7e &&
              ref_double_to_e4m3(INFINITY) == 0x7e && ref_double_to_e4m3(-INFINITY) == 0xfe &&
              (ref_double_to_e4m3(NAN) & 0x7f) == 0x7f && ref_double_to_e4m3(-0.0) == 0x80 &&
              ref_double_to_e4m3(1.0625) == 0x38 && ref_double_to_e4m3(1.1875) == 0x3a &&
              ref_double_to_e4m3(1.0626) == 0x39 && ref_double_to_e4m3(ldexp(1, -10)) == 0x00 &&
              ref_double_to_e4m3(-ldexp(1, -10)) == 0x80 && ref_double_to_e4m3(ldexp(1.01, -10)) == 0x01 &&
              ref_double_to_e4m3(ldexp(3, -10)) == 0x02 && ref_double_to_e4m3(ldexp(1, -20)) == 0x00,
          "e4m3 encoder: saturation, signed zero, ties to even");
    for (i = 0; i < 100000; i++) {
        const double x = ldexp(ref_rand_uniform(&rng), (int)(ref_rand_u64(&rng) % 20) - 10);
        const int q = ref_double_to_e4m3(x), mag = q & 0x7f;
        const double err = fabs(ref_e4m3_to_double((uint8_t)q) - x);
        if ((mag > 0 && fabs(ref_e4m3_to_double((uint8_t)(q - 1)) - x) < err) ||
            (mag < 0x7e && fabs(ref_e4m3_to_double((uint8_t)(q + 1)) - x) < err))
            errs_near++;
    }
    CHECK(errs_near == 0, "e4m3 encoder not nearest: %d values", errs_near);
}

/* An e4m3 cache in ref_attn equals a bf16 cache holding the dequantized values, where those are
   bf16 values (power-of-two scales): the scales are applied per KV head, to K and V apart. */
static void test_attn_e4m3(void) {
    enum { QL = 3, HQ = 4, HKV = 2, D = 32, L = 40 };
    static uint16_t q[QL * HQ * D], k8[L * HKV * D], v8[L * HKV * D], kb[L * HKV * D], vb[L * HKV * D];
    static double o8[QL * HQ * D], ob[QL * HQ * D], l8[QL * HQ], lb[QL * HQ];
    const float ks[HKV] = {0.25f, 2.0f}, vs[HKV] = {0.5f, 0.125f};
    ref_attn_params p;
    ref_err e;
    uint64_t rng = 99;
    int i, per_head;
    ref_fill_uniform(q, QL * HQ * D, REF_BF16, 2.0, &rng);
    for (i = 0; i < L * HKV * D; i++) {
        k8[i] = ref_double_to_e4m3(4.0 * ref_rand_uniform(&rng));
        v8[i] = ref_double_to_e4m3(ldexp(ref_rand_uniform(&rng), -6)); /* subnormals too */
    }
    for (per_head = 0; per_head < 2; per_head++) {
        for (i = 0; i < L * HKV * D; i++) {
            const int h = per_head ? (i / D) % HKV : 0;
            kb[i] = ref_float_to_bf16((float)(ref_e4m3_to_double((uint8_t)k8[i]) * ks[h]));
            vb[i] = ref_float_to_bf16((float)(ref_e4m3_to_double((uint8_t)v8[i]) * vs[h]));
        }
        memset(&p, 0, sizeof p);
        p.hq = HQ, p.hkv = HKV, p.dqk = D, p.causal = 1, p.dtype = REF_BF16;
        CHECK(ref_attn_dense(&p, QL, L, q, kb, vb, ob, lb) == 0, "bf16 twin: %s", ref_error());
        p.kv_dtype = REF_E4M3, p.k_scale = ks, p.v_scale = vs, p.kv_scale_per_head = per_head;
        CHECK(ref_attn_dense(&p, QL, L, q, k8, v8, o8, l8) == 0, "e4m3: %s", ref_error());
        e = ref_compare(ob, o8, REF_F64, QL * HQ * D);
        CHECK(e.bad == 0 && e.max_abs == 0, "e4m3 cache (per head %d) != its bf16 twin: %s", per_head, ref_err_str(&e));
        e = ref_compare(lb, l8, REF_F64, QL * HQ);
        CHECK(e.bad == 0 && e.max_abs == 0, "e4m3 lse (per head %d): %s", per_head, ref_err_str(&e));
    }
    p.k_scale = NULL;
    CHECK(ref_attn_dense(&p, QL, L, q, k8, v8, o8, l8) == -1 && strstr(ref_error(), "k_scale"), "missing scale: %s",
          ref_error());
}

static void test_metric(void) {
    double ref[4] = {1, -2, 0.5, -INFINITY}, got[4] = {1.5, -2, 0.5, -INFINITY};
    float gotf[4] = {1, -2, 0.5f, -INFINITY};
    ref_err e = ref_compare(ref, got, REF_F64, 4), base;
    CHECK(e.bad == 0 && e.max_abs == 0.5 && fabs(e.rel_fro - 0.5 / sqrt(5.25)) < 1e-15 && e.worst == 0,
          "metric values: %s", ref_err_str(&e));
    CHECK(ref_err_ok(&e, 0.5, 0.3) && !ref_err_ok(&e, 0.4, 0.3), "ref_err_ok thresholds");
    e = ref_compare(ref, gotf, REF_FP32, 4);
    CHECK(e.bad == 0 && e.max_abs == 0 && ref_err_ok(&e, 0, 0), "exact float match passes");
    gotf[1] = NAN;
    e = ref_compare(ref, gotf, REF_FP32, 4);
    CHECK(e.bad == 1 && e.worst == 1 && !ref_err_ok(&e, 1e30, 1e30), "NaN where ref is finite fails");
    gotf[1] = -2;
    gotf[3] = 0;
    e = ref_compare(ref, gotf, REF_FP32, 4);
    CHECK(e.bad == 1 && !ref_err_ok(&e, 1e30, 1e30), "finite where ref is -inf (empty lse) fails");
    gotf[3] = INFINITY;
    e = ref_compare(ref, gotf, REF_FP32, 4);
    CHECK(e.bad == 1, "+inf where ref is -inf fails");
    gotf[3] = -INFINITY;
    gotf[0] = INFINITY;
    e = ref_compare(ref, gotf, REF_FP32, 4);
    CHECK(e.bad == 1, "inf where ref is finite fails");
    ref[2] = NAN;
    e = ref_compare(ref, ref, REF_F64, 4);
    CHECK(e.bad == 1, "a NaN reference never passes, even against NaN");
    {   /* strided got: [2, 2, 3] with head stride 4 and row stride 10 */
        double r3[12], g3[20];
        int i, j, k;
        for (i = 0; i < 20; i++) g3[i] = NAN; /* padding must not be read */
        for (i = 0; i < 2; i++)
            for (j = 0; j < 2; j++)
                for (k = 0; k < 3; k++) r3[(i * 2 + j) * 3 + k] = g3[i * 10 + j * 4 + k] = i + 10 * j + 100 * k;
        e = ref_compare3(r3, g3, REF_F64, 2, 2, 3, 10, 4);
        CHECK(e.bad == 0 && e.max_abs == 0 && e.n == 12, "strided compare: %s", ref_err_str(&e));
    }
    memset(&base, 0, sizeof base);
    base.max_abs = 1e-3;
    base.rel_fro = 1e-3;
    e.bad = 0;
    e.max_abs = 2.5e-3;
    e.rel_fro = 1e-3;
    CHECK(ref_err_within(&e, &base, 1e-3, 0) && !ref_err_within(&e, &base, 1e-4, 0),
          "ref_err_within is 2 * baseline + floor");
}

/* ------------------------------------------------------------------ 3. shard identity */
typedef struct seq_ {
    int q_len;
    int64_t L;
    uint16_t *q, *k, *v; /* q [q_len, hq, d], k/v [L, hkv, d] */
} seq_;

static int64_t rand_range(uint64_t *s, int64_t lo, int64_t hi) { /* inclusive */
    return hi <= lo ? lo : lo + (int64_t)(ref_rand_u64(s) % (uint64_t)(hi - lo + 1));
}

static int64_t empty_rank_rows; /* rank rows that saw no key, over the whole identity sweep */

/* One configuration: B sequences, each rank's paged attention, merged, against dense. */
static void identity_case(int W, int I, int ps, int q_len, int causal, int group, int dtype,
                          int pad_q, uint64_t seed) {
    enum { B = 3, HKV = 2, D = 16, DV = 24 };
    const int hq = HKV * group;
    seq_ seqs[B];
    int b, r, i, t, total_q = 0;
    int32_t cu[B + 1];
    int64_t Ls[B];
    const uint16_t *kg[B], *vg[B];
    uint64_t rng = seed;
    ref_attn_params p;
    double *dense_o, *dense_l, *rank_o[8], *rank_l[8], *rank_l2[8], *mo, *ml;
    uint16_t *q;
    int64_t q_sh = D + (pad_q ? 8 : 0), q_st = hq * q_sh + (pad_q ? 3 : 0);
    int fails = 0;
    char what[160];

    snprintf(what, sizeof what, "W=%d I=%d ps=%d q_len=%d causal=%d group=%d dtype=%d pad=%d", W, I,
             ps, q_len, causal, group, dtype, pad_q);
    memset(&p, 0, sizeof p);
    p.hq = hq;
    p.hkv = HKV;
    p.dqk = D;
    p.dv = DV;
    p.page_size = ps;
    p.causal = causal;
    p.scale = 0.37;
    p.world = W;
    p.interleave = I;
    p.dtype = dtype;
    /* lengths: one long-ish, one short (L < W*I when q_len allows: some ranks empty), one random */
    for (b = 0; b < B; b++) {
        int ql = b == 2 ? 1 : q_len;
        int64_t L;
        if (b == 0) L = rand_range(&rng, ql, ql + 150);
        else if (b == 1) L = rand_range(&rng, ql, ql > W * I - 1 ? ql : W * I - 1);
        else L = rand_range(&rng, 1, 300);
        seqs[b].q_len = ql;
        seqs[b].L = Ls[b] = L;
        seqs[b].q = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(ql * hq * D));
        seqs[b].k = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(L * HKV * D));
        seqs[b].v = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(L * HKV * DV));
        ref_fill_uniform(seqs[b].q, ql * hq * D, dtype, 2.0, &rng);
        ref_fill_uniform(seqs[b].k, L * HKV * D, dtype, 2.0, &rng);
        ref_fill_uniform(seqs[b].v, L * HKV * DV, dtype, 1.0, &rng);
        kg[b] = seqs[b].k;
        vg[b] = seqs[b].v;
        cu[b] = total_q;
        total_q += ql;
    }
    cu[B] = total_q;
    /* q in the varlen layout, possibly padded (NaN in the padding: never read) */
    q = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(total_q * q_st));
    ref_fill_bits(q, total_q * q_st, REF_BF16_NAN);
    for (b = 0; b < B; b++)
        for (i = 0; i < seqs[b].q_len; i++)
            for (t = 0; t < hq; t++)
                memcpy(q + (cu[b] + i) * q_st + t * q_sh, seqs[b].q + ((int64_t)i * hq + t) * D, sizeof(uint16_t) * D);
    dense_o = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * DV));
    dense_l = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
    mo = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * DV));
    ml = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
    for (b = 0; b < B; b++)
        if (ref_attn_dense(&p, seqs[b].q_len, seqs[b].L, seqs[b].q, seqs[b].k, seqs[b].v,
                           dense_o + (int64_t)cu[b] * hq * DV, dense_l + (int64_t)cu[b] * hq))
            fails++;
    CHECK(!fails, "%s: dense reference failed: %s", what, ref_error());
    for (r = 0; r < W; r++) {
        ref_shard sh;
        ref_shard_params sp;
        ref_attn_inputs in;
        memset(&sp, 0, sizeof sp);
        sp.hkv = HKV;
        sp.dqk = D;
        sp.dv = DV;
        sp.page_size = ps;
        sp.world = W;
        sp.rank = r;
        sp.interleave = I;
        sp.fill = dtype == REF_FP16 ? REF_FP16_NAN : REF_BF16_NAN;
        sp.extra_pages = 3;
        sp.bt_extra_cols = 2;
        sp.bt_fill = -7;
        sp.seed = seed * 31 + (uint64_t)r;
        sp.head_major = (int)((seed + (uint64_t)r) & 1); /* both page layouts among the ranks */
        rank_o[r] = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * DV));
        rank_l[r] = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
        rank_l2[r] = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
        if (ref_shard_build(&sh, &sp, B, Ls, kg, vg)) {
            CHECK(0, "%s: shard build: %s", what, ref_error());
            continue;
        }
        memset(&in, 0, sizeof in);
        in.batch = B;
        in.q = q;
        in.q_stride_t = q_st;
        in.q_stride_h = q_sh;
        in.cu_seqlens_q = cu;
        ref_shard_inputs(&sh, &in);
        p.rank = r;
        p.lse_base2 = 0;
        CHECK(ref_attn(&p, &in, rank_o[r], rank_l[r]) == 0, "%s rank %d: %s", what, r, ref_error());
        {   /* the same rank in base 2: out unchanged, lse / ln 2 */
            double *o2 = (double *)malloc(sizeof(double) * (size_t)(total_q * hq * DV));
            ref_err e;
            p.lse_base2 = 1;
            CHECK(ref_attn(&p, &in, o2, rank_l2[r]) == 0, "%s rank %d base 2: %s", what, r, ref_error());
            e = ref_compare(rank_o[r], o2, REF_F64, (int64_t)total_q * hq * DV);
            CHECK(e.bad == 0 && e.max_abs == 0, "%s rank %d: base-2 out differs", what, r);
            free(o2);
            p.lse_base2 = 0;
        }
        ref_shard_free(&sh);
    }
    {   /* merge the W partial states: natural, and base 2 in (natural and base 2 out) */
        ref_merge_args m;
        ref_err eo, el;
        double *l2 = (double *)malloc(sizeof(double) * (size_t)(total_q * hq));
        memset(&m, 0, sizeof m);
        m.num_states = W;
        m.rows = total_q;
        m.heads = hq;
        m.head_dim = DV;
        m.o = (const void *const *)rank_o;
        m.lse = (const void *const *)rank_l;
        ref_merge(&m, mo, ml);
        eo = ref_compare(dense_o, mo, REF_F64, (int64_t)total_q * hq * DV);
        el = ref_compare(dense_l, ml, REF_F64, (int64_t)total_q * hq);
        CHECK(ref_err_ok(&eo, 1e-12, 1e-12), "%s: merged out vs dense: %s", what, ref_err_str(&eo));
        CHECK(ref_err_ok(&el, 1e-12, 1e-12), "%s: merged lse vs dense: %s", what, ref_err_str(&el));
        m.lse = (const void *const *)rank_l2;
        m.lse_base2_in = 1;
        ref_merge(&m, mo, ml);
        eo = ref_compare(dense_o, mo, REF_F64, (int64_t)total_q * hq * DV);
        el = ref_compare(dense_l, ml, REF_F64, (int64_t)total_q * hq);
        CHECK(ref_err_ok(&eo, 1e-12, 1e-12) && ref_err_ok(&el, 1e-12, 1e-12),
              "%s: base-2 partials merged to natural: %s", what, ref_err_str(&eo));
        m.lse_base2_out = 1;
        ref_merge(&m, mo, ml);
        for (i = 0; i < total_q * hq; i++) l2[i] = dense_l[i] / REF_LN2;
        el = ref_compare(l2, ml, REF_F64, (int64_t)total_q * hq);
        CHECK(ref_err_ok(&el, 1e-12, 1e-12), "%s: base 2 in and out: %s", what, ref_err_str(&el));
        free(l2);
    }
    /* empty rows exist exactly where the dense row sees no key: never here (L >= q_len),
       but a rank's own rows are empty when its shard is short; that must not be NaN */
    for (r = 0; r < W; r++) {
        for (i = 0; i < total_q * hq; i++) {
            if (isnan(rank_l[r][i]) || rank_l[r][i] == INFINITY) fails++;
            empty_rank_rows += rank_l[r][i] == -INFINITY;
        }
        for (i = 0; i < total_q * hq * DV; i++)
            if (!isfinite(rank_o[r][i])) fails++;
        free(rank_o[r]);
        free(rank_l[r]);
        free(rank_l2[r]);
    }
    CHECK(fails == 0, "%s: NaN or +inf in a rank's partial state", what);
    for (b = 0; b < B; b++) {
        free(seqs[b].q);
        free(seqs[b].k);
        free(seqs[b].v);
    }
    free(q);
    free(dense_o);
    free(dense_l);
    free(mo);
    free(ml);
}

static void test_identity(void) {
    static const int Ws[] = {1, 2, 3, 4, 8}, Is[] = {1, 2, 16}, pss[] = {1, 16, 64};
    static const int qls[] = {1, 2, 3, 4, 5, 6, 7, 8, 37}, groups[] = {1, 4, 6};
    int wi, ii, pi, qi, causal, gi;
    uint64_t seed = 1;
    for (wi = 0; wi < 5; wi++)
        for (ii = 0; ii < 3; ii++)
            for (pi = 0; pi < 3; pi++)
                for (qi = 0; qi < 9; qi++)
                    for (causal = 0; causal <= 1; causal++)
                        for (gi = 0; gi < 3; gi++, seed++)
                            identity_case(Ws[wi], Is[ii], pss[pi], qls[qi], causal, groups[gi],
                                          seed % 2 ? REF_BF16 : REF_FP16, (int)(seed % 3 == 0), seed);
    CHECK(empty_rank_rows > 0, "the sweep met rank rows that see no key");
}

/* MLA shape: one KV head, V = the first dv channels of each K row (v_alias_k). fp8: the rows
   are e4m3 codes (NaN in every unused slot), a key channel the code times k_scale, a value
   channel the same code times v_scale; the dense reference takes bf16 twins of both (exact:
   power-of-two scales). */
static void test_mla_shard(int fp8) {
    enum { HQ = 8, DQK = 40, DV = 32, QL = 3 };
    static const int Ls[] = {1, 5, 64, 131};
    int li, W = 4, I = 8, r, i, d;
    uint64_t rng = 4242;
    for (li = 0; li < 4; li++) {
        int64_t L = Ls[li] < QL ? QL : Ls[li];
        uint16_t *k = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(L * DQK));
        uint16_t *v = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(L * DV));
        uint16_t *kd = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(L * DQK)); /* dense K: k or its twin */
        uint16_t q[QL * HQ * DQK];
        double dense_o[QL * HQ * DV], dense_l[QL * HQ], ro[8][QL * HQ * DV], rl[8][QL * HQ], mo[QL * HQ * DV],
            ml[QL * HQ];
        const void *op[8], *lp[8];
        const uint16_t *kg[1], *vg[1];
        int32_t cu[2] = {0, QL};
        ref_attn_params p;
        ref_merge_args m;
        ref_err e;
        const float ks = 0.25f, vs = 2.0f;
        if (fp8)
            for (i = 0; i < L * DQK; i++) k[i] = ref_double_to_e4m3(ldexp(ref_rand_uniform(&rng), (int)(i % 12) - 8));
        else
            ref_fill_uniform(k, L * DQK, REF_BF16, 1.5, &rng);
        ref_fill_uniform(q, QL * HQ * DQK, REF_BF16, 1.5, &rng);
        for (i = 0; i < L * DQK; i++)
            kd[i] = fp8 ? ref_float_to_bf16((float)(ref_e4m3_to_double((uint8_t)k[i]) * ks)) : k[i];
        for (i = 0; i < L; i++)
            for (d = 0; d < DV; d++)
                v[i * DV + d] = fp8 ? ref_float_to_bf16((float)(ref_e4m3_to_double((uint8_t)k[i * DQK + d]) * vs))
                                    : k[i * DQK + d];
        memset(&p, 0, sizeof p);
        p.hq = HQ;
        p.hkv = 1;
        p.dqk = DQK;
        p.dv = DV;
        p.page_size = 16;
        p.causal = 1;
        p.world = W;
        p.interleave = I;
        CHECK(ref_attn_dense(&p, QL, L, q, kd, v, dense_o, dense_l) == 0, "mla dense");
        kg[0] = k;
        vg[0] = NULL;
        for (r = 0; r < W; r++) {
            ref_shard sh;
            ref_shard_params sp;
            ref_attn_inputs in;
            memset(&sp, 0, sizeof sp);
            sp.hkv = 1;
            sp.dqk = DQK;
            sp.dv = DV;
            sp.page_size = 16;
            sp.world = W;
            sp.rank = r;
            sp.interleave = I;
            sp.fill = fp8 ? REF_E4M3_NAN : REF_BF16_NAN;
            sp.extra_pages = 1;
            sp.seed = (uint64_t)(li * 10 + r);
            sp.v_alias_k = 1;
            CHECK(ref_shard_build(&sh, &sp, 1, &L, kg, vg) == 0 && sh.v_cache == sh.k_cache, "mla shard");
            memset(&in, 0, sizeof in);
            in.batch = 1;
            in.q = q;
            in.cu_seqlens_q = cu;
            ref_shard_inputs(&sh, &in);
            p.rank = r;
            if (fp8) p.kv_dtype = REF_E4M3, p.k_scale = &ks, p.v_scale = &vs;
            CHECK(ref_attn(&p, &in, ro[r], rl[r]) == 0, "mla rank %d: %s", r, ref_error());
            op[r] = ro[r];
            lp[r] = rl[r];
            ref_shard_free(&sh);
        }
        memset(&m, 0, sizeof m);
        m.num_states = W;
        m.rows = QL;
        m.heads = HQ;
        m.head_dim = DV;
        m.o = op;
        m.lse = lp;
        ref_merge(&m, mo, ml);
        e = ref_compare(dense_o, mo, REF_F64, QL * HQ * DV);
        CHECK(ref_err_ok(&e, 1e-12, 1e-12), "mla fp8 %d L=%lld out: %s", fp8, (long long)L, ref_err_str(&e));
        e = ref_compare(dense_l, ml, REF_F64, QL * HQ);
        CHECK(ref_err_ok(&e, 1e-12, 1e-12), "mla fp8 %d L=%lld lse: %s", fp8, (long long)L, ref_err_str(&e));
        free(k);
        free(v);
        free(kd);
    }
}

/* a hand-computable case: W = 2, I = 1, one sequence of 3 tokens, q_len 2, causal */
static void test_attn_small(void) {
    ref_attn_params p;
    uint16_t q[2 * 16], k[3 * 16], v[3 * 16];
    double o[2 * 16], l[2], e0, e1, e2;
    int d;
    memset(&p, 0, sizeof p);
    p.hq = p.hkv = 1;
    p.dqk = 16;
    p.causal = 1;
    p.scale = 1;
    for (d = 0; d < 16; d++) {
        q[d] = q[16 + d] = ref_float_to_bf16(d == 0 ? 1.0f : 0.0f);
        k[d] = ref_float_to_bf16(d == 0 ? 1.0f : 0.0f);      /* s = 1 */
        k[16 + d] = ref_float_to_bf16(d == 0 ? 2.0f : 0.0f); /* s = 2 */
        k[32 + d] = ref_float_to_bf16(d == 0 ? 3.0f : 0.0f); /* s = 3 */
        v[d] = ref_float_to_bf16((float)d);
        v[16 + d] = ref_float_to_bf16(1.0f);
        v[32 + d] = ref_float_to_bf16(-1.0f);
    }
    CHECK(ref_attn_dense(&p, 2, 3, q, k, v, o, l) == 0, "small dense");
    /* row 0 (p = 1) sees keys 0, 1; row 1 (p = 2) sees all three */
    e0 = exp(1.0), e1 = exp(2.0), e2 = exp(3.0);
    CHECK(fabs(l[0] - log(e0 + e1)) < 1e-14 && fabs(l[1] - log(e0 + e1 + e2)) < 1e-14, "small lse");
    CHECK(fabs(o[5] - (5 * e0 + e1) / (e0 + e1)) < 1e-14 &&
              fabs(o[16 + 5] - (5 * e0 + e1 - e2) / (e0 + e1 + e2)) < 1e-14,
          "small out");
    /* q_len 2 over L = 1 is not a real decode, but rows before the first key are empty */
    CHECK(ref_attn_dense(&p, 2, 1, q, k, v, o, l) == 0 && l[0] == -INFINITY && o[3] == 0 &&
              fabs(l[1] - 1) < 1e-15,
          "row that sees nothing: out 0, lse -inf");
    {   /* emulated low precision is close to exact but not equal, and within a loose bound */
        uint64_t rng = 99;
        uint16_t qq[4 * 8 * 64], kk[200 * 2 * 64], vv[200 * 2 * 64];
        double oe[4 * 8 * 64], ol[4 * 8 * 64], le[32];
        ref_err e;
        memset(&p, 0, sizeof p);
        p.hq = 8;
        p.hkv = 2;
        p.dqk = 64;
        p.causal = 1;
        ref_fill_uniform(qq, 4 * 8 * 64, REF_BF16, 2, &rng);
        ref_fill_uniform(kk, 200 * 2 * 64, REF_BF16, 2, &rng);
        ref_fill_uniform(vv, 200 * 2 * 64, REF_BF16, 1, &rng);
        ref_attn_dense(&p, 4, 200, qq, kk, vv, oe, le);
        p.emulate_lowp = 1;
        ref_attn_dense(&p, 4, 200, qq, kk, vv, ol, NULL);
        e = ref_compare(oe, ol, REF_F64, 4 * 8 * 64);
        CHECK(e.bad == 0 && e.max_abs > 0 && e.rel_fro < 2e-2 && e.max_abs < 2e-2,
              "emulate_lowp baseline: %s", ref_err_str(&e));
    }
}

/* the reference rejects inconsistent inputs instead of computing nonsense */
static void test_ref_input_checks(void) {
    ref_attn_params p;
    ref_attn_inputs in;
    uint16_t buf[64 * 16];
    int32_t bt[4] = {0, 1, 2, 3}, cu[2] = {0, 1}, used[1] = {3}, glob[1] = {7};
    double o[16], l[1];
    memset(&p, 0, sizeof p);
    memset(&in, 0, sizeof in);
    memset(buf, 0, sizeof buf);
    p.hq = p.hkv = 1;
    p.dqk = 16;
    p.page_size = 2;
    p.world = 2;
    p.rank = 1;
    in.batch = 1;
    in.q = in.k_cache = in.v_cache = buf;
    in.num_pages = 4;
    in.block_table = bt;
    in.cu_seqlens_q = cu;
    in.seqused_k = used;
    in.seqused_k_global = glob;
    CHECK(ref_attn(&p, &in, o, l) == 0, "consistent shard: %s", ref_error()); /* 7 -> rank 1 has 3 */
    used[0] = 4;
    CHECK(ref_attn(&p, &in, o, l) != 0 && strstr(ref_error(), "seqused_k"), "seqused_k mismatch caught");
    used[0] = 3;
    bt[1] = 4;
    CHECK(ref_attn(&p, &in, o, l) != 0 && strstr(ref_error(), "block_table"), "page out of range caught");
    bt[1] = 1;
    in.seqused_k_global = NULL;
    CHECK(ref_attn(&p, &in, o, l) != 0, "W > 1 without seqused_k_global caught");
}

/* ------------------------------------------------------------------ 4. merge */
static void test_merge(void) {
    enum { T = 3, H = 2, D = 8 };
    double o[4][T * H * D], l[4][T * H], out[T * H * D], lo[T * H];
    const void *op[4], *lp[4];
    ref_merge_args m;
    ref_err e;
    int n, i, ok;
    uint64_t rng = 7;
    for (n = 0; n < 4; n++) {
        for (i = 0; i < T * H * D; i++) o[n][i] = ref_rand_uniform(&rng);
        for (i = 0; i < T * H; i++) l[n][i] = 3 * ref_rand_uniform(&rng);
        op[n] = o[n];
        lp[n] = l[n];
    }
    memset(&m, 0, sizeof m);
    m.rows = T;
    m.heads = H;
    m.head_dim = D;
    m.o = op;
    m.lse = lp;

    /* single state: identity */
    m.num_states = 1;
    ref_merge(&m, out, lo);
    e = ref_compare(o[0], out, REF_F64, T * H * D);
    CHECK(e.bad == 0 && e.max_abs < 1e-15, "single state out: %s", ref_err_str(&e));
    e = ref_compare(l[0], lo, REF_F64, T * H);
    CHECK(e.bad == 0 && e.max_abs < 1e-15, "single state lse: %s", ref_err_str(&e));

    /* states 1..3 empty (-inf, +inf, NaN) with NaN garbage in o: the result is state 0 */
    for (i = 0; i < T * H; i++) {
        l[1][i] = -INFINITY;
        l[2][i] = INFINITY;
        l[3][i] = NAN;
    }
    for (i = 0; i < T * H * D; i++) o[1][i] = o[2][i] = o[3][i] = NAN;
    m.num_states = 4;
    ref_merge(&m, out, lo);
    e = ref_compare(o[0], out, REF_F64, T * H * D);
    CHECK(e.bad == 0 && e.max_abs < 1e-15, "empty states ignored (out): %s", ref_err_str(&e));
    e = ref_compare(l[0], lo, REF_F64, T * H);
    CHECK(e.bad == 0 && e.max_abs < 1e-15, "empty states ignored (lse): %s", ref_err_str(&e));
    /* the same with the finite state last */
    op[0] = o[3], lp[0] = l[3], op[3] = o[0], lp[3] = l[0];
    ref_merge(&m, out, lo);
    e = ref_compare(o[0], out, REF_F64, T * H * D);
    CHECK(e.bad == 0 && e.max_abs < 1e-15, "empty states ignored, finite last: %s", ref_err_str(&e));

    /* all empty: zeros and -inf */
    m.o = op + 0;
    m.lse = lp + 0;
    m.num_states = 3;
    ref_merge(&m, out, lo);
    ok = 1;
    for (i = 0; i < T * H * D; i++) ok &= out[i] == 0 && !signbit(out[i]);
    for (i = 0; i < T * H; i++) ok &= lo[i] == -INFINITY;
    CHECK(ok, "all empty: out 0 and lse -inf");
    m.num_states = 1;
    ref_merge(&m, out, lo);
    CHECK(out[0] == 0 && lo[0] == -INFINITY, "single empty state: 0 and -inf");
    m.lse_base2_in = m.lse_base2_out = 1;
    m.num_states = 3;
    ref_merge(&m, out, lo);
    CHECK(out[5] == 0 && lo[5] == -INFINITY, "all empty in base 2: 0 and -inf");
    m.lse_base2_in = m.lse_base2_out = 0;

    /* two equal finite states: average, lse + log 2; very negative finite lse is no problem */
    {
        double a[D], b[D], la[1] = {-1e30}, lb[1] = {0}, r[D], lr[1];
        const void *o2[2], *l2[2];
        ref_merge_args m2;
        for (i = 0; i < D; i++) a[i] = i, b[i] = -i;
        memset(&m2, 0, sizeof m2);
        m2.num_states = 2;
        m2.rows = m2.heads = 1;
        m2.head_dim = D;
        o2[0] = a, o2[1] = b, l2[0] = la, l2[1] = lb;
        m2.o = o2;
        m2.lse = l2;
        ref_merge(&m2, r, lr);
        e = ref_compare(b, r, REF_F64, D);
        CHECK(e.bad == 0 && e.max_abs == 0 && lr[0] == 0, "lse -1e30 with 0: the 0 state wins exactly");
        la[0] = lb[0] = -1e30;
        ref_merge(&m2, r, lr);
        ok = isfinite(lr[0]) && fabs(lr[0] - (-1e30)) <= 1e-16 * 1e30;
        for (i = 0; i < D; i++) ok &= r[i] == 0;
        CHECK(ok, "two states at lse -1e30: average, finite lse (%g)", lr[0]);
        la[0] = 0.25;
        lb[0] = 0.25;
        ref_merge(&m2, r, lr);
        CHECK(fabs(lr[0] - (0.25 + log(2.0))) < 1e-15, "two equal states: lse + log 2");
        la[0] = 1e30;
        lb[0] = -1e30;
        ref_merge(&m2, r, lr);
        e = ref_compare(a, r, REF_F64, D);
        CHECK(e.bad == 0 && e.max_abs == 0 && lr[0] == 1e30, "lse 1e30 with -1e30");
    }

    /* float and bf16 inputs with strides; base 2 in and out equals the natural path */
    {
        enum { ST = 2 * H * D + 5, SH = D + 3, LST = 7, LSH = 2 };
        float of[2][T * ST], lf[2][T * LST], lf2[2][T * LST];
        uint16_t ob[2][T * ST];
        double od[2][T * H * D], ld[2][T * H], r1[T * H * D], l1[T * H], r2[T * H * D], l2[T * H];
        const void *ofp[2], *lfp[2], *odp[2], *ldp[2];
        int t, h, d;
        for (n = 0; n < 2; n++) {
            for (i = 0; i < T * ST; i++) of[n][i] = NAN, ob[n][i] = REF_BF16_NAN;
            for (i = 0; i < T * LST; i++) lf[n][i] = lf2[n][i] = NAN;
            for (t = 0; t < T; t++)
                for (h = 0; h < H; h++) {
                    float lv = (float)(5 * ref_rand_uniform(&rng));
                    if (n == 1 && t == 1 && h == 0) lv = -INFINITY; /* one empty entry */
                    lf[n][t * LST + h * LSH] = lv;
                    lf2[n][t * LST + h * LSH] = (float)(lv / REF_LN2);
                    ld[n][t * H + h] = lv;
                    for (d = 0; d < D; d++) {
                        float v = ref_round_bf16((float)ref_rand_uniform(&rng));
                        of[n][t * ST + h * SH + d] = v;
                        ob[n][t * ST + h * SH + d] = ref_float_to_bf16(v);
                        od[n][(t * H + h) * D + d] = v;
                    }
                }
            ofp[n] = of[n];
            lfp[n] = lf[n];
            odp[n] = od[n];
            ldp[n] = ld[n];
        }
        memset(&m, 0, sizeof m);
        m.num_states = 2;
        m.rows = T;
        m.heads = H;
        m.head_dim = D;
        m.o = odp;
        m.lse = ldp;
        ref_merge(&m, r1, l1);
        m.o = ofp;
        m.o_type = REF_FP32;
        m.o_stride_t = ST;
        m.o_stride_h = SH;
        m.lse = lfp;
        m.lse_type = REF_FP32;
        m.lse_stride_t = LST;
        m.lse_stride_h = LSH;
        ref_merge(&m, r2, l2);
        e = ref_compare(r1, r2, REF_F64, T * H * D);
        CHECK(e.bad == 0 && e.max_abs == 0, "strided float merge: %s", ref_err_str(&e));
        e = ref_compare(l1, l2, REF_F64, T * H);
        CHECK(e.bad == 0 && e.max_abs == 0, "strided float merge lse: %s", ref_err_str(&e));
        ofp[0] = ob[0], ofp[1] = ob[1];
        m.o_type = REF_BF16;
        ref_merge(&m, r2, l2);
        e = ref_compare(r1, r2, REF_F64, T * H * D);
        CHECK(e.bad == 0 && e.max_abs == 0, "strided bf16 merge: %s", ref_err_str(&e));
        lfp[0] = lf2[0], lfp[1] = lf2[1];
        m.lse_base2_in = 1;
        ref_merge(&m, r2, l2);
        e = ref_compare(r1, r2, REF_F64, T * H * D);
        CHECK(e.bad == 0 && e.max_abs < 1e-6, "base-2 lse in: %s", ref_err_str(&e));
        e = ref_compare(l1, l2, REF_F64, T * H);
        CHECK(e.bad == 0 && e.max_abs < 1e-5, "base-2 in, natural out: %s", ref_err_str(&e));
        m.lse_base2_out = 1;
        ref_merge(&m, r2, l2);
        for (i = 0; i < T * H; i++) l1[i] /= REF_LN2;
        e = ref_compare(l1, l2, REF_F64, T * H);
        CHECK(e.bad == 0 && e.max_abs < 1e-5, "base-2 in and out: %s", ref_err_str(&e));
    }
}

int main(void) {
    test_placement();
    test_conversions();
    test_e4m3();
    test_q_e4m3_split();
    test_attn_e4m3();
    test_metric();
    test_attn_small();
    test_ref_input_checks();
    test_identity();
    test_mla_shard(0);
    test_mla_shard(1);
    test_merge();
    return check_summary();
}
