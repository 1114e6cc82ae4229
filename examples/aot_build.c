/* aot_build — precompile dcpattn's default variant set into a read-only cache directory.
   This is `make`'s AOT step: the same lookup path the runtime uses, filled ahead of time.
   With --check-rendered DIR it first proves that the CLI's rendering (gen/dcpattn-gen -o DIR)
   is byte-identical to the runtime's, so both produce the same cache keys.

   usage: aot_build --arch sm_90a --out DIR [--check-rendered DIR] [-j N] [NAME...] */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <sys/wait.h>

static void report(void *user, const dcpattn_compile_info *i) {
    (void)user;
    printf("  %-28s %6.2f s %4d regs %6d B smem %4d B spill  %s\n", i->name, i->seconds, i->registers,
           i->shared_bytes + i->dynamic_shared_bytes, i->spill_bytes, i->source);
    fflush(stdout);
}

static int check_rendered(dcpattn_context *ctx, const char *dir, const char *const *names, int n) {
    int i, bad = 0;
    for (i = 0; i < n; i++) {
        char path[1024], *src = NULL, *file;
        long size;
        FILE *f;
        snprintf(path, sizeof path, "%s/%s.cu", dir, names[i]);
        if (dcpattn_variant_source(ctx, names[i], &src)) {
            fprintf(stderr, "aot_build: %s\n", dcpattn_last_error());
            return 1;
        }
        f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "aot_build: %s: missing (run gen/dcpattn-gen --all -o %s)\n", path, dir);
            free(src);
            return 1;
        }
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f, 0, SEEK_SET);
        file = (char *)malloc((size_t)size + 1);
        if (!file || fread(file, 1, (size_t)size, f) != (size_t)size) {
            fclose(f);
            free(file);
            free(src);
            return 1;
        }
        fclose(f);
        if ((size_t)size != strlen(src) || memcmp(file, src, (size_t)size) != 0) {
            fprintf(stderr, "aot_build: %s differs from the runtime's rendering of %s\n", path, names[i]);
            bad = 1;
        }
        free(file);
        free(src);
    }
    return bad;
}

int main(int argc, char **argv) {
    const char *arch = "sm_90a", *out = NULL, *check = NULL;
    const char *const *names;
    int n = 0, jobs = 1, i, failed = 0;
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--arch") && i + 1 < argc) arch = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--check-rendered") && i + 1 < argc) check = argv[++i];
        else if (!strcmp(argv[i], "-j") && i + 1 < argc) jobs = atoi(argv[++i]);
        else break;
    }
    if (!out) {
        fprintf(stderr, "usage: aot_build --arch ARCH --out DIR [--check-rendered DIR] [-j N] [NAME...]\n");
        return 2;
    }
    setenv("DCPATTN_CACHE_DIR", out, 1);
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.arch = arch;
    cd.aot_dir = "";
    if (dcpattn_context_create(&cd, &ctx) != DCPATTN_STATUS_SUCCESS) {
        fprintf(stderr, "aot_build: %s\n", dcpattn_last_error());
        return 1;
    }
    if (i < argc) {
        names = (const char *const *)(argv + i);
        n = argc - i;
    } else if (dcpattn_default_variants(ctx, &names, &n) != DCPATTN_STATUS_SUCCESS) {
        fprintf(stderr, "aot_build: %s\n", dcpattn_last_error());
        return 1;
    }
    if (check && check_rendered(ctx, check, names, n))
        return 1;
    /* jobs processes take every jobs-th variant; the parent then finds them all cached */
    if (jobs > 1) {
        int j;
        for (j = 0; j < jobs; j++) {
            pid_t pid = fork();
            if (pid == 0) {
                dcpattn_context *c2;
                int k;
                if (dcpattn_context_create(&cd, &c2))
                    _exit(1);
                for (k = j; k < n; k += jobs)
                    if (dcpattn_precompile(c2, names + k, 1, report, NULL)) {
                        fprintf(stderr, "aot_build: %s\n", dcpattn_last_error());
                        _exit(1);
                    }
                _exit(0);
            }
        }
        for (j = 0; j < jobs; j++) {
            int st = 0;
            wait(&st);
            if (!WIFEXITED(st) || WEXITSTATUS(st))
                failed = 1;
        }
        if (failed)
            return 1;
    }
    if (dcpattn_precompile(ctx, names, n, jobs > 1 ? NULL : report, NULL)) {
        fprintf(stderr, "aot_build: %s\n", dcpattn_last_error());
        return 1;
    }
    printf("  %d variants for %s in %s\n", n, arch, out);
    dcpattn_context_destroy(ctx);
    return 0;
}
