/* test_combine — the DCP combine across GPUs (docs/contract.md 6, docs/faults.md "NCCL").
   Without a GPU: host validation of every argument and communicator case a host can decide
   (the communicator check is a pure function of the numbers NCCL would report), workspace
   sizes, the dense-block rule, the rescale identity on the CPU reference, and NVRTC
   compiling the combine kernels when NVRTC is present.
   With one GPU: the W = 1 path with and without a (1-rank) NCCL communicator for every
   transport, layout and input layout; the rescale kernel for W = 4 simulated ranks summed on
   the host (= the reduce-scatter) against the reference merge; a rejected communicator
   leaves the output untouched; graph capture replayed with changing data; dcp_wait's
   success and timeout. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>

#include "check.h"
#include "ref.h"
#include "gpu_util.h"

static uint64_t seed = 12345;

/* ------------------------------ host checks ------------------------------ */
#define P(addr) ((void *)(uintptr_t)(addr))

static dcpattn_dcp_combine_args base_args(void) {
    dcpattn_dcp_combine_args a;
    memset(&a, 0, sizeof a);
    a.world = 4;
    a.rank = 1;
    a.rows = 16;
    a.heads = 8;
    a.head_dim = 128;
    a.o = P(0x10000000);
    a.lse = (const float *)P(0x20000000);
    a.out = P(0x30000000);
    a.lse_out = (float *)P(0x40000000);
    a.workspace = P(0x50000000);
    a.workspace_bytes = (size_t)1 << 26;
    return a;
}

static void expect(dcpattn_status want, const dcpattn_dcp_combine_args *a, const char *what) {
    dcpattn_status s = dcpattn_dcp_combine_validate(a);
    CHECK(s == want, "%s: got %s (%s), want %s", what, dcpattn_status_string(s), dcpattn_last_error(),
          dcpattn_status_string(want));
    if (s != DCPATTN_STATUS_SUCCESS)
        CHECK(dcpattn_last_error()[0] != 0, "%s: no detail message", what);
}

static void host_validation(void) {
    dcpattn_dcp_combine_args a = base_args();
    expect(DCPATTN_STATUS_SUCCESS, &a, "good args");
    CHECK(dcpattn_dcp_combine_validate(NULL) == DCPATTN_STATUS_INVALID_ARGUMENT, "NULL args");
#define CASE(status, field, value)                                                                                 \
    do {                                                                                                           \
        a = base_args();                                                                                           \
        a.field = value;                                                                                           \
        expect(status, &a, #field " = " #value);                                                                   \
    } while (0)
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, heads, 6); /* H % W != 0 */
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, heads, 0);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, world, -1);
    CASE(DCPATTN_STATUS_UNSUPPORTED, world, 128);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, rank, 4);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, rank, -1);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, rows, -1);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, head_dim, 0);
    CASE(DCPATTN_STATUS_UNSUPPORTED, head_dim, 100); /* not 16 bytes of bf16 */
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, in_dtype, (dcpattn_dtype)9);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, comm_dtype, (dcpattn_dtype)7);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, transport, (dcpattn_dcp_transport)5);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, layout, (dcpattn_dcp_layout)3);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, o, NULL);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, lse, NULL);
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, out, NULL);
    CASE(DCPATTN_STATUS_MISALIGNED, o, P(0x10000008));
    CASE(DCPATTN_STATUS_MISALIGNED, out, P(0x30000004));
    CASE(DCPATTN_STATUS_MISALIGNED, lse, (const float *)P(0x20000002));
    CASE(DCPATTN_STATUS_MISALIGNED, o_stride_h, 136 + 4); /* 280 bytes: not a multiple of 16 */
    CASE(DCPATTN_STATUS_INVALID_ARGUMENT, o_stride_t, -1024);
    CASE(DCPATTN_STATUS_ALIASING, out, P(0x10000000 + 1024)); /* inside o */
    CASE(DCPATTN_STATUS_ALIASING, lse_out, (float *)P(0x20000000 + 64));
    CASE(DCPATTN_STATUS_WORKSPACE, workspace, NULL);
    CASE(DCPATTN_STATUS_WORKSPACE, workspace_bytes, 1024);
    CASE(DCPATTN_STATUS_MISALIGNED, workspace, P(0x50000010));
    CASE(DCPATTN_STATUS_ALIASING, workspace, P(0x30000000 - 4096)); /* runs into out */
    CASE(DCPATTN_STATUS_OVERFLOW, rows, INT32_MAX / 2);
    CASE(DCPATTN_STATUS_SUCCESS, rows, 0); /* nothing to do */
    CASE(DCPATTN_STATUS_SUCCESS, lse_out, NULL);
#undef CASE
    /* workspace is not needed for rows = 0 */
    a = base_args();
    a.rows = 0;
    a.workspace = NULL;
    expect(DCPATTN_STATUS_SUCCESS, &a, "rows 0 without workspace");
}

static size_t ws_of(const dcpattn_dcp_combine_args *a) {
    size_t b = (size_t)-1;
    dcpattn_status s = dcpattn_dcp_combine_workspace_size(a, &b);
    CHECK(s == DCPATTN_STATUS_SUCCESS, "workspace_size: %s", dcpattn_last_error());
    return b;
}

#define AL(x) (((size_t)(x) + 255u) & ~(size_t)255u)

static void host_workspace(void) {
    dcpattn_dcp_combine_args a = base_args(); /* W 4, T 16, H 8, Dv 128, bf16 */
    const size_t thd = 16 * 8 * 128, th = 16 * 8;
    size_t b;
    a.transport = DCPATTN_DCP_A2A;
    a.layout = DCPATTN_DCP_SCATTER; /* standard layout, T > 1: packed */
    CHECK(ws_of(&a) == AL(thd * 2) + AL(th * 4) + AL(thd * 2) + AL(th * 4), "a2a scatter packed: %zu", ws_of(&a));
    a.o_stride_t = 128, a.o_stride_h = 16 * 128, a.lse_stride_t = 1, a.lse_stride_h = 16; /* head-major */
    CHECK(ws_of(&a) == AL(thd * 2) + AL(th * 4), "a2a scatter zero-copy: %zu", ws_of(&a));
    a.comm_dtype = DCPATTN_FP32; /* conversion forces a pack */
    CHECK(ws_of(&a) == AL(thd * 4) + AL(th * 4) + AL(thd * 4) + AL(th * 4), "a2a scatter fp32: %zu", ws_of(&a));
    a = base_args();
    a.layout = DCPATTN_DCP_REPLICATE; /* default strides are dense: zero-copy all-gather */
    CHECK(ws_of(&a) == AL(4 * thd * 2) + AL(4 * th * 4), "a2a replicate: %zu", ws_of(&a));
    a = base_args();
    a.transport = DCPATTN_DCP_AG_RS;
    CHECK(ws_of(&a) == AL(16 * 2 * 128 * 2) + AL(thd * 2) + AL(4 * th * 4) + AL(th * 4), "ag_rs scatter: %zu", ws_of(&a));
    a.lse_stride_t = 16; /* padded rows: lse is not one dense block, so (o, lse) are packed */
    CHECK(ws_of(&a) == AL(thd * 2) + AL(16 * 2 * 128 * 2) + AL(thd * 2) + AL(4 * th * 4) + AL(th * 4),
          "ag_rs scatter packed: %zu", ws_of(&a));
    a = base_args();
    a.transport = DCPATTN_DCP_AG_RS;
    a.layout = DCPATTN_DCP_REPLICATE;
    a.comm_dtype = DCPATTN_FP32;
    CHECK(ws_of(&a) == AL(thd * 4) + AL(4 * th * 4) + AL(th * 4), "ag_rs replicate fp32: %zu", ws_of(&a));
    a.heads = 6;
    CHECK(dcpattn_dcp_combine_workspace_size(&a, &b) == DCPATTN_STATUS_INVALID_ARGUMENT && b == 0,
          "workspace_size checks H %% W");
    CHECK(dcpattn_dcp_combine_workspace_size(&a, NULL) == DCPATTN_STATUS_INVALID_ARGUMENT, "NULL bytes");
}

static void host_group_and_blocks(void) {
    CHECK(dcpattn__dcp_check_group(4, 1, 4, 1, 2, 2) == DCPATTN_STATUS_SUCCESS, "matching communicator");
    CHECK(dcpattn__dcp_check_group(4, 1, 8, 1, 2, 2) == DCPATTN_STATUS_INVALID_ARGUMENT &&
              strstr(dcpattn_last_error(), "8 ranks"), "size mismatch: %s", dcpattn_last_error());
    CHECK(dcpattn__dcp_check_group(4, 1, 4, 3, 2, 2) == DCPATTN_STATUS_INVALID_ARGUMENT &&
              strstr(dcpattn_last_error(), "rank is 3"), "rank mismatch: %s", dcpattn_last_error());
    CHECK(dcpattn__dcp_check_group(4, 1, 4, 1, 0, 2) == DCPATTN_STATUS_INVALID_ARGUMENT &&
              strstr(dcpattn_last_error(), "device 0"), "device mismatch: %s", dcpattn_last_error());
    /* dense blocks: [T][Hw][Dv] with strides (st, sh, 1) */
    CHECK(dcpattn__dense_box(16, 128, 2, 16 * 128, 128), "head-major block is dense");
    CHECK(!dcpattn__dense_box(16, 8 * 128, 2, 128, 128), "standard block of 2 of 8 heads is not");
    CHECK(dcpattn__dense_box(1, 8 * 128, 2, 128, 128), "T = 1 standard block is dense");
    CHECK(dcpattn__dense_box(16, 8 * 128, 8, 128, 128), "all heads, standard, dense");
    CHECK(!dcpattn__dense_box(16, 8 * 136, 8, 136, 128), "padded heads are not dense");
    CHECK(!dcpattn__dense_box(16, 0, 8, 128, 128), "stride 0 is not dense");
    CHECK(dcpattn__dense_box(16, 1, 8, 16, 1), "head-major lse dense");
}

/* The AG_RS identity on the reference: sum_r o_r exp(lse_r - LSE) = merge. */
static void host_rescale_identity(void) {
    enum { W = 4, T = 5, H = 3, D = 16 };
    static double o[W][T * H * D], l[W][T * H], ref[T * H * D], rl[T * H], sum[T * H * D];
    const void *op[W], *lp[W];
    ref_merge_args m;
    int r, i, j;
    double err = 0;
    for (r = 0; r < W; r++) {
        for (i = 0; i < T * H * D; i++) o[r][i] = ref_rand_uniform(&seed);
        for (i = 0; i < T * H; i++) l[r][i] = (r + i) % 5 == 0 ? -INFINITY : 8 * ref_rand_uniform(&seed);
        op[r] = o[r];
        lp[r] = l[r];
    }
    for (i = 0; i < H; i++) l[0][i] = l[1][i] = l[2][i] = l[3][i] = -INFINITY; /* row 0: all empty */
    memset(&m, 0, sizeof m);
    m.num_states = W, m.rows = T, m.heads = H, m.head_dim = D, m.o = op, m.lse = lp;
    ref_merge(&m, ref, rl);
    memset(sum, 0, sizeof sum);
    for (r = 0; r < W; r++)
        for (i = 0; i < T * H; i++)
            if (isfinite(l[r][i]) && isfinite(rl[i]))
                for (j = 0; j < D; j++) sum[i * D + j] += o[r][i * D + j] * exp(l[r][i] - rl[i]);
    for (i = 0; i < T * H * D; i++) err = fmax(err, fabs(sum[i] - ref[i]));
    CHECK(err < 1e-12, "rescale identity: max err %g", err);
    CHECK(rl[0] == -INFINITY && ref[0] == 0, "all-empty row");
}

static void nvrtc_compile(void) {
    static const char *const names[] = {"combine_bf16_bf16", "combine_bf16_fp32", "combine_fp16_fp16",
                                        "combine_fp32_fp32"};
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    dcpattn_status s;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.arch = "sm_90a";
    if (dcpattn_context_create(&cd, &ctx) != DCPATTN_STATUS_SUCCESS) {
        CHECK(0, "compile-only context: %s", dcpattn_last_error());
        return;
    }
    s = dcpattn_precompile(ctx, names, 4, NULL, NULL);
    if (s == DCPATTN_STATUS_NO_NVRTC)
        printf("NVRTC not found: combine kernels not compiled here\n");
    else
        CHECK(s == DCPATTN_STATUS_SUCCESS, "NVRTC compile of the combine kernels: %s", dcpattn_last_error());
    CHECK(dcpattn_dcp_combine(ctx, NULL, NULL, 0) == DCPATTN_STATUS_INVALID_ARGUMENT, "compile-only context refused");
    /* the generator names the merge and rescale variants (twice each: the second from the
       context's memo) */
    {
        char name[64];
        int k;
        pthread_mutex_lock(&ctx->lock);
        for (k = 0; k < 2; k++) {
            CHECK(dcpattn__pair_name(ctx, DCPATTN__RESCALE, DCPATTN_BF16, DCPATTN_FP32, name, sizeof name) == 0 &&
                      !strcmp(name, "combine_bf16_fp32"), "combine name %s", name);
            CHECK(dcpattn__pair_name(ctx, DCPATTN__MERGE, DCPATTN_FP32, DCPATTN_BF16, name, sizeof name) == 0 &&
                      !strcmp(name, "merge_fp32_bf16"), "merge name %s", name);
        }
        pthread_mutex_unlock(&ctx->lock);
    }
    dcpattn_context_destroy(ctx);
}

/* --------------------------------- GPU --------------------------------- */
typedef struct nccl_fns {
    int (*GetUniqueId)(void *);
    int (*CommInitAll)(dcpattn_nccl_comm *, int, const int *);
    int (*CommDestroy)(dcpattn_nccl_comm);
} nccl_fns;

typedef struct gbuf {
    int T, H, D, in, out;
    int64_t o_st, o_sh, l_st, l_sh;
    char *h_o, *d_o, *h_out, *d_out;
    float *h_l, *d_l, *h_lo, *d_lo;
    void *d_ws;
    size_t ws;
} gbuf;

/* random (o, lse): 1 row in 7 empty (-inf or NaN, its o NaN garbage) */
static void gbuf_fill(gbuf *g) {
    int64_t t, h, d;
    gpu_fill(g->h_o, (int64_t)g->T * g->H * g->D, g->in, 1.0, &seed);
    for (t = 0; t < g->T; t++)
        for (h = 0; h < g->H; h++) {
            float *l = &g->h_l[t * g->l_st + h * g->l_sh];
            *l = (float)(6 * ref_rand_uniform(&seed));
            if ((t * 7 + h) % 7 == 3) {
                *l = (t & 1) ? -INFINITY : NAN;
                for (d = 0; d < g->D; d++) gpu_nan(g->h_o, g->in, t * g->o_st + h * g->o_sh + d, 1);
            }
        }
    CUDA_OK(cudaMemcpy(g->d_o, g->h_o, (size_t)g->T * (size_t)g->H * (size_t)g->D * (size_t)gpu_esize(g->in), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(g->d_l, g->h_l, (size_t)g->T * (size_t)g->H * 4, cudaMemcpyHostToDevice));
}

/* W = 1: out must equal o (empty rows 0), lse_out = lse (non-finite -> -inf) */
static void gbuf_check(gbuf *g, const char *what) {
    int64_t n = (int64_t)g->T * g->H, t, h, d, bad = 0;
    double err = 0;
    gpu_download(g->h_out, g->d_out, (size_t)(n * g->D) * (size_t)gpu_esize(g->out));
    gpu_download(g->h_lo, g->d_lo, (size_t)n * 4);
    for (t = 0; t < g->T; t++)
        for (h = 0; h < g->H; h++) {
            float l = g->h_l[t * g->l_st + h * g->l_sh], lo = g->h_lo[t * g->H + h];
            int empty = !isfinite(l);
            if (empty ? lo != -INFINITY : fabs((double)lo - (double)l) > 1e-6 * fabs((double)l) + 1e-6) bad++;
            for (d = 0; d < g->D; d++) {
                double want = empty ? 0 : ref_load(g->h_o, g->in, t * g->o_st + h * g->o_sh + d);
                double got = ref_load(g->h_out, g->out, (t * g->H + h) * g->D + d);
                if (!isfinite(got)) bad++;
                else err = fmax(err, fabs(ref_round_to(want, g->out) - got));
            }
        }
    CHECK(bad == 0 && err == 0, "%s: %lld bad, max err %g", what, (long long)bad, err);
}

static void gbuf_alloc(gbuf *g, int T, int H, int D, int in, int out, int head_major) {
    memset(g, 0, sizeof *g);
    g->T = T, g->H = H, g->D = D, g->in = in, g->out = out;
    if (head_major) g->o_st = D, g->o_sh = (int64_t)T * D, g->l_st = 1, g->l_sh = T;
    else g->o_st = (int64_t)H * D, g->o_sh = D, g->l_st = H, g->l_sh = 1;
    g->h_o = (char *)malloc((size_t)T * H * D * 4);
    g->h_out = (char *)malloc((size_t)T * H * D * 4);
    g->h_l = (float *)malloc((size_t)T * H * 4);
    g->h_lo = (float *)malloc((size_t)T * H * 4);
    CUDA_OK(cudaMalloc((void **)&g->d_o, (size_t)T * H * D * 4));
    CUDA_OK(cudaMalloc((void **)&g->d_out, (size_t)T * H * D * 4));
    CUDA_OK(cudaMalloc((void **)&g->d_l, (size_t)T * H * 4));
    CUDA_OK(cudaMalloc((void **)&g->d_lo, (size_t)T * H * 4));
    g->ws = (size_t)T * H * D * 4 * 4 + (1 << 20);
    CUDA_OK(cudaMalloc(&g->d_ws, g->ws));
}

static void gbuf_free(gbuf *g) {
    free(g->h_o); free(g->h_out); free(g->h_l); free(g->h_lo);
    cudaFree(g->d_o); cudaFree(g->d_out); cudaFree(g->d_l); cudaFree(g->d_lo); cudaFree(g->d_ws);
}

static dcpattn_dcp_combine_args gbuf_args(const gbuf *g, int transport, int layout, int comm_dtype) {
    dcpattn_dcp_combine_args a;
    memset(&a, 0, sizeof a);
    a.world = 1;
    a.rows = g->T, a.heads = g->H, a.head_dim = g->D;
    a.transport = (dcpattn_dcp_transport)transport;
    a.layout = (dcpattn_dcp_layout)layout;
    a.in_dtype = (dcpattn_dtype)g->in, a.out_dtype = (dcpattn_dtype)g->out, a.comm_dtype = (dcpattn_dtype)comm_dtype;
    a.o = g->d_o, a.o_stride_t = g->o_st, a.o_stride_h = g->o_sh;
    a.lse = g->d_l, a.lse_stride_t = g->l_st, a.lse_stride_h = g->l_sh;
    a.out = g->d_out, a.lse_out = g->d_lo;
    a.workspace = g->d_ws, a.workspace_bytes = g->ws;
    return a;
}

static void w1_paths(dcpattn_context *ctx, dcpattn_nccl_comm comm, cudaStream_t st) {
    static const int dts[][3] = {{DCPATTN_BF16, DCPATTN_BF16, 0},
                                 {DCPATTN_BF16, DCPATTN_BF16, DCPATTN_FP32},
                                 {DCPATTN_FP16, DCPATTN_FP32, 0},
                                 {DCPATTN_FP32, DCPATTN_BF16, DCPATTN_BF16}};
    int k, tr, lay, hm;
    char what[160];
    for (k = 0; k < 4; k++)
        for (tr = 1; tr <= 2; tr++)
            for (lay = 0; lay <= 1; lay++)
                for (hm = 0; hm <= 1; hm++) {
                    gbuf g;
                    dcpattn_dcp_combine_args a;
                    dcpattn_status s;
                    size_t need = 0;
                    gbuf_alloc(&g, 37, 8, 128, dts[k][0], dts[k][1], hm);
                    gbuf_fill(&g);
                    a = gbuf_args(&g, tr, lay, dts[k][2]);
                    CHECK(dcpattn_dcp_combine_workspace_size(&a, &need) == 0 && need <= g.ws, "workspace %zu", need);
                    CUDA_OK(cudaMemset(g.d_out, 0xff, (size_t)37 * 8 * 128 * 4));
                    CUDA_OK(cudaMemset(g.d_lo, 0xff, (size_t)37 * 8 * 4));
                    s = dcpattn_dcp_combine(ctx, comm, &a, st);
                    snprintf(what, sizeof what, "W=1 %s %s %s %s %s comm %d", comm ? "nccl" : "local",
                             tr == 1 ? "a2a" : "ag_rs", lay ? "replicate" : "scatter", hm ? "head-major" : "standard",
                             dcpattn__dtype_name((dcpattn_dtype)dts[k][0]), dts[k][2]);
                    CHECK(s == DCPATTN_STATUS_SUCCESS, "%s: %s", what, dcpattn_last_error());
                    CUDA_OK(cudaStreamSynchronize(st));
                    if (s == DCPATTN_STATUS_SUCCESS) gbuf_check(&g, what);
                    gbuf_free(&g);
                }
}

/* W simulated ranks: the rescale kernel of each, summed on the host, equals the merge. */
static void rescale_sim(dcpattn_context *ctx) {
    enum { W = 4, T = 29, H = 8, D = 128 };
    const int64_t n = (int64_t)T * H * D;
    uint16_t *h_o = (uint16_t *)malloc((size_t)(W * n) * 2);
    float *h_l = (float *)malloc((size_t)W * T * H * 4), *h_r = (float *)malloc((size_t)n * 4), *h_gl = (float *)malloc(T * H * 4);
    double *sum = (double *)calloc((size_t)n, 8), *ref = (double *)malloc((size_t)n * 8), *rl = (double *)malloc(T * H * 8);
    uint16_t *d_o;
    float *d_l, *d_r, *d_gl;
    const void *op[W], *lp[W];
    dcpattn__dcp_plan p;
    dcpattn__dcp_launch l;
    dcpattn__variant *v;
    dcpattn_dcp_combine_args a;
    ref_merge_args m;
    int r, q, i;
    double err = 0, lerr = 0;
    int64_t bad = 0;
    ref_fill_uniform(h_o, W * n, DCPATTN_BF16, 1.0, &seed);
    for (i = 0; i < W * T * H; i++) {
        h_l[i] = (float)(10 * ref_rand_uniform(&seed));
        if (i % 11 == 5) h_l[i] = (i & 1) ? -INFINITY : NAN;
    }
    for (r = 0; r < W; r++) h_l[r * T * H + 3] = -INFINITY; /* (row 0, head 3) empty everywhere */
    d_o = (uint16_t *)gpu_upload(h_o, (size_t)(W * n) * 2);
    d_l = (float *)gpu_upload(h_l, (size_t)W * T * H * 4);
    CUDA_OK(cudaMalloc((void **)&d_r, (size_t)n * 4));
    CUDA_OK(cudaMalloc((void **)&d_gl, (size_t)T * H * 4));
    memset(&a, 0, sizeof a);
    a.world = W, a.rows = T, a.heads = H, a.head_dim = D;
    CHECK(dcpattn__dcp_normalize(&a, &p, 0) == 0, "plan");
    if (dcpattn__pair_variant(ctx, DCPATTN__RESCALE, DCPATTN_BF16, DCPATTN_FP32, 0, &v) != DCPATTN_STATUS_SUCCESS) {
        CHECK(0, "load combine_bf16_fp32: %s", dcpattn_last_error());
        return;
    }
    for (r = 0; r < W; r++) {
        memset(&l, 0, sizeof l);
        l.m.num_states = W, l.m.rows = T, l.m.heads = H, l.m.in_dtype = DCPATTN_BF16, l.m.out_dtype = DCPATTN_FP32;
        l.o[0] = d_o + r * n;
        l.lse[0] = d_l + r * T * H;
        for (q = 0; q < W - 1; q++) l.lse[q + 1] = d_l + (q < r ? q : q + 1) * T * H, l.o[q + 1] = l.o[0];
        l.m.o_stride_t = H * D, l.m.o_stride_h = D, l.m.lse_stride_t = H, l.m.lse_stride_h = 1;
        l.m.out = d_r, l.m.out_stride_t = D, l.m.out_stride_h = (int64_t)T * D; /* head-major, as the real path */
        l.m.lse_out = d_gl, l.m.lse_out_stride_t = 1, l.m.lse_out_stride_h = T;
        CUDA_OK(cudaMemset(d_r, 0xff, (size_t)n * 4));
        CHECK(dcpattn__dcp_run_kernel(v, &p, &l, 0) == 0, "rescale launch: %s", dcpattn_last_error());
        gpu_download(h_r, d_r, (size_t)n * 4);
        gpu_download(h_gl, d_gl, (size_t)T * H * 4);
        for (i = 0; i < T * H; i++) {
            int t = i / H, h = i % H, d;
            for (d = 0; d < D; d++) {
                float x = h_r[((int64_t)h * T + t) * D + d];
                if (!isfinite(x)) bad++;
                sum[(int64_t)i * D + d] += x;
            }
        }
        op[r] = h_o + r * n;
        lp[r] = h_l + r * T * H;
    }
    memset(&m, 0, sizeof m);
    m.num_states = W, m.rows = T, m.heads = H, m.head_dim = D, m.o = op, m.o_type = REF_BF16, m.lse = lp,
    m.lse_type = REF_FP32;
    ref_merge(&m, ref, rl);
    for (i = 0; i < n; i++) err = fmax(err, fabs(sum[i] - ref[i]));
    for (i = 0; i < T * H; i++) {
        float g = h_gl[(i % H) * T + i / H];
        if (!isfinite(rl[i])) { if (g != -INFINITY) bad++; }
        else lerr = fmax(lerr, fabs(g - rl[i]));
    }
    CHECK(bad == 0 && err < 2e-5 && lerr < 2e-5, "rescale x %d ranks summed vs merge: %lld bad, out err %g, lse err %g",
          W, (long long)bad, err, lerr);
    cudaFree(d_o); cudaFree(d_l); cudaFree(d_r); cudaFree(d_gl);
    free(h_o); free(h_l); free(h_r); free(h_gl); free(sum); free(ref); free(rl);
}

/* capture the combine once, replay with new data each time: equals eager / the reference */
static void capture(dcpattn_context *ctx, dcpattn_nccl_comm comm, cudaStream_t st, int transport) {
    gbuf g;
    dcpattn_dcp_combine_args a;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec;
    int i;
    char what[96];
    gbuf_alloc(&g, 24, 8, 128, DCPATTN_BF16, DCPATTN_BF16, 0);
    gbuf_fill(&g);
    a = gbuf_args(&g, transport, DCPATTN_DCP_SCATTER, 0);
    CHECK(dcpattn_dcp_combine_prepare(ctx, &a) == 0, "prepare: %s", dcpattn_last_error());
    CHECK(dcpattn_dcp_combine(ctx, comm, &a, st) == 0, "eager before capture: %s", dcpattn_last_error());
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    CHECK(dcpattn_dcp_combine(ctx, comm, &a, st) == 0, "combine in capture: %s", dcpattn_last_error());
    CHECK(cudaStreamEndCapture(st, &graph) == cudaSuccess && graph, "end capture");
    if (!graph) { gbuf_free(&g); return; }
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (i = 0; i < 3; i++) {
        gbuf_fill(&g); /* new data in the same buffers */
        CUDA_OK(cudaMemset(g.d_out, 0xff, (size_t)24 * 8 * 128 * 2));
        CUDA_OK(cudaMemset(g.d_lo, 0xff, (size_t)24 * 8 * 4));
        CUDA_OK(cudaGraphLaunch(exec, st));
        CHECK(dcpattn_dcp_wait(comm, st, 10000) == DCPATTN_STATUS_SUCCESS, "wait after replay: %s", dcpattn_last_error());
        snprintf(what, sizeof what, "graph replay %d (%s, %s)", i, comm ? "nccl" : "local", transport == 1 ? "a2a" : "ag_rs");
        gbuf_check(&g, what);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    gbuf_free(&g);
}

static void slow_host_fn(void *u) {
    struct timespec ts = {0, 300 * 1000000L};
    (void)u;
    nanosleep(&ts, NULL);
}

static void wait_tests(dcpattn_nccl_comm comm, cudaStream_t st) {
    dcpattn_status s;
    CUDA_OK(cudaLaunchHostFunc(st, slow_host_fn, NULL)); /* the stream stays busy for 300 ms */
    s = dcpattn_dcp_wait(comm, st, 30);
    CHECK(s == DCPATTN_STATUS_TIMEOUT && strstr(dcpattn_last_error(), "30 ms"), "timeout: %s %s",
          dcpattn_status_string(s), dcpattn_last_error());
    s = dcpattn_dcp_wait(comm, st, 5000);
    CHECK(s == DCPATTN_STATUS_SUCCESS, "wait: %s", dcpattn_last_error());
}

static void rejected_comm(dcpattn_context *ctx, dcpattn_nccl_comm comm, cudaStream_t st) {
    gbuf g;
    dcpattn_dcp_combine_args a;
    dcpattn_status s;
    int i;
    gbuf_alloc(&g, 8, 8, 128, DCPATTN_BF16, DCPATTN_BF16, 0);
    gbuf_fill(&g);
    CUDA_OK(cudaMemset(g.d_out, 0x5a, (size_t)8 * 8 * 128 * 2));
    a = gbuf_args(&g, DCPATTN_DCP_A2A, DCPATTN_DCP_SCATTER, 0);
    a.world = 2; /* the communicator has 1 rank */
    s = dcpattn_dcp_combine(ctx, comm, &a, st);
    CHECK(s == DCPATTN_STATUS_INVALID_ARGUMENT && strstr(dcpattn_last_error(), "1 ranks"), "size mismatch: %s",
          dcpattn_last_error());
    a.world = 2;
    s = dcpattn_dcp_combine(ctx, NULL, &a, st);
    CHECK(s == DCPATTN_STATUS_INVALID_ARGUMENT, "NULL comm with W = 2: %s", dcpattn_last_error());
    a.world = 3; /* H % W */
    s = dcpattn_dcp_combine(ctx, comm, &a, st);
    CHECK(s == DCPATTN_STATUS_INVALID_ARGUMENT, "H %% W: %s", dcpattn_last_error());
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(g.h_out, g.d_out, (size_t)8 * 8 * 128 * 2, cudaMemcpyDeviceToHost));
    for (i = 0; i < 8 * 8 * 128 * 2; i++)
        if ((unsigned char)g.h_out[i] != 0x5a) break;
    CHECK(i == 8 * 8 * 128 * 2, "a rejected combine wrote its output");
    gbuf_free(&g);
}

static void gpu_tests(void) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    cudaStream_t st;
    dcpattn_nccl_comm comm = NULL;
    nccl_fns nf;
    void *lib;
    int dev = 0;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaFree(0));
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    memset(&cd, 0, sizeof cd);
    if (dcpattn_context_create(&cd, &ctx) != 0) {
        CHECK(0, "context: %s", dcpattn_last_error());
        return;
    }
    w1_paths(ctx, NULL, st);
    rescale_sim(ctx);
    capture(ctx, NULL, st, DCPATTN_DCP_A2A);
    memset(&nf, 0, sizeof nf);
    lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (lib) {
        void *p1 = dlsym(lib, "ncclCommInitAll"), *p2 = dlsym(lib, "ncclCommDestroy");
        memcpy(&nf.CommInitAll, &p1, sizeof p1);
        memcpy(&nf.CommDestroy, &p2, sizeof p2);
    }
    if (!lib || !nf.CommInitAll || nf.CommInitAll(&comm, 1, &dev) != 0) {
        printf("NCCL not usable here: the 1-rank communicator tests were not run\n");
        comm = NULL;
    } else {
        printf("NCCL 1-rank communicator: every transport through real NCCL calls\n");
        w1_paths(ctx, comm, st);
        rejected_comm(ctx, comm, st);
        capture(ctx, comm, st, DCPATTN_DCP_A2A);
        capture(ctx, comm, st, DCPATTN_DCP_AG_RS);
        wait_tests(comm, st);
        nf.CommDestroy(comm);
    }
    wait_tests(NULL, st);
    cudaStreamDestroy(st);
    dcpattn_context_destroy(ctx);
}

int main(void) {
    host_validation();
    host_workspace();
    host_group_and_blocks();
    host_rescale_identity();
    nvrtc_compile();
    if (!gpu_found("GPU combine tests")) return check_summary();
    gpu_tests();
    return check_summary();
}
