/* test_gpu — the merge kernel and the JIT path on a GPU, against the CPU reference on fresh
   random inputs. Outputs are poisoned (NaN) before every launch; empty states carry NaN
   garbage in their o. Without a GPU it says so and runs nothing. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>

#include "check.h"
#include "ref.h"
#include "gpu_util.h"

static uint64_t seed;

typedef struct mcase {
    int in, out, n, rows, heads, dim, pad_h, base2_in, base2_out, in_place, all_empty_row;
} mcase;

static double tol_for(int t) { return t == DCPATTN_BF16 ? 1.6e-2 : t == DCPATTN_FP16 ? 2e-3 : 2e-5; }

static void merge_case(dcpattn_context *ctx, const mcase *c) {
    const int64_t sh = c->dim + c->pad_h, st = (int64_t)c->heads * sh; /* o strides (padded heads) */
    const int64_t per = (int64_t)c->rows * st, lper = (int64_t)c->rows * c->heads;
    const int64_t out_elems = c->in_place ? per : (int64_t)c->rows * c->heads * c->dim;
    const int isz = gpu_esize(c->in), osz = gpu_esize(c->out);
    char *h_o = (char *)malloc((size_t)(per * c->n * isz));
    float *h_lse = (float *)malloc((size_t)(lper * c->n) * 4), *h_lse_out = (float *)malloc((size_t)lper * 4);
    char *h_out = (char *)malloc((size_t)(out_elems * osz));
    double *r_o = (double *)malloc((size_t)(lper * c->dim) * 8), *r_l = (double *)malloc((size_t)lper * 8);
    char *d_o, *d_out;
    float *d_lse, *d_lse_out;
    gpu_merge g;
    ref_err eo, el;
    int64_t i;
    dcpattn_status s;
    gpu_fill(h_o, per * c->n, c->in, 1.0, &seed);
    for (i = 0; i < lper * c->n; i++) {
        double u = ref_rand_uniform(&seed);
        int64_t row = (i % lper) / c->heads;
        h_lse[i] = (float)(6.0 * u);
        if (u > 0.8) h_lse[i] = (i & 1) ? -INFINITY : (i & 2) ? NAN : INFINITY; /* empty states */
        if (c->all_empty_row && row == c->rows / 2) h_lse[i] = -INFINITY;
        if (!isfinite(h_lse[i])) { /* the o of an empty state is garbage and must never be read */
            int64_t n = i / lper, r = (i % lper) / c->heads, h = (i % lper) % c->heads;
            gpu_nan(h_o, c->in, n * per + r * st + h * sh, c->dim);
        }
    }
    d_o = (char *)gpu_upload(h_o, (size_t)(per * c->n * isz));
    d_lse = (float *)gpu_upload(h_lse, (size_t)(lper * c->n) * 4);
    d_out = c->in_place ? d_o : (char *)gpu_poisoned((size_t)(out_elems * osz), 0xff);
    d_lse_out = (float *)gpu_poisoned((size_t)lper * 4, 0xff);
    gpu_merge_init(&g, c->n, c->rows, c->heads, c->dim, c->in, c->out, per, d_o, d_lse, h_o, h_lse);
    g.m.o_stride_t = g.rm.o_stride_t = st;
    g.m.o_stride_h = g.rm.o_stride_h = sh;
    g.m.out = d_out;
    g.m.lse_out = d_lse_out;
    if (c->in_place) {
        g.m.out_stride_t = st;
        g.m.out_stride_h = sh;
    }
    g.m.lse_base2_in = g.rm.lse_base2_in = c->base2_in;
    g.m.lse_base2_out = g.rm.lse_base2_out = c->base2_out;
    s = dcpattn_merge(ctx, &g.m, 0);
    CHECK(s == DCPATTN_STATUS_SUCCESS, "merge: %s", dcpattn_last_error());
    CUDA_OK(cudaDeviceSynchronize());
    gpu_download(h_out, d_out, (size_t)(out_elems * osz));
    gpu_download(h_lse_out, d_lse_out, (size_t)lper * 4);
    ref_merge(&g.rm, r_o, r_l);
    eo = ref_compare3(r_o, h_out, c->out, c->rows, c->heads, c->dim, c->in_place ? st : 0, c->in_place ? sh : 0);
    el = ref_compare(r_l, h_lse_out, REF_FP32, lper);
    CHECK(ref_err_ok(&eo, 4 * tol_for(c->out), tol_for(c->out)) && ref_err_ok(&el, 1e-4, 1e-5),
          "merge in=%d out=%d n=%d rows=%d heads=%d dim=%d pad=%d base2=%d/%d in_place=%d: out %s, lse %s", c->in,
          c->out, c->n, c->rows, c->heads, c->dim, c->pad_h, c->base2_in, c->base2_out, c->in_place,
          ref_err_str(&eo), ref_err_str(&el));
    cudaFree(d_o);
    if (!c->in_place) cudaFree(d_out);
    cudaFree(d_lse);
    cudaFree(d_lse_out);
    free(h_o); free(h_lse); free(h_lse_out); free(h_out); free(r_o); free(r_l);
}

/* A run during capture with the variant not loaded: a status, no compile, capture intact.
   Once loaded, capture + replay equals eager. */
static void capture_tests(void) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    cudaStream_t st;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    float *d_o, *d_l, *d_out, h1[64 * 8], h2[64 * 8];
    const void *o[2];
    const float *l[2];
    float lse_h[2 * 64];
    dcpattn_merge_args m;
    dcpattn_status s;
    int i;
    memset(&cd, 0, sizeof cd);
    CHECK(dcpattn_context_create(&cd, &ctx) == 0, "context: %s", dcpattn_last_error());
    CUDA_OK(cudaStreamCreate(&st));
    CUDA_OK(cudaMalloc((void **)&d_o, 2 * 64 * 8 * 4));
    CUDA_OK(cudaMalloc((void **)&d_l, 2 * 64 * 4));
    CUDA_OK(cudaMalloc((void **)&d_out, 64 * 8 * 4));
    for (i = 0; i < 128; i++) lse_h[i] = (float)ref_rand_uniform(&seed);
    CUDA_OK(cudaMemcpy(d_l, lse_h, sizeof lse_h, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_o, 0, 2 * 64 * 8 * 4));
    o[0] = d_o; o[1] = d_o + 64 * 8;
    l[0] = d_l; l[1] = d_l + 64;
    memset(&m, 0, sizeof m);
    m.num_states = 2; m.rows = 64; m.heads = 1; m.head_dim = 8;
    m.in_dtype = DCPATTN_FP32; m.out_dtype = DCPATTN_FP32;
    m.o = o; m.lse = l; m.out = d_out;
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    s = dcpattn_merge(ctx, &m, st);
    CHECK(s == DCPATTN_STATUS_CAPTURE, "merge during capture with the variant unloaded gave %s",
          dcpattn_status_string(s));
    CHECK(cudaStreamEndCapture(st, &g) == cudaSuccess, "capture broken by the refused merge");
    if (g) cudaGraphDestroy(g);
    CHECK(dcpattn_merge(ctx, &m, st) == 0, "eager merge: %s", dcpattn_last_error());
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(h1, d_out, sizeof h1, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemset(d_out, 0xff, sizeof h1));
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CHECK(dcpattn_merge(ctx, &m, st) == 0, "merge in capture: %s", dcpattn_last_error());
    CUDA_OK(cudaStreamEndCapture(st, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (i = 0; i < 3; i++) CUDA_OK(cudaGraphLaunch(ge, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(h2, d_out, sizeof h2, cudaMemcpyDeviceToHost));
    CHECK(memcmp(h1, h2, sizeof h1) == 0, "graph replay differs from eager");
    /* rejected input changes no output byte */
    CUDA_OK(cudaMemset(d_out, 0x5a, sizeof h1));
    m.out = (char *)d_out + 4;
    CHECK(dcpattn_merge(ctx, &m, st) == DCPATTN_STATUS_MISALIGNED, "misaligned out accepted");
    m.out = d_out;
    m.num_states = 0;
    CHECK(dcpattn_merge(ctx, &m, st) == DCPATTN_STATUS_INVALID_ARGUMENT, "num_states 0 accepted");
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(h2, d_out, sizeof h2, cudaMemcpyDeviceToHost));
    for (i = 0; i < 64 * 8; i++)
        if (((unsigned char *)h2)[i] != 0x5a) break;
    CHECK(i == 64 * 8, "a rejected merge wrote its output");
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaFree(d_o); cudaFree(d_l); cudaFree(d_out);
    cudaStreamDestroy(st);
    dcpattn_context_destroy(ctx);
}

int main(void) {
    check_line_buffered();
    static const mcase cases[] = {
        /* in, out, n, rows, heads, dim, pad_h, base2_in, base2_out, in_place, all_empty_row */
        {DCPATTN_BF16, DCPATTN_BF16, 2, 33, 8, 128, 0, 0, 0, 0, 1},
        {DCPATTN_BF16, DCPATTN_BF16, 8, 64, 16, 512, 0, 0, 0, 0, 0},
        {DCPATTN_BF16, DCPATTN_BF16, 3, 17, 5, 96, 8, 1, 1, 0, 1},
        {DCPATTN_BF16, DCPATTN_BF16, 4, 20, 4, 64, 0, 0, 0, 1, 1},
        {DCPATTN_FP16, DCPATTN_FP16, 5, 31, 3, 192, 0, 0, 1, 0, 0},
        {DCPATTN_FP16, DCPATTN_FP16, 1, 9, 2, 256, 0, 0, 0, 0, 1},
        {DCPATTN_FP32, DCPATTN_FP32, 64, 7, 3, 8, 4, 1, 0, 0, 1},
        {DCPATTN_FP32, DCPATTN_FP32, 13, 40, 8, 128, 0, 0, 0, 1, 0},
        {DCPATTN_FP32, DCPATTN_BF16, 16, 50, 8, 128, 0, 1, 0, 0, 1},
        {DCPATTN_FP32, DCPATTN_FP16, 7, 19, 6, 64, 0, 1, 1, 0, 0},
        {DCPATTN_FP32, DCPATTN_BF16, 9, 8, 128, 512, 0, 1, 0, 0, 0},
        {DCPATTN_BF16, DCPATTN_FP32, 2, 16, 4, 128, 0, 0, 0, 0, 1},
    };
    dcpattn_context *ctx;
    int i, rep;
    if (!gpu_test_begin(&seed, &ctx)) return check_summary();
    for (rep = 0; rep < 2; rep++) /* fresh random inputs each time */
        for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) merge_case(ctx, &cases[i]);
    dcpattn_context_destroy(ctx);
    capture_tests();
    return check_summary();
}
