/* dcpattn_combine.inc.h — STAGING for dcpattn.h: the DCP combine across GPUs over NCCL.

   Two parts, each written exactly as it will sit in dcpattn.h:
     "API"            goes just before the "kernel launch ABI" comment of the header (inside
                      its extern "C" block and include guard);
     "IMPLEMENTATION" goes at the end of the implementation, just before
                      "#endif / * DCPATTN_IMPLEMENTATION_DONE * /".
   Only the lines between a part's marker and its END marker are pasted; the guards around
   them exist for the staging period alone. Until then a program includes this file right
   after the header:

       #define DCPATTN_IMPLEMENTATION
       #include "dcpattn.h"
       #ifndef DCPATTN_COMBINE_IN_HEADER
       #include "dcpattn_combine.inc.h"
       #endif
*/
#ifndef DCPATTN_COMBINE_INC_API_
#define DCPATTN_COMBINE_INC_API_
#ifdef __cplusplus
extern "C" {
#endif

/* ---- API ---- */
/* ---- DCP combine across ranks over NCCL (DESIGN.md 3.6) ----
   Each of the W ranks of a DCP group holds a partial state (o_r [T, H, Dv], lse_r [T, H])
   for the same T rows and H heads, e.g. the output of dcpattn_attn_run over its KV shard
   with all H query heads. The combine gives the exact merge of the W states (the math of
   dcpattn_merge, DESIGN.md 3.5):
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
    int world, rank;               /* W >= 1 (0 = 1) and r; must match the communicator */
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
    int lse_base2_in, lse_base2_out;
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
#define DCPATTN_COMBINE_IN_HEADER 1
/* ---- END API ---- */

#ifdef __cplusplus
}
#endif
#endif /* DCPATTN_COMBINE_INC_API_ */

#if defined(DCPATTN_IMPLEMENTATION_DONE) && !defined(DCPATTN_COMBINE_INC_IMPL_)
#define DCPATTN_COMBINE_INC_IMPL_

/* ---- IMPLEMENTATION ---- */
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
static void *dcpattn__nccl_open(void) {
    static const char *const names[] = {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib/libnccl.so.2",
                                        "/usr/local/cuda/lib64/libnccl.so.2", NULL};
    const char *e = getenv("DCPATTN_NCCL_LIBRARY");
    const char *const *n;
    void *h;
    if (e && *e)
        return dlopen(e, RTLD_NOW | RTLD_LOCAL);
    for (n = names; *n; n++)
        if ((h = dlopen(*n, RTLD_NOW | RTLD_NOLOAD)) != NULL)
            return h;
    if (dlsym(RTLD_DEFAULT, "ncclCommGetAsyncError"))
        return RTLD_DEFAULT;
    for (n = names; *n; n++)
        if ((h = dlopen(*n, RTLD_NOW | RTLD_LOCAL)) != NULL)
            return h;
    return NULL;
}
#endif

static dcpattn_status dcpattn__load_nccl(void) {
#ifdef DCPATTN_NO_NCCL
    return dcpattn__fail(DCPATTN_STATUS_NO_NCCL, "NCCL: this build has DCPATTN_NO_NCCL");
#else
    static char why[512];
    const char *missing = NULL;
    void *lib;
    pthread_mutex_lock(&dcpattn__lib_lock);
    if (!dcpattn__nccl.tried) {
        dcpattn__nccl.tried = 1;
        lib = dcpattn__nccl_open();
        if (!lib) {
            snprintf(why, sizeof why, "dlopen(libnccl.so.2) failed: %s", dlerror());
        } else {
            void *p;
            DCPATTN__SYM(lib, dcpattn__nccl, GetVersion, "ncclGetVersion");
            DCPATTN__SYM(lib, dcpattn__nccl, GetErrorString, "ncclGetErrorString");
            DCPATTN__SYM(lib, dcpattn__nccl, CommCount, "ncclCommCount");
            DCPATTN__SYM(lib, dcpattn__nccl, CommCuDevice, "ncclCommCuDevice");
            DCPATTN__SYM(lib, dcpattn__nccl, CommUserRank, "ncclCommUserRank");
            DCPATTN__SYM(lib, dcpattn__nccl, CommGetAsyncError, "ncclCommGetAsyncError");
            DCPATTN__SYM(lib, dcpattn__nccl, GroupStart, "ncclGroupStart");
            DCPATTN__SYM(lib, dcpattn__nccl, GroupEnd, "ncclGroupEnd");
            DCPATTN__SYM(lib, dcpattn__nccl, Send, "ncclSend");
            DCPATTN__SYM(lib, dcpattn__nccl, Recv, "ncclRecv");
            DCPATTN__SYM(lib, dcpattn__nccl, AllGather, "ncclAllGather");
            DCPATTN__SYM(lib, dcpattn__nccl, ReduceScatter, "ncclReduceScatter");
            DCPATTN__SYM(lib, dcpattn__nccl, AllReduce, "ncclAllReduce");
            p = dlsym(lib, "ncclGetLastError"); /* optional: older NCCL has no detail message */
            memcpy(&dcpattn__nccl.GetLastError, &p, sizeof p);
            if (missing)
                snprintf(why, sizeof why, "libnccl lacks %s", missing);
            else if (dcpattn__nccl.GetVersion(&dcpattn__nccl.version) != DCPATTN__NCCL_SUCCESS)
                snprintf(why, sizeof why, "ncclGetVersion failed");
            else if (dcpattn__nccl.version < DCPATTN__NCCL_MIN_VERSION)
                snprintf(why, sizeof why, "NCCL version code %d is older than 2.10 (needed: bf16, send/recv)",
                         dcpattn__nccl.version);
            else
                dcpattn__nccl.ok = 1;
        }
    }
    pthread_mutex_unlock(&dcpattn__lib_lock);
    if (!dcpattn__nccl.ok)
        return dcpattn__fail(DCPATTN_STATUS_NO_NCCL, "NCCL: %s", why[0] ? why : "not loaded");
    return DCPATTN_STATUS_SUCCESS;
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
    p->hw = a->heads / a->world;
    p->isz = dcpattn__dtype_size(a->in_dtype);
    p->csz = dcpattn__dtype_size(a->comm_dtype);
    p->osz = dcpattn__dtype_size(a->out_dtype);
    if ((a->head_dim * p->isz) % 16 || (a->head_dim * p->csz) % 16 || (a->head_dim * p->osz) % 16)
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
    if (!a->o_stride_h) a->o_stride_h = a->head_dim;
    if (!a->o_stride_t) a->o_stride_t = (int64_t)a->heads * a->o_stride_h;
    if (!a->lse_stride_h) a->lse_stride_h = 1;
    if (!a->lse_stride_t) a->lse_stride_t = (int64_t)a->heads * a->lse_stride_h;
    if (!a->out_stride_h) a->out_stride_h = a->head_dim;
    if (!a->out_stride_t) a->out_stride_t = (int64_t)out_heads * a->out_stride_h;
    if (!a->lse_out_stride_h) a->lse_out_stride_h = 1;
    if (!a->lse_out_stride_t) a->lse_out_stride_t = (int64_t)out_heads * a->lse_out_stride_h;
    if (a->o_stride_t < 0 || a->o_stride_h < 0 || a->lse_stride_t < 0 || a->lse_stride_h < 0 || a->out_stride_t < 0 ||
        a->out_stride_h < 0 || a->lse_out_stride_t < 0 || a->lse_out_stride_h < 0)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: negative stride");
    if ((a->o_stride_t * p->isz) % 16 || (a->o_stride_h * p->isz) % 16)
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED,
                             "dcp_combine: o strides (%lld, %lld) are not multiples of 16 bytes",
                             (long long)a->o_stride_t, (long long)a->o_stride_h);
    if ((a->out_stride_t * p->osz) % 16 || (a->out_stride_h * p->osz) % 16)
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED,
                             "dcp_combine: out strides (%lld, %lld) are not multiples of 16 bytes",
                             (long long)a->out_stride_t, (long long)a->out_stride_h);
    if (!dcpattn__span(a->rows, a->o_stride_t, a->heads, a->o_stride_h, a->head_dim, &span_o) ||
        !dcpattn__span(a->rows, a->lse_stride_t, a->heads, a->lse_stride_h, 1, &span_lse) ||
        !dcpattn__span(a->rows, a->out_stride_t, out_heads, a->out_stride_h, a->head_dim, &span_out) ||
        !dcpattn__span(a->rows, a->lse_out_stride_t, out_heads, a->lse_out_stride_h, 1, &span_lse_out) ||
        span_o > INT64_MAX / 4 || span_out > INT64_MAX / 4 || span_lse > INT64_MAX / 4 || span_lse_out > INT64_MAX / 4)
        return dcpattn__fail(DCPATTN_STATUS_OVERFLOW, "dcp_combine: tensor extents overflow 64 bits");

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
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: %s is NULL",
                             !a->o ? "o" : !a->lse ? "lse" : "out");
    if (!dcpattn__aligned(a->o, 16) || !dcpattn__aligned(a->out, 16))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "dcp_combine: %s = %p is not 16-byte aligned",
                             !dcpattn__aligned(a->o, 16) ? "o" : "out",
                             !dcpattn__aligned(a->o, 16) ? a->o : (const void *)a->out);
    if (!dcpattn__aligned(a->lse, 4) || (a->lse_out && !dcpattn__aligned(a->lse_out, 4)))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "dcp_combine: lse or lse_out is not 4-byte aligned");
    if (a->rows_limit && !dcpattn__aligned(a->rows_limit, 4))
        return dcpattn__fail(DCPATTN_STATUS_MISALIGNED, "dcp_combine: rows_limit = %p is not 4-byte aligned",
                             (const void *)a->rows_limit);
    if (dcpattn__overlap(a->out, span_out * p->osz, a->o, span_o * p->isz) ||
        dcpattn__overlap(a->out, span_out * p->osz, a->lse, span_lse * 4))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "dcp_combine: out overlaps o or lse");
    if (a->lse_out && (dcpattn__overlap(a->lse_out, span_lse_out * 4, a->o, span_o * p->isz) ||
                       dcpattn__overlap(a->lse_out, span_lse_out * 4, a->lse, span_lse * 4) ||
                       dcpattn__overlap(a->lse_out, span_lse_out * 4, a->out, span_out * p->osz)))
        return dcpattn__fail(DCPATTN_STATUS_ALIASING, "dcp_combine: lse_out overlaps o, lse or out");
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
            return dcpattn__fail(DCPATTN_STATUS_ALIASING, "dcp_combine: workspace overlaps o, lse, out or lse_out");
    }
    return DCPATTN_STATUS_SUCCESS;
}

dcpattn_status dcpattn_dcp_combine_validate(const dcpattn_dcp_combine_args *args) {
    dcpattn__dcp_plan p;
    return dcpattn__dcp_normalize(args, &p, 1);
}

dcpattn_status dcpattn_dcp_combine_workspace_size(const dcpattn_dcp_combine_args *args, size_t *bytes) {
    dcpattn__dcp_plan p;
    if (!bytes)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine_workspace_size: bytes is NULL");
    *bytes = 0;
    DCPATTN__TRY(dcpattn__dcp_normalize(args, &p, 0));
    *bytes = p.bytes;
    return DCPATTN_STATUS_SUCCESS;
}

/* Canonical name of a combine (rescale) variant, from the generator; memoized process-wide
   (names depend on the generator only). TODO(header): a per-context memo like merge_names. */
static dcpattn_status dcpattn__combine_name(dcpattn_context *ctx, dcpattn_dtype in, dcpattn_dtype out, char *buf,
                                            size_t n) {
    static char memo[4][4][64];
    lua_State *L = ctx->L;
    dcpattn_status s = DCPATTN_STATUS_SUCCESS;
    pthread_mutex_lock(&dcpattn__lib_lock);
    snprintf(buf, n, "%s", memo[in][out]);
    pthread_mutex_unlock(&dcpattn__lib_lock);
    if (buf[0])
        return DCPATTN_STATUS_SUCCESS;
    pthread_mutex_lock(&ctx->lock);
    dcpattn__lua_fn(ctx, "name");
    lua_createtable(L, 0, 3);
    lua_pushstring(L, "combine");
    lua_setfield(L, -2, "family");
    lua_pushstring(L, dcpattn__dtype_name(in));
    lua_setfield(L, -2, "in_dtype");
    lua_pushstring(L, dcpattn__dtype_name(out));
    lua_setfield(L, -2, "out_dtype");
    s = dcpattn__lua_pcall(ctx, 1, 2);
    if (!s) {
        if (!lua_isstring(L, -2))
            s = dcpattn__fail(DCPATTN_STATUS_GENERATOR, "%s", lua_tostring(L, -1));
        else
            snprintf(buf, n, "%s", lua_tostring(L, -2));
        lua_pop(L, 2);
    }
    pthread_mutex_unlock(&ctx->lock);
    if (!s) {
        pthread_mutex_lock(&dcpattn__lib_lock);
        snprintf(memo[in][out], sizeof memo[in][out], "%s", buf);
        pthread_mutex_unlock(&dcpattn__lib_lock);
    }
    return s;
}

static dcpattn_status dcpattn__dcp_merge_variant(dcpattn_context *ctx, dcpattn_dtype in, dcpattn_dtype out,
                                                 dcpattn_stream stream, dcpattn__variant **v) {
    char name[64];
    dcpattn_status s;
    pthread_mutex_lock(&ctx->lock);
    s = dcpattn__merge_name(ctx, in, out, name, sizeof name);
    pthread_mutex_unlock(&ctx->lock);
    if (s)
        return s;
    return dcpattn__variant_for_run(ctx, name, stream, v);
}

/* The kernels of a plan: [0] pack (merge in -> comm, or in -> in for AG_RS), [1] rescale
   (AG_RS), [2] final merge (comm -> out). Unused entries stay NULL. */
static dcpattn_status dcpattn__dcp_variants(dcpattn_context *ctx, const dcpattn__dcp_plan *p, int local_only,
                                            dcpattn_stream stream, dcpattn__variant *v[3]) {
    const dcpattn_dcp_combine_args *a = &p->a;
    char name[64];
    v[0] = v[1] = v[2] = NULL;
    if (local_only)
        return dcpattn__dcp_merge_variant(ctx, a->in_dtype, a->out_dtype, stream, &v[2]);
    if (a->transport == DCPATTN_DCP_A2A) {
        if (p->pack)
            DCPATTN__TRY(dcpattn__dcp_merge_variant(ctx, a->in_dtype, a->comm_dtype, stream, &v[0]));
    } else {
        if (p->pack)
            DCPATTN__TRY(dcpattn__dcp_merge_variant(ctx, a->in_dtype, a->in_dtype, stream, &v[0]));
        DCPATTN__TRY(dcpattn__combine_name(ctx, a->in_dtype, a->comm_dtype, name, sizeof name));
        DCPATTN__TRY(dcpattn__variant_for_run(ctx, name, stream, &v[1]));
    }
    return dcpattn__dcp_merge_variant(ctx, a->comm_dtype, a->out_dtype, stream, &v[2]);
}

dcpattn_status dcpattn_dcp_combine_prepare(dcpattn_context *ctx, const dcpattn_dcp_combine_args *args) {
    dcpattn__dcp_plan p;
    dcpattn__variant *v[3];
    if (!ctx)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine_prepare: context is NULL");
    if (ctx->compile_only)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine_prepare: context is compile-only");
    DCPATTN__TRY(dcpattn__dcp_normalize(args, &p, 0));
    DCPATTN__TRY(dcpattn__dcp_variants(ctx, &p, 1, NULL, v));
    return dcpattn__dcp_variants(ctx, &p, 0, NULL, v);
}

/* One launch of the merge kernel (kind 0) or the rescale kernel (kind 1) over states that
   share strides: rows x heads (row-heads of Dv), o[i]/lse[i] per state. */
typedef struct dcpattn__dcp_launch {
    int n, rows, heads;
    dcpattn_dtype in, out;
    const void *o[DCPATTN_MAX_MERGE_STATES];
    const float *lse[DCPATTN_MAX_MERGE_STATES];
    int64_t o_st, o_sh, lse_st, lse_sh;
    void *dst;
    float *lse_dst;
    int64_t dst_st, dst_sh, lse_dst_st, lse_dst_sh;
    int base2_in, base2_out;
} dcpattn__dcp_launch;

static dcpattn_status dcpattn__dcp_run_kernel(const dcpattn__variant *v, const dcpattn__dcp_plan *p,
                                              const dcpattn__dcp_launch *l, dcpattn_stream stream) {
    dcpattn__merge_norm m;
    memset(&m, 0, sizeof m);
    m.a.num_states = l->n;
    m.a.rows = l->rows;
    m.a.heads = l->heads;
    m.a.head_dim = p->a.head_dim;
    m.a.in_dtype = l->in;
    m.a.out_dtype = l->out;
    m.a.o = l->o;
    m.a.lse = l->lse;
    m.a.o_stride_t = l->o_st;
    m.a.o_stride_h = l->o_sh;
    m.a.lse_stride_t = l->lse_st;
    m.a.lse_stride_h = l->lse_sh;
    m.a.out = l->dst;
    m.a.lse_out = l->lse_dst;
    m.a.out_stride_t = l->dst_st;
    m.a.out_stride_h = l->dst_sh;
    m.a.lse_out_stride_t = l->lse_dst_st;
    m.a.lse_out_stride_h = l->lse_dst_sh;
    m.a.lse_base2_in = l->base2_in;
    m.a.lse_base2_out = l->base2_out;
    m.vec = 16 / dcpattn__dtype_size(l->in);
    return dcpattn__merge_launch(v, &m, p->a.rows_limit, stream);
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
            l.n = 1;
            l.rows = T;
            l.heads = H;
            l.in = a->in_dtype;
            l.out = a->comm_dtype;
            l.o[0] = a->o;
            l.lse[0] = a->lse;
            l.o_st = a->o_stride_t;
            l.o_sh = a->o_stride_h;
            l.lse_st = a->lse_stride_t;
            l.lse_sh = a->lse_stride_h;
            l.base2_in = l.base2_out = a->lse_base2_in;
            if (scatter) {
                l.dst = ws + p->off[0];
                l.lse_dst = (float *)(ws + p->off[1]);
                l.dst_st = D, l.dst_sh = (int64_t)T * D;
                l.lse_dst_st = 1, l.lse_dst_sh = T;
            } else {
                l.dst = recv_o + (size_t)r * thd * (size_t)p->csz;
                l.lse_dst = recv_lse + (size_t)r * th;
                l.dst_st = (int64_t)H * D, l.dst_sh = D;
                l.lse_dst_st = H, l.lse_dst_sh = 1;
            }
            DCPATTN__TRY(dcpattn__dcp_run_kernel(v[0], p, &l, stream));
            src_o = (const char *)l.dst;
            src_lse = l.lse_dst;
            so_st = l.dst_st, so_sh = l.dst_sh, sl_st = l.lse_dst_st, sl_sh = l.lse_dst_sh;
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
        l.n = W;
        l.rows = T;
        l.heads = scatter ? hw : H;
        l.in = a->comm_dtype;
        l.out = a->out_dtype;
        l.o_st = so_st, l.o_sh = so_sh, l.lse_st = sl_st, l.lse_sh = sl_sh;
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
            l.n = 1;
            l.rows = T;
            l.heads = H;
            l.in = l.out = a->in_dtype;
            l.o[0] = a->o;
            l.lse[0] = a->lse;
            l.o_st = a->o_stride_t, l.o_sh = a->o_stride_h, l.lse_st = a->lse_stride_t, l.lse_sh = a->lse_stride_h;
            l.dst = ws + p->off[0];
            l.lse_dst = gl + (size_t)r * th;
            l.dst_st = (int64_t)H * D, l.dst_sh = D, l.lse_dst_st = H, l.lse_dst_sh = 1;
            l.base2_in = l.base2_out = a->lse_base2_in;
            DCPATTN__TRY(dcpattn__dcp_run_kernel(v[0], p, &l, stream));
            own_o = l.dst;
            lse_src = l.lse_dst;
            o_st = l.dst_st, o_sh = l.dst_sh, l_st = l.lse_dst_st, l_sh = l.lse_dst_sh;
        }
        {
            int rc = dcpattn__nccl.AllGather(lse_src, gl, th, DCPATTN__NCCL_FLOAT32, comm, stream);
            if (!dcpattn__nccl_ok(rc))
                return dcpattn__nccl_fail(comm, rc, "ncclAllGather(lse)");
        }
        memset(&l, 0, sizeof l);
        l.n = W;
        l.rows = T;
        l.heads = H;
        l.in = a->in_dtype;
        l.out = a->comm_dtype;
        l.o[0] = own_o;
        l.lse[0] = gl + (size_t)r * th; /* own LSE first, then the others */
        for (q = 0; q < W - 1; q++)
            l.lse[q + 1] = gl + (size_t)(q < r ? q : q + 1) * th;
        for (q = 1; q < W; q++)
            l.o[q] = own_o; /* not read by the rescale kernel */
        l.o_st = o_st, l.o_sh = o_sh, l.lse_st = l_st, l.lse_sh = l_sh;
        l.dst = resc; /* head-major [H][T][Dv]: rank q's heads are one contiguous chunk */
        l.dst_st = D, l.dst_sh = (int64_t)T * D;
        l.lse_dst = glse;
        l.lse_dst_st = 1, l.lse_dst_sh = T;
        l.base2_in = l.base2_out = a->lse_base2_in;
        DCPATTN__TRY(dcpattn__dcp_run_kernel(v[1], p, &l, stream));
        {
            int rc = scatter ? dcpattn__nccl.ReduceScatter(resc, rs, blk, ct, DCPATTN__NCCL_SUM, comm, stream)
                             : dcpattn__nccl.AllReduce(resc, resc, thd, ct, DCPATTN__NCCL_SUM, comm, stream);
            if (!dcpattn__nccl_ok(rc))
                return dcpattn__nccl_fail(comm, rc, scatter ? "ncclReduceScatter" : "ncclAllReduce");
        }
        /* copy into out: the summed output, weights 1, the global LSE of these heads */
        memset(&l, 0, sizeof l);
        l.n = 1;
        l.rows = T;
        l.heads = scatter ? hw : H;
        l.in = a->comm_dtype;
        l.out = a->out_dtype;
        l.o[0] = scatter ? (const void *)rs : (const void *)resc;
        l.lse[0] = glse + (scatter ? (size_t)r * (size_t)hw * (size_t)T : 0);
        l.o_st = D, l.o_sh = (int64_t)T * D, l.lse_st = 1, l.lse_sh = T;
    }
    l.dst = a->out;
    l.lse_dst = a->lse_out;
    l.dst_st = a->out_stride_t, l.dst_sh = a->out_stride_h;
    l.lse_dst_st = a->lse_out_stride_t, l.lse_dst_sh = a->lse_out_stride_h;
    l.base2_in = a->lse_base2_in;
    l.base2_out = a->lse_base2_out;
    return dcpattn__dcp_run_kernel(v[2], p, &l, stream);
}
#undef DCPATTN__NCCL_GROUP_CALL

dcpattn_status dcpattn_dcp_combine(dcpattn_context *ctx, dcpattn_nccl_comm comm, const dcpattn_dcp_combine_args *args,
                                   dcpattn_stream stream) {
    dcpattn__dcp_plan p;
    dcpattn__variant *v[3];
    if (!ctx)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: context is NULL");
    if (ctx->compile_only)
        return dcpattn__fail(DCPATTN_STATUS_INVALID_ARGUMENT, "dcp_combine: context is compile-only");
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
        l.n = 1;
        l.rows = p.a.rows;
        l.heads = p.a.heads;
        l.in = p.a.in_dtype;
        l.out = p.a.out_dtype;
        l.o[0] = p.a.o;
        l.lse[0] = p.a.lse;
        l.o_st = p.a.o_stride_t, l.o_sh = p.a.o_stride_h, l.lse_st = p.a.lse_stride_t, l.lse_sh = p.a.lse_stride_h;
        l.dst = p.a.out;
        l.lse_dst = p.a.lse_out;
        l.dst_st = p.a.out_stride_t, l.dst_sh = p.a.out_stride_h;
        l.lse_dst_st = p.a.lse_out_stride_t, l.lse_dst_sh = p.a.lse_out_stride_h;
        l.base2_in = p.a.lse_base2_in;
        l.base2_out = p.a.lse_base2_out;
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

dcpattn_status dcpattn_dcp_wait(dcpattn_nccl_comm comm, dcpattn_stream stream, int timeout_ms) {
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
/* ---- END IMPLEMENTATION ---- */

#endif /* DCPATTN_IMPLEMENTATION_DONE && !DCPATTN_COMBINE_INC_IMPL_ */
