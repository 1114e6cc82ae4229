/* dcp_nccl — decode context parallelism over NCCL, end to end, one process per GPU.

   The parent makes an NCCL unique id (ncclGetUniqueId, dlopen'd: no NCCL headers needed) and
   forks W children; child r takes GPU r, joins the communicator and
     1. holds its interleaved shard (any I) of a paged KV cache (tests/ref.h ref_shard_build;
        unused slots are NaN) and all H query heads of a batch with q_len tokens per
        sequence (vLLM all-gathers Q heads over the DCP group; here every rank builds the
        same Q);
     2. runs local attention with the DCP mask (dcpattn_attn_plan_create / dcpattn_attn_run,
        dcp_world/rank/interleave), writing o and lse head-major unless --std-layout;
     3. combines the W partial states with dcpattn_dcp_combine over the chosen transport and
        layout, waits with dcpattn_dcp_wait (a timeout, never a hang), and checks the result
        against single-GPU attention over the unsharded cache (CPU reference, double);
     4. checks the combine alone on synthetic partial states (the CPU reference of its own
        shard), so the combine is verified even where the attention kernel is not;
     5. with --bench N: times each transport against raw NCCL exchanges of the same bytes
        (a send/recv all-to-all and an all-gather), median of N, and rank 0 prints it.
   W = 1 runs on one GPU (a 1-rank communicator).

   --mla takes the DeepSeek MLA shape instead of GQA D = 128: Dqk 576, Dv 512, one latent KV
   head whose first 512 channels are V (the cache holds K only), pages of 64.

   usage: dcp_nccl [-W n] [-I n] [--q-len n] [--batch n] [--len L] [--transport a2a|ag_rs]
                   [--layout scatter|replicate] [--heads Hq] [--kv-heads Hkv] [--mla] [--std-layout]
                   [--bench N] [--graph N]

   --graph N captures local attention + combine of step 3 in one CUDA graph and replays it N
   times, each on a fresh random q written into the captured buffer, checking every replay
   against the one-GPU reference of that q. --bench N also times the whole decode step (local
   attention + combine) next to the transports. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "ref.h"

static int g_rank = -1;

/* a failed CUDA or dcpattn call (CUDA_OK, DC_OK) ends this rank with status 2 */
static void rank_fail(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "rank %d: ", g_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(2);
}
#define GPU_UTIL_FAIL rank_fail
#include "gpu_util.h"

/* ---- the few NCCL entry points the caller (not the library) needs ---- */
typedef struct { char internal[128]; } nccl_uid; /* ncclUniqueId */
static struct {
    int (*GetUniqueId)(nccl_uid *);
    int (*CommInitRank)(dcpattn_nccl_comm *, int, nccl_uid, int);
    int (*CommDestroy)(dcpattn_nccl_comm);
    int (*GroupStart)(void);
    int (*GroupEnd)(void);
    int (*Send)(const void *, size_t, int, int, dcpattn_nccl_comm, cudaStream_t);
    int (*Recv)(void *, size_t, int, int, dcpattn_nccl_comm, cudaStream_t);
    int (*AllGather)(const void *, void *, size_t, int, dcpattn_nccl_comm, cudaStream_t);
    const char *(*GetErrorString)(int);
} nccl;
enum { NCCL_UINT8 = 1 };

static int nccl_load(void) {
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL), *p;
    if (!lib) {
        fprintf(stderr, "dcp_nccl: dlopen(libnccl.so.2): %s\n", dlerror());
        return -1;
    }
#define LOAD(field, sym)                                                         \
    if (!(p = dlsym(lib, sym))) {                                                \
        fprintf(stderr, "dcp_nccl: libnccl lacks %s\n", sym);                    \
        return -1;                                                               \
    }                                                                            \
    memcpy(&nccl.field, &p, sizeof p);
    LOAD(GetUniqueId, "ncclGetUniqueId")
    LOAD(CommInitRank, "ncclCommInitRank")
    LOAD(CommDestroy, "ncclCommDestroy")
    LOAD(GroupStart, "ncclGroupStart")
    LOAD(GroupEnd, "ncclGroupEnd")
    LOAD(Send, "ncclSend")
    LOAD(Recv, "ncclRecv")
    LOAD(AllGather, "ncclAllGather")
    LOAD(GetErrorString, "ncclGetErrorString")
#undef LOAD
    return 0;
}

typedef struct opts {
    int W, I, q_len, batch, len, hq, hkv, transport, layout, std_layout, bench;
    int graph;          /* --graph N: attention + combine captured once, replayed on N fresh q */
    int mla;            /* --mla: DeepSeek MLA (Dqk 576, Dv 512, one latent KV head, V = K's first 512) */
    int dqk, dv, page;  /* GQA: 128, 128, 16; MLA: 576, 512, 64 */
} opts;

static double median(double *v, int n) {
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n ? v[n / 2] : 0;
}

typedef struct combine_io {
    dcpattn_dcp_combine_args a;
    void *out;
    float *lse_out;
} combine_io;

/* compare the combine's output (this rank's heads) with the dense reference */
static int check(const opts *o, const char *what, const combine_io *c, const double *ref_out, const double *ref_lse,
                 int T) {
    const int hout = o->layout == DCPATTN_DCP_SCATTER ? o->hq / o->W : o->hq;
    const int h0 = o->layout == DCPATTN_DCP_SCATTER ? g_rank * hout : 0, DV = o->dv;
    uint16_t *h = (uint16_t *)malloc((size_t)T * hout * DV * 2);
    float *hl = (float *)malloc((size_t)T * hout * 4);
    double *r = (double *)malloc((size_t)T * hout * DV * 8), *rl = (double *)malloc((size_t)T * hout * 8);
    ref_err e, el;
    int t, k, ok;
    gpu_download(h, c->out, (size_t)T * hout * DV * 2);
    gpu_download(hl, c->lse_out, (size_t)T * hout * 4);
    for (t = 0; t < T; t++)
        for (k = 0; k < hout; k++) {
            memcpy(r + ((size_t)t * hout + k) * DV, ref_out + ((size_t)t * o->hq + h0 + k) * DV, DV * 8);
            rl[(size_t)t * hout + k] = ref_lse[(size_t)t * o->hq + h0 + k];
        }
    e = ref_compare(r, h, REF_BF16, (int64_t)T * hout * DV);
    el = ref_compare(rl, hl, REF_FP32, (int64_t)T * hout);
    ok = ref_err_ok(&e, 2e-2, 1e-2) && ref_err_ok(&el, 2e-3, 1e-4);
    printf("rank %d: %-44s out %s", g_rank, what, ref_err_str(&e));
    printf("  lse %s  %s\n", ref_err_str(&el), ok ? "ok" : "FAIL");
    free(h), free(hl), free(r), free(rl);
    return ok;
}

/* one-GPU attention over every unsharded sequence: the reference all checks compare with */
static int dense_ref(const opts *o, const ref_attn_params *rp, int B, const int64_t *Lg, const int32_t *cu,
                     const uint16_t *q, uint16_t *const *kg, uint16_t *const *vg, double *ref_out, double *ref_lse) {
    int b;
    for (b = 0; b < B; b++)
        if (ref_attn_dense(rp, o->q_len, Lg[b], q + (size_t)cu[b] * o->hq * o->dqk, kg[b], vg[b],
                           ref_out + (size_t)cu[b] * o->hq * o->dv, ref_lse + (size_t)cu[b] * o->hq) != 0) {
            fprintf(stderr, "rank %d: reference: %s\n", g_rank, ref_error());
            return -1;
        }
    return 0;
}

static int child(const opts *o, nccl_uid id) {
    const int W = o->W, r = g_rank, B = o->batch, ql = o->q_len, Hq = o->hq, Hkv = o->hkv, T = B * ql;
    const int hout = o->layout == DCPATTN_DCP_SCATTER ? Hq / W : Hq;
    const int DQ = o->dqk, DV = o->dv, PAGE = o->page;
    uint64_t rng = 20240601;
    int64_t *Lg = (int64_t *)malloc(sizeof(int64_t) * (size_t)B);
    uint16_t **kg = (uint16_t **)malloc(sizeof(void *) * (size_t)B), **vg = (uint16_t **)malloc(sizeof(void *) * (size_t)B);
    uint16_t *q = (uint16_t *)malloc((size_t)T * Hq * DQ * 2);
    int32_t *cu = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B + 1));
    double *ref_out = (double *)malloc((size_t)T * Hq * DV * 8), *ref_lse = (double *)malloc((size_t)T * Hq * 8);
    ref_attn_params rp;
    ref_shard_params sp;
    ref_shard sh;
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    dcpattn_attn_desc ad;
    dcpattn_attn_args aa;
    dcpattn_attn_plan *plan;
    dcpattn_nccl_comm comm;
    cudaStream_t st;
    combine_io c;
    void *d_o, *attn_ws = NULL, *cws = NULL;
    float *d_lse;
    size_t ws = 0, cws_bytes = 0;
    int b, i, maxlocal = 0, ok = 1, rc;
    int64_t o_st, o_sh, l_st, l_sh;

    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaFree(0));
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if ((rc = nccl.CommInitRank(&comm, W, id, r)) != 0) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", r, nccl.GetErrorString(rc));
        return 2;
    }

    /* the same global problem on every rank */
    cu[0] = 0;
    for (b = 0; b < B; b++) {
        Lg[b] = o->len + 97 * b + (b % 2) * 5;
        if (b == B - 1 && B > 1) Lg[b] = ql + 1; /* a short sequence: some ranks hold none of it */
        kg[b] = (uint16_t *)malloc((size_t)Lg[b] * Hkv * DQ * 2);
        vg[b] = (uint16_t *)malloc((size_t)Lg[b] * Hkv * DV * 2);
        ref_fill_uniform(kg[b], Lg[b] * Hkv * DQ, REF_BF16, 1.0, &rng);
        if (o->mla) /* V is the first DV channels of each K row (one latent head) */
            for (i = 0; i < Lg[b]; i++) memcpy(vg[b] + (size_t)i * DV, kg[b] + (size_t)i * DQ, (size_t)DV * 2);
        else
            ref_fill_uniform(vg[b], Lg[b] * Hkv * DV, REF_BF16, 1.0, &rng);
        cu[b + 1] = cu[b] + ql;
    }
    ref_fill_uniform(q, (int64_t)T * Hq * DQ, REF_BF16, 1.0, &rng);
    memset(&rp, 0, sizeof rp);
    rp.hq = Hq, rp.hkv = Hkv, rp.dqk = DQ, rp.dv = DV, rp.page_size = PAGE, rp.causal = 1, rp.dtype = REF_BF16;
    if (dense_ref(o, &rp, B, Lg, cu, q, kg, vg, ref_out, ref_lse) != 0) return 2;

    /* this rank's shard */
    memset(&sp, 0, sizeof sp);
    sp.hkv = Hkv, sp.dqk = DQ, sp.dv = DV, sp.v_alias_k = o->mla, sp.page_size = PAGE, sp.world = W, sp.rank = r, sp.interleave = o->I;
    sp.fill = REF_BF16_NAN, sp.extra_pages = 3, sp.seed = 77 + (uint64_t)r;
    if (ref_shard_build(&sh, &sp, B, Lg, (const uint16_t *const *)kg, o->mla ? NULL : (const uint16_t *const *)vg) != 0) {
        fprintf(stderr, "rank %d: shard: %s\n", r, ref_error());
        return 2;
    }
    for (b = 0; b < B; b++) maxlocal = sh.seqused_k[b] > maxlocal ? sh.seqused_k[b] : maxlocal;

    memset(&cd, 0, sizeof cd);
    DC_OK(dcpattn_context_create(&cd, &ctx));

    /* partial states: head-major ([H][T][Dv], lse [H][T]) lets the a2a send without packing */
    if (o->std_layout) o_st = (int64_t)Hq * DV, o_sh = DV, l_st = Hq, l_sh = 1;
    else o_st = DV, o_sh = (int64_t)T * DV, l_st = 1, l_sh = T;
    CUDA_OK(cudaMalloc(&d_o, (size_t)T * Hq * DV * 2));
    CUDA_OK(cudaMalloc((void **)&d_lse, (size_t)T * Hq * 4));

    /* the combine's arguments, shared by both checks and the benchmark */
    memset(&c, 0, sizeof c);
    c.a.world = W, c.a.rank = r, c.a.rows = T, c.a.heads = Hq, c.a.head_dim = DV;
    c.a.transport = (dcpattn_dcp_transport)o->transport, c.a.layout = (dcpattn_dcp_layout)o->layout;
    c.a.o = d_o, c.a.o_stride_t = o_st, c.a.o_stride_h = o_sh;
    c.a.lse = d_lse, c.a.lse_stride_t = l_st, c.a.lse_stride_h = l_sh;
    CUDA_OK(cudaMalloc(&c.out, (size_t)T * hout * DV * 2));
    CUDA_OK(cudaMalloc((void **)&c.lse_out, (size_t)T * hout * 4));
    c.a.out = c.out, c.a.lse_out = c.lse_out;
    DC_OK(dcpattn_dcp_combine_workspace_size(&c.a, &cws_bytes));
    if (cws_bytes) CUDA_OK(cudaMalloc(&cws, cws_bytes));
    c.a.workspace = cws, c.a.workspace_bytes = cws_bytes;

    /* 1-3: attention over the shard with the DCP mask, then the combine */
    memset(&ad, 0, sizeof ad);
    ad.dtype = DCPATTN_BF16, ad.num_q_heads = Hq, ad.num_kv_heads = Hkv, ad.head_dim = DQ, ad.head_dim_v = DV;
    ad.page_size = PAGE;
    ad.dcp_world = W, ad.dcp_rank = r, ad.dcp_interleave = o->I;
    ad.max_batch = B, ad.max_q_len = ql, ad.max_seqlen_k = maxlocal > 0 ? maxlocal : 1;
    if (dcpattn_attn_plan_create(ctx, &ad, &plan) != DCPATTN_STATUS_SUCCESS) {
        printf("rank %d: attention plan not available (%s): attention check skipped\n", r, dcpattn_last_error());
        plan = NULL;
    }
    if (plan) {
        ws = dcpattn_attn_workspace_size(plan);
        if (ws) CUDA_OK(cudaMalloc(&attn_ws, ws));
        memset(&aa, 0, sizeof aa);
        aa.batch = B;
        aa.q = gpu_upload(q, (size_t)T * Hq * DQ * 2);
        aa.k_cache = gpu_upload(sh.k_cache, (size_t)(sh.num_pages ? sh.num_pages : 1) * sh.k_stride_page * 2);
        aa.v_cache = o->mla ? aa.k_cache /* V aliases K */
                            : gpu_upload(sh.v_cache, (size_t)(sh.num_pages ? sh.num_pages : 1) * sh.v_stride_page * 2);
        aa.k_stride_page = sh.k_stride_page, aa.k_stride_t = sh.k_stride_t, aa.k_stride_h = sh.k_stride_h;
        aa.v_stride_page = sh.v_stride_page, aa.v_stride_t = sh.v_stride_t, aa.v_stride_h = sh.v_stride_h;
        aa.num_pages = sh.num_pages;
        aa.block_table = (const int32_t *)gpu_upload(sh.block_table, sizeof(int32_t) * (size_t)B * sh.block_table_stride);
        aa.block_table_stride = sh.block_table_stride;
        aa.cu_seqlens_q = (const int32_t *)gpu_upload(cu, sizeof(int32_t) * (size_t)(B + 1));
        aa.seqused_k = (const int32_t *)gpu_upload(sh.seqused_k, sizeof(int32_t) * (size_t)B);
        aa.seqused_k_global = (const int32_t *)gpu_upload(sh.seqused_k_global, sizeof(int32_t) * (size_t)B);
        aa.out = d_o, aa.out_stride_t = o_st, aa.out_stride_h = o_sh;
        aa.lse = d_lse, aa.lse_stride_t = l_st, aa.lse_stride_h = l_sh;
        DC_OK(dcpattn_attn_run(plan, &aa, attn_ws, ws, st));
        DC_OK(dcpattn_dcp_combine(ctx, comm, &c.a, st));
        DC_OK(dcpattn_dcp_wait(comm, st, 60000));
        ok &= check(o, "attention + combine vs one-GPU attention", &c, ref_out, ref_lse, T);
        if (o->graph > 0) {
            cudaGraph_t g;
            cudaGraphExec_t ge;
            char what[64];
            int it;
            CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
            DC_OK(dcpattn_attn_run(plan, &aa, attn_ws, ws, st));
            DC_OK(dcpattn_dcp_combine(ctx, comm, &c.a, st));
            CUDA_OK(cudaStreamEndCapture(st, &g));
            CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
            for (it = 0; it < o->graph; it++) {
                /* the same fresh q on every rank (same seed sequence), written into the captured buffer */
                ref_fill_uniform(q, (int64_t)T * Hq * DQ, REF_BF16, 1.0, &rng);
                if (dense_ref(o, &rp, B, Lg, cu, q, kg, vg, ref_out, ref_lse) != 0) return 2;
                CUDA_OK(cudaMemcpy((void *)aa.q, q, (size_t)T * Hq * DQ * 2, cudaMemcpyHostToDevice));
                CUDA_OK(cudaMemset(c.out, 0xff, (size_t)T * hout * DV * 2));
                CUDA_OK(cudaGraphLaunch(ge, st));
                DC_OK(dcpattn_dcp_wait(comm, st, 60000));
                snprintf(what, sizeof what, "graph replay %d (fresh q) vs one-GPU", it + 1);
                ok &= check(o, what, &c, ref_out, ref_lse, T);
            }
            CUDA_OK(cudaGraphExecDestroy(ge));
            CUDA_OK(cudaGraphDestroy(g));
        }
    }

    /* 4: the combine alone, on this rank's exact partial states from the CPU reference */
    {
        ref_attn_inputs in;
        double *po = (double *)malloc((size_t)T * Hq * DV * 8), *pl = (double *)malloc((size_t)T * Hq * 8);
        uint16_t *ho = (uint16_t *)malloc((size_t)T * Hq * DV * 2);
        float *hl = (float *)malloc((size_t)T * Hq * 4);
        ref_attn_params p2 = rp;
        int t, h, d;
        memset(&in, 0, sizeof in);
        in.batch = B, in.q = q, in.cu_seqlens_q = cu;
        ref_shard_inputs(&sh, &in);
        p2.world = W, p2.rank = r, p2.interleave = o->I;
        if (ref_attn(&p2, &in, po, pl) != 0) {
            fprintf(stderr, "rank %d: shard reference: %s\n", r, ref_error());
            return 2;
        }
        for (t = 0; t < T; t++)
            for (h = 0; h < Hq; h++) {
                hl[t * l_st + h * l_sh] = (float)pl[(size_t)t * Hq + h];
                for (d = 0; d < DV; d++)
                    ho[t * o_st + h * o_sh + d] = ref_float_to_bf16((float)po[((size_t)t * Hq + h) * DV + d]);
            }
        CUDA_OK(cudaMemcpy(d_o, ho, (size_t)T * Hq * DV * 2, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d_lse, hl, (size_t)T * Hq * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(c.out, 0xff, (size_t)T * hout * DV * 2));
        DC_OK(dcpattn_dcp_combine(ctx, comm, &c.a, st));
        DC_OK(dcpattn_dcp_wait(comm, st, 60000));
        ok &= check(o, "synthetic partials + combine vs one-GPU", &c, ref_out, ref_lse, T);
        free(po), free(pl), free(ho), free(hl);
    }

    /* 5: benchmark: each transport vs raw NCCL exchanges of the a2a's bytes */
    if (o->bench > 0) {
        const size_t bytes = (size_t)T * Hq * (DV * 2 + 4); /* this rank's (o, lse) */
        const size_t per = bytes / (size_t)W;
        void *sb, *rb, *ws2 = NULL;
        cudaEvent_t e0, e1;
        double *tm = (double *)malloc(sizeof(double) * (size_t)o->bench);
        static const char *const names[] = {"dcp combine a2a", "dcp combine ag_rs", "raw nccl all-to-all (send/recv)",
                                            "raw nccl all-gather", "decode step: attention + combine"};
        int kind, it;
        CUDA_OK(cudaMalloc(&sb, bytes * (size_t)W));
        CUDA_OK(cudaMalloc(&rb, bytes * (size_t)W));
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        for (kind = 0; kind < 5; kind++) {
            combine_io cb = c;
            if (kind == 4 && !plan) break;
            if (kind < 2) {
                size_t need = 0;
                cb.a.transport = kind == 0 ? DCPATTN_DCP_A2A : DCPATTN_DCP_AG_RS;
                DC_OK(dcpattn_dcp_combine_workspace_size(&cb.a, &need));
                if (need) CUDA_OK(cudaMalloc(&ws2, need));
                cb.a.workspace = ws2, cb.a.workspace_bytes = need;
            }
            for (it = -3; it < o->bench; it++) {
                CUDA_OK(cudaEventRecord(e0, st));
                if (kind < 2) {
                    DC_OK(dcpattn_dcp_combine(ctx, comm, &cb.a, st));
                } else if (kind == 2) {
                    nccl.GroupStart();
                    for (i = 0; i < W; i++) {
                        nccl.Send((char *)sb + (size_t)i * per, per, NCCL_UINT8, i, comm, st);
                        nccl.Recv((char *)rb + (size_t)i * per, per, NCCL_UINT8, i, comm, st);
                    }
                    nccl.GroupEnd();
                } else if (kind == 3) {
                    nccl.AllGather(sb, rb, bytes, NCCL_UINT8, comm, st);
                } else { /* the whole step, with the transport of the options */
                    DC_OK(dcpattn_attn_run(plan, &aa, attn_ws, ws, st));
                    DC_OK(dcpattn_dcp_combine(ctx, comm, &c.a, st));
                }
                CUDA_OK(cudaEventRecord(e1, st));
                DC_OK(dcpattn_dcp_wait(comm, st, 60000));
                if (it >= 0) {
                    float ms;
                    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
                    tm[it] = ms * 1e3;
                }
            }
            if (r == 0)
                printf("bench W=%d T=%d H=%d Dv=%d %s: %-32s median %8.1f us (%zu bytes/rank of (o, lse))\n", W, T, Hq, DV,
                       o->layout == DCPATTN_DCP_SCATTER ? "scatter" : "replicate", names[kind], median(tm, o->bench),
                       bytes);
            if (ws2) cudaFree(ws2), ws2 = NULL;
        }
        free(tm);
    }
    nccl.CommDestroy(comm);
    dcpattn_context_destroy(ctx);
    return ok ? 0 : 1;
}

static void usage(void) {
    fprintf(stderr, "usage: dcp_nccl [-W n] [-I n] [--q-len n] [--batch n] [--len L] [--heads Hq] [--kv-heads Hkv]\n"
                    "                [--mla] [--transport a2a|ag_rs] [--layout scatter|replicate] [--std-layout] [--bench N]\n"
                    "                [--graph N]\n");
    exit(2);
}

int main(int argc, char **argv) {
    opts o;
    nccl_uid id;
    int i, w, ngpu = 0, failed = 0;
    memset(&o, 0, sizeof o);
    o.W = 1, o.I = 1, o.q_len = 4, o.batch = 4, o.len = 300, o.hq = 16, o.hkv = 2;
    o.transport = DCPATTN_DCP_A2A, o.layout = DCPATTN_DCP_SCATTER;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--std-layout")) { o.std_layout = 1; continue; }
        if (!strcmp(a, "--mla")) { o.mla = 1; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "-W")) o.W = atoi(v);
        else if (!strcmp(a, "-I")) o.I = atoi(v);
        else if (!strcmp(a, "--q-len")) o.q_len = atoi(v);
        else if (!strcmp(a, "--batch")) o.batch = atoi(v);
        else if (!strcmp(a, "--len")) o.len = atoi(v);
        else if (!strcmp(a, "--heads")) o.hq = atoi(v);
        else if (!strcmp(a, "--kv-heads")) o.hkv = atoi(v);
        else if (!strcmp(a, "--bench")) o.bench = atoi(v);
        else if (!strcmp(a, "--graph")) o.graph = atoi(v);
        else if (!strcmp(a, "--transport")) o.transport = !strcmp(v, "ag_rs") ? DCPATTN_DCP_AG_RS : !strcmp(v, "a2a") ? DCPATTN_DCP_A2A : -1;
        else if (!strcmp(a, "--layout")) o.layout = !strcmp(v, "replicate") ? DCPATTN_DCP_REPLICATE : !strcmp(v, "scatter") ? DCPATTN_DCP_SCATTER : -1;
        else usage();
    }
    /* GQA: D 128 over pages of 16; MLA (M1 scaled): Dqk 576, Dv 512, one latent head, pages of 64 */
    o.dqk = o.mla ? 576 : 128, o.dv = o.mla ? 512 : 128, o.page = o.mla ? 64 : 16;
    if (o.mla) o.hkv = 1;
    if (o.W < 1 || o.I < 1 || o.q_len < 1 || o.batch < 1 || o.hkv < 1 || o.hq % o.hkv || o.hq % o.W ||
        (int)o.transport < 0 || (int)o.layout < 0)
        usage();
    if (nccl_load() != 0)
        return 2;
    /* the parent touches no CUDA before fork: only the children own GPUs */
    if (nccl.GetUniqueId(&id) != 0) {
        fprintf(stderr, "dcp_nccl: ncclGetUniqueId failed\n");
        return 2;
    }
    for (w = 0; w < o.W; w++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            g_rank = w;
#ifdef __linux__
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed parent (timeout) takes its ranks along */
#endif
            if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < o.W) {
                fprintf(stderr, "rank %d: %d GPUs visible, W = %d needs one per rank\n", w, ngpu, o.W);
                _exit(3);
            }
            w = child(&o, id);
            fflush(stdout); /* _exit does not flush stdio */
            fflush(stderr);
            _exit(w);
        }
    }
    for (w = 0; w < o.W; w++) {
        int status = 0;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
    }
    printf("dcp_nccl %s W=%d I=%d q_len=%d %s %s %s: %s\n", o.mla ? "mla" : "gqa", o.W, o.I, o.q_len,
           o.transport == DCPATTN_DCP_AG_RS ? "ag_rs" : "a2a", o.layout == DCPATTN_DCP_SCATTER ? "scatter" : "replicate",
           o.std_layout ? "standard layout" : "head-major", failed ? "FAILED" : "all ranks ok");
    return failed ? 1 : 0;
}
