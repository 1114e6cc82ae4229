/* fuzz_host — libFuzzer target over everything dcpattn decides on the host: the attention
   descriptor and argument validation, the merge validation, and the generator's parsing
   and rendering of variant names (through the embedded Lua). No GPU is touched: pointers
   are fake values that validation never dereferences, and the context is compile-only.
   Build and run: make fuzz (FUZZ_SECONDS=N). */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

static dcpattn_context *ctx;

/* Takes n bytes from the input, zero-filling past its end. */
static void take(const uint8_t **p, size_t *left, void *dst, size_t n) {
    size_t k = *left < n ? *left : n;
    memset(dst, 0, n);
    memcpy(dst, *p, k);
    *p += k;
    *left -= k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *p = data;
    size_t left = size;
    uint8_t mode = 0;
    take(&p, &left, &mode, 1);
    if (mode % 3 == 0) { /* attention desc + args */
        dcpattn_attn_desc d;
        dcpattn_attn_args a;
        take(&p, &left, &d, sizeof d);
        take(&p, &left, &a, sizeof a);
        if (dcpattn_attn_desc_validate(&d) == DCPATTN_STATUS_SUCCESS)
            (void)dcpattn_attn_args_validate(&d, &a);
        else if (!dcpattn_last_error()[0])
            __builtin_trap(); /* every rejection carries a message */
    } else if (mode % 3 == 1) { /* merge: host arrays of fake device pointers */
        dcpattn_merge_args m;
        const void *o[DCPATTN_MAX_MERGE_STATES];
        const float *l[DCPATTN_MAX_MERGE_STATES];
        take(&p, &left, &m, sizeof m);
        take(&p, &left, o, sizeof o);
        take(&p, &left, l, sizeof l);
        m.o = (m.num_states & 1) || m.rows == 7 ? o : NULL;
        m.lse = l;
        if (dcpattn_merge_validate(&m) != DCPATTN_STATUS_SUCCESS && !dcpattn_last_error()[0])
            __builtin_trap();
    } else { /* a variant name for the generator */
        char name[128], *src = NULL;
        size_t n = left < sizeof name - 1 ? left : sizeof name - 1;
        memcpy(name, p, n);
        name[n] = 0;
        if (dcpattn_variant_source(ctx, name, &src) == DCPATTN_STATUS_SUCCESS) {
            if (!src || strncmp(src, "// DO NOT EDIT", 14) != 0)
                __builtin_trap();
        } else if (!strstr(dcpattn_last_error(), "error")) {
            __builtin_trap(); /* generator failures read file:line: error: */
        }
        free(src);
    }
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    dcpattn_context_desc cd;
    (void)argc;
    (void)argv;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    if (dcpattn_context_create(&cd, &ctx) != DCPATTN_STATUS_SUCCESS) {
        fprintf(stderr, "fuzz_host: %s\n", dcpattn_last_error());
        abort();
    }
    return 0;
}
