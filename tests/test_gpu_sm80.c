/* test_gpu_sm80 — the sm_80 path of the GQA family, run on whatever GPU is here (an H200 in
   this project's runs): a context with arch "compute_80" compiles every variant to PTX for
   compute capability 8.0 (mma.sync tiles only: no wgmma, no thread-block clusters), the
   driver compiles that PTX for the device when it loads it, and every result must match the
   CPU reference of tests/ref.h (seed from the clock, printed; DCPATTN_TEST_SEED=N repeats a
   run).

   Cases: five GQA shapes (head dims 64, 96, 128 and 256, groups 1 to 16, bf16 and fp16, pages
   of 1, 16 and 64 tokens, W 1 and 4, decode and q_len up to 8; one with an e4m3 cache, whose
   64-row variant sm_90 runs with a producer warpgroup and sm_80 on 8 mma.sync warps), each
   without splits, with 4
   splits (the split merge, PTX too) and under the balanced schedule, on the same inputs.
   Each checks that the variant is the one sm_80 selects (32 rows of one KV head: the m32
   tile, which sm_90 serves with the 64-row wgmma tile), that no plan takes the cluster merge
   (sm_90 only) and that the kernel loaded is the driver's compile (its registers come from
   the driver, not from ptxas). Without a GPU it says so and runs nothing. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>
#include <time.h>

#include "check.h"
#include "ref.h"

#define GPU_UTIL_CASE_FAIL
#define GPU_UTIL_ATTN
#include "gpu_util.h"

typedef struct pcase {
    int dtype, d, group, hkv, ps, W, qlen_max;
    const char *variant; /* what sm_80 selects */
    int fp8;             /* an e4m3 cache */
} pcase;

static const pcase CASES[] = {
    {DCPATTN_BF16, 128, 8, 2, 16, 1, 4, "gqa_bf16_d128_g8_m32", 0}, /* sm_90: gqa_bf16_d128_g8_m64 */
    {DCPATTN_FP16, 64, 4, 1, 1, 4, 1, "gqa_fp16_d64_g4_m16", 0},
    {DCPATTN_BF16, 256, 16, 1, 64, 1, 8, "gqa_bf16_d256_g16_m64", 0}, /* 128 rows: two tiles, 256 threads */
    {DCPATTN_BF16, 96, 1, 4, 16, 4, 2, "gqa_bf16_d96_g1_m16", 0},
    {DCPATTN_BF16, 128, 8, 1, 16, 4, 8, "gqa_bf16_kve4m3_d128_g8_m64", 1},
};
static const int SPLITS[] = {1, 4, DCPATTN_SPLITS_BALANCED};

static uint64_t seed;
static int rnd(int lo, int hi) { return hi <= lo ? lo : lo + (int)(ref_rand_u64(&seed) % (uint64_t)(hi - lo + 1)); }

static void run_case(dcpattn_context *ctx, const pcase *c) {
    enum { B = 3 };
    batch_data bd;
    rank_in ri;
    ref_res rr;
    ref_attn_inputs in;
    run_cfg rc;
    int qlen[B], b, i;
    int64_t L[B];
    for (b = 0; b < B; b++) {
        qlen[b] = rnd(1, c->qlen_max);
        L[b] = rnd(qlen[b], 600);
    }
    data_make(&bd, c->dtype, c->group * c->hkv, c->hkv, c->d, B, qlen, L, &seed);
    bd.max_q = c->qlen_max; /* the variant depends on the bound, not on the draw */
    if (c->fp8) data_set_fp8(&bd, 0, 0, &seed);
    rank_build(&ri, &bd, c->ps, c->W, rnd(0, c->W - 1), 1, 0, 0, &seed);
    memset(&rc, 0, sizeof rc);
    rc.causal = 1;
    rank_ref_inputs(&in, &ri, &bd);
    ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);
    for (i = 0; i < (int)(sizeof SPLITS / sizeof SPLITS[0]); i++) {
        dcpattn_attn_plan *plan = NULL;
        dcpattn_attn_args a;
        out_buf o;
        void *ws = NULL;
        char msg[1024];
        rc.splits = SPLITS[i];
        snprintf(g_case, sizeof g_case, "%s%s d%d g%d hkv%d ps%d W%d r%d q_len <= %d, num_splits %d", dt_name(c->dtype),
                 c->fp8 ? " (e4m3 cache)" : "", c->d, c->group, c->hkv, c->ps, ri.W, ri.r, c->qlen_max, rc.splits);
        if (plan_for(ctx, &bd, &ri, &rc, &plan) != DCPATTN_STATUS_SUCCESS) {
            CHECK(0, "%s: plan: %s", g_case, dcpattn_last_error());
            continue;
        }
        CHECK(!strcmp(dcpattn_attn_variant(plan), c->variant) && !plan->cluster && plan->attn->registers > 0,
              "%s: variant %s (want %s), cluster merge %d, %d registers (from the driver)", g_case,
              dcpattn_attn_variant(plan), c->variant, plan->cluster, plan->attn->registers);
        if (dcpattn_attn_workspace_size(plan)) CUDA_OK(cudaMalloc(&ws, dcpattn_attn_workspace_size(plan)));
        out_alloc(&o, bd.total_q, bd.hq, bd.d, 0, 1);
        rank_args(&a, &ri, &bd);
        out_args(&a, &o);
        out_poison(&o, 0xff);
        DC_OK(dcpattn_attn_run(plan, &a, ws, dcpattn_attn_workspace_size(plan), 0));
        out_fetch(&o);
        CHECK(verdict(&rr, &o, 1.0, msg, sizeof msg), "%s [%s]: %s", g_case, dcpattn_attn_variant(plan), msg);
        out_free(&o);
        if (ws) CUDA_OK(cudaFree(ws));
        dcpattn_attn_plan_destroy(plan);
    }
    ref_res_free(&rr);
    rank_free(&ri);
    data_free(&bd);
}

int main(void) {
    check_line_buffered();
    dcpattn_context_desc cd;
    dcpattn_context *ctx;
    const char *env = getenv("DCPATTN_TEST_SEED");
    int i, major = 0, minor = 0;
    if (!gpu_found("GPU tests")) return check_summary();
    seed = env && *env ? (uint64_t)strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    gpu_use(0);
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    printf("seed %llu (DCPATTN_TEST_SEED=%llu repeats this run); compute_80 PTX on sm_%d%d\n",
           (unsigned long long)seed, (unsigned long long)seed, major, minor);
    if (major < 8) {
        printf("skipped: the device is older than sm_80\n");
        return check_summary();
    }
    memset(&cd, 0, sizeof cd);
    cd.arch = "compute_80";
    DC_OK(dcpattn_context_create(&cd, &ctx));
    for (i = 0; i < (int)(sizeof CASES / sizeof CASES[0]); i++)
        run_case(ctx, &CASES[i]);
    dcpattn_context_destroy(ctx);
    return check_summary();
}
