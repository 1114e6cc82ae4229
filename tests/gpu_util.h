/* gpu_util.h — what the GPU test and example host programs share: the error checks of CUDA
   and dcpattn calls, "is there a GPU", device buffers (upload, poison, download), random host
   data in any element type, NaN garbage for empty merge states, and the argument blocks of
   one merge of back-to-back partial states (device call and CPU reference together).
   Header-only C99, also C++ (examples/bench.cu). Include it after dcpattn.h and ref.h.

   CUDA_OK(x), DC_OK(x)   a failing call prints file:line, the call and the error, then
                          calls GPU_UTIL_FAIL(fmt, ...): define it before including this
                          header to route failures elsewhere (a rank prefix, a summary line, a
                          fatal JSON record); the default prints and exits with status 1. */
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
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no device";
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

#endif
