/* test_limits — the limits of the families and of the architectures, without a GPU:
   - dcpattn_attn_desc_validate (the header's block of family limits, no generator) and the
     generator's selection (gen/dcpattn/tiling.lua) accept the same head dims, groups, MLA
     head counts and page sizes;
   - a compile-only context takes its SM limits from its arch's row (the CUDA C++
     Programming Guide's numbers), so plans for sm_80 are sized for an A100's SM, not a
     Hopper's, and choose sm_80's tiles and no cluster merge;
   - every GQA variant of the default set compiles for sm_80 through the library (NVRTC) and
     fits an sm_80 CTA's shared memory;
   - a virtual arch (compute_80) gives PTX, which is what the cache keeps.
   usage: test_limits [CACHE_DIR]   (the sm_80 compiles are kept there; default: a temporary
   directory, removed at the end) */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include "check.h"

static dcpattn_context *context(const char *arch, int num_sms, const char *cache_dir) {
    dcpattn_context_desc cd;
    dcpattn_context *ctx = NULL;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.arch = arch;
    cd.num_sms = num_sms;
    cd.cache_dir = cache_dir;
    CHECK(dcpattn_context_create(&cd, &ctx) == 0, "context %s: %s", arch, dcpattn_last_error());
    return ctx;
}

/* ---- the header's validation and the generator's selection agree ---- */
static dcpattn_attn_desc gqa_desc(int d, int hq, int hkv, int page) {
    dcpattn_attn_desc a;
    memset(&a, 0, sizeof a);
    a.dtype = DCPATTN_BF16;
    a.num_q_heads = hq;
    a.num_kv_heads = hkv;
    a.head_dim = a.head_dim_v = d;
    a.page_size = page;
    a.max_batch = a.max_q_len = 1;
    return a;
}
static int agreed, disagreed;
static void agree(dcpattn_context *ctx, const dcpattn_attn_desc *a, const char *what, int x) {
    char name[128];
    const int c = dcpattn_attn_desc_validate(a) == DCPATTN_STATUS_SUCCESS;
    int lua;
    char c_msg[512];
    snprintf(c_msg, sizeof c_msg, "%.500s", dcpattn_last_error());
    pthread_mutex_lock(&ctx->lock);
    lua = dcpattn__select_attn(ctx, a, name, sizeof name) == DCPATTN_STATUS_SUCCESS;
    pthread_mutex_unlock(&ctx->lock);
    if (c == lua) {
        agreed++;
        return;
    }
    disagreed++;
    CHECK(0, "%s %d: the header %s it (%s), the generator %s it (%s)", what, x, c ? "accepts" : "rejects", c_msg,
          lua ? "accepts" : "rejects", lua ? name : dcpattn_last_error());
}
static void test_family_limits(dcpattn_context *ctx) {
    dcpattn_attn_desc a;
    int x;
    for (x = 1; x <= 1100; x++) {
        a = gqa_desc(x, 8, 1, 16);
        agree(ctx, &a, "GQA head_dim", x);
    }
    for (x = 1; x <= 200; x++) {
        a = gqa_desc(128, 2 * x, 2, 16);
        agree(ctx, &a, "GQA group", x);
    }
    for (x = 1; x <= 600; x++) {
        a = gqa_desc(64, 4, 1, x);
        agree(ctx, &a, "GQA page_size", x);
    }
    for (x = 1; x <= 600; x++) {
        a = gqa_desc(576, 16, 1, x);
        a.head_dim_v = 512;
        agree(ctx, &a, "MLA page_size", x);
    }
    for (x = 1; x <= 400; x++) {
        a = gqa_desc(576, x, 1, 64);
        a.head_dim_v = 512;
        agree(ctx, &a, "MLA num_q_heads", x);
    }
    for (x = 1; x <= 4; x++) {
        a = gqa_desc(576, 16 * x, x, 64);
        a.head_dim_v = 512;
        agree(ctx, &a, "MLA num_kv_heads", x);
    }
    for (x = 500; x <= 520; x++) {
        a = gqa_desc(576, 16, 1, 64);
        a.head_dim_v = x;
        agree(ctx, &a, "head_dim 576 with head_dim_v", x);
    }
    CHECK(disagreed == 0 && agreed > 2900, "%d descriptors agreed, %d did not", agreed, disagreed);
}

/* ---- per-arch SM limits of compile-only contexts ---- */
static void test_arch_rows(void) {
    static const struct {
        const char *arch;
        int row, optin_kib, sm_kib, threads;
    } rows[] = {
        {"sm_80", 80, 163, 164, 2048},   {"sm_86", 86, 99, 100, 1536},     {"sm_87", 87, 163, 164, 2048},
        {"sm_89", 89, 99, 100, 1536},    {"sm_90a", 90, 227, 228, 2048},   {"sm_90", 90, 227, 228, 2048},
        {"sm_100a", 100, 227, 228, 2048}, {"sm_103", 100, 227, 228, 2048}, {"sm_120", 120, 99, 100, 1536},
        {"compute_80", 80, 163, 164, 2048}, {"sm_75", 80, 163, 164, 2048}, /* below the first row: the first */
    };
    int i;
    for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        dcpattn_context *ctx = context(rows[i].arch, 100, "");
        if (!ctx) continue;
        CHECK(ctx->limits.arch == rows[i].row && ctx->limits.smem_per_block_optin == rows[i].optin_kib * 1024 &&
                  ctx->limits.smem_per_sm == rows[i].sm_kib * 1024 && ctx->limits.threads_per_sm == rows[i].threads &&
                  ctx->limits.smem_per_block == 48 * 1024 && ctx->limits.smem_reserved == 1024 &&
                  ctx->limits.regs_per_sm == 65536,
              "%s: row %d, %d/%d bytes of shared memory per CTA/SM, %d threads", rows[i].arch, ctx->limits.arch,
              ctx->limits.smem_per_block_optin, ctx->limits.smem_per_sm, ctx->limits.threads_per_sm);
        dcpattn_context_destroy(ctx);
    }
}

/* ---- plans for sm_80: its tiles, its SM, no clusters ---- */
static dcpattn__CUresult no_launch(const dcpattn__CUlaunchConfig *c, dcpattn__CUfunction f, void **a, void **e) {
    (void)c, (void)f, (void)a, (void)e;
    return 1;
}
static void test_sm80_plans(dcpattn_context *c80, dcpattn_context *c90) {
    dcpattn_attn_desc a = gqa_desc(128, 64, 8, 16);
    dcpattn_attn_plan *p80 = NULL, *p90 = NULL;
    dcpattn__cu.LaunchKernelEx = no_launch; /* a driver with cluster launches, as a GPU host has */
    a.max_batch = 2;
    a.max_q_len = 4; /* 32 rows per KV head */
    a.max_seqlen_k = 4096;
    a.num_splits = 5; /* 2 x 8 x 5 = 80 CTAs, fewer than the SMs: sm_90 merges them in clusters */
    CHECK(dcpattn_attn_plan_create(c80, &a, &p80) == 0, "sm_80 plan: %s", dcpattn_last_error());
    CHECK(dcpattn_attn_plan_create(c90, &a, &p90) == 0, "sm_90a plan: %s", dcpattn_last_error());
    if (p80 && p90) {
        CHECK(!strcmp(dcpattn_attn_variant(p80), "gqa_bf16_d128_g8_m32") &&
                  !strcmp(dcpattn_attn_variant(p90), "gqa_bf16_d128_g8_m64"),
              "32 rows: %s on sm_80 (mma.sync), %s on sm_90a (wgmma)", dcpattn_attn_variant(p80),
              dcpattn_attn_variant(p90));
        CHECK(!p80->cluster && dcpattn_attn_workspace_size(p80) > 0 && p90->cluster,
              "5 splits: the merge kernel on sm_80 (cluster %d), clusters on sm_90a (cluster %d)", p80->cluster,
              p90->cluster);
    }
    dcpattn_attn_plan_destroy(p80);
    dcpattn_attn_plan_destroy(p90);
    /* the balanced schedule's workers are a wave of CTAs: the same three-stage 100 KiB
       variant fits once in an A100 SM (164 KiB) and twice in a Hopper SM (228 KiB) */
    a.max_q_len = 1;
    a.num_splits = DCPATTN_SPLITS_BALANCED;
    CHECK(dcpattn_attn_plan_create(c80, &a, &p80) == 0, "sm_80 plan: %s", dcpattn_last_error());
    CHECK(dcpattn_attn_plan_create(c90, &a, &p90) == 0, "sm_90a plan: %s", dcpattn_last_error());
    if (p80 && p90) {
        const int smem = p80->attn->smem;
        CHECK(!strcmp(dcpattn_attn_variant(p80), dcpattn_attn_variant(p90)) && smem + 1024 > 164 * 1024 / 2 &&
                  2 * (smem + 1024) <= 228 * 1024,
              "%s: %d bytes of shared memory", dcpattn_attn_variant(p80), smem);
        CHECK(dcpattn_attn_workers(p80) == 100 / 8 && dcpattn_attn_workers(p90) == 2 * 100 / 8,
              "balanced workers per KV head on 100 SMs: %d on sm_80, %d on sm_90a", dcpattn_attn_workers(p80),
              dcpattn_attn_workers(p90));
    }
    dcpattn_attn_plan_destroy(p80);
    dcpattn_attn_plan_destroy(p90);
    dcpattn__cu.LaunchKernelEx = NULL;
}

/* ---- every default GQA variant for sm_80 ---- */
static int compiled, too_big;
static void on_compile(void *user, const dcpattn_compile_info *i) {
    const dcpattn_context *ctx = (const dcpattn_context *)user;
    compiled++;
    if (i->shared_bytes + i->dynamic_shared_bytes > ctx->limits.smem_per_block_optin || i->registers <= 0) {
        too_big++;
        CHECK(0, "%s for sm_80: %d + %d bytes of shared memory (an sm_80 CTA has %d), %d registers", i->name,
              i->shared_bytes, i->dynamic_shared_bytes, ctx->limits.smem_per_block_optin, i->registers);
    }
}
static void test_sm80_compiles(dcpattn_context *c80) {
    const char *const *names;
    const char *gqa[64];
    int n = 0, i, k = 0;
    CHECK(dcpattn_default_variants(c80, &names, &n) == 0, "default set: %s", dcpattn_last_error());
    for (i = 0; i < n && k < 64; i++)
        if (!strncmp(names[i], "gqa_", 4)) gqa[k++] = names[i];
    CHECK(k > 0 && k < 64, "%d GQA variants in the default set", k);
    CHECK(dcpattn_precompile(c80, gqa, k, on_compile, c80) == 0, "sm_80: %s", dcpattn_last_error());
    CHECK(compiled == k && too_big == 0, "%d of %d GQA variants compiled for sm_80, %d too big", compiled, k, too_big);
}

/* ---- compute_80: PTX in the cache ---- */
static void test_ptx(void) {
    static const char *const name[] = {"gqa_fp16_d64_g4_m16"};
    char cache_dir[] = "/tmp/dcpattn-ptx-XXXXXX", path[2048], buf[4096];
    dcpattn_context *ctx = mkdtemp(cache_dir) ? context("compute_80", 100, cache_dir) : NULL;
    struct dirent *e;
    DIR *dir;
    int found = 0;
    if (!ctx) return;
    CHECK(dcpattn_precompile(ctx, name, 1, NULL, NULL) == 0, "compute_80: %s", dcpattn_last_error());
    dcpattn_context_destroy(ctx);
    dir = opendir(cache_dir);
    while (dir && (e = readdir(dir)) != NULL) {
        FILE *f;
        size_t got;
        if (strncmp(e->d_name, name[0], strlen(name[0])) || !strstr(e->d_name, ".cubin")) continue;
        snprintf(path, sizeof path, "%s/%s", cache_dir, e->d_name);
        if (!(f = fopen(path, "rb"))) continue;
        got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        /* the entry's header, then the PTX text (which has no NUL before its end) */
        if (got > sizeof(dcpattn__entry_header) && strstr(buf + sizeof(dcpattn__entry_header), ".target sm_80"))
            found++;
    }
    if (dir) closedir(dir);
    CHECK(found == 1, "compute_80: %d cache entries of %s hold PTX for sm_80", found, name[0]);
    snprintf(path, sizeof path, "rm -rf '%s'", cache_dir);
    CHECK(system(path) == 0, "%s", path);
}

int main(int argc, char **argv) {
    char tmp[] = "/tmp/dcpattn-limits-XXXXXX", cmd[256];
    const char *cache_dir = argc > 1 ? argv[1] : mkdtemp(tmp);
    dcpattn_context *c80, *c90;
    if (!cache_dir) {
        printf("mkdtemp failed\n0 passed, 1 failed\n");
        return 1;
    }
    c80 = context("sm_80", 100, cache_dir);
    c90 = context("sm_90a", 100, cache_dir);
    if (c80 && c90) {
        test_family_limits(c80);
        test_arch_rows();
        test_sm80_plans(c80, c90);
        test_sm80_compiles(c80);
        test_ptx();
    }
    dcpattn_context_destroy(c80);
    dcpattn_context_destroy(c90);
    if (argc <= 1) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        CHECK(system(cmd) == 0, "%s", cmd);
    }
    return check_summary();
}
