/* test_gpu_big — a KV pool larger than 4 GiB: GQA attention whose block table points at
   pages past the 2 GiB and 4 GiB byte offsets of the pool, against the CPU reference of
   tests/ref.h (seed from the clock, printed; DCPATTN_TEST_SEED=N repeats it).

   The pool is one 4.5 GiB bf16 allocation in vLLM's layout: page p holds its K block
   [page_size, Hkv, D] and then its V block, with 64 elements of padding, so k_cache = pool,
   v_cache = pool + one block, k_stride_page = v_stride_page = 2 blocks + 64 elements. With
   bf16, the 4 GiB byte offset is element 2^31: every offset past it overflows 32-bit
   signed element arithmetic, and past 2 GiB 32-bit signed byte arithmetic. Unused pages are
   NaN. A small batch is sharded on the host (ref_shard_build, pages shuffled), and its used
   pages are placed in the big pool at: the page that holds element 2^30, the page that
   holds element 2^31, the first page wholly past it, the last page of the pool, page 0, and
   random pages past 2^31 elements; unused block-table entries point at a NaN page past it.
   Only the used pages are copied in, and copied back; the reference runs over the copies
   read back from the device, in a compact pool. Each case runs with num_splits 1 and more;
   out and lse are poisoned with NaN before every launch; after the runs the used pages
   must be unchanged.

   When the 4.5 GiB allocation fails it says so and runs nothing ("skipped"), as it does
   without a GPU. About 4.6 GiB of device memory, well under 10 s. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>

#include "check.h"
#include "ref.h"

#define GPU_UTIL_CASE_FAIL
#define GPU_UTIL_ATTN
#include "gpu_util.h"

enum { PS = 16, HKV = 2, D = 128, GROUP = 8, PAD = 64, BATCH = 3, N_SPECIAL = 5 };
#define BLOCK ((int64_t)PS * HKV * D)   /* elements of one K (or V) block of a page */
#define STRIDE (2 * BLOCK + PAD)        /* elements from one page to the next */
#define POOL_BYTES (4608ull << 20)      /* 4.5 GiB */
#define E30 ((int64_t)1 << 30)          /* element 2^30: byte offset 2 GiB */
#define E31 ((int64_t)1 << 31)          /* element 2^31: byte offset 4 GiB */

static uint64_t seed;
static dcpattn_context *ctx;
static uint16_t *pool;
static int64_t pool_pages;
static int rnd(int lo, int hi) { return hi <= lo ? lo : lo + (int)(ref_rand_u64(&seed) % (uint64_t)(hi - lo + 1)); }

typedef struct bcase {
    int W, r, I, qlen_max, causal, lse_mode; /* lse_mode: 0 natural, 1 base 2, 2 NULL */
    int splits[3], n_splits;
} bcase;

static int64_t page_elem(int64_t page) { return page * STRIDE; }
static const char *where(int64_t e, int64_t page) {
    int64_t off = e - page_elem(page);
    return off < BLOCK ? "K" : off < 2 * BLOCK ? "V" : "padding";
}
static int taken(const int64_t *map, int n, int64_t page) {
    int i;
    for (i = 0; i < n; i++)
        if (map[i] == page) return 1;
    return 0;
}

/* Compact page -> pool page: the used compact pages take the special pages first, every
   other compact page a distinct random page past element 2^31 + one page. */
static void place_pages(const rank_in *ri, const batch_data *bd, int64_t *map) {
    const int64_t np = ri->sh.num_pages;
    const int64_t special[N_SPECIAL] = {E30 / STRIDE, E31 / STRIDE, E31 / STRIDE + 1, pool_pages - 1, 0};
    unsigned char *used = (unsigned char *)calloc((size_t)np, 1);
    int64_t c, i;
    int b, next = 0;
    if (!used) exit(1);
    for (b = 0; b < bd->batch; b++)
        for (i = 0; i < (ri->sh.seqused_k[b] + PS - 1) / PS; i++)
            used[ri->sh.block_table[b * ri->sh.block_table_stride + i]] = 1;
    for (c = 0; c < np; c++) map[c] = -1;
    for (c = 0; c < np && next < N_SPECIAL; c++)
        if (used[c]) map[c] = special[next++];
    for (c = 0; c < np; c++) {
        int64_t p;
        if (map[c] >= 0) continue;
        do
            p = E31 / STRIDE + 2 + (int64_t)(ref_rand_u64(&seed) % (uint64_t)(pool_pages - E31 / STRIDE - 3));
        while (taken(map, (int)np, p));
        map[c] = p;
    }
    free(used);
}

/* Copies the K and V blocks of compact pages [0, np) between the host (compact) and the pool. */
static void pages_copy(uint16_t *hk, uint16_t *hv, const int64_t *map, int64_t np, int to_device) {
    int64_t c;
    const size_t bytes = sizeof(uint16_t) * (size_t)BLOCK;
    for (c = 0; c < np; c++) {
        uint16_t *dk = pool + page_elem(map[c]), *dv = dk + BLOCK;
        if (to_device) {
            CUDA_OK(cudaMemcpy(dk, hk + c * BLOCK, bytes, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(dv, hv + c * BLOCK, bytes, cudaMemcpyHostToDevice));
        } else {
            CUDA_OK(cudaMemcpy(hk + c * BLOCK, dk, bytes, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(hv + c * BLOCK, dv, bytes, cudaMemcpyDeviceToHost));
        }
    }
}

static void big_case(const bcase *c) {
    batch_data bd;
    rank_in ri;
    ref_res rr;
    ref_attn_inputs in;
    run_cfg rc;
    int qlen[BATCH], b, i, high = 0;
    int64_t L[BATCH], np, n_bt, c_i, *map;
    int32_t *big_bt, *d_bt;
    uint16_t *back_k, *back_v;
    size_t cache_bytes;
    void *ws = NULL;
    char desc[512];

    for (b = 0; b < BATCH; b++) {
        qlen[b] = rnd(1, c->qlen_max);
        L[b] = rnd(150, 400);
    }
    data_make(&bd, DCPATTN_BF16, GROUP * HKV, HKV, D, BATCH, qlen, L, &seed);
    bd.max_q = c->qlen_max;
    rank_build(&ri, &bd, PS, c->W, c->r, c->I, 0, 0, &seed); /* host shard (and compact device copies, unused) */
    np = ri.sh.num_pages;
    if (ri.sh.k_stride_page != BLOCK || ri.sh.v_stride_page != BLOCK) {
        CHECK(0, "compact shard has page strides %lld/%lld, expected %lld", (long long)ri.sh.k_stride_page,
              (long long)ri.sh.v_stride_page, (long long)BLOCK);
        rank_free(&ri);
        data_free(&bd);
        return;
    }
    snprintf(desc, sizeof desc, "pool %lld pages of %lld elements, bf16 d%d g%d hkv%d ps%d W%d r%d I%d q_len<=%d L %lld %lld %lld",
             (long long)pool_pages, (long long)STRIDE, D, GROUP, HKV, PS, c->W, c->r, c->I, c->qlen_max,
             (long long)L[0], (long long)L[1], (long long)L[2]);
    snprintf(g_case, sizeof g_case, "%s: placing pages", desc);

    /* place, copy in, copy back */
    map = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)np);
    place_pages(&ri, &bd, map);
    CUDA_OK(cudaMemset(pool, 0xff, (size_t)(pool_pages * STRIDE) * sizeof(uint16_t)));
    pages_copy(ri.sh.k_cache, ri.sh.v_cache, map, np, 1);
    n_bt = (int64_t)bd.batch * ri.sh.block_table_stride;
    big_bt = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)n_bt);
    for (c_i = 0; c_i < n_bt; c_i++) big_bt[c_i] = (int32_t)map[ri.sh.block_table[c_i]];
    d_bt = (int32_t *)gpu_upload(big_bt, sizeof(int32_t) * (size_t)n_bt);
    for (b = 0; b < bd.batch; b++)
        for (c_i = 0; c_i < (ri.sh.seqused_k[b] + PS - 1) / PS; c_i++)
            if (page_elem(big_bt[b * ri.sh.block_table_stride + c_i]) >= E31) high++;
    cache_bytes = sizeof(uint16_t) * (size_t)(np * BLOCK);
    back_k = (uint16_t *)xmalloc(cache_bytes);
    back_v = (uint16_t *)xmalloc(cache_bytes);
    pages_copy(back_k, back_v, map, np, 0);
    CHECK(!memcmp(back_k, ri.sh.k_cache, cache_bytes) && !memcmp(back_v, ri.sh.v_cache, cache_bytes),
          "%s: pages read back differ from those written", desc);
    CHECK(high > 0 && taken(map, (int)np, E31 / STRIDE) && taken(map, (int)np, E30 / STRIDE),
          "%s: %d used pages past element 2^31; the boundary pages %s used", desc, high,
          taken(map, (int)np, E31 / STRIDE) ? "are" : "are not");
    printf("  W%d r%d I%d: %lld pages, %d used past 4 GiB; element 2^30 in the %s block of page %lld, 2^31 in the %s "
           "block of page %lld\n",
           c->W, c->r, c->I, (long long)np, high, where(E30, E30 / STRIDE), (long long)(E30 / STRIDE),
           where(E31, E31 / STRIDE), (long long)(E31 / STRIDE));

    /* the reference over the pages read back */
    memset(&rc, 0, sizeof rc);
    rc.causal = c->causal;
    rc.lse_base2 = c->lse_mode;
    rank_ref_inputs(&in, &ri, &bd);
    in.k_cache = back_k;
    in.v_cache = back_v;
    ref_sharded(&rr, ref_params(&bd, &ri, &rc), &in, bd.total_q);

    for (i = 0; i < c->n_splits; i++) {
        dcpattn_attn_plan *plan = NULL;
        dcpattn_attn_args a;
        run_cfg pc = rc;
        out_buf o;
        dcpattn_status s;
        char msg[1024];
        size_t need;
        pc.splits = c->splits[i];
        if (pc.lse_base2 == 2) pc.lse_base2 = 0;
        s = plan_for(ctx, &bd, &ri, &pc, &plan);
        if (s) {
            CHECK(0, "%s splits %d: plan: %s: %s", desc, pc.splits, dcpattn_status_string(s), dcpattn_last_error());
            continue;
        }
        snprintf(g_case, sizeof g_case, "%s splits %d->%d [%s]", desc, pc.splits, dcpattn_attn_num_splits(plan),
                 dcpattn_attn_variant(plan));
        need = dcpattn_attn_workspace_size(plan);
        if (need) CUDA_OK(cudaMalloc(&ws, need));
        out_alloc(&o, bd.total_q, bd.hq, bd.d, 0, c->lse_mode != 2);
        rank_args(&a, &ri, &bd);
        a.k_cache = pool;
        a.v_cache = pool + BLOCK;
        a.k_stride_page = a.v_stride_page = STRIDE;
        a.k_stride_t = a.v_stride_t = ri.sh.k_stride_t; /* the shard's page layout, either order */
        a.k_stride_h = a.v_stride_h = ri.sh.k_stride_h;
        a.num_pages = pool_pages;
        a.block_table = d_bt;
        out_args(&a, &o);
        out_poison(&o, 0xff);
        s = dcpattn_attn_run(plan, &a, ws, need, 0);
        if (s) {
            CHECK(0, "%s: run: %s: %s", g_case, dcpattn_status_string(s), dcpattn_last_error());
        } else {
            out_fetch(&o);
            CHECK(verdict(&rr, &o, 1.0, msg, sizeof msg), "%s: %s", g_case, msg);
        }
        out_free(&o);
        if (ws) CUDA_OK(cudaFree(ws));
        ws = NULL;
        dcpattn_attn_plan_destroy(plan);
    }
    snprintf(g_case, sizeof g_case, "%s: reading the pages back after the runs", desc);
    pages_copy(back_k, back_v, map, np, 0);
    CHECK(!memcmp(back_k, ri.sh.k_cache, cache_bytes) && !memcmp(back_v, ri.sh.v_cache, cache_bytes),
          "%s: a cache page changed during the runs", desc);
    ref_res_free(&rr);
    free(back_k);
    free(back_v);
    free(big_bt);
    free(map);
    CUDA_OK(cudaFree(d_bt));
    rank_free(&ri);
    data_free(&bd);
}

int main(void) {
    check_line_buffered();
    static const bcase cases[2] = {
        /* W, r, I, qlen_max, causal, lse_mode, splits */
        {1, 0, 1, 4, 1, 0, {1, 0, 8}, 3},
        {4, 2, 16, 3, 1, 1, {1, 8, 0}, 2},
    };
    cudaError_t e;
    double t0;
    int i;
    if (!gpu_test_begin(&seed, &ctx)) return check_summary();
    t0 = now_s();
    pool_pages = (int64_t)(POOL_BYTES / (sizeof(uint16_t) * (uint64_t)STRIDE));
    e = cudaMalloc((void **)&pool, (size_t)(pool_pages * STRIDE) * sizeof(uint16_t));
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky; clear it */
        printf("skipped: cudaMalloc of the %.2f GiB KV pool failed (%s): the >4 GiB pool test needs that much free "
               "device memory\n",
               (double)(pool_pages * STRIDE) * 2.0 / (1 << 30), cudaGetErrorString(e));
        dcpattn_context_destroy(ctx);
        return check_summary();
    }
    printf("KV pool: %.2f GiB, %lld pages of %lld elements (K block, V block, %d padding)\n",
           (double)(pool_pages * STRIDE) * 2.0 / (1 << 30), (long long)pool_pages, (long long)STRIDE, PAD);
    for (i = 0; i < 2; i++) big_case(&cases[i]);
    CUDA_OK(cudaFree(pool));
    dcpattn_context_destroy(ctx);
    printf("%.1f s (CPU reference %.1f s)\n", now_s() - t0, gpu_ref_seconds);
    return check_summary();
}
