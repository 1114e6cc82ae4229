/* gpu_util.h — what the GPU test and example host programs share: the error checks of CUDA
   and dcpattn calls, "is there a GPU", device buffers (upload, poison, download), random host
   data in any element type, NaN garbage for empty merge states, and the argument blocks of
   one merge of back-to-back partial states (device call and CPU reference together), and,
   with GPU_UTIL_ATTN defined, the GQA attention harness of the attention tests (see there).
   Header-only C99, also C++ (examples/bench.cu). Include it after dcpattn.h and ref.h.

   CUDA_OK(x), DC_OK(x)   a failing call prints file:line, the call and the error, then
                          calls GPU_UTIL_FAIL(fmt, ...): define it before including this
                          header to route failures elsewhere (a rank prefix, a summary line, a
                          fatal JSON record); the default prints and exits with status 1;
                          GPU_UTIL_CASE_FAIL defined: the test programs' case_fail (above the
                          summary line, the case in g_case). */
#ifndef DCPATTN_TEST_GPU_UTIL_H
#define DCPATTN_TEST_GPU_UTIL_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__) || defined(__clang__)
#define GPU_FN static __attribute__((unused))
#define GPU_PRINTF_ __attribute__((format(printf, 1, 2)))
#else
#define GPU_FN static
#define GPU_PRINTF_
#endif

#ifdef GPU_UTIL_CASE_FAIL
/* For the test programs (check.h included first): a CUDA error (an illegal address in a
   kernel is sticky) ends the run; it names the case that was running (g_case) and still
   prints the summary line. */
static char g_case[1280];
GPU_FN void case_fail(const char *fmt, ...) GPU_PRINTF_;
GPU_FN void case_fail(const char *fmt, ...) {
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
#endif

#ifndef GPU_UTIL_FAIL
GPU_FN void gpu_fail_(const char *fmt, ...) GPU_PRINTF_;
GPU_FN void gpu_fail_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}
#define GPU_UTIL_FAIL gpu_fail_
#endif

#define CUDA_OK(x)                                                                                 \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) GPU_UTIL_FAIL("%s:%d: %s: %s", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    } while (0)
#define DC_OK(x)                                                                                   \
    do {                                                                                           \
        dcpattn_status s_ = (x);                                                                   \
        if (s_)                                                                                    \
            GPU_UTIL_FAIL("%s:%d: %s: %s: %s", __FILE__, __LINE__, #x, dcpattn_status_string(s_),  \
                          dcpattn_last_error());                                                   \
    } while (0)

/* ---------------- the device ---------------- */
/* Visible CUDA devices; 0 when there are none or the runtime fails, *why (optional) then says
   which. */
GPU_FN int gpu_count(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) n = 0;
    /* the runtime says "driver version is insufficient" also where there is no driver at all */
    if (why)
        *why = e == cudaErrorInsufficientDriver ? "no CUDA driver, or one older than this CUDA runtime"
               : e == cudaErrorNoDevice         ? "no CUDA device"
               : e != cudaSuccess               ? cudaGetErrorString(e)
                                                : "no device";
    return n;
}
/* 1 with a GPU; else prints "no GPU found: <what> not run" and returns 0. */
GPU_FN int gpu_found(const char *what) {
    if (gpu_count(NULL) > 0) return 1;
    printf("no GPU found: %s not run\n", what);
    return 0;
}
/* Selects device dev and creates its primary context now (not inside the first timed call). */
GPU_FN void gpu_use(int dev) {
    CUDA_OK(cudaSetDevice(dev));
    CUDA_OK(cudaFree(0));
}
/* The start of a GPU test program: device 0 in use, a printed seed (DCPATTN_TEST_SEED
   repeats a run) and a default context; 0 (after saying so) when there is no GPU. */
GPU_FN int gpu_test_begin(uint64_t *seed, dcpattn_context **ctx) {
    dcpattn_context_desc cd;
    const char *env = getenv("DCPATTN_TEST_SEED");
    if (!gpu_found("GPU tests")) return 0;
    *seed = env && *env ? (uint64_t)strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 2654435761u;
    printf("seed %llu\n", (unsigned long long)*seed);
    gpu_use(0);
    memset(&cd, 0, sizeof cd);
    DC_OK(dcpattn_context_create(&cd, ctx));
    return 1;
}
GPU_FN double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------- device buffers ---------------- */
/* A device copy of `bytes` host bytes (an empty one is a real 16-byte buffer). */
GPU_FN void *gpu_upload(const void *host, size_t bytes) {
    void *d;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    if (bytes) CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}
/* `bytes` of device memory, every byte `byte` (0xff: NaN in bf16, fp16 and fp32). */
GPU_FN void *gpu_poisoned(size_t bytes, int byte) {
    void *d;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    CUDA_OK(cudaMemset(d, byte, bytes));
    return d;
}
GPU_FN void gpu_download(void *host, const void *dev, size_t bytes) {
    CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* ---------------- host data in an element type (DCPATTN_BF16, _FP16, _FP32) ---------------- */
GPU_FN int gpu_esize(int type) { return type == DCPATTN_FP32 ? 4 : 2; }
/* n values uniform in [-amp, amp), rounded to the type. */
GPU_FN void gpu_fill(void *dst, int64_t n, int type, double amp, uint64_t *seed) {
    int64_t i;
    if (type == DCPATTN_FP32)
        for (i = 0; i < n; i++) ((float *)dst)[i] = (float)(amp * ref_rand_uniform(seed));
    else
        ref_fill_uniform((uint16_t *)dst, n, type, amp, seed);
}
/* n elements from element `at` become NaN: the o of an empty state is garbage that must never
   be read. */
GPU_FN void gpu_nan(void *dst, int type, int64_t at, int64_t n) {
    int64_t i;
    for (i = at; i < at + n; i++)
        if (type == DCPATTN_FP32)
            ((float *)dst)[i] = NAN;
        else
            ((uint16_t *)dst)[i] = REF_BF16_NAN; /* a NaN as fp16 too */
}

/* ---------------- one merge of back-to-back partial states ----------------
   n states of [rows, heads, dim] in one buffer: state k's o at k * o_per elements of in_type,
   its lse at k * rows * heads floats, on the device (d_o, d_lse) and on the host (h_o,
   h_lse). gpu_merge_init fills the device call m (out and lse_out NULL) and the CPU reference
   call rm, both with contiguous strides, and keeps their per-state pointers in g: g must stay
   where it is while m and rm are used. */
typedef struct gpu_merge {
    dcpattn_merge_args m;
    ref_merge_args rm;
    const void *o[DCPATTN_MAX_MERGE_STATES], *ho[DCPATTN_MAX_MERGE_STATES], *hl[DCPATTN_MAX_MERGE_STATES];
    const float *l[DCPATTN_MAX_MERGE_STATES];
} gpu_merge;

GPU_FN void gpu_merge_init(gpu_merge *g, int n, int rows, int heads, int dim, int in_type, int out_type,
                           int64_t o_per, const void *d_o, const float *d_lse, const void *h_o,
                           const float *h_lse) {
    const int64_t lper = (int64_t)rows * heads;
    const size_t obytes = (size_t)o_per * (size_t)gpu_esize(in_type);
    int k;
    memset(g, 0, sizeof *g);
    for (k = 0; k < n; k++) {
        g->o[k] = (const char *)d_o + (size_t)k * obytes;
        g->l[k] = d_lse + k * lper;
        g->ho[k] = (const char *)h_o + (size_t)k * obytes;
        g->hl[k] = h_lse + k * lper;
    }
    g->m.num_states = g->rm.num_states = n;
    g->m.rows = g->rm.rows = rows;
    g->m.heads = g->rm.heads = heads;
    g->m.head_dim = g->rm.head_dim = dim;
    g->m.in_dtype = (dcpattn_dtype)in_type;
    g->m.out_dtype = (dcpattn_dtype)out_type;
    g->m.o = g->o;
    g->m.lse = g->l;
    g->rm.o = g->ho;
    g->rm.o_type = in_type; /* REF_* equal DCPATTN_* */
    g->rm.lse = g->hl;
    g->rm.lse_type = REF_FP32;
}

/* ================ the GQA attention test harness (define GPU_UTIL_ATTN first) ================
   What test_gpu_attn.c, test_gpu_threads.c and test_gpu_big.c share: a batch of global
   sequences with random data (batch_data), one rank's shard of it on the host and the
   device with NaN in every unused slot and page (rank_in), poisoned outputs and their host
   copies (out_buf), the CPU reference of a launch (ref_res) and the verdict of a launch
   against it, the plan of a configuration (plan_for) and its reference parameters.
   Random data comes from the caller's seed. The counters gpu_ref_seconds and
   gpu_seen_empty_rows are plain statics: call data_*, rank_build, ref_sharded, ref_dense and
   verdict from one thread at a time; plan_for, rank_args, out_args, out_poison_on and
   out_fetch_on (one stream's work only) from any thread. */
#ifdef GPU_UTIL_ATTN
GPU_FN double gpu_ref_seconds;        /* time spent in the CPU reference */
GPU_FN long long gpu_seen_empty_rows; /* rows the reference called empty, over all verdicts */

#define MAXB 256     /* sequences per batch */
#define Q_TAIL 8     /* NaN rows after q's last row: max_total_q - total_q may reach it */

GPU_FN const char *dt_name(int t) { return t == DCPATTN_FP16 ? "fp16" : "bf16"; }
GPU_FN uint16_t nan_bits(int t) { return t == DCPATTN_FP16 ? REF_FP16_NAN : REF_BF16_NAN; }
GPU_FN void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

/* ---------------- tolerances (docs/contract.md 10) ----------------
   out: the error against ref_attn in double may be at most twice the error of the same math
   done in the input precision (ref_attn with emulate_lowp = 1: probabilities and out rounded
   to bf16/fp16) plus a floor. The floor covers what the emulation does not model: fp32
   instead of double accumulation, probabilities rounded against a running maximum rather
   than the final one, split partials. fp16 keeps 3 more mantissa bits than bf16, so its
   floors are 8x smaller. NaN never passes (ref_err_within counts it as bad). */
GPU_FN double abs_floor(int t) { return t == DCPATTN_FP16 ? 2.5e-4 : 2e-3; }
GPU_FN double rel_floor(int t) { return t == DCPATTN_FP16 ? 2.5e-4 : 2e-3; }
/* lse is fp32 and compared in fp32. The kernel's scores are exact-product fp32 dot products
   (error ~1e-6) but the row sum may be taken over probabilities already rounded to the input
   type (the P that feeds P.V), which moves the sum by up to one half-ulp of that type in
   relative terms (bf16 2^-9 ~ 2e-3, fp16 2^-12 ~ 2.4e-4) and lse by as much in absolute
   value; merges add fp32 exp/log rounding. 1e-2 (bf16) and 2e-3 (fp16) leave a margin of
   about 5x; base-2 lse is larger by 1/ln 2 and so is its tolerance. With an FP8 cache the
   sm_90a GQA tile splits the query into two e4m3 parts, about bf16's 8 significant bits, so
   its lse has bf16's tolerance whatever the query type (ref_res.lse_dtype). An empty row must
   be -inf exactly (ref_compare3 counts anything else as bad). */
GPU_FN double lse_tol(int t, int base2) {
    double v = t == DCPATTN_FP16 ? 2e-3 : 1e-2;
    return base2 ? v / REF_LN2 : v;
}

/* ---------------- one batch of global sequences (host) ---------------- */
#define MAX_HKV 64 /* KV heads with FP8 scales */
typedef struct batch_data {
    int dtype, batch, hq, hkv, d, total_q;
    /* FP8 cache (data_set_fp8): k and v hold one e4m3 byte per element, dequantized with
       these scales ([0] only unless per_head); kv_dtype 0: a cache of dtype */
    int kv_dtype, per_head;
    float k_scale[MAX_HKV], v_scale[MAX_HKV];
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
GPU_FN void data_fill(batch_data *bd, uint64_t *seed) {
    int b;
    for (b = 0; b < bd->batch; b++) {
        int64_t n = bd->L[b] * bd->hkv * bd->d;
        ref_fill_uniform(bd->k[b], n, bd->dtype, 2.0, seed);
        ref_fill_uniform(bd->v[b], n, bd->dtype, 1.0, seed);
    }
    ref_fill_uniform(bd->q, (int64_t)bd->total_q * bd->hq * bd->d, bd->dtype, 2.0, seed);
}

GPU_FN void data_make(batch_data *bd, int dtype, int hq, int hkv, int d, int batch, const int *qlen,
                      const int64_t *L, uint64_t *seed) {
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
    data_fill(bd, seed);
}

/* Makes the cache e4m3 (one byte per element) with fresh random scales and values: keys and
   values dequantize to the ranges of data_fill (amp 2 and 1); `small`: only the codes of
   exponents 0 and 1 (subnormals and the smallest normals) with scales of 2^7 and 2^6, so the
   result rests on the subnormal conversion. */
GPU_FN void data_set_fp8(batch_data *bd, int per_head, int small, uint64_t *seed) {
    int b, h;
    int64_t i;
    bd->kv_dtype = DCPATTN_FP8_E4M3;
    bd->per_head = per_head;
    for (h = 0; h < MAX_HKV; h++) {
        const float ks = small ? 128.0f : (float)(0.02 + 0.03 * (1.0 + ref_rand_uniform(seed)));
        const float vs = small ? 64.0f : (float)(0.01 + 0.015 * (1.0 + ref_rand_uniform(seed)));
        bd->k_scale[h] = per_head || h == 0 ? ks : bd->k_scale[0];
        bd->v_scale[h] = per_head || h == 0 ? vs : bd->v_scale[0];
    }
    for (b = 0; b < bd->batch; b++) {
        const int64_t n = bd->L[b] * bd->hkv * bd->d;
        for (i = 0; i < n; i++) {
            const int hk = (int)((i / bd->d) % bd->hkv);
            if (small) {
                bd->k[b][i] = (uint16_t)(ref_rand_u64(seed) & 0x8f);
                bd->v[b][i] = (uint16_t)(ref_rand_u64(seed) & 0x8f);
            } else {
                bd->k[b][i] = ref_double_to_e4m3(2.0 * ref_rand_uniform(seed) / bd->k_scale[hk]);
                bd->v[b][i] = ref_double_to_e4m3(1.0 * ref_rand_uniform(seed) / bd->v_scale[hk]);
            }
        }
    }
}

GPU_FN void data_free(batch_data *bd) {
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
    float *ks, *vs; /* FP8: the scales on the device (MAX_HKV each) */
    int32_t *bt, *cu, *sk, *skg;
    int max_local, zero_local;
} rank_in;

/* Host q with padded strides: pad extra elements per head and per token, all NaN, and
   Q_TAIL NaN rows at the end. (The host validation sizes q by max_total_q rows when it checks
   out/lse for overlap, so q is allocated for as many rows as the plan's bound.) */
GPU_FN void rank_make_q(rank_in *ri, const batch_data *bd) {
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
GPU_FN void rank_build(rank_in *ri, const batch_data *bd, int ps, int W, int r, int I, int pad, int reuse,
                       uint64_t *seed) {
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
    sp.fill = bd->kv_dtype == DCPATTN_FP8_E4M3 ? REF_E4M3_NAN : nan_bits(bd->dtype);
    sp.extra_pages = 2;
    sp.bt_extra_cols = 1;
    sp.bt_fill = 0;
    sp.seed = ref_rand_u64(seed);
    sp.head_major = (int)(sp.seed >> 7 & 1); /* either page layout, from the page order's seed */
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
    if (bd->kv_dtype == DCPATTN_FP8_E4M3) { /* the bytes the host copy holds one per uint16_t */
        unsigned char *kb = (unsigned char *)xmalloc((size_t)kelems), *vb = (unsigned char *)xmalloc((size_t)velems);
        for (i = 0; i < kelems; i++) kb[i] = (unsigned char)ri->sh.k_cache[i];
        for (i = 0; i < velems; i++) vb[i] = (unsigned char)ri->sh.v_cache[i];
        CUDA_OK(cudaMemcpy(ri->k, kb, (size_t)kelems, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(ri->v, vb, (size_t)velems, cudaMemcpyHostToDevice));
        free(kb);
        free(vb);
        if (!ri->ks) {
            CUDA_OK(cudaMalloc((void **)&ri->ks, sizeof(float) * MAX_HKV));
            CUDA_OK(cudaMalloc((void **)&ri->vs, sizeof(float) * MAX_HKV));
        }
        CUDA_OK(cudaMemcpy(ri->ks, bd->k_scale, sizeof(float) * MAX_HKV, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(ri->vs, bd->v_scale, sizeof(float) * MAX_HKV, cudaMemcpyHostToDevice));
    } else {
        CUDA_OK(cudaMemcpy(ri->k, ri->sh.k_cache, sizeof(uint16_t) * (size_t)kelems, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(ri->v, ri->sh.v_cache, sizeof(uint16_t) * (size_t)velems, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMemcpy(ri->bt, ri->sh.block_table, sizeof(int32_t) * (size_t)bd->batch * (size_t)ri->sh.block_table_stride,
                       cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(ri->cu, bd->cu, sizeof(int32_t) * (size_t)(bd->batch + 1), cudaMemcpyHostToDevice));
    if (bd->batch) {
        CUDA_OK(cudaMemcpy(ri->sk, ri->sh.seqused_k, sizeof(int32_t) * (size_t)bd->batch, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(ri->skg, ri->sh.seqused_k_global, sizeof(int32_t) * (size_t)bd->batch,
                           cudaMemcpyHostToDevice));
    }
}

GPU_FN void rank_free(rank_in *ri) {
    cudaFree(ri->q);
    cudaFree(ri->k);
    cudaFree(ri->v);
    if (ri->ks) cudaFree(ri->ks);
    if (ri->vs) cudaFree(ri->vs);
    cudaFree(ri->bt);
    cudaFree(ri->cu);
    cudaFree(ri->sk);
    cudaFree(ri->skg);
    free(ri->hq);
    ref_shard_free(&ri->sh);
    memset(ri, 0, sizeof *ri);
}

GPU_FN void rank_args(dcpattn_attn_args *a, const rank_in *ri, const batch_data *bd) {
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
    if (bd->kv_dtype == DCPATTN_FP8_E4M3) {
        a->k_scale = ri->ks;
        a->v_scale = ri->vs;
    }
}

GPU_FN void rank_ref_inputs(ref_attn_inputs *in, const rank_in *ri, const batch_data *bd) {
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

GPU_FN void out_alloc(out_buf *o, int rows, int hq, int dv, int pad, int has_lse) {
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
GPU_FN void out_free(out_buf *o) {
    cudaFree(o->d_out);
    if (o->d_lse) cudaFree(o->d_lse);
    free(o->h_out);
    free(o->h_lse);
    memset(o, 0, sizeof *o);
}
/* Every byte of out and lse becomes `byte` (0xff: NaN), in the order of `stream`. */
GPU_FN void out_poison_on(out_buf *o, int byte, cudaStream_t stream) {
    CUDA_OK(cudaMemsetAsync(o->d_out, byte, sizeof(uint16_t) * (size_t)o->out_elems, stream));
    if (o->d_lse) CUDA_OK(cudaMemsetAsync(o->d_lse, byte, sizeof(float) * (size_t)o->lse_elems, stream));
}
GPU_FN void out_poison(out_buf *o, int byte) { out_poison_on(o, byte, 0); }
/* The host copies, once the work on `stream` is done. */
GPU_FN void out_fetch_on(out_buf *o, cudaStream_t stream) {
    CUDA_OK(cudaMemcpyAsync(o->h_out, o->d_out, sizeof(uint16_t) * (size_t)o->out_elems, cudaMemcpyDeviceToHost,
                            stream));
    if (o->d_lse)
        CUDA_OK(cudaMemcpyAsync(o->h_lse, o->d_lse, sizeof(float) * (size_t)o->lse_elems, cudaMemcpyDeviceToHost,
                                stream));
    CUDA_OK(cudaStreamSynchronize(stream));
}
/* The host copies, once everything on the device is done. */
GPU_FN void out_fetch(out_buf *o) {
    CUDA_OK(cudaDeviceSynchronize());
    out_fetch_on(o, 0);
}
GPU_FN void out_args(dcpattn_attn_args *a, const out_buf *o) {
    a->out = o->d_out;
    a->out_stride_t = o->st;
    a->out_stride_h = o->sh;
    a->lse = o->has_lse ? o->d_lse : NULL;
    a->lse_stride_t = o->lst;
    a->lse_stride_h = o->lsh;
}
/* Bytes of the host copies that differ from `byte`, outside the first `total_q` rows of the
   tensors (all = 1: everywhere). */
GPU_FN int64_t out_changed(const out_buf *o, int total_q, int byte, int all) {
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
    int lse_dtype; /* the type whose lse_tol applies: dtype, bf16 with an FP8 cache */
} ref_res;

/* (p: the type, LSE base and KV cache of the reference's run) */
GPU_FN void ref_res_alloc(ref_res *rr, int total_q, int hq, int dv, const ref_attn_params *p) {
    memset(rr, 0, sizeof *rr);
    rr->total_q = total_q;
    rr->hq = hq;
    rr->dv = dv;
    rr->dtype = p->dtype;
    rr->base2 = p->lse_base2;
    rr->lse_dtype = p->kv_dtype == REF_E4M3 ? DCPATTN_BF16 : p->dtype;
    rr->out = (double *)xmalloc(sizeof(double) * (size_t)total_q * hq * dv);
    rr->lse = (double *)xmalloc(sizeof(double) * (size_t)total_q * hq);
}
GPU_FN void ref_res_free(ref_res *rr) {
    free(rr->out);
    free(rr->lse);
    memset(rr, 0, sizeof *rr);
}

/* ref_attn exact and with emulate_lowp; the latter's error is the baseline. */
GPU_FN void ref_sharded(ref_res *rr, ref_attn_params p, const ref_attn_inputs *in, int total_q) {
    double t0 = now_s(), *emu;
    ref_res_alloc(rr, total_q, p.hq, p.dqk, &p);
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
    gpu_ref_seconds += now_s() - t0;
}

/* ref_attn_dense per sequence (unsharded, contiguous), exact and emulated. */
GPU_FN void ref_dense(ref_res *rr, ref_attn_params p, const batch_data *bd) {
    double t0 = now_s(), *emu;
    int b, pass;
    const int64_t row = (int64_t)bd->hq * bd->d;
    ref_res_alloc(rr, bd->total_q, bd->hq, bd->d, &p);
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
    gpu_ref_seconds += now_s() - t0;
}

/* Verdict of one launch against a reference: out within tolerance (floor x floor_mult),
   lse within tolerance, rows the reference calls empty exactly 0 and -inf, nothing written
   outside the tensors. Fills msg with what failed; returns 1 when all is well. */
GPU_FN int verdict(const ref_res *rr, const out_buf *o, double floor_mult, char *msg, size_t n) {
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
        double tol = lse_tol(rr->lse_dtype, rr->base2);
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
    gpu_seen_empty_rows += empty;
    changed = out_changed(o, rr->total_q, 0xff, 0);
    if (!ok_o)
        len += (size_t)snprintf(msg + len, n - len, "out %s (allowed 2x %.3g/%.3g + %.3g/%.3g); ", so,
                                rr->base.max_abs, rr->base.rel_fro, floor_mult * abs_floor(rr->dtype),
                                floor_mult * rel_floor(rr->dtype));
    if (!ok_l && len < n) len += (size_t)snprintf(msg + len, n - len, "lse %s (tol %.3g); ", sl, lse_tol(rr->lse_dtype, rr->base2));
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
    int num_sms; /* 0: the device's (fewer: fewer balanced-schedule workers, longer ranges) */
} run_cfg;

GPU_FN dcpattn_status plan_for(dcpattn_context *ctx, const batch_data *bd, const rank_in *ri, const run_cfg *rc,
                                dcpattn_attn_plan **plan) {
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
    if (ad.max_total_q < ad.max_q_len) /* a bound of all rows is one of a sequence's too */
        ad.max_total_q = ad.max_q_len;
    ad.max_seqlen_k = ri->max_local;
    ad.num_splits = rc->splits;
    ad.num_sms = rc->num_sms;
    ad.kv_dtype = (dcpattn_dtype)bd->kv_dtype;
    ad.kv_scale_per_head = bd->per_head;
    return dcpattn_attn_plan_create(ctx, &ad, plan);
}

GPU_FN ref_attn_params ref_params(const batch_data *bd, const rank_in *ri, const run_cfg *rc) {
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
    if (bd->kv_dtype == DCPATTN_FP8_E4M3) {
        p.kv_dtype = REF_E4M3;
        p.k_scale = bd->k_scale;
        p.v_scale = bd->v_scale;
        p.kv_scale_per_head = bd->per_head;
    }
    return p;
}
#endif /* GPU_UTIL_ATTN */

#endif
