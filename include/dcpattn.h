/* dcpattn.h — attention kernels and exact merges for decode context parallelism (DCP).

   Header-only C library. In exactly one C or C++ file of your program:

       #define DCPATTN_IMPLEMENTATION
       #include "dcpattn.h"

   Everywhere else include it plainly. Link with Lua 5.4, libdl and pthreads, and say where
   the source tree's gen/ and templates/ are (DCPATTN_DATA_DIR, or DCPATTN_HOME at run time):
       cc app.c -I/usr/include/lua5.4 -DDCPATTN_DATA_DIR='"path/to/dcpattn"' -llua5.4 -ldl -lm -lpthread
   or, after `make install`, with nothing but what pkg-config says:
       cc app.c $(pkg-config --cflags --libs dcpattn)
   Nothing from CUDA is linked: the CUDA driver (libcuda.so.1), NVRTC and NCCL are opened
   with dlopen when first needed, so a program built with dcpattn starts on a machine with
   no GPU driver and gets DCPATTN_STATUS_NO_DRIVER from the calls that need one. Without
   NVRTC the library runs AOT-only: kernels in the AOT or disk cache load, a miss is
   DCPATTN_STATUS_NO_NVRTC.

   WHAT IT DOES
   - Attention of q_len >= 1 query tokens per sequence over this rank's shard of a paged KV
     cache that is interleaved over W ranks in chunks of I tokens, with the causal mask that
     such a shard really has (see CONVENTIONS), returning the output and its log-sum-exp.
     Families: GQA/MQA (head dims 64, 96, 128, 192, 256, group sizes 1..64, mma.sync tensor
     cores, sm_80 and newer; on sm_90a the 64-row tiles of head dim 128 run on wgmma; the KV
     cache bf16/fp16 or FP8 e4m3 with per-tensor or per-KV-head scales, see kv_dtype) and
     DeepSeek MLA (576/512, V read from the K rows, the cache bf16/fp16 or FP8 e4m3, wgmma
     and TMA: Hopper sm_90a only, elsewhere its compile fails with DCPATTN_STATUS_COMPILE;
     page sizes 16, 32, 64, 128, 192 and 256). Split-KV partials are merged by a second
     kernel through the workspace, or, on sm_90+ for GQA grids of at most one CTA per SM and
     at most 8 splits, inside thread-block clusters in the same launch. By default a plan
     takes the balanced schedule: the work of the whole batch, read from the real lengths on
     the device, cut into equal ranges over one wave of CTAs, and the sequences cut between
     CTAs merged inside the launch, so a batch of uneven lengths runs at the pace of an even one
     (see DCPATTN_SPLITS_BALANCED).
   - Sparse MLA (DeepSeek V3.2 / GLM-5 top-k attention) over this rank's shard: each query
     token names the global positions it attends to, the kernel keeps those this rank owns,
     any W and I, with optional attention sinks applied once per DCP group (see SPARSE MLA).
   - Exact merges of partial attention states (split-KV inside one GPU, ranks of a group),
     and the DCP combine across the ranks of a group over the caller's NCCL communicator
     (one all-to-all and a merge, or all-gather + reduce-scatter).
   - Kernels are CUDA templates specialized by Lua scripts (gen/), compiled ahead of time
     into a read-only cache or at run time through NVRTC, and cached on disk.

   WHAT IT DOES NOT DO
   - It creates no CUDA context, stream, allocation of yours or NCCL communicator: you pass
     them in. It never synchronizes a stream, never calls exit() or abort() and never
     prints unless you ask (log level or callback).
   - It does not allocate device memory on the run path: plan tells you the workspace size.

   STEP BY STEP
       dcpattn_context *ctx;                        // per device, after cudaSetDevice()
       dcpattn_context_desc cd;
       memset(&cd, 0, sizeof cd);                   // zero means default everywhere
       if (dcpattn_context_create(&cd, &ctx)) puts(dcpattn_last_error());

       dcpattn_merge_args m;                        // merge N partial states
       memset(&m, 0, sizeof m);
       m.num_states = 2; m.rows = T; m.heads = H; m.head_dim = D;
       m.o = o_ptrs; m.lse = lse_ptrs; m.out = out; m.lse_out = lse_out;
       dcpattn_merge(ctx, &m, stream);

       dcpattn_attn_desc ad = {0};                  // host-side description, upper bounds
       ... ad.num_q_heads = 64; ad.num_kv_heads = 8; ad.head_dim = 128; ...
       dcpattn_attn_plan *plan;
       dcpattn_attn_plan_create(ctx, &ad, &plan);   // picks, compiles or loads the kernel
       size_t ws = dcpattn_attn_workspace_size(plan);
       dcpattn_attn_run(plan, &args, workspace, ws, stream);   // capturable, no host sync

       dcpattn_dcp_combine_args c = {0};            // merge the W ranks' partials over NCCL
       ... c.world = W; c.rank = r; c.rows = T; c.heads = H; c.head_dim = Dv; ...
       dcpattn_dcp_combine(ctx, comm, &c, stream);  // comm: your ncclComm_t, borrowed

   ERRORS
   Every call returns a dcpattn_status (0 = success). dcpattn_status_string() names the
   code; dcpattn_last_error() gives this thread's detail message for the last failure
   (which argument and its value, the NVRTC log, the Lua traceback); every call that
   returns a status and succeeds empties it, so a message never outlives the call it
   belongs to. Bad input is rejected before any GPU work: nothing is launched and no output
   byte changes. The validation functions need no GPU and no context. Empty work (merge or
   combine rows = 0, attention batch = 0) is valid and does nothing.

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
   - FP8 KV cache (GQA, MLA, sparse MLA): kv_dtype = DCPATTN_FP8_E4M3 makes k_cache and
     v_cache e4m3fn bytes (K/V strides then multiples of 16 elements); key = e4m3 value *
     k_scale[h], value = e4m3 value * v_scale[h] (h = 0, or the KV head with
     kv_scale_per_head). MLA: rows of 576 e4m3 bytes, V = the first 512 of the same bytes
     times v_scale. The scales are device
     float32 (> 0), read by the kernel at run time, so they may change between replays of a
     captured graph. q, out and lse keep their types. Unused cache slots may hold e4m3 NaN:
     they are never read.

   CONFIGURATION MACROS (define before including the implementation)
     DCPATTN_NO_JIT     never compile at run time: only cached or AOT kernels are used.
     DCPATTN_NO_NCCL    nothing of NCCL is opened: the combine calls that need a
                        communicator return DCPATTN_STATUS_NO_NCCL.
     DCPATTN_DATA_DIR   string: where gen/ and templates/ live (else $DCPATTN_HOME).
     DCPATTN_AOT_DIR    string: the read-only precompiled cache consulted first.
     DCPATTN_INSTALLED  take DCPATTN_DATA_DIR and DCPATTN_AOT_DIR from dcpattn_config.h, the
                        file `make install` writes next to this header. The installed
                        dcpattn.pc passes -DDCPATTN_INSTALLED rather than the two strings:
                        a quoted path in pkg-config's output survives only when a shell
                        parses it again (eval), not `cc $(pkg-config ...)`.
     DCPATTN_API        declaration specifier of the public functions (default: extern).
     DCPATTN_TIMELINE   for whoever tunes the kernels: JIT-compiles them with DCPATTN_TIMELINE
                        defined (templates/timeline.cuh), so that the attention kernels add up,
                        per CTA and warpgroup, the SM cycles of each of their stages, and declares
                        dcpattn_attn_timeline, which finds those records. Its kernels are
                        cached under keys of their own (never the AOT ones) and differ from
                        the product's in registers and speed. build/bench_timeline is the
                        benchmark built so (docs/performance.md, "Timeline").
     DCPATTN_TESTING    compiles in the test suite's fault injection
                        (DCPATTN_TEST_FAIL_WRITE=1 fails every cache write); without it that
                        variable does nothing.

   ENVIRONMENT
     DCPATTN_HOME       overrides DCPATTN_DATA_DIR (gen/ and templates/).
     DCPATTN_CACHE_DIR  ':'-separated cache directories: first hit wins, writes go to the
                        first writable one. Unset: $XDG_CACHE_HOME/dcpattn, else
                        ~/.cache/dcpattn. Set but empty: memory only. The context
                        descriptor's cache_dir, when not NULL, takes its place.
     DCPATTN_LOCK_TIMEOUT_MS  how long a compile waits for another process (or context)
                        compiling the same kernel into the same cache directory, in ms
                        (default 10000; negative: no limit). Past it, the kernel is compiled
                        into memory with one warning naming the key and the pid of the
                        lock's holder, e.g. a process stopped in a debugger. The context
                        descriptor's lock_timeout_ms, when not 0, takes its place.
     DCPATTN_NO_JIT=1   a cache miss becomes DCPATTN_STATUS_NOT_COMPILED.
     DCPATTN_NO_CLUSTER_MERGE=1  split-KV partials always go through the workspace and a
                        merge kernel (by default, on sm_90 and newer, GQA plans of up to 8
                        splits whose grid has at most one CTA per SM merge them inside a
                        thread-block cluster: one launch, no workspace). Read when a plan
                        is created.
     DCPATTN_CUDA_LIBRARY, DCPATTN_NVRTC_LIBRARY, DCPATTN_NCCL_LIBRARY
                        explicit paths of the libraries opened with dlopen.
     DCPATTN_LOG_LEVEL  0 silent (default), 1 warnings, 2 info (each compile), 3 debug;
                        messages go to stderr unless a log callback is set.
*/
#if defined(DCPATTN_IMPLEMENTATION) && !defined(_GNU_SOURCE) && !defined(DCPATTN_H)
#define _GNU_SOURCE /* POSIX and GNU declarations for the implementation (dlopen, flock) */
#endif
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
/* One integer that orders versions, as NCCL_VERSION_CODE: 0.1.0 is 100, 1.2.3 is 10203. */
#define DCPATTN_VERSION_CODE (DCPATTN_VERSION_MAJOR * 10000 + DCPATTN_VERSION_MINOR * 100 + DCPATTN_VERSION_PATCH)

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
/* The version the implementation was compiled with (a program whose files include
   different copies of the header, or a binding, can compare it with DCPATTN_VERSION_*). */
DCPATTN_API const char *dcpattn_version(void);
DCPATTN_API int dcpattn_version_code(void); /* DCPATTN_VERSION_CODE */

/* ---- types shared with the caller's CUDA and NCCL code, without their headers ---- */
typedef struct CUstream_st *dcpattn_stream; /* == cudaStream_t == CUstream; 0 = legacy */

typedef enum dcpattn_dtype {
    DCPATTN_DTYPE_DEFAULT = 0, /* bf16 */
    DCPATTN_BF16 = 1,
    DCPATTN_FP16 = 2,
    DCPATTN_FP32 = 3,
    DCPATTN_FP8_E4M3 = 4, /* KV cache only (dcpattn_attn_desc.kv_dtype): OCP e4m3fn, with scales */
    /* sparse MLA KV cache only: DeepSeek's 656-byte token rows (see SPARSE MLA below) */
    DCPATTN_FP8_DS_MLA = 5
} dcpattn_dtype;

/* ---- context: one per CUDA context (device) ---- */
typedef struct dcpattn_context dcpattn_context;

enum { DCPATTN_LOG_SILENT = 0, DCPATTN_LOG_WARN = 1, DCPATTN_LOG_INFO = 2, DCPATTN_LOG_DEBUG = 3 };
typedef void (*dcpattn_log_fn)(void *user, int level, const char *message);

typedef struct dcpattn_context_desc {
    const char *data_dir;  /* gen/ and templates/; 0: $DCPATTN_HOME, else DCPATTN_DATA_DIR */
    const char *aot_dir;   /* read-only precompiled cache; 0: DCPATTN_AOT_DIR if defined */
    const char *arch;      /* "sm_90a"...; 0: the current device's own arch (compile-only:
                              sm_90a, and attention plans are refused; see num_sms).
                              "compute_XY": PTX for that arch, which the driver compiles for
                              the device at load (compute_80 runs the sm_80 code on a newer
                              GPU; the driver's compile errors are DCPATTN_STATUS_CUDA).
                              Plans are sized for the device's SMs, or, compile-only, for the
                              arch's (the CUDA C++ Programming Guide's per-arch limits) */
    int compile_only;      /* 1: no GPU needed; kernels are compiled and cached, not loaded */
    int log_level;         /* -1 or 0: from $DCPATTN_LOG_LEVEL (default silent) */
    dcpattn_log_fn log;    /* 0: stderr */
    void *log_user;
    /* fields added later stay at the end, so code built against the layout above keeps it */
    const char *cache_dir; /* ':'-separated cache directories as $DCPATTN_CACHE_DIR ("" =
                              memory only); 0: $DCPATTN_CACHE_DIR, else the default */
    int num_sms;           /* SMs attention plans are sized for (grids, split counts) when
                              their descriptor gives none; 0: the device's. A compile-only
                              context has no device: its plans need arch and num_sms set
                              here (or num_sms in the attention descriptor), never a guess */
    int lock_timeout_ms;   /* longest wait for another compile of the same kernel into the
                              same cache; 0: $DCPATTN_LOCK_TIMEOUT_MS, else 10000; < 0: none */
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
    int dynamic_shared_bytes; /* dynamic shared memory the launch asks for */
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
/* The rendered CUDA source of a variant, as NVRTC sees it; release it with free(). */
DCPATTN_API dcpattn_status dcpattn_variant_source(dcpattn_context *ctx, const char *name, char **source);
/* 1 if the variant is loaded in this context, 0 if not; never compiles. */
DCPATTN_API int dcpattn_variant_loaded(dcpattn_context *ctx, const char *name);

/* ---- merge of N partial attention states (docs/contract.md 5) ----
   For each row t < rows and head h < heads, with lse_n = lse[n][t*lse_stride_t +
   h*lse_stride_h] (non-finite = empty) and o_n the head_dim values at o[n] + t*o_stride_t
   + h*o_stride_h:
       M = max_n lse_n,  w_n = exp(lse_n - M) / sum_m exp(lse_m - M),
       out = sum_n w_n * o_n (fp32 accumulation),  lse_out = M + log(sum_n exp(lse_n - M)).
   All empty: out = 0, lse_out = -inf. out may alias o[0] (same strides); otherwise out and
   lse_out overlap no input and not each other, and no two of their rows or heads overlap
   (each element is written by one thread; an overlap would be a race).
   Pointers must be 16-byte aligned and head_dim a multiple of 16 bytes / element size. */
#define DCPATTN_MAX_MERGE_STATES 64
typedef struct dcpattn_merge_args {
    int num_states;             /* 1 .. DCPATTN_MAX_MERGE_STATES */
    int rows, heads, head_dim;  /* T >= 0 (0: nothing to do, pointers unread), H, Dv */
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
    int lse_base2_in;  /* 1: input LSE are log2 (0 or 1) */
    int lse_base2_out; /* 1: write log2 (0 or 1) */
} dcpattn_merge_args;

DCPATTN_API dcpattn_status dcpattn_merge_validate(const dcpattn_merge_args *args);
DCPATTN_API dcpattn_status dcpattn_merge(dcpattn_context *ctx, const dcpattn_merge_args *args,
                                         dcpattn_stream stream);

/* ---- paged attention over this rank's DCP shard (docs/contract.md 1-4) ----
   Family by shape: GQA/MQA when head_dim_qk == head_dim_v (64, 96, 128, 192, 256, any
   num_q_heads % num_kv_heads == 0); MLA when head_dim_qk = 576, head_dim_v = 512 and
   num_kv_heads = 1 (V = the first 512 channels of each K row; v_cache may alias k_cache). */
/* num_splits, the split-KV policy of a plan:
   0 (default)                  the balanced schedule, except for MLA plans of max_batch > 256,
                                which take DCPATTN_SPLITS_PER_SEQUENCE;
   DCPATTN_SPLITS_BALANCED      the balanced schedule: the work of the whole batch (its keys x
                                query-row tiles, read on the device from seqused_k and
                                cu_seqlens_q) cut into equal ranges over one wave of CTAs,
                                whatever the lengths; a sequence cut between CTAs is merged
                                exactly inside the launch (see dcpattn_attn_workers). MLA: at
                                most 256 sequences (max_batch);
   DCPATTN_SPLITS_PER_SEQUENCE  every sequence split into the same count, chosen from the
                                descriptor's bounds (the smallest count within 85 % of the best
                                wave efficiency): a skewed batch runs at the pace of its longest
                                sequence, an even one a little faster than under the balanced
                                schedule (H200, make bench: the balanced schedule at 98-101 % of
                                it on G1/G2, 98-100 % on M1/M2; docs/performance.md), so it is
                                the choice for batches known to be even;
   1                            no split: one CTA per (sequence, KV head, row tile);
   2 .. DCPATTN_MAX_MERGE_STATES   that many splits per sequence. */
#define DCPATTN_SPLITS_BALANCED (-1)
#define DCPATTN_SPLITS_PER_SEQUENCE (-2)

typedef struct dcpattn_attn_desc {
    dcpattn_dtype dtype;         /* q, k, v and out: bf16 (default) or fp16 */
    int num_q_heads, num_kv_heads;
    int head_dim;                /* Dqk = Dv (GQA) */
    int head_dim_v;              /* 0: head_dim */
    int page_size;               /* 1 .. 256 tokens (MLA: 16, 32, 64, 128, 192, 256) */
    int non_causal;              /* 0: causal, bottom-right on the global sequence; 1: none */
    float softmax_scale;         /* 0: 1/sqrt(head_dim) */
    int dcp_world, dcp_rank;     /* W >= 1 (0 = 1), 0 <= r < W */
    int dcp_interleave;          /* I >= 1 (0 = 1) */
    int lse_base2;               /* 1: write log2-based LSE (0 or 1) */
    /* upper bounds, for grid sizing and workspace; the real lengths are read on the device */
    int max_batch;               /* >= the batch of every run */
    int max_q_len;               /* >= every sequence's query length */
    int max_total_q;             /* >= cu_seqlens_q[batch] and >= max_q_len; 0: max_batch * max_q_len */
    int max_seqlen_k;            /* >= every seqused_k (local tokens) */
    int num_splits;              /* split-KV policy (see DCPATTN_SPLITS_BALANCED); 0: the
                                    balanced schedule, 1: no split */
    int num_sms;                 /* 0: the context's (dcpattn_context_desc.num_sms, else the device's) */
    /* The KV cache's element type: 0 = dtype; DCPATTN_FP8_E4M3 for an e4m3 cache
       read with the args' k_scale and v_scale (key = e4m3 value * k_scale, likewise V);
       sparse MLA also DCPATTN_FP8_DS_MLA (see SPARSE MLA). */
    dcpattn_dtype kv_dtype;
    int kv_scale_per_head;       /* FP8: 0 one k_scale and one v_scale; 1 one per KV head */
    /* ---- sparse MLA (see SPARSE MLA below) ---- */
    int sparse_topk;             /* 0: dense; > 0: MLA attends per query token to the ids of
                                    args.topk_ids, this many per token (1..DCPATTN_SPARSE_MAX_TOPK) */
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
    /* FP8 cache (kv_dtype): device float32 dequantization scales, [1] or [Hkv] with
       kv_scale_per_head, finite and > 0; read by the kernel at run time, so a captured graph
       replays with the values they hold then. Ignored for a 16-bit cache. */
    const float *k_scale, *v_scale;
    /* ---- sparse MLA (desc.sparse_topk > 0; see SPARSE MLA below) ---- */
    const int32_t *topk_ids;         /* [total_q, sparse_topk] global token positions, -1 = none */
    int64_t topk_ids_stride;         /* elements between two tokens' lists; 0: sparse_topk */
    const int32_t *topk_count;       /* optional [total_q]: only the first count ids of a list */
    const float *sinks;              /* optional [Hq] fp32 attention sinks (applied on rank 0) */
} dcpattn_attn_args;

/* ---- SPARSE MLA (DeepSeek V3.2 / GLM-5 top-k attention; docs/contract.md, "Sparse MLA") ----
   desc.sparse_topk = K > 0 on an MLA descriptor (576/512, one KV head, Hq <= 128) makes
   every query token t attend to the keys its list names instead of to a causal prefix:
   args.topk_ids[t * topk_ids_stride + j], j < K (or j < topk_count[t] when given, clamped
   to 0..K), are GLOBAL token positions of t's sequence. The kernel keeps an id g iff
   0 <= g < L (the sequence's global length, seqused_k_global, or seqused_k when W = 1) and
   this rank owns it, (g / I) % W == r; it reads that key at local index
   (g / (W*I))*I + g % I through the block table. Ids < 0 (-1 = none), ids >= L and ids of
   other ranks are skipped anywhere in the list and never read. Each kept entry is one key:
   an id listed twice counts twice (its weight doubles). No causal mask is applied
   (desc.non_causal has no effect): causality is the indexer's. A token keeping no id
   gets out = 0 and lse = -inf, as a dense row that sees nothing.
   Caches: kv_dtype 0 (= dtype, bf16 or fp16: 576-element rows as dense MLA),
   DCPATTN_FP8_E4M3 (576 e4m3 bytes a row with the args' per-tensor k_scale and v_scale, as
   dense MLA's FP8 cache: key = e4m3 * k_scale, value = the first 512 bytes * v_scale), or
   DCPATTN_FP8_DS_MLA (dtype bf16): 656-byte rows of 512 e4m3 values, 4 fp32 scales (one per
   128 values: value = e4m3 * scale) and 64 bf16 RoPE values; with an FP8 cache the k strides
   are in bytes (multiples of 16; FP8_DS_MLA: row stride >= 656); v_cache = k_cache. Sinks (optional, [Hq] fp32,
   finite; a non-finite sink is no sink): the sink of head h joins the softmax as one more
   logit with no value, once per DCP group: on rank 0 only (lse = log(exp(lse) + exp(sink)),
   out scaled to match), so the merge or combine of the W ranks' partials gives unsharded
   attention with the sink; a rank-0 row keeping no id gives out = 0, lse = sink. Sparse
   plans take num_splits 0 or 1 (one CTA per query token and 64 heads). An FP8 cache (FP8_DS_MLA,
   FP8_E4M3) on sm_90a runs on the MLA kernel's wgmma pipeline (variant ..._sm90), whose plans need
   a workspace of max_batch * max_q_len * ceil(Hq / 64) * sparse_topk * 8 bytes, rounded up to a
   multiple of 256 (each CTA's kept rows); elsewhere mma.sync, on sm_80 and newer,
   with no workspace. */
#define DCPATTN_SPARSE_MAX_TOPK 2048

typedef struct dcpattn_attn_plan dcpattn_attn_plan;

/* Checks a descriptor (and fills nothing); needs no GPU and no context. */
DCPATTN_API dcpattn_status dcpattn_attn_desc_validate(const dcpattn_attn_desc *desc);
/* Checks run arguments against a descriptor; needs no GPU and no context. */
DCPATTN_API dcpattn_status dcpattn_attn_args_validate(const dcpattn_attn_desc *desc,
                                                      const dcpattn_attn_args *args);
/* Picks the variant for the context's arch and sizes the grid and splits for its SM count:
   in a compile-only context both must be given (dcpattn_context_desc.arch and num_sms, or
   dcpattn_attn_desc.num_sms), else DCPATTN_STATUS_INVALID_ARGUMENT naming them. */
DCPATTN_API dcpattn_status dcpattn_attn_plan_create(dcpattn_context *ctx, const dcpattn_attn_desc *desc,
                                                    dcpattn_attn_plan **out);
DCPATTN_API void dcpattn_attn_plan_destroy(dcpattn_attn_plan *plan);
/* Device workspace a run needs (256-byte aligned); 0 without splits, and 0 where the split-KV
   partials are merged inside thread-block clusters (sm_90+, GQA, at most 8 splits and at
   most one CTA per SM); sparse MLA: see SPARSE MLA. Its contents need no initialization. */
DCPATTN_API size_t dcpattn_attn_workspace_size(const dcpattn_attn_plan *plan);
DCPATTN_API int dcpattn_attn_num_splits(const dcpattn_attn_plan *plan);
/* The balanced schedule's workers: the CTAs over which the work of the whole batch is cut in
   equal ranges, per KV head (GQA: one wave of the kernel's CTAs divided by the KV heads) or per
   row tile (MLA: the SMs divided by the row tiles); 0 for plans without it. A GQA run may take
   fewer, down to 95 % of them, so that each worker's share is a whole number of jobs (sequences
   x row tiles) when the batch is even. */
DCPATTN_API int dcpattn_attn_workers(const dcpattn_attn_plan *plan);
DCPATTN_API const char *dcpattn_attn_variant(const dcpattn_attn_plan *plan);
#ifdef DCPATTN_TIMELINE
/* Timeline builds only (see CONFIGURATION MACROS): the device address and size of the records
   that the plan's kernel module keeps (templates/timeline.cuh): for each CTA (x fastest, then y,
   z; the first DCPATTN_TIMELINE_CTAS) DCPATTN_TIMELINE_ROLES records, one per warpgroup, of
   DCPATTN_TIMELINE_WORDS uint64 counters summed over the launches since they were last
   cleared: SM cycles in all, KV tiles, segments, the cycles of each stage named in
   DCPATTN_TIMELINE_STAGES, in that order, and the launches in the last word. The caller reads and clears them (cudaMemcpy, cudaMemset) between launches.
   DCPATTN_STATUS_UNSUPPORTED for a variant whose kernel keeps none (the attention kernels of
   templates/mla.cuh and templates/gqa.cuh do; the mma.sync sparse kernel does not). */
#define DCPATTN_TIMELINE_CTAS 4096
#define DCPATTN_TIMELINE_ROLES 3
#define DCPATTN_TIMELINE_WORDS 16
#define DCPATTN_TIMELINE_STAGES \
    "start", "wait_load", "convert", "scores", "softmax", "publish", "wait_peer", "pv", "merge", "epilogue", "gather"
DCPATTN_API dcpattn_status dcpattn_attn_timeline(const dcpattn_attn_plan *plan, void **records, size_t *bytes);
#endif
/* Stream-ordered: no host sync, no allocation, no compile; safe in CUDA graph capture. */
DCPATTN_API dcpattn_status dcpattn_attn_run(const dcpattn_attn_plan *plan, const dcpattn_attn_args *args,
                                            void *workspace, size_t workspace_bytes,
                                            dcpattn_stream stream);

/* ---- DCP combine across ranks over NCCL (docs/contract.md 6) ----
   Each of the W ranks of a DCP group holds a partial state (o_r [T, H, Dv], lse_r [T, H])
   for the same T rows and H heads, e.g. the output of dcpattn_attn_run over its KV shard
   with all H query heads. The combine gives the exact merge of the W states (the math of
   dcpattn_merge, docs/contract.md 5):
     DCPATTN_DCP_SCATTER    rank r receives heads [r*H/W, (r+1)*H/W): out [T, H/W, Dv]
                            (what a tensor-parallel output projection wants);
     DCPATTN_DCP_REPLICATE  every rank receives all heads: out [T, H, Dv]; every rank's
                            result is bitwise the same.
   Transports:
     DCPATTN_DCP_A2A    one all-to-all of packed (o, lse) over ncclSend/ncclRecv in one NCCL
                        group, then the merge kernel over the W received slices (replicated:
                        one grouped all-gather of (o, lse) instead). Bytes per rank do not grow
                        with context. The default.
     DCPATTN_DCP_AG_RS  vLLM's way: all-gather of the LSE, a local rescale
                        o_r * exp(lse_r - LSE) (the combine_<in>_<comm> kernel), then a
                        reduce-scatter (replicated: all-reduce) of the rescaled outputs in
                        comm_dtype, and a copy into out.
   Zero-copy: when this rank's slice of what it sends is already one dense block, nothing is
   packed. For A2A + SCATTER that is "head-major" o and lse (o_stride_t = Dv,
   o_stride_h = T*Dv; lse_stride_t = 1, lse_stride_h = T; dcpattn_attn_run writes that
   layout when given those strides) or T = 1; for the replicated all-gather and for AG_RS's
   LSE all-gather, any dense [T, H] layout (the default strides). Otherwise one extra copy
   kernel packs the inputs into the workspace.

   The communicator is borrowed: the library never creates, destroys or aborts it, and it
   must come from the same NCCL library the process loaded (libnccl.so.2, dlopen'd; see
   $DCPATTN_NCCL_LIBRARY). Its size, rank and device must equal world, rank and the
   context's device, and every rank must pass the same shapes, dtypes, strides, transport
   and layout (NCCL cannot check that; mismatches hang or corrupt). Everything is
   stream-ordered, with no host sync and no allocation, so the combine can be captured in a
   CUDA graph and replayed with new data. Before capturing, run it once eagerly: that loads
   the kernels (a capture that would need to load one returns DCPATTN_STATUS_CAPTURE) and lets
   NCCL connect its peers (NCCL documents that capturing point-to-point calls with no earlier
   point-to-point call on the communicator needs cudaStreamCaptureModeRelaxed).
   Bad arguments, H % W != 0 and a communicator that disagrees with world, rank or device are
   rejected before any kernel or collective is issued.

   With W = 1 and comm = NULL no NCCL is needed: the combine is the copy out = o (empty rows
   0), lse_out = lse. Built with DCPATTN_NO_NCCL, the functions exist; everything that needs
   a communicator returns DCPATTN_STATUS_NO_NCCL and nothing of NCCL is opened. */
typedef struct ncclComm *dcpattn_nccl_comm; /* == ncclComm_t */

typedef enum dcpattn_dcp_transport {
    DCPATTN_DCP_TRANSPORT_DEFAULT = 0, /* A2A */
    DCPATTN_DCP_A2A = 1,
    DCPATTN_DCP_AG_RS = 2
} dcpattn_dcp_transport;

typedef enum dcpattn_dcp_layout {
    DCPATTN_DCP_SCATTER = 0, /* default */
    DCPATTN_DCP_REPLICATE = 1
} dcpattn_dcp_layout;

typedef struct dcpattn_dcp_combine_args {
    int world, rank;               /* W 1..DCPATTN_MAX_MERGE_STATES (0 = 1) and r; must match the communicator */
    int rows, heads, head_dim;     /* T >= 0 (0: nothing to do), H (H % W == 0), Dv */
    dcpattn_dcp_transport transport;
    dcpattn_dcp_layout layout;
    dcpattn_dtype in_dtype;        /* o: bf16 (default), fp16 or fp32 */
    dcpattn_dtype out_dtype;       /* 0: in_dtype */
    dcpattn_dtype comm_dtype;      /* what travels (A2A) or is summed (AG_RS); 0: in_dtype */
    const void *o;                 /* [T, H, Dv], this rank's partial output */
    int64_t o_stride_t, o_stride_h;     /* 0: H*Dv, Dv */
    const float *lse;              /* [T, H], this rank's LSE (non-finite = empty) */
    int64_t lse_stride_t, lse_stride_h; /* 0: H, 1 */
    void *out;                     /* SCATTER: [T, H/W, Dv] of heads r*H/W..; REPLICATE: [T, H, Dv] */
    int64_t out_stride_t, out_stride_h; /* 0: contiguous */
    float *lse_out;                /* optional, [T, H/W] or [T, H] as out */
    int64_t lse_out_stride_t, lse_out_stride_h;
    const int32_t *rows_limit;     /* optional device int: rows >= *rows_limit are skipped by
                                      the kernels (NCCL still moves T rows), e.g. cu_seqlens_q + B */
    int lse_base2_in, lse_base2_out; /* 0 or 1, as in dcpattn_merge_args */
    void *workspace;               /* device, 256-byte aligned, dcpattn_dcp_combine_workspace_size */
    size_t workspace_bytes;
} dcpattn_dcp_combine_args;

/* Checks the arguments (workspace included); needs no GPU, no NCCL and no context. */
DCPATTN_API dcpattn_status dcpattn_dcp_combine_validate(const dcpattn_dcp_combine_args *args);
/* Device workspace the combine needs for these shapes, dtypes, strides, transport and
   layout (pointers and workspace fields are not read). May be 0. */
DCPATTN_API dcpattn_status dcpattn_dcp_combine_workspace_size(const dcpattn_dcp_combine_args *args,
                                                              size_t *bytes);
/* Loads (or compiles) every kernel the combine of these arguments launches, so that a later
   run can be captured; pointers are not read. */
DCPATTN_API dcpattn_status dcpattn_dcp_combine_prepare(dcpattn_context *ctx, const dcpattn_dcp_combine_args *args);
/* The combine on `stream` (stream-ordered, capturable). comm may be NULL only when W = 1. */
DCPATTN_API dcpattn_status dcpattn_dcp_combine(dcpattn_context *ctx, dcpattn_nccl_comm comm,
                                               const dcpattn_dcp_combine_args *args, dcpattn_stream stream);
/* Waits for `stream` without hanging: polls cuStreamQuery and, with a communicator,
   ncclCommGetAsyncError. Returns SUCCESS when the stream is done; DCPATTN_STATUS_NCCL with
   NCCL's message when the communicator reports an asynchronous error (a peer died);
   DCPATTN_STATUS_TIMEOUT after timeout_ms (< 0: no limit) when neither happened, e.g. a rank
   never joined the collective. The communicator is left as it is: aborting it
   (ncclCommAbort) is the caller's decision. Not allowed on a capturing stream. */
DCPATTN_API dcpattn_status dcpattn_dcp_wait(dcpattn_nccl_comm comm, dcpattn_stream stream, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* DCPATTN_H */

/* ======================= stop here if you only want the API ======================= */

#ifdef DCPATTN_IMPLEMENTATION
#ifndef DCPATTN_IMPLEMENTATION_DONE
#define DCPATTN_IMPLEMENTATION_DONE
/* The implementation needs POSIX (dlopen, flock, pthreads, clock_gettime): include
   dcpattn.h first in the file that defines DCPATTN_IMPLEMENTATION, or build with
   _GNU_SOURCE / _POSIX_C_SOURCE >= 200809L defined. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#ifdef __cplusplus
extern "C" {
#endif
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#ifdef __cplusplus
}
#endif

#if defined(__cplusplus)
#define DCPATTN__TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define DCPATTN__TLS _Thread_local
#else
#define DCPATTN__TLS __thread
#endif

#ifdef DCPATTN_INSTALLED
#include "dcpattn_config.h" /* written by make install next to this header: the two paths */
#endif
#ifndef DCPATTN_DATA_DIR
#define DCPATTN_DATA_DIR ""
#endif

#define DCPATTN__STR2(...) #__VA_ARGS__
#define DCPATTN__STR(...) DCPATTN__STR2(__VA_ARGS__)

/* ---- kernel launch ABI: internal, not part of the API ----
   The parameter blocks the kernels receive (one __grid_constant__ struct each) and the
   workspace layout constants both sides use, spelled as templates/ spell them. The same text
   is handed to NVRTC in place of the templates' #include "dcpattn_abi.h" (gen/dcpattn/abi.lua
   reads it from this file for the CLI), so host and device layouts cannot drift apart, and
   it is part of every kernel's cache key. Strides are in elements. */
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
    /* MLA balanced schedule, per CTA: the state record of its piece (O, reference max \
       and row-sum parts of each of 256 threads: 33 x 256 float4); after every        \
       CTA's record, one 8-byte word per CTA (its publication flag) */                \
    enum { DCPATTN_BAL_RECORD_F4 = 33 * 256 };                                        \
    typedef struct dcpattn_attn_kparams {                                             \
        /* MLA: TMA map of the paged K pool (CUtensorMap), encoded by attn_run */      \
        unsigned long long k_tmap[16] __attribute__((aligned(64)));                   \
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
        unsigned long long *flags; /* MLA balanced: one publication word per CTA */   \
        long long q_st, q_sh;                                                         \
        long long k_sp, k_st, k_sh;                                                   \
        long long v_sp, v_st, v_sh;                                                   \
        long long out_st, out_sh;                                                     \
        long long lse_st, lse_sh;                                                     \
        long long bt_stride;                                                          \
        long long part_split_stride;                                                  \
        int batch, max_q_len, hq, hkv;                                                \
        int page_size, num_splits, causal, lse_base2;                                 \
        int world, rank, interleave, cluster_merge;                                   \
        float scale_log2;                                                             \
        int workers; /* MLA balanced: persistent CTAs per row tile (0: off) */        \
        unsigned long long token; /* balanced: this run's publication token */       \
        const float *k_scale, *v_scale; /* FP8 KV: [1] or [hkv] scales */             \
        int kv_scale_per_head;                                                        \
        /* sparse MLA: the top-k lists (row stride topk_st), counts, sinks (rank 0) */ \
        const int *topk_ids;                                                          \
        const int *topk_count;                                                        \
        const float *sinks;                                                           \
        long long *topk_rows; /* sm_90a: per CTA, its kept rows (workspace) */        \
        long long topk_st;                                                            \
        int topk;                                                                     \
    } dcpattn_attn_kparams;
DCPATTN_KERNEL_ABI

/* The kernel ABI as NVRTC sees it: the very tokens the host structs were built from. */
static const char dcpattn__abi_text[] = DCPATTN__STR(DCPATTN_KERNEL_ABI);

/* ================================ errors ================================ */
static DCPATTN__TLS char dcpattn__detail[4096];

const char *dcpattn_status_string(dcpattn_status s) {
    switch (s) {
#define DCPATTN__X_CASE(name, text) \
    case DCPATTN_STATUS_##name:     \
        return text;
        DCPATTN_STATUS_LIST(DCPATTN__X_CASE)
#undef DCPATTN__X_CASE
    default:
        return "unknown status";
    }
}
const char *dcpattn_last_error(void) { return dcpattn__detail; }
const char *dcpattn_version(void) { return DCPATTN_VERSION_STRING; }
int dcpattn_version_code(void) { return DCPATTN_VERSION_CODE; }

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static dcpattn_status dcpattn__fail(dcpattn_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dcpattn__detail, sizeof dcpattn__detail, fmt, ap);
    va_end(ap);
    return s;
}
/* What every public call returns: a success empties the detail, so a message left by an
   earlier failure (or by a fallback inside this call) cannot be read as this call's. */
static dcpattn_status dcpattn__done(dcpattn_status s) {
    if (s == DCPATTN_STATUS_SUCCESS)
        dcpattn__detail[0] = 0;
    return s;
}
#define DCPATTN__TRY(expr)                          \
    do {                                            \
        dcpattn_status dcpattn__s_ = (expr);        \
        if (dcpattn__s_ != DCPATTN_STATUS_SUCCESS)  \
            return dcpattn__s_;                     \
    } while (0)

static double dcpattn__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 64-bit FNV-1a; two bases give the 128-bit cache key. */
static uint64_t dcpattn__fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    size_t i;
    for (i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}
#define DCPATTN__FNV_A 14695981039346656037ull
#define DCPATTN__FNV_B 0x84222325cbf29ce4ull

static char *dcpattn__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *r = (char *)malloc(n);
    if (r)
        memcpy(r, s, n);
    return r;
}

/* ============================ dynamic libraries ============================ */
typedef int dcpattn__CUresult;
typedef int dcpattn__CUdevice;
typedef struct CUctx_st *dcpattn__CUcontext;
typedef struct CUmod_st *dcpattn__CUmodule;
typedef struct CUfunc_st *dcpattn__CUfunction;
typedef struct dcpattn__nvrtc_prog *dcpattn__nvrtcProgram;

/* cuLaunchKernelEx's configuration with one attribute, laid out as cuda.h's CUlaunchConfig and
   CUlaunchAttribute (id, 4 bytes of padding, a 64-byte value union). */
typedef struct dcpattn__CUlaunchAttribute {
    int id; /* 4: CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION */
    char pad[4];
    union {
        char bytes[64];
        struct {
            unsigned x, y, z;
        } cluster;
    } value;
} dcpattn__CUlaunchAttribute;
typedef struct dcpattn__CUlaunchConfig {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    dcpattn_stream stream;
    dcpattn__CUlaunchAttribute *attrs;
    unsigned num_attrs;
} dcpattn__CUlaunchConfig;
#define DCPATTN__CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4

/* The device and function attributes the library reads and sets, by cuda.h's values. */
enum {
    DCPATTN__CU_DEV_SMEM_PER_BLOCK = 8,          /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK */
    DCPATTN__CU_DEV_SM_COUNT = 16,               /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
    DCPATTN__CU_DEV_THREADS_PER_SM = 39,         /* CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR */
    DCPATTN__CU_DEV_CC_MAJOR = 75,               /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    DCPATTN__CU_DEV_CC_MINOR = 76,               /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
    DCPATTN__CU_DEV_SMEM_PER_SM = 81,            /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    DCPATTN__CU_DEV_REGS_PER_SM = 82,            /* CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR */
    DCPATTN__CU_DEV_SMEM_PER_BLOCK_OPTIN = 97,   /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    DCPATTN__CU_DEV_SMEM_RESERVED_PER_BLOCK = 111, /* CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK */
    DCPATTN__CU_FUNC_SMEM_STATIC = 1,            /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */
    DCPATTN__CU_FUNC_NUM_REGS = 4,               /* CU_FUNC_ATTRIBUTE_NUM_REGS */
    DCPATTN__CU_FUNC_MAX_DYNAMIC_SMEM = 8        /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
};

typedef struct dcpattn__driver_api {
    int tried, ok;
    dcpattn__CUresult (*Init)(unsigned);
    dcpattn__CUresult (*CtxGetCurrent)(dcpattn__CUcontext *);
    dcpattn__CUresult (*CtxGetDevice)(dcpattn__CUdevice *);
    dcpattn__CUresult (*CtxPushCurrent)(dcpattn__CUcontext);
    dcpattn__CUresult (*CtxPopCurrent)(dcpattn__CUcontext *);
    dcpattn__CUresult (*DeviceGetAttribute)(int *, int, dcpattn__CUdevice);
    dcpattn__CUresult (*ModuleLoadData)(dcpattn__CUmodule *, const void *);
    dcpattn__CUresult (*ModuleUnload)(dcpattn__CUmodule);
    dcpattn__CUresult (*ModuleGetFunction)(dcpattn__CUfunction *, dcpattn__CUmodule, const char *);
    dcpattn__CUresult (*FuncSetAttribute)(dcpattn__CUfunction, int, int);
    dcpattn__CUresult (*FuncGetAttribute)(int *, int, dcpattn__CUfunction);
    dcpattn__CUresult (*LaunchKernel)(dcpattn__CUfunction, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, dcpattn_stream, void **, void **);
    /* optional (CUDA 12+): thread-block cluster launches; NULL where the driver lacks it */
    dcpattn__CUresult (*LaunchKernelEx)(const struct dcpattn__CUlaunchConfig *, dcpattn__CUfunction, void **,
                                        void **);
    /* optional (CUDA 12.4+): a module's kernels by name, so that a variant's optional entry
       points are looked up only where they exist (a failed lookup is an API error, which
       compute-sanitizer reports); NULL where the driver lacks them (then they are tried) */
    dcpattn__CUresult (*ModuleGetFunctionCount)(unsigned *, dcpattn__CUmodule);
    dcpattn__CUresult (*ModuleEnumerateFunctions)(dcpattn__CUfunction *, unsigned, dcpattn__CUmodule);
    dcpattn__CUresult (*FuncGetName)(const char **, dcpattn__CUfunction);
    /* optional (CUDA 12+): TMA maps, for the MLA kernels; NULL where the driver lacks it */
    dcpattn__CUresult (*TensorMapEncodeTiled)(void *, int, unsigned, void *, const unsigned long long *,
                                              const unsigned long long *, const unsigned *, const unsigned *, int, int,
                                              int, int);
    /* optional: a module's global by name (timeline builds: their records) */
    dcpattn__CUresult (*ModuleGetGlobal)(unsigned long long *, size_t *, dcpattn__CUmodule, const char *);
    dcpattn__CUresult (*StreamIsCapturing)(dcpattn_stream, int *);
    dcpattn__CUresult (*StreamQuery)(dcpattn_stream);
    dcpattn__CUresult (*GetErrorString)(dcpattn__CUresult, const char **);
} dcpattn__driver_api;

typedef struct dcpattn__nvrtc_api {
    int tried, ok, major, minor;
    int (*Version)(int *, int *);
    int (*CreateProgram)(dcpattn__nvrtcProgram *, const char *, const char *, int, const char *const *,
                         const char *const *);
    int (*CompileProgram)(dcpattn__nvrtcProgram, int, const char *const *);
    int (*GetProgramLogSize)(dcpattn__nvrtcProgram, size_t *);
    int (*GetProgramLog)(dcpattn__nvrtcProgram, char *);
    int (*GetCUBINSize)(dcpattn__nvrtcProgram, size_t *);
    int (*GetCUBIN)(dcpattn__nvrtcProgram, char *);
    int (*GetPTXSize)(dcpattn__nvrtcProgram, size_t *);
    int (*GetPTX)(dcpattn__nvrtcProgram, char *);
    int (*DestroyProgram)(dcpattn__nvrtcProgram *);
    const char *(*GetErrorString)(int);
} dcpattn__nvrtc_api;

static dcpattn__driver_api dcpattn__cu;
static dcpattn__nvrtc_api dcpattn__nvrtc;
static pthread_mutex_t dcpattn__lib_lock = PTHREAD_MUTEX_INITIALIZER;

/* The library named by $env, else the first of names that opens; on failure *why names what
   was tried and dlerror() says why (of the path in $env, or of the first name). */
static void *dcpattn__dlopen_first(const char *env, const char *const *names, char *why, size_t n) {
    const char *e = getenv(env), *err;
    char first[512] = "";
    void *h;
    size_t i, k;
    if (e && *e) {
        if ((h = dlopen(e, RTLD_NOW | RTLD_LOCAL)) == NULL) {
            err = dlerror();
            snprintf(why, n, "dlopen(%s) failed, the path in $%s: %s", e, env, err ? err : "no reason given");
        }
        return h;
    }
    for (i = 0; names[i]; i++) {
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) != NULL)
            return h;
        if (i == 0 && (err = dlerror()) != NULL)
            snprintf(first, sizeof first, "%s", err);
    }
    k = (size_t)snprintf(why, n, "dlopen(%s) failed: %s; also tried", names[0], first[0] ? first : "no reason given");
    for (i = 1; names[i] && k < n; i++)
        k += (size_t)snprintf(why + k, n - k, "%s %s", i > 1 ? "," : "", names[i]);
    if (k < n)
        snprintf(why + k, n - k, " ($%s gives a path)", env);
    return NULL;
}

/* One symbol of a library: its name, where its pointer goes in the library's api struct, and
   whether the library may lack it (the pointer is then NULL). */
typedef struct dcpattn__sym {
    const char *name;
    size_t offset;
    int optional;
} dcpattn__sym;
#define DCPATTN__SYM(api, field, name) {name, offsetof(api, field), 0}
#define DCPATTN__SYM_OPTIONAL(api, field, name) {name, offsetof(api, field), 1}

/* A library opened once per process: `open` finds it (or says why not in `why`), every
   symbol of `syms` (ended by a NULL name) is bound into `api` (memcpy: no cast between object
   and function pointers), and `init` says whether what was found is usable. *tried and *ok
   are the api's flags; the reason of a failure stays in `why` for every later call. */
static dcpattn_status dcpattn__load_once(int *tried, int *ok, void *api, const dcpattn__sym *syms,
                                         void *(*open)(char *, size_t), int (*init)(char *, size_t), char *why,
                                         size_t why_size, const char *lib_name, dcpattn_status status,
                                         const char *what) {
    pthread_mutex_lock(&dcpattn__lib_lock);
    if (!*tried) {
        void *lib;
        *tried = 1;
        if ((lib = open(why, why_size)) != NULL) {
            const char *missing = NULL;
            for (; syms->name; syms++) {
                void *p = dlsym(lib, syms->name);
                if (!p && !syms->optional && !missing)
                    missing = syms->name;
                memcpy((char *)api + syms->offset, &p, sizeof p);
            }
            if (missing)
                snprintf(why, why_size, "%s lacks %s", lib_name, missing);
            else
                *ok = init(why, why_size);
        }
    }
    pthread_mutex_unlock(&dcpattn__lib_lock);
    if (!*ok)
        return dcpattn__fail(status, "%s: %s", what, why[0] ? why : "not loaded");
    return DCPATTN_STATUS_SUCCESS;
}

static void *dcpattn__driver_open(char *why, size_t n) {
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    return dcpattn__dlopen_first("DCPATTN_CUDA_LIBRARY", names, why, n);
}
static int dcpattn__driver_init(char *why, size_t n) {
    if (dcpattn__cu.Init(0) == 0)
        return 1;
    snprintf(why, n, "cuInit failed: no usable GPU or driver");
    return 0;
}
static dcpattn_status dcpattn__load_driver(void) {
#define DCPATTN__CU_SYM(field, name) DCPATTN__SYM(dcpattn__driver_api, field, name)
    static const dcpattn__sym syms[] = {
        DCPATTN__CU_SYM(Init, "cuInit"),
        DCPATTN__CU_SYM(CtxGetCurrent, "cuCtxGetCurrent"),
        DCPATTN__CU_SYM(CtxGetDevice, "cuCtxGetDevice"),
        DCPATTN__CU_SYM(CtxPushCurrent, "cuCtxPushCurrent_v2"),
        DCPATTN__CU_SYM(CtxPopCurrent, "cuCtxPopCurrent_v2"),
        DCPATTN__CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
        DCPATTN__CU_SYM(ModuleLoadData, "cuModuleLoadData"),
        DCPATTN__CU_SYM(ModuleUnload, "cuModuleUnload"),
        DCPATTN__CU_SYM(ModuleGetFunction, "cuModuleGetFunction"),
        DCPATTN__CU_SYM(FuncSetAttribute, "cuFuncSetAttribute"),
        DCPATTN__CU_SYM(FuncGetAttribute, "cuFuncGetAttribute"),
        DCPATTN__CU_SYM(LaunchKernel, "cuLaunchKernel"),
        DCPATTN__CU_SYM(StreamIsCapturing, "cuStreamIsCapturing"),
        DCPATTN__CU_SYM(StreamQuery, "cuStreamQuery"),
        DCPATTN__CU_SYM(GetErrorString, "cuGetErrorString"),
        DCPATTN__SYM_OPTIONAL(dcpattn__driver_api, LaunchKernelEx, "cuLaunchKernelEx"),
        DCPATTN__SYM_OPTIONAL(dcpattn__driver_api, ModuleGetFunctionCount, "cuModuleGetFunctionCount"),
        DCPATTN__SYM_OPTIONAL(dcpattn__driver_api, ModuleEnumerateFunctions, "cuModuleEnumerateFunctions"),
        DCPATTN__SYM_OPTIONAL(dcpattn__driver_api, FuncGetName, "cuFuncGetName"),
        DCPATTN__SYM_OPTIONAL(dcpattn__driver_api, TensorMapEncodeTiled, "cuTensorMapEncodeTiled"),
        DCPATTN__SYM_OPTIONAL(dcpattn__driver_api, ModuleGetGlobal, "cuModuleGetGlobal_v2"),
        {NULL, 0, 0}};
#undef DCPATTN__CU_SYM
    static char why[1024];
    return dcpattn__load_once(&dcpattn__cu.tried, &dcpattn__cu.ok, &dcpattn__cu, syms, dcpattn__driver_open,
                              dcpattn__driver_init, why, sizeof why, "libcuda", DCPATTN_STATUS_NO_DRIVER, "CUDA driver");
}

static void *dcpattn__nvrtc_open(char *why, size_t n) {
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                        "/usr/local/cuda/lib64/libnvrtc.so.13",
                                        "/usr/local/cuda/lib64/libnvrtc.so.12",
                                        "/usr/local/cuda/lib64/libnvrtc.so", NULL};
    return dcpattn__dlopen_first("DCPATTN_NVRTC_LIBRARY", names, why, n);
}
static int dcpattn__nvrtc_init(char *why, size_t n) {
    if (dcpattn__nvrtc.Version(&dcpattn__nvrtc.major, &dcpattn__nvrtc.minor) == 0)
        return 1;
    snprintf(why, n, "nvrtcVersion failed");
    return 0;
}
static dcpattn_status dcpattn__load_nvrtc(void) {
#define DCPATTN__NVRTC_SYM(field, name) DCPATTN__SYM(dcpattn__nvrtc_api, field, name)
    static const dcpattn__sym syms[] = {
        DCPATTN__NVRTC_SYM(Version, "nvrtcVersion"),
        DCPATTN__NVRTC_SYM(CreateProgram, "nvrtcCreateProgram"),
        DCPATTN__NVRTC_SYM(CompileProgram, "nvrtcCompileProgram"),
        DCPATTN__NVRTC_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize"),
        DCPATTN__NVRTC_SYM(GetProgramLog, "nvrtcGetProgramLog"),
        DCPATTN__NVRTC_SYM(GetCUBINSize, "nvrtcGetCUBINSize"),
        DCPATTN__NVRTC_SYM(GetCUBIN, "nvrtcGetCUBIN"),
        DCPATTN__NVRTC_SYM(GetPTXSize, "nvrtcGetPTXSize"),
        DCPATTN__NVRTC_SYM(GetPTX, "nvrtcGetPTX"),
        DCPATTN__NVRTC_SYM(DestroyProgram, "nvrtcDestroyProgram"),
        DCPATTN__NVRTC_SYM(GetErrorString, "nvrtcGetErrorString"),
        {NULL, 0, 0}};
#undef DCPATTN__NVRTC_SYM
    static char why[1024];
    return dcpattn__load_once(&dcpattn__nvrtc.tried, &dcpattn__nvrtc.ok, &dcpattn__nvrtc, syms, dcpattn__nvrtc_open,
                              dcpattn__nvrtc_init, why, sizeof why, "libnvrtc", DCPATTN_STATUS_NO_NVRTC, "NVRTC");
}

static dcpattn_status dcpattn__cu_check(dcpattn__CUresult r, const char *what) {
    const char *msg = "unknown error";
    if (r == 0)
        return DCPATTN_STATUS_SUCCESS;
    if (dcpattn__cu.GetErrorString)
        dcpattn__cu.GetErrorString(r, &msg);
    return dcpattn__fail(DCPATTN_STATUS_CUDA, "%s failed: CUDA error %d (%s)", what, r, msg ? msg : "?");
}

/* ================================ context ================================ */
typedef struct dcpattn__variant {
    char *name;
    dcpattn__CUmodule module;
    dcpattn__CUfunction fn;
    dcpattn__CUfunction fn_balanced; /* MLA, GQA: NAME_balanced, the balanced schedule's kernel */
    dcpattn__CUfunction fn_balanced_stacked; /* GQA, FP8 wgmma tile: NAME_balanced_stacked, the
                                               same for plans of at most rows / 2 rows a KV head */
    int threads, smem, rows, kv_tile, items;
    int cluster_splits; /* attention: most splits its kernel merges inside a cluster (0: none) */
    int row_list;       /* sparse: its CTAs keep their kept rows in the workspace (8 bytes an id) */
    int kv_swizzle;     /* MLA: the swizzle of the TMA map that brings its K tiles, in bytes (0: none) */
    int registers, shared_bytes, spill_bytes;
} dcpattn__variant;

/* What one CTA and one SM of the target GPU hold, in bytes, registers and threads: read from
   the device, or, in a compile-only context, the row of its arch in dcpattn__arch_limits. */
typedef struct dcpattn__sm_limits {
    int arch;                 /* the row's compute capability, 10 * major + minor */
    int smem_per_block;       /* dynamic shared memory a launch gets without opting in */
    int smem_per_block_optin; /* the most it may opt in to */
    int smem_per_sm;
    int smem_reserved;        /* per CTA, taken by the driver */
    int regs_per_sm, threads_per_sm;
} dcpattn__sm_limits;

/* The per-arch limits of the CUDA C++ Programming Guide (its table of compute capabilities),
   for a context with no device to ask. An arch between two rows takes the lower row, one
   below the first row the first. */
static const dcpattn__sm_limits dcpattn__arch_limits[] = {
    {80, 48 * 1024, 163 * 1024, 164 * 1024, 1024, 65536, 2048},  /* A100 */
    {86, 48 * 1024, 99 * 1024, 100 * 1024, 1024, 65536, 1536},   /* GA10x */
    {87, 48 * 1024, 163 * 1024, 164 * 1024, 1024, 65536, 2048},  /* Orin */
    {89, 48 * 1024, 99 * 1024, 100 * 1024, 1024, 65536, 1536},   /* Ada */
    {90, 48 * 1024, 227 * 1024, 228 * 1024, 1024, 65536, 2048},  /* Hopper */
    {100, 48 * 1024, 227 * 1024, 228 * 1024, 1024, 65536, 2048}, /* Blackwell datacenter */
    {120, 48 * 1024, 99 * 1024, 100 * 1024, 1024, 65536, 1536},  /* Blackwell RTX */
};

static dcpattn__sm_limits dcpattn__limits_of_arch(int arch) {
    const int rows = (int)(sizeof dcpattn__arch_limits / sizeof dcpattn__arch_limits[0]);
    int i = 0;
    while (i + 1 < rows && dcpattn__arch_limits[i + 1].arch <= arch)
        i++;
    return dcpattn__arch_limits[i];
}

struct dcpattn_context {
    pthread_mutex_t lock;
    lua_State *L;
    char data_dir[1024];
    char aot_dir[1024];
    char arch[32];
    int compile_only, no_jit, log_level, num_sms;
    dcpattn__sm_limits limits;
    int arch_given;      /* arch came from the descriptor or the device, not the compile-only default */
    int lock_timeout_ms; /* < 0: no limit */
    dcpattn_log_fn log;
    void *log_user;
    dcpattn__CUcontext cuctx;
    dcpattn__variant **table; /* open addressing by name */
    int table_cap, table_len;
    char **defaults;
    int num_defaults;
    char cache_dirs[8][1024];
    int num_cache_dirs, memory_only_warned;
    char pair_names[2][4][4][32]; /* [merge, combine][in dtype][out dtype]: the generator's names */
};

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void dcpattn__log(dcpattn_context *ctx, int level, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    if (!ctx || level > ctx->log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (ctx->log)
        ctx->log(ctx->log_user, level, buf);
    else
        fprintf(stderr, "dcpattn: %s\n", buf);
}

/* ---- function table: name -> loaded variant; lookup takes well under a microsecond.
   Each variant is its own allocation, so the pointers plans keep stay valid when the table
   grows. ---- */
static dcpattn__variant *dcpattn__find(dcpattn_context *ctx, const char *name) {
    uint64_t h;
    int i, n;
    if (!ctx->table_cap)
        return NULL;
    h = dcpattn__fnv(DCPATTN__FNV_A, name, strlen(name));
    for (i = (int)(h & (uint64_t)(ctx->table_cap - 1)), n = 0; n < ctx->table_cap;
         i = (i + 1) & (ctx->table_cap - 1), n++) {
        if (!ctx->table[i])
            return NULL;
        if (strcmp(ctx->table[i]->name, name) == 0)
            return ctx->table[i];
    }
    return NULL;
}

static void dcpattn__place(dcpattn_context *ctx, dcpattn__variant *v) {
    uint64_t h = dcpattn__fnv(DCPATTN__FNV_A, v->name, strlen(v->name));
    int i;
    for (i = (int)(h & (uint64_t)(ctx->table_cap - 1)); ctx->table[i]; i = (i + 1) & (ctx->table_cap - 1)) {
    }
    ctx->table[i] = v;
    ctx->table_len++;
}

static dcpattn__variant *dcpattn__insert(dcpattn_context *ctx, const dcpattn__variant *v) {
    dcpattn__variant *copy;
    if (2 * (ctx->table_len + 1) > ctx->table_cap) {
        int cap = ctx->table_cap ? 2 * ctx->table_cap : 64, j, oldcap = ctx->table_cap;
        dcpattn__variant **old = ctx->table, **nt = (dcpattn__variant **)calloc((size_t)cap, sizeof *nt);
        if (!nt)
            return NULL;
        ctx->table = nt;
        ctx->table_cap = cap;
        ctx->table_len = 0;
        for (j = 0; j < oldcap; j++)
            if (old[j])
                dcpattn__place(ctx, old[j]);
        free(old);
    }
    if (!(copy = (dcpattn__variant *)malloc(sizeof *copy)))
        return NULL;
    *copy = *v;
    dcpattn__place(ctx, copy);
    return copy;
}

/* ================================== Lua ================================== */
static int dcpattn__lua_traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg)
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* opts.read(path): a file under the data directory; library Lua does no io itself. */
static int dcpattn__lua_read(lua_State *L) {
    const char *rel = luaL_checkstring(L, 1);
    const char *root = (const char *)lua_touserdata(L, lua_upvalueindex(1));
    char path[2048];
    FILE *f;
    long n;
    char *buf;
    if (rel[0] == '/' || strstr(rel, "..")) {
        lua_pushnil(L);
        lua_pushfstring(L, "refusing to read '%s' outside the data directory", rel);
        return 2;
    }
    snprintf(path, sizeof path, "%s/%s", root, rel);
    f = fopen(path, "rb");
    if (!f) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", path, strerror(errno));
        return 2;
    }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (char *)malloc(n > 0 ? (size_t)n : 1);
    if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        free(buf);
        fclose(f);
        return luaL_error(L, "cannot read %s", path);
    }
    fclose(f);
    lua_pushlstring(L, buf, (size_t)n);
    free(buf);
    return 1;
}

/* Calls dcpattn.<fn>(args...) protected; on error copies the traceback into the detail. */
static dcpattn_status dcpattn__lua_pcall(dcpattn_context *ctx, int nargs, int nres) {
    lua_State *L = ctx->L;
    int base = lua_gettop(L) - nargs - 1, rc;
    lua_pushcfunction(L, dcpattn__lua_traceback);
    lua_insert(L, base + 1);
    rc = lua_pcall(L, nargs, nres, base + 1);
    lua_remove(L, base + 1);
    if (rc != LUA_OK) {
        dcpattn_status s = dcpattn__fail(DCPATTN_STATUS_GENERATOR, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return s;
    }
    return DCPATTN_STATUS_SUCCESS;
}

/* Pushes the generator function dcpattn.<fn>. */
static void dcpattn__lua_fn(dcpattn_context *ctx, const char *fn) {
    lua_getglobal(ctx->L, "package");
    lua_getfield(ctx->L, -1, "loaded");
    lua_getfield(ctx->L, -1, "dcpattn");
    lua_getfield(ctx->L, -1, fn);
    lua_replace(ctx->L, -4);
    lua_pop(ctx->L, 2);
}

static dcpattn_status dcpattn__lua_open(dcpattn_context *ctx) {
    static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},       {LUA_LOADLIBNAME, luaopen_package},
                                    {LUA_STRLIBNAME, luaopen_string}, {LUA_TABLIBNAME, luaopen_table},
                                    {LUA_MATHLIBNAME, luaopen_math},  {NULL, NULL}};
    const luaL_Reg *lib;
    lua_State *L = luaL_newstate();
    if (!L)
        return dcpattn__fail(DCPATTN_STATUS_OUT_OF_MEMORY, "luaL_newstate failed");
    ctx->L = L;
    for (lib = libs; lib->func; lib++) {
        luaL_requiref(L, lib->name, lib->func, 1);
        lua_pop(L, 1);
    }
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/gen/?.lua;%s/gen/?/init.lua", ctx->data_dir, ctx->data_dir);
    lua_setfield(L, -2, "path");
    lua_pushstring(L, "");
    lua_setfield(L, -2, "cpath");
    lua_pop(L, 1);
    lua_getglobal(L, "require");
    lua_pushstring(L, "dcpattn");
    {
        dcpattn_status s = dcpattn__lua_pcall(ctx, 1, 1);
        if (s) {
            char msg[sizeof dcpattn__detail];
            memcpy(msg, dcpattn__detail, sizeof msg);
            return dcpattn__fail(s, "loading the generator from %s/gen: %s", ctx->data_dir, msg);
        }
    }
    lua_pop(L, 1);
    return DCPATTN_STATUS_SUCCESS;
}

typedef struct dcpattn__rendered {
    char *source;
    size_t len;
    dcpattn__variant meta; /* the launch fields the generator gives (threads .. cluster_splits) */
} dcpattn__rendered;

static int dcpattn__lua_intfield(lua_State *L, int idx, const char *k) {
    int v;
    lua_getfield(L, idx, k);
    v = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

/* name -> rendered CUDA source and launch metadata */
static dcpattn_status dcpattn__render(dcpattn_context *ctx, const char *name, dcpattn__rendered *out) {
    lua_State *L = ctx->L;
    const char *src;
    memset(out, 0, sizeof *out);
    dcpattn__lua_fn(ctx, "render");
    lua_pushstring(L, name);
    lua_createtable(L, 0, 2);
    lua_pushlightuserdata(L, ctx->data_dir);
    lua_pushcclosure(L, dcpattn__lua_read, 1);
    lua_setfield(L, -2, "read");
    lua_pushlstring(L, dcpattn__abi_text, sizeof dcpattn__abi_text - 1);
    lua_setfield(L, -2, "abi");
    DCPATTN__TRY(dcpattn__lua_pcall(ctx, 2, 2));
    if (lua_isnil(L, -2)) {
        dcpattn_status s = dcpattn__fail(DCPATTN_STATUS_GENERATOR, "%s", lua_tostring(L, -1));
        lua_pop(L, 2);
        return s;
    }
    src = lua_tolstring(L, -2, &out->len);
    out->source = (char *)malloc(out->len + 1);
    if (!out->source) {
        lua_pop(L, 2);
        return dcpattn__fail(DCPATTN_STATUS_OUT_OF_MEMORY, "rendering %s", name);
    }
    memcpy(out->source, src, out->len + 1);
    if (lua_istable(L, -1)) {
        out->meta.threads = dcpattn__lua_intfield(L, -1, "threads");
        out->meta.smem = dcpattn__lua_intfield(L, -1, "smem");
        out->meta.rows = dcpattn__lua_intfield(L, -1, "rows");
        out->meta.kv_tile = dcpattn__lua_intfield(L, -1, "kv_tile");
        out->meta.items = dcpattn__lua_intfield(L, -1, "items");
        out->meta.cluster_splits = dcpattn__lua_intfield(L, -1, "cluster_splits");
        out->meta.row_list = dcpattn__lua_intfield(L, -1, "row_list");
        out->meta.kv_swizzle = dcpattn__lua_intfield(L, -1, "kv_swizzle");
    }
    if (out->meta.items <= 0)
        out->meta.items = 1;
    lua_pop(L, 2);
    if (out->meta.threads <= 0) {
        free(out->source);
        out->source = NULL;
        return dcpattn__fail(DCPATTN_STATUS_GENERATOR, "generator gave no thread count for %s", name);
    }
    return DCPATTN_STATUS_SUCCESS;
}

/* ================================= cache =================================
   Entry file <dir>/<name>.<key>.cubin: a fixed header, then the cubin. The key hashes the
   rendered source, the compile options, the NVRTC version, the arch, the library version
   and the entry format (bumped when what an entry records changes), so a stale or foreign
   entry is never even looked up; the payload checksum
   catches truncation and bit flips. Publishing is lock (flock, released by the kernel
   if the process dies) -> temp file -> fsync -> rename. */
typedef struct dcpattn__entry_header {
    char magic[8];
    uint64_t key_a, key_b;
    uint64_t payload_size, payload_hash;
    int32_t registers, shared_bytes, spill_bytes, reserved;
} dcpattn__entry_header;

typedef struct dcpattn__blob {
    char *data;
    size_t size;
    int registers, shared_bytes, spill_bytes;
} dcpattn__blob;

static const char dcpattn__magic[8] = {'D', 'C', 'P', 'A', 'T', 'T', 'N', '1'};

static void dcpattn__entry_path(char *buf, size_t n, const char *dir, const char *name, const uint64_t key[2],
                                const char *suffix) {
    snprintf(buf, n, "%s/%s.%016llx%016llx%s", dir, name, (unsigned long long)key[0],
             (unsigned long long)key[1], suffix);
}

/* 1: loaded; 0: absent; -1: present but corrupt (the caller warns and recompiles). */
static int dcpattn__cache_read(const char *path, const uint64_t key[2], dcpattn__blob *out) {
    dcpattn__entry_header h;
    FILE *f = fopen(path, "rb");
    long size;
    if (!f)
        return 0;
    memset(out, 0, sizeof *out);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size < (long)sizeof h || fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, dcpattn__magic, 8) ||
        h.key_a != key[0] || h.key_b != key[1] || h.payload_size != (uint64_t)(size - (long)sizeof h) ||
        h.payload_size == 0) {
        fclose(f);
        return -1;
    }
    out->data = (char *)malloc((size_t)h.payload_size);
    if (!out->data || fread(out->data, 1, (size_t)h.payload_size, f) != (size_t)h.payload_size ||
        dcpattn__fnv(DCPATTN__FNV_A, out->data, (size_t)h.payload_size) != h.payload_hash) {
        free(out->data);
        out->data = NULL;
        fclose(f);
        return -1;
    }
    fclose(f);
    out->size = (size_t)h.payload_size;
    out->registers = h.registers;
    out->shared_bytes = h.shared_bytes;
    out->spill_bytes = h.spill_bytes;
    return 1;
}

/* Writes the entry atomically; 0 on success, else errno-like failure (nothing left behind). */
static int dcpattn__cache_write(const char *path, const uint64_t key[2], const dcpattn__blob *b) {
    static int counter;
    char tmp[2200];
    dcpattn__entry_header h;
    int fd, ok;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, dcpattn__magic, 8);
    h.key_a = key[0];
    h.key_b = key[1];
    h.payload_size = b->size;
    h.payload_hash = dcpattn__fnv(DCPATTN__FNV_A, b->data, b->size);
    h.registers = b->registers;
    h.shared_bytes = b->shared_bytes;
    h.spill_bytes = b->spill_bytes;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%d", path, (long)getpid(), __sync_fetch_and_add(&counter, 1));
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return errno ? errno : EIO;
    ok = write(fd, &h, sizeof h) == (ssize_t)sizeof h && write(fd, b->data, b->size) == (ssize_t)b->size &&
         fsync(fd) == 0;
#ifdef DCPATTN_TESTING
    if (getenv("DCPATTN_TEST_FAIL_WRITE")) /* fault injection for the disk-full test */
        ok = 0;
#endif
    if (close(fd) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno ? errno : ENOSPC;
        unlink(tmp);
        return e;
    }
    return 0;
}

static int dcpattn__mkdirs(const char *dir) {
    char buf[1024];
    size_t i, n = strlen(dir);
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, dir, n + 1);
    for (i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            buf[i] = c;
        }
    }
    return 0;
}

/* The cache directories: the descriptor's list, else $DCPATTN_CACHE_DIR, else the default. */
static void dcpattn__cache_dirs(dcpattn_context *ctx, const char *list) {
    const char *env = list ? list : getenv("DCPATTN_CACHE_DIR");
    ctx->num_cache_dirs = 0;
    if (env) {
        const char *p = env;
        while (*p && ctx->num_cache_dirs < 8) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (n > 0 && n < sizeof ctx->cache_dirs[0]) {
                memcpy(ctx->cache_dirs[ctx->num_cache_dirs], p, n);
                ctx->cache_dirs[ctx->num_cache_dirs++][n] = 0;
            }
            p += n;
            if (*p == ':')
                p++;
        }
        return;
    }
    if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME"))
        snprintf(ctx->cache_dirs[0], sizeof ctx->cache_dirs[0], "%s/dcpattn", getenv("XDG_CACHE_HOME"));
    else if (getenv("HOME") && *getenv("HOME"))
        snprintf(ctx->cache_dirs[0], sizeof ctx->cache_dirs[0], "%s/.cache/dcpattn", getenv("HOME"));
    else
        return;
    ctx->num_cache_dirs = 1;
}

/* ================================ compile ================================ */
/* The number just before `suffix` in the ptxas report ("Used 40 registers", "256 bytes smem"). */
static int dcpattn__ptxas_number(const char *log, const char *suffix) {
    const char *p = strstr(log, suffix);
    if (!p)
        return 0;
    while (p > log && p[-1] == ' ')
        p--;
    while (p > log && p[-1] >= '0' && p[-1] <= '9')
        p--;
    return atoi(p);
}

/* The context's arch as 10 * major + minor ("sm_90a" -> 90, "compute_80" -> 80); 0 if it
   does not parse. */
static int dcpattn__arch_num(const dcpattn_context *ctx) {
    int arch = 0;
    return sscanf(ctx->arch, "sm_%d", &arch) == 1 || sscanf(ctx->arch, "compute_%d", &arch) == 1 ? arch : 0;
}
/* A virtual arch: kernels are compiled to PTX and the driver compiles that at load. */
static int dcpattn__arch_virtual(const dcpattn_context *ctx) { return strncmp(ctx->arch, "compute_", 8) == 0; }

/* NVRTC's options (also hashed into the cache key): DCPATTN__NVRTC_OPTS of them */
#ifdef DCPATTN_TIMELINE
#define DCPATTN__NVRTC_OPTS 5
#else
#define DCPATTN__NVRTC_OPTS 4
#endif
static void dcpattn__options(const dcpattn_context *ctx, char *arch_opt, size_t n,
                             const char *opts[DCPATTN__NVRTC_OPTS]) {
    snprintf(arch_opt, n, "-arch=%s", ctx->arch);
    opts[0] = arch_opt;
    opts[1] = "-std=c++17";
    opts[2] = "-Xptxas=-v";
    opts[3] = "-lineinfo";
#ifdef DCPATTN_TIMELINE
    opts[4] = "-DDCPATTN_TIMELINE";
#endif
}

static dcpattn_status dcpattn__nvrtc_compile(dcpattn_context *ctx, const char *name, const dcpattn__rendered *r,
                                             dcpattn__blob *out) {
    dcpattn__nvrtcProgram prog;
    char arch_opt[64], file[300], *log = NULL;
    const char *opts[DCPATTN__NVRTC_OPTS];
    size_t log_size = 0;
    const int ptx = dcpattn__arch_virtual(ctx);
    int rc;
    memset(out, 0, sizeof *out);
    DCPATTN__TRY(dcpattn__load_nvrtc());
    dcpattn__options(ctx, arch_opt, sizeof arch_opt, opts);
    snprintf(file, sizeof file, "%s.cu", name);
    if (dcpattn__nvrtc.CreateProgram(&prog, r->source, file, 0, NULL, NULL) != 0)
        return dcpattn__fail(DCPATTN_STATUS_COMPILE, "nvrtcCreateProgram failed for %s", name);
    rc = dcpattn__nvrtc.CompileProgram(prog, DCPATTN__NVRTC_OPTS, opts);
    dcpattn__nvrtc.GetProgramLogSize(prog, &log_size);
    log = (char *)malloc(log_size + 1);
    if (log) {
        log[0] = 0;
        if (log_size)
            dcpattn__nvrtc.GetProgramLog(prog, log);
        log[log_size] = 0;
    }
    if (rc != 0) {
        dcpattn_status s;
        if (log && strstr(log, "gpu-architecture"))
            s = dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "NVRTC %d.%d cannot compile for %s: %s",
                              dcpattn__nvrtc.major, dcpattn__nvrtc.minor, ctx->arch, log);
        else
            s = dcpattn__fail(DCPATTN_STATUS_COMPILE, "NVRTC %d.%d compiling %s for %s: %s\n%s",
                              dcpattn__nvrtc.major, dcpattn__nvrtc.minor, name, ctx->arch,
                              dcpattn__nvrtc.GetErrorString(rc), log ? log : "");
        free(log);
        dcpattn__nvrtc.DestroyProgram(&prog);
        return s;
    }
    if (log) {
        const char *used = strstr(log, "Used "); /* "Used 168 registers": other lines mention registers too */
        out->registers = used ? atoi(used + 5) : 0;
        out->shared_bytes = dcpattn__ptxas_number(log, " bytes smem");
        out->spill_bytes = dcpattn__ptxas_number(log, " bytes spill stores") +
                           dcpattn__ptxas_number(log, " bytes spill loads");
    }
    free(log);
    /* a virtual arch (compute_XY) gives PTX, NUL included, which cuModuleLoadData compiles
       for the device it loads on */
    if ((ptx ? dcpattn__nvrtc.GetPTXSize(prog, &out->size) : dcpattn__nvrtc.GetCUBINSize(prog, &out->size)) != 0 ||
        out->size == 0 || !(out->data = (char *)malloc(out->size)) ||
        (ptx ? dcpattn__nvrtc.GetPTX(prog, out->data) : dcpattn__nvrtc.GetCUBIN(prog, out->data)) != 0) {
        free(out->data);
        out->data = NULL;
        dcpattn__nvrtc.DestroyProgram(&prog);
        return dcpattn__fail(DCPATTN_STATUS_COMPILE, "NVRTC produced no %s for %s", ptx ? "PTX" : "cubin", name);
    }
    dcpattn__nvrtc.DestroyProgram(&prog);
    return DCPATTN_STATUS_SUCCESS;
}

static void dcpattn__key(dcpattn_context *ctx, const dcpattn__rendered *r, const char *nvrtc_version,
                         uint64_t key[2]) {
    char arch_opt[64], ver[160];
    const char *opts[DCPATTN__NVRTC_OPTS];
    int i, k;
    dcpattn__options(ctx, arch_opt, sizeof arch_opt, opts);
    snprintf(ver, sizeof ver, "nvrtc %s|%s|dcpattn %s|entry 2", nvrtc_version, ctx->arch, DCPATTN_VERSION_STRING);
    for (k = 0; k < 2; k++) {
        uint64_t h = k ? DCPATTN__FNV_B : DCPATTN__FNV_A;
        h = dcpattn__fnv(h, r->source, r->len + 1);
        for (i = 0; i < DCPATTN__NVRTC_OPTS; i++)
            h = dcpattn__fnv(h, opts[i], strlen(opts[i]) + 1);
        h = dcpattn__fnv(h, ver, strlen(ver) + 1);
        key[k] = h;
    }
}

/* <dir>/nvrtc.version: the NVRTC version the entries of a directory were compiled with. */
static int dcpattn__read_nvrtc_version(const char *dir, char *buf, size_t n) {
    char path[1100];
    FILE *f;
    int ok;
    snprintf(path, sizeof path, "%s/nvrtc.version", dir);
    if (!(f = fopen(path, "r")))
        return 0;
    ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = 0;
    return ok && buf[0];
}

static void dcpattn__write_nvrtc_version(const char *dir, const char *version) {
    char path[1100], tmp[1200], have[32];
    FILE *f;
    if (dcpattn__read_nvrtc_version(dir, have, sizeof have) && !strcmp(have, version))
        return;
    snprintf(path, sizeof path, "%s/nvrtc.version", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (!(f = fopen(tmp, "w")))
        return;
    {
        int bad = fprintf(f, "%s\n", version) < 0;
        if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
            unlink(tmp);
    }
}

/* ---- per-key lock files <dir>/<name>.<key>.lock. The process that holds a file's flock
   compiles that key and writes its pid into the file (for the warning of a waiter that
   gives up); it removes the file when done, so lock files do not pile up. A waiter that
   then gets the flock of a file no longer at its path opens the path again: only the file
   at the path guards the key. ---- */
static int dcpattn__same_file(int fd, const char *path) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* 1: the lock is held (*fd); 0: timeout_ms (< 0: no limit) passed first, *holder = the pid in
   the file (0 if none yet); -1: the file cannot be created (errno). The caller holds
   ctx->lock; it is released while waiting, so another process's compile does not stop the
   context's other threads. */
static int dcpattn__lock_acquire(dcpattn_context *ctx, const char *path, int timeout_ms, int *fd, long *holder) {
    const double t0 = dcpattn__now();
    long sleep_us = 500;
    int unlocked = 0, rc = -1;
    *holder = 0;
    for (;;) {
        int held = 0;
        if ((*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
            break;
        while (!held) {
            if (flock(*fd, LOCK_EX | LOCK_NB) == 0 || (errno != EWOULDBLOCK && errno != EINTR)) {
                held = 1; /* (a file system without flock: go on unlocked, as a lock nobody can take) */
            } else if (errno == EWOULDBLOCK) {
                struct timespec ts;
                if (timeout_ms >= 0 && (dcpattn__now() - t0) * 1000.0 >= (double)timeout_ms) {
                    char buf[32];
                    ssize_t n = pread(*fd, buf, sizeof buf - 1, 0);
                    buf[n > 0 ? n : 0] = 0;
                    *holder = atol(buf);
                    close(*fd);
                    *fd = -1;
                    rc = 0;
                    goto done;
                }
                if (!unlocked) {
                    pthread_mutex_unlock(&ctx->lock);
                    unlocked = 1;
                }
                ts.tv_sec = 0;
                ts.tv_nsec = sleep_us * 1000;
                nanosleep(&ts, NULL);
                if (sleep_us < 50000)
                    sleep_us *= 2;
            }
        }
        if (dcpattn__same_file(*fd, path)) {
            char buf[32];
            int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
            int ok = ftruncate(*fd, 0) == 0 && pwrite(*fd, buf, (size_t)n, 0) == (ssize_t)n;
            (void)ok; /* the pid only makes a waiter's warning clearer */
            rc = 1;
            break;
        }
        close(*fd);
    }
done:
    if (unlocked)
        pthread_mutex_lock(&ctx->lock);
    return rc;
}

static void dcpattn__lock_release(int fd, const char *path) {
    unlink(path);
    close(fd);
}

/* Removes the lock files of dir that nobody holds (left by a process that died holding
   them), except `keep`: taking a file's flock first makes that safe, as for a holder. */
static void dcpattn__lock_sweep(const char *dir, const char *keep) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[2048];
    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        int fd;
        if (n < 6 || strcmp(e->d_name + n - 5, ".lock") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!strcmp(path, keep) || (fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && dcpattn__same_file(fd, path))
            unlink(path);
        close(fd);
    }
    closedir(d);
}

/* Finds the cubin for a rendered variant: AOT dir, cache dirs, else NVRTC (and publish). */
static dcpattn_status dcpattn__obtain(dcpattn_context *ctx, const char *name, const dcpattn__rendered *r,
                                      dcpattn__blob *blob, const char **source) {
    uint64_t key[2];
    char path[2048], lockpath[2048], nvver[32], why[4096];
    int i, rc, lockfd = -1, write_dir = -1, timed_out = 0;
    dcpattn_status s;
    /* The key includes the NVRTC version, so it must be known even for a cache hit. On a
       machine without NVRTC (AOT only) the version the cache was built with is read from
       the nvrtc.version file that publishing leaves in each directory. */
    if (dcpattn__load_nvrtc() == DCPATTN_STATUS_SUCCESS) {
        snprintf(nvver, sizeof nvver, "%d.%d", dcpattn__nvrtc.major, dcpattn__nvrtc.minor);
    } else {
        int found = ctx->aot_dir[0] && dcpattn__read_nvrtc_version(ctx->aot_dir, nvver, sizeof nvver);
        for (i = 0; !found && i < ctx->num_cache_dirs; i++)
            found = dcpattn__read_nvrtc_version(ctx->cache_dirs[i], nvver, sizeof nvver);
        if (!found)
            return dcpattn__load_nvrtc(); /* NO_NVRTC, with dlopen's reason */
    }
    dcpattn__key(ctx, r, nvver, key);
    if (ctx->aot_dir[0]) {
        dcpattn__entry_path(path, sizeof path, ctx->aot_dir, name, key, ".cubin");
        rc = dcpattn__cache_read(path, key, blob);
        if (rc > 0) {
            *source = "aot";
            return DCPATTN_STATUS_SUCCESS;
        }
        if (rc < 0)
            dcpattn__log(ctx, DCPATTN_LOG_WARN, "corrupt AOT entry %s ignored", path);
    }
    for (i = 0; i < ctx->num_cache_dirs; i++) {
        dcpattn__entry_path(path, sizeof path, ctx->cache_dirs[i], name, key, ".cubin");
        rc = dcpattn__cache_read(path, key, blob);
        if (rc > 0) {
            *source = "cache";
            return DCPATTN_STATUS_SUCCESS;
        }
        if (rc < 0) {
            dcpattn__log(ctx, DCPATTN_LOG_WARN, "corrupt cache entry %s: recompiling", path);
            unlink(path);
        }
    }
    if (ctx->no_jit)
        return dcpattn__fail(DCPATTN_STATUS_NOT_COMPILED,
                             "variant %s is in no cache (AOT dir '%s', %d cache dirs) and JIT is disabled",
                             name, ctx->aot_dir, ctx->num_cache_dirs);
    /* Take the per-key lock in the first writable directory; another process compiling the
       same key makes us wait, then we find its result. A holder that does not finish in
       time (stopped, hung) is not waited for: we compile into memory. */
    why[0] = 0;
    for (i = 0; i < ctx->num_cache_dirs && write_dir < 0 && !timed_out; i++) {
        size_t k = strlen(why);
        long holder;
        if (dcpattn__mkdirs(ctx->cache_dirs[i]) != 0 || access(ctx->cache_dirs[i], W_OK) != 0) {
            snprintf(why + k, sizeof why - k, "%s%s: %s", k ? "; " : "", ctx->cache_dirs[i], strerror(errno));
            continue;
        }
        dcpattn__entry_path(lockpath, sizeof lockpath, ctx->cache_dirs[i], name, key, ".lock");
        rc = dcpattn__lock_acquire(ctx, lockpath, ctx->lock_timeout_ms, &lockfd, &holder);
        if (rc > 0) {
            write_dir = i;
        } else if (rc == 0) {
            timed_out = 1;
            if (holder > 0)
                snprintf(why, sizeof why, "pid %ld", holder);
            else
                snprintf(why, sizeof why, "a process that wrote no pid yet");
            dcpattn__log(ctx, DCPATTN_LOG_WARN,
                         "%s (key %016llx%016llx): the cache lock %s is still held by %s after %d ms (a stopped "
                         "or hung compile?): compiling into memory",
                         name, (unsigned long long)key[0], (unsigned long long)key[1], lockpath, why,
                         ctx->lock_timeout_ms);
        } else {
            snprintf(why + k, sizeof why - k, "%s%s: %s", k ? "; " : "", lockpath, strerror(errno));
        }
    }
    if (write_dir >= 0) {
        dcpattn__entry_path(path, sizeof path, ctx->cache_dirs[write_dir], name, key, ".cubin");
        if (dcpattn__cache_read(path, key, blob) > 0) {
            dcpattn__lock_release(lockfd, lockpath);
            *source = "cache";
            return DCPATTN_STATUS_SUCCESS;
        }
    } else if (!timed_out && !ctx->memory_only_warned) {
        ctx->memory_only_warned = 1;
        if (ctx->num_cache_dirs)
            dcpattn__log(ctx, DCPATTN_LOG_WARN, "no writable cache directory (%s): compiled kernels stay in memory",
                         why);
        else
            dcpattn__log(ctx, DCPATTN_LOG_WARN,
                         "no cache directory (DCPATTN_CACHE_DIR or the context's cache_dir is empty, or neither "
                         "XDG_CACHE_HOME nor HOME is set): compiled kernels stay in memory");
    }
    s = dcpattn__nvrtc_compile(ctx, name, r, blob);
    if (s == DCPATTN_STATUS_SUCCESS) {
        *source = "nvrtc";
        if (write_dir >= 0) {
            int e = dcpattn__cache_write(path, key, blob);
            if (!e) {
                dcpattn__write_nvrtc_version(ctx->cache_dirs[write_dir], nvver);
                dcpattn__lock_sweep(ctx->cache_dirs[write_dir], lockpath);
            }
            if (e && !ctx->memory_only_warned) {
                ctx->memory_only_warned = 1;
                dcpattn__log(ctx, DCPATTN_LOG_WARN, "cannot publish %s (%s): kernel kept in memory", path,
                             strerror(e));
            }
        }
    }
    if (write_dir >= 0)
        dcpattn__lock_release(lockfd, lockpath);
    return s;
}

static void dcpattn__compile_info(dcpattn_compile_info *info, const dcpattn__variant *v, const char *source,
                                   double seconds) {
    memset(info, 0, sizeof *info);
    info->name = v->name;
    info->seconds = seconds;
    info->registers = v->registers;
    info->shared_bytes = v->shared_bytes;
    info->spill_bytes = v->spill_bytes;
    info->dynamic_shared_bytes = v->smem;
    info->source = source;
}

/* A loaded attention variant's optional kernels, NAME_balanced and NAME_balanced_stacked (NULL
   where the module has none). Where the driver lists a module's kernels (at most 8 here: a
   module has up to 3) they are taken from that list, so that no lookup fails (compute-sanitizer
   reports a failed one as an API error); an older driver is asked for each by name. */
static void dcpattn__optional_kernels(dcpattn__variant *v, const char *name) {
    static const char *const suffix[2] = {"_balanced", "_balanced_stacked"};
    dcpattn__CUfunction *dst[2], fns[8];
    char want[2][192];
    unsigned n = 0, i;
    int k;
    dst[0] = &v->fn_balanced;
    dst[1] = &v->fn_balanced_stacked;
    for (k = 0; k < 2; k++) {
        snprintf(want[k], sizeof want[k], "%s%s", name, suffix[k]);
        *dst[k] = NULL;
    }
    if (dcpattn__cu.ModuleGetFunctionCount && dcpattn__cu.ModuleEnumerateFunctions && dcpattn__cu.FuncGetName &&
        dcpattn__cu.ModuleGetFunctionCount(&n, v->module) == 0 && n <= 8 &&
        dcpattn__cu.ModuleEnumerateFunctions(fns, n, v->module) == 0) {
        for (i = 0; i < n; i++) {
            const char *got = NULL;
            if (dcpattn__cu.FuncGetName(&got, fns[i]) != 0 || !got)
                continue;
            for (k = 0; k < 2; k++)
                if (strcmp(got, want[k]) == 0)
                    *dst[k] = fns[i];
        }
        return;
    }
    for (k = 0; k < 2; k++)
        if (dcpattn__cu.ModuleGetFunction(dst[k], v->module, want[k]) != 0)
            *dst[k] = NULL;
}

/* Render, obtain and (unless compile-only) load a variant; the caller holds ctx->lock. */
static dcpattn_status dcpattn__ensure(dcpattn_context *ctx, const char *name, dcpattn__variant **out,
                                      dcpattn_compile_info *info) {
    dcpattn__rendered r;
    dcpattn__blob blob;
    dcpattn__variant v, *found;
    const char *source = "memory";
    double t0 = dcpattn__now();
    dcpattn_status s;
    if ((found = dcpattn__find(ctx, name)) != NULL) {
        if (out)
            *out = found;
        if (info)
            dcpattn__compile_info(info, found, source, 0);
        return DCPATTN_STATUS_SUCCESS;
    }
    DCPATTN__TRY(dcpattn__render(ctx, name, &r));
    s = dcpattn__obtain(ctx, name, &r, &blob, &source);
    if (s) {
        free(r.source);
        return s;
    }
    /* obtain lets go of ctx->lock while it waits for another compile: another thread of this
       context may have loaded the variant meanwhile */
    if ((found = dcpattn__find(ctx, name)) != NULL) {
        free(blob.data);
        free(r.source);
        if (out)
            *out = found;
        if (info)
            dcpattn__compile_info(info, found, "memory", dcpattn__now() - t0);
        return DCPATTN_STATUS_SUCCESS;
    }
    v = r.meta;
    v.registers = blob.registers;
    v.shared_bytes = blob.shared_bytes;
    v.spill_bytes = blob.spill_bytes;
    free(r.source);
    if (!ctx->compile_only) {
        dcpattn__CUcontext prev;
        s = dcpattn__cu_check(dcpattn__cu.CtxPushCurrent(ctx->cuctx), "cuCtxPushCurrent");
        if (!s) {
            s = dcpattn__cu_check(dcpattn__cu.ModuleLoadData(&v.module, blob.data), "cuModuleLoadData");
            if (!s)
                s = dcpattn__cu_check(dcpattn__cu.ModuleGetFunction(&v.fn, v.module, name), "cuModuleGetFunction");
            if (!s && (strncmp(name, "mla_", 4) == 0 || strncmp(name, "gqa_", 4) == 0))
                dcpattn__optional_kernels(&v, name);
            if (!s && v.smem > ctx->limits.smem_per_block) {
                /* every kernel of the module (the ones it has) takes the variant's shared memory */
                const dcpattn__CUfunction fns[3] = {v.fn, v.fn_balanced, v.fn_balanced_stacked};
                int i;
                if (v.smem > ctx->limits.smem_per_block_optin)
                    s = dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "%s needs %d bytes of shared memory; the device allows %d",
                                      name, v.smem, ctx->limits.smem_per_block_optin);
                for (i = 0; i < 3 && !s; i++)
                    if (fns[i])
                        s = dcpattn__cu_check(dcpattn__cu.FuncSetAttribute(fns[i], DCPATTN__CU_FUNC_MAX_DYNAMIC_SMEM, v.smem),
                                              "cuFuncSetAttribute");
            }
            if (!s && !v.registers) {
                /* PTX (a virtual arch): ptxas ran in the driver, which knows what it used */
                dcpattn__cu.FuncGetAttribute(&v.registers, DCPATTN__CU_FUNC_NUM_REGS, v.fn);
                dcpattn__cu.FuncGetAttribute(&v.shared_bytes, DCPATTN__CU_FUNC_SMEM_STATIC, v.fn);
            }
            if (s && v.module)
                dcpattn__cu.ModuleUnload(v.module);
            dcpattn__cu.CtxPopCurrent(&prev);
        }
    }
    free(blob.data);
    if (s)
        return s;
    v.name = dcpattn__strdup(name);
    if (!v.name || !(found = dcpattn__insert(ctx, &v))) {
        free(v.name);
        return dcpattn__fail(DCPATTN_STATUS_OUT_OF_MEMORY, "function table");
    }
    if (out)
        *out = found;
    {
        double secs = dcpattn__now() - t0;
        dcpattn__log(ctx, DCPATTN_LOG_INFO, "%s: %s in %.3f s, %d registers, %d bytes smem, %d bytes spilled", name,
                     source, secs, v.registers, v.shared_bytes, v.spill_bytes);
        if (info)
            dcpattn__compile_info(info, found, source, secs);
    }
    return DCPATTN_STATUS_SUCCESS;
}

/* ============================ context lifecycle ============================ */
/* The device's own limits; one the driver cannot give keeps the value of the device's arch. */
static dcpattn__sm_limits dcpattn__device_limits(dcpattn__CUdevice dev, int arch) {
    dcpattn__sm_limits l = dcpattn__limits_of_arch(arch);
    int *const field[] = {&l.smem_per_block, &l.smem_per_block_optin, &l.smem_per_sm,
                          &l.smem_reserved,  &l.regs_per_sm,          &l.threads_per_sm};
    static const int attr[] = {DCPATTN__CU_DEV_SMEM_PER_BLOCK, DCPATTN__CU_DEV_SMEM_PER_BLOCK_OPTIN,
                               DCPATTN__CU_DEV_SMEM_PER_SM,    DCPATTN__CU_DEV_SMEM_RESERVED_PER_BLOCK,
                               DCPATTN__CU_DEV_REGS_PER_SM,    DCPATTN__CU_DEV_THREADS_PER_SM};
    int i, v;
    for (i = 0; i < 6; i++)
        if (dcpattn__cu.DeviceGetAttribute(&v, attr[i], dev) == 0 && v > 0)
            *field[i] = v;
    return l;
}

static int dcpattn__env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    return (e && *e) ? atoi(e) : dflt;
}

static void dcpattn__context_free(dcpattn_context *ctx) {
    int i;
    if (!ctx)
        return;
    for (i = 0; i < ctx->table_cap; i++) {
        if (!ctx->table[i])
            continue;
        if (ctx->table[i]->module && dcpattn__cu.ModuleUnload)
            dcpattn__cu.ModuleUnload(ctx->table[i]->module);
        free(ctx->table[i]->name);
        free(ctx->table[i]);
    }
    free(ctx->table);
    for (i = 0; i < ctx->num_defaults; i++)
        free(ctx->defaults[i]);
    free(ctx->defaults);
    if (ctx->L)
        lua_close(ctx->L);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

dcpattn_status dcpattn_context_create(const dcpattn_context_desc *desc, dcpattn_context **out) {
    dcpattn_context_desc d;
    dcpattn_context *ctx;
    const char *data;
    char probe[1100];
    dcpattn_status s;
    if (!out)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "context_create: out is NULL");
    *out = NULL;
    memset(&d, 0, sizeof d);
    if (desc)
        d = *desc;
    if (d.num_sms < 0)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "context_create: num_sms = %d (must be >= 0)", d.num_sms);
    ctx = (dcpattn_context *)calloc(1, sizeof *ctx);
    if (!ctx)
        return dcpattn__fail(DCPATTN_STATUS_OUT_OF_MEMORY, "context_create");
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->log = d.log;
    ctx->log_user = d.log_user;
    ctx->log_level = d.log_level > 0 ? d.log_level : dcpattn__env_int("DCPATTN_LOG_LEVEL", 0);
    ctx->compile_only = d.compile_only;
#ifdef DCPATTN_NO_JIT
    ctx->no_jit = 1;
#else
    ctx->no_jit = dcpattn__env_int("DCPATTN_NO_JIT", 0) != 0;
#endif
    data = d.data_dir;
    if (!data || !*data)
        data = getenv("DCPATTN_HOME");
    if (!data || !*data)
        data = DCPATTN_DATA_DIR;
    if (!*data || strlen(data) >= sizeof ctx->data_dir) {
        dcpattn__context_free(ctx);
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "context_create: no data directory (desc.data_dir, $DCPATTN_HOME or DCPATTN_DATA_DIR)");
    }
    snprintf(ctx->data_dir, sizeof ctx->data_dir, "%s", data);
    snprintf(probe, sizeof probe, "%s/gen/dcpattn/init.lua", ctx->data_dir);
    if (access(probe, R_OK) != 0) {
        dcpattn__context_free(ctx);
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "context_create: data directory '%s' has no %s", data,
                             "gen/dcpattn/init.lua");
    }
    if (d.aot_dir)
        snprintf(ctx->aot_dir, sizeof ctx->aot_dir, "%s", d.aot_dir);
#ifdef DCPATTN_AOT_DIR
    else
        snprintf(ctx->aot_dir, sizeof ctx->aot_dir, "%s", DCPATTN_AOT_DIR);
#endif
    if (!ctx->compile_only) {
        dcpattn__CUdevice dev;
        int major = 0, minor = 0;
        s = dcpattn__load_driver();
        if (!s)
            s = dcpattn__cu_check(dcpattn__cu.CtxGetCurrent(&ctx->cuctx), "cuCtxGetCurrent");
        if (!s && !ctx->cuctx)
            s = dcpattn__fail(DCPATTN_STATUS_NO_CONTEXT,
                              "context_create: no current CUDA context (call cudaSetDevice and cudaFree(0) first)");
        if (!s)
            s = dcpattn__cu_check(dcpattn__cu.CtxGetDevice(&dev), "cuCtxGetDevice");
        if (!s) {
            dcpattn__cu.DeviceGetAttribute(&major, DCPATTN__CU_DEV_CC_MAJOR, dev);
            dcpattn__cu.DeviceGetAttribute(&minor, DCPATTN__CU_DEV_CC_MINOR, dev);
            dcpattn__cu.DeviceGetAttribute(&ctx->num_sms, DCPATTN__CU_DEV_SM_COUNT, dev);
            snprintf(ctx->arch, sizeof ctx->arch, "sm_%d%d%s", major, minor, major == 9 ? "a" : "");
            ctx->limits = dcpattn__device_limits(dev, 10 * major + minor);
        }
        if (s) {
            dcpattn__context_free(ctx);
            return s;
        }
    }
    ctx->arch_given = ctx->arch[0] || (d.arch && *d.arch);
    if (d.arch && *d.arch)
        snprintf(ctx->arch, sizeof ctx->arch, "%s", d.arch);
    else if (!ctx->arch[0])
        snprintf(ctx->arch, sizeof ctx->arch, "sm_90a");
    if (ctx->compile_only)
        ctx->limits = dcpattn__limits_of_arch(dcpattn__arch_num(ctx));
    if (d.num_sms)
        ctx->num_sms = d.num_sms;
    ctx->lock_timeout_ms = d.lock_timeout_ms ? d.lock_timeout_ms : dcpattn__env_int("DCPATTN_LOCK_TIMEOUT_MS", 10000);
    dcpattn__cache_dirs(ctx, d.cache_dir);
    s = dcpattn__lua_open(ctx);
    if (s) {
        dcpattn__context_free(ctx);
        return s;
    }
    *out = ctx;
    return dcpattn__done(DCPATTN_STATUS_SUCCESS);
}

void dcpattn_context_destroy(dcpattn_context *ctx) {
    dcpattn__CUcontext prev;
    if (!ctx)
        return;
    if (!ctx->compile_only && dcpattn__cu.CtxPushCurrent && dcpattn__cu.CtxPushCurrent(ctx->cuctx) == 0) {
        dcpattn__context_free(ctx);
        dcpattn__cu.CtxPopCurrent(&prev);
        return;
    }
    dcpattn__context_free(ctx);
}

dcpattn_status dcpattn_default_variants(dcpattn_context *ctx, const char *const **names, int *count) {
    dcpattn_status s = DCPATTN_STATUS_SUCCESS;
    if (!ctx || !names || !count)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "default_variants: NULL argument");
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->defaults) {
        dcpattn__lua_fn(ctx, "default_set");
        s = dcpattn__lua_pcall(ctx, 0, 1);
        if (!s) {
            int i, n = (int)luaL_len(ctx->L, -1);
            ctx->defaults = (char **)calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
            for (i = 0; ctx->defaults && i < n; i++) {
                lua_geti(ctx->L, -1, i + 1);
                ctx->defaults[i] = dcpattn__strdup(lua_tostring(ctx->L, -1));
                lua_pop(ctx->L, 1);
            }
            ctx->num_defaults = ctx->defaults ? n : 0;
            lua_pop(ctx->L, 1);
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    *names = (const char *const *)ctx->defaults;
    *count = ctx->num_defaults;
    return dcpattn__done(s);
}

dcpattn_status dcpattn_precompile(dcpattn_context *ctx, const char *const *names, int n,
                                  dcpattn_progress_fn progress, void *user) {
    int i;
    if (!ctx || (n > 0 && !names) || n < 0)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "precompile: NULL context or names, or n = %d", n);
    for (i = 0; i < n; i++) {
        dcpattn_compile_info info;
        dcpattn_status s;
        if (!names[i])
            return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "precompile: names[%d] is NULL", i);
        pthread_mutex_lock(&ctx->lock);
        s = dcpattn__ensure(ctx, names[i], NULL, &info);
        pthread_mutex_unlock(&ctx->lock);
        if (s)
            return s;
        if (progress)
            progress(user, &info);
    }
    return dcpattn__done(DCPATTN_STATUS_SUCCESS);
}

dcpattn_status dcpattn_variant_source(dcpattn_context *ctx, const char *name, char **source) {
    dcpattn__rendered r;
    dcpattn_status s;
    if (!ctx || !name || !source)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "variant_source: NULL argument");
    *source = NULL;
    pthread_mutex_lock(&ctx->lock);
    s = dcpattn__render(ctx, name, &r);
    pthread_mutex_unlock(&ctx->lock);
    if (!s)
        *source = r.source;
    return dcpattn__done(s);
}

int dcpattn_variant_loaded(dcpattn_context *ctx, const char *name) {
    int r;
    if (!ctx || !name)
        return 0;
    pthread_mutex_lock(&ctx->lock);
    r = dcpattn__find(ctx, name) != NULL;
    pthread_mutex_unlock(&ctx->lock);
    return r;
}

/* A variant for the run path: loaded already, or loaded now unless the stream is being
   captured (compiling or loading would break the capture). */
static dcpattn_status dcpattn__variant_for_run_locked(dcpattn_context *ctx, const char *name, dcpattn_stream stream,
                                                      dcpattn__variant **out) {
    int capturing = 0;
    *out = dcpattn__find(ctx, name);
    if (*out)
        return DCPATTN_STATUS_SUCCESS;
    if (dcpattn__cu.StreamIsCapturing && dcpattn__cu.StreamIsCapturing(stream, &capturing) == 0 && capturing)
        return dcpattn__fail(DCPATTN_STATUS_CAPTURE,
                             "variant %s is not loaded and the stream is being captured: plan or precompile "
                             "before capture", name);
    return dcpattn__ensure(ctx, name, out, NULL);
}

/* =============================== validation =============================== */
static int dcpattn__dtype_size(dcpattn_dtype t) {
    return t == DCPATTN_FP32 ? 4 : t == DCPATTN_FP8_E4M3 || t == DCPATTN_FP8_DS_MLA ? 1 : 2;
}
/* The generator's canonical names (gen/dcpattn/types.lua). */
static const char *dcpattn__dtype_name(dcpattn_dtype t) {
    return t == DCPATTN_FP32       ? "fp32"
           : t == DCPATTN_FP16       ? "fp16"
           : t == DCPATTN_FP8_E4M3   ? "e4m3"
           : t == DCPATTN_FP8_DS_MLA ? "fp8ds"
                                     : "bf16";
}
static int dcpattn__aligned(const void *p, unsigned a) { return ((uintptr_t)p & (uintptr_t)(a - 1)) == 0; }

/* a*b (+c) into int64 with overflow detection */
static int dcpattn__mul(int64_t a, int64_t b, int64_t *r) {
    return __builtin_mul_overflow(a, b, r) ? 0 : 1;
}

/* A stride left 0 (contiguous) becomes n * inner where both are positive and the product
   fits; otherwise it stays 0, and validation names it. */
static void dcpattn__default_stride(int64_t *stride, int64_t n, int64_t inner) {
    int64_t r;
    if (*stride == 0 && n > 0 && inner > 0 && dcpattn__mul(n, inner, &r))
        *stride = r;
}
/* The default strides of a [rows, heads, inner] tensor. */
static void dcpattn__default_rows(int64_t *stride_t, int64_t *stride_h, int64_t heads, int64_t inner) {
    dcpattn__default_stride(stride_h, 1, inner);
    dcpattn__default_stride(stride_t, heads, *stride_h);
}

/* Span in elements of a [n0, n1, inner] tensor with strides s0, s1; 0 on overflow. */
static int dcpattn__span(int64_t n0, int64_t s0, int64_t n1, int64_t s1, int64_t inner, int64_t *r) {
    int64_t a, b;
    if (n0 <= 0 || n1 <= 0)
        return (*r = 0), 1;
    if (!dcpattn__mul(n0 - 1, s0, &a) || !dcpattn__mul(n1 - 1, s1, &b) || __builtin_add_overflow(a, b, r) ||
        __builtin_add_overflow(*r, inner, r))
        return 0;
    return 1;
}

static int dcpattn__overlap(const void *a, int64_t abytes, const void *b, int64_t bbytes) {
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    if (!a || !b || abytes <= 0 || bbytes <= 0)
        return 0;
    return a0 < b0 + (uintptr_t)bbytes && b0 < a0 + (uintptr_t)abytes;
}

/* Strides after their defaults: none negative, and none left 0 where 0 meant contiguous (its
   default, a product of sizes and inner strides, overflowed). The first `zero_ok` strides may
   be 0 (the size they multiply may be 0). */
static dcpattn_status dcpattn__check_strides(const char *who, const int64_t *st, const char *const *names, int n,
                                             int zero_ok) {
    int i;
    for (i = 0; i < n; i++)
        if (st[i] < 0)
            return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "%s: %s = %lld (must be >= 0; 0: the default)", who,
                                 names[i], (long long)st[i]);
    for (i = zero_ok; i < n; i++)
        if (st[i] == 0)
            return dcpattn__fail(DCPATTN_STATUS_OVERFLOW,
                                 "%s: %s = 0 (contiguous): the sizes and strides it spans overflow 64 bits", who,
                                 names[i]);
    return DCPATTN_STATUS_SUCCESS;
}

/* The eight strides of a state set (merge and combine arguments: o, lse, out, lse_out) after
   their defaults, and the 16-byte steps of o's and out's. */
#define DCPATTN__STATE_STRIDES(a)                                                                        \
    {(a)->o_stride_t,   (a)->o_stride_h,   (a)->lse_stride_t,     (a)->lse_stride_h,                     \
     (a)->out_stride_t, (a)->out_stride_h, (a)->lse_out_stride_t, (a)->lse_out_stride_h}
static dcpattn_status dcpattn__check_state_strides(const char *who, const int64_t st[8], dcpattn_dtype in,
                                                   dcpattn_dtype out) {
    static const char *const nm[] = {"o_stride_t",   "o_stride_h",   "lse_stride_t",     "lse_stride_h",
                                     "out_stride_t", "out_stride_h", "lse_out_stride_t", "lse_out_stride_h"};
    const int64_t vin = 16 / dcpattn__dtype_size(in), vout = 16 / dcpattn__dtype_size(out);
    DCPATTN__TRY(dcpattn__check_strides(who, st, nm, 8, 0));
    if (st[0] % vin || st[1] % vin)
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED,
                             "%s: o_stride_t = %lld, o_stride_h = %lld (must be multiples of 16 bytes of %s)", who,
                             (long long)st[0], (long long)st[1], dcpattn__dtype_name(in));
    if (st[4] % vout || st[5] % vout)
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED,
                             "%s: out_stride_t = %lld, out_stride_h = %lld (must be multiples of 16 bytes of %s)", who,
                             (long long)st[4], (long long)st[5], dcpattn__dtype_name(out));
    return DCPATTN_STATUS_SUCCESS;
}
/* The extents in elements of a state set's o, lse (heads) and out, lse_out (out_heads) over
   `rows` rows, small enough to count bytes and add an address; else an overflow status. */
static dcpattn_status dcpattn__state_spans(const char *who, const int64_t st[8], int64_t rows, int64_t heads,
                                           int64_t out_heads, int64_t head_dim, int64_t *o, int64_t *lse, int64_t *out,
                                           int64_t *lse_out) {
    if (!dcpattn__span(rows, st[0], heads, st[1], head_dim, o) || !dcpattn__span(rows, st[2], heads, st[3], 1, lse) ||
        !dcpattn__span(rows, st[4], out_heads, st[5], head_dim, out) ||
        !dcpattn__span(rows, st[6], out_heads, st[7], 1, lse_out) || *o > INT64_MAX / 8 || *lse > INT64_MAX / 8 ||
        *out > INT64_MAX / 8 || *lse_out > INT64_MAX / 8)
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW,
                             "%s: tensor extents overflow 64 bits (rows = %lld, o_stride_t = %lld, lse_stride_t = %lld, "
                             "out_stride_t = %lld, lse_out_stride_t = %lld)",
                             who, (long long)rows, (long long)st[0], (long long)st[2], (long long)st[4],
                             (long long)st[6]);
    return DCPATTN_STATUS_SUCCESS;
}

/* 1 if two elements of the [n0, n1, inner] box with strides (s0, s1, 1) may share an address:
   taken by stride, each dimension must step over all that the smaller ones span. Written by
   a kernel, such a box is a race: two threads store to one element. Spans must not
   overflow (dcpattn__span succeeded). */
static int dcpattn__self_overlap(int64_t n0, int64_t s0, int64_t n1, int64_t s1, int64_t inner) {
    int64_t n[2], st[2], span = inner;
    int i, small = s1 < s0;
    n[0] = small ? n1 : n0, st[0] = small ? s1 : s0;
    n[1] = small ? n0 : n1, st[1] = small ? s0 : s1;
    for (i = 0; i < 2; i++) {
        if (n[i] <= 1)
            continue;
        if (st[i] < span)
            return 1;
        span += (n[i] - 1) * st[i];
    }
    return 0;
}

/* Zero means default in merge arguments: bf16 in, out as in, contiguous strides. */
static void dcpattn__merge_defaults(dcpattn_merge_args *a) {
    if (a->in_dtype == DCPATTN_DTYPE_DEFAULT)
        a->in_dtype = DCPATTN_BF16;
    if (a->out_dtype == DCPATTN_DTYPE_DEFAULT)
        a->out_dtype = a->in_dtype;
    dcpattn__default_rows(&a->o_stride_t, &a->o_stride_h, a->heads, a->head_dim);
    dcpattn__default_rows(&a->lse_stride_t, &a->lse_stride_h, a->heads, 1);
    dcpattn__default_rows(&a->out_stride_t, &a->out_stride_h, a->heads, a->head_dim);
    dcpattn__default_rows(&a->lse_out_stride_t, &a->lse_out_stride_h, a->heads, 1);
}

/* Merge arguments with their defaults (dcpattn__merge_defaults) in *a, checked. */
static dcpattn_status dcpattn__merge_normalize(const dcpattn_merge_args *in, dcpattn_merge_args *a) {
    int i, insz, outsz;
    int64_t span_o, span_out, span_lse, span_lse_out, tmp;
    if (!in)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: args is NULL");
    *a = *in;
    dcpattn__merge_defaults(a);
    if (a->num_states < 1 || a->num_states > DCPATTN_MAX_MERGE_STATES)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: num_states = %d (must be 1..%d)",
                             a->num_states, DCPATTN_MAX_MERGE_STATES);
    if (a->rows < 0 || a->heads < 1 || a->head_dim < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "merge: rows = %d (must be >= 0), heads = %d, head_dim = %d (must be >= 1)", a->rows,
                             a->heads, a->head_dim);
    if (a->in_dtype < DCPATTN_BF16 || a->in_dtype > DCPATTN_FP32 || a->out_dtype < DCPATTN_BF16 ||
        a->out_dtype > DCPATTN_FP32)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: in_dtype = %d, out_dtype = %d (bf16, fp16, fp32)",
                             (int)a->in_dtype, (int)a->out_dtype);
    if (a->lse_base2_in != 0 && a->lse_base2_in != 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: lse_base2_in = %d (must be 0 or 1)", a->lse_base2_in);
    if (a->lse_base2_out != 0 && a->lse_base2_out != 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: lse_base2_out = %d (must be 0 or 1)",
                             a->lse_base2_out);
    insz = dcpattn__dtype_size(a->in_dtype);
    outsz = dcpattn__dtype_size(a->out_dtype);
    if (a->head_dim % (16 / insz) || a->head_dim % (16 / outsz))
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "merge: head_dim = %d is not a multiple of 16 bytes for %s in / %s out", a->head_dim,
                             dcpattn__dtype_name(a->in_dtype), dcpattn__dtype_name(a->out_dtype));
    if (!dcpattn__mul(a->rows, a->heads, &tmp) || tmp > INT32_MAX || !dcpattn__mul(tmp, a->head_dim, &tmp))
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "merge: rows*heads*head_dim = %d*%d*%d overflows", a->rows,
                             a->heads, a->head_dim);
    {
        const int64_t st[8] = DCPATTN__STATE_STRIDES(a);
        DCPATTN__TRY(dcpattn__check_state_strides("merge", st, a->in_dtype, a->out_dtype));
    }
    if (a->rows == 0) /* nothing to do: the pointers are never read */
        return DCPATTN_STATUS_SUCCESS;
    if (!a->o || !a->lse)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: %s = NULL (a host array of num_states pointers)",
                             !a->o ? "o" : "lse");
    if (!a->out)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: out = NULL");
    if (!dcpattn__aligned(a->out, 16))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "merge: out = %p is not 16-byte aligned", a->out);
    if (a->lse_out && !dcpattn__aligned(a->lse_out, 4))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "merge: lse_out = %p is not 4-byte aligned", (void *)a->lse_out);
    {
        const int64_t st[8] = DCPATTN__STATE_STRIDES(a);
        DCPATTN__TRY(dcpattn__state_spans("merge", st, a->rows, a->heads, a->heads, a->head_dim, &span_o, &span_lse,
                                          &span_out, &span_lse_out));
    }
    if (dcpattn__self_overlap(a->rows, a->out_stride_t, a->heads, a->out_stride_h, a->head_dim))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING,
                             "merge: out rows or heads overlap one another (out_stride_t = %lld, out_stride_h = %lld, "
                             "heads = %d, head_dim = %d)",
                             (long long)a->out_stride_t, (long long)a->out_stride_h, a->heads, a->head_dim);
    if (a->lse_out && dcpattn__self_overlap(a->rows, a->lse_out_stride_t, a->heads, a->lse_out_stride_h, 1))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING,
                             "merge: lse_out elements overlap one another (lse_out_stride_t = %lld, lse_out_stride_h = "
                             "%lld, heads = %d)",
                             (long long)a->lse_out_stride_t, (long long)a->lse_out_stride_h, a->heads);
    if (a->lse_out && dcpattn__overlap(a->lse_out, span_lse_out * 4, a->out, span_out * outsz))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "merge: lse_out = %p overlaps out = %p", (void *)a->lse_out,
                             a->out);
    for (i = 0; i < a->num_states; i++) {
        if (!a->o[i] || !a->lse[i])
            return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "merge: %s[%d] = NULL", !a->o[i] ? "o" : "lse", i);
        if (!dcpattn__aligned(a->o[i], 16))
            return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "merge: o[%d] = %p is not 16-byte aligned", i, a->o[i]);
        if (!dcpattn__aligned(a->lse[i], 4))
            return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "merge: lse[%d] = %p is not 4-byte aligned", i,
                                 (const void *)a->lse[i]);
        if (a->lse_out && dcpattn__overlap(a->lse_out, span_lse_out * 4, a->lse[i], span_lse * 4))
            return dcpattn__fail(DCPATTN_STATUS_ALIASING, "merge: lse_out = %p overlaps lse[%d] = %p",
                                 (void *)a->lse_out, i, (const void *)a->lse[i]);
        if (a->lse_out && dcpattn__overlap(a->lse_out, span_lse_out * 4, a->o[i], span_o * insz))
            return dcpattn__fail(DCPATTN_STATUS_ALIASING, "merge: lse_out = %p overlaps o[%d] = %p",
                                 (void *)a->lse_out, i, a->o[i]);
        if (dcpattn__overlap(a->out, span_out * outsz, a->lse[i], span_lse * 4))
            return dcpattn__fail(DCPATTN_STATUS_ALIASING, "merge: out = %p overlaps lse[%d] = %p", a->out, i,
                                 (const void *)a->lse[i]);
        if (i == 0 && a->out == a->o[0]) {
            if (insz != outsz || a->out_stride_t != a->o_stride_t || a->out_stride_h != a->o_stride_h)
                return dcpattn__fail(DCPATTN_STATUS_ALIASING,
                                     "merge: out = o[0] = %p in place, but out_dtype = %s, out_stride_t = %lld, "
                                     "out_stride_h = %lld differ from in_dtype = %s, o_stride_t = %lld, o_stride_h = %lld",
                                     a->out, dcpattn__dtype_name(a->out_dtype), (long long)a->out_stride_t,
                                     (long long)a->out_stride_h, dcpattn__dtype_name(a->in_dtype),
                                     (long long)a->o_stride_t, (long long)a->o_stride_h);
            continue;
        }
        if (dcpattn__overlap(a->out, span_out * outsz, a->o[i], span_o * insz))
            return dcpattn__fail(DCPATTN_STATUS_ALIASING, "merge: out = %p overlaps o[%d] = %p", a->out, i, a->o[i]);
    }
    return DCPATTN_STATUS_SUCCESS;
}

dcpattn_status dcpattn_merge_validate(const dcpattn_merge_args *args) {
    dcpattn_merge_args a;
    return dcpattn__done(dcpattn__merge_normalize(args, &a));
}

/* One launch of kernel fn of variant v (v->fn, or an other entry point of its module, with
   the same block and shared memory); cluster_x > 1 cuts grid.x into clusters of that many
   CTAs (cuLaunchKernelEx with the cluster dimension attribute). */
static dcpattn_status dcpattn__launch_fn(const dcpattn__variant *v, dcpattn__CUfunction fn, unsigned gx, unsigned gy,
                                         unsigned gz, unsigned cluster_x, void *params, dcpattn_stream stream,
                                         const char *what) {
    dcpattn__CUlaunchAttribute attr;
    dcpattn__CUlaunchConfig cfg;
    void *args[1];
    args[0] = params;
    if (cluster_x <= 1)
        return dcpattn__cu_check(dcpattn__cu.LaunchKernel(fn, gx, gy, gz, (unsigned)v->threads, 1, 1,
                                                          (unsigned)v->smem, stream, args, NULL),
                                 what);
    memset(&attr, 0, sizeof attr);
    attr.id = DCPATTN__CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.cluster.x = cluster_x;
    attr.value.cluster.y = 1;
    attr.value.cluster.z = 1;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid_x = gx;
    cfg.grid_y = gy;
    cfg.grid_z = gz;
    cfg.block_x = (unsigned)v->threads;
    cfg.block_y = 1;
    cfg.block_z = 1;
    cfg.shared_bytes = (unsigned)v->smem;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.num_attrs = 1;
    return dcpattn__cu_check(dcpattn__cu.LaunchKernelEx(&cfg, fn, args, NULL), what);
}
static dcpattn_status dcpattn__launch(const dcpattn__variant *v, unsigned gx, unsigned gy, unsigned gz,
                                      unsigned cluster_x, void *params, dcpattn_stream stream, const char *what) {
    return dcpattn__launch_fn(v, v->fn, gx, gy, gz, cluster_x, params, stream, what);
}

/* The kernel's parameter block for normalized merge arguments (state pointers only where
   a->o and a->lse are given: a plan fills them per run). */
static void dcpattn__merge_kparams(const dcpattn_merge_args *a, const int *rows_limit, dcpattn_merge_kparams *kp) {
    int i;
    memset(kp, 0, sizeof *kp);
    for (i = 0; a->o && a->lse && i < a->num_states; i++) {
        kp->o[i] = a->o[i];
        kp->lse[i] = a->lse[i];
    }
    kp->out = a->out;
    kp->lse_out = a->lse_out;
    kp->o_st = a->o_stride_t;
    kp->o_sh = a->o_stride_h;
    kp->lse_st = a->lse_stride_t;
    kp->lse_sh = a->lse_stride_h;
    kp->out_st = a->out_stride_t;
    kp->out_sh = a->out_stride_h;
    kp->lse_out_st = a->lse_out_stride_t;
    kp->lse_out_sh = a->lse_out_stride_h;
    kp->rows_limit = rows_limit;
    kp->n = a->num_states;
    kp->rows = a->rows;
    kp->heads = a->heads;
    kp->head_dim = a->head_dim;
    kp->lse_base2_in = a->lse_base2_in;
    kp->lse_base2_out = a->lse_base2_out;
}

/* Blocks of a merge launch: each thread takes v->items 16-byte input vectors of the
   (row, head, vector) space. */
static unsigned dcpattn__merge_grid(const dcpattn__variant *v, const dcpattn_merge_args *a) {
    const int64_t vectors = (int64_t)a->rows * a->heads * (a->head_dim / (16 / dcpattn__dtype_size(a->in_dtype)));
    const int64_t threads = (vectors + v->items - 1) / v->items;
    return (unsigned)((threads + v->threads - 1) / v->threads);
}

/* Launches the merge of a normalized argument set with a loaded variant. */
static dcpattn_status dcpattn__merge_launch(const dcpattn__variant *v, const dcpattn_merge_args *a,
                                            const int *rows_limit, dcpattn_stream stream) {
    dcpattn_merge_kparams kp;
    dcpattn__merge_kparams(a, rows_limit, &kp);
    return dcpattn__launch(v, dcpattn__merge_grid(v, a), 1, 1, 1, &kp, stream, "merge launch");
}

/* The two kernel families named by (in dtype, out dtype) alone. */
enum { DCPATTN__MERGE = 0, DCPATTN__RESCALE = 1 };

/* Canonical name of the merge or combine-rescale variant in -> out, from
   the generator (the one place names are made), memoized per context. Called with ctx->lock. */
static dcpattn_status dcpattn__pair_name(dcpattn_context *ctx, int family, dcpattn_dtype in, dcpattn_dtype out,
                                         char *buf, size_t n) {
    lua_State *L = ctx->L;
    char *memo = ctx->pair_names[family][in][out];
    if (memo[0]) {
        snprintf(buf, n, "%s", memo);
        return DCPATTN_STATUS_SUCCESS;
    }
    dcpattn__lua_fn(ctx, "name");
    lua_createtable(L, 0, 3);
    lua_pushstring(L, family == DCPATTN__RESCALE ? "combine" : "merge");
    lua_setfield(L, -2, "family");
    lua_pushstring(L, dcpattn__dtype_name(in));
    lua_setfield(L, -2, "in_dtype");
    lua_pushstring(L, dcpattn__dtype_name(out));
    lua_setfield(L, -2, "out_dtype");
    DCPATTN__TRY(dcpattn__lua_pcall(ctx, 1, 2));
    if (!lua_isstring(L, -2)) {
        dcpattn_status s = dcpattn__fail(DCPATTN_STATUS_GENERATOR, "%s", lua_tostring(L, -1));
        lua_pop(L, 2);
        return s;
    }
    snprintf(memo, sizeof ctx->pair_names[0][0][0], "%s", lua_tostring(L, -2));
    snprintf(buf, n, "%s", memo);
    lua_pop(L, 2);
    return DCPATTN_STATUS_SUCCESS;
}

/* The merge or combine-rescale variant in -> out for a run on `stream`
   (found, loaded or compiled), in one trip through the context lock. */
static dcpattn_status dcpattn__pair_variant(dcpattn_context *ctx, int family, dcpattn_dtype in, dcpattn_dtype out,
                                            dcpattn_stream stream, dcpattn__variant **v) {
    char name[64];
    dcpattn_status s;
    pthread_mutex_lock(&ctx->lock);
    s = dcpattn__pair_name(ctx, family, in, out, name, sizeof name);
    if (!s)
        s = dcpattn__variant_for_run_locked(ctx, name, stream, v);
    pthread_mutex_unlock(&ctx->lock);
    return s;
}

/* A context that runs kernels: not NULL, not compile-only. */
static dcpattn_status dcpattn__runnable(const dcpattn_context *ctx, const char *who) {
    if (!ctx)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "%s: context is NULL", who);
    if (ctx->compile_only)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "%s: context is compile-only", who);
    return DCPATTN_STATUS_SUCCESS;
}

dcpattn_status dcpattn_merge(dcpattn_context *ctx, const dcpattn_merge_args *args, dcpattn_stream stream) {
    dcpattn_merge_args n;
    dcpattn__variant *v;
    DCPATTN__TRY(dcpattn__runnable(ctx, "merge"));
    DCPATTN__TRY(dcpattn__merge_normalize(args, &n));
    if (n.rows == 0)
        return dcpattn__done(DCPATTN_STATUS_SUCCESS);
    DCPATTN__TRY(dcpattn__pair_variant(ctx, DCPATTN__MERGE, n.in_dtype, n.out_dtype, stream, &v));
    return dcpattn__done(dcpattn__merge_launch(v, &n, NULL, stream));
}

/* =============================== attention =============================== */
/* MLA's balanced kernel scans the batch's lengths with one thread per sequence (mla.cuh). */
#define DCPATTN__MLA_BALANCED_MAX_BATCH 256

struct dcpattn_attn_plan {
    dcpattn_context *ctx;
    dcpattn_attn_desc d; /* normalized */
    dcpattn__variant *attn, *merge;
    int num_splits, row_tiles;
    int cluster; /* the num_splits CTAs of a row tile form a cluster and merge in it */
    int workers; /* the balanced schedule's workers (0: none; see dcpattn_attn_workers) */
    dcpattn__CUfunction fn_balanced; /* its kernel: the variant's fn_balanced, or fn_balanced_stacked */
    size_t flags_offset; /* balanced: where its flags and counters start (after the pieces' states) */
    size_t workspace_bytes, part_offset_lse;
    dcpattn_attn_kparams kp;   /* everything of the desc; run adds the tensors */
    dcpattn_merge_kparams mkp; /* the split merge; run adds workspace, out and lse */
    unsigned merge_grid;
    char variant[128];
};

/* ---- family limits ----
   Which head dims, groups, MLA head counts and page sizes exist is the generator's spec
   (gen/dcpattn/gqa.lua, mla.lua, tiling.lua). dcpattn_attn_desc_validate needs no context,
   hence no generator: it takes the numbers from the block below, which `make limits`
   (gen/dcpattn-gen --limits include/dcpattn.h) writes from the spec. tests/test_gen.lua fails
   while the block and the spec disagree; tests/test_limits.c checks that this validation and
   the generator's selection accept the same descriptors. */
/* ---- BEGIN family limits: generated from gen/dcpattn/ by `make limits`, do not edit ---- */
#define DCPATTN__GQA_HEAD_DIMS 64, 96, 128, 192, 256 /* gqa.lua HEAD_DIMS */
#define DCPATTN__GQA_HEAD_DIMS_TEXT "64, 96, 128, 192 or 256" /* gqa.lua HEAD_DIMS */
#define DCPATTN__GQA_MAX_GROUP 64 /* gqa.lua MAX_GROUP */
#define DCPATTN__MLA_HEAD_DIM 576 /* mla.lua DQK */
#define DCPATTN__MLA_HEAD_DIM_V 512 /* mla.lua DV */
#define DCPATTN__MLA_MAX_HEADS 128 /* mla.lua MAX_HQ */
#define DCPATTN__MLA_PAGE_SIZES 16, 32, 64, 128, 192, 256 /* mla.lua PAGE_SIZES */
#define DCPATTN__MLA_PAGE_SIZES_TEXT "16, 32, 64, 128, 192 or 256" /* mla.lua PAGE_SIZES */
#define DCPATTN__MAX_PAGE_SIZE 256 /* tiling.lua MAX_PAGE_SIZE */
#define DCPATTN__SPARSE_MAX_TOPK 2048 /* sparse.lua MAX_TOPK */
#define DCPATTN__SPARSE_FP8DS_ROW_BYTES 656 /* sparse.lua FP8DS_ROW_BYTES */
/* ---- END family limits ---- */
static const int dcpattn__gqa_head_dims[] = {DCPATTN__GQA_HEAD_DIMS};
static const int dcpattn__mla_page_sizes[] = {DCPATTN__MLA_PAGE_SIZES};
static int dcpattn__in_list(int x, const int *list, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (list[i] == x)
            return 1;
    return 0;
}
/* MLA (DeepSeek absorbed decode): V = the first head_dim_v channels of the K row. */
static int dcpattn__is_mla(const dcpattn_attn_desc *d) {
    return d->head_dim == DCPATTN__MLA_HEAD_DIM && d->head_dim_v == DCPATTN__MLA_HEAD_DIM_V;
}

/* Zero means default in a descriptor: bf16, a cache of the query's dtype, Dv = Dqk,
   1/sqrt(head_dim), one rank, interleave 1, max_total_q = max_batch * max_q_len. A default
   made from invalid values (head_dim <= 0, an overflowing max_batch * max_q_len) stays 0 for
   validation to name. */
static void dcpattn__attn_defaults(dcpattn_attn_desc *d) {
    int64_t t;
    if (d->dtype == DCPATTN_DTYPE_DEFAULT)
        d->dtype = DCPATTN_BF16;
    if (d->kv_dtype == DCPATTN_DTYPE_DEFAULT)
        d->kv_dtype = d->dtype;
    if (d->head_dim_v == 0)
        d->head_dim_v = d->head_dim;
    if (d->softmax_scale == 0.0f && d->head_dim > 0)
        d->softmax_scale = 1.0f / sqrtf((float)d->head_dim);
    if (d->dcp_world == 0)
        d->dcp_world = 1;
    if (d->dcp_interleave == 0)
        d->dcp_interleave = 1;
    if (d->max_total_q == 0 && d->max_batch > 0 && d->max_q_len > 0 && dcpattn__mul(d->max_batch, d->max_q_len, &t) &&
        t <= INT32_MAX)
        d->max_total_q = (int)t;
}

/* ---- sparse MLA: validation (see SPARSE MLA in the API) ---- */
typedef char dcpattn__sparse_topk_limit[DCPATTN__SPARSE_MAX_TOPK == DCPATTN_SPARSE_MAX_TOPK ? 1 : -1];
/* Elements (bytes for FP8_DS_MLA) of one cache row of a descriptor with its defaults. */
static int64_t dcpattn__kv_row(const dcpattn_attn_desc *d) {
    return d->kv_dtype == DCPATTN_FP8_DS_MLA ? DCPATTN__SPARSE_FP8DS_ROW_BYTES : d->head_dim;
}
/* The sparse fields of a descriptor with its defaults; runs before the family checks, which
   then take an FP8_DS_MLA cache as checked here. */
static dcpattn_status dcpattn__sparse_desc_check(const dcpattn_attn_desc *d) {
    int64_t t;
    if (d->sparse_topk < 0 || d->sparse_topk > DCPATTN__SPARSE_MAX_TOPK)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: sparse_topk = %d (0: dense, or 1..%d)",
                             d->sparse_topk, DCPATTN__SPARSE_MAX_TOPK);
    if (d->sparse_topk == 0) {
        if (d->kv_dtype == DCPATTN_FP8_DS_MLA)
            return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                                 "attn: kv_dtype = DCPATTN_FP8_DS_MLA with sparse_topk = 0: the 656-byte layout is "
                                 "read by sparse MLA only");
        return DCPATTN_STATUS_SUCCESS;
    }
    if (!dcpattn__is_mla(d) || d->num_kv_heads != 1)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "attn: sparse_topk = %d needs an MLA descriptor (head_dim %d, head_dim_v %d, num_kv_heads 1), "
                             "got %d, %d, %d",
                             d->sparse_topk, DCPATTN__MLA_HEAD_DIM, DCPATTN__MLA_HEAD_DIM_V, d->head_dim, d->head_dim_v,
                             d->num_kv_heads);
    if (d->kv_dtype != d->dtype && d->kv_dtype != DCPATTN_FP8_E4M3 && d->kv_dtype != DCPATTN_FP8_DS_MLA)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "attn: sparse MLA kv_dtype = %d (0 = dtype = %d, DCPATTN_FP8_E4M3 = %d or "
                             "DCPATTN_FP8_DS_MLA = %d)",
                             (int)d->kv_dtype, (int)d->dtype, (int)DCPATTN_FP8_E4M3, (int)DCPATTN_FP8_DS_MLA);
    if (d->kv_dtype == DCPATTN_FP8_DS_MLA && d->dtype != DCPATTN_BF16)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "attn: kv_dtype = DCPATTN_FP8_DS_MLA with dtype = %d: its RoPE part is bf16, so q and out "
                             "must be bf16 (%d)",
                             (int)d->dtype, (int)DCPATTN_BF16);
    if (d->num_splits != 0 && d->num_splits != 1)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "attn: num_splits = %d with sparse_topk = %d (sparse MLA takes 0 or 1: no split)",
                             d->num_splits, d->sparse_topk);
    if (d->max_batch > 0 && d->max_q_len > 0 && (!dcpattn__mul(d->max_batch, d->max_q_len, &t) || t > INT32_MAX))
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "attn: sparse MLA: max_batch*max_q_len = %d*%d overflows",
                             d->max_batch, d->max_q_len);
    return DCPATTN_STATUS_SUCCESS;
}
/* The sparse run arguments of normalized descriptor d (topk_ids_stride defaulted in *a). */
static dcpattn_status dcpattn__sparse_args_check(const dcpattn_attn_desc *d, dcpattn_attn_args *a, int64_t span_out) {
    int64_t span_ids;
    if (!d->sparse_topk)
        return DCPATTN_STATUS_SUCCESS;
    if (!a->topk_ids_stride)
        a->topk_ids_stride = d->sparse_topk;
    if (a->topk_ids_stride < d->sparse_topk)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "attn: topk_ids_stride = %lld (must be 0 or >= sparse_topk = %d)",
                             (long long)a->topk_ids_stride, d->sparse_topk);
    if (a->batch == 0)
        return DCPATTN_STATUS_SUCCESS;
    if (!a->topk_ids)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: topk_ids is NULL with sparse_topk = %d",
                             d->sparse_topk);
    if (!dcpattn__aligned(a->topk_ids, 4) || !dcpattn__aligned(a->topk_count, 4) || !dcpattn__aligned(a->sinks, 4))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED,
                             "attn: topk_ids = %p, topk_count = %p, sinks = %p (each 4-byte aligned)",
                             (const void *)a->topk_ids, (const void *)a->topk_count, (const void *)a->sinks);
    if (!dcpattn__span(d->max_total_q, a->topk_ids_stride, 1, 0, d->sparse_topk, &span_ids) || span_ids > INT64_MAX / 4)
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "attn: max_total_q*topk_ids_stride = %d*%lld overflows",
                             d->max_total_q, (long long)a->topk_ids_stride);
    if (dcpattn__overlap(a->out, span_out * 2, a->topk_ids, span_ids * 4))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "attn: out = %p overlaps topk_ids = %p", a->out,
                             (const void *)a->topk_ids);
    return DCPATTN_STATUS_SUCCESS;
}

/* A descriptor with its defaults (dcpattn__attn_defaults) in *d, checked. */
static dcpattn_status dcpattn__attn_normalize(const dcpattn_attn_desc *in, dcpattn_attn_desc *d) {
    int64_t t;
    if (!in)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn desc is NULL");
    *d = *in;
    dcpattn__attn_defaults(d);
    if (d->dtype != DCPATTN_BF16 && d->dtype != DCPATTN_FP16)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "attn: dtype = %d (bf16 or fp16)", (int)d->dtype);
    DCPATTN__TRY(dcpattn__sparse_desc_check(d));
    if (d->kv_dtype != d->dtype && d->kv_dtype != DCPATTN_FP8_E4M3 && d->kv_dtype != DCPATTN_FP8_DS_MLA)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "attn: kv_dtype = %d (0 = dtype = %d, or DCPATTN_FP8_E4M3 = %d)", (int)d->kv_dtype,
                             (int)d->dtype, (int)DCPATTN_FP8_E4M3);
    if (d->kv_scale_per_head != 0 && d->kv_scale_per_head != 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: kv_scale_per_head = %d (must be 0 or 1)",
                             d->kv_scale_per_head);
    if (d->num_q_heads < 1 || d->num_kv_heads < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: num_q_heads = %d, num_kv_heads = %d (must be >= 1)",
                             d->num_q_heads, d->num_kv_heads);
    if (d->num_q_heads % d->num_kv_heads)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "attn: num_q_heads = %d is not a multiple of num_kv_heads = %d", d->num_q_heads,
                             d->num_kv_heads);
    if (d->head_dim < 1 || d->head_dim_v < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: head_dim = %d, head_dim_v = %d (must be >= 1)",
                             d->head_dim, d->head_dim_v);
    if (d->page_size < 1 || d->page_size > DCPATTN__MAX_PAGE_SIZE)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: page_size = %d (must be 1..%d)", d->page_size,
                             DCPATTN__MAX_PAGE_SIZE);
    if (dcpattn__is_mla(d)) {
        if (d->num_kv_heads != 1 || d->num_q_heads > DCPATTN__MLA_MAX_HEADS)
            return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                                 "attn: MLA (head_dim %d/%d) needs num_kv_heads = 1 and num_q_heads <= %d, got %d and %d",
                                 DCPATTN__MLA_HEAD_DIM, DCPATTN__MLA_HEAD_DIM_V, DCPATTN__MLA_MAX_HEADS,
                                 d->num_kv_heads, d->num_q_heads);
        if (!dcpattn__in_list(d->page_size, dcpattn__mla_page_sizes,
                              sizeof dcpattn__mla_page_sizes / sizeof dcpattn__mla_page_sizes[0]))
            return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "attn: MLA page_size = %d (must be %s)", d->page_size,
                                 DCPATTN__MLA_PAGE_SIZES_TEXT);
    } else {
        if (d->head_dim != d->head_dim_v ||
            !dcpattn__in_list(d->head_dim, dcpattn__gqa_head_dims,
                              sizeof dcpattn__gqa_head_dims / sizeof dcpattn__gqa_head_dims[0]))
            return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                                 "attn: head_dim = %d, head_dim_v = %d (GQA needs equal dims of %s; MLA %d/%d)",
                                 d->head_dim, d->head_dim_v, DCPATTN__GQA_HEAD_DIMS_TEXT, DCPATTN__MLA_HEAD_DIM,
                                 DCPATTN__MLA_HEAD_DIM_V);
        if (d->num_q_heads / d->num_kv_heads > DCPATTN__GQA_MAX_GROUP)
            return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "attn: group size num_q_heads/num_kv_heads = %d (at most %d)",
                                 d->num_q_heads / d->num_kv_heads, DCPATTN__GQA_MAX_GROUP);
    }
    if (!(d->softmax_scale > 0.0f) || d->softmax_scale > 1e30f)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: softmax_scale = %g (must be finite and > 0)",
                             (double)d->softmax_scale);
    if (d->dcp_world < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: dcp_world = %d (must be >= 1)", d->dcp_world);
    if (d->dcp_rank < 0 || d->dcp_rank >= d->dcp_world)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: dcp_rank = %d (must be 0..%d)", d->dcp_rank,
                             d->dcp_world - 1);
    if (d->dcp_interleave < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: dcp_interleave = %d (must be >= 1)",
                             d->dcp_interleave);
    if (!dcpattn__mul(d->dcp_world, d->dcp_interleave, &t) || t > INT32_MAX)
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "attn: dcp_world*dcp_interleave = %d*%d overflows", d->dcp_world,
                             d->dcp_interleave);
    if (d->max_batch < 1 || d->max_q_len < 1 || d->max_seqlen_k < 0 || d->max_total_q < 0)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "attn: max_batch = %d, max_q_len = %d (>= 1), max_seqlen_k = %d, max_total_q = %d (>= 0)",
                             d->max_batch, d->max_q_len, d->max_seqlen_k, d->max_total_q);
    if (d->max_total_q == 0) /* its default: max_batch and max_q_len are >= 1 here */
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "attn: max_batch*max_q_len = %d*%d overflows", d->max_batch,
                             d->max_q_len);
    if (d->max_total_q < d->max_q_len) {
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "attn: max_total_q = %d < max_q_len = %d (one sequence alone may have max_q_len rows)",
                             d->max_total_q, d->max_q_len);
    }
    if (!dcpattn__mul(d->max_total_q, d->num_q_heads, &t) || t > INT32_MAX ||
        !dcpattn__mul(t, d->head_dim_v, &t) || !dcpattn__mul(t, 4 * 64, &t))
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "attn: max_total_q*num_q_heads*head_dim = %d*%d*%d overflows",
                             d->max_total_q, d->num_q_heads, d->head_dim_v);
    if (!dcpattn__mul(d->max_q_len, d->num_q_heads, &t) || t > INT32_MAX)
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "attn: max_q_len*num_q_heads = %d*%d overflows", d->max_q_len,
                             d->num_q_heads);
    if (d->num_splits == DCPATTN_SPLITS_BALANCED) {
        if (dcpattn__is_mla(d) && d->max_batch > DCPATTN__MLA_BALANCED_MAX_BATCH)
            return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                                 "attn: MLA's balanced schedule takes at most %d sequences (max_batch = %d)",
                                 DCPATTN__MLA_BALANCED_MAX_BATCH, d->max_batch);
    } else if (d->num_splits < DCPATTN_SPLITS_PER_SEQUENCE || d->num_splits > DCPATTN_MAX_MERGE_STATES)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "attn: num_splits = %d (0 = default, 1..%d, DCPATTN_SPLITS_BALANCED, "
                             "DCPATTN_SPLITS_PER_SEQUENCE)",
                             d->num_splits, DCPATTN_MAX_MERGE_STATES);
    if (d->num_sms < 0)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: num_sms = %d", d->num_sms);
    if (d->lse_base2 != 0 && d->lse_base2 != 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: lse_base2 = %d (must be 0 or 1)", d->lse_base2);
    if (d->non_causal != 0 && d->non_causal != 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: non_causal = %d (must be 0 or 1)", d->non_causal);
    return DCPATTN_STATUS_SUCCESS;
}

dcpattn_status dcpattn_attn_desc_validate(const dcpattn_attn_desc *desc) {
    dcpattn_attn_desc d;
    return dcpattn__done(dcpattn__attn_normalize(desc, &d));
}

/* The block-table width max_seqlen_k needs. */
static int64_t dcpattn__min_block_table(const dcpattn_attn_desc *d) {
    return ((int64_t)d->max_seqlen_k + d->page_size - 1) / d->page_size;
}

/* Zero means default in the run arguments of normalized descriptor d: contiguous strides
   (MLA: V's those of K when none of V's is given, V being the K row's first channels) and a
   block table as wide as max_seqlen_k needs. */
static void dcpattn__attn_args_defaults(const dcpattn_attn_desc *d, dcpattn_attn_args *a) {
    const int64_t hq = d->num_q_heads, hkv = d->num_kv_heads;
    const int v_is_k = dcpattn__is_mla(d) && !a->v_stride_h && !a->v_stride_t && !a->v_stride_page;
    dcpattn__default_rows(&a->q_stride_t, &a->q_stride_h, hq, d->head_dim);
    dcpattn__default_rows(&a->k_stride_t, &a->k_stride_h, hkv, dcpattn__kv_row(d));
    dcpattn__default_stride(&a->k_stride_page, d->page_size, a->k_stride_t);
    if (v_is_k) {
        a->v_stride_h = a->k_stride_h;
        a->v_stride_t = a->k_stride_t;
        a->v_stride_page = a->k_stride_page;
    }
    dcpattn__default_rows(&a->v_stride_t, &a->v_stride_h, hkv, d->head_dim_v);
    dcpattn__default_stride(&a->v_stride_page, d->page_size, a->v_stride_t);
    dcpattn__default_rows(&a->out_stride_t, &a->out_stride_h, hq, d->head_dim_v);
    dcpattn__default_rows(&a->lse_stride_t, &a->lse_stride_h, hq, 1);
    if (!a->block_table_stride)
        a->block_table_stride = dcpattn__min_block_table(d);
}

/* Run arguments with their defaults (dcpattn__attn_args_defaults) in *a, checked against a
   normalized descriptor. */
static dcpattn_status dcpattn__attn_args_normalize(const dcpattn_attn_desc *d, const dcpattn_attn_args *in,
                                                   dcpattn_attn_args *a) {
    const int64_t hq = d->num_q_heads, hkv = d->num_kv_heads, dqk = d->head_dim, dv = d->head_dim_v;
    const int fp8 = dcpattn__dtype_size(d->kv_dtype) == 1, kvb = fp8 ? 1 : 2; /* bytes per K/V element */
    const int scaled = d->kv_dtype == DCPATTN_FP8_E4M3; /* k_scale and v_scale */
    int64_t span_q, span_k, span_v, span_out, span_lse = 0, min_bt = dcpattn__min_block_table(d);
    if (!in)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: args is NULL");
    *a = *in;
    dcpattn__attn_args_defaults(d, a);
    if (a->batch < 0 || a->batch > d->max_batch)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: batch = %d (must be 0..max_batch = %d)", a->batch,
                             d->max_batch);
    {
        /* the block table's first: it is 0 where max_seqlen_k is */
        const int64_t st[] = {a->block_table_stride, a->q_stride_t, a->q_stride_h, a->k_stride_page, a->k_stride_t,
                              a->k_stride_h, a->v_stride_page, a->v_stride_t, a->v_stride_h, a->out_stride_t,
                              a->out_stride_h, a->lse_stride_t, a->lse_stride_h};
        static const char *const nm[] = {"block_table_stride", "q_stride_t", "q_stride_h", "k_stride_page",
                                         "k_stride_t", "k_stride_h", "v_stride_page", "v_stride_t", "v_stride_h",
                                         "out_stride_t", "out_stride_h", "lse_stride_t", "lse_stride_h"};
        DCPATTN__TRY(dcpattn__check_strides("attn", st, nm, 13, 1));
    }
    if (a->batch == 0)
        return DCPATTN_STATUS_SUCCESS;
#define DCPATTN__REQUIRE(p)                                                                            \
    if (!a->p)                                                                                         \
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: " #p " is NULL");
    DCPATTN__REQUIRE(q)
    DCPATTN__REQUIRE(k_cache)
    DCPATTN__REQUIRE(v_cache)
    DCPATTN__REQUIRE(block_table)
    DCPATTN__REQUIRE(cu_seqlens_q)
    DCPATTN__REQUIRE(seqused_k)
    DCPATTN__REQUIRE(out)
    if (scaled) {
        DCPATTN__REQUIRE(k_scale)
        DCPATTN__REQUIRE(v_scale)
    }
#undef DCPATTN__REQUIRE
    if (dcpattn__is_mla(d) && (a->v_cache != a->k_cache || a->v_stride_page != a->k_stride_page ||
                               a->v_stride_t != a->k_stride_t || a->v_stride_h != a->k_stride_h))
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "attn: MLA reads V from the K rows: v_cache = %p must equal k_cache = %p, with the same "
                             "strides (v_stride_page, v_stride_t, v_stride_h = %lld, %lld, %lld; k: %lld, %lld, %lld)",
                             a->v_cache, a->k_cache, (long long)a->v_stride_page, (long long)a->v_stride_t,
                             (long long)a->v_stride_h, (long long)a->k_stride_page, (long long)a->k_stride_t,
                             (long long)a->k_stride_h);
    if (d->dcp_world > 1 && !a->seqused_k_global)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: seqused_k_global is NULL with dcp_world = %d",
                             d->dcp_world);
#define DCPATTN__ALIGN(p, n)                                                                            \
    if (!dcpattn__aligned(a->p, n))                                                                     \
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "attn: " #p " = %p is not %d-byte aligned", (const void *)a->p, n);
    DCPATTN__ALIGN(q, 16)
    DCPATTN__ALIGN(k_cache, 16)
    DCPATTN__ALIGN(v_cache, 16)
    DCPATTN__ALIGN(out, 16)
    DCPATTN__ALIGN(block_table, 4)
    DCPATTN__ALIGN(cu_seqlens_q, 4)
    DCPATTN__ALIGN(seqused_k, 4)
    DCPATTN__ALIGN(seqused_k_global, 4)
    DCPATTN__ALIGN(lse, 4)
    if (scaled) {
        DCPATTN__ALIGN(k_scale, 4)
        DCPATTN__ALIGN(v_scale, 4)
    }
#undef DCPATTN__ALIGN
    {
        const int64_t st[] = {a->q_stride_t, a->q_stride_h, a->k_stride_page, a->k_stride_t, a->k_stride_h,
                              a->v_stride_page, a->v_stride_t, a->v_stride_h, a->out_stride_t, a->out_stride_h};
        static const char *const nm[] = {"q_stride_t", "q_stride_h", "k_stride_page", "k_stride_t", "k_stride_h",
                                         "v_stride_page", "v_stride_t", "v_stride_h", "out_stride_t", "out_stride_h"};
        int i;
        /* rows are copied in 16-byte pieces: 8 elements of 16 bits, 16 of an FP8 cache */
        for (i = 0; i < 10; i++) {
            const int m = fp8 && i >= 2 && i < 8 ? 16 : 8;
            if (st[i] % m)
                return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "attn: %s = %lld (must be a multiple of %d elements)",
                                     nm[i], (long long)st[i], m);
        }
    }
    if (a->num_pages < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn: num_pages = %lld (must be >= 1)",
                             (long long)a->num_pages);
    if (a->block_table_stride < min_bt)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "attn: block_table_stride = %lld < ceil(max_seqlen_k / page_size) = %lld",
                             (long long)a->block_table_stride, (long long)min_bt);
    if (!dcpattn__span(d->max_total_q, a->q_stride_t, hq, a->q_stride_h, dqk, &span_q) ||
        !dcpattn__span(d->max_total_q, a->out_stride_t, hq, a->out_stride_h, dv, &span_out) ||
        !dcpattn__span(a->num_pages, a->k_stride_page, d->page_size, a->k_stride_t, 0, &span_k) ||
        !dcpattn__span(a->num_pages, a->v_stride_page, d->page_size, a->v_stride_t, 0, &span_v) ||
        !dcpattn__span(1, 0, hkv, a->k_stride_h, span_k + dcpattn__kv_row(d), &span_k) ||
        !dcpattn__span(1, 0, hkv, a->v_stride_h, span_v + dv, &span_v) || span_q > INT64_MAX / 4 ||
        span_k > INT64_MAX / 4 || span_v > INT64_MAX / 4 || span_out > INT64_MAX / 4 ||
        !dcpattn__span(d->max_total_q, a->lse_stride_t, hq, a->lse_stride_h, 1, &span_lse) || span_lse > INT64_MAX / 4)
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW,
                             "attn: tensor extents overflow 64 bits (max_total_q = %d, q_stride_t = %lld, num_pages = %lld, "
                             "k_stride_page = %lld, v_stride_page = %lld, out_stride_t = %lld)",
                             d->max_total_q, (long long)a->q_stride_t, (long long)a->num_pages,
                             (long long)a->k_stride_page, (long long)a->v_stride_page, (long long)a->out_stride_t);
    /* Aliasing: the host knows only an upper bound of the rows (max_total_q), and buffers
       sized for the real row count may sit right after each other, so q, out and lse are
       compared by their first token row; the cache by the extent num_pages gives. */
    if (!dcpattn__span(1, 0, hq, a->q_stride_h, dqk, &span_q) || !dcpattn__span(1, 0, hq, a->out_stride_h, dv, &span_out) ||
        !dcpattn__span(1, 0, hq, a->lse_stride_h, 1, &span_lse))
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW,
                             "attn: a token row overflows (num_q_heads = %lld, q_stride_h = %lld, out_stride_h = %lld, "
                             "lse_stride_h = %lld)",
                             (long long)hq, (long long)a->q_stride_h, (long long)a->out_stride_h,
                             (long long)a->lse_stride_h);
    if (dcpattn__overlap(a->out, span_out * 2, a->q, span_q * 2))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "attn: out = %p overlaps q = %p", a->out, a->q);
    if (dcpattn__overlap(a->out, span_out * 2, a->k_cache, span_k * kvb) ||
        dcpattn__overlap(a->out, span_out * 2, a->v_cache, span_v * kvb))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "attn: out = %p overlaps the KV cache (k_cache = %p, v_cache = %p)",
                             a->out, a->k_cache, a->v_cache);
    if (a->lse && (dcpattn__overlap(a->lse, span_lse * 4, a->q, span_q * 2) ||
                   dcpattn__overlap(a->lse, span_lse * 4, a->k_cache, span_k * kvb) ||
                   dcpattn__overlap(a->lse, span_lse * 4, a->v_cache, span_v * kvb) ||
                   dcpattn__overlap(a->lse, span_lse * 4, a->out, span_out * 2)))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "attn: lse = %p overlaps q, out or the KV cache", (void *)a->lse);
    return dcpattn__sparse_args_check(d, a, span_out);
}

dcpattn_status dcpattn_attn_args_validate(const dcpattn_attn_desc *desc, const dcpattn_attn_args *args) {
    dcpattn_attn_desc d;
    dcpattn_attn_args a;
    DCPATTN__TRY(dcpattn__attn_normalize(desc, &d));
    return dcpattn__done(dcpattn__attn_args_normalize(&d, args, &a));
}

static void dcpattn__setint(lua_State *L, const char *k, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
}

static dcpattn_status dcpattn__select_attn(dcpattn_context *ctx, const dcpattn_attn_desc *d, char *buf, size_t n) {
    lua_State *L = ctx->L;
    dcpattn__lua_fn(ctx, "select_attn");
    lua_createtable(L, 0, 9);
    lua_pushstring(L, dcpattn__dtype_name(d->dtype));
    lua_setfield(L, -2, "dtype");
    lua_pushstring(L, dcpattn__dtype_name(d->kv_dtype));
    lua_setfield(L, -2, "kv_dtype");
    dcpattn__setint(L, "hq", d->num_q_heads);
    dcpattn__setint(L, "hkv", d->num_kv_heads);
    dcpattn__setint(L, "dqk", d->head_dim);
    dcpattn__setint(L, "dv", d->head_dim_v);
    dcpattn__setint(L, "page_size", d->page_size);
    dcpattn__setint(L, "max_q_len", d->max_q_len);
    dcpattn__setint(L, "arch", dcpattn__arch_num(ctx));
    if (d->sparse_topk)
        dcpattn__setint(L, "sparse_topk", d->sparse_topk);
    DCPATTN__TRY(dcpattn__lua_pcall(ctx, 1, 2));
    if (!lua_isstring(L, -2)) {
        dcpattn_status s = dcpattn__fail(DCPATTN_STATUS_GENERATOR, "%s", lua_tostring(L, -1));
        lua_pop(L, 2);
        return s;
    }
    snprintf(buf, n, "%s", lua_tostring(L, -2));
    lua_pop(L, 2);
    return DCPATTN_STATUS_SUCCESS;
}

/* Whether a variant's split-KV partials can be merged inside a thread-block cluster here:
   its kernel supports it, the arch has clusters (sm_90+), the driver has cuLaunchKernelEx
   and DCPATTN_NO_CLUSTER_MERGE is not set. */
static int dcpattn__cluster_merge_ok(const dcpattn_context *ctx, const dcpattn__variant *v) {
    if (v->cluster_splits < 2 || !dcpattn__cu.LaunchKernelEx || dcpattn__env_int("DCPATTN_NO_CLUSTER_MERGE", 0))
        return 0;
    return dcpattn__arch_num(ctx) >= 90;
}

/* CTAs of a variant's kernel that one SM of the context's GPU holds, from its shared memory,
   registers and threads. */
static int dcpattn__ctas_per_sm(const dcpattn__sm_limits *l, const dcpattn__variant *v) {
    int per_sm = l->smem_per_sm / (v->smem + l->smem_reserved);
    if (v->registers > 0 && l->regs_per_sm / (v->registers * v->threads) < per_sm)
        per_sm = l->regs_per_sm / (v->registers * v->threads);
    if (l->threads_per_sm / v->threads < per_sm)
        per_sm = l->threads_per_sm / v->threads;
    return per_sm < 1 ? 1 : per_sm;
}

/* Split-KV count (FlashAttention-3's rule): the smallest count whose wave efficiency is
   within 85 % of the best, where a wave is num_sms times the per_sm CTAs one SM holds; never
   splits shorter than four KV tiles. */
static int dcpattn__auto_splits(const dcpattn_attn_desc *d, int num_sms, int per_sm, int row_tiles,
                                const dcpattn__variant *v) {
    const int kv_tile = v->kv_tile > 0 ? v->kv_tile : 64;
    int64_t base = (int64_t)d->max_batch * d->num_kv_heads * row_tiles, most, s;
    int best_s = 1;
    double eff[DCPATTN_MAX_MERGE_STATES + 1], best = 0;
    most = ((int64_t)d->max_seqlen_k + 4 * kv_tile - 1) / (4 * (int64_t)kv_tile);
    if (most > DCPATTN_MAX_MERGE_STATES)
        most = DCPATTN_MAX_MERGE_STATES;
    for (s = 1; s <= most; s++) {
        int64_t slots = (int64_t)num_sms * per_sm, tiles = base * s, waves = (tiles + slots - 1) / slots;
        eff[s] = (double)tiles / (double)(waves * slots);
        if (eff[s] > best)
            best = eff[s];
    }
    for (s = 1; s <= most; s++)
        if (eff[s] >= 0.85 * best) {
            best_s = (int)s;
            break;
        }
    return best_s;
}

/* The balanced schedule's workers where the plan takes it (num_splits 0 or
   DCPATTN_SPLITS_BALANCED; the descriptor check made sure MLA asks for it by name only with
   max_batch <= DCPATTN__MLA_BALANCED_MAX_BATCH), else 0. GQA: one wave of the kernel's CTAs
   over the KV heads (a worker per KV head each); MLA: one CTA per SM over the row tiles. */
static int dcpattn__balance_workers(const dcpattn_attn_desc *d, int num_sms, int per_sm, int row_tiles,
                                   const dcpattn__variant *v) {
    int64_t w;
    if (d->num_splits != DCPATTN_SPLITS_BALANCED && d->num_splits != 0)
        return 0;
    if (dcpattn__is_mla(d)) {
        if (d->max_batch > DCPATTN__MLA_BALANCED_MAX_BATCH)
            return 0;
        w = num_sms / row_tiles;
    } else {
        w = (int64_t)num_sms * per_sm / d->num_kv_heads;
        /* the merge of a cut job lists its pieces (at most one per worker) in the kernel's
           shared memory, after a flag (templates/attn.cuh, finish_cut) */
        if (w > (v->smem - 16) / 4)
            w = (v->smem - 16) / 4;
    }
    return w > 1 ? (int)w : 1;
}

/* The balanced schedule's workers at run time, from the batch's job count J (sequences x row
   tiles for GQA, per KV head; sequences for MLA, per row tile): the largest count g within 95 %
   of the plan's workers w that J divides (J >= g: every worker takes J / g whole jobs) or that
   divides by J (J < g: every job is cut into g / J pieces), else w. An even batch then runs as a
   per-sequence split would, its cuts at job boundaries or into equal pieces (H200, G1 q_len 8:
   99 % of the per-sequence split against 94 % over 33 workers), and an uneven one loses at most
   5 % of the wave. */
static int dcpattn__run_workers(int workers, int64_t jobs) {
    int g;
    for (g = workers; jobs > 0 && (int64_t)g * 20 >= (int64_t)workers * 19; g--)
        if (jobs >= g ? jobs % g == 0 : g % jobs == 0)
            return g;
    return workers;
}

/* The launch parameters that depend only on the descriptor, built once per plan, and the
   workspace of the split partials when a merge kernel merges them. */
static void dcpattn__attn_plan_kparams(dcpattn_attn_plan *p) {
    const dcpattn_attn_desc *d = &p->d;
    dcpattn_attn_kparams *kp = &p->kp;
    memset(kp, 0, sizeof *kp);
    kp->max_q_len = d->max_q_len;
    kp->hq = d->num_q_heads;
    kp->hkv = d->num_kv_heads;
    kp->page_size = d->page_size;
    kp->num_splits = p->num_splits;
    kp->causal = !d->non_causal;
    kp->lse_base2 = d->lse_base2;
    kp->world = d->dcp_world;
    kp->rank = d->dcp_rank;
    kp->interleave = d->dcp_interleave;
    kp->scale_log2 = d->softmax_scale * 1.4426950408889634f;
    kp->cluster_merge = p->cluster;
    kp->workers = p->workers;
    kp->kv_scale_per_head = d->kv_scale_per_head;
    if (p->workers && dcpattn__is_mla(d)) {
        /* per CTA: its piece's state record, then its publication flag (DCPATTN_KERNEL_ABI) */
        const size_t ctas = (size_t)p->workers * (size_t)p->row_tiles;
        p->flags_offset = ctas * (size_t)DCPATTN_BAL_RECORD_F4 * 16u;
        p->workspace_bytes = p->flags_offset + ctas * 8u;
    } else if (p->workers) {
        /* templates/attn.cuh, AttnSchedule: two partial-state slots of a row tile per worker and
           KV head (o fp32, then lse), then one arrival counter per (sequence, row tile, KV head)
           of the descriptor's bounds */
        const size_t rows = (size_t)p->workers * 2u * (size_t)d->num_kv_heads * (size_t)p->attn->rows;
        p->part_offset_lse = (rows * (size_t)d->head_dim_v * 4u + 255u) & ~(size_t)255u;
        p->flags_offset = (p->part_offset_lse + rows * 4u + 255u) & ~(size_t)255u;
        p->workspace_bytes =
            p->flags_offset + (size_t)d->max_batch * (size_t)p->row_tiles * (size_t)d->num_kv_heads * 8u;
    } else if (p->num_splits > 1 && !p->cluster) {
        /* partials o fp32 [splits, max_total_q, hq, dv], then (256-byte aligned) lse fp32
           [splits, max_total_q, hq], merged (base 2 in) into out and lse */
        dcpattn_merge_args m;
        kp->part_split_stride = (long long)d->max_total_q * d->num_q_heads;
        p->part_offset_lse = ((size_t)p->num_splits * (size_t)kp->part_split_stride * (size_t)d->head_dim_v * 4u + 255u) &
                             ~(size_t)255u;
        p->workspace_bytes = p->part_offset_lse + (size_t)p->num_splits * (size_t)kp->part_split_stride * 4u;
        memset(&m, 0, sizeof m);
        m.num_states = p->num_splits;
        m.rows = d->max_total_q;
        m.heads = d->num_q_heads;
        m.head_dim = d->head_dim_v;
        m.in_dtype = DCPATTN_FP32;
        m.out_dtype = d->dtype;
        m.o_stride_t = (int64_t)d->num_q_heads * d->head_dim_v;
        m.o_stride_h = d->head_dim_v;
        m.lse_stride_t = d->num_q_heads;
        m.lse_stride_h = 1;
        m.lse_base2_in = 1;
        m.lse_base2_out = d->lse_base2;
        dcpattn__merge_kparams(&m, NULL, &p->mkp);
        p->merge_grid = dcpattn__merge_grid(p->merge, &m);
    }
}

/* ---- sparse MLA: plan and run (see SPARSE MLA in the API) ----
   One CTA per (sequence x query slot, block of M_TILE heads): grid batch*max_q_len x
   ceil(Hq / M_TILE); slots past a sequence's q_len return at once. No split; the sm_90a kernel
   keeps each CTA's kept rows in the workspace (sparse_topk int64 per CTA). */
static void dcpattn__sparse_plan(dcpattn_attn_plan *p) {
    p->num_splits = 1;
    p->row_tiles = (p->d.num_q_heads + p->attn->rows - 1) / p->attn->rows;
    dcpattn__attn_plan_kparams(p);
    p->kp.topk = p->d.sparse_topk;
    if (p->attn->row_list)
        p->workspace_bytes = ((size_t)p->d.max_batch * (size_t)p->d.max_q_len * (size_t)p->row_tiles *
                                  (size_t)p->d.sparse_topk * 8u +
                              255u) &
                             ~(size_t)255u;
}
static dcpattn_status dcpattn__sparse_launch(const dcpattn_attn_plan *plan, const dcpattn_attn_args *a,
                                             dcpattn_attn_kparams *kp, void *workspace, dcpattn_stream stream) {
    kp->topk_ids = a->topk_ids;
    kp->topk_st = a->topk_ids_stride;
    kp->topk_count = a->topk_count;
    kp->sinks = plan->d.dcp_rank == 0 ? a->sinks : NULL; /* once per DCP group */
    kp->topk_rows = plan->attn->row_list ? (long long *)workspace : NULL;
    return dcpattn__launch(plan->attn, (unsigned)(a->batch * plan->d.max_q_len), (unsigned)plan->row_tiles, 1, 1, kp,
                           stream, "sparse attention launch");
}

dcpattn_status dcpattn_attn_plan_create(dcpattn_context *ctx, const dcpattn_attn_desc *desc,
                                        dcpattn_attn_plan **out) {
    dcpattn_attn_plan *p;
    dcpattn_status s;
    int group, num_sms, per_sm;
    if (!ctx || !out)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn_plan_create: NULL context or out");
    *out = NULL;
    { /* the plan holds a kernel parameter block, 64-byte aligned for its TMA map: calloc's
         alignment is not enough (a compiler may copy the block with 64-byte aligned moves) */
        void *mem = NULL;
        if (posix_memalign(&mem, 64, sizeof *p) != 0 || !mem)
            return dcpattn__fail(DCPATTN_STATUS_OUT_OF_MEMORY, "attn_plan_create");
        memset(mem, 0, sizeof *p);
        p = (dcpattn_attn_plan *)mem;
    }
    p->ctx = ctx;
    s = dcpattn__attn_normalize(desc, &p->d);
    num_sms = p->d.num_sms ? p->d.num_sms : ctx->num_sms;
    /* A compile-only context has no device to size the plan for: an arch and SM count taken
       for granted would give a plan (variant, splits, clusters) the real device may not want. */
    if (!s && (!num_sms || !ctx->arch_given))
        s = dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                          "attn_plan_create: the context is compile-only (no device) and its arch is %s and num_sms = %d: "
                          "set dcpattn_context_desc.arch and num_sms (or dcpattn_attn_desc.num_sms) for the target GPU",
                          ctx->arch_given ? ctx->arch : "not given", num_sms);
    if (s) {
        free(p);
        return s;
    }
    pthread_mutex_lock(&ctx->lock);
    s = dcpattn__select_attn(ctx, &p->d, p->variant, sizeof p->variant);
    if (!s)
        s = dcpattn__ensure(ctx, p->variant, &p->attn, NULL);
    if (!s && p->d.sparse_topk)
        dcpattn__sparse_plan(p);
    else if (!s) {
        group = p->d.num_q_heads / p->d.num_kv_heads;
        p->row_tiles = (int)(((int64_t)p->d.max_q_len * group + p->attn->rows - 1) / p->attn->rows);
        per_sm = dcpattn__ctas_per_sm(&ctx->limits, p->attn);
        p->workers = dcpattn__balance_workers(&p->d, num_sms, per_sm, p->row_tiles, p->attn);
        /* the FP8 wgmma tile's stacked kernel where no row tile can hold more than rows / 2 rows */
        p->fn_balanced = p->attn->fn_balanced_stacked && (int64_t)p->d.max_q_len * group <= p->attn->rows / 2
                             ? p->attn->fn_balanced_stacked
                             : p->attn->fn_balanced;
        p->num_splits = p->workers ? 1
                        : p->d.num_splits > 0 ? p->d.num_splits
                                              : dcpattn__auto_splits(&p->d, num_sms, per_sm, p->row_tiles, p->attn);
        /* Clusters only for grids of at most one CTA per SM: there the second launch is a
           large share of the step and the cluster merge halves the host cost (H200, 32 CTAs:
           3.5 us against 7.5 us per run, same GPU time); on fuller grids cluster scheduling
           cost more than the merge kernel (G2, 256 CTAs in clusters of 4: 75 % of the read
           ceiling against 95 %). */
        p->cluster = p->num_splits > 1 && p->num_splits <= p->attn->cluster_splits &&
                     (int64_t)p->d.max_batch * p->d.num_kv_heads * p->row_tiles * p->num_splits <= num_sms &&
                     dcpattn__cluster_merge_ok(ctx, p->attn);
        if (p->num_splits > 1 && !p->cluster) {
            char mname[64];
            s = dcpattn__pair_name(ctx, DCPATTN__MERGE, DCPATTN_FP32, p->d.dtype, mname, sizeof mname);
            if (!s)
                s = dcpattn__ensure(ctx, mname, &p->merge, NULL);
        }
        if (!s)
            dcpattn__attn_plan_kparams(p);
    }
    pthread_mutex_unlock(&ctx->lock);
    if (s) {
        free(p);
        return s;
    }
    *out = p;
    return dcpattn__done(DCPATTN_STATUS_SUCCESS);
}

void dcpattn_attn_plan_destroy(dcpattn_attn_plan *plan) { free(plan); }
size_t dcpattn_attn_workspace_size(const dcpattn_attn_plan *plan) { return plan ? plan->workspace_bytes : 0; }
int dcpattn_attn_num_splits(const dcpattn_attn_plan *plan) { return plan ? plan->num_splits : 0; }
int dcpattn_attn_workers(const dcpattn_attn_plan *plan) { return plan ? plan->workers : 0; }
const char *dcpattn_attn_variant(const dcpattn_attn_plan *plan) { return plan ? plan->variant : ""; }
#ifdef DCPATTN_TIMELINE
dcpattn_status dcpattn_attn_timeline(const dcpattn_attn_plan *plan, void **records, size_t *bytes) {
    unsigned long long dptr = 0;
    size_t n = 0;
    if (!plan || !records || !bytes)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn_timeline: plan, records and bytes must not be NULL");
    if (plan->ctx->compile_only || !plan->attn->module)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn_timeline: the plan's context is compile-only");
    if (!dcpattn__cu.ModuleGetGlobal)
        return dcpattn__fail(DCPATTN_STATUS_NO_DRIVER, "attn_timeline: the driver lacks cuModuleGetGlobal_v2");
    if (dcpattn__cu.ModuleGetGlobal(&dptr, &n, plan->attn->module, "dcpattn_timeline") != 0)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "attn_timeline: %s keeps no timeline",
                             plan->variant);
    *records = (void *)(uintptr_t)dptr;
    *bytes = n;
    return DCPATTN_STATUS_SUCCESS;
}
#endif

/* A token no earlier run of this process used (odd, so never 0: the words' reset value): the
   balanced schedule's publication flags carry it, so a word left from another run or another
   plan's use of the workspace cannot pass for this run's (CUDA graph replays reuse the token:
   the kernel leaves every flag it waited on at 0). */
static unsigned long long dcpattn__token_base, dcpattn__token_ctr;
static pthread_once_t dcpattn__token_once = PTHREAD_ONCE_INIT;
static void dcpattn__token_init(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    dcpattn__token_base = (((unsigned long long)ts.tv_sec << 30) ^ ((unsigned long long)ts.tv_nsec << 1) ^
                           ((unsigned long long)getpid() << 45)) | 1ull;
}
static unsigned long long dcpattn__run_token(void) {
    pthread_once(&dcpattn__token_once, dcpattn__token_init);
    return dcpattn__token_base + 2ull * __atomic_add_fetch(&dcpattn__token_ctr, 1ull, __ATOMIC_RELAXED);
}

/* The MLA kernels' TMA map of the paged K pool (cuda.h's CUtensorMap): 576 channels x page_size
   tokens x num_pages, strides k_stride_t and k_stride_page, boxes of 64 channels x
   min(page_size, 64) tokens, swizzled as the variant's kernel lays its K tiles (kv_swizzle, from
   the generator: the 128-byte swizzle of a 16-bit tile; an e4m3 cache unswizzled on the 64-row
   tile, which converts each tile into a swizzled 16-bit one, and 64-byte swizzled on the narrow
   tiles, which read it as it lands: templates/mla.cuh, "FP8 (e4m3) cache"). */
static dcpattn_status dcpattn__mla_tmap(const dcpattn_attn_desc *d, const dcpattn_attn_args *a, int kv_swizzle,
                                        dcpattn_attn_kparams *kp) {
    enum { UINT8 = 0, UINT16 = 1, INTERLEAVE_NONE = 0, SWIZZLE_NONE = 0, SWIZZLE_64B = 2, SWIZZLE_128B = 3, L2_256B = 3,
           OOB_FILL_NONE = 0 }; /* cuda.h's values */
    const int swizzle = kv_swizzle == 128 ? SWIZZLE_128B : kv_swizzle == 64 ? SWIZZLE_64B : SWIZZLE_NONE;
    const int fp8 = d->kv_dtype == DCPATTN_FP8_E4M3;
    const unsigned long long esize = fp8 ? 1u : 2u;
    const unsigned long long dim[3] = {576u, (unsigned long long)d->page_size, (unsigned long long)a->num_pages};
    const unsigned long long stride[2] = {(unsigned long long)a->k_stride_t * esize,
                                          (unsigned long long)a->k_stride_page * esize};
    const unsigned box[3] = {64u, (unsigned)(d->page_size < 64 ? d->page_size : 64), 1u}, one[3] = {1u, 1u, 1u};
    if (!dcpattn__cu.TensorMapEncodeTiled)
        return dcpattn__fail(DCPATTN_STATUS_NO_DRIVER, "attn: MLA needs cuTensorMapEncodeTiled (a CUDA 12 driver)");
    if (a->num_pages > 0xffffffffLL || a->k_stride_page >= (1LL << 40) / (long long)esize)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "attn: MLA: num_pages = %lld, k_stride_page = %lld (TMA maps take < 2^32 pages, strides < 2^40 bytes)",
                             (long long)a->num_pages, (long long)a->k_stride_page);
    return dcpattn__cu_check(dcpattn__cu.TensorMapEncodeTiled(kp->k_tmap, fp8 ? UINT8 : UINT16, 3u, (void *)a->k_cache, dim,
                                                              stride, box, one, INTERLEAVE_NONE,
                                                              swizzle, L2_256B, OOB_FILL_NONE),
                             "attn: MLA cuTensorMapEncodeTiled");
}

static dcpattn_status dcpattn__attn_run(const dcpattn_attn_plan *plan, const dcpattn_attn_args *args, void *workspace,
                                        size_t workspace_bytes, dcpattn_stream stream) {
    const dcpattn_attn_desc *d;
    dcpattn_attn_args a;
    dcpattn_attn_kparams kp;
    if (!plan)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn_run: plan is NULL");
    if (plan->ctx->compile_only || !plan->attn->fn)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "attn_run: the plan's context is compile-only");
    d = &plan->d;
    DCPATTN__TRY(dcpattn__attn_args_normalize(d, args, &a));
    if (plan->workspace_bytes) {
        if (!workspace || workspace_bytes < plan->workspace_bytes)
            return dcpattn__fail(DCPATTN_STATUS_WORKSPACE, "attn_run: workspace %p of %zu bytes, the plan needs %zu",
                                 workspace, workspace_bytes, plan->workspace_bytes);
        if (!dcpattn__aligned(workspace, 256))
            return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "attn_run: workspace = %p is not 256-byte aligned",
                                 workspace);
    }
    if (a.batch == 0)
        return DCPATTN_STATUS_SUCCESS;
    kp = plan->kp;
    kp.q = a.q;
    kp.k = a.k_cache;
    kp.v = a.v_cache;
    kp.out = a.out;
    kp.lse = a.lse;
    kp.block_table = a.block_table;
    kp.cu_seqlens_q = a.cu_seqlens_q;
    kp.seqused_k = a.seqused_k;
    kp.seqused_k_global = a.seqused_k_global;
    kp.q_st = a.q_stride_t;
    kp.q_sh = a.q_stride_h;
    kp.k_sp = a.k_stride_page;
    kp.k_st = a.k_stride_t;
    kp.k_sh = a.k_stride_h;
    kp.v_sp = a.v_stride_page;
    kp.v_st = a.v_stride_t;
    kp.v_sh = a.v_stride_h;
    kp.out_st = a.out_stride_t;
    kp.out_sh = a.out_stride_h;
    kp.lse_st = a.lse_stride_t;
    kp.lse_sh = a.lse_stride_h;
    kp.bt_stride = a.block_table_stride;
    kp.batch = a.batch;
    if (d->kv_dtype == DCPATTN_FP8_E4M3) {
        kp.k_scale = a.k_scale;
        kp.v_scale = a.v_scale;
    }
    if (d->sparse_topk)
        return dcpattn__sparse_launch(plan, &a, &kp, workspace, stream);
    if (dcpattn__is_mla(d))
        DCPATTN__TRY(dcpattn__mla_tmap(d, &a, plan->attn->kv_swizzle, &kp));
    if (plan->workers) { /* balanced: its own kernel; the pieces' states and the CTAs' words */
        const int mla = dcpattn__is_mla(d);
        if (!plan->fn_balanced)
            return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "attn_run: %s has no balanced-schedule kernel",
                                 plan->attn->name);
        kp.o_part = (float *)workspace;
        kp.lse_part = mla ? NULL : (float *)((char *)workspace + plan->part_offset_lse);
        kp.flags = (unsigned long long *)((char *)workspace + plan->flags_offset);
        kp.token = dcpattn__run_token(); /* (batch <= max_batch: checked above) */
        kp.workers = dcpattn__run_workers(plan->workers, (int64_t)a.batch * (mla ? 1 : plan->row_tiles));
        return dcpattn__launch_fn(plan->attn, plan->fn_balanced, (unsigned)kp.workers,
                                  mla ? 1u : (unsigned)d->num_kv_heads, mla ? (unsigned)plan->row_tiles : 1u, 1u, &kp,
                                  stream, "attention launch (balanced)");
    }
    if (plan->workspace_bytes) { /* split partials through the workspace, then the merge kernel */
        kp.o_part = (float *)workspace;
        kp.lse_part = (float *)((char *)workspace + plan->part_offset_lse);
    }
    DCPATTN__TRY(dcpattn__launch(plan->attn, (unsigned)(plan->num_splits * a.batch), (unsigned)d->num_kv_heads,
                                 (unsigned)plan->row_tiles, plan->cluster ? (unsigned)plan->num_splits : 1u, &kp,
                                 stream, "attention launch"));
    if (plan->workspace_bytes) {
        dcpattn_merge_kparams m = plan->mkp;
        int i;
        for (i = 0; i < plan->num_splits; i++) {
            m.o[i] = kp.o_part + (size_t)i * (size_t)kp.part_split_stride * (size_t)d->head_dim_v;
            m.lse[i] = kp.lse_part + (size_t)i * (size_t)kp.part_split_stride;
        }
        m.out = a.out;
        m.lse_out = a.lse;
        m.out_st = a.out_stride_t;
        m.out_sh = a.out_stride_h;
        m.lse_out_st = a.lse_stride_t;
        m.lse_out_sh = a.lse_stride_h;
        m.rows_limit = a.cu_seqlens_q + a.batch; /* rows past the batch's real total are never touched */
        return dcpattn__launch(plan->merge, plan->merge_grid, 1, 1, 1, &m, stream, "split merge launch");
    }
    return DCPATTN_STATUS_SUCCESS;
}

dcpattn_status dcpattn_attn_run(const dcpattn_attn_plan *plan, const dcpattn_attn_args *args, void *workspace,
                                size_t workspace_bytes, dcpattn_stream stream) {
    return dcpattn__done(dcpattn__attn_run(plan, args, workspace, workspace_bytes, stream));
}

/* ============================ DCP combine (NCCL) ============================ */
/* NCCL without its headers: the values below are nccl.h's (2.28; stable since 2.10). */
enum {
    DCPATTN__NCCL_SUCCESS = 0,
    DCPATTN__NCCL_IN_PROGRESS = 7,
    DCPATTN__NCCL_FLOAT16 = 6,
    DCPATTN__NCCL_FLOAT32 = 7,
    DCPATTN__NCCL_BFLOAT16 = 9,
    DCPATTN__NCCL_SUM = 0,
    DCPATTN__NCCL_MIN_VERSION = 21000 /* 2.10.0: bf16 */
};

typedef struct dcpattn__nccl_api {
    int tried, ok, version;
    int (*GetVersion)(int *);
    const char *(*GetErrorString)(int);
    const char *(*GetLastError)(dcpattn_nccl_comm); /* 2.13+, optional */
    int (*CommCount)(dcpattn_nccl_comm, int *);
    int (*CommCuDevice)(dcpattn_nccl_comm, int *);
    int (*CommUserRank)(dcpattn_nccl_comm, int *);
    int (*CommGetAsyncError)(dcpattn_nccl_comm, int *);
    int (*GroupStart)(void);
    int (*GroupEnd)(void);
    int (*Send)(const void *, size_t, int, int, dcpattn_nccl_comm, dcpattn_stream);
    int (*Recv)(void *, size_t, int, int, dcpattn_nccl_comm, dcpattn_stream);
    int (*AllGather)(const void *, void *, size_t, int, dcpattn_nccl_comm, dcpattn_stream);
    int (*ReduceScatter)(const void *, void *, size_t, int, int, dcpattn_nccl_comm, dcpattn_stream);
    int (*AllReduce)(const void *, void *, size_t, int, int, dcpattn_nccl_comm, dcpattn_stream);
} dcpattn__nccl_api;

static dcpattn__nccl_api dcpattn__nccl;

#ifndef DCPATTN_NO_NCCL
/* The communicator belongs to the NCCL the process already has: prefer the loaded copy
   (RTLD_NOLOAD, then the global namespace of a statically linked NCCL), load one only if
   there is none. */
static void *dcpattn__nccl_open(char *why, size_t why_size) {
    static const char *const names[] = {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib/libnccl.so.2",
                                        "/usr/local/cuda/lib64/libnccl.so.2", NULL};
    const char *e = getenv("DCPATTN_NCCL_LIBRARY");
    const char *const *n;
    void *h;
    if (!e || !*e) {
        for (n = names; *n; n++)
            if ((h = dlopen(*n, RTLD_NOW | RTLD_NOLOAD)) != NULL)
                return h;
        if (dlsym(RTLD_DEFAULT, "ncclCommGetAsyncError"))
            return RTLD_DEFAULT;
    }
    return dcpattn__dlopen_first("DCPATTN_NCCL_LIBRARY", names, why, why_size);
}
static int dcpattn__nccl_init(char *why, size_t n) {
    if (dcpattn__nccl.GetVersion(&dcpattn__nccl.version) != DCPATTN__NCCL_SUCCESS)
        snprintf(why, n, "ncclGetVersion failed");
    else if (dcpattn__nccl.version < DCPATTN__NCCL_MIN_VERSION)
        snprintf(why, n, "NCCL version code %d is older than 2.10 (needed: bf16, send/recv)", dcpattn__nccl.version);
    else
        return 1;
    return 0;
}
#endif

static dcpattn_status dcpattn__load_nccl(void) {
#ifdef DCPATTN_NO_NCCL
    return dcpattn__fail(DCPATTN_STATUS_NO_NCCL, "NCCL: this build has DCPATTN_NO_NCCL");
#else
#define DCPATTN__NCCL_SYM(field, name) DCPATTN__SYM(dcpattn__nccl_api, field, name)
    static const dcpattn__sym syms[] = {
        DCPATTN__NCCL_SYM(GetVersion, "ncclGetVersion"),
        DCPATTN__NCCL_SYM(GetErrorString, "ncclGetErrorString"),
        DCPATTN__NCCL_SYM(CommCount, "ncclCommCount"),
        DCPATTN__NCCL_SYM(CommCuDevice, "ncclCommCuDevice"),
        DCPATTN__NCCL_SYM(CommUserRank, "ncclCommUserRank"),
        DCPATTN__NCCL_SYM(CommGetAsyncError, "ncclCommGetAsyncError"),
        DCPATTN__NCCL_SYM(GroupStart, "ncclGroupStart"),
        DCPATTN__NCCL_SYM(GroupEnd, "ncclGroupEnd"),
        DCPATTN__NCCL_SYM(Send, "ncclSend"),
        DCPATTN__NCCL_SYM(Recv, "ncclRecv"),
        DCPATTN__NCCL_SYM(AllGather, "ncclAllGather"),
        DCPATTN__NCCL_SYM(ReduceScatter, "ncclReduceScatter"),
        DCPATTN__NCCL_SYM(AllReduce, "ncclAllReduce"),
        /* older NCCL has no detail message */
        DCPATTN__SYM_OPTIONAL(dcpattn__nccl_api, GetLastError, "ncclGetLastError"),
        {NULL, 0, 0}};
#undef DCPATTN__NCCL_SYM
    static char why[1024];
    return dcpattn__load_once(&dcpattn__nccl.tried, &dcpattn__nccl.ok, &dcpattn__nccl, syms, dcpattn__nccl_open,
                              dcpattn__nccl_init, why, sizeof why, "libnccl", DCPATTN_STATUS_NO_NCCL, "NCCL");
#endif
}

/* An NCCL failure with NCCL's own words: the code's string and the communicator's last
   error message. */
static dcpattn_status dcpattn__nccl_fail(dcpattn_nccl_comm comm, int rc, const char *what) {
    const char *msg = dcpattn__nccl.GetErrorString ? dcpattn__nccl.GetErrorString(rc) : NULL;
    const char *last = comm && dcpattn__nccl.GetLastError ? dcpattn__nccl.GetLastError(comm) : NULL;
    return dcpattn__fail(DCPATTN_STATUS_NCCL, "%s: NCCL error %d (%s)%s%s", what, rc, msg ? msg : "?",
                         last && *last ? ": " : "", last && *last ? last : "");
}

/* The communicator agrees with the call: pure numbers, so hosts without GPUs test it. */
static dcpattn_status dcpattn__dcp_check_group(int world, int rank, int comm_count, int comm_rank, int comm_device,
                                               int ctx_device) {
    if (comm_count != world)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "dcp_combine: world = %d but the communicator has %d ranks", world, comm_count);
    if (comm_rank != rank)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "dcp_combine: rank = %d but the communicator's rank is %d", rank, comm_rank);
    if (comm_device != ctx_device)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "dcp_combine: the communicator is on device %d, the context on device %d", comm_device,
                             ctx_device);
    return DCPATTN_STATUS_SUCCESS;
}

/* 1 if the box [n0][n1][inner] with strides (s0, s1, 1) is exactly n0*n1*inner consecutive
   elements starting at its first one (so it can travel as one NCCL buffer). */
static int dcpattn__dense_box(int64_t n0, int64_t s0, int64_t n1, int64_t s1, int64_t inner) {
    int64_t ext[2], st[2], expect = inner;
    int k = 0, i;
    if (n0 > 1) ext[k] = n0, st[k++] = s0;
    if (n1 > 1) ext[k] = n1, st[k++] = s1;
    if (k == 2 && st[0] > st[1]) {
        int64_t t = st[0];
        st[0] = st[1], st[1] = t;
        t = ext[0], ext[0] = ext[1], ext[1] = t;
    }
    for (i = 0; i < k; i++) {
        if (st[i] != expect)
            return 0;
        expect *= ext[i];
    }
    return 1;
}

/* The plan of one combine: arguments with defaults, what is packed, where the workspace
   regions lie (byte offsets, 256-aligned). Regions by path:
     A2A SCATTER    r0 send o [H][T][Dv] comm (packed only), r1 send lse [H][T] (packed
                    only), r2 received o [W] blocks of T*Hw*Dv comm, r3 received lse [W] of T*Hw
     A2A REPLICATE  r2 gathered o [W] of T*H*Dv comm, r3 gathered lse [W] of T*H (packed:
                    this rank writes its own slot, then an in-place all-gather)
     AG_RS          r0 packed o [T][H][Dv] in (packed only), r3 gathered lse [W] of T*H,
                    r2 rescaled o [H][T][Dv] comm, r1 reduce-scatter result [Hw][T][Dv] comm
                    (SCATTER only), r4 global LSE [H][T] */
typedef struct dcpattn__dcp_plan {
    dcpattn_dcp_combine_args a;
    int hw, isz, csz, osz, pack;
    size_t off[5], bytes;
} dcpattn__dcp_plan;

static size_t dcpattn__align256(size_t x) { return (x + 255u) & ~(size_t)255u; }

/* Zero means default in combine arguments: one rank, A2A, bf16 in, out and comm as in,
   contiguous strides (out and lse_out of this rank's heads when scattered). */
static void dcpattn__dcp_defaults(dcpattn_dcp_combine_args *a) {
    int64_t out_heads;
    if (a->world == 0)
        a->world = 1;
    if (a->transport == DCPATTN_DCP_TRANSPORT_DEFAULT)
        a->transport = DCPATTN_DCP_A2A;
    if (a->in_dtype == DCPATTN_DTYPE_DEFAULT)
        a->in_dtype = DCPATTN_BF16;
    if (a->out_dtype == DCPATTN_DTYPE_DEFAULT)
        a->out_dtype = a->in_dtype;
    if (a->comm_dtype == DCPATTN_DTYPE_DEFAULT)
        a->comm_dtype = a->in_dtype;
    out_heads = a->layout == DCPATTN_DCP_SCATTER && a->world > 0 ? a->heads / a->world : a->heads;
    dcpattn__default_rows(&a->o_stride_t, &a->o_stride_h, a->heads, a->head_dim);
    dcpattn__default_rows(&a->lse_stride_t, &a->lse_stride_h, a->heads, 1);
    dcpattn__default_rows(&a->out_stride_t, &a->out_stride_h, out_heads, a->head_dim);
    dcpattn__default_rows(&a->lse_out_stride_t, &a->lse_out_stride_h, out_heads, 1);
}

static dcpattn_status dcpattn__dcp_normalize(const dcpattn_dcp_combine_args *in, dcpattn__dcp_plan *p,
                                             int check_buffers) {
    dcpattn_dcp_combine_args *a = &p->a;
    int64_t th, thd, total, span_o, span_lse, span_out, span_lse_out;
    size_t sz[5];
    int i, out_heads, scatter;
    memset(p, 0, sizeof *p);
    if (!in)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: args is NULL");
    *a = *in;
    dcpattn__dcp_defaults(a);
    if (a->world < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: world = %d (must be >= 1)", a->world);
    if (a->world > DCPATTN_MAX_MERGE_STATES)
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED, "dcp_combine: world = %d (at most %d)", a->world,
                             DCPATTN_MAX_MERGE_STATES);
    if (a->rank < 0 || a->rank >= a->world)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: rank = %d (must be 0..%d)", a->rank,
                             a->world - 1);
    if (a->rows < 0 || a->heads < 1 || a->head_dim < 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "dcp_combine: rows = %d (>= 0), heads = %d, head_dim = %d (>= 1)", a->rows, a->heads,
                             a->head_dim);
    if (a->heads % a->world)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "dcp_combine: heads = %d is not a multiple of world = %d", a->heads, a->world);
    if (a->transport != DCPATTN_DCP_A2A && a->transport != DCPATTN_DCP_AG_RS)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: transport = %d (A2A or AG_RS)",
                             (int)a->transport);
    if (a->layout != DCPATTN_DCP_SCATTER && a->layout != DCPATTN_DCP_REPLICATE)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: layout = %d (SCATTER or REPLICATE)",
                             (int)a->layout);
    if (a->in_dtype < DCPATTN_BF16 || a->in_dtype > DCPATTN_FP32 || a->out_dtype < DCPATTN_BF16 ||
        a->out_dtype > DCPATTN_FP32 || a->comm_dtype < DCPATTN_BF16 || a->comm_dtype > DCPATTN_FP32)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                             "dcp_combine: in_dtype = %d, out_dtype = %d, comm_dtype = %d (bf16, fp16, fp32)",
                             (int)a->in_dtype, (int)a->out_dtype, (int)a->comm_dtype);
    if (a->lse_base2_in != 0 && a->lse_base2_in != 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: lse_base2_in = %d (must be 0 or 1)",
                             a->lse_base2_in);
    if (a->lse_base2_out != 0 && a->lse_base2_out != 1)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: lse_base2_out = %d (must be 0 or 1)",
                             a->lse_base2_out);
    p->hw = a->heads / a->world;
    p->isz = dcpattn__dtype_size(a->in_dtype);
    p->csz = dcpattn__dtype_size(a->comm_dtype);
    p->osz = dcpattn__dtype_size(a->out_dtype);
    if (a->head_dim % (16 / p->isz) || a->head_dim % (16 / p->csz) || a->head_dim % (16 / p->osz))
        return dcpattn__fail(DCPATTN_STATUS_UNSUPPORTED,
                             "dcp_combine: head_dim = %d is not a multiple of 16 bytes for %s in / %s comm / %s out",
                             a->head_dim, dcpattn__dtype_name(a->in_dtype), dcpattn__dtype_name(a->comm_dtype),
                             dcpattn__dtype_name(a->out_dtype));
    scatter = a->layout == DCPATTN_DCP_SCATTER;
    out_heads = scatter ? p->hw : a->heads;
    if (!dcpattn__mul(a->rows, a->heads, &th) || th > INT32_MAX || !dcpattn__mul(th, a->head_dim, &thd) ||
        !dcpattn__mul(thd, 4 * (int64_t)a->world, &total))
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "dcp_combine: world*rows*heads*head_dim = %d*%d*%d*%d overflows",
                             a->world, a->rows, a->heads, a->head_dim);
    {
        const int64_t st[8] = DCPATTN__STATE_STRIDES(a);
        DCPATTN__TRY(dcpattn__check_state_strides("dcp_combine", st, a->in_dtype, a->out_dtype));
    }
    {
        const int64_t st[8] = DCPATTN__STATE_STRIDES(a);
        DCPATTN__TRY(dcpattn__state_spans("dcp_combine", st, a->rows, a->heads, out_heads, a->head_dim, &span_o,
                                          &span_lse, &span_out, &span_lse_out));
    }

    /* what travels, and whether the inputs must be packed first */
    memset(sz, 0, sizeof sz);
    if (a->transport == DCPATTN_DCP_A2A && scatter) {
        p->pack = !(a->comm_dtype == a->in_dtype &&
                    dcpattn__dense_box(a->rows, a->o_stride_t, p->hw, a->o_stride_h, a->head_dim) &&
                    dcpattn__dense_box(a->rows, a->lse_stride_t, p->hw, a->lse_stride_h, 1));
        if (p->pack) {
            sz[0] = (size_t)thd * (size_t)p->csz;
            sz[1] = (size_t)th * 4u;
        }
        sz[2] = (size_t)thd * (size_t)p->csz; /* W blocks of T*Hw*Dv = T*H*Dv */
        sz[3] = (size_t)th * 4u;
    } else if (a->transport == DCPATTN_DCP_A2A) {
        p->pack = !(a->comm_dtype == a->in_dtype &&
                    dcpattn__dense_box(a->rows, a->o_stride_t, a->heads, a->o_stride_h, a->head_dim) &&
                    dcpattn__dense_box(a->rows, a->lse_stride_t, a->heads, a->lse_stride_h, 1));
        sz[2] = (size_t)a->world * (size_t)thd * (size_t)p->csz;
        sz[3] = (size_t)a->world * (size_t)th * 4u;
    } else {
        p->pack = !dcpattn__dense_box(a->rows, a->lse_stride_t, a->heads, a->lse_stride_h, 1);
        if (p->pack)
            sz[0] = (size_t)thd * (size_t)p->isz;
        sz[1] = scatter ? (size_t)a->rows * (size_t)p->hw * (size_t)a->head_dim * (size_t)p->csz : 0;
        sz[2] = (size_t)thd * (size_t)p->csz;
        sz[3] = (size_t)a->world * (size_t)th * 4u;
        sz[4] = (size_t)th * 4u;
    }
    for (i = 0; i < 5; i++) {
        p->off[i] = p->bytes;
        p->bytes += dcpattn__align256(sz[i]);
    }
    if (a->rows == 0)
        p->bytes = 0;
    if (!check_buffers || a->rows == 0)
        return DCPATTN_STATUS_SUCCESS;

    if (!a->o || !a->lse || !a->out)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: %s = NULL",
                             !a->o ? "o" : !a->lse ? "lse" : "out");
    if (!dcpattn__aligned(a->o, 16) || !dcpattn__aligned(a->out, 16))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "dcp_combine: %s = %p is not 16-byte aligned",
                             !dcpattn__aligned(a->o, 16) ? "o" : "out",
                             !dcpattn__aligned(a->o, 16) ? a->o : (const void *)a->out);
    if (!dcpattn__aligned(a->lse, 4) || (a->lse_out && !dcpattn__aligned(a->lse_out, 4)))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "dcp_combine: %s = %p is not 4-byte aligned",
                             !dcpattn__aligned(a->lse, 4) ? "lse" : "lse_out",
                             !dcpattn__aligned(a->lse, 4) ? (const void *)a->lse : (const void *)a->lse_out);
    if (a->rows_limit && !dcpattn__aligned(a->rows_limit, 4))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "dcp_combine: rows_limit = %p is not 4-byte aligned",
                             (const void *)a->rows_limit);
    if (dcpattn__self_overlap(a->rows, a->out_stride_t, out_heads, a->out_stride_h, a->head_dim))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING,
                             "dcp_combine: out rows or heads overlap one another (out_stride_t = %lld, out_stride_h = "
                             "%lld, %d heads of head_dim = %d)",
                             (long long)a->out_stride_t, (long long)a->out_stride_h, out_heads, a->head_dim);
    if (a->lse_out && dcpattn__self_overlap(a->rows, a->lse_out_stride_t, out_heads, a->lse_out_stride_h, 1))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING,
                             "dcp_combine: lse_out elements overlap one another (lse_out_stride_t = %lld, "
                             "lse_out_stride_h = %lld, %d heads)",
                             (long long)a->lse_out_stride_t, (long long)a->lse_out_stride_h, out_heads);
    if (dcpattn__overlap(a->out, span_out * p->osz, a->o, span_o * p->isz))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "dcp_combine: out = %p overlaps o = %p", a->out, a->o);
    if (dcpattn__overlap(a->out, span_out * p->osz, a->lse, span_lse * 4))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "dcp_combine: out = %p overlaps lse = %p", a->out,
                             (const void *)a->lse);
    if (a->lse_out && (dcpattn__overlap(a->lse_out, span_lse_out * 4, a->o, span_o * p->isz) ||
                       dcpattn__overlap(a->lse_out, span_lse_out * 4, a->lse, span_lse * 4) ||
                       dcpattn__overlap(a->lse_out, span_lse_out * 4, a->out, span_out * p->osz)))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "dcp_combine: lse_out = %p overlaps o = %p, lse = %p or out = %p",
                             (void *)a->lse_out, a->o, (const void *)a->lse, a->out);
    if (p->bytes) {
        const int64_t wb = (int64_t)a->workspace_bytes;
        if (!a->workspace || a->workspace_bytes < p->bytes)
            return dcpattn__fail(DCPATTN_STATUS_WORKSPACE, "dcp_combine: workspace %p of %zu bytes, the combine needs %zu",
                                 a->workspace, a->workspace_bytes, p->bytes);
        if (!dcpattn__aligned(a->workspace, 256))
            return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "dcp_combine: workspace = %p is not 256-byte aligned",
                                 a->workspace);
        if (dcpattn__overlap(a->workspace, wb, a->o, span_o * p->isz) ||
            dcpattn__overlap(a->workspace, wb, a->lse, span_lse * 4) ||
            dcpattn__overlap(a->workspace, wb, a->out, span_out * p->osz) ||
            (a->lse_out && dcpattn__overlap(a->workspace, wb, a->lse_out, span_lse_out * 4)))
            return dcpattn__fail(DCPATTN_STATUS_ALIASING,
                                 "dcp_combine: workspace = %p (%zu bytes) overlaps o = %p, lse = %p, out = %p or lse_out = %p",
                                 a->workspace, a->workspace_bytes, a->o, (const void *)a->lse, a->out,
                                 (void *)a->lse_out);
    }
    return DCPATTN_STATUS_SUCCESS;
}

dcpattn_status dcpattn_dcp_combine_validate(const dcpattn_dcp_combine_args *args) {
    dcpattn__dcp_plan p;
    return dcpattn__done(dcpattn__dcp_normalize(args, &p, 1));
}

dcpattn_status dcpattn_dcp_combine_workspace_size(const dcpattn_dcp_combine_args *args, size_t *bytes) {
    dcpattn__dcp_plan p;
    if (!bytes)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine_workspace_size: bytes is NULL");
    *bytes = 0;
    DCPATTN__TRY(dcpattn__dcp_normalize(args, &p, 0));
    *bytes = p.bytes;
    return dcpattn__done(DCPATTN_STATUS_SUCCESS);
}

/* The kernels of a plan: [0] pack (merge in -> comm, or in -> in for AG_RS), [1] rescale
   (AG_RS), [2] final merge (comm -> out). Unused entries stay NULL. */
static dcpattn_status dcpattn__dcp_variants(dcpattn_context *ctx, const dcpattn__dcp_plan *p, int local_only,
                                            dcpattn_stream stream, dcpattn__variant *v[3]) {
    const dcpattn_dcp_combine_args *a = &p->a;
    v[0] = v[1] = v[2] = NULL;
    if (local_only)
        return dcpattn__pair_variant(ctx, DCPATTN__MERGE, a->in_dtype, a->out_dtype, stream, &v[2]);
    if (a->transport == DCPATTN_DCP_A2A) {
        if (p->pack)
            DCPATTN__TRY(dcpattn__pair_variant(ctx, DCPATTN__MERGE, a->in_dtype, a->comm_dtype, stream, &v[0]));
    } else {
        if (p->pack)
            DCPATTN__TRY(dcpattn__pair_variant(ctx, DCPATTN__MERGE, a->in_dtype, a->in_dtype, stream, &v[0]));
        DCPATTN__TRY(dcpattn__pair_variant(ctx, DCPATTN__RESCALE, a->in_dtype, a->comm_dtype, stream, &v[1]));
    }
    return dcpattn__pair_variant(ctx, DCPATTN__MERGE, a->comm_dtype, a->out_dtype, stream, &v[2]);
}

dcpattn_status dcpattn_dcp_combine_prepare(dcpattn_context *ctx, const dcpattn_dcp_combine_args *args) {
    dcpattn__dcp_plan p;
    dcpattn__variant *v[3];
    DCPATTN__TRY(dcpattn__runnable(ctx, "dcp_combine_prepare"));
    DCPATTN__TRY(dcpattn__dcp_normalize(args, &p, 0));
    DCPATTN__TRY(dcpattn__dcp_variants(ctx, &p, 1, NULL, v));
    return dcpattn__done(dcpattn__dcp_variants(ctx, &p, 0, NULL, v));
}

/* One launch of the merge kernel (kind 0) or the rescale kernel (kind 1) over states that
   share strides: the merge arguments (m.o and m.lse are set to o and lse at launch; head_dim
   and rows_limit come from the plan). */
typedef struct dcpattn__dcp_launch {
    dcpattn_merge_args m;
    const void *o[DCPATTN_MAX_MERGE_STATES];
    const float *lse[DCPATTN_MAX_MERGE_STATES];
} dcpattn__dcp_launch;

/* The caller's partial state (o, lse and their strides) as state 0 of a launch. */
static void dcpattn__dcp_from_caller(dcpattn__dcp_launch *l, const dcpattn_dcp_combine_args *a) {
    l->o[0] = a->o;
    l->lse[0] = a->lse;
    l->m.o_stride_t = a->o_stride_t, l->m.o_stride_h = a->o_stride_h;
    l->m.lse_stride_t = a->lse_stride_t, l->m.lse_stride_h = a->lse_stride_h;
}
/* The caller's out and lse_out (strides, LSE bases) as the destination of a launch. */
static void dcpattn__dcp_to_caller(dcpattn__dcp_launch *l, const dcpattn_dcp_combine_args *a) {
    l->m.out = a->out;
    l->m.lse_out = a->lse_out;
    l->m.out_stride_t = a->out_stride_t, l->m.out_stride_h = a->out_stride_h;
    l->m.lse_out_stride_t = a->lse_out_stride_t, l->m.lse_out_stride_h = a->lse_out_stride_h;
    l->m.lse_base2_in = a->lse_base2_in;
    l->m.lse_base2_out = a->lse_base2_out;
}

static dcpattn_status dcpattn__dcp_run_kernel(const dcpattn__variant *v, const dcpattn__dcp_plan *p,
                                              dcpattn__dcp_launch *l, dcpattn_stream stream) {
    l->m.head_dim = p->a.head_dim;
    l->m.o = l->o;
    l->m.lse = l->lse;
    return dcpattn__merge_launch(v, &l->m, p->a.rows_limit, stream);
}

/* Group helpers: a failure inside a group still ends the group (NCCL needs them balanced). */
#define DCPATTN__NCCL_GROUP_CALL(expr, what)                     \
    do {                                                         \
        int rc_ = (expr);                                        \
        if (!dcpattn__nccl_ok(rc_) && !nccl_rc)                  \
            nccl_rc = rc_, nccl_what = (what);                   \
    } while (0)

static int dcpattn__nccl_type(dcpattn_dtype t) {
    return t == DCPATTN_FP32 ? DCPATTN__NCCL_FLOAT32 : t == DCPATTN_FP16 ? DCPATTN__NCCL_FLOAT16 : DCPATTN__NCCL_BFLOAT16;
}

static int dcpattn__nccl_ok(int rc) { return rc == DCPATTN__NCCL_SUCCESS || rc == DCPATTN__NCCL_IN_PROGRESS; }

static dcpattn_status dcpattn__dcp_issue(const dcpattn__dcp_plan *p, dcpattn__variant *const v[3],
                                         dcpattn_nccl_comm comm, dcpattn_stream stream) {
    const dcpattn_dcp_combine_args *a = &p->a;
    const int W = a->world, r = a->rank, T = a->rows, H = a->heads, D = a->head_dim, hw = p->hw;
    const size_t th = (size_t)T * (size_t)H, thd = th * (size_t)D, blk = (size_t)T * (size_t)hw * (size_t)D;
    const int ct = dcpattn__nccl_type(a->comm_dtype);
    const int scatter = a->layout == DCPATTN_DCP_SCATTER;
    char *ws = (char *)a->workspace;
    dcpattn__dcp_launch l;
    int nccl_rc = 0, q;
    const char *nccl_what = "";

    memset(&l, 0, sizeof l);
    if (a->transport == DCPATTN_DCP_A2A) {
        /* o and lse of this rank: either the caller's (dense blocks) or packed head-major */
        const char *src_o = (const char *)a->o;
        const float *src_lse = a->lse;
        int64_t so_st = a->o_stride_t, so_sh = a->o_stride_h, sl_st = a->lse_stride_t, sl_sh = a->lse_stride_h;
        char *recv_o = ws + p->off[2];
        float *recv_lse = (float *)(ws + p->off[3]);
        if (p->pack) {
            /* copy (and convert to comm dtype) with the merge kernel, one state: SCATTER packs
               head-major [H][T][Dv] so each head block is contiguous; REPLICATE writes the
               standard [T][H][Dv] into this rank's all-gather slot */
            l.m.num_states = 1;
            l.m.rows = T;
            l.m.heads = H;
            l.m.in_dtype = a->in_dtype;
            l.m.out_dtype = a->comm_dtype;
            dcpattn__dcp_from_caller(&l, a);
            l.m.lse_base2_in = l.m.lse_base2_out = a->lse_base2_in;
            if (scatter) {
                l.m.out = ws + p->off[0];
                l.m.lse_out = (float *)(ws + p->off[1]);
                l.m.out_stride_t = D, l.m.out_stride_h = (int64_t)T * D;
                l.m.lse_out_stride_t = 1, l.m.lse_out_stride_h = T;
            } else {
                l.m.out = recv_o + (size_t)r * thd * (size_t)p->csz;
                l.m.lse_out = recv_lse + (size_t)r * th;
                l.m.out_stride_t = (int64_t)H * D, l.m.out_stride_h = D;
                l.m.lse_out_stride_t = H, l.m.lse_out_stride_h = 1;
            }
            DCPATTN__TRY(dcpattn__dcp_run_kernel(v[0], p, &l, stream));
            src_o = (const char *)l.m.out;
            src_lse = l.m.lse_out;
            so_st = l.m.out_stride_t, so_sh = l.m.out_stride_h;
            sl_st = l.m.lse_out_stride_t, sl_sh = l.m.lse_out_stride_h;
        }
        DCPATTN__NCCL_GROUP_CALL(dcpattn__nccl.GroupStart(), "ncclGroupStart");
        if (nccl_rc)
            return dcpattn__nccl_fail(comm, nccl_rc, nccl_what);
        if (scatter) {
            /* block q of heads goes to rank q; the block from rank q lands in slot q */
            for (q = 0; q < W; q++) {
                if (q == r)
                    continue;
                DCPATTN__NCCL_GROUP_CALL(dcpattn__nccl.Send(src_o + (size_t)q * (size_t)hw * (size_t)so_sh * (size_t)p->csz,
                                                            blk, ct, q, comm, stream), "ncclSend(o)");
                DCPATTN__NCCL_GROUP_CALL(dcpattn__nccl.Recv(recv_o + (size_t)q * blk * (size_t)p->csz, blk, ct, q, comm,
                                                            stream), "ncclRecv(o)");
                DCPATTN__NCCL_GROUP_CALL(dcpattn__nccl.Send(src_lse + (size_t)q * (size_t)hw * (size_t)sl_sh,
                                                            (size_t)T * (size_t)hw, DCPATTN__NCCL_FLOAT32, q, comm, stream),
                                         "ncclSend(lse)");
                DCPATTN__NCCL_GROUP_CALL(dcpattn__nccl.Recv(recv_lse + (size_t)q * (size_t)T * (size_t)hw,
                                                            (size_t)T * (size_t)hw, DCPATTN__NCCL_FLOAT32, q, comm, stream),
                                         "ncclRecv(lse)");
            }
        } else {
            /* all-gather: in place when packed (this rank's slot already holds its data) */
            DCPATTN__NCCL_GROUP_CALL(dcpattn__nccl.AllGather(src_o, recv_o, thd, ct, comm, stream), "ncclAllGather(o)");
            DCPATTN__NCCL_GROUP_CALL(dcpattn__nccl.AllGather(src_lse, recv_lse, th, DCPATTN__NCCL_FLOAT32, comm, stream),
                                     "ncclAllGather(lse)");
        }
        {
            int rc = dcpattn__nccl.GroupEnd();
            if (!dcpattn__nccl_ok(rc) && !nccl_rc)
                nccl_rc = rc, nccl_what = "ncclGroupEnd";
        }
        if (nccl_rc && nccl_rc != DCPATTN__NCCL_IN_PROGRESS)
            return dcpattn__nccl_fail(comm, nccl_rc, nccl_what);
        /* merge the W slices, rank order 0..W-1 on every rank */
        memset(&l, 0, sizeof l);
        l.m.num_states = W;
        l.m.rows = T;
        l.m.heads = scatter ? hw : H;
        l.m.in_dtype = a->comm_dtype;
        l.m.out_dtype = a->out_dtype;
        l.m.o_stride_t = so_st, l.m.o_stride_h = so_sh, l.m.lse_stride_t = sl_st, l.m.lse_stride_h = sl_sh;
        for (q = 0; q < W; q++) {
            if (scatter && q == r) { /* this rank's own block never travelled */
                l.o[q] = src_o + (size_t)r * (size_t)hw * (size_t)so_sh * (size_t)p->csz;
                l.lse[q] = src_lse + (size_t)r * (size_t)hw * (size_t)sl_sh;
            } else if (scatter) {
                l.o[q] = recv_o + (size_t)q * blk * (size_t)p->csz;
                l.lse[q] = recv_lse + (size_t)q * (size_t)T * (size_t)hw;
            } else {
                l.o[q] = recv_o + (size_t)q * thd * (size_t)p->csz;
                l.lse[q] = recv_lse + (size_t)q * th;
            }
        }
    } else {
        /* AG_RS: all-gather LSE, rescale, reduce-scatter (or all-reduce), copy out */
        float *gl = (float *)(ws + p->off[3]), *glse = (float *)(ws + p->off[4]);
        char *resc = ws + p->off[2], *rs = ws + p->off[1];
        const void *own_o = a->o;
        int64_t o_st = a->o_stride_t, o_sh = a->o_stride_h, l_st = a->lse_stride_t, l_sh = a->lse_stride_h;
        const float *lse_src = a->lse;
        if (p->pack) { /* lse not one dense block: copy (o, lse) into standard layout first */
            l.m.num_states = 1;
            l.m.rows = T;
            l.m.heads = H;
            l.m.in_dtype = l.m.out_dtype = a->in_dtype;
            dcpattn__dcp_from_caller(&l, a);
            l.m.out = ws + p->off[0];
            l.m.lse_out = gl + (size_t)r * th;
            l.m.out_stride_t = (int64_t)H * D, l.m.out_stride_h = D, l.m.lse_out_stride_t = H, l.m.lse_out_stride_h = 1;
            l.m.lse_base2_in = l.m.lse_base2_out = a->lse_base2_in;
            DCPATTN__TRY(dcpattn__dcp_run_kernel(v[0], p, &l, stream));
            own_o = l.m.out;
            lse_src = l.m.lse_out;
            o_st = l.m.out_stride_t, o_sh = l.m.out_stride_h;
            l_st = l.m.lse_out_stride_t, l_sh = l.m.lse_out_stride_h;
        }
        {
            int rc = dcpattn__nccl.AllGather(lse_src, gl, th, DCPATTN__NCCL_FLOAT32, comm, stream);
            if (!dcpattn__nccl_ok(rc))
                return dcpattn__nccl_fail(comm, rc, "ncclAllGather(lse)");
        }
        memset(&l, 0, sizeof l);
        l.m.num_states = W;
        l.m.rows = T;
        l.m.heads = H;
        l.m.in_dtype = a->in_dtype;
        l.m.out_dtype = a->comm_dtype;
        l.o[0] = own_o;
        l.lse[0] = gl + (size_t)r * th; /* own LSE first, then the others */
        for (q = 0; q < W - 1; q++)
            l.lse[q + 1] = gl + (size_t)(q < r ? q : q + 1) * th;
        for (q = 1; q < W; q++)
            l.o[q] = own_o; /* not read by the rescale kernel */
        l.m.o_stride_t = o_st, l.m.o_stride_h = o_sh, l.m.lse_stride_t = l_st, l.m.lse_stride_h = l_sh;
        l.m.out = resc; /* head-major [H][T][Dv]: rank q's heads are one contiguous chunk */
        l.m.out_stride_t = D, l.m.out_stride_h = (int64_t)T * D;
        l.m.lse_out = glse;
        l.m.lse_out_stride_t = 1, l.m.lse_out_stride_h = T;
        l.m.lse_base2_in = l.m.lse_base2_out = a->lse_base2_in;
        DCPATTN__TRY(dcpattn__dcp_run_kernel(v[1], p, &l, stream));
        {
            int rc = scatter ? dcpattn__nccl.ReduceScatter(resc, rs, blk, ct, DCPATTN__NCCL_SUM, comm, stream)
                             : dcpattn__nccl.AllReduce(resc, resc, thd, ct, DCPATTN__NCCL_SUM, comm, stream);
            if (!dcpattn__nccl_ok(rc))
                return dcpattn__nccl_fail(comm, rc, scatter ? "ncclReduceScatter" : "ncclAllReduce");
        }
        /* copy into out: the summed output, weights 1, the global LSE of these heads */
        memset(&l, 0, sizeof l);
        l.m.num_states = 1;
        l.m.rows = T;
        l.m.heads = scatter ? hw : H;
        l.m.in_dtype = a->comm_dtype;
        l.m.out_dtype = a->out_dtype;
        l.o[0] = scatter ? (const void *)rs : (const void *)resc;
        l.lse[0] = glse + (scatter ? (size_t)r * (size_t)hw * (size_t)T : 0);
        l.m.o_stride_t = D, l.m.o_stride_h = (int64_t)T * D, l.m.lse_stride_t = 1, l.m.lse_stride_h = T;
    }
    dcpattn__dcp_to_caller(&l, a);
    return dcpattn__dcp_run_kernel(v[2], p, &l, stream);
}
#undef DCPATTN__NCCL_GROUP_CALL

static dcpattn_status dcpattn__dcp_combine(dcpattn_context *ctx, dcpattn_nccl_comm comm,
                                           const dcpattn_dcp_combine_args *args, dcpattn_stream stream) {
    dcpattn__dcp_plan p;
    dcpattn__variant *v[3];
    DCPATTN__TRY(dcpattn__runnable(ctx, "dcp_combine"));
    DCPATTN__TRY(dcpattn__dcp_normalize(args, &p, 1));
    if (!comm) {
        dcpattn__dcp_launch l;
        if (p.a.world != 1)
            return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT,
                                 "dcp_combine: comm is NULL with world = %d (only W = 1 needs none)", p.a.world);
        if (p.a.rows == 0)
            return DCPATTN_STATUS_SUCCESS;
        DCPATTN__TRY(dcpattn__dcp_variants(ctx, &p, 1, stream, v));
        memset(&l, 0, sizeof l); /* W = 1: the merge of one state is the combine */
        l.m.num_states = 1;
        l.m.rows = p.a.rows;
        l.m.heads = p.a.heads;
        l.m.in_dtype = p.a.in_dtype;
        l.m.out_dtype = p.a.out_dtype;
        dcpattn__dcp_from_caller(&l, &p.a);
        dcpattn__dcp_to_caller(&l, &p.a);
        return dcpattn__dcp_run_kernel(v[2], &p, &l, stream);
    }
    DCPATTN__TRY(dcpattn__load_nccl());
    {
        int count = -1, rank = -1, dev = -1, async = 0, rc;
        dcpattn__CUdevice cdev = -1;
        dcpattn__CUcontext prev;
        if ((rc = dcpattn__nccl.CommCount(comm, &count)) != DCPATTN__NCCL_SUCCESS)
            return dcpattn__nccl_fail(comm, rc, "ncclCommCount");
        if ((rc = dcpattn__nccl.CommUserRank(comm, &rank)) != DCPATTN__NCCL_SUCCESS)
            return dcpattn__nccl_fail(comm, rc, "ncclCommUserRank");
        if ((rc = dcpattn__nccl.CommCuDevice(comm, &dev)) != DCPATTN__NCCL_SUCCESS)
            return dcpattn__nccl_fail(comm, rc, "ncclCommCuDevice");
        DCPATTN__TRY(dcpattn__cu_check(dcpattn__cu.CtxPushCurrent(ctx->cuctx), "cuCtxPushCurrent"));
        rc = dcpattn__cu.CtxGetDevice(&cdev);
        dcpattn__cu.CtxPopCurrent(&prev);
        DCPATTN__TRY(dcpattn__cu_check(rc, "cuCtxGetDevice"));
        DCPATTN__TRY(dcpattn__dcp_check_group(p.a.world, p.a.rank, count, rank, dev, (int)cdev));
        if ((rc = dcpattn__nccl.CommGetAsyncError(comm, &async)) != DCPATTN__NCCL_SUCCESS)
            return dcpattn__nccl_fail(comm, rc, "ncclCommGetAsyncError");
        if (async != DCPATTN__NCCL_SUCCESS && async != DCPATTN__NCCL_IN_PROGRESS)
            return dcpattn__nccl_fail(comm, async, "dcp_combine: the communicator has an asynchronous error");
    }
    if (p.a.rows == 0)
        return DCPATTN_STATUS_SUCCESS;
    DCPATTN__TRY(dcpattn__dcp_variants(ctx, &p, 0, stream, v));
    return dcpattn__dcp_issue(&p, v, comm, stream);
}

dcpattn_status dcpattn_dcp_combine(dcpattn_context *ctx, dcpattn_nccl_comm comm, const dcpattn_dcp_combine_args *args,
                                   dcpattn_stream stream) {
    return dcpattn__done(dcpattn__dcp_combine(ctx, comm, args, stream));
}

static dcpattn_status dcpattn__dcp_wait(dcpattn_nccl_comm comm, dcpattn_stream stream, int timeout_ms) {
    const double t0 = dcpattn__now();
    long sleep_ns = 2000;
    int capturing = 0;
    DCPATTN__TRY(dcpattn__load_driver());
    if (comm)
        DCPATTN__TRY(dcpattn__load_nccl());
    if (dcpattn__cu.StreamIsCapturing(stream, &capturing) == 0 && capturing)
        return dcpattn__fail(DCPATTN_STATUS_CAPTURE, "dcp_wait: the stream is being captured");
    for (;;) {
        int q = dcpattn__cu.StreamQuery(stream), async = 0;
        if (comm) {
            int rc = dcpattn__nccl.CommGetAsyncError(comm, &async);
            if (rc != DCPATTN__NCCL_SUCCESS)
                return dcpattn__nccl_fail(comm, rc, "dcp_wait: ncclCommGetAsyncError");
            if (async != DCPATTN__NCCL_SUCCESS && async != DCPATTN__NCCL_IN_PROGRESS)
                return dcpattn__nccl_fail(comm, async, "dcp_wait: asynchronous NCCL error (the communicator is left as "
                                                       "it is; the caller may abort it)");
        }
        if (q == 0 && async != DCPATTN__NCCL_IN_PROGRESS)
            return DCPATTN_STATUS_SUCCESS;
        if (q != 0 && q != 600 /* CUDA_ERROR_NOT_READY */)
            return dcpattn__cu_check(q, "dcp_wait: cuStreamQuery");
        if (timeout_ms >= 0 && (dcpattn__now() - t0) * 1000.0 >= (double)timeout_ms)
            return dcpattn__fail(DCPATTN_STATUS_TIMEOUT,
                                 "dcp_wait: the stream has not finished after %d ms and NCCL reports no error: a rank "
                                 "may not have joined the collective; the communicator is left as it is (the caller may "
                                 "abort it with ncclCommAbort)",
                                 timeout_ms);
        {
            struct timespec ts;
            ts.tv_sec = 0;
            ts.tv_nsec = sleep_ns;
            nanosleep(&ts, NULL);
            if (sleep_ns < 1000000)
                sleep_ns *= 2;
        }
    }
}

dcpattn_status dcpattn_dcp_wait(dcpattn_nccl_comm comm, dcpattn_stream stream, int timeout_ms) {
    return dcpattn__done(dcpattn__dcp_wait(comm, stream, timeout_ms));
}

#endif /* DCPATTN_IMPLEMENTATION_DONE */
#endif /* DCPATTN_IMPLEMENTATION */
