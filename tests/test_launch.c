/* test_launch — the host side of dcpattn_attn_run and dcpattn_merge without a GPU: the CUDA
   driver's launch entry is replaced by a recorder, so the grid, block, shared memory and
   every field of the parameter blocks a run hands to the driver can be checked against
   the launch contract of templates/gqa.cuh, templates/mla.cuh (and the TMA map its run
   encodes) and templates/merge.cuh. Kernels are compiled
   (NVRTC, compile-only context) but never loaded; two contexts keep separate function tables.
   And dcpattn_dcp_wait against a fake stream
   and a fake NCCL: a peer that dies (an asynchronous NCCL error), a rank that never joins (the
   timeout), a failing poll, a capturing stream. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include "check.h"
#include "../templates/sched.cuh"

typedef struct launch_rec {
    unsigned grid[3], block, smem, cluster[3];
    dcpattn__CUfunction fn;
    union {
        dcpattn_attn_kparams attn;
        dcpattn_merge_kparams merge;
    } p;
} launch_rec;
static launch_rec recs[4];
static int nrecs;
static dcpattn__CUfunction fake_fn = (dcpattn__CUfunction)(uintptr_t)0x1000;
static dcpattn__CUfunction fake_balanced = (dcpattn__CUfunction)(uintptr_t)0x3000; /* MLA NAME_balanced */

static dcpattn__CUresult record_launch(dcpattn__CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                       unsigned by, unsigned bz, unsigned smem, dcpattn_stream s, void **args,
                                       void **extra) {
    launch_rec *r = &recs[nrecs++ % 4];
    (void)f, (void)by, (void)bz, (void)s, (void)extra;
    r->grid[0] = gx, r->grid[1] = gy, r->grid[2] = gz, r->block = bx, r->smem = smem;
    r->cluster[0] = r->cluster[1] = r->cluster[2] = 0;
    r->fn = f;
    memcpy(&r->p, args[0], f == fake_fn || f == fake_balanced ? sizeof r->p.attn : sizeof r->p.merge);
    return 0;
}
/* cuLaunchKernelEx: the same record, plus the cluster dimension attribute */
static dcpattn__CUresult record_launch_ex(const dcpattn__CUlaunchConfig *c, dcpattn__CUfunction f, void **args,
                                          void **extra) {
    unsigned i;
    dcpattn__CUresult r = record_launch(f, c->grid_x, c->grid_y, c->grid_z, c->block_x, c->block_y, c->block_z,
                                        c->shared_bytes, c->stream, args, extra);
    for (i = 0; i < c->num_attrs; i++)
        if (c->attrs[i].id == DCPATTN__CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            memcpy(recs[(nrecs - 1) % 4].cluster, &c->attrs[i].value.cluster, sizeof recs[0].cluster);
    return r;
}
static dcpattn__CUresult not_capturing(dcpattn_stream s, int *c) {
    (void)s;
    *c = 0;
    return 0;
}

#define FAKE(a) ((void *)(uintptr_t)(a))

/* dcpattn_dcp_wait against a fake stream and a fake NCCL: the stream reports "not ready" until
   query number ready_after (never when -1), the communicator reports `async` from
   ncclCommGetAsyncError once the stream was queried more than async_after times, success
   before (the poll itself returns async_rc) */
static struct {
    int queries, ready_after, capturing, async, async_after, async_rc;
} w8;
static dcpattn__CUresult fake_stream_query(dcpattn_stream s) {
    (void)s;
    w8.queries++;
    return w8.ready_after >= 0 && w8.queries > w8.ready_after ? 0 : 600; /* CUDA_ERROR_NOT_READY */
}
static dcpattn__CUresult fake_is_capturing(dcpattn_stream s, int *c) {
    (void)s;
    *c = w8.capturing;
    return 0;
}
static int fake_async_error(dcpattn_nccl_comm c, int *e) {
    (void)c;
    *e = w8.queries > w8.async_after ? w8.async : 0;
    return w8.async_rc;
}
static const char *fake_nccl_string(int rc) {
    return rc == 6 ? "remote process exited or there was a network error" : "internal error";
}
static const char *fake_nccl_last(dcpattn_nccl_comm c) {
    (void)c;
    return "peer 3 closed the connection";
}
/* one wait: its status, its time in ms, and its message checked for each of the NULL-ended words */
static void check_wait(int line, dcpattn_nccl_comm comm, int timeout_ms, dcpattn_status want, double min_ms,
                       double max_ms, const char *const *words) {
    const double t0 = dcpattn__now();
    const dcpattn_status s = dcpattn_dcp_wait(comm, FAKE(0x5000), timeout_ms);
    const double ms = (dcpattn__now() - t0) * 1000.0;
    const char *msg = dcpattn_last_error();
    CHECK(s == want && ms >= min_ms && ms <= max_ms, "line %d: dcp_wait: %s after %.1f ms (want %s in %.0f-%.0f ms): %s",
          line, dcpattn_status_string(s), ms, dcpattn_status_string(want), min_ms, max_ms, msg);
    for (; words && *words; words++)
        CHECK(msg && strstr(msg, *words), "line %d: dcp_wait: message \"%s\" lacks \"%s\"", line, msg ? msg : "",
              *words);
}

/* What dcpattn_dcp_wait does when a peer dies (an asynchronous NCCL error while the stream waits
   on the collective), when a rank never joins (the timeout), and otherwise: every case on a CPU,
   the driver's and NCCL's entries replaced by the fakes above. The library has no entry for
   ncclCommAbort, so it cannot abort the borrowed communicator. */
static void check_dcp_wait(void) {
    const dcpattn__driver_api cu = dcpattn__cu;
    const dcpattn__nccl_api nccl = dcpattn__nccl;
    dcpattn_nccl_comm comm = (dcpattn_nccl_comm)FAKE(0x7700);
    const char *const died[] = {"asynchronous NCCL error", "NCCL error 6", "remote process exited",
                                "peer 3 closed the connection", "caller may abort", NULL};
    const char *const hung[] = {"30 ms", "may not have joined", NULL};
    const char *const query[] = {"ncclCommGetAsyncError", "NCCL error 3", NULL};
    const char *const capture[] = {"captured", NULL};
    dcpattn__cu.tried = dcpattn__cu.ok = 1;
    dcpattn__cu.StreamQuery = fake_stream_query;
    dcpattn__cu.StreamIsCapturing = fake_is_capturing;
    dcpattn__nccl.tried = dcpattn__nccl.ok = 1;
    dcpattn__nccl.CommGetAsyncError = fake_async_error;
    dcpattn__nccl.GetErrorString = fake_nccl_string;
    dcpattn__nccl.GetLastError = fake_nccl_last;
    /* a peer died: the collective never finishes, NCCL reports a remote error; the wait returns
       it at once, long before its timeout, with NCCL's messages */
    memset(&w8, 0, sizeof w8), w8.ready_after = -1, w8.async = 6;
    check_wait(__LINE__, comm, 10000, DCPATTN_STATUS_NCCL, 0, 1000, died);
    /* ... also with no timeout at all */
    memset(&w8, 0, sizeof w8), w8.ready_after = -1, w8.async = 6;
    check_wait(__LINE__, comm, -1, DCPATTN_STATUS_NCCL, 0, 1000, died);
    /* ... and when it shows only after a few polls: the wait ends at the poll that sees it */
    memset(&w8, 0, sizeof w8), w8.ready_after = -1, w8.async = 6, w8.async_after = 4;
    check_wait(__LINE__, comm, 10000, DCPATTN_STATUS_NCCL, 0, 1000, died);
    CHECK(w8.queries == 5, "dcp_wait polled the stream %d times before the error (want 5)", w8.queries);
    /* a rank never joined: no error, the stream never finishes: the timeout, not a hang */
    memset(&w8, 0, sizeof w8), w8.ready_after = -1;
    check_wait(__LINE__, comm, 30, DCPATTN_STATUS_TIMEOUT, 30, 5000, hung);
    /* NCCL's nonblocking mode still in progress, though the stream is idle: not done yet */
    memset(&w8, 0, sizeof w8), w8.ready_after = 0, w8.async = 7;
    check_wait(__LINE__, comm, 30, DCPATTN_STATUS_TIMEOUT, 30, 5000, hung);
    /* the poll itself failing */
    memset(&w8, 0, sizeof w8), w8.ready_after = -1, w8.async_rc = 3;
    check_wait(__LINE__, comm, 10000, DCPATTN_STATUS_NCCL, 0, 1000, query);
    /* the stream finishing after a few polls: success, having polled until then */
    memset(&w8, 0, sizeof w8), w8.ready_after = 5;
    check_wait(__LINE__, comm, 10000, DCPATTN_STATUS_SUCCESS, 0, 1000, NULL);
    CHECK(w8.queries == 6, "dcp_wait polled the stream %d times (want 6)", w8.queries);
    /* without a communicator only the stream is waited for */
    memset(&w8, 0, sizeof w8), w8.ready_after = 2, w8.async = 6;
    check_wait(__LINE__, NULL, 10000, DCPATTN_STATUS_SUCCESS, 0, 1000, NULL);
    memset(&w8, 0, sizeof w8), w8.ready_after = -1;
    check_wait(__LINE__, NULL, 30, DCPATTN_STATUS_TIMEOUT, 30, 5000, hung);
    /* a capturing stream cannot be waited for */
    memset(&w8, 0, sizeof w8), w8.capturing = 1, w8.ready_after = 0;
    check_wait(__LINE__, comm, 10000, DCPATTN_STATUS_CAPTURE, 0, 1000, capture);
    dcpattn__cu = cu;
    dcpattn__nccl = nccl;
}

/* cuTensorMapEncodeTiled: records what the MLA run asks for, writes a pattern as the map */
static struct {
    int calls, dtype, interleave, swizzle, l2, oob;
    unsigned rank, box[3], estride[3];
    void *base;
    unsigned long long dim[3], stride[2];
} tmap_rec;
static dcpattn__CUresult record_tmap(void *map, int dtype, unsigned rank, void *base, const unsigned long long *dim,
                                     const unsigned long long *stride, const unsigned *box, const unsigned *estride,
                                     int interleave, int swizzle, int l2, int oob) {
    unsigned i;
    tmap_rec.calls++;
    tmap_rec.dtype = dtype, tmap_rec.rank = rank, tmap_rec.base = base;
    tmap_rec.interleave = interleave, tmap_rec.swizzle = swizzle, tmap_rec.l2 = l2, tmap_rec.oob = oob;
    for (i = 0; i < 3 && i < rank; i++) {
        tmap_rec.dim[i] = dim[i], tmap_rec.box[i] = box[i], tmap_rec.estride[i] = estride[i];
        if (i + 1 < rank) tmap_rec.stride[i] = stride[i];
    }
    for (i = 0; i < 128; i++) ((unsigned char *)map)[i] = (unsigned char)(0xA0 + i % 16);
    return 0;
}

/* An MLA plan of d, compiled only (or found in the AOT cache), its kernel the fake; *ma made its
   arguments (v aliasing k, packed output heads). NULL (and a failed check) where d has none. */
static dcpattn_attn_plan *fake_mla_plan(dcpattn_context *ctx, const dcpattn_attn_desc *d, dcpattn_attn_args *ma) {
    dcpattn_attn_plan *p = NULL;
    ctx->compile_only = 1;
    CHECK(dcpattn_attn_plan_create(ctx, d, &p) == 0, "MLA plan: %s", dcpattn_last_error());
    ctx->compile_only = 0;
    if (!p) return NULL;
    p->attn->fn = fake_fn;
    ma->v_cache = ma->k_cache;
    ma->out_stride_h = 0;
    return p;
}

/* The balanced schedule's worker count at run time (dcpattn__run_workers): within 95 % of the
   plan's workers, and where some count there fits the job count, an even batch of those jobs is
   cut only at job boundaries or into the same number of equal pieces per job, as
   templates/sched.cuh partitions it. One case per plan worker count, over job counts 1..400. */
static void check_run_workers(void) {
    static const int plan_workers[] = {1, 8, 20, 33, 49, 66, 128, 132, 264, 396};
    static const int units[] = {1, 37, 128};
    size_t i, k;
    for (i = 0; i < sizeof plan_workers / sizeof plan_workers[0]; i++) {
        const int w = plan_workers[i];
        int J, bad = 0, bad_j = 0, bad_g = 0;
        for (J = 1; J <= 400 && !bad; J++) {
            const int g = dcpattn__run_workers(w, J);
            int fits = 0, h;
            for (h = w; h * 20 >= w * 19; h--)
                fits |= J >= h ? J % h == 0 : h % J == 0;
            bad = g > w || g * 20 < w * 19;
            for (k = 0; k < sizeof units / sizeof units[0] && fits && !bad; k++) {
                const long long u = units[k], U = (long long)J * u;
                const int want = J >= g ? 1 : g / J;
                int j;
                if (U < g) continue; /* fewer units than workers: a unit per worker */
                for (j = 0; j < J; j++)
                    bad |= dcpattn_sched_pieces(U, g, j * u, (j + 1) * u) != want;
            }
            if (bad) bad_j = J, bad_g = g;
        }
        CHECK(!bad, "run workers of a plan of %d: %d jobs get %d workers (an even batch cut unevenly, or under 95 %%)",
              w, bad_j, bad_g);
    }
    /* the benchmark's shapes: M1 (33 workers per row tile, 32 sequences), M2 (132, 128), G2 q_len
       4 (33 per KV head, 8 jobs) take the even cut; G1 q_len 1 (49, 64 jobs) has none within 95 % */
    CHECK(dcpattn__run_workers(33, 32) == 32 && dcpattn__run_workers(132, 128) == 128 &&
              dcpattn__run_workers(33, 8) == 32 && dcpattn__run_workers(49, 64) == 49,
          "run workers of the benchmark shapes: %d %d %d %d", dcpattn__run_workers(33, 32),
          dcpattn__run_workers(132, 128), dcpattn__run_workers(33, 8), dcpattn__run_workers(49, 64));
}

int main(void) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    dcpattn_attn_desc d;
    dcpattn_attn_args a;
    dcpattn_attn_plan *plan;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.arch = "sm_90a"; /* plans of a compile-only context are sized for the GPU it names */
    cd.num_sms = 132;
    setenv("DCPATTN_CACHE_DIR", "", 1);
    if (dcpattn_context_create(&cd, &ctx)) {
        printf("context: %s\n0 passed, 1 failed\n", dcpattn_last_error());
        return 1;
    }
    check_run_workers();
    check_dcp_wait();
    memset(&d, 0, sizeof d);
    d.num_q_heads = 64;
    d.num_kv_heads = 8;
    d.head_dim = 128;
    d.page_size = 16;
    d.dcp_world = 4;
    d.dcp_rank = 1;
    d.dcp_interleave = 2;
    d.max_batch = 4;
    d.max_q_len = 3;
    d.max_seqlen_k = 4096;
    d.num_splits = 5;
    d.lse_base2 = 1;
    CHECK(dcpattn_attn_plan_create(ctx, &d, &plan) == 0, "plan: %s", dcpattn_last_error());
    /* pretend the kernels were loaded, and put the recorder where the driver would be */
    ctx->compile_only = 0;
    plan->attn->fn = fake_fn;
    plan->merge->fn = (dcpattn__CUfunction)(uintptr_t)0x2000;
    dcpattn__cu.LaunchKernel = record_launch;
    dcpattn__cu.StreamIsCapturing = not_capturing;

    memset(&a, 0, sizeof a);
    a.batch = 3;
    a.q = FAKE(0x100000000ull);
    a.k_cache = FAKE(0x200000000ull);
    a.v_cache = FAKE(0x300000000ull);
    a.num_pages = 1024;
    a.block_table = (const int32_t *)FAKE(0x500000000ull);
    a.cu_seqlens_q = (const int32_t *)FAKE(0x600000000ull);
    a.seqused_k = (const int32_t *)FAKE(0x700000000ull);
    a.seqused_k_global = (const int32_t *)FAKE(0x800000000ull);
    a.out = FAKE(0x900000000ull);
    a.lse = (float *)FAKE(0xa00000000ull);
    a.out_stride_h = 136; /* padded heads */
    {
        char *ws = (char *)FAKE(0xb00000000ull);
        const launch_rec *r0 = &recs[0], *r1 = &recs[1];
        const long long pss = 12LL * 64; /* max_total_q (4 * 3) * hq */
        int i, ok = 1;
        nrecs = 0;
        CHECK(dcpattn_attn_run(plan, &a, ws, dcpattn_attn_workspace_size(plan), 0) == 0, "run: %s", dcpattn_last_error());
        CHECK(nrecs == 2, "%d launches, want attention + split merge", nrecs);
        /* attention: grid (splits * batch, hkv, row tiles), block and smem from the variant */
        CHECK(r0->grid[0] == 15 && r0->grid[1] == 8 && r0->grid[2] == (unsigned)plan->row_tiles,
              "attention grid %u %u %u", r0->grid[0], r0->grid[1], r0->grid[2]);
        CHECK(r0->block == (unsigned)plan->attn->threads && r0->smem == (unsigned)plan->attn->smem, "block/smem");
        CHECK(plan->row_tiles == (3 * 8 + plan->attn->rows - 1) / plan->attn->rows, "row tiles %d", plan->row_tiles);
        CHECK(r0->p.attn.q == a.q && r0->p.attn.k == a.k_cache && r0->p.attn.v == a.v_cache && r0->p.attn.out == a.out &&
                  r0->p.attn.lse == a.lse && r0->p.attn.cu_seqlens_q == a.cu_seqlens_q,
              "attention pointers");
        CHECK(r0->p.attn.q_st == 64 * 128 && r0->p.attn.q_sh == 128 && r0->p.attn.k_sp == 16 * 8 * 128 &&
                  r0->p.attn.k_st == 8 * 128 && r0->p.attn.k_sh == 128 && r0->p.attn.out_sh == 136 &&
                  r0->p.attn.out_st == 64 * 136 && r0->p.attn.bt_stride == 4096 / 16,
              "attention strides");
        CHECK(r0->p.attn.batch == 3 && r0->p.attn.max_q_len == 3 && r0->p.attn.hq == 64 && r0->p.attn.hkv == 8 &&
                  r0->p.attn.page_size == 16 && r0->p.attn.num_splits == 5 && r0->p.attn.causal == 1 &&
                  r0->p.attn.lse_base2 == 1 && r0->p.attn.world == 4 && r0->p.attn.rank == 1 &&
                  r0->p.attn.interleave == 2,
              "attention scalars");
        CHECK(fabsf(r0->p.attn.scale_log2 - 1.4426950408889634f / sqrtf(128.0f)) < 1e-7f, "scale_log2 %g",
              (double)r0->p.attn.scale_log2);
        CHECK(r0->p.attn.o_part == (float *)ws && r0->p.attn.part_split_stride == pss &&
                  (char *)r0->p.attn.lse_part == ws + plan->part_offset_lse,
              "partials");
        /* split merge: base-2 fp32 partials into out/lse, rows limited by cu_seqlens_q[batch] */
        for (i = 0; i < 5; i++)
            ok &= r1->p.merge.o[i] == (const void *)(r0->p.attn.o_part + i * pss * 128) &&
                  r1->p.merge.lse[i] == r0->p.attn.lse_part + i * pss;
        CHECK(ok, "merge state pointers");
        CHECK(r1->p.merge.n == 5 && r1->p.merge.rows == 12 && r1->p.merge.heads == 64 && r1->p.merge.head_dim == 128 &&
                  r1->p.merge.o_st == 64 * 128 && r1->p.merge.o_sh == 128 && r1->p.merge.lse_st == 64 &&
                  r1->p.merge.lse_sh == 1 && r1->p.merge.lse_base2_in == 1 && r1->p.merge.lse_base2_out == 1,
              "merge shape");
        CHECK(r1->p.merge.out == a.out && r1->p.merge.lse_out == a.lse && r1->p.merge.out_sh == 136 &&
                  r1->p.merge.out_st == 64 * 136 && r1->p.merge.lse_out_st == 64 && r1->p.merge.lse_out_sh == 1 &&
                  r1->p.merge.rows_limit == a.cu_seqlens_q + 3,
              "merge outputs");
        /* 12 rows * 64 heads * 32 fp32 vectors, items per thread, threads per block */
        CHECK(r1->grid[0] == (unsigned)((12 * 64 * 32 / plan->merge->items + plan->merge->threads - 1) /
                                        plan->merge->threads) &&
                  r1->block == (unsigned)plan->merge->threads,
              "merge grid %u", r1->grid[0]);
        /* an empty batch launches nothing; a short workspace launches nothing */
        nrecs = 0;
        a.batch = 0;
        CHECK(dcpattn_attn_run(plan, &a, ws, dcpattn_attn_workspace_size(plan), 0) == 0 && nrecs == 0, "empty batch");
        a.batch = 3;
        CHECK(dcpattn_attn_run(plan, &a, ws, dcpattn_attn_workspace_size(plan) - 1, 0) == DCPATTN_STATUS_WORKSPACE &&
                  nrecs == 0,
              "short workspace");
    }
    /* split-KV merged inside thread-block clusters (sm_90, cuLaunchKernelEx present): one
       launch of the same grid cut into clusters of num_splits CTAs, no workspace, no partials,
       where the grid has at most one CTA per SM (3 sequences x 8 KV heads x 5 splits = 120 of
       132); past 8 splits, on a fuller grid or with DCPATTN_NO_CLUSTER_MERGE=1, the workspace
       and the merge kernel */
    {
        dcpattn_attn_plan *cp, *big, *off, *full;
        const launch_rec *r0 = &recs[0];
        dcpattn__cu.LaunchKernelEx = record_launch_ex;
        CHECK(dcpattn_attn_plan_create(ctx, &d, &full) == 0, "plan: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_workspace_size(full) > 0 && !full->kp.cluster_merge,
              "4 x 8 x 5 = 160 CTAs > 132 SMs: workspace and merge kernel");
        d.max_batch = 3;
        CHECK(dcpattn_attn_plan_create(ctx, &d, &cp) == 0, "cluster plan: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_workspace_size(cp) == 0 && dcpattn_attn_num_splits(cp) == 5, "cluster plan: workspace %zu",
              dcpattn_attn_workspace_size(cp));
        nrecs = 0;
        CHECK(dcpattn_attn_run(cp, &a, NULL, 0, 0) == 0, "cluster run: %s", dcpattn_last_error());
        CHECK(nrecs == 1 && r0->cluster[0] == 5 && r0->cluster[1] == 1 && r0->cluster[2] == 1, "%d launches, cluster %u",
              nrecs, r0->cluster[0]);
        CHECK(r0->grid[0] == 15 && r0->grid[1] == 8 && r0->grid[2] == (unsigned)cp->row_tiles &&
                  r0->block == (unsigned)cp->attn->threads && r0->smem == (unsigned)cp->attn->smem,
              "cluster grid %u %u %u", r0->grid[0], r0->grid[1], r0->grid[2]);
        CHECK(r0->p.attn.cluster_merge == 1 && r0->p.attn.num_splits == 5 && !r0->p.attn.o_part &&
                  !r0->p.attn.lse_part && r0->p.attn.out == a.out && r0->p.attn.lse == a.lse,
              "cluster parameters");
        d.num_splits = 12;
        CHECK(dcpattn_attn_plan_create(ctx, &d, &big) == 0, "12-split plan: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_workspace_size(big) > 0 && !big->kp.cluster_merge, "12 splits: workspace and merge kernel");
        d.num_splits = 5;
        setenv("DCPATTN_NO_CLUSTER_MERGE", "1", 1);
        CHECK(dcpattn_attn_plan_create(ctx, &d, &off) == 0, "plan: %s", dcpattn_last_error());
        unsetenv("DCPATTN_NO_CLUSTER_MERGE");
        CHECK(dcpattn_attn_workspace_size(off) > 0 && !off->kp.cluster_merge,
              "DCPATTN_NO_CLUSTER_MERGE=1: workspace and merge kernel");
        d.max_batch = 4;
        dcpattn_attn_plan_destroy(cp);
        dcpattn_attn_plan_destroy(big);
        dcpattn_attn_plan_destroy(off);
        dcpattn_attn_plan_destroy(full);
        dcpattn__cu.LaunchKernelEx = NULL;
    }
    /* MLA: one launch of the variant's 256 threads, with the TMA map of the paged K pool that
       run encodes into the parameter block: 576 channels x page_size tokens x num_pages, byte
       strides of a token and a page, boxes of 64 channels x min(page_size, 64) tokens, 128-byte
       swizzle. Without the driver entry the run fails with NO_DRIVER and launches nothing. */
    {
        dcpattn_attn_desc m;
        dcpattn_attn_plan *mp;
        const launch_rec *r0 = &recs[0];
        static const int pages[] = {16, 64, 192};
        int i, ok = 1;
        m = d; /* the GQA descriptor above, made MLA: 128 query heads over one latent head */
        m.num_q_heads = 128;
        m.num_kv_heads = 1;
        m.head_dim = 576;
        m.head_dim_v = 512;
        m.num_splits = 1;
        for (i = 0; i < 3; i++) {
            dcpattn_attn_args ma = a;
            m.page_size = pages[i];
            if (!(mp = fake_mla_plan(ctx, &m, &ma))) continue;
            ma.k_stride_t = 640; /* padded token rows */
            ma.k_stride_page = 640LL * pages[i] + 64;
            dcpattn__cu.TensorMapEncodeTiled = NULL;
            nrecs = 0;
            CHECK(dcpattn_attn_run(mp, &ma, NULL, 0, 0) == DCPATTN_STATUS_NO_DRIVER && nrecs == 0,
                  "MLA without cuTensorMapEncodeTiled: %s", dcpattn_last_error());
            dcpattn__cu.TensorMapEncodeTiled = record_tmap;
            memset(&tmap_rec, 0, sizeof tmap_rec);
            CHECK(dcpattn_attn_run(mp, &ma, NULL, 0, 0) == 0, "MLA run: %s", dcpattn_last_error());
            CHECK(nrecs == 1 && r0->block == 256 && r0->smem == (unsigned)mp->attn->smem && r0->grid[0] == 3 &&
                      r0->grid[1] == 1 && r0->grid[2] == (unsigned)mp->row_tiles,
                  "MLA launch: %d launches, block %u, grid %u %u %u", nrecs, r0->block, r0->grid[0], r0->grid[1],
                  r0->grid[2]);
            CHECK(tmap_rec.calls == 1 && tmap_rec.rank == 3 && tmap_rec.base == ma.k_cache && tmap_rec.dtype == 1 &&
                      tmap_rec.dim[0] == 576 && tmap_rec.dim[1] == (unsigned long long)pages[i] &&
                      tmap_rec.dim[2] == 1024 && tmap_rec.stride[0] == 640 * 2 &&
                      tmap_rec.stride[1] == (unsigned long long)(640LL * pages[i] + 64) * 2 && tmap_rec.box[0] == 64 &&
                      tmap_rec.box[1] == (unsigned)(pages[i] < 64 ? pages[i] : 64) && tmap_rec.box[2] == 1 &&
                      tmap_rec.estride[0] == 1 && tmap_rec.estride[1] == 1 && tmap_rec.estride[2] == 1 &&
                      tmap_rec.interleave == 0 && tmap_rec.swizzle == 3 && tmap_rec.oob == 0,
                  "MLA tensor map (page %d)", pages[i]);
            ok = 1;
            {
                int b;
                for (b = 0; b < 128; b++)
                    ok &= ((const unsigned char *)r0->p.attn.k_tmap)[b] == (unsigned char)(0xA0 + b % 16);
            }
            CHECK(ok && ((uintptr_t)&mp->kp.k_tmap % 64) == 0, "MLA tensor map in the parameter block, 64-byte aligned");
            dcpattn_attn_plan_destroy(mp);
        }
        /* an e4m3 cache: byte rows, unswizzled for the 64-row tile (converted in shared memory),
           64-byte swizzled for the narrow tile (Hq 16 at q_len 1, which reads it as it lands) */
        for (i = 0; i < 2; i++) {
            dcpattn_attn_desc f = m;
            dcpattn_attn_args ma = a;
            f.kv_dtype = DCPATTN_FP8_E4M3;
            f.num_q_heads = i ? 16 : 128;
            f.max_q_len = 1;
            f.page_size = 64;
            if (!(mp = fake_mla_plan(ctx, &f, &ma))) continue;
            ma.k_stride_t = 576;
            ma.k_stride_page = 576LL * 64;
            ma.k_scale = ma.v_scale = (const float *)FAKE(0x200);
            dcpattn__cu.TensorMapEncodeTiled = record_tmap;
            memset(&tmap_rec, 0, sizeof tmap_rec);
            nrecs = 0;
            CHECK(dcpattn_attn_run(mp, &ma, NULL, 0, 0) == 0 && nrecs == 1, "MLA e4m3 run (Hq %d): %s", f.num_q_heads,
                  dcpattn_last_error());
            CHECK(strcmp(dcpattn_attn_variant(mp), i ? "mla_bf16_kve4m3_h16_m16" : "mla_bf16_kve4m3_h128_m64") == 0 &&
                      tmap_rec.calls == 1 && tmap_rec.dtype == 0 && tmap_rec.stride[0] == 576 &&
                      tmap_rec.stride[1] == 576ULL * 64 && tmap_rec.box[0] == 64 && tmap_rec.box[1] == 64 &&
                      tmap_rec.swizzle == (i ? 2 : 0),
                  "MLA e4m3 tensor map (%s): dtype %d, swizzle %d", dcpattn_attn_variant(mp), tmap_rec.dtype,
                  tmap_rec.swizzle);
            dcpattn_attn_plan_destroy(mp);
        }
        /* the balanced schedule: NAME_balanced over num_sms / row_tiles workers per row tile; the
           workspace holds one state (33 x 256 x 16 bytes) and 8 words per CTA; a fresh odd token
           per run */
        {
            dcpattn_attn_args ma = a;
            unsigned long long tok1;
            size_t want;
            m.page_size = 64;
            m.num_splits = DCPATTN_SPLITS_BALANCED;
            m.num_sms = 20;
            ctx->compile_only = 1;
            CHECK(dcpattn_attn_plan_create(ctx, &m, &mp) == 0, "MLA balanced plan: %s", dcpattn_last_error());
            if (mp) {
                const int w = dcpattn_attn_workers(mp), rt = mp->row_tiles;
                ctx->compile_only = 0;
                mp->attn->fn = fake_fn;
                mp->attn->fn_balanced = fake_balanced;
                mp->fn_balanced = fake_balanced; /* (the plan takes its kernel at creation) */
                ma.v_cache = ma.k_cache;
                ma.out_stride_h = 0;
                want = (size_t)w * rt * (33 * 256 * 16 + 8); /* a record and a flag per CTA */
                CHECK(w == (20 / rt > 1 ? 20 / rt : 1) && dcpattn_attn_num_splits(mp) == 1 &&
                          dcpattn_attn_workspace_size(mp) == want,
                      "MLA balanced: %d workers, %d row tiles, workspace %zu (want %zu)", w, rt,
                      dcpattn_attn_workspace_size(mp), want);
                dcpattn__cu.TensorMapEncodeTiled = record_tmap;
                nrecs = 0;
                CHECK(dcpattn_attn_run(mp, &ma, NULL, 0, 0) == DCPATTN_STATUS_WORKSPACE && nrecs == 0,
                      "MLA balanced without a workspace: %s", dcpattn_last_error());
                CHECK(dcpattn_attn_run(mp, &ma, FAKE(0x100000), want, 0) == 0, "MLA balanced run: %s",
                      dcpattn_last_error());
                tok1 = r0->p.attn.token;
                CHECK(nrecs == 1 && r0->fn == fake_balanced && r0->grid[0] == (unsigned)w && r0->grid[1] == 1 &&
                          r0->grid[2] == (unsigned)rt && r0->p.attn.workers == w &&
                          r0->p.attn.o_part == (float *)FAKE(0x100000) &&
                          (char *)r0->p.attn.flags == (char *)FAKE(0x100000) + (size_t)w * rt * 33 * 256 * 16 &&
                          (tok1 & 1),
                      "MLA balanced launch: fn %p grid %u %u %u workers %d token %llx", (void *)r0->fn, r0->grid[0],
                      r0->grid[1], r0->grid[2], r0->p.attn.workers, tok1);
                nrecs = 0;
                CHECK(dcpattn_attn_run(mp, &ma, FAKE(0x100000), want, 0) == 0 && r0->p.attn.token != tok1 &&
                          (r0->p.attn.token & 1),
                      "MLA balanced: a fresh token per run");
                dcpattn_attn_plan_destroy(mp);
            }
            m.num_splits = 1;
            m.num_sms = 0;
        }
        dcpattn__cu.TensorMapEncodeTiled = NULL;
        /* sparse MLA with the FP8 cache on sm_90a: the MLA kernel's pipeline (variant ..._sm90), one
           launch of 384 threads per (query slot, block of 64 heads), and a workspace of each CTA's
           kept rows (max_batch * max_q_len * ceil(Hq / 64) * sparse_topk * 8 bytes, rounded up to
           256) handed to the kernel as topk_rows; the sinks reach rank 0's
           kernel only */
        {
            dcpattn_attn_desc s = m; /* the MLA descriptor, made sparse */
            dcpattn_attn_plan *sp = NULL;
            int r;
            s.page_size = 64;
            s.num_splits = 0;
            s.kv_dtype = DCPATTN_FP8_DS_MLA;
            s.sparse_topk = 512;
            for (r = 0; r < 2; r++) {
                s.dcp_rank = r;
                ctx->compile_only = 1;
                CHECK(dcpattn_attn_plan_create(ctx, &s, &sp) == 0, "sparse plan: %s", dcpattn_last_error());
                if (sp) {
                    const size_t want = ((size_t)4 * 3 * 2 * 512 * 8 + 255) & ~(size_t)255;
                    dcpattn_attn_args sa = a;
                    char *ws = (char *)FAKE(0x100000);
                    ctx->compile_only = 0;
                    sp->attn->fn = fake_fn;
                    CHECK(strcmp(dcpattn_attn_variant(sp), "sparse_bf16_kvfp8ds_m64_sm90") == 0 &&
                              dcpattn_attn_workspace_size(sp) == want,
                          "sparse plan: variant %s, workspace %zu (want %zu)", dcpattn_attn_variant(sp),
                          dcpattn_attn_workspace_size(sp), want);
                    sa.v_cache = sa.k_cache;
                    sa.out_stride_h = 0;
                    sa.k_stride_t = 656; /* bytes */
                    sa.k_stride_page = 656 * 64;
                    sa.topk_ids = (const int32_t *)FAKE(0xb00000000ull);
                    sa.sinks = (const float *)FAKE(0xc00000000ull);
                    nrecs = 0;
                    CHECK(dcpattn_attn_run(sp, &sa, NULL, 0, 0) == DCPATTN_STATUS_WORKSPACE && nrecs == 0,
                          "sparse without a workspace: %s", dcpattn_last_error());
                    CHECK(dcpattn_attn_run(sp, &sa, ws, want, 0) == 0, "sparse run: %s", dcpattn_last_error());
                    CHECK(nrecs == 1 && r0->fn == fake_fn && r0->block == 384 && r0->smem == (unsigned)sp->attn->smem &&
                              r0->grid[0] == 3 * 3 && r0->grid[1] == 2 && r0->grid[2] == 1 &&
                              (char *)r0->p.attn.topk_rows == ws && r0->p.attn.topk == 512 &&
                              r0->p.attn.topk_ids == sa.topk_ids && r0->p.attn.topk_st == 512 &&
                              r0->p.attn.sinks == (r == 0 ? sa.sinks : NULL),
                          "sparse launch (rank %d): %d launches, grid %u %u %u, block %u, rows %p, sinks %p", r, nrecs,
                          r0->grid[0], r0->grid[1], r0->grid[2], r0->block, (void *)r0->p.attn.topk_rows,
                          (const void *)r0->p.attn.sinks);
                    dcpattn_attn_plan_destroy(sp);
                    sp = NULL;
                }
            }
        }
    }
    /* GQA's balanced schedule (num_splits 0, the default): NAME_balanced over (workers, KV heads);
       the workspace holds two partial-state slots of a row tile per worker and KV head, then the
       CTAs' words and one counter per (sequence, row tile, KV head) of the bounds; a run with at
       least as many jobs as workers takes the largest count that gives each worker whole jobs,
       where that keeps 95 % of them */
    {
        dcpattn_attn_desc g = d;
        dcpattn_attn_plan *gp = NULL;
        g.num_splits = 0;
        g.max_batch = 64;
        g.max_q_len = 1;
        g.max_total_q = 0;
        ctx->compile_only = 1;
        CHECK(dcpattn_attn_plan_create(ctx, &g, &gp) == 0, "GQA balanced plan: %s", dcpattn_last_error());
        if (gp) {
            const int w = dcpattn_attn_workers(gp), rt = gp->row_tiles, rows = gp->attn->rows, runs[2] = {64, 3};
            const size_t slot_rows = (size_t)w * 2 * 8 * (size_t)rows;
            const size_t lse_off = (slot_rows * 128 * 4 + 255) & ~(size_t)255;
            const size_t fl_off = (lse_off + slot_rows * 4 + 255) & ~(size_t)255;
            const size_t want = fl_off + 64 * (size_t)rt * 8 * 8;  /* an arrival counter per (sequence, row tile, KV head) */
            char *ws = (char *)FAKE(0x100000);
            const launch_rec *r0 = &recs[0];
            int i;
            ctx->compile_only = 0;
            gp->attn->fn = fake_fn;
            gp->attn->fn_balanced = fake_balanced;
            gp->fn_balanced = fake_balanced; /* (the plan takes its kernel at creation) */
            CHECK(w > 1 && dcpattn_attn_num_splits(gp) == 1 && dcpattn_attn_workspace_size(gp) == want,
                  "GQA balanced: %d workers, workspace %zu (want %zu)", w, dcpattn_attn_workspace_size(gp), want);
            for (i = 0; i < 2; i++) {
                dcpattn_attn_args ga = a;
                const int expect = dcpattn__run_workers(w, (int64_t)runs[i] * rt);
                ga.batch = runs[i];
                nrecs = 0;
                CHECK(dcpattn_attn_run(gp, &ga, ws, want, 0) == 0 && nrecs == 1, "GQA balanced run: %s",
                      dcpattn_last_error());
                CHECK(r0->fn == fake_balanced && r0->grid[0] == (unsigned)expect && r0->grid[1] == 8 &&
                          r0->grid[2] == 1 && r0->p.attn.workers == expect && (char *)r0->p.attn.o_part == ws &&
                          (char *)r0->p.attn.lse_part == ws + lse_off && (char *)r0->p.attn.flags == ws + fl_off &&
                          (r0->p.attn.token & 1),
                      "GQA balanced launch, batch %d: fn %p grid %u %u %u workers %d (want %d of %d)", runs[i],
                      (void *)r0->fn, r0->grid[0], r0->grid[1], r0->grid[2], r0->p.attn.workers, expect, w);
            }
            dcpattn_attn_plan_destroy(gp);
        }
    }
    /* two contexts in one process (as two GPUs would have): each has a function table of its
       own, so a plan refers to its own context's variant and never to the other's handle */
    {
        dcpattn_context *ctx2 = NULL;
        dcpattn_attn_plan *p1 = NULL, *p2 = NULL;
        dcpattn_attn_desc d2 = d;
        d2.num_splits = 1;
        CHECK(dcpattn_context_create(&cd, &ctx2) == 0, "second context: %s", dcpattn_last_error());
        ctx->compile_only = 1;
        if (ctx2 && dcpattn_attn_plan_create(ctx, &d2, &p1) == 0 && dcpattn_attn_plan_create(ctx2, &d2, &p2) == 0) {
            const char *name = dcpattn_attn_variant(p1);
            CHECK(strcmp(name, dcpattn_attn_variant(p2)) == 0 && p1->attn != p2->attn &&
                      p1->attn == dcpattn__find(ctx, name) && p2->attn == dcpattn__find(ctx2, name),
                  "two contexts share a variant entry: %s %p %p", name, (void *)p1->attn, (void *)p2->attn);
        } else {
            CHECK(0, "plans in two contexts: %s", dcpattn_last_error());
        }
        dcpattn_attn_plan_destroy(p1);
        dcpattn_attn_plan_destroy(p2);
        dcpattn_context_destroy(ctx2);
        ctx->compile_only = 0;
    }
    /* loading many more variants grows the function table: the plan's variants must stay
       where they were (each is its own allocation) */
    {
        const char *const *names;
        int n;
        dcpattn__variant *attn = plan->attn, *merge = plan->merge;
        const char *attn_name = dcpattn_attn_variant(plan);
        ctx->compile_only = 1; /* compile (or find in the AOT cache), do not load */
        CHECK(dcpattn_default_variants(ctx, &names, &n) == 0 && n > 40, "default set");
        CHECK(dcpattn_precompile(ctx, names, n, NULL, NULL) == 0, "precompile: %s", dcpattn_last_error());
        CHECK(ctx->table_len > 32 && dcpattn__find(ctx, attn_name) == attn && attn->fn == fake_fn &&
                  merge->fn == (dcpattn__CUfunction)(uintptr_t)0x2000,
              "a plan's variant moved when the table grew (%d entries)", ctx->table_len);
    }
    dcpattn_attn_plan_destroy(plan);
    ctx->compile_only = 1; /* nothing was loaded: destroy must not unload */
    dcpattn_context_destroy(ctx);
    return check_summary();
}
