/* test_gpu_threads — dcpattn from many host threads at once, on one GPU, against the CPU
   reference of tests/ref.h (seed from the clock, printed; DCPATTN_TEST_SEED=N repeats it).

   Parts (each starts its threads together at a barrier, so that plan creation, variant
   lookup and launches overlap):
   - own contexts: 8 threads, each with its own dcpattn context on the same device, its own
     non-blocking stream and 4 GQA runs of different shapes (head dims 64..256, groups 1..16,
     pages 1/16/64, W 1..8, q_len 1..8, lse natural / base 2 / NULL), some with num_splits > 1
     so that the split merge runs too; variants of the default set (AOT).
   - shared context: 8 threads, one context, each its own plans and stream, same runs.
   - cold JIT, own contexts: 4 threads create a context each on an empty cache directory and
     no AOT directory and plan the same fp16 variant (and its split merge) at the same moment:
     NVRTC runs once per variant (the others wait on the cache lock and load the entry), one
     entry per variant, no temporary file left, every result right.
   - cold JIT, shared context: the same with 4 threads on one fresh context.
   Every run: out and lse poisoned with NaN (0xff) on the thread's stream just before the
   launch; each plan runs twice and the two results must be bitwise equal. The threads only
   plan, launch and copy back; inputs are built and results judged (ref_attn, verdict) on
   the main thread, before and after.
   Without a GPU it says so and runs nothing. */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include "check.h"
#include "ref.h"

/* A CUDA error in any thread ends the run, naming what that thread was doing, with the
   summary line. */
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char t_case[256];
static void thread_fail(const char *fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&fail_lock);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  while running: %s\n", t_case[0] ? t_case : "(main thread)");
    check_failed_++;
    check_summary();
    exit(1);
}
#define GPU_UTIL_FAIL thread_fail
#define GPU_UTIL_ATTN
#include "gpu_util.h"

#define THREADS 8
#define JIT_THREADS 4
#define RUNS 4
#define ROUNDS 2 /* each plan runs twice; the results must be bitwise equal */

static uint64_t seed;
static int rnd(int lo, int hi) { return hi <= lo ? lo : lo + (int)(ref_rand_u64(&seed) % (uint64_t)(hi - lo + 1)); }

/* ---------------- the run configurations ---------------- */
typedef struct tcfg {
    int dtype, d, group, hkv, ps, causal, W, I, qlen_max, splits, lse_mode; /* lse_mode: 0 natural, 1 base 2, 2 NULL */
} tcfg;

/* bf16, groups 1/4/8/16, <= 16 query rows per KV head: variants of the default set */
static const tcfg CFGS[6] = {
    {DCPATTN_BF16, 128, 8, 1, 16, 1, 1, 1, 2, 0, 0},
    {DCPATTN_BF16, 64, 4, 2, 1, 1, 2, 2, 4, 4, 1},
    {DCPATTN_BF16, 256, 1, 4, 64, 0, 4, 16, 1, 1, 0},
    {DCPATTN_BF16, 96, 16, 1, 16, 1, 1, 1, 1, 8, 2},
    {DCPATTN_BF16, 192, 4, 2, 16, 1, 8, 1, 3, 2, 0},
    {DCPATTN_BF16, 128, 1, 8, 64, 1, 2, 64, 8, 0, 1},
};
/* fp16 is outside the default set: a cold compile of gqa_fp16_d64_g4_m16, and of its split
   merge in the first run */
static const tcfg JIT_CFGS[2] = {
    {DCPATTN_FP16, 64, 4, 2, 16, 1, 1, 1, 4, 4, 0},
    {DCPATTN_FP16, 64, 4, 2, 16, 1, 2, 16, 4, 1, 1},
};

/* One run: inputs and outputs (built by the main thread), what the thread saw. */
typedef struct trun {
    tcfg c;
    batch_data bd;
    rank_in ri;
    run_cfg rc;
    out_buf o;
    uint16_t *first_out; /* round 0's host copies */
    float *first_lse;
    dcpattn_status plan_s, run_s;
    int splits_used, same;
    char variant[128], err[4224]; /* the library's names and messages fit whole */
} trun;

typedef struct tjob {
    int id, n_runs;
    const char *part;
    dcpattn_context *shared;    /* NULL: the thread creates its own context with `cd` */
    dcpattn_context_desc cd;
    pthread_barrier_t *start;
    dcpattn_status ctx_s;
    char ctx_err[4224];
    trun runs[RUNS];
} tjob;

static void run_build(trun *r, const tcfg *c) {
    int qlen[MAXB], b, rank;
    int64_t L[MAXB];
    const int batch = 3;
    memset(r, 0, sizeof *r);
    r->c = *c;
    rank = rnd(c->W > 1 ? 1 : 0, c->W - 1);
    for (b = 0; b < batch; b++) {
        qlen[b] = rnd(1, c->qlen_max);
        L[b] = rnd(qlen[b] > 16 ? qlen[b] : 16, 320);
    }
    if (rank > 0) { /* sequence 0 ends before the rank's first token: its rows see no key here */
        if (qlen[0] > rank * c->I) qlen[0] = rank * c->I;
        L[0] = rnd(qlen[0], rank * c->I);
    }
    data_make(&r->bd, c->dtype, c->group * c->hkv, c->hkv, c->d, batch, qlen, L, &seed);
    r->bd.max_q = c->qlen_max; /* the variant depends on it: the same in every run of a config */
    rank_build(&r->ri, &r->bd, c->ps, c->W, rank, c->I, 0, 0, &seed);
    r->rc.causal = c->causal;
    r->rc.lse_base2 = c->lse_mode;
    r->rc.splits = c->splits;
    out_alloc(&r->o, r->bd.total_q, r->bd.hq, r->bd.d, 0, c->lse_mode != 2);
    r->first_out = (uint16_t *)xmalloc(sizeof(uint16_t) * (size_t)r->o.out_elems);
    r->first_lse = (float *)xmalloc(sizeof(float) * (size_t)(r->o.lse_elems ? r->o.lse_elems : 1));
}

static void run_free(trun *r) {
    out_free(&r->o);
    rank_free(&r->ri);
    data_free(&r->bd);
    free(r->first_out);
    free(r->first_lse);
}

static void describe_run(char *buf, size_t n, const tjob *j, int k) {
    const trun *r = &j->runs[k];
    const tcfg *c = &r->c;
    snprintf(buf, n, "%s thread %d run %d: %s d%d g%d hkv%d ps%d %s W%d r%d I%d q_len<=%d splits %d->%d lse %s [%s]",
             j->part, j->id, k, dt_name(c->dtype), c->d, c->group, c->hkv, c->ps, c->causal ? "causal" : "non-causal",
             c->W, r->ri.r, c->I, c->qlen_max, c->splits, r->splits_used,
             c->lse_mode == 2 ? "NULL" : c->lse_mode ? "base2" : "natural", r->variant);
}

/* ---------------- the thread: plan, poison, launch, copy back ---------------- */
static void *thread_main(void *arg) {
    tjob *j = (tjob *)arg;
    dcpattn_context *ctx = j->shared;
    cudaStream_t st;
    void *ws = NULL;
    size_t ws_size = 0;
    int k, round;
    snprintf(t_case, sizeof t_case, "%s thread %d: setup", j->part, j->id);
    gpu_use(0);
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (!ctx) {
        j->ctx_s = dcpattn_context_create(&j->cd, &ctx);
        if (j->ctx_s) snprintf(j->ctx_err, sizeof j->ctx_err, "%s", dcpattn_last_error());
    }
    pthread_barrier_wait(j->start);
    for (k = 0; k < j->n_runs && ctx; k++) {
        trun *r = &j->runs[k];
        dcpattn_attn_plan *plan = NULL;
        dcpattn_attn_args a;
        run_cfg pc = r->rc;
        size_t need;
        snprintf(t_case, sizeof t_case, "%s thread %d run %d", j->part, j->id, k);
        if (pc.lse_base2 == 2) pc.lse_base2 = 0;
        r->plan_s = plan_for(ctx, &r->bd, &r->ri, &pc, &plan);
        if (r->plan_s) {
            snprintf(r->err, sizeof r->err, "plan: %s", dcpattn_last_error());
            continue;
        }
        snprintf(r->variant, sizeof r->variant, "%s", dcpattn_attn_variant(plan));
        r->splits_used = dcpattn_attn_num_splits(plan);
        need = dcpattn_attn_workspace_size(plan);
        if (need > ws_size) {
            if (ws) CUDA_OK(cudaFree(ws));
            CUDA_OK(cudaMalloc(&ws, need));
            ws_size = need;
        }
        rank_args(&a, &r->ri, &r->bd);
        out_args(&a, &r->o);
        r->same = 1;
        for (round = 0; round < ROUNDS; round++) {
            out_poison_on(&r->o, 0xff, st);
            r->run_s = dcpattn_attn_run(plan, &a, need ? ws : NULL, need, (dcpattn_stream)st);
            if (r->run_s) {
                snprintf(r->err, sizeof r->err, "run: %s", dcpattn_last_error());
                break;
            }
            out_fetch_on(&r->o, st);
            if (round == 0) {
                memcpy(r->first_out, r->o.h_out, sizeof(uint16_t) * (size_t)r->o.out_elems);
                if (r->o.has_lse) memcpy(r->first_lse, r->o.h_lse, sizeof(float) * (size_t)r->o.lse_elems);
            } else {
                r->same &= memcmp(r->first_out, r->o.h_out, sizeof(uint16_t) * (size_t)r->o.out_elems) == 0 &&
                           (!r->o.has_lse ||
                            memcmp(r->first_lse, r->o.h_lse, sizeof(float) * (size_t)r->o.lse_elems) == 0);
            }
        }
        dcpattn_attn_plan_destroy(plan);
    }
    snprintf(t_case, sizeof t_case, "%s thread %d: teardown", j->part, j->id);
    if (ws) CUDA_OK(cudaFree(ws));
    CUDA_OK(cudaStreamDestroy(st));
    if (!j->shared && ctx) dcpattn_context_destroy(ctx);
    t_case[0] = 0;
    return NULL;
}

/* ---------------- one part: build, run the threads, judge ---------------- */
/* Starts n threads on their jobs at one barrier and judges every run on this thread. */
static void run_part(tjob *jobs, int n) {
    pthread_t th[THREADS];
    pthread_barrier_t start;
    int i, k;
    double t0 = now_s();
    long long runs = 0;
    CUDA_OK(cudaDeviceSynchronize()); /* the inputs are on the device before any thread starts */
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (i = 0; i < n; i++) {
        jobs[i].start = &start;
        if (pthread_create(&th[i], NULL, thread_main, &jobs[i])) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    for (i = 0; i < n; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (i = 0; i < n; i++) {
        tjob *j = &jobs[i];
        CHECK(j->ctx_s == DCPATTN_STATUS_SUCCESS, "%s thread %d: context: %s: %s", j->part, j->id,
              dcpattn_status_string(j->ctx_s), j->ctx_err);
        if (j->ctx_s) continue;
        for (k = 0; k < j->n_runs; k++) {
            trun *r = &j->runs[k];
            char desc[512], msg[1024];
            ref_res rr;
            ref_attn_inputs in;
            describe_run(desc, sizeof desc, j, k);
            if (r->plan_s || r->run_s) {
                CHECK(0, "%s: %s: %s", desc, dcpattn_status_string(r->plan_s ? r->plan_s : r->run_s), r->err);
                continue;
            }
            runs++;
            rank_ref_inputs(&in, &r->ri, &r->bd);
            ref_sharded(&rr, ref_params(&r->bd, &r->ri, &r->rc), &in, r->bd.total_q);
            CHECK(verdict(&rr, &r->o, 1.0, msg, sizeof msg), "%s: %s", desc, msg);
            CHECK(r->same, "%s: the second run of the plan differs from the first", desc);
            CHECK(r->c.splits <= 1 || r->splits_used > 1, "%s: asked for %d splits, the plan has %d", desc,
                  r->c.splits, r->splits_used);
            ref_res_free(&rr);
        }
    }
    printf("  %-34s %2d threads, %3lld runs checked, %.1f s\n", jobs[0].part, n, runs * ROUNDS, now_s() - t0);
}

/* Thread i's run k gets cfgs[(i + k) % n_cfgs], or cfgs[k % n_cfgs] with same (every thread
   the same sequence of configurations). */
static void jobs_build(tjob *jobs, int n, const char *part, dcpattn_context *shared, const dcpattn_context_desc *cd,
                       const tcfg *cfgs, int n_cfgs, int n_runs, int same) {
    int i, k;
    for (i = 0; i < n; i++) {
        tjob *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->id = i;
        j->part = part;
        j->shared = shared;
        if (cd) j->cd = *cd;
        j->n_runs = n_runs;
        for (k = 0; k < n_runs; k++) run_build(&j->runs[k], &cfgs[((same ? 0 : i) + k) % n_cfgs]);
    }
}

static void jobs_free(tjob *jobs, int n) {
    int i, k;
    for (i = 0; i < n; i++)
        for (k = 0; k < jobs[i].n_runs; k++) run_free(&jobs[i].runs[k]);
}

/* ---------------- cold JIT ---------------- */
/* Compiles that NVRTC did (the library logs "<variant>: nvrtc in ..." at level 2), by family. */
typedef struct jit_log {
    pthread_mutex_t lock;
    int attn, merge, other;
} jit_log;

static void on_log(void *user, int level, const char *message) {
    jit_log *l = (jit_log *)user;
    (void)level;
    if (!strstr(message, ": nvrtc in ")) return;
    pthread_mutex_lock(&l->lock);
    if (!strncmp(message, "gqa_", 4))
        l->attn++;
    else if (!strncmp(message, "merge_", 6))
        l->merge++;
    else
        l->other++;
    pthread_mutex_unlock(&l->lock);
}

/* Files in dir whose name contains `part`; with remove, every file is deleted (and the
   directory). */
static int dir_files(const char *dir, const char *part, int remove) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1200];
    int c = 0;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (part && strstr(e->d_name, part)) c++;
        if (remove) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
    if (remove) rmdir(dir);
    return c;
}

/* n threads plan the JIT configs at once, on a fresh empty cache directory with no AOT
   directory: with shared, one context made here; else one per thread. */
static void cold_jit_part(const char *part, int shared) {
    char dir[] = "/tmp/dcpattn-threads-XXXXXX";
    const char *old = getenv("DCPATTN_CACHE_DIR");
    char *saved = old ? strdup(old) : NULL;
    dcpattn_context_desc cd;
    dcpattn_context *ctx = NULL;
    tjob *jobs = (tjob *)xmalloc(sizeof(tjob) * JIT_THREADS);
    jit_log log;
    int i, cubins, tmps;
    if (!mkdtemp(dir)) {
        CHECK(0, "%s: mkdtemp: %s", part, strerror(errno));
        free(jobs);
        free(saved);
        return;
    }
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.lock, NULL);
    setenv("DCPATTN_CACHE_DIR", dir, 1); /* read when a context is created; no thread runs yet */
    /* the split plans take the merge kernel (not a cluster merge), so it is compiled too */
    setenv("DCPATTN_NO_CLUSTER_MERGE", "1", 1);
    memset(&cd, 0, sizeof cd);
    cd.aot_dir = ""; /* no AOT: everything comes from this cold directory or NVRTC */
    cd.log_level = DCPATTN_LOG_INFO;
    cd.log = on_log;
    cd.log_user = &log;
    if (shared && dcpattn_context_create(&cd, &ctx)) {
        CHECK(0, "%s: context: %s", part, dcpattn_last_error());
    } else {
        jobs_build(jobs, JIT_THREADS, part, ctx, &cd, JIT_CFGS, 2, 2, 1);
        run_part(jobs, JIT_THREADS);
        for (i = 1; i < JIT_THREADS; i++)
            CHECK(!strcmp(jobs[i].runs[0].variant, jobs[0].runs[0].variant), "%s: thread %d planned %s, thread 0 %s",
                  part, i, jobs[i].runs[0].variant, jobs[0].runs[0].variant);
        cubins = dir_files(dir, ".cubin", 0);
        tmps = dir_files(dir, ".tmp", 0);
        printf("  %-34s %s: NVRTC compiled %d attention + %d merge variants; %d entries, %d temp files\n", "",
               jobs[0].runs[0].variant, log.attn, log.merge, cubins, tmps);
        CHECK(log.attn == 1 && log.merge == 1 && log.other == 0,
              "%s: NVRTC ran %d times for the attention variant and %d for the merge (and %d others); once each "
              "expected", part, log.attn, log.merge, log.other);
        CHECK(cubins == 2 && tmps == 0, "%s: the cache holds %d entries and %d temp files (want 2 and 0)", part,
              cubins, tmps);
        jobs_free(jobs, JIT_THREADS);
        if (ctx) dcpattn_context_destroy(ctx);
    }
    unsetenv("DCPATTN_NO_CLUSTER_MERGE");
    if (saved) {
        setenv("DCPATTN_CACHE_DIR", saved, 1);
        free(saved);
    } else {
        unsetenv("DCPATTN_CACHE_DIR");
    }
    dir_files(dir, NULL, 1);
    pthread_mutex_destroy(&log.lock);
    free(jobs);
}

int main(void) {
    check_line_buffered();
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    tjob *jobs;
    double t0;
    if (!gpu_test_begin(&seed, &ctx)) return check_summary();
    t0 = now_s();
    jobs = (tjob *)xmalloc(sizeof(tjob) * THREADS);
    memset(&cd, 0, sizeof cd);

    jobs_build(jobs, THREADS, "own context per thread", NULL, &cd, CFGS, 6, RUNS, 0);
    run_part(jobs, THREADS);
    jobs_free(jobs, THREADS);

    jobs_build(jobs, THREADS, "one context, own plans and streams", ctx, NULL, CFGS, 6, RUNS, 0);
    run_part(jobs, THREADS);
    jobs_free(jobs, THREADS);

    cold_jit_part("cold JIT, own contexts", 0);
    cold_jit_part("cold JIT, one context", 1);

    CHECK(gpu_seen_empty_rows > 0, "no run had a query row that sees no key on its rank");
    free(jobs);
    dcpattn_context_destroy(ctx);
    printf("%.1f s (CPU reference %.1f s)\n", now_s() - t0, gpu_ref_seconds);
    return check_summary();
}
