/* demo — dcpattn's main job in one program.
   With a GPU: JIT-compile a merge (cold, into a fresh cache directory), load it again from
   the disk cache (warm) and from memory, run the merge on random partial states of case R1
   and R2 (docs/performance.md), check it against the CPU reference and print time and GB/s.
   Without a GPU: render and NVRTC-compile the default variant set and print a table. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>

#include "ref.h"
#include "gpu_util.h"

static void row(void *user, const dcpattn_compile_info *i) {
    (void)user;
    printf("%-28s %8.3f %6d %10d %8d\n", i->name, i->seconds, i->registers, i->shared_bytes + i->dynamic_shared_bytes,
           i->spill_bytes);
    fflush(stdout);
}

static int no_gpu(const char *why) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    const char *const *names;
    int n;
    double t0;
    printf("no GPU found (%s): compiling the default variant set with NVRTC for sm_90a instead\n\n", why);
    setenv("DCPATTN_CACHE_DIR", "", 1); /* memory only: every row is a real compile */
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.aot_dir = "";
    cd.arch = "sm_90a";
    DC_OK(dcpattn_context_create(&cd, &ctx));
    DC_OK(dcpattn_default_variants(ctx, &names, &n));
    printf("%-28s %8s %6s %10s %8s\n", "variant", "seconds", "regs", "smem(B)", "spill(B)");
    t0 = dcpattn__now();
    DC_OK(dcpattn_precompile(ctx, names, n, row, NULL));
    printf("\n%d variants compiled in %.1f s; no GPU was found, so nothing was run.\n", n, dcpattn__now() - t0);
    dcpattn_context_destroy(ctx);
    return 0;
}

typedef struct merge_case {
    const char *name;
    int states, rows, heads, dim;
} merge_case;

static float rand_lse(uint64_t *st, int i) {
    double u = ref_rand_uniform(st);
    if (i % 97 == 5) return -INFINITY; /* some empty states */
    return (float)(4.0 * u);
}

static void run_case(dcpattn_context *ctx, const merge_case *c, uint64_t *seed) {
    const int64_t per = (int64_t)c->rows * c->heads * c->dim, lper = (int64_t)c->rows * c->heads;
    uint16_t *h_o = (uint16_t *)malloc((size_t)(per * c->states) * 2), *h_out = (uint16_t *)malloc((size_t)per * 2);
    float *h_lse = (float *)malloc((size_t)(lper * c->states) * 4), *h_lse_out = (float *)malloc((size_t)lper * 4);
    double *ref_o = (double *)malloc((size_t)per * 8), *ref_l = (double *)malloc((size_t)lper * 8);
    void *d_o, *d_out;
    float *d_lse, *d_lse_out;
    gpu_merge g;
    ref_err eo, el;
    cudaEvent_t e0, e1;
    float ms = 0;
    int i, iters = 20;
    double bytes, secs;
    ref_fill_uniform(h_o, per * c->states, REF_BF16, 1.0, seed);
    for (i = 0; i < lper * c->states; i++) h_lse[i] = rand_lse(seed, i);
    d_o = gpu_upload(h_o, (size_t)(per * c->states) * 2);
    d_lse = (float *)gpu_upload(h_lse, (size_t)(lper * c->states) * 4);
    d_out = gpu_poisoned((size_t)per * 2, 0xff); /* poison: NaN everywhere */
    d_lse_out = (float *)gpu_poisoned((size_t)lper * 4, 0xff);
    gpu_merge_init(&g, c->states, c->rows, c->heads, c->dim, DCPATTN_BF16, DCPATTN_BF16, per, d_o, d_lse, h_o, h_lse);
    g.m.out = d_out;
    g.m.lse_out = d_lse_out;
    DC_OK(dcpattn_merge(ctx, &g.m, 0));
    CUDA_OK(cudaDeviceSynchronize());
    gpu_download(h_out, d_out, (size_t)per * 2);
    gpu_download(h_lse_out, d_lse_out, (size_t)lper * 4);
    ref_merge(&g.rm, ref_o, ref_l);
    eo = ref_compare(ref_o, h_out, REF_BF16, per);
    el = ref_compare(ref_l, h_lse_out, REF_FP32, lper);
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaEventRecord(e0, 0));
    for (i = 0; i < iters; i++) DC_OK(dcpattn_merge(ctx, &g.m, 0));
    CUDA_OK(cudaEventRecord(e1, 0));
    CUDA_OK(cudaEventSynchronize(e1));
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    secs = ms * 1e-3 / iters;
    bytes = (double)per * 2 * (c->states + 1) + (double)lper * 4 * (c->states + 1);
    printf("%-4s W=%d T=%-5d H=%-4d D=%-4d  %8.1f us  %7.1f GB/s  %s\n", c->name, c->states, c->rows, c->heads,
           c->dim, secs * 1e6, bytes / secs * 1e-9,
           ref_err_ok(&eo, 1e-2, 8e-3) && ref_err_ok(&el, 1e-4, 1e-5) ? "matches the CPU reference" : "MISMATCH");
    printf("     out: %s\n", ref_err_str(&eo));
    printf("     lse: %s\n", ref_err_str(&el));
    cudaFree(d_o); cudaFree(d_out); cudaFree(d_lse); cudaFree(d_lse_out);
    free(h_o); free(h_out); free(h_lse); free(h_lse_out); free(ref_o); free(ref_l);
}

int main(void) {
    static const merge_case cases[] = {{"R1", 8, 256, 128, 512}, {"R2", 4, 4096, 64, 128}};
    char dir[] = "/tmp/dcpattn-demo-XXXXXX";
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    uint64_t seed = (uint64_t)time(NULL);
    const char *names[1] = {"merge_bf16_bf16"};
    double t0, t_cold, t_warm, t_mem;
    const char *why;
    int i;
    if (gpu_count(&why) == 0) return no_gpu(why);
    gpu_use(0);
    if (!mkdtemp(dir)) return 1;
    setenv("DCPATTN_CACHE_DIR", dir, 1);
    memset(&cd, 0, sizeof cd);
    cd.aot_dir = ""; /* the demo measures the JIT itself */
    /* cold: Lua render + NVRTC + load, in a fresh context and an empty cache directory */
    t0 = dcpattn__now();
    DC_OK(dcpattn_context_create(&cd, &ctx));
    DC_OK(dcpattn_precompile(ctx, names, 1, NULL, NULL));
    t_cold = dcpattn__now() - t0;
    dcpattn_context_destroy(ctx);
    /* warm: a new context finds the cubin on disk */
    DC_OK(dcpattn_context_create(&cd, &ctx));
    t0 = dcpattn__now();
    DC_OK(dcpattn_precompile(ctx, names, 1, NULL, NULL));
    t_warm = dcpattn__now() - t0;
    /* memory: the per-context function table */
    t0 = dcpattn__now();
    for (i = 0; i < 100000; i++) DC_OK(dcpattn_precompile(ctx, names, 1, NULL, NULL));
    t_mem = (dcpattn__now() - t0) / 100000;
    printf("merge_bf16_bf16: cold JIT %.0f ms (Lua + NVRTC + load), warm disk-cache load %.2f ms, "
           "in-memory lookup %.0f ns\n\n", t_cold * 1e3, t_warm * 1e3, t_mem * 1e9);
    for (i = 0; i < 2; i++) run_case(ctx, &cases[i], &seed);
    dcpattn_context_destroy(ctx);
    {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) return 1;
    }
    return 0;
}
