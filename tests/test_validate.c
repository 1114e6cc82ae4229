/* test_validate.c — host validation of every docs/faults.md row a validator can decide, for
   dcpattn_merge_validate, dcpattn_attn_desc_validate, dcpattn_attn_args_validate and
   dcpattn_dcp_combine_validate (whose other cases are in test_combine.c).
   No GPU: validation never dereferences device pointers, so fake, well-separated addresses
   stand in for them. Each rejection must return the right kind of status and a detail
   message (dcpattn_last_error) that names the argument and, where it is a number, its value.
   Build: gcc -std=c99 -Wall -Wextra -Werror -fsanitize=address,undefined -Iinclude -Itests
          tests/test_validate.c -o build/test_validate -llua5.4 -ldl -lm -lpthread */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <string.h>

#include "check.h"

/* expected kind of rejection */
#define ANY_REJECT (-1)  /* any status but success */
#define BAD_VALUE (-2)   /* INVALID_ARGUMENT or UNSUPPORTED */

static int is_ident(int c) { return isalnum(c) || c == '_'; }

/* `name` occurs in msg as a whole identifier (so "q" does not match "q_stride_h") */
static int has_word(const char *msg, const char *name) {
    size_t n = strlen(name);
    const char *p = msg;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == msg || !is_ident((unsigned char)p[-1])) && !is_ident((unsigned char)p[n])) return 1;
        p++;
    }
    return 0;
}

/* any of the '|'-separated names occurs as a word */
static int names_any(const char *msg, const char *names) {
    char buf[256], *tok;
    snprintf(buf, sizeof buf, "%s", names);
    for (tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|"))
        if (has_word(msg, tok)) return 1;
    return 0;
}

static void expect_reject_(int line, const char *what, dcpattn_status s, int want, const char *names,
                           const char *value) {
    const char *msg = dcpattn_last_error();
    int kind_ok = want == ANY_REJECT ? s != DCPATTN_STATUS_SUCCESS
                  : want == BAD_VALUE ? (s == DCPATTN_STATUS_INVALID_ARGUMENT || s == DCPATTN_STATUS_UNSUPPORTED)
                                      : s == (dcpattn_status)want;
    CHECK(kind_ok, "line %d: %s: status %s (%d), want %s", line, what, dcpattn_status_string(s), (int)s,
          want == ANY_REJECT  ? "a rejection"
          : want == BAD_VALUE ? "invalid argument or unsupported"
                              : dcpattn_status_string((dcpattn_status)want));
    if (s == DCPATTN_STATUS_SUCCESS) return;
    CHECK(msg && names_any(msg, names), "line %d: %s: message \"%s\" names none of %s", line, what, msg ? msg : "(null)",
          names);
    if (value) CHECK(msg && strstr(msg, value), "line %d: %s: message \"%s\" lacks the value %s", line, what, msg, value);
}
#define REJECT(call, want, names, value) expect_reject_(__LINE__, #call, (call), (want), (names), (value))
#define ACCEPT(call)                                                                                   \
    do {                                                                                               \
        dcpattn_status s_ = (call);                                                                    \
        CHECK(s_ == DCPATTN_STATUS_SUCCESS, "line %d: %s: %s: %s", __LINE__, #call,                    \
              dcpattn_status_string(s_), dcpattn_last_error());                                        \
    } while (0)

/* fake device addresses, far apart; every tensor of the valid case fits in 256 MiB */
#define FAKE(a) ((void *)(uintptr_t)(a))
static const uintptr_t Q = 0x100000000u, K = 0x200000000u, V = 0x300000000u, OUT = 0x400000000u,
                       LSE = 0x500000000u, BT = 0x600000000u, CU = 0x610000000u, SK = 0x620000000u,
                       SKG = 0x630000000u;

static dcpattn_attn_desc valid_desc(void) {
    dcpattn_attn_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = DCPATTN_BF16;
    d.num_q_heads = 32;
    d.num_kv_heads = 8;
    d.head_dim = 128;
    d.page_size = 16;
    d.dcp_world = 4;
    d.dcp_rank = 1;
    d.dcp_interleave = 1;
    d.max_batch = 8;
    d.max_q_len = 4;
    d.max_seqlen_k = 4096;
    return d;
}

/* One int field of the valid case set to a bad value: rejected (invalid argument or
   unsupported) with a message that names the field and the value. */
typedef struct bad_int {
    int line;
    size_t off;
    int value;
    const char *field, *shown;
} bad_int;
#define BAD_INT(type, f, v) {__LINE__, offsetof(type, f), v, #f, #v}
static void reject_desc_ints(const bad_int *b, int n) {
    int i;
    for (i = 0; i < n; i++) {
        dcpattn_attn_desc d = valid_desc();
        memcpy((char *)&d + b[i].off, &b[i].value, sizeof(int));
        expect_reject_(b[i].line, b[i].field, dcpattn_attn_desc_validate(&d), BAD_VALUE, b[i].field, b[i].shown);
    }
}

static dcpattn_attn_args valid_args(void) {
    dcpattn_attn_args a;
    memset(&a, 0, sizeof a);
    a.batch = 8;
    a.q = FAKE(Q);             /* 32 rows * 32 heads * 128 * 2 B = 256 KiB */
    a.k_cache = FAKE(K);       /* 1024 pages * 16 * 8 * 128 * 2 B = 32 MiB */
    a.v_cache = FAKE(V);
    a.num_pages = 1024;
    a.block_table = (const int32_t *)FAKE(BT);
    a.cu_seqlens_q = (const int32_t *)FAKE(CU);
    a.seqused_k = (const int32_t *)FAKE(SK);
    a.seqused_k_global = (const int32_t *)FAKE(SKG);
    a.out = FAKE(OUT);
    a.lse = (float *)FAKE(LSE);
    return a;
}

static void test_desc(void) {
    dcpattn_attn_desc d;
    static const int dims[] = {DCPATTN__GQA_HEAD_DIMS}; /* the header's family limits */
    int i;

    d = valid_desc();
    ACCEPT(dcpattn_attn_desc_validate(&d));
    for (i = 0; i < (int)(sizeof dims / sizeof dims[0]); i++) {
        d = valid_desc();
        d.head_dim = dims[i];
        ACCEPT(dcpattn_attn_desc_validate(&d));
        d.head_dim_v = dims[i];
        ACCEPT(dcpattn_attn_desc_validate(&d));
    }
    d = valid_desc(); d.dtype = DCPATTN_FP16; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.dtype = DCPATTN_DTYPE_DEFAULT; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.dcp_world = 0; d.dcp_rank = 0; ACCEPT(dcpattn_attn_desc_validate(&d)); /* 0 = 1 */
    d = valid_desc(); d.dcp_interleave = 0; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.dcp_interleave = 64; d.dcp_rank = 3; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.num_kv_heads = 32; ACCEPT(dcpattn_attn_desc_validate(&d));  /* MHA */
    d = valid_desc(); d.num_kv_heads = 1; ACCEPT(dcpattn_attn_desc_validate(&d));   /* MQA, group 32 */
    d = valid_desc(); d.page_size = 1; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.page_size = DCPATTN__MAX_PAGE_SIZE; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.non_causal = 1; d.lse_base2 = 1; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.softmax_scale = 0.125f; d.num_splits = 1; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.max_total_q = 20; ACCEPT(dcpattn_attn_desc_validate(&d));
    d = valid_desc(); d.max_total_q = 4; ACCEPT(dcpattn_attn_desc_validate(&d)); /* = max_q_len */

    REJECT(dcpattn_attn_desc_validate(NULL), ANY_REJECT, "desc", NULL);

    /* heads */
    d = valid_desc(); d.num_kv_heads = 5;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "num_q_heads|num_kv_heads", "5");
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_attn_desc, num_kv_heads, 0),
            BAD_INT(dcpattn_attn_desc, num_kv_heads, -8),
            BAD_INT(dcpattn_attn_desc, num_q_heads, 0),
            BAD_INT(dcpattn_attn_desc, num_q_heads, -32),
        };
        reject_desc_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }

    /* head dims */
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_attn_desc, head_dim, 0),
            BAD_INT(dcpattn_attn_desc, head_dim, -128),
            BAD_INT(dcpattn_attn_desc, head_dim_v, -1),
            BAD_INT(dcpattn_attn_desc, head_dim, 100),
            BAD_INT(dcpattn_attn_desc, head_dim, 512),
        };
        reject_desc_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }
    d = valid_desc(); d.head_dim = 128; d.head_dim_v = 64; /* neither GQA nor MLA */
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "head_dim|head_dim_v", "64");
    d = valid_desc(); d.head_dim = 576; d.head_dim_v = 512; /* MLA shape with 8 KV heads */
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "num_kv_heads|head_dim|head_dim_v", NULL);
    d = valid_desc(); d.head_dim = 576; /* 576 without Dv = 512 */
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "head_dim|head_dim_v", "576");

    /* dtype */
    d = valid_desc(); d.dtype = DCPATTN_FP32;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "dtype", NULL);
    d = valid_desc(); d.dtype = (dcpattn_dtype)99;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "dtype", "99");

    /* placement */
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_attn_desc, dcp_world, -1),
            BAD_INT(dcpattn_attn_desc, dcp_rank, 4),
            BAD_INT(dcpattn_attn_desc, dcp_rank, 9),
            BAD_INT(dcpattn_attn_desc, dcp_rank, -1),
        };
        reject_desc_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }
    d = valid_desc(); d.dcp_world = 0; d.dcp_rank = 1; /* default W = 1 has no rank 1 */
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "dcp_rank", "1");
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_attn_desc, dcp_interleave, -1),
            BAD_INT(dcpattn_attn_desc, dcp_interleave, -16),
        };
        reject_desc_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }

    /* page size */
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_attn_desc, page_size, 0),
            BAD_INT(dcpattn_attn_desc, page_size, -16),
            BAD_INT(dcpattn_attn_desc, page_size, 257),
            BAD_INT(dcpattn_attn_desc, page_size, 512),
        };
        reject_desc_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }

    /* upper bounds and policies */
    d = valid_desc(); d.max_batch = 0;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "max_batch", NULL);
    d = valid_desc(); d.max_batch = -1;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "max_batch", "-1");
    d = valid_desc(); d.max_q_len = 0;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "max_q_len", NULL);
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_attn_desc, max_seqlen_k, -1),
            BAD_INT(dcpattn_attn_desc, max_total_q, -5),
            BAD_INT(dcpattn_attn_desc, num_splits, -3),
            BAD_INT(dcpattn_attn_desc, num_sms, -3),
        };
        reject_desc_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }
    /* flags are 0 or 1; each message names its own field */
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_attn_desc, lse_base2, 7),
            BAD_INT(dcpattn_attn_desc, lse_base2, -1),
            BAD_INT(dcpattn_attn_desc, non_causal, -3),
            BAD_INT(dcpattn_attn_desc, non_causal, 2),
        };
        reject_desc_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }
    d = valid_desc(); d.non_causal = -3;
    CHECK(dcpattn_attn_desc_validate(&d) && !has_word(dcpattn_last_error(), "lse_base2"),
          "non_causal = -3 named another field: %s", dcpattn_last_error());
    d = valid_desc(); d.lse_base2 = 7;
    CHECK(dcpattn_attn_desc_validate(&d) && !has_word(dcpattn_last_error(), "non_causal"),
          "lse_base2 = 7 named another field: %s", dcpattn_last_error());
    /* a bound of all rows below one sequence's rows */
    d = valid_desc(); d.max_total_q = 3;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "max_total_q", "3");
    d = valid_desc(); d.softmax_scale = NAN;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "softmax_scale", NULL);
    d = valid_desc(); d.softmax_scale = INFINITY;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "softmax_scale", NULL);

    /* products that overflow */
    d = valid_desc(); d.max_batch = INT_MAX; d.max_q_len = INT_MAX; /* max_total_q 0: B * q_len */
    REJECT(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_OVERFLOW, "max_batch|max_q_len|max_total_q", NULL);
    d = valid_desc(); d.max_total_q = INT_MAX; d.num_q_heads = 128; d.num_kv_heads = 8;
    REJECT(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_OVERFLOW, "max_total_q|num_q_heads|head_dim", NULL);
    d = valid_desc(); d.dcp_world = 65536; d.dcp_interleave = 65536; d.dcp_rank = 0;
    REJECT(dcpattn_attn_desc_validate(&d), DCPATTN_STATUS_OVERFLOW, "dcp_world|dcp_interleave", NULL);
}

static void test_args(void) {
    dcpattn_attn_desc d = valid_desc();
    dcpattn_attn_args a;

    a = valid_args();
    ACCEPT(dcpattn_attn_args_validate(&d, &a));
    a = valid_args(); a.lse = NULL; ACCEPT(dcpattn_attn_args_validate(&d, &a)); /* lse is optional */
    a = valid_args(); a.batch = 3; ACCEPT(dcpattn_attn_args_validate(&d, &a));
    {   /* batch 0 is a valid empty batch */
        dcpattn_attn_args e;
        memset(&e, 0, sizeof e);
        ACCEPT(dcpattn_attn_args_validate(&d, &e));
    }
    {   /* W = 1: seqused_k_global may be NULL */
        dcpattn_attn_desc d1 = valid_desc();
        d1.dcp_world = 1;
        d1.dcp_rank = 0;
        a = valid_args();
        a.seqused_k_global = NULL;
        ACCEPT(dcpattn_attn_args_validate(&d1, &a));
    }
    a = valid_args(); /* explicit strides equal to the defaults, and padded ones */
    a.q_stride_t = 32 * 128; a.q_stride_h = 128;
    a.k_stride_page = 16 * 8 * 128; a.k_stride_t = 8 * 128; a.k_stride_h = 128;
    a.v_stride_page = 16 * 8 * 128; a.v_stride_t = 8 * 128; a.v_stride_h = 128;
    a.out_stride_t = 32 * 128; a.out_stride_h = 128; a.block_table_stride = 256;
    ACCEPT(dcpattn_attn_args_validate(&d, &a));
    a.q_stride_t = 32 * 136 + 64; a.q_stride_h = 136; a.out_stride_h = 136; a.out_stride_t = 32 * 136;
    a.block_table_stride = 300;
    ACCEPT(dcpattn_attn_args_validate(&d, &a));
    a = valid_args(); a.out = FAKE(Q + 32 * 32 * 128 * 2); /* right after q: adjacent, no overlap */
    ACCEPT(dcpattn_attn_args_validate(&d, &a));

    REJECT(dcpattn_attn_args_validate(&d, NULL), ANY_REJECT, "args", NULL);
    REJECT(dcpattn_attn_args_validate(NULL, &a), ANY_REJECT, "desc", NULL);
    {   /* a bad descriptor is caught by args validation too */
        dcpattn_attn_desc bad = valid_desc();
        bad.num_kv_heads = 5;
        a = valid_args();
        REJECT(dcpattn_attn_args_validate(&bad, &a), BAD_VALUE, "num_q_heads|num_kv_heads", NULL);
    }

    /* batch */
    a = valid_args(); a.batch = 9;
    REJECT(dcpattn_attn_args_validate(&d, &a), BAD_VALUE, "batch|max_batch", "9");
    a = valid_args(); a.batch = -1;
    REJECT(dcpattn_attn_args_validate(&d, &a), BAD_VALUE, "batch", "-1");

    /* NULL required pointers */
#define NULL_CASE(field, name)                                                                           \
    a = valid_args();                                                                                    \
    a.field = NULL;                                                                                      \
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_INVALID_ARGUMENT, name, NULL);
    NULL_CASE(q, "q")
    NULL_CASE(k_cache, "k_cache")
    NULL_CASE(v_cache, "v_cache")
    NULL_CASE(block_table, "block_table")
    NULL_CASE(cu_seqlens_q, "cu_seqlens_q")
    NULL_CASE(seqused_k, "seqused_k")
    NULL_CASE(seqused_k_global, "seqused_k_global") /* needed: W = 4 */
    NULL_CASE(out, "out")
#undef NULL_CASE

    /* misaligned pointers */
#define MISALIGN_CASE(field, type, addr, name)                                                           \
    a = valid_args();                                                                                    \
    a.field = (type)FAKE(addr);                                                                          \
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, name, NULL);
    MISALIGN_CASE(q, const void *, Q + 2, "q")
    MISALIGN_CASE(q, const void *, Q + 8, "q")
    MISALIGN_CASE(k_cache, const void *, K + 2, "k_cache")
    MISALIGN_CASE(v_cache, const void *, V + 8, "v_cache")
    MISALIGN_CASE(out, void *, OUT + 2, "out")
    MISALIGN_CASE(lse, float *, LSE + 2, "lse")
    MISALIGN_CASE(block_table, const int32_t *, BT + 2, "block_table")
    MISALIGN_CASE(cu_seqlens_q, const int32_t *, CU + 1, "cu_seqlens_q")
    MISALIGN_CASE(seqused_k, const int32_t *, SK + 3, "seqused_k")
    MISALIGN_CASE(seqused_k_global, const int32_t *, SKG + 2, "seqused_k_global")
#undef MISALIGN_CASE

    /* strides that break 16-byte rows */
#define STRIDE_CASE(field, value)                                                                        \
    a = valid_args();                                                                                    \
    a.field = value;                                                                                     \
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, #field, #value);
    STRIDE_CASE(q_stride_h, 129)
    STRIDE_CASE(q_stride_t, 4097)
    STRIDE_CASE(k_stride_page, 16388)
    STRIDE_CASE(k_stride_t, 1025)
    STRIDE_CASE(k_stride_h, 130)
    STRIDE_CASE(v_stride_page, 16386)
    STRIDE_CASE(v_stride_t, 1028)
    STRIDE_CASE(v_stride_h, 131)
    STRIDE_CASE(out_stride_t, 4100)
    STRIDE_CASE(out_stride_h, 132)
#undef STRIDE_CASE
    a = valid_args(); a.q_stride_t = -4096;
    REJECT(dcpattn_attn_args_validate(&d, &a), ANY_REJECT, "q_stride_t", "-4096");
    a = valid_args(); a.k_stride_page = -16384;
    REJECT(dcpattn_attn_args_validate(&d, &a), ANY_REJECT, "k_stride_page", "-16384");
    a = valid_args(); a.lse_stride_t = -32;
    REJECT(dcpattn_attn_args_validate(&d, &a), ANY_REJECT, "lse_stride_t", "-32");

    /* cache geometry */
    a = valid_args(); a.num_pages = 0;
    REJECT(dcpattn_attn_args_validate(&d, &a), BAD_VALUE, "num_pages", "0");
    a = valid_args(); a.num_pages = -1;
    REJECT(dcpattn_attn_args_validate(&d, &a), BAD_VALUE, "num_pages", "-1");
    a = valid_args(); a.block_table_stride = 100; /* < ceil(4096 / 16) */
    REJECT(dcpattn_attn_args_validate(&d, &a), BAD_VALUE, "block_table_stride", "100");

    /* extents that overflow 64 bits */
    a = valid_args(); a.k_stride_page = (INT64_MAX / 64) & ~(int64_t)7; /* * 1024 pages */
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_OVERFLOW, "k_stride_page|num_pages|k_cache", NULL);
    a = valid_args(); a.v_stride_page = (INT64_MAX / 64) & ~(int64_t)7;
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_OVERFLOW, "v_stride_page|num_pages|v_cache", NULL);
    a = valid_args(); a.num_pages = INT64_MAX / 1000;
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_OVERFLOW, "num_pages|k_cache|k_stride_page", NULL);
    a = valid_args(); a.q_stride_t = (INT64_MAX / 8) & ~(int64_t)7; /* * 32 rows */
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_OVERFLOW, "q_stride_t|q|max_total_q", NULL);

    /* out aliasing q or the cache */
    a = valid_args(); a.out = FAKE(Q);
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "q", NULL);
    a = valid_args(); a.out = FAKE(Q + 4096); /* starts inside q's first row */
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "q", NULL);
    a = valid_args(); a.out = FAKE(Q - 4096); /* ends inside q */
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "q", NULL);
    a = valid_args(); a.out = FAKE(K);
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "k_cache|cache", NULL);
    a = valid_args(); a.out = FAKE(K + (1u << 20)); /* inside the K pool */
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "k_cache|cache", NULL);
    a = valid_args(); a.out = FAKE(V + (16u << 20));
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "v_cache|cache", NULL);
    /* lse is an output as well: it may not overlap q or the cache */
    a = valid_args(); a.lse = (float *)FAKE(Q);
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "lse", NULL);
    a = valid_args(); a.lse = (float *)FAKE(Q - 64); /* its first row (32 heads * 4 B) runs into q */
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "lse", NULL);
    a = valid_args(); a.lse = (float *)FAKE(K - 64);
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "lse", NULL);
    /* buffers sized for the real rows may follow each other: no false alarm from the bound */
    a = valid_args(); a.out = FAKE(Q + 8192); /* right after a one-row q */
    ACCEPT(dcpattn_attn_args_validate(&d, &a));

    /* MLA (576/512, one KV head): valid with V aliasing K; anything else is unsupported */
    {
        dcpattn_attn_desc m = valid_desc();
        m.num_q_heads = 16;
        m.num_kv_heads = 1;
        m.head_dim = 576;
        m.head_dim_v = 512;
        m.page_size = 64;
        a = valid_args();
        a.v_cache = a.k_cache;
        a.num_pages = 64;
        CHECK(dcpattn_attn_desc_validate(&m) == DCPATTN_STATUS_SUCCESS, "MLA desc: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_args_validate(&m, &a) == DCPATTN_STATUS_SUCCESS, "MLA args: %s", dcpattn_last_error());
        a.v_cache = FAKE(V);
        REJECT(dcpattn_attn_args_validate(&m, &a), DCPATTN_STATUS_UNSUPPORTED, "v_cache|k_cache", NULL);
        a.v_cache = a.k_cache;
        a.v_stride_t = 512;
        REJECT(dcpattn_attn_args_validate(&m, &a), DCPATTN_STATUS_UNSUPPORTED, "v_cache|k_cache", NULL);
        {   /* page sizes: a 64-token tile's TMA boxes never cross a page */
            static const int ok[] = {DCPATTN__MLA_PAGE_SIZES}, bad[] = {8, 24, 40, 48, 96, 100};
            int i;
            for (i = 0; i < (int)(sizeof ok / sizeof ok[0]); i++) {
                m.page_size = ok[i];
                CHECK(dcpattn_attn_desc_validate(&m) == DCPATTN_STATUS_SUCCESS, "MLA page_size %d: %s", ok[i],
                      dcpattn_last_error());
            }
            for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
                m.page_size = bad[i];
                REJECT(dcpattn_attn_desc_validate(&m), DCPATTN_STATUS_UNSUPPORTED, "page_size", NULL);
            }
            m.page_size = 64;
        }
        {   /* the balanced schedule: GQA any batch, MLA at most 256 sequences when asked by name */
            dcpattn_attn_desc g = valid_desc();
            g.num_splits = DCPATTN_SPLITS_BALANCED;
            g.max_batch = 4096;
            CHECK(dcpattn_attn_desc_validate(&g) == DCPATTN_STATUS_SUCCESS, "GQA balanced: %s", dcpattn_last_error());
            g.num_splits = DCPATTN_SPLITS_PER_SEQUENCE;
            CHECK(dcpattn_attn_desc_validate(&g) == DCPATTN_STATUS_SUCCESS, "per-sequence splits: %s",
                  dcpattn_last_error());
            m.num_splits = DCPATTN_SPLITS_BALANCED;
            m.max_batch = 256;
            CHECK(dcpattn_attn_desc_validate(&m) == DCPATTN_STATUS_SUCCESS, "MLA balanced: %s", dcpattn_last_error());
            m.max_batch = 257;
            REJECT(dcpattn_attn_desc_validate(&m), DCPATTN_STATUS_UNSUPPORTED, "max_batch", "257");
            m = valid_desc();
            m.num_q_heads = 16;
            m.num_kv_heads = 1;
            m.head_dim = 576;
            m.head_dim_v = 512;
            m.page_size = 64;
        }
        m.num_kv_heads = 2;
        m.num_q_heads = 32;
        REJECT(dcpattn_attn_desc_validate(&m), DCPATTN_STATUS_UNSUPPORTED, "num_kv_heads", NULL);
        m.num_kv_heads = 1;
        m.num_q_heads = 256;
        REJECT(dcpattn_attn_desc_validate(&m), DCPATTN_STATUS_UNSUPPORTED, "num_q_heads", NULL);
    }
}

/* ------------------------------------------------------------------ FP8 KV cache */
static const uintptr_t KS = 0x640000000u, VS = 0x650000000u;

/* Run arguments of an e4m3 cache (GQA or MLA): both scales needed, each 4-byte aligned. */
static void check_scales(const dcpattn_attn_desc *d, dcpattn_attn_args a) {
    a.k_scale = (const float *)FAKE(KS);
    a.v_scale = (const float *)FAKE(VS);
    ACCEPT(dcpattn_attn_args_validate(d, &a));
    a.k_scale = NULL;
    REJECT(dcpattn_attn_args_validate(d, &a), DCPATTN_STATUS_INVALID_ARGUMENT, "k_scale", NULL);
    a.k_scale = (const float *)FAKE(KS);
    a.v_scale = NULL;
    REJECT(dcpattn_attn_args_validate(d, &a), DCPATTN_STATUS_INVALID_ARGUMENT, "v_scale", NULL);
    a.v_scale = (const float *)FAKE(VS + 2);
    REJECT(dcpattn_attn_args_validate(d, &a), DCPATTN_STATUS_MISALIGNED, "v_scale", NULL);
    a.v_scale = (const float *)FAKE(VS);
    a.k_scale = (const float *)FAKE(KS + 1);
    REJECT(dcpattn_attn_args_validate(d, &a), DCPATTN_STATUS_MISALIGNED, "k_scale", NULL);
}

static void test_fp8(void) {
    dcpattn_attn_desc d = valid_desc(), m;
    dcpattn_attn_args a;
    d.kv_dtype = DCPATTN_FP8_E4M3;
    ACCEPT(dcpattn_attn_desc_validate(&d));
    d.kv_scale_per_head = 1;
    ACCEPT(dcpattn_attn_desc_validate(&d));
    d.dtype = DCPATTN_FP16;
    ACCEPT(dcpattn_attn_desc_validate(&d));
    d.kv_scale_per_head = 2;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "kv_scale_per_head", "2");
    d = valid_desc();
    d.kv_dtype = DCPATTN_FP16; /* a 16-bit cache has the query's type */
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "kv_dtype", "2");
    d.kv_dtype = DCPATTN_FP32;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "kv_dtype", "3");
    d.kv_dtype = (dcpattn_dtype)9;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "kv_dtype", "9");
    d.kv_dtype = DCPATTN_BF16; /* spelled out: the same as 0 */
    ACCEPT(dcpattn_attn_desc_validate(&d));
    d.dtype = DCPATTN_FP8_E4M3; /* q and out stay 16-bit */
    d.kv_dtype = DCPATTN_FP8_E4M3;
    REJECT(dcpattn_attn_desc_validate(&d), BAD_VALUE, "dtype", "4");
    /* MLA with an e4m3 cache (rows of 576 bytes, V aliasing K): bf16 and fp16 queries; the
       scales and the 16-byte stride rule as for GQA */
    m = valid_desc();
    m.num_q_heads = 16, m.num_kv_heads = 1, m.head_dim = 576, m.head_dim_v = 512, m.page_size = 64;
    m.kv_dtype = DCPATTN_FP8_E4M3;
    ACCEPT(dcpattn_attn_desc_validate(&m));
    m.dtype = DCPATTN_FP16;
    ACCEPT(dcpattn_attn_desc_validate(&m));
    m.num_splits = DCPATTN_SPLITS_BALANCED;
    ACCEPT(dcpattn_attn_desc_validate(&m));
    m.dtype = DCPATTN_BF16, m.num_splits = 0;
    a = valid_args();
    a.v_cache = a.k_cache;
    a.num_pages = 64;
    check_scales(&m, a);
    a.k_scale = (const float *)FAKE(KS);
    a.v_scale = (const float *)FAKE(VS);
    a.k_stride_h = a.v_stride_h = 576; /* V's strides are K's, spelled out */
    a.k_stride_t = a.v_stride_t = 592; /* padded rows: 37 16-byte pieces */
    ACCEPT(dcpattn_attn_args_validate(&m, &a));
    a.k_stride_t = a.v_stride_t = 584; /* 8 bytes short of a piece (a 16-bit cache's rule holds) */
    REJECT(dcpattn_attn_args_validate(&m, &a), DCPATTN_STATUS_MISALIGNED, "k_stride_t", "584");
    m.kv_dtype = 0;
    ACCEPT(dcpattn_attn_args_validate(&m, &a));
    m.kv_dtype = DCPATTN_FP8_E4M3;
    a.k_stride_t = a.v_stride_t = 576;
    a.k_stride_page = a.v_stride_page = 64 * 576 + 8;
    REJECT(dcpattn_attn_args_validate(&m, &a), DCPATTN_STATUS_MISALIGNED, "k_stride_page", "36872");
    a.k_stride_page = a.v_stride_page = 64 * 576;
    ACCEPT(dcpattn_attn_args_validate(&m, &a));
    a.v_cache = FAKE(V); /* V is still read from the K rows */
    REJECT(dcpattn_attn_args_validate(&m, &a), DCPATTN_STATUS_UNSUPPORTED, "v_cache|k_cache", NULL);

    /* run arguments: both scales, 4-byte aligned; K/V strides in whole 16-byte pieces */
    d = valid_desc();
    d.kv_dtype = DCPATTN_FP8_E4M3;
    a = valid_args();
    check_scales(&d, a);
    a.k_scale = (const float *)FAKE(KS);
    a.v_scale = (const float *)FAKE(VS);
    a.k_stride_h = 136; /* 8 elements: 8 bytes of e4m3, not a 16-byte piece */
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "k_stride_h", "136");
    a.k_stride_h = 144;
    ACCEPT(dcpattn_attn_args_validate(&d, &a));
    a = valid_args();
    a.k_scale = (const float *)FAKE(KS);
    a.v_scale = (const float *)FAKE(VS);
    a.v_stride_t = 1032;
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_MISALIGNED, "v_stride_t", "1032");
    a.v_stride_t = 0;
    a.q_stride_h = 136; /* q stays 16-bit: 8 elements suffice */
    ACCEPT(dcpattn_attn_args_validate(&d, &a));
    /* a 16-bit cache ignores the scales, and its strides keep the 8-element rule */
    d.kv_dtype = 0;
    a = valid_args();
    a.k_stride_h = 136;
    ACCEPT(dcpattn_attn_args_validate(&d, &a));
    /* the cache is 1 byte per element: out right after an FP8 cache's extent is no overlap,
       half-way into it is (1024 pages * 16 * 8 * 128 B = 16 MiB) */
    d.kv_dtype = DCPATTN_FP8_E4M3;
    a = valid_args();
    a.k_scale = (const float *)FAKE(KS);
    a.v_scale = (const float *)FAKE(VS);
    a.out = FAKE(K + 16u * 1024u * 1024u);
    ACCEPT(dcpattn_attn_args_validate(&d, &a));
    a.out = FAKE(K + 8u * 1024u * 1024u);
    REJECT(dcpattn_attn_args_validate(&d, &a), DCPATTN_STATUS_ALIASING, "k_cache|cache", NULL);
}

/* ------------------------------------------------------------------ merge */
#define O_ADDR(n) ((uintptr_t)0x100000000u + (uintptr_t)(n) * 0x1000000u)
#define L_ADDR(n) ((uintptr_t)0x800000000u + (uintptr_t)(n) * 0x100000u)
static const void *o_ptrs[65];
static const float *l_ptrs[65];

static dcpattn_merge_args valid_merge(void) {
    dcpattn_merge_args m;
    int n;
    for (n = 0; n < 65; n++) {
        o_ptrs[n] = FAKE(O_ADDR(n));
        l_ptrs[n] = (const float *)FAKE(L_ADDR(n));
    }
    memset(&m, 0, sizeof m);
    m.num_states = 4;
    m.rows = 16;
    m.heads = 8;
    m.head_dim = 128;
    m.in_dtype = DCPATTN_BF16;
    m.o = o_ptrs;
    m.lse = l_ptrs;
    m.out = FAKE(0x900000000u);
    m.lse_out = (float *)FAKE(0xa00000000u);
    return m;
}

static void reject_merge_ints(const bad_int *b, int n) {
    int i;
    for (i = 0; i < n; i++) {
        dcpattn_merge_args m = valid_merge();
        memcpy((char *)&m + b[i].off, &b[i].value, sizeof(int));
        expect_reject_(b[i].line, b[i].field, dcpattn_merge_validate(&m), BAD_VALUE, b[i].field, b[i].shown);
    }
}


static void test_merge(void) {
    dcpattn_merge_args m;

    m = valid_merge();
    ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.lse_out = NULL; ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.num_states = 1; ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.num_states = 64; ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.in_dtype = DCPATTN_FP32; m.out_dtype = DCPATTN_BF16; ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.in_dtype = DCPATTN_FP16; m.head_dim = 8; ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.in_dtype = DCPATTN_FP32; m.out_dtype = DCPATTN_FP32; m.head_dim = 4;
    ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.out = (void *)o_ptrs[0]; ACCEPT(dcpattn_merge_validate(&m)); /* in place */
    /* rows = 0 does nothing, like an empty attention batch or combine: pointers unread */
    m = valid_merge(); m.rows = 0; ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.rows = 0; m.o = NULL; m.lse = NULL; m.out = NULL; m.lse_out = NULL;
    ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.rows = 0; m.heads = 0; /* but the other fields still count */
    REJECT(dcpattn_merge_validate(&m), BAD_VALUE, "heads", "0");
    m = valid_merge(); /* head-major out and lse_out: rows interleaved, nothing overlaps */
    m.out_stride_t = 128; m.out_stride_h = 16 * 128; m.lse_out_stride_t = 1; m.lse_out_stride_h = 16;
    ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.lse_out = (float *)FAKE(0x900000000u + 16 * 8 * 128 * 2); /* right after out */
    ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); /* explicit strides: padded o, strided lse */
    m.o_stride_t = 8 * 136 + 8; m.o_stride_h = 136; m.lse_stride_t = 1; m.lse_stride_h = 16;
    m.lse_base2_in = 1; m.lse_base2_out = 1;
    ACCEPT(dcpattn_merge_validate(&m));

    REJECT(dcpattn_merge_validate(NULL), ANY_REJECT, "args", NULL);

    /* counts and dims */
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_merge_args, num_states, 0),
            BAD_INT(dcpattn_merge_args, num_states, -1),
            BAD_INT(dcpattn_merge_args, num_states, 65),
            BAD_INT(dcpattn_merge_args, rows, -3),
            BAD_INT(dcpattn_merge_args, heads, 0),
            BAD_INT(dcpattn_merge_args, heads, -2),
            BAD_INT(dcpattn_merge_args, head_dim, 0),
            BAD_INT(dcpattn_merge_args, head_dim, -8),
        };
        reject_merge_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }
    /* head_dim not a whole number of 16-byte vectors */
    m = valid_merge(); m.head_dim = 100;
    REJECT(dcpattn_merge_validate(&m), BAD_VALUE, "head_dim", "100");
    m = valid_merge(); m.head_dim = 4; /* bf16: 8 bytes */
    REJECT(dcpattn_merge_validate(&m), BAD_VALUE, "head_dim", "4");
    m = valid_merge(); m.in_dtype = DCPATTN_FP32; m.head_dim = 6;
    REJECT(dcpattn_merge_validate(&m), BAD_VALUE, "head_dim", "6");
    m = valid_merge(); m.in_dtype = DCPATTN_FP32; m.out_dtype = DCPATTN_BF16; m.head_dim = 4; /* out: 8 B */
    REJECT(dcpattn_merge_validate(&m), BAD_VALUE, "head_dim", "4");
    m = valid_merge(); m.in_dtype = (dcpattn_dtype)9;
    REJECT(dcpattn_merge_validate(&m), BAD_VALUE, "in_dtype", "9");
    m = valid_merge(); m.out_dtype = (dcpattn_dtype)7;
    REJECT(dcpattn_merge_validate(&m), BAD_VALUE, "out_dtype", "7");

    /* NULL pointers */
    m = valid_merge(); m.o = NULL;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_INVALID_ARGUMENT, "o", NULL);
    m = valid_merge(); m.lse = NULL;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_INVALID_ARGUMENT, "lse", NULL);
    m = valid_merge(); o_ptrs[2] = NULL;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_INVALID_ARGUMENT, "o", "2");
    m = valid_merge(); l_ptrs[1] = NULL;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_INVALID_ARGUMENT, "lse", "1");
    m = valid_merge(); m.out = NULL;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_INVALID_ARGUMENT, "out", NULL);

    /* misaligned pointers and strides */
    m = valid_merge(); o_ptrs[1] = FAKE(O_ADDR(1) + 2);
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "o", NULL);
    m = valid_merge(); o_ptrs[3] = FAKE(O_ADDR(3) + 8);
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "o", NULL);
    m = valid_merge(); l_ptrs[0] = (const float *)FAKE(L_ADDR(0) + 2);
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "lse", NULL);
    m = valid_merge(); m.out = FAKE(0x900000002u);
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "out", NULL);
    m = valid_merge(); m.lse_out = (float *)FAKE(0xa00000001u);
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "lse_out", NULL);
    m = valid_merge(); m.o_stride_h = 100;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "o_stride_h|o", "100");
    m = valid_merge(); m.o_stride_t = 1028;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "o_stride_t|o", "1028");
    m = valid_merge(); m.out_stride_h = 132;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "out_stride_h|out", "132");
    m = valid_merge(); m.out_stride_t = 1028;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_MISALIGNED, "out_stride_t|out", "1028");
    m = valid_merge(); m.o_stride_t = -1024;
    REJECT(dcpattn_merge_validate(&m), ANY_REJECT, "o_stride_t|o", NULL);
    m = valid_merge(); m.lse_stride_h = -1;
    REJECT(dcpattn_merge_validate(&m), ANY_REJECT, "lse_stride_h", "-1");
    m = valid_merge(); m.out_stride_h = -8;
    REJECT(dcpattn_merge_validate(&m), ANY_REJECT, "out_stride_h", "-8");
    m = valid_merge(); m.lse_out_stride_t = -2;
    REJECT(dcpattn_merge_validate(&m), ANY_REJECT, "lse_out_stride_t", "-2");

    /* LSE base flags are 0 or 1 */
    {
        static const bad_int bad[] = {
            BAD_INT(dcpattn_merge_args, lse_base2_in, 7),
            BAD_INT(dcpattn_merge_args, lse_base2_in, -1),
            BAD_INT(dcpattn_merge_args, lse_base2_out, 2),
        };
        reject_merge_ints(bad, (int)(sizeof bad / sizeof bad[0]));
    }

    /* aliasing: only out == o[0] with the same layout is allowed */
    m = valid_merge(); m.out = (void *)o_ptrs[1];
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "o|out", NULL);
    m = valid_merge(); m.out = FAKE(O_ADDR(2) + 1024); /* inside o[2] */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "o|out", NULL);
    m = valid_merge(); m.out = (void *)o_ptrs[0]; m.out_stride_h = 256; m.out_stride_t = 8 * 256;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "o|out", NULL);
    m = valid_merge(); m.out = (void *)o_ptrs[0]; m.out_dtype = DCPATTN_FP32; /* in place but wider */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "o|out", NULL);
    /* every other overlap of an output with anything is a race */
    m = valid_merge(); m.out = FAKE(L_ADDR(1)); /* out on top of lse[1] */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "out", "lse[1]");
    m = valid_merge(); m.out = FAKE(L_ADDR(3) - 4096); /* runs into lse[3] */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "out", "lse[3]");
    m = valid_merge(); m.lse_out = (float *)FAKE(O_ADDR(0) + 64); /* inside o[0] */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", "o[0]");
    m = valid_merge(); m.lse_out = (float *)FAKE(O_ADDR(2) + 16 * 8 * 128 * 2 - 8); /* o[2]'s last element */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", "o[2]");
    m = valid_merge(); m.lse_out = (float *)m.out;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", "out");
    m = valid_merge(); m.lse_out = (float *)FAKE(L_ADDR(2)); /* on top of lse[2] */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", "lse[2]");
    m = valid_merge(); m.lse_out = (float *)FAKE(L_ADDR(3) + 16 * 8 * 4 - 4); /* lse[3]'s last element */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", "lse[3]");
    m = valid_merge(); m.lse_out = (float *)FAKE(L_ADDR(1) - 16 * 8 * 4 + 4); /* runs into lse[1] */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", "lse[1]");
    m = valid_merge(); m.out = (void *)o_ptrs[0]; m.lse_out = (float *)FAKE(L_ADDR(0)); /* in place is for out only */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", "lse[0]");
    m = valid_merge(); m.lse_out = (float *)FAKE(L_ADDR(1) - 16 * 8 * 4); /* ends right where lse[1] starts */
    ACCEPT(dcpattn_merge_validate(&m));
    m = valid_merge(); m.out = (void *)o_ptrs[0]; m.lse_out = (float *)FAKE(O_ADDR(0) + 4096); /* in place + lse in o */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out", NULL);
    m = valid_merge(); m.out_stride_t = 512; /* a row is 8 heads * 128: rows overlap */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "out_stride_t", "512");
    m = valid_merge(); m.out_stride_h = 64; /* a head is 128 wide */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "out_stride_h", "64");
    m = valid_merge(); m.out_stride_t = 128; m.out_stride_h = 8 * 128; /* head-major for 8 rows, not 16 */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "out_stride_h", "1024");
    m = valid_merge(); m.lse_out_stride_t = 4; /* 8 heads per row */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "lse_out_stride_t", "4");
    m = valid_merge(); m.out = (void *)o_ptrs[0]; m.o_stride_t = m.out_stride_t = 512; /* in place, rows overlap */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_ALIASING, "out_stride_t", "512");

    /* size overflow */
    m = valid_merge(); m.rows = INT_MAX; m.heads = INT_MAX;
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_OVERFLOW, "rows|heads", NULL);
    m = valid_merge(); m.o_stride_t = (INT64_MAX / 4) & ~(int64_t)7; /* * 16 rows */
    REJECT(dcpattn_merge_validate(&m), DCPATTN_STATUS_OVERFLOW, "o_stride_t|o|rows", NULL);
}

/* ---------------------------------------------------------------- combine */
static dcpattn_dcp_combine_args valid_combine(void) {
    dcpattn_dcp_combine_args c;
    memset(&c, 0, sizeof c);
    c.world = 4;
    c.rank = 1;
    c.rows = 16;
    c.heads = 8;
    c.head_dim = 128;
    c.o = FAKE(Q);
    c.lse = (const float *)FAKE(LSE);
    c.out = FAKE(OUT);
    c.lse_out = (float *)FAKE(SK);
    c.workspace = FAKE(K);
    c.workspace_bytes = (size_t)1 << 26;
    return c;
}

static void test_combine(void) {
    dcpattn_dcp_combine_args c = valid_combine();
    ACCEPT(dcpattn_dcp_combine_validate(&c));
    c = valid_combine(); c.rows = 0; c.o = NULL; c.out = NULL; c.workspace = NULL;
    ACCEPT(dcpattn_dcp_combine_validate(&c));
    c = valid_combine(); c.lse_base2_in = 7;
    REJECT(dcpattn_dcp_combine_validate(&c), BAD_VALUE, "lse_base2_in", "7");
    c = valid_combine(); c.lse_base2_out = -1;
    REJECT(dcpattn_dcp_combine_validate(&c), BAD_VALUE, "lse_base2_out", "-1");
    c = valid_combine(); c.o_stride_h = -8;
    REJECT(dcpattn_dcp_combine_validate(&c), ANY_REJECT, "o_stride_h", "-8");
    c = valid_combine(); c.lse_out = (float *)FAKE(SK + 2);
    REJECT(dcpattn_dcp_combine_validate(&c), DCPATTN_STATUS_MISALIGNED, "lse_out", NULL);
    c = valid_combine(); c.out_stride_t = 128; /* scattered out: 2 heads * 128 per row */
    REJECT(dcpattn_dcp_combine_validate(&c), DCPATTN_STATUS_ALIASING, "out_stride_t", "128");
    c = valid_combine(); c.layout = DCPATTN_DCP_REPLICATE; c.out_stride_h = 64;
    REJECT(dcpattn_dcp_combine_validate(&c), DCPATTN_STATUS_ALIASING, "out_stride_h", "64");
    c = valid_combine(); c.lse_out_stride_t = 1; /* 2 heads per row */
    REJECT(dcpattn_dcp_combine_validate(&c), DCPATTN_STATUS_ALIASING, "lse_out_stride_t", "1");
    c = valid_combine(); c.out = FAKE(LSE);
    REJECT(dcpattn_dcp_combine_validate(&c), DCPATTN_STATUS_ALIASING, "out", "lse");
    c = valid_combine(); c.o_stride_h = (INT64_MAX / 4) & ~(int64_t)7; /* o_stride_t = 0 would be 8 times that */
    REJECT(dcpattn_dcp_combine_validate(&c), DCPATTN_STATUS_OVERFLOW, "o_stride_t", NULL);
}

/* rows = 0 on the run path: success, nothing compiled, loaded or launched (the context
   pretends to have a device whose driver was never opened: any launch would crash) */
static void test_empty_runs(void) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    dcpattn_merge_args m;
    dcpattn_dcp_combine_args c;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.cache_dir = "";
    if (dcpattn_context_create(&cd, &ctx) != DCPATTN_STATUS_SUCCESS) {
        CHECK(0, "context: %s", dcpattn_last_error());
        return;
    }
    ctx->compile_only = 0;
    memset(&m, 0, sizeof m);
    m.num_states = 2;
    m.heads = 8;
    m.head_dim = 128;
    ACCEPT(dcpattn_merge(ctx, &m, NULL));
    memset(&c, 0, sizeof c);
    c.heads = 8;
    c.head_dim = 128;
    ACCEPT(dcpattn_dcp_combine(ctx, NULL, &c, NULL));
    CHECK(!dcpattn_variant_loaded(ctx, "merge_bf16_bf16"), "an empty merge loaded a kernel");
    ctx->compile_only = 1;
    dcpattn_context_destroy(ctx);
}

/* a successful call empties the last error, so no check can pass on a stale message */
static void test_last_error_cleared(void) {
    dcpattn_attn_desc d = valid_desc();
    dcpattn_attn_args a = valid_args();
    dcpattn_merge_args m = valid_merge();
    dcpattn_dcp_combine_args c = valid_combine();
    size_t bytes;
#define STALE_THEN(call)                                                                               \
    do {                                                                                               \
        CHECK(dcpattn_merge_validate(NULL) != DCPATTN_STATUS_SUCCESS && dcpattn_last_error()[0],       \
              "a rejection leaves a message");                                                         \
        CHECK((call) == DCPATTN_STATUS_SUCCESS && dcpattn_last_error()[0] == 0,                       \
              "%s left the last error \"%s\"", #call, dcpattn_last_error());                          \
    } while (0)
    STALE_THEN(dcpattn_attn_desc_validate(&d));
    STALE_THEN(dcpattn_attn_args_validate(&d, &a));
    STALE_THEN(dcpattn_merge_validate(&m));
    STALE_THEN(dcpattn_dcp_combine_validate(&c));
    STALE_THEN(dcpattn_dcp_combine_workspace_size(&c, &bytes));
#undef STALE_THEN
}

/* every status has a distinct name; last_error is "" or a message, never NULL */
static void test_status(void) {
    int i, j, ok = 1;
    for (i = 0; i < DCPATTN_STATUS_COUNT_; i++) {
        const char *a = dcpattn_status_string((dcpattn_status)i);
        ok &= a && *a;
        for (j = 0; j < i; j++) ok &= strcmp(a, dcpattn_status_string((dcpattn_status)j)) != 0;
    }
    CHECK(ok, "status strings distinct and non-empty");
    CHECK(dcpattn_status_string((dcpattn_status)999) != NULL, "out-of-range status has a string");
    CHECK(dcpattn_last_error() != NULL, "last_error is never NULL");
}

int main(void) {
    test_status();
    test_desc();
    test_args();
    test_fp8();
    test_merge();
    test_combine();
    test_empty_runs();
    test_last_error_cleared();
    return check_summary();
}
