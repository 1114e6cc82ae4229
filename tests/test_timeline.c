/* test_timeline — the host side of the kernels' stage timeline (templates/timeline.cuh) without a
   GPU. Built with DCPATTN_TIMELINE: a compile-only context compiles an MLA and a GQA variant
   through NVRTC with the marks, and each cubin must hold the record array by its unmangled name
   (the name dcpattn_attn_timeline looks up); the stage names of DCPATTN_TIMELINE_STAGES must be
   the kernels' TimelineStage enum, in order, and the records' layout macros the kernels' layout; dcpattn_attn_timeline against a fake module lookup
   returns the array's address and size, and its errors name what is wrong: NULL arguments, a
   compile-only context, a driver without cuModuleGetGlobal, a module without the array. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <ctype.h>
#include <dirent.h>

#include "check.h"

#define FAKE(a) ((void *)(uintptr_t)(a))
static const dcpattn__CUmodule fake_module = (dcpattn__CUmodule)FAKE(0x4000);
static const unsigned long long fake_records = 0x7f0000000000ull;

static dcpattn__CUresult fake_get_global(unsigned long long *dptr, size_t *bytes, dcpattn__CUmodule m,
                                         const char *name) {
    if (m != fake_module || strcmp(name, "dcpattn_timeline") != 0)
        return 500; /* CUDA_ERROR_NOT_FOUND */
    *dptr = fake_records;
    *bytes = (size_t)DCPATTN_TIMELINE_CTAS * DCPATTN_TIMELINE_ROLES * DCPATTN_TIMELINE_WORDS * 8u;
    return 0;
}
static dcpattn__CUresult no_global(unsigned long long *dptr, size_t *bytes, dcpattn__CUmodule m, const char *name) {
    (void)dptr, (void)bytes, (void)m, (void)name;
    return 500;
}

/* whether some file of dir holds the bytes s (a compiled kernel's symbol name) */
static int dir_holds(const char *dir, const char *s) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    const size_t n = strlen(s);
    if (!d) return 0;
    while (!found && (e = readdir(d)) != NULL) {
        char path[2048];
        FILE *f;
        long size;
        char *buf;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!(f = fopen(path, "rb"))) continue;
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        buf = size > 0 ? (char *)malloc((size_t)size) : NULL;
        if (buf && fread(buf, 1, (size_t)size, f) == (size_t)size)
            for (long i = 0; !found && i + (long)n <= size; i++) found = memcmp(buf + i, s, n) == 0;
        free(buf);
        fclose(f);
    }
    closedir(d);
    return found;
}

/* TL_* of the enum in templates/timeline.cuh, in order, lowercased without the prefix, into
   names (at most max), and the records' layout (TIMELINE_CTAS, _ROLES, _WORDS) into layout[3];
   returns how many stages */
static int enum_stages(char names[][32], int max, int layout[3]) {
    char path[1100], line[512];
    FILE *f;
    int n = 0, in_enum = 0;
    snprintf(path, sizeof path, "%s/templates/timeline.cuh", DCPATTN_DATA_DIR);
    if (!(f = fopen(path, "r"))) return -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        while (*p == ' ') p++;
        if (sscanf(p, "constexpr int TIMELINE_CTAS = %d, TIMELINE_ROLES = %d, TIMELINE_WORDS = %d;", &layout[0],
                   &layout[1], &layout[2]) == 3)
            continue;
        if (strncmp(p, "enum TimelineStage", 18) == 0) {
            in_enum = 1;
            continue;
        }
        if (!in_enum) continue;
        if (*p == '}') {
            in_enum = 0;
            continue;
        }
        if (strncmp(p, "TL_", 3) == 0 && strncmp(p, "TL_STAGES", 9) != 0 && n < max) {
            int k = 0;
            for (p += 3; (isalnum((unsigned char)*p) || *p == '_') && k < 31; p++)
                names[n][k++] = (char)tolower((unsigned char)*p);
            names[n++][k] = 0;
        }
    }
    fclose(f);
    return n;
}

int main(void) {
    static const char *const stages[] = {DCPATTN_TIMELINE_STAGES};
    const int n_stages = (int)(sizeof stages / sizeof stages[0]);
    char from_enum[32][32], dir[] = "/tmp/dcpattn-timeline-XXXXXX";
    dcpattn_context *ctx = NULL;
    dcpattn_context_desc cd;
    dcpattn_attn_desc d;
    dcpattn_attn_plan *plan = NULL;
    void *records = NULL;
    size_t bytes = 0;
    int i, n, layout[3] = {0, 0, 0};

    /* the two lists of stage names, C and CUDA, agree */
    n = enum_stages(from_enum, 32, layout);
    CHECK(n == n_stages, "templates/timeline.cuh has %d stages, DCPATTN_TIMELINE_STAGES %d", n, n_stages);
    for (i = 0; i < n && i < n_stages; i++)
        CHECK(strcmp(from_enum[i], stages[i]) == 0,
              "stage %d: \"%s\" in templates/timeline.cuh (TL_ name, lowercased), \"%s\" in DCPATTN_TIMELINE_STAGES", i,
              from_enum[i], stages[i]);

    CHECK(layout[0] == DCPATTN_TIMELINE_CTAS && layout[1] == DCPATTN_TIMELINE_ROLES &&
              layout[2] == DCPATTN_TIMELINE_WORDS,
          "records: templates/timeline.cuh says %d CTAs x %d roles x %d words, include/dcpattn.h %d x %d x %d",
          layout[0], layout[1], layout[2], DCPATTN_TIMELINE_CTAS, DCPATTN_TIMELINE_ROLES, DCPATTN_TIMELINE_WORDS);

    /* compiled with the marks: the record array is in the cubins, by its unmangled name */
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.arch = "sm_90a";
    cd.num_sms = 132;
    cd.cache_dir = dir;
    if (dcpattn_context_create(&cd, &ctx)) {
        printf("context: %s\n0 passed, 1 failed\n", dcpattn_last_error());
        return 1;
    }
    {
        const char *const names[] = {"mla_bf16_h16_m16", "gqa_bf16_d128_g8_m16"};
        CHECK(dcpattn_precompile(ctx, names, 2, NULL, NULL) == 0, "precompile: %s", dcpattn_last_error());
        CHECK(dir_holds(dir, "dcpattn_timeline"), "no cubin in %s holds the symbol dcpattn_timeline", dir);
    }

    /* dcpattn_attn_timeline */
    memset(&d, 0, sizeof d);
    d.num_q_heads = 16;
    d.num_kv_heads = 1;
    d.head_dim = 576;
    d.head_dim_v = 512;
    d.page_size = 64;
    d.dcp_world = 1;
    d.max_batch = 8;
    d.max_q_len = 1;
    d.max_seqlen_k = 8192;
    CHECK(dcpattn_attn_plan_create(ctx, &d, &plan) == 0, "MLA plan: %s", dcpattn_last_error());
    if (plan) {
        CHECK(dcpattn_attn_timeline(NULL, &records, &bytes) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "plan"),
              "NULL plan: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_timeline(plan, NULL, &bytes) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "records"),
              "NULL records: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_timeline(plan, &records, NULL) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "bytes"),
              "NULL bytes: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_timeline(plan, &records, &bytes) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "compile-only"),
              "compile-only context: %s", dcpattn_last_error());
        /* pretend the kernel was loaded into a module */
        ctx->compile_only = 0;
        plan->attn->module = fake_module;
        dcpattn__cu.ModuleGetGlobal = NULL;
        CHECK(dcpattn_attn_timeline(plan, &records, &bytes) == DCPATTN_STATUS_NO_DRIVER &&
                  strstr(dcpattn_last_error(), "cuModuleGetGlobal"),
              "no cuModuleGetGlobal: %s", dcpattn_last_error());
        dcpattn__cu.ModuleGetGlobal = no_global;
        CHECK(dcpattn_attn_timeline(plan, &records, &bytes) == DCPATTN_STATUS_UNSUPPORTED &&
                  strstr(dcpattn_last_error(), dcpattn_attn_variant(plan)),
              "a module without the array: %s", dcpattn_last_error());
        dcpattn__cu.ModuleGetGlobal = fake_get_global;
        records = NULL;
        bytes = 0;
        CHECK(dcpattn_attn_timeline(plan, &records, &bytes) == DCPATTN_STATUS_SUCCESS &&
                  (uintptr_t)records == fake_records &&
                  bytes == (size_t)DCPATTN_TIMELINE_CTAS * DCPATTN_TIMELINE_ROLES * DCPATTN_TIMELINE_WORDS * 8u,
              "records %p, %zu bytes: %s", records, bytes, dcpattn_last_error());
        plan->attn->module = NULL;
        ctx->compile_only = 1; /* nothing was loaded: destroy must not unload */
        dcpattn_attn_plan_destroy(plan);
    }
    dcpattn_context_destroy(ctx);
    {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "removing %s", dir);
    }
    return check_summary();
}
