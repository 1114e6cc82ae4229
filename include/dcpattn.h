/* dcpattn.h — attention kernels and exact merges for decode context parallelism (DCP).

   Header-only C library. In exactly one C or C++ file of your program:

       #define DCPATTN_IMPLEMENTATION
       #include "dcpattn.h"

   Everywhere else include it plainly. Link with Lua 5.4 and libdl:
       cc app.c -llua5.4 -ldl -lm
   Nothing from CUDA is linked: the CUDA driver (libcuda.so.1), NVRTC and NCCL are opened
   with dlopen when first needed, so a program built with dcpattn starts on a machine with
   no GPU driver and gets DCPATTN_STATUS_NO_DRIVER from the calls that need one.

   WHAT IT DOES
   - Attention of q_len >= 1 query tokens per sequence over this rank's shard of a paged KV
     cache that is interleaved over W ranks in chunks of I tokens, with the causal mask that
     such a shard really has (DESIGN.md 3.2-3.3), returning the output and its log-sum-exp.
   - Exact merges of partial attention states (split-KV inside one GPU, ranks of a group).
   - Kernels are CUDA templates specialized by Lua scripts (gen/), compiled ahead of time
     into a read-only cache or at run time through NVRTC, and cached on disk.

   WHAT IT DOES NOT DO
   - It creates no CUDA context, stream, allocation of yours or NCCL communicator: you pass
     them in. It never synchronizes a stream, never calls exit() or abort() and never
     prints unless you ask (log level or callback).
   - It does not allocate device memory on the run path: plan tells you the workspace size.

   STEP BY STEP
       dcpattn_context *ctx;                        // per device, after cudaSetDevice()
       dcpattn_context_desc cd = {0};               // zero means default everywhere
       if (dcpattn_context_create(&cd, &ctx)) puts(dcpattn_last_error());

       dcpattn_merge_args m = {0};                  // merge N partial states
       m.num_states = 2; m.rows = T; m.heads = H; m.head_dim = D;
       m.o = o_ptrs; m.lse = lse_ptrs; m.out = out; m.lse_out = lse_out;
       dcpattn_merge(ctx, &m, stream);

       dcpattn_attn_desc ad = {0};                  // host-side description, upper bounds
       ... ad.num_q_heads = 64; ad.num_kv_heads = 8; ad.head_dim = 128; ...
       dcpattn_attn_plan *plan;
       dcpattn_attn_plan_create(ctx, &ad, &plan);   // picks, compiles or loads the kernel
       size_t ws = dcpattn_attn_workspace_size(plan);
       dcpattn_attn_run(plan, &args, workspace, ws, stream);   // capturable, no host sync

   ERRORS
   Every call returns a dcpattn_status (0 = success). dcpattn_status_string() names the
   code; dcpattn_last_error() gives this thread's detail message for the last failure
   (which argument and its value, the NVRTC log, the Lua traceback). Bad input is rejected
   before any GPU work: nothing is launched and no output byte changes. The validation
   functions need no GPU and no context.

   CONVENTIONS
   - Strides are in elements, and the last dimension of every tensor is contiguous.
     A stride of 0 in an args struct means "contiguous" for that tensor.
   - LSE is float32, lse = log(sum_j exp(s_j)) with s_j = scale * dot(q, k_j); natural log
     unless base 2 is requested (then log2 and s_j in log2 units). A row that sees no key
     has out = 0 and lse = -inf: never +inf, never NaN. Merging treats any non-finite input
     LSE as an empty state; merging only empty states gives zeros and -inf.
   - DCP placement: global token g lives on rank (g / I) % W at local index
     (g / (W*I))*I + g % I. Query row i of a sequence with global KV length L (the query
     tokens' own KV already in the cache) is at global position p = L - q_len + i and sees
     local key l iff its global position is <= p (causal), i.e. iff l < local_len_r(p + 1)
     with local_len_r(L) = (L / (W*I))*I + clamp(L % (W*I) - r*I, 0, I).
   - Per-sequence lengths are read on the device; the host gives only upper bounds.

   CONFIGURATION MACROS (define before including the implementation)
     DCPATTN_NO_JIT     never compile at run time: only cached or AOT kernels are used.
     DCPATTN_NO_NCCL    no DCP combine across GPUs (nothing of NCCL is opened).
     DCPATTN_DATA_DIR   string: where gen/ and templates/ live (else $DCPATTN_HOME).
     DCPATTN_AOT_DIR    string: the read-only precompiled cache consulted first.
     DCPATTN_API        declaration specifier of the public functions (default: extern).

   ENVIRONMENT
     DCPATTN_HOME       overrides DCPATTN_DATA_DIR (gen/ and templates/).
     DCPATTN_CACHE_DIR  ':'-separated cache directories: first hit wins, writes go to the
                        first writable one. Unset: $XDG_CACHE_HOME/dcpattn, else
                        ~/.cache/dcpattn. Set but empty: memory only.
     DCPATTN_NO_JIT=1   a cache miss becomes DCPATTN_STATUS_NOT_COMPILED.
     DCPATTN_LOG_LEVEL  0 silent (default), 1 warnings, 2 info (each compile), 3 debug;
                        messages go to stderr unless a log callback is set.
*/
#ifndef DCPATTN_H
#define DCPATTN_H

#include <stddef.h>
#include <stdint.h>

#ifndef DCPATTN_API
#define DCPATTN_API extern
#endif

#define DCPATTN_VERSION_MAJOR 0
#define DCPATTN_VERSION_MINOR 1
#define DCPATTN_VERSION_PATCH 0
#define DCPATTN_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes: one list gives the enum and dcpattn_status_string() ---- */
#define DCPATTN_STATUS_LIST(X)                                                        \
    X(SUCCESS, "success")                                                             \
    X(INVALID_ARGUMENT, "invalid argument")                                           \
    X(UNSUPPORTED, "unsupported configuration")                                       \
    X(MISALIGNED, "pointer or stride not aligned as required")                        \
    X(ALIASING, "output aliases an input it may not alias")                           \
    X(OVERFLOW, "size computation overflows")                                         \
    X(WORKSPACE, "workspace missing or too small")                                    \
    X(OUT_OF_MEMORY, "host memory allocation failed")                                 \
    X(NO_DRIVER, "CUDA driver library not available")                                 \
    X(NO_CONTEXT, "no current CUDA context")                                          \
    X(NO_NVRTC, "NVRTC library not available")                                        \
    X(NO_NCCL, "NCCL library not available")                                          \
    X(NOT_COMPILED, "kernel variant not in any cache and JIT is disabled")            \
    X(GENERATOR, "kernel generator (Lua) error")                                      \
    X(COMPILE, "NVRTC compilation failed")                                            \
    X(CUDA, "CUDA driver call failed")                                                \
    X(CAPTURE, "operation not allowed while the stream is being captured")            \
    X(NCCL, "NCCL call failed")                                                       \
    X(TIMEOUT, "timed out")                                                           \
    X(INTERNAL, "internal error")

typedef enum dcpattn_status {
#define DCPATTN_X_ENUM(name, text) DCPATTN_STATUS_##name,
    DCPATTN_STATUS_LIST(DCPATTN_X_ENUM)
#undef DCPATTN_X_ENUM
    DCPATTN_STATUS_COUNT_
} dcpattn_status;

DCPATTN_API const char *dcpattn_status_string(dcpattn_status s);
/* This thread's detail message for its last failed call ("" if none). */
DCPATTN_API const char *dcpattn_last_error(void);
DCPATTN_API const char *dcpattn_version(void);

/* ---- types shared with the caller's CUDA and NCCL code, without their headers ---- */
typedef struct CUstream_st *dcpattn_stream; /* == cudaStream_t == CUstream; 0 = legacy */

typedef enum dcpattn_dtype {
    DCPATTN_DTYPE_DEFAULT = 0, /* bf16 */
    DCPATTN_BF16 = 1,
    DCPATTN_FP16 = 2,
    DCPATTN_FP32 = 3
} dcpattn_dtype;

/* ---- context: one per CUDA context (device) ---- */
typedef struct dcpattn_context dcpattn_context;

enum { DCPATTN_LOG_SILENT = 0, DCPATTN_LOG_WARN = 1, DCPATTN_LOG_INFO = 2, DCPATTN_LOG_DEBUG = 3 };
typedef void (*dcpattn_log_fn)(void *user, int level, const char *message);

typedef struct dcpattn_context_desc {
    const char *data_dir;  /* gen/ and templates/; 0: $DCPATTN_HOME, else DCPATTN_DATA_DIR */
    const char *aot_dir;   /* read-only precompiled cache; 0: DCPATTN_AOT_DIR if defined */
    const char *arch;      /* "sm_90a"...; 0: the current device's own arch */
    int compile_only;      /* 1: no GPU needed; kernels are compiled and cached, not loaded */
    int log_level;         /* -1 or 0: from $DCPATTN_LOG_LEVEL (default silent) */
    dcpattn_log_fn log;    /* 0: stderr */
    void *log_user;
} dcpattn_context_desc;

/* Binds the calling thread's current CUDA context (make one current first, e.g. with
   cudaSetDevice + cudaFree(0)). The library never creates or destroys CUDA contexts. */
DCPATTN_API dcpattn_status dcpattn_context_create(const dcpattn_context_desc *desc,
                                                  dcpattn_context **out);
DCPATTN_API void dcpattn_context_destroy(dcpattn_context *ctx);

/* ---- kernel variants (canonical names such as "merge_bf16_bf16") ---- */
typedef struct dcpattn_compile_info {
    const char *name;   /* canonical variant name */
    double seconds;     /* time spent: Lua render + NVRTC, or cache load */
    int registers;      /* per thread, from ptxas */
    int shared_bytes;   /* static shared memory, from ptxas */
    int spill_bytes;    /* spill stores + loads, from ptxas */
    const char *source; /* "nvrtc", "cache", "aot" or "memory" */
} dcpattn_compile_info;
typedef void (*dcpattn_progress_fn)(void *user, const dcpattn_compile_info *info);

/* The default variant set of this build, as canonical names (owned by the context). */
DCPATTN_API dcpattn_status dcpattn_default_variants(dcpattn_context *ctx, const char *const **names,
                                                    int *count);
/* Compile (or find in a cache) and, unless compile_only, load each named variant. */
DCPATTN_API dcpattn_status dcpattn_precompile(dcpattn_context *ctx, const char *const *names, int n,
                                              dcpattn_progress_fn progress, void *user);
/* 1 if the variant is loaded in this context, 0 if not; never compiles. */
DCPATTN_API int dcpattn_variant_loaded(dcpattn_context *ctx, const char *name);

/* ---- merge of N partial attention states (DESIGN.md 3.5) ----
   For each row t < rows and head h < heads, with lse_n = lse[n][t*lse_stride_t +
   h*lse_stride_h] (non-finite = empty) and o_n the head_dim values at o[n] + t*o_stride_t
   + h*o_stride_h:
       M = max_n lse_n,  w_n = exp(lse_n - M) / sum_m exp(lse_m - M),
       out = sum_n w_n * o_n (fp32 accumulation),  lse_out = M + log(sum_n exp(lse_n - M)).
   All empty: out = 0, lse_out = -inf. out may alias o[0] (same strides).
   Pointers must be 16-byte aligned and head_dim a multiple of 16 bytes / element size. */
#define DCPATTN_MAX_MERGE_STATES 64
typedef struct dcpattn_merge_args {
    int num_states;             /* 1 .. DCPATTN_MAX_MERGE_STATES */
    int rows, heads, head_dim;  /* T, H, Dv */
    dcpattn_dtype in_dtype;     /* o[] element type: bf16, fp16 or fp32 */
    dcpattn_dtype out_dtype;    /* out element type: bf16, fp16 or fp32; 0 = in_dtype */
    const void *const *o;       /* host array of num_states device pointers */
    const float *const *lse;    /* host array of num_states device pointers */
    int64_t o_stride_t, o_stride_h;     /* 0: heads*head_dim, head_dim */
    int64_t lse_stride_t, lse_stride_h; /* 0: heads, 1 */
    void *out;
    float *lse_out;                     /* optional */
    int64_t out_stride_t, out_stride_h; /* 0: contiguous */
    int64_t lse_out_stride_t, lse_out_stride_h;
    int lse_base2_in;  /* input LSE are log2 */
    int lse_base2_out; /* write log2 */
} dcpattn_merge_args;

DCPATTN_API dcpattn_status dcpattn_merge_validate(const dcpattn_merge_args *args);
DCPATTN_API dcpattn_status dcpattn_merge(dcpattn_context *ctx, const dcpattn_merge_args *args,
                                         dcpattn_stream stream);

/* ---- paged attention over this rank's DCP shard (DESIGN.md 3.1-3.4) ----
   Family by shape: GQA/MQA when head_dim_qk == head_dim_v (64, 96, 128, 192, 256, any
   num_q_heads % num_kv_heads == 0); MLA when head_dim_qk = 576, head_dim_v = 512 and
   num_kv_heads = 1 (V = the first 512 channels of each K row; v_cache may alias k_cache). */
typedef struct dcpattn_attn_desc {
    dcpattn_dtype dtype;         /* q, k, v and out: bf16 (default) or fp16 */
    int num_q_heads, num_kv_heads;
    int head_dim;                /* Dqk = Dv (GQA) */
    int head_dim_v;              /* 0: head_dim */
    int page_size;               /* 1 .. 256 tokens */
    int non_causal;              /* 0: causal, bottom-right on the global sequence */
    float softmax_scale;         /* 0: 1/sqrt(head_dim) */
    int dcp_world, dcp_rank;     /* W >= 1 (0 = 1), 0 <= r < W */
    int dcp_interleave;          /* I >= 1 (0 = 1) */
    int lse_base2;               /* write log2-based LSE */
    /* upper bounds, for grid sizing and workspace; the real lengths are read on the device */
    int max_batch;               /* >= the batch of every run */
    int max_q_len;               /* >= every sequence's query length */
    int max_total_q;             /* >= cu_seqlens_q[batch]; 0: max_batch * max_q_len */
    int max_seqlen_k;            /* >= every seqused_k (local tokens) */
    int num_splits;              /* split-KV count; 0: heuristic, 1: no split */
    int num_sms;                 /* 0: the device's */
} dcpattn_attn_desc;

typedef struct dcpattn_attn_args {
    int batch;                       /* B <= max_batch; 0 is a valid empty batch */
    const void *q;                   /* [total_q, Hq, Dqk] */
    int64_t q_stride_t, q_stride_h;  /* 0: contiguous */
    const void *k_cache;             /* [num_pages, page_size, Hkv, Dqk] */
    int64_t k_stride_page, k_stride_t, k_stride_h;
    const void *v_cache;             /* [num_pages, page_size, Hkv, Dv]; may alias k (MLA) */
    int64_t v_stride_page, v_stride_t, v_stride_h;
    int64_t num_pages;               /* pages in the cache tensors (for the bounds check) */
    const int32_t *block_table;      /* [B, max_pages] */
    int64_t block_table_stride;      /* 0: ceil(max_seqlen_k / page_size) */
    const int32_t *cu_seqlens_q;     /* [B+1] */
    const int32_t *seqused_k;        /* [B], this rank's tokens = local_len_r(global) */
    const int32_t *seqused_k_global; /* [B]; may be 0 when W = 1 (then = seqused_k) */
    void *out;                       /* [total_q, Hq, Dv] */
    int64_t out_stride_t, out_stride_h;
    float *lse;                      /* [total_q, Hq], optional */
    int64_t lse_stride_t, lse_stride_h;
} dcpattn_attn_args;

typedef struct dcpattn_attn_plan dcpattn_attn_plan;

/* Checks a descriptor (and fills nothing); needs no GPU and no context. */
DCPATTN_API dcpattn_status dcpattn_attn_desc_validate(const dcpattn_attn_desc *desc);
/* Checks run arguments against a descriptor; needs no GPU and no context. */
DCPATTN_API dcpattn_status dcpattn_attn_args_validate(const dcpattn_attn_desc *desc,
                                                      const dcpattn_attn_args *args);
DCPATTN_API dcpattn_status dcpattn_attn_plan_create(dcpattn_context *ctx, const dcpattn_attn_desc *desc,
                                                    dcpattn_attn_plan **out);
DCPATTN_API void dcpattn_attn_plan_destroy(dcpattn_attn_plan *plan);
DCPATTN_API size_t dcpattn_attn_workspace_size(const dcpattn_attn_plan *plan);
DCPATTN_API int dcpattn_attn_num_splits(const dcpattn_attn_plan *plan);
DCPATTN_API const char *dcpattn_attn_variant(const dcpattn_attn_plan *plan);
/* Stream-ordered: no host sync, no allocation, no compile; safe in CUDA graph capture. */
DCPATTN_API dcpattn_status dcpattn_attn_run(const dcpattn_attn_plan *plan, const dcpattn_attn_args *args,
                                            void *workspace, size_t workspace_bytes,
                                            dcpattn_stream stream);

/* ---- kernel launch ABI ----
   The parameter blocks the kernels receive (one __grid_constant__ struct each). The same
   text is handed to NVRTC, so host and device layouts cannot drift apart. Strides are in
   elements. Not needed by callers. */
#define DCPATTN_KERNEL_ABI                                                            \
    typedef struct dcpattn_merge_kparams {                                            \
        const void *o[64];                                                            \
        const float *lse[64];                                                         \
        void *out;                                                                    \
        float *lse_out;                                                               \
        long long o_st, o_sh, lse_st, lse_sh;                                         \
        long long out_st, out_sh, lse_out_st, lse_out_sh;                             \
        const int *rows_limit;                                                        \
        int n, rows, heads, head_dim;                                                 \
        int lse_base2_in, lse_base2_out;                                              \
    } dcpattn_merge_kparams;                                                          \
    typedef struct dcpattn_attn_kparams {                                             \
        const void *q;                                                                \
        const void *k;                                                                \
        const void *v;                                                                \
        void *out;                                                                    \
        float *lse;                                                                   \
        const int *block_table;                                                       \
        const int *cu_seqlens_q;                                                      \
        const int *seqused_k;                                                         \
        const int *seqused_k_global;                                                  \
        float *o_part;                                                                \
        float *lse_part;                                                              \
        int *counters;                                                                \
        long long q_st, q_sh;                                                         \
        long long k_sp, k_st, k_sh;                                                   \
        long long v_sp, v_st, v_sh;                                                   \
        long long out_st, out_sh;                                                     \
        long long lse_st, lse_sh;                                                     \
        long long bt_stride;                                                          \
        long long part_split_stride;                                                  \
        int batch, max_q_len, hq, hkv;                                                \
        int page_size, num_splits, causal, lse_base2;                                 \
        int world, rank, interleave, pad0;                                            \
        float scale_log2;                                                             \
        float pad1;                                                                   \
    } dcpattn_attn_kparams;
DCPATTN_KERNEL_ABI

#ifdef __cplusplus
}
#endif
#endif /* DCPATTN_H */

/* ======================= stop here if you only want the API ======================= */
