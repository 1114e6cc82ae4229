/* fuzz_host — libFuzzer target over everything dcpattn decides on the host: the attention
   descriptor and argument validation, the merge validation, the DCP combine validation and
   workspace size, and the generator's parsing and rendering of variant names (through the
   embedded Lua). No GPU is touched: pointers are fake values that validation never
   dereferences, and the context is compile-only.
   Every rejection must carry a message written by that call: a known message is planted
   before each call, and a rejection that leaves it (or an empty one) traps; a success must
   leave the message empty. Build and run: make fuzz (FUZZ_SECONDS=N). */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

static dcpattn_context *ctx;
static char planted[256];

/* Takes n bytes from the input, zero-filling past its end. */
static void take(const uint8_t **p, size_t *left, void *dst, size_t n) {
    size_t k = *left < n ? *left : n;
    memset(dst, 0, n);
    memcpy(dst, *p, k);
    *p += k;
    *left -= k;
}

/* Leaves a message no fuzzed call writes (no fuzzed call gets NULL args) as the last error. */
static void plant(void) {
    if (dcpattn_merge_validate(NULL) == DCPATTN_STATUS_SUCCESS)
        __builtin_trap();
    snprintf(planted, sizeof planted, "%s", dcpattn_last_error());
}

/* A call's outcome: success with no message, or a rejection with its own message. */
static void expect_fresh(dcpattn_status s) {
    const char *msg = dcpattn_last_error();
    if (s == DCPATTN_STATUS_SUCCESS ? msg[0] != 0 : (!msg[0] || !strcmp(msg, planted)))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *p = data;
    size_t left = size;
    uint8_t mode = 0;
    take(&p, &left, &mode, 1);
    if (mode % 4 == 0) { /* attention desc + args */
        dcpattn_attn_desc d;
        dcpattn_attn_args a;
        dcpattn_status s;
        take(&p, &left, &d, sizeof d);
        take(&p, &left, &a, sizeof a);
        plant();
        s = dcpattn_attn_desc_validate(&d);
        expect_fresh(s);
        if (s == DCPATTN_STATUS_SUCCESS) {
            plant();
            expect_fresh(dcpattn_attn_args_validate(&d, &a));
        }
    } else if (mode % 4 == 1) { /* merge: host arrays of fake device pointers */
        dcpattn_merge_args m;
        const void *o[DCPATTN_MAX_MERGE_STATES];
        const float *l[DCPATTN_MAX_MERGE_STATES];
        take(&p, &left, &m, sizeof m);
        take(&p, &left, o, sizeof o);
        take(&p, &left, l, sizeof l);
        m.o = (m.num_states & 1) || m.rows == 7 ? o : NULL;
        m.lse = l;
        plant();
        expect_fresh(dcpattn_merge_validate(&m));
    } else if (mode % 4 == 2) { /* the DCP combine: validation, and the workspace its shapes need */
        dcpattn_dcp_combine_args c;
        size_t bytes = 0;
        take(&p, &left, &c, sizeof c);
        plant();
        expect_fresh(dcpattn_dcp_combine_validate(&c));
        plant();
        expect_fresh(dcpattn_dcp_combine_workspace_size(&c, &bytes));
    } else { /* a variant name for the generator */
        char name[128], *src = NULL;
        size_t n = left < sizeof name - 1 ? left : sizeof name - 1;
        dcpattn_status s;
        memcpy(name, p, n);
        name[n] = 0;
        plant();
        s = dcpattn_variant_source(ctx, name, &src);
        expect_fresh(s);
        if (s == DCPATTN_STATUS_SUCCESS) {
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
