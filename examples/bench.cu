/* bench — dcpattn's benchmark (docs/performance.md). One run:
     1. measures the two ceilings on this GPU: a tuned streaming read (16-byte loads,
        grid-stride, 4 GiB, several grid shapes; the best) and a cuBLAS bf16 GEMM
        (8192^3, fp32 accumulation);
     2. GQA cases G1, G2 (q_len 1/2/4/8), MLA cases M1, M2 (each also under the per-sequence
        split: G1P ... M2P; G1F, G2F, M1F and M2F: G1, G2, M1 and M2 with an FP8 e4m3 cache,
        bytes counted as read), the skewed batches S1-S4 against even twins, and merge cases
        R1, R2: each is validated against the CPU reference (tests/ref.h) first, and only a
        passing kernel is timed (median of CUDA-event-timed runs);
     3. the host cost of dcpattn_attn_run and of one CUDA-graph replay;
     4. the peers (examples/bench_peers.py: FlexAttention, SDPA, eager merge, and FlashInfer and
        FlashMLA on the same paged layout where they import or are built) when PyTorch imports,
        and the ratio peer time / dcpattn time per case;
   then prints a table (one line per case, last) and writes everything to a JSON file.
   Exit status: 0 all validations passed, 1 a validation failed, 2 a fatal error.

   usage: bench [--json FILE] [--only CASE,...] [--iters N] [--seed N]
          cases: G1 G1P G1F G2 G2P G2F M1 M1P M1F M2 M2P M2F R1 R2 HOST S1 S1E S2 S2E S3 S3P S3E S3M S3ME S4 S4E
                 SP1 SP2 SP3 SP4 (sparse MLA)
                [--no-peers] [--peers-budget SECONDS] [--peers-script PATH]
   experiments: [--plan-q-len N] [--splits N] (a num_splits policy for every case) [--num-sms N] [--q N] (only
                q_len N of each case: one kernel for a profiler) [--hnd] (GQA pages head-major, no peers)
                [--l2 N] (every sequence's pages drawn from the same N pages of the attention cases, so the
                cache is read from L2: a kernel's time without HBM, to judge a change on the compute side;
                GB/s then count bytes that did not come from HBM; no peers)
   Built with -DDCPATTN_TIMELINE (build/bench_timeline), it also prints after each attention case
   the stage timeline of its launches (templates/timeline.cuh, docs/performance.md "Timeline"). */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <functional>
#include <string>
#include <vector>

#include "ref.h"

/* ------------------------------------------------------------------ results, JSON, exit */

struct row {
    std::string key;      /* "G1/q1", "M1/q2", "R1" */
    std::string caseid;   /* "G1" */
    int order;            /* table order */
    int q_len;
    std::string status;   /* PASS, FAIL, n/a */
    std::string note;     /* why n/a or FAIL, variant detail */
    std::string variant;
    int splits;
    double us, us_min, us_max;
    int reps;
    double bytes, flops, gbps, pct_read, tflops, pct_gemm;
    std::string err_out, err_lse;
    int deterministic;    /* -1 not checked, 0 no, 1 bitwise equal */
    double peer_flex_us, peer_sdpa_us, peer_eager_us;
    /* the paged peers: -1 when the peer's output failed its check; *_causal: it ran a plain causal
       mask, which differs from the DCP mask of this row */
    double peer_fi_us = NAN, peer_fmla_us = NAN;
    bool peer_fi_causal = false, peer_fmla_causal = false;
    std::string timeline; /* timeline builds: the stage timeline as a JSON array (empty: none) */
};

static std::vector<row> g_rows;
static std::vector<std::pair<std::string, std::string>> g_pairs; /* (case, the case it is compared with) */
static std::vector<std::string> g_peer_lines;
static std::string g_peer_note;
static std::string g_json_path = "bench.json";
static std::string g_device;
static int g_num_sms;
static double g_read_gbps, g_gemm_tflops;
static std::string g_read_cfg;
static std::vector<std::string> g_read_all; /* per config "cfg: GB/s" */
static double g_gemm_us;
static uint64_t g_seed;
/* host-cost numbers */
static double g_host_mla_us = -1; /* dcpattn_attn_run of an MLA plan (encodes its TMA map each call) */
static double g_host_call_us = -1, g_host_call1_us = -1, g_host_empty_us = -1, g_graph_replay_us = -1,
              g_graph_launch_us = -1, g_eager_us = -1, g_graph_single_us = -1, g_eager1_us = -1,
              g_graph1_replay_us = -1;
static int g_host_splits = 0;
static std::string g_host_note;
static int g_failures = 0;
static std::string g_fatal;

static std::string jesc(const std::string &s) {
    std::string o;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += (char)c; }
        else if (c == '\n') o += "\\n";
        else if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += (char)c;
    }
    return o;
}
static std::string jnum(double v) {
    char b[64];
    if (!std::isfinite(v)) return "null";
    snprintf(b, sizeof b, "%.6g", v);
    return b;
}

static void print_table(void);

static void write_json(void) {
    FILE *f = fopen(g_json_path.c_str(), "w");
    if (!f) {
        fprintf(stderr, "bench: cannot write %s\n", g_json_path.c_str());
        return;
    }
    fprintf(f, "{\n  \"device\": \"%s\", \"num_sms\": %d, \"seed\": %llu, \"dcpattn\": \"%s\",\n", jesc(g_device).c_str(),
            g_num_sms, (unsigned long long)g_seed, dcpattn_version());
    fprintf(f, "  \"fatal\": %s,\n", g_fatal.empty() ? "null" : ("\"" + jesc(g_fatal) + "\"").c_str());
    fprintf(f, "  \"ceilings\": {\"hbm_read_gbps\": %s, \"hbm_read_best\": \"%s\", \"hbm_read_configs\": [",
            jnum(g_read_gbps).c_str(), jesc(g_read_cfg).c_str());
    for (size_t i = 0; i < g_read_all.size(); i++) fprintf(f, "%s\"%s\"", i ? ", " : "", jesc(g_read_all[i]).c_str());
    fprintf(f, "],\n    \"gemm_bf16_tflops\": %s, \"gemm_shape\": \"8192x8192x8192 bf16 in, fp32 accumulate, bf16 out\", "
               "\"gemm_us\": %s},\n",
            jnum(g_gemm_tflops).c_str(), jnum(g_gemm_us).c_str());
    fprintf(f, "  \"host\": {\"attn_run_host_us\": %s, \"attn_run_host_us_splits1\": %s, \"splits\": %d, "
               "\"empty_kernel_launch_host_us\": %s, \"eager_gpu_us\": %s, \"eager_gpu_us_splits1\": %s, "
               "\"graph_replay_gpu_us\": %s, \"graph_replay_gpu_us_splits1\": %s, \"graph_launch_host_us\": %s, "
               "\"graph_single_replay_wall_us\": %s, \"mla_attn_run_host_us\": %s, \"note\": \"%s\"},\n",
            jnum(g_host_call_us).c_str(), jnum(g_host_call1_us).c_str(), g_host_splits, jnum(g_host_empty_us).c_str(),
            jnum(g_eager_us).c_str(), jnum(g_eager1_us).c_str(), jnum(g_graph_replay_us).c_str(),
            jnum(g_graph1_replay_us).c_str(), jnum(g_graph_launch_us).c_str(), jnum(g_graph_single_us).c_str(),
            jnum(g_host_mla_us).c_str(), jesc(g_host_note).c_str());
    fprintf(f, "  \"cases\": [\n");
    for (size_t i = 0; i < g_rows.size(); i++) {
        const row &r = g_rows[i];
        fprintf(f,
                "    {\"key\": \"%s\", \"case\": \"%s\", \"q_len\": %d, \"status\": \"%s\", \"note\": \"%s\", "
                "\"variant\": \"%s\", \"num_splits\": %d, \"median_us\": %s, \"min_us\": %s, \"max_us\": %s, "
                "\"reps\": %d, \"bytes\": %s, \"flops\": %s, \"gbps\": %s, \"pct_read_ceiling\": %s, \"tflops\": %s, "
                "\"pct_gemm_ceiling\": %s, \"err_out\": \"%s\", \"err_lse\": \"%s\", \"deterministic\": %s, "
                "\"peer_flex_us\": %s, \"peer_sdpa_us\": %s, \"peer_eager_us\": %s, \"peer_flashinfer_us\": %s, "
                "\"peer_flashmla_us\": %s, \"timeline\": %s}%s\n",
                jesc(r.key).c_str(), jesc(r.caseid).c_str(), r.q_len, r.status.c_str(), jesc(r.note).c_str(),
                jesc(r.variant).c_str(), r.splits, jnum(r.us).c_str(), jnum(r.us_min).c_str(), jnum(r.us_max).c_str(),
                r.reps, jnum(r.bytes).c_str(), jnum(r.flops).c_str(), jnum(r.gbps).c_str(), jnum(r.pct_read).c_str(),
                jnum(r.tflops).c_str(), jnum(r.pct_gemm).c_str(), jesc(r.err_out).c_str(), jesc(r.err_lse).c_str(),
                r.deterministic < 0 ? "null" : r.deterministic ? "true" : "false", jnum(r.peer_flex_us).c_str(),
                jnum(r.peer_sdpa_us).c_str(), jnum(r.peer_eager_us).c_str(), jnum(r.peer_fi_us).c_str(),
                jnum(r.peer_fmla_us).c_str(), r.timeline.empty() ? "null" : r.timeline.c_str(),
                i + 1 < g_rows.size() ? "," : "");
    }
    fprintf(f, "  ],\n  \"peers_note\": \"%s\",\n  \"peers\": [\n", jesc(g_peer_note).c_str());
    for (size_t i = 0; i < g_peer_lines.size(); i++)
        fprintf(f, "    %s%s\n", g_peer_lines[i].c_str(), i + 1 < g_peer_lines.size() ? "," : "");
    fprintf(f, "  ]\n}\n");
    if (fclose(f)) fprintf(stderr, "bench: error writing %s\n", g_json_path.c_str());
    else printf("wrote %s\n", g_json_path.c_str());
}

static void die(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "bench: FATAL: %s\n", buf);
    fflush(stderr);
    g_fatal = buf;
    print_table();
    write_json();
    exit(2);
}

#define GPU_UTIL_FAIL die
#include "gpu_util.h"

#define LAUNCH_OK()                                                                                  \
    do {                                                                                             \
        cudaError_t e_ = cudaGetLastError();                                                         \
        if (e_ != cudaSuccess) die("%s:%d: kernel launch: %s", __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)
#define BLAS_OK(x)                                                                                   \
    do {                                                                                             \
        cublasStatus_t b_ = (x);                                                                     \
        if (b_ != CUBLAS_STATUS_SUCCESS) die("%s:%d: %s: cuBLAS status %d", __FILE__, __LINE__, #x, (int)b_); \
    } while (0)

/* ------------------------------------------------------------------ device helpers */

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-amp, amp), rounded to bf16; a hash of (seed, index) */
__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, uint64_t seed, float amp) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1));
        float u = (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
        p[i] = __float2bfloat16_rn(amp * u);
    }
}

/* random e4m3 codes of magnitude below 2 (0x40): every subnormal and normal up to 1.875, no NaN */
__global__ void fill_e4m3(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1));
        p[i] = (uint8_t)((h & 0x80) | ((h >> 8) & 0x3f));
    }
}
/* the FP8 cases' dequantization scales (per tensor) */
static const float FP8_SCALES[2] = {1.0f, 0.5f}; /* an e4m3 cache's k_scale, v_scale */

#ifdef DCPATTN_TIMELINE
/* The stage timeline of the plan's launches since the last call (templates/timeline.cuh), for each
   warpgroup: SM cycles per KV tile of each stage, summed over its CTAs, printed and returned as a
   JSON array for the case's row; the records then cleared. */
static std::string print_timeline(const char *key, const dcpattn_attn_plan *plan) {
    static const char *const names[] = {DCPATTN_TIMELINE_STAGES};
    enum { STAGES = sizeof names / sizeof names[0], ROLES = DCPATTN_TIMELINE_ROLES, WORDS = DCPATTN_TIMELINE_WORDS };
    void *d = nullptr;
    size_t bytes = 0;
    std::string json;
    if (dcpattn_attn_timeline(plan, &d, &bytes)) {
        printf("       timeline: %s\n", dcpattn_last_error());
        return json;
    }
    std::vector<unsigned long long> h(bytes / 8);
    CUDA_OK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemset(d, 0, bytes));
    for (int role = 0; role < ROLES; role++) {
        /* one role's records summed over the CTAs that finished a launch, then the figures that
           both the printed line and the JSON show: per CTA and launch, and per tile */
        double sum[WORDS] = {0};
        long long ctas = 0;
        for (size_t c = 0; c < bytes / (8 * WORDS * ROLES); c++) {
            const unsigned long long *w = &h[(c * ROLES + role) * WORDS];
            if (!w[WORDS - 1]) continue;
            ctas++;
            for (int i = 0; i < WORDS; i++) sum[i] += (double)w[i];
        }
        if (!ctas || sum[1] <= 0) continue;
        const double launches = sum[WORDS - 1], cycles = sum[0] / launches, tiles = sum[1] / launches,
                     segments = sum[2] / launches;
        double per_tile[STAGES], marked = 0;
        for (int i = 0; i < STAGES; i++) per_tile[i] = sum[3 + i] / sum[1], marked += sum[3 + i];
        const double after = (sum[0] - marked) / sum[1];

        printf("       timeline %s, warpgroup %d, %lld CTAs x %.0f launches: %.0f cycles, %.1f tiles, %.1f segments "
               "a CTA and launch; cycles a tile:",
               key, role, ctas, launches / (double)ctas, cycles, tiles, segments);
        for (int i = 0; i < STAGES; i++)
            if (per_tile[i] > 0) printf(" %s %.0f", names[i], per_tile[i]);
        printf(", after the last mark %.0f\n", after);

        char buf[256];
        snprintf(buf, sizeof buf,
                 "%s{\"warpgroup\": %d, \"ctas\": %lld, \"cycles\": %.0f, \"tiles\": %.2f, \"segments\": %.2f, "
                 "\"per_tile\": {",
                 json.empty() ? "[" : ", ", role, ctas, cycles, tiles, segments);
        json += buf;
        for (int i = 0; i < STAGES; i++) {
            snprintf(buf, sizeof buf, "%s\"%s\": %.1f", i ? ", " : "", names[i], per_tile[i]);
            json += buf;
        }
        snprintf(buf, sizeof buf, "}, \"after_last_mark\": %.1f}", after);
        json += buf;
    }
    if (!json.empty()) json += "]";
    return json;
}
#endif

__global__ void fill_u32(uint32_t *p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1)) | 0x01010101u;
}

/* the o vector of every empty (non-finite lse) merge state becomes NaN: it must never be read */
__global__ void poison_empty(uint16_t *o, const float *lse, size_t nvec, int dim) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x)
        if (!isfinite(lse[i]))
            for (int d = 0; d < dim; d++) o[i * dim + d] = 0x7fc0;
}

/* The read ceiling: blocks stream tiles of THREADS*U 16-byte vectors (grid-stride over the
   tiles); every load of a tile is issued before any is used, at constant offsets from one
   address; the XOR-sum is reduced so the loads cannot be dropped. */
template <int THREADS, int U, bool STREAM>
__global__ void __launch_bounds__(THREADS) read_kernel(const uint4 *__restrict__ p, size_t n,
                                                       unsigned long long *sink) {
    const size_t tile = (size_t)THREADS * U, ntiles = n / tile;
    uint32_t acc[U];
#pragma unroll
    for (int u = 0; u < U; u++) acc[u] = 0;
    for (size_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const uint4 *b = p + t * tile + threadIdx.x;
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = STREAM ? __ldcs(b + u * THREADS) : __ldg(b + u * THREADS);
#pragma unroll
        for (int u = 0; u < U; u++) acc[u] += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (size_t i = ntiles * tile + blockIdx.x * (size_t)THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * THREADS) {
        uint4 v = STREAM ? __ldcs(p + i) : __ldg(p + i);
        acc[0] += v.x ^ v.y ^ v.z ^ v.w;
    }
    uint32_t s = 0;
#pragma unroll
    for (int u = 0; u < U; u++) s += acc[u];
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(sink, (unsigned long long)s);
}

typedef void (*read_fn)(const uint4 *, size_t, unsigned long long *);
template <int T>
static read_fn pick_read(int unroll, bool stream) {
    if (unroll == 4) return stream ? read_kernel<T, 4, true> : read_kernel<T, 4, false>;
    return stream ? read_kernel<T, 8, true> : read_kernel<T, 8, false>;
}

__global__ void empty_kernel(int *p) {
    if (p && threadIdx.x == 1024) *p = 1;
}

static void fill_dev_bf16(void *p, size_t n, uint64_t seed, float amp, cudaStream_t st = 0) {
    fill_bf16<<<1024, 256, 0, st>>>((__nv_bfloat16 *)p, n, seed, amp);
    LAUNCH_OK();
}

static double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct timing {
    double med_us, min_us, max_us;
    int reps;
};

/* warm-up runs, then `reps` back-to-back runs, each between two events; times in us */
static timing time_runs(const std::function<void()> &fn, int warm, int reps, cudaStream_t st) {
    std::vector<cudaEvent_t> ev((size_t)reps + 1);
    std::vector<double> t;
    timing r;
    for (int i = 0; i < warm; i++) fn();
    for (auto &e : ev) CUDA_OK(cudaEventCreate(&e));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaEventRecord(ev[0], st));
    for (int i = 0; i < reps; i++) {
        fn();
        CUDA_OK(cudaEventRecord(ev[(size_t)i + 1], st));
    }
    CUDA_OK(cudaEventSynchronize(ev[(size_t)reps]));
    CUDA_OK(cudaGetLastError());
    for (int i = 0; i < reps; i++) {
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, ev[(size_t)i], ev[(size_t)i + 1]));
        t.push_back(ms * 1e3);
    }
    for (auto &e : ev) cudaEventDestroy(e);
    r.med_us = median(t);
    r.min_us = *std::min_element(t.begin(), t.end());
    r.max_us = *std::max_element(t.begin(), t.end());
    r.reps = reps;
    return r;
}

/* A row's times and the rates they give (its bytes and flops set; NaN flops give NaN rates). */
static void set_times(row &r, const timing &t) {
    r.us = t.med_us;
    r.us_min = t.min_us;
    r.us_max = t.max_us;
    r.reps = t.reps;
    r.gbps = r.bytes / (t.med_us * 1e-6) * 1e-9;
    r.tflops = r.flops / (t.med_us * 1e-6) * 1e-12;
    r.pct_read = 100.0 * r.gbps / g_read_gbps;
    r.pct_gemm = 100.0 * r.tflops / g_gemm_tflops;
}

/* ------------------------------------------------------------------ ceilings */

static void measure_read_ceiling(void) {
    const size_t bytes = (size_t)4 << 30, n16 = bytes / 16;
    void *buf;
    unsigned long long *sink;
    double best = 0;
    CUDA_OK(cudaMalloc(&buf, bytes));
    CUDA_OK(cudaMalloc((void **)&sink, 8));
    fill_u32<<<4096, 256>>>((uint32_t *)buf, bytes / 4, g_seed ^ 0x5eed);
    LAUNCH_OK();
    CUDA_OK(cudaDeviceSynchronize());
    struct cfg { int threads, bps, unroll; bool stream; };
    std::vector<cfg> cfgs;
    for (int threads : {256, 512, 1024})
        for (int bps : {1, 2, 4, 8})
            if (threads * bps <= 2048)
                for (int unroll : {4, 8})
                    for (bool stream : {false, true}) cfgs.push_back({threads, bps, unroll, stream});
    for (const cfg &c : cfgs) {
        const unsigned grid = (unsigned)(g_num_sms * c.bps);
        read_fn k = c.threads == 256 ? pick_read<256>(c.unroll, c.stream)
                    : c.threads == 512 ? pick_read<512>(c.unroll, c.stream)
                                       : pick_read<1024>(c.unroll, c.stream);
        auto fn = [&]() {
            k<<<grid, c.threads>>>((const uint4 *)buf, n16, sink);
            LAUNCH_OK();
        };
        timing t = time_runs(fn, 2, 10, 0);
        double gbps = (double)bytes / (t.med_us * 1e-6) * 1e-9;
        char name[160];
        snprintf(name, sizeof name, "grid %u x %d threads, unroll %d, %s loads: %.0f GB/s", grid, c.threads,
                 c.unroll, c.stream ? "ld.cs" : "ld.nc", gbps);
        g_read_all.push_back(name);
        if (gbps > best) {
            best = gbps;
            g_read_cfg = name;
        }
    }
    {
        unsigned long long s;
        CUDA_OK(cudaMemcpy(&s, sink, 8, cudaMemcpyDeviceToHost)); /* the sum is used */
        printf("read ceiling: best of %zu configs over 4 GiB: %.0f GB/s (%s) [checksum %llx]\n", cfgs.size(), best,
               g_read_cfg.c_str(), s);
    }
    g_read_gbps = best;
    CUDA_OK(cudaFree(buf));
    CUDA_OK(cudaFree(sink));
}

static void measure_gemm_ceiling(void) {
    const int n = 8192;
    const size_t elems = (size_t)n * n;
    void *a, *b, *c, *ws;
    const size_t ws_bytes = (size_t)32 << 20;
    cublasHandle_t h;
    float alpha = 1.0f, beta = 0.0f;
    CUDA_OK(cudaMalloc(&a, elems * 2));
    CUDA_OK(cudaMalloc(&b, elems * 2));
    CUDA_OK(cudaMalloc(&c, elems * 2));
    CUDA_OK(cudaMalloc(&ws, ws_bytes));
    fill_dev_bf16(a, elems, g_seed ^ 0xa, 1.0f);
    fill_dev_bf16(b, elems, g_seed ^ 0xb, 1.0f);
    CUDA_OK(cudaDeviceSynchronize());
    BLAS_OK(cublasCreate(&h));
    BLAS_OK(cublasSetStream(h, 0));
    BLAS_OK(cublasSetWorkspace(h, ws, ws_bytes));
    auto fn = [&]() {
        BLAS_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta,
                             c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    timing t = time_runs(fn, 3, 15, 0);
    g_gemm_us = t.med_us;
    g_gemm_tflops = 2.0 * n * (double)n * n / (t.med_us * 1e-6) * 1e-12;
    printf("GEMM ceiling: cublasGemmEx bf16 %dx%dx%d, fp32 accumulate: %.1f us, %.1f TFLOP/s\n", n, n, n, t.med_us,
           g_gemm_tflops);
    BLAS_OK(cublasDestroy(h));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
    CUDA_OK(cudaFree(c));
    CUDA_OK(cudaFree(ws));
}

/* ------------------------------------------------------------------ attention cases */

struct attn_case {
    const char *id;
    int order;
    int mla;
    int B, Hq, Hkv, Dqk, Dv, S, page, W, r, I;
    std::vector<int> qlens;
    int S_rest; /* > 0: sequences 1 .. B-1 hold this many local keys, sequence 0 holds S (a skewed batch) */
    int splits; /* the plan's num_splits (0: the default, the balanced schedule) */
    std::vector<int> glens; /* non-empty: the global length of each sequence (S: at least the longest local) */
    const char *twin;       /* a skewed case: the even case of the same total keys */
    int fp8;                /* an e4m3 cache (FP8_SCALES; MLA: V's bytes are K's) */
};

/* local keys of sequence b */
static int seq_S(const attn_case *c, int b) {
    if (!c->glens.empty()) return (int)ref_local_len(c->glens[(size_t)b], c->W, c->r, c->I);
    return b > 0 && c->S_rest > 0 ? c->S_rest : c->S;
}

/* The plan descriptor of a case at one query length (max_total_q 0: batch * q_len). */
static dcpattn_attn_desc case_desc(const attn_case *c, int q_len, int total_q) {
    dcpattn_attn_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = DCPATTN_BF16;
    d.num_q_heads = c->Hq;
    d.num_kv_heads = c->Hkv;
    d.head_dim = c->Dqk;
    d.head_dim_v = c->Dv;
    d.page_size = c->page;
    d.softmax_scale = (float)(1.0 / sqrt((double)c->Dqk));
    d.dcp_world = c->W;
    d.dcp_rank = c->r;
    d.dcp_interleave = c->I;
    d.max_batch = c->B;
    d.max_q_len = q_len;
    d.max_total_q = total_q;
    d.max_seqlen_k = c->S;
    if (c->fp8) d.kv_dtype = DCPATTN_FP8_E4M3;
    return d;
}

/* the smallest global length L with local_len_r(L) == S: this rank then holds the newest
   token, so the query rows of one sequence see different numbers of local keys */
static int64_t pick_L(int64_t S, int W, int r, int I) {
    int64_t lo = 0, hi = S * W + (int64_t)W * I; /* local_len is non-decreasing in L */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ref_local_len(mid, W, r, I) >= S) hi = mid;
        else lo = mid + 1;
    }
    if (ref_local_len(lo, W, r, I) != S) die("no global length gives local length %lld", (long long)S);
    return lo;
}

/* one CPU reference job: sequence `vs` of the validated ones, query heads [h0, h0+nh) */
struct ref_job {
    const attn_case *c;
    int q_len, vs, h0, nh, lowp;
    int non_causal; /* self-test only: a wrong mask */
    int64_t L;
    int used; /* local keys */
    const uint16_t *q;    /* host q of the whole batch */
    int q_row0;           /* first row of the sequence */
    const uint16_t *k, *v; /* compact host pages of the sequence */
    const int32_t *bt;    /* identity block table */
    int npages;
    std::vector<double> out, lse;
    int rc;
    std::string err;
};

struct job_pool {
    std::vector<ref_job> *jobs;
    size_t next;
    pthread_mutex_t mu;
};

static int g_hnd = 0;          /* --hnd: GQA pages head-major */

/* The elements of a cache page of rows of d elements (either layout below). */
static int64_t page_elems(const attn_case *c, int d) { return (int64_t)c->page * c->Hkv * d; }
/* The strides (elements) of a cache of rows of d elements: pages token-major, [page][slot][head][d]
   (vLLM's layout), or with --hnd a GQA cache head-major, [page][head][slot][d] (each head's rows of
   a page contiguous). MLA's V is read from the K rows: its strides are K's (d = Dqk). */
static void cache_strides(const attn_case *c, int d, int64_t *page, int64_t *t, int64_t *h) {
    *page = page_elems(c, d);
    *t = g_hnd && !c->mla ? d : (int64_t)c->Hkv * d;
    *h = g_hnd && !c->mla ? (int64_t)c->page * d : d;
}

static void run_ref_job(ref_job &j) {
    const attn_case *c = j.c;
    const int group = c->Hq / c->Hkv;
    ref_attn_params p;
    ref_attn_inputs in;
    int32_t cu[2] = {0, j.q_len}, used = j.used, glob = (int32_t)j.L;
    memset(&p, 0, sizeof p);
    p.hq = j.nh;
    p.hkv = c->mla ? 1 : j.nh / group;
    p.dqk = c->Dqk;
    p.dv = c->Dv;
    p.page_size = c->page;
    p.causal = !j.non_causal;
    p.scale = 1.0 / sqrt((double)c->Dqk);
    p.world = c->W;
    p.rank = c->r;
    p.interleave = c->I;
    p.dtype = REF_BF16;
    p.emulate_lowp = j.lowp;
    if (c->fp8) {
        p.kv_dtype = REF_E4M3;
        p.k_scale = FP8_SCALES;
        p.v_scale = FP8_SCALES + 1;
    }
    memset(&in, 0, sizeof in);
    in.batch = 1;
    in.q = j.q + (int64_t)j.q_row0 * c->Hq * c->Dqk + (int64_t)j.h0 * c->Dqk;
    in.q_stride_t = (int64_t)c->Hq * c->Dqk;
    in.q_stride_h = c->Dqk;
    cache_strides(c, c->Dqk, &in.k_stride_page, &in.k_stride_t, &in.k_stride_h);
    cache_strides(c, c->mla ? c->Dqk : c->Dv, &in.v_stride_page, &in.v_stride_t, &in.v_stride_h);
    in.k_cache = j.k + (c->mla ? 0 : (int64_t)(j.h0 / group) * in.k_stride_h);
    in.v_cache = c->mla ? j.k : j.v + (int64_t)(j.h0 / group) * in.v_stride_h;
    in.num_pages = j.npages;
    in.block_table = j.bt;
    in.block_table_stride = j.npages;
    in.cu_seqlens_q = cu;
    in.seqused_k = &used;
    in.seqused_k_global = &glob;
    j.out.assign((size_t)j.q_len * j.nh * c->Dv, 0.0);
    j.lse.assign((size_t)j.q_len * j.nh, 0.0);
    j.rc = ref_attn(&p, &in, j.out.data(), j.lse.data());
    if (j.rc) j.err = ref_error();
}

static void *pool_worker(void *arg) {
    job_pool *pl = (job_pool *)arg;
    for (;;) {
        size_t i;
        pthread_mutex_lock(&pl->mu);
        i = pl->next++;
        pthread_mutex_unlock(&pl->mu);
        if (i >= pl->jobs->size()) return NULL;
        run_ref_job((*pl->jobs)[i]);
    }
}

static void run_jobs(std::vector<ref_job> &jobs) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = (int)std::min<long>(std::max<long>(ncpu, 1), (long)jobs.size());
    std::vector<pthread_t> th((size_t)nt);
    job_pool pl;
    pl.jobs = &jobs;
    pl.next = 0;
    pthread_mutex_init(&pl.mu, NULL);
    for (int i = 0; i < nt; i++)
        if (pthread_create(&th[(size_t)i], NULL, pool_worker, &pl)) die("pthread_create failed");
    for (int i = 0; i < nt; i++) pthread_join(th[(size_t)i], NULL);
    pthread_mutex_destroy(&pl.mu);
    for (auto &j : jobs)
        if (j.rc) die("CPU reference failed: %s", j.err.c_str());
}

/* Tolerance (docs/contract.md 10): error <= 2 x that of the same math in bf16 (ref emulate_lowp)
   + a floor; NaN never passes. */
static const double OUT_ABS_FLOOR = 1e-3, OUT_REL_FLOOR = 1e-3, LSE_ABS_FLOOR = 1e-4, LSE_REL_FLOOR = 1e-5;
/* GQA with an e4m3 cache: the wgmma tile computes S on e4m3 tensor cores, whose accumulation
   keeps about 14 significant bits (templates/gqa.cuh, scores_issue_e4m3): the LSE floors are 10x
   (both: at an LSE of about 10 the relative floor alone held the old absolute one, and G1F q_len 8
   failed on an unchanged kernel with max_abs 3.8e-4, rel_fro 1.01e-5). */
static const double LSE_ABS_FLOOR_FP8 = 1e-3, LSE_REL_FLOOR_FP8 = 1e-4;

/* checks a device result (host copies) against the jobs' references (pairs exact, lowp) */
static bool check_attn(const attn_case *c, std::vector<ref_job> &jobs, const uint16_t *h_out, const float *h_lse,
                       std::string *err_out, std::string *err_lse) {
    bool ok = true, fail_o = false, fail_l = false;
    double worst_o = -1, worst_l = -1;
    for (size_t i = 0; i + 1 < jobs.size(); i += 2) {
        ref_job &ex = jobs[i], &lp = jobs[i + 1];
        const int64_t n = (int64_t)ex.q_len * ex.nh * c->Dv;
        const uint16_t *go = h_out + (int64_t)ex.q_row0 * c->Hq * c->Dv + (int64_t)ex.h0 * c->Dv;
        const float *gl = h_lse + (int64_t)ex.q_row0 * c->Hq + ex.h0;
        ref_err eo = ref_compare3(ex.out.data(), go, REF_BF16, ex.q_len, ex.nh, c->Dv, (int64_t)c->Hq * c->Dv, c->Dv);
        ref_err el = ref_compare3(ex.lse.data(), gl, REF_FP32, ex.q_len, ex.nh, 1, c->Hq, 1);
        ref_err bo = ref_compare(ex.out.data(), lp.out.data(), REF_F64, n);
        ref_err bl = ref_compare(ex.lse.data(), lp.lse.data(), REF_F64, (int64_t)ex.q_len * ex.nh);
        bool po = ref_err_within(&eo, &bo, OUT_ABS_FLOOR, OUT_REL_FLOOR);
        const bool fp8_gqa = c->fp8 && !c->mla; /* (the floors are per case: its q_len 4-8 rows take the wgmma tile) */
        bool pl = ref_err_within(&el, &bl, fp8_gqa ? LSE_ABS_FLOOR_FP8 : LSE_ABS_FLOOR,
                                 fp8_gqa ? LSE_REL_FLOOR_FP8 : LSE_REL_FLOOR);
        char b[700];
        /* report the first failure, else the worst passing job */
        if (!fail_o && (!po || eo.rel_fro > worst_o)) {
            snprintf(b, sizeof b, "%sseq %d heads %d..%d: %s (bf16-math baseline rel %.3g max %.3g)",
                     po ? "worst: " : "FAIL ", ex.vs, ex.h0, ex.h0 + ex.nh - 1, ref_err_str(&eo), bo.rel_fro,
                     bo.max_abs);
            *err_out = b;
            worst_o = eo.rel_fro;
            fail_o = !po;
        }
        if (!fail_l && (!pl || el.max_abs > worst_l)) {
            snprintf(b, sizeof b, "%sseq %d heads %d..%d: %s", pl ? "worst: " : "FAIL ", ex.vs, ex.h0,
                     ex.h0 + ex.nh - 1, ref_err_str(&el));
            *err_lse = b;
            worst_l = el.max_abs;
            fail_l = !pl;
        }
        if (!po || !pl) ok = false;
    }
    return ok;
}

static int g_iters = 30;
static int g_plan_q_len = 0;   /* --plan-q-len: plan for at least this many query tokens */
static int g_force_splits = 0; /* --splits: force the num_splits policy (0: each case's own) */
static int g_plan_sms = 0;     /* --num-sms: the plans' num_sms (0: the device's) */
static int g_only_q = 0;       /* --q: only this q_len of each case (0: all; for profilers) */
static int g_l2_pages = 0;     /* --l2: the batch's pages all among the first N of the shuffle (0: all distinct) */

static void attn_case_run(dcpattn_context *ctx, const attn_case *c, cudaStream_t st) {
    const int64_t L = pick_L(c->S, c->W, c->r, c->I), L_rest = c->S_rest > 0 ? pick_L(c->S_rest, c->W, c->r, c->I) : L;
    /* a batch that starts with a short sequence and ends with the longest: the two validated */
    const int group = c->Hq / c->Hkv, ppseq = (c->S + c->page - 1) / c->page, extra = 64;
    const int64_t num_pages = (int64_t)c->B * ppseq + extra, bt_stride = ppseq + 1;
    const int64_t k_page = page_elems(c, c->Dqk), v_page = page_elems(c, c->Dv); /* the caches' page strides */
    const int nval = c->B > 1 ? 2 : 1;
    const int vseq[2] = {0, c->B - 1};
    void *d_k = NULL, *d_v = NULL;
    const int kvb = c->fp8 ? 1 : 2; /* bytes per cache element */
    float *d_scales = NULL;
    int32_t *d_bt, *d_used, *d_glob;
    std::vector<int32_t> bt((size_t)(c->B * bt_stride)), perm((size_t)num_pages);
    std::vector<int32_t> used((size_t)c->B, c->S), glob((size_t)c->B, (int32_t)L), ident((size_t)ppseq);
    double keys = 0; /* local keys of the whole batch */
    for (int b = 0; b < c->B; b++) {
        used[(size_t)b] = seq_S(c, b);
        glob[(size_t)b] = (int32_t)(!c->glens.empty() ? c->glens[(size_t)b] : b > 0 ? L_rest : L);
        keys += used[(size_t)b];
    }
    std::vector<uint16_t> vk[2], vv[2];
    uint64_t rng = g_seed ^ (uint64_t)c->order * 0x1234567ull;
    printf("\n== %s: %s B=%d Hq=%d Hkv=%d Dqk=%d Dv=%d local S=%d (global L=%lld) page %d W=%d r=%d I=%d, "
           "KV %.2f GiB\n",
           c->id, c->mla ? "MLA" : "GQA", c->B, c->Hq, c->Hkv, c->Dqk, c->Dv, c->S, (long long)L, c->page, c->W, c->r,
           c->I, keys * c->Hkv * (c->Dqk + (c->mla ? 0 : c->Dv)) * kvb / (1 << 30));
    if (c->S_rest > 0)
        printf("   skewed: sequence 0 holds %d local keys, sequences 1..%d %d each; num_splits %d\n", c->S, c->B - 1,
               c->S_rest, c->splits);
    fflush(stdout);
    /* MLA: find out first whether the kernel exists (no allocation for nothing) */
    if (c->mla) {
        dcpattn_attn_desc d;
        dcpattn_attn_plan *plan;
        dcpattn_status s;
        d = case_desc(c, c->qlens[0], 0);
        s = dcpattn_attn_plan_create(ctx, &d, &plan);
        if (s) {
            std::string note = std::string("MLA: not available (") + dcpattn_status_string(s) + ": " +
                               dcpattn_last_error() + ")";
            printf("%s\n", note.c_str());
            for (int q : c->qlens) {
                row r{};
                r.key = std::string(c->id) + "/q" + std::to_string(q);
                r.caseid = c->id;
                r.order = c->order;
                r.q_len = q;
                r.status = "n/a";
                r.note = note;
                r.us = r.us_min = r.us_max = r.gbps = r.tflops = r.pct_read = r.pct_gemm = NAN;
                r.bytes = r.flops = NAN;
                r.deterministic = -1;
                r.peer_flex_us = r.peer_sdpa_us = r.peer_eager_us = NAN;
                g_rows.push_back(r);
            }
            return;
        }
        dcpattn_attn_plan_destroy(plan);
    }
    /* the paged cache: pages in a random order, random values, NaN in the unused pages */
    for (int64_t i = 0; i < num_pages; i++) perm[(size_t)i] = (int32_t)i;
    for (int64_t i = num_pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(ref_rand_u64(&rng) % (uint64_t)(i + 1));
        std::swap(perm[(size_t)i], perm[(size_t)j]);
    }
    for (int b = 0; b < c->B; b++) {
        for (int p = 0; p < ppseq; p++) {
            const int64_t j = (int64_t)b * ppseq + p;
            bt[(size_t)(b * bt_stride + p)] = perm[(size_t)(g_l2_pages > 0 ? j % g_l2_pages : j)];
        }
        bt[(size_t)(b * bt_stride + ppseq)] = perm[(size_t)(c->B * ppseq + b % extra)]; /* unused column: a NaN page */
    }
    for (int p = 0; p < ppseq; p++) ident[(size_t)p] = p;
    auto new_cache = [&](size_t n, uint64_t seed) { /* n random bf16 or e4m3 values */
        void *p;
        CUDA_OK(cudaMalloc(&p, n * kvb));
        if (c->fp8) {
            fill_e4m3<<<1024, 256>>>((uint8_t *)p, n, seed);
            LAUNCH_OK();
        } else {
            fill_dev_bf16(p, n, seed, 1.0f);
        }
        return p;
    };
    d_k = new_cache((size_t)(num_pages * k_page), rng ^ 0x6b);
    d_v = c->mla ? d_k : new_cache((size_t)(num_pages * v_page), rng ^ 0x76);
    if (c->fp8) {
        d_scales = (float *)gpu_upload(FP8_SCALES, sizeof FP8_SCALES);
    }
    for (int e = 0; e < extra; e++) { /* 0xff: NaN in bf16 and in e4m3 */
        int32_t pg = perm[(size_t)(c->B * ppseq + e)];
        CUDA_OK(cudaMemset((char *)d_k + (size_t)(pg * k_page) * kvb, 0xff, (size_t)k_page * kvb));
        if (!c->mla) CUDA_OK(cudaMemset((char *)d_v + (size_t)(pg * v_page) * kvb, 0xff, (size_t)v_page * kvb));
    }
    d_bt = (int32_t *)gpu_upload(bt.data(), bt.size() * 4);
    d_used = (int32_t *)gpu_upload(used.data(), (size_t)c->B * 4);
    d_glob = (int32_t *)gpu_upload(glob.data(), (size_t)c->B * 4);
    CUDA_OK(cudaDeviceSynchronize());
    /* host copies of the validated sequences' pages (what the GPU really holds) */
    for (int v = 0; v < nval; v++) {
        vk[v].resize((size_t)(ppseq * k_page));
        if (!c->mla) vv[v].resize((size_t)(ppseq * v_page));
        for (int p = 0; p < ppseq; p++) {
            int32_t pg = bt[(size_t)(vseq[v] * bt_stride + p)];
            if (c->fp8) { /* ref.h: one e4m3 byte per uint16_t */
                std::vector<uint8_t> kb((size_t)k_page);
                CUDA_OK(cudaMemcpy(kb.data(), (char *)d_k + (size_t)(pg * k_page), (size_t)k_page, cudaMemcpyDeviceToHost));
                std::copy(kb.begin(), kb.end(), vk[v].begin() + p * k_page);
                if (c->mla) continue; /* V is read from the K rows */
                std::vector<uint8_t> vb((size_t)v_page);
                CUDA_OK(cudaMemcpy(vb.data(), (char *)d_v + (size_t)(pg * v_page), (size_t)v_page, cudaMemcpyDeviceToHost));
                std::copy(vb.begin(), vb.end(), vv[v].begin() + p * v_page);
                continue;
            }
            CUDA_OK(cudaMemcpy(vk[v].data() + p * k_page, (char *)d_k + (size_t)(pg * k_page) * 2,
                               (size_t)k_page * 2, cudaMemcpyDeviceToHost));
            if (!c->mla)
                CUDA_OK(cudaMemcpy(vv[v].data() + p * v_page, (char *)d_v + (size_t)(pg * v_page) * 2,
                                   (size_t)v_page * 2, cudaMemcpyDeviceToHost));
        }
    }
    for (int q_len : c->qlens) {
        if (g_only_q && q_len != g_only_q) continue;
        const int total_q = c->B * q_len;
        const int64_t q_elems = (int64_t)total_q * c->Hq * c->Dqk, o_elems = (int64_t)total_q * c->Hq * c->Dv,
                      l_elems = (int64_t)total_q * c->Hq;
        dcpattn_attn_desc d;
        dcpattn_attn_plan *plan = NULL;
        dcpattn_attn_args a;
        dcpattn_status s;
        std::vector<uint16_t> hq((size_t)q_elems), hout((size_t)o_elems), hout2((size_t)o_elems);
        std::vector<float> hlse((size_t)l_elems), hlse2((size_t)l_elems);
        std::vector<int32_t> cu((size_t)c->B + 1);
        void *d_q, *d_out, *ws = NULL;
        float *d_lse;
        int32_t *d_cu;
        size_t ws_bytes;
        row r{};
        r.key = std::string(c->id) + "/q" + std::to_string(q_len);
        r.caseid = c->id;
        r.order = c->order;
        r.q_len = q_len;
        r.us = r.us_min = r.us_max = r.gbps = r.tflops = r.pct_read = r.pct_gemm = NAN;
        r.deterministic = -1;
        r.peer_flex_us = r.peer_sdpa_us = r.peer_eager_us = NAN;
        d = case_desc(c, q_len, total_q);
        if (g_plan_q_len > d.max_q_len) d.max_q_len = g_plan_q_len; /* experiment: a larger M tile */
        if (c->splits) d.num_splits = c->splits;
        if (g_force_splits) d.num_splits = g_force_splits;
        d.num_sms = g_plan_sms;
        s = dcpattn_attn_plan_create(ctx, &d, &plan);
        if (s) {
            std::string note = std::string("plan: ") + dcpattn_status_string(s) + ": " + dcpattn_last_error();
            printf("%-6s FAIL  %s\n", r.key.c_str(), note.c_str());
            r.status = c->mla && s == DCPATTN_STATUS_UNSUPPORTED ? "n/a" : "FAIL";
            if (r.status == "FAIL") g_failures++;
            r.note = note;
            g_rows.push_back(r);
            continue;
        }
        r.variant = dcpattn_attn_variant(plan);
        r.splits = dcpattn_attn_num_splits(plan);
        ws_bytes = dcpattn_attn_workspace_size(plan);
        /* inputs */
        ref_fill_uniform(hq.data(), q_elems, REF_BF16, 4.0, &rng); /* scores of std ~1.3: a peaked softmax */
        for (int b = 0; b <= c->B; b++) cu[(size_t)b] = b * q_len;
        d_q = gpu_upload(hq.data(), (size_t)q_elems * 2);
        d_cu = (int32_t *)gpu_upload(cu.data(), cu.size() * 4);
        d_out = gpu_poisoned((size_t)o_elems * 2, 0xff); /* poison: NaN */
        d_lse = (float *)gpu_poisoned((size_t)l_elems * 4, 0xff);
        if (ws_bytes) ws = gpu_poisoned(ws_bytes, 0xff);
        CUDA_OK(cudaDeviceSynchronize()); /* the legacy-stream memsets before the run on st */
        memset(&a, 0, sizeof a);
        a.batch = c->B;
        a.q = d_q;
        a.k_cache = d_k;
        a.v_cache = d_v;
        cache_strides(c, c->Dqk, &a.k_stride_page, &a.k_stride_t, &a.k_stride_h);
        cache_strides(c, c->mla ? c->Dqk : c->Dv, &a.v_stride_page, &a.v_stride_t, &a.v_stride_h);
        a.num_pages = num_pages;
        a.block_table = d_bt;
        a.block_table_stride = bt_stride;
        a.cu_seqlens_q = d_cu;
        a.seqused_k = d_used;
        a.seqused_k_global = d_glob;
        a.out = d_out;
        a.lse = d_lse;
        if (c->fp8) {
            a.k_scale = d_scales;
            a.v_scale = d_scales + 1;
        }
        /* run once, check */
        s = dcpattn_attn_run(plan, &a, ws, ws_bytes, st);
        if (s) die("%s: attn_run: %s: %s", r.key.c_str(), dcpattn_status_string(s), dcpattn_last_error());
        CUDA_OK(cudaStreamSynchronize(st));
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaMemcpy(hout.data(), d_out, (size_t)o_elems * 2, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(hlse.data(), d_lse, (size_t)l_elems * 4, cudaMemcpyDeviceToHost));
        std::vector<ref_job> jobs;
        {
            const int nh = c->mla ? std::min(16, c->Hq) : group;
            for (int v = 0; v < nval; v++)
                for (int h0 = 0; h0 < c->Hq; h0 += nh)
                    for (int lowp = 0; lowp < 2; lowp++) {
                        ref_job j;
                        j.c = c;
                        j.q_len = q_len;
                        j.vs = vseq[v];
                        j.h0 = h0;
                        j.nh = std::min(nh, c->Hq - h0);
                        j.lowp = lowp;
                        j.L = glob[(size_t)vseq[v]];
                        j.used = used[(size_t)vseq[v]];
                        j.q = hq.data();
                        j.q_row0 = vseq[v] * q_len;
                        j.k = vk[v].data();
                        j.v = c->mla ? vk[v].data() : vv[v].data();
                        j.bt = ident.data();
                        j.npages = ppseq;
                        j.rc = 0;
                        j.non_causal = 0;
                        jobs.push_back(j);
                    }
        }
        {
            double t0 = now_s();
            run_jobs(jobs);
            bool ok = check_attn(c, jobs, hout.data(), hlse.data(), &r.err_out, &r.err_lse);
            char sched[64] = "";
            if (dcpattn_attn_workers(plan))
                snprintf(sched, sizeof sched, " (balanced schedule, %d workers per row tile)", dcpattn_attn_workers(plan));
            else if (r.splits > 1)
                snprintf(sched, sizeof sched, "%s", ws_bytes ? " (merge kernel)" : " (merged in clusters)");
            printf("%-6s %s  %s, %d splits%s; sequences %d and %d, all heads, vs CPU reference (%.1f s)\n"
                   "       out: %s\n       lse: %s\n",
                   r.key.c_str(), ok ? "PASS" : "FAIL", r.variant.c_str(), r.splits, sched, vseq[0], vseq[nval - 1],
                   now_s() - t0, r.err_out.c_str(), r.err_lse.c_str());
            r.status = ok ? "PASS" : "FAIL";
            if (!ok) {
                g_failures++;
                r.note = "validation failed: not timed";
            }
        }
        if (r.status == "PASS") {
            auto fn = [&]() {
                dcpattn_status s2 = dcpattn_attn_run(plan, &a, ws, ws_bytes, st);
                if (s2) die("%s: attn_run: %s: %s", r.key.c_str(), dcpattn_status_string(s2), dcpattn_last_error());
            };
            timing t = time_runs(fn, 3, g_iters, st);
            const double kv = keys * c->Hkv * (c->Dqk + (c->mla ? 0 : c->Dv)) * kvb;
            /* split partials through the workspace (none when they are merged inside clusters) */
            const double part = r.splits > 1 && ws_bytes ? 2.0 * r.splits * (double)l_elems * (c->Dv + 1) * 4 : 0;
            r.bytes = kv + (double)q_elems * 2 + (double)o_elems * 2 + (double)l_elems * 4 + part;
            /* (l_elems / B query rows per sequence) */
            r.flops = (c->mla ? 2.0 * (double)(c->Dqk + c->Dv) : 4.0 * (double)c->Dqk) * ((double)l_elems / c->B) * keys;
            set_times(r, t);
            /* the output after all timed runs must be the same bits (a moving result is a race) */
            CUDA_OK(cudaMemcpy(hout2.data(), d_out, (size_t)o_elems * 2, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(hlse2.data(), d_lse, (size_t)l_elems * 4, cudaMemcpyDeviceToHost));
            r.deterministic = memcmp(hout.data(), hout2.data(), (size_t)o_elems * 2) == 0 &&
                              memcmp(hlse.data(), hlse2.data(), (size_t)l_elems * 4) == 0;
            if (!r.deterministic) {
                std::string eo, el;
                bool ok2 = check_attn(c, jobs, hout2.data(), hlse2.data(), &eo, &el);
                printf("       WARNING: the output changed across runs (race?); re-check %s\n", ok2 ? "passes" : "FAILS");
                if (!ok2) {
                    g_failures++;
                    r.status = "FAIL";
                    r.note = "output after timing fails validation: " + eo + " / " + el;
                }
            }
            printf("       %.1f us (min %.1f, max %.1f, %d runs), %.0f GB/s = %.1f%% of read ceiling, "
                   "%.1f TFLOP/s = %.1f%% of GEMM\n",
                   r.us, r.us_min, r.us_max, r.reps, r.gbps, r.pct_read, r.tflops, r.pct_gemm);
#ifdef DCPATTN_TIMELINE
            r.timeline = print_timeline(r.key.c_str(), plan);
#endif
        }
        fflush(stdout);
        g_rows.push_back(r);
        CUDA_OK(cudaFree(d_q));
        CUDA_OK(cudaFree(d_out));
        CUDA_OK(cudaFree(d_lse));
        CUDA_OK(cudaFree(d_cu));
        if (ws) CUDA_OK(cudaFree(ws));
        dcpattn_attn_plan_destroy(plan);
    }
    CUDA_OK(cudaFree(d_k));
    if (!c->mla) CUDA_OK(cudaFree(d_v));
    CUDA_OK(cudaFree(d_bt));
    CUDA_OK(cudaFree(d_used));
    CUDA_OK(cudaFree(d_glob));
    if (d_scales) CUDA_OK(cudaFree(d_scales));
}

/* ------------------------------------------------------------------ sparse MLA cases */

/* B sequences of global length L, q_len query tokens each, Hq heads, top-k ids per token (all
   valid and distinct, as an indexer's top-k of the L keys), the 656-byte FP8 cache or bf16, on
   rank 0 of W with interleave I, pages of 64. Validated on the first and last sequence against
   the CPU reference, then timed. FLOPs: 2 * Hq * (576 + 512) per kept id (the formula
   2 * Hq * q_len * topk * 1088 per sequence when every id is kept, W = 1); bytes: the gathered
   rows (once per block of 64 heads), q, out and lse. */
/* the sparse cases' caches: rows of 576 bf16, DeepSeek's 656-byte FP8 rows, 576 e4m3 bytes with
   per-tensor scales (FP8_SCALES) */
enum { SPARSE_BF16, SPARSE_FP8DS, SPARSE_E4M3 };

struct sparse_case {
    const char *id;
    int order, B, hq, q_len, topk, cache, W, I, L;
};

static void sparse_case_run(dcpattn_context *ctx, const sparse_case *c, cudaStream_t st) {
    const int DQK = 576, DV = 512, PS = 64, B = c->B, T = c->B * c->q_len;
    const int64_t local = ref_local_len(c->L, c->W, 0, c->I), pages = (local + PS - 1) / PS;
    const bool ds = c->cache == SPARSE_FP8DS, e4m3 = c->cache == SPARSE_E4M3;
    const int64_t row_el = ds ? REF_FP8DS_ROW : DQK, esz = c->cache == SPARSE_BF16 ? 2 : 1;
    const int64_t cache_bytes = (int64_t)B * pages * PS * row_el * esz;
    uint64_t rng = g_seed ^ (uint64_t)c->order * 0x51ab5eull;
    std::vector<uint8_t> cache((size_t)cache_bytes);
    std::vector<int32_t> bt((size_t)(B * pages)), cu((size_t)B + 1), used((size_t)B, (int32_t)local),
        glob((size_t)B, c->L), ids((size_t)T * c->topk), perm((size_t)c->L);
    std::vector<uint16_t> q((size_t)T * c->hq * DQK), hout((size_t)T * c->hq * DV), hout2(hout.size());
    std::vector<float> hlse((size_t)T * c->hq);
    int64_t kept = 0;
    row r{};
    r.key = c->id;
    r.caseid = c->id;
    r.order = c->order;
    r.q_len = c->q_len;
    r.splits = 1;
    r.us = r.us_min = r.us_max = r.gbps = r.tflops = r.pct_read = r.pct_gemm = NAN;
    r.flops = NAN;
    r.deterministic = -1;
    r.peer_flex_us = r.peer_sdpa_us = r.peer_eager_us = NAN;
    printf("\n== %s: sparse MLA B=%d Hq=%d q_len=%d topk=%d %s cache, L=%d, W=%d r=0 I=%d, page %d\n", c->id, B, c->hq,
           c->q_len, c->topk, ds ? "FP8 656-byte" : e4m3 ? "e4m3 576-byte" : "bf16", c->L, c->W, c->I, PS);
    /* the cache: random rows (FP8: e4m3 bytes without NaN, scales 2^-9..2^-7, bf16 RoPE; e4m3:
       576 bytes without NaN) */
    for (int64_t n = 0; n < B * pages * PS; n++) {
        uint8_t *row8 = cache.data() + n * row_el * esz;
        if (e4m3) {
            for (int d = 0; d < DQK; d++) {
                uint8_t x = (uint8_t)ref_rand_u64(&rng);
                row8[d] = (x & 0x7f) == 0x7f ? (uint8_t)(x ^ 1) : x;
            }
        } else if (ds) {
            for (int d = 0; d < 512; d++) {
                uint8_t x = (uint8_t)ref_rand_u64(&rng);
                row8[d] = (x & 0x7f) == 0x7f ? (uint8_t)(x ^ 1) : x;
            }
            for (int k = 0; k < 4; k++) {
                const float sc = ldexpf(1.0f, -7 - (int)(ref_rand_u64(&rng) % 3)); /* values up to 448 / 128 */
                memcpy(row8 + 512 + 4 * k, &sc, 4);
            }
            ref_fill_uniform((uint16_t *)(row8 + 528), 64, REF_BF16, 1.0, &rng);
        } else {
            ref_fill_uniform((uint16_t *)row8, DQK, REF_BF16, 1.0, &rng);
        }
    }
    for (int64_t i = 0; i < B * pages; i++) bt[(size_t)i] = (int32_t)i;
    for (int b = 0; b <= B; b++) cu[(size_t)b] = b * c->q_len;
    for (int t = 0; t < T; t++) { /* a distinct top-k of the L positions (partial Fisher-Yates) */
        for (int g = 0; g < c->L; g++) perm[(size_t)g] = g;
        for (int j = 0; j < c->topk; j++) {
            const int k = j + (int)(ref_rand_u64(&rng) % (uint64_t)(c->L - j));
            std::swap(perm[(size_t)j], perm[(size_t)k]);
            ids[(size_t)t * c->topk + j] = perm[(size_t)j];
            kept += ref_owner(perm[(size_t)j], c->W, c->I) == 0;
        }
    }
    ref_fill_uniform(q.data(), (int64_t)q.size(), REF_BF16, 3.0, &rng);

    void *d_k = gpu_upload(cache.data(), (size_t)cache_bytes), *d_q = gpu_upload(q.data(), q.size() * 2);
    int32_t *d_bt = (int32_t *)gpu_upload(bt.data(), bt.size() * 4), *d_cu = (int32_t *)gpu_upload(cu.data(), cu.size() * 4);
    int32_t *d_used = (int32_t *)gpu_upload(used.data(), used.size() * 4);
    int32_t *d_glob = (int32_t *)gpu_upload(glob.data(), glob.size() * 4), *d_ids = (int32_t *)gpu_upload(ids.data(), ids.size() * 4);
    void *d_out = gpu_poisoned(hout.size() * 2, 0xff);
    float *d_lse = (float *)gpu_poisoned(hlse.size() * 4, 0xff);
    dcpattn_attn_desc d;
    dcpattn_attn_args a;
    dcpattn_attn_plan *plan;
    memset(&d, 0, sizeof d);
    d.kv_dtype = ds ? DCPATTN_FP8_DS_MLA : e4m3 ? DCPATTN_FP8_E4M3 : DCPATTN_DTYPE_DEFAULT;
    d.num_q_heads = c->hq;
    d.num_kv_heads = 1;
    d.head_dim = DQK;
    d.head_dim_v = DV;
    d.page_size = PS;
    d.dcp_world = c->W;
    d.dcp_interleave = c->I;
    d.max_batch = B;
    d.max_q_len = c->q_len;
    d.max_seqlen_k = (int)(pages * PS);
    d.sparse_topk = c->topk;
    DC_OK(dcpattn_attn_plan_create(ctx, &d, &plan));
    r.variant = dcpattn_attn_variant(plan);
    memset(&a, 0, sizeof a);
    a.batch = B;
    a.q = d_q;
    a.k_cache = a.v_cache = d_k;
    a.num_pages = B * pages;
    a.block_table = d_bt;
    a.block_table_stride = pages;
    a.cu_seqlens_q = d_cu;
    a.seqused_k = d_used;
    a.seqused_k_global = d_glob;
    a.out = d_out;
    a.lse = d_lse;
    a.topk_ids = d_ids;
    float *d_scales = e4m3 ? (float *)gpu_upload(FP8_SCALES, sizeof FP8_SCALES) : nullptr;
    a.k_scale = d_scales;
    a.v_scale = d_scales ? d_scales + 1 : nullptr;
    const size_t ws = dcpattn_attn_workspace_size(plan);  // (sm_90a FP8: the CTAs' kept rows)
    void *d_ws = nullptr;
    if (ws) CUDA_OK(cudaMalloc(&d_ws, ws));
    auto fn = [&]() {
        dcpattn_status s2 = dcpattn_attn_run(plan, &a, d_ws, ws, st);
        if (s2) die("%s: attn_run: %s: %s", c->id, dcpattn_status_string(s2), dcpattn_last_error());
    };
    fn();
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaGetLastError());
    gpu_download(hout.data(), d_out, hout.size() * 2);
    gpu_download(hlse.data(), d_lse, hlse.size() * 4);
    { /* the reference on the first and the last sequence */
        bool ok = true;
        std::string eo_s, el_s;
        for (int b : {0, B - 1}) {
            const int64_t n_o = (int64_t)c->q_len * c->hq * DV, n_l = (int64_t)c->q_len * c->hq;
            std::vector<double> ro((size_t)n_o), rl((size_t)n_l), bo((size_t)n_o), bl((size_t)n_l);
            const int32_t cu1[2] = {0, c->q_len};
            ref_attn_params p;
            ref_sparse_inputs in;
            memset(&p, 0, sizeof p);
            p.hq = c->hq;
            p.hkv = 1;
            p.dqk = DQK;
            p.dv = DV;
            p.page_size = PS;
            p.world = c->W;
            p.interleave = c->I;
            p.dtype = REF_BF16;
            memset(&in, 0, sizeof in);
            in.batch = 1;
            in.q = q.data() + (size_t)b * c->q_len * c->hq * DQK;
            in.cache = cache.data();
            in.cache_type = ds ? REF_FP8DS : e4m3 ? REF_E4M3 : 0;
            p.k_scale = FP8_SCALES;
            p.v_scale = FP8_SCALES + 1;
            in.num_pages = B * pages;
            in.block_table = bt.data() + (size_t)b * pages;
            in.block_table_stride = pages;
            in.cu_seqlens_q = cu1;
            in.seqused_k = used.data() + b;
            in.seqused_k_global = glob.data() + b;
            in.ids = ids.data() + (size_t)b * c->q_len * c->topk;
            in.topk = c->topk;
            if (ref_sparse_attn(&p, &in, ro.data(), rl.data()) != 0) die("%s: reference: %s", c->id, ref_error());
            p.emulate_lowp = 1;
            if (ref_sparse_attn(&p, &in, bo.data(), bl.data()) != 0) die("%s: reference: %s", c->id, ref_error());
            ref_err eo = ref_compare(ro.data(), hout.data() + (size_t)b * n_o, REF_BF16, n_o);
            ref_err bb = ref_compare(ro.data(), bo.data(), REF_F64, n_o);
            ref_err el = ref_compare(rl.data(), hlse.data() + (size_t)b * n_l, REF_FP32, n_l);
            ref_err bbl = ref_compare(rl.data(), bl.data(), REF_F64, n_l);
            // lse: the rule of tests/test_gpu_sparse.c (2x the baseline's error, in which each
            // dequantized FP8 value is rounded to bf16, plus 2e-3 / 1e-4)
            ok = ok && ref_err_within(&eo, &bb, OUT_ABS_FLOOR, OUT_REL_FLOOR) && ref_err_within(&el, &bbl, 2e-3, 1e-4);
            eo_s = ref_err_str(&eo);
            el_s = ref_err_str(&el);
        }
        r.err_out = eo_s;
        r.err_lse = el_s;
        r.status = ok ? "PASS" : "FAIL";
        printf("%-6s %s  vs CPU reference (sequences 0 and %d)\n       out: %s\n       lse: %s\n", c->id,
               ok ? "PASS" : "FAIL", B - 1, eo_s.c_str(), el_s.c_str());
        if (!ok) {
            g_failures++;
            r.note = "validation failed: not timed";
        }
    }
    if (r.status == "PASS") {
        timing t = time_runs(fn, 3, g_iters, st);
        r.bytes = (double)kept * (double)(row_el * esz) * (double)((c->hq + 63) / 64) + (double)q.size() * 2 +
                  (double)hout.size() * 2 + (double)hlse.size() * 4 + (double)ids.size() * 4;
        r.flops = 2.0 * c->hq * (double)(DQK + DV) * (double)kept;
        set_times(r, t);
        gpu_download(hout2.data(), d_out, hout2.size() * 2);
        r.deterministic = memcmp(hout.data(), hout2.data(), hout.size() * 2) == 0;
        if (!r.deterministic) printf("       WARNING: the output changed across runs (race?)\n");
        printf("       %.1f us (min %.1f, max %.1f, %d runs), kept %.1f%% of the ids, %.0f GB/s = %.1f%% of read "
               "ceiling, %.1f TFLOP/s = %.1f%% of GEMM\n",
               r.us, r.us_min, r.us_max, r.reps, 100.0 * (double)kept / (double)ids.size(), r.gbps, r.pct_read,
               r.tflops, r.pct_gemm);
#ifdef DCPATTN_TIMELINE
        r.timeline = print_timeline(c->id, plan);
#endif
    }
    fflush(stdout);
    g_rows.push_back(r);
    dcpattn_attn_plan_destroy(plan);
    for (void *pp : {d_k, d_q, (void *)d_bt, (void *)d_cu, (void *)d_used, (void *)d_glob, (void *)d_ids, d_out,
                     (void *)d_lse, d_ws, (void *)d_scales})
        CUDA_OK(cudaFree(pp));
}

/* ------------------------------------------------------------------ merge cases */

struct merge_case {
    const char *id;
    int order, W, T, H, Dv;
};

static void merge_case_run(dcpattn_context *ctx, const merge_case *c, cudaStream_t st) {
    const int64_t per = (int64_t)c->T * c->H * c->Dv, lper = (int64_t)c->T * c->H;
    uint64_t rng = g_seed ^ (uint64_t)c->order * 0x9876543ull;
    std::vector<uint16_t> ho((size_t)(per * c->W)), hout((size_t)per);
    std::vector<float> hl((size_t)(lper * c->W)), hlo((size_t)lper);
    std::vector<double> ro((size_t)per), rl((size_t)lper);
    void *d_o, *d_out;
    float *d_l, *d_lo;
    gpu_merge g;
    row r{};
    r.key = c->id;
    r.caseid = c->id;
    r.order = c->order;
    r.q_len = 0;
    r.variant = "merge_bf16_bf16";
    r.splits = c->W;
    r.us = r.us_min = r.us_max = r.gbps = r.tflops = r.pct_read = r.pct_gemm = NAN;
    r.flops = NAN;
    r.deterministic = -1;
    r.peer_flex_us = r.peer_sdpa_us = r.peer_eager_us = NAN;
    printf("\n== %s: merge W=%d T=%d H=%d Dv=%d, bf16 partials, fp32 LSE, bf16 out\n", c->id, c->W, c->T, c->H, c->Dv);
    for (int64_t i = 0; i < lper * c->W; i++) {
        double u = ref_rand_uniform(&rng);
        hl[(size_t)i] = (i % 61 == 7) ? -INFINITY : (float)(4.0 * u); /* a few empty states */
    }
    CUDA_OK(cudaMalloc(&d_o, (size_t)(per * c->W) * 2));
    fill_dev_bf16(d_o, (size_t)(per * c->W), rng ^ 0x0e, 1.0f);
    d_l = (float *)gpu_upload(hl.data(), (size_t)(lper * c->W) * 4);
    poison_empty<<<1024, 256>>>((uint16_t *)d_o, d_l, (size_t)(lper * c->W), c->Dv);
    LAUNCH_OK();
    CUDA_OK(cudaDeviceSynchronize());
    gpu_download(ho.data(), d_o, (size_t)(per * c->W) * 2);
    d_out = gpu_poisoned((size_t)per * 2, 0xff);
    d_lo = (float *)gpu_poisoned((size_t)lper * 4, 0xff);
    CUDA_OK(cudaDeviceSynchronize());
    gpu_merge_init(&g, c->W, c->T, c->H, c->Dv, DCPATTN_BF16, DCPATTN_BF16, per, d_o, d_l, ho.data(), hl.data());
    g.m.out = d_out;
    g.m.lse_out = d_lo;
    DC_OK(dcpattn_merge(ctx, &g.m, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaGetLastError());
    gpu_download(hout.data(), d_out, (size_t)per * 2);
    gpu_download(hlo.data(), d_lo, (size_t)lper * 4);
    ref_merge(&g.rm, ro.data(), rl.data());
    {
        ref_err eo = ref_compare(ro.data(), hout.data(), REF_BF16, per);
        ref_err el = ref_compare(rl.data(), hlo.data(), REF_FP32, lper);
        bool ok = ref_err_ok(&eo, 1e-2, 8e-3) && ref_err_ok(&el, 1e-4, 1e-5);
        r.err_out = ref_err_str(&eo);
        r.err_lse = ref_err_str(&el);
        r.status = ok ? "PASS" : "FAIL";
        printf("%-6s %s  vs CPU reference (all rows)\n       out: %s\n       lse: %s\n", r.key.c_str(),
               ok ? "PASS" : "FAIL", r.err_out.c_str(), r.err_lse.c_str());
        if (!ok) {
            g_failures++;
            r.note = "validation failed: not timed";
        }
    }
    if (r.status == "PASS") {
        auto fn = [&]() { DC_OK(dcpattn_merge(ctx, &g.m, st)); };
        timing t = time_runs(fn, 3, g_iters, st);
        r.bytes = (double)c->W * (per * 2.0 + lper * 4.0) + per * 2.0 + lper * 4.0;
        set_times(r, t);
        std::vector<uint16_t> h2((size_t)per);
        CUDA_OK(cudaMemcpy(h2.data(), d_out, (size_t)per * 2, cudaMemcpyDeviceToHost));
        r.deterministic = memcmp(h2.data(), hout.data(), (size_t)per * 2) == 0;
        if (!r.deterministic) printf("       WARNING: merge output changed across runs\n");
        printf("       %.1f us (min %.1f, max %.1f, %d runs), %.0f GB/s = %.1f%% of read ceiling\n", r.us, r.us_min,
               r.us_max, r.reps, r.gbps, r.pct_read);
    }
    fflush(stdout);
    g_rows.push_back(r);
    CUDA_OK(cudaFree(d_o));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_l));
    CUDA_OK(cudaFree(d_lo));
}

/* ------------------------------------------------------------------ host cost */

/* host seconds per call of fn, in batches so the GPU queue never fills (sync between) */
static double host_cost_us(const std::function<void()> &fn, cudaStream_t st, int batches, int per_batch) {
    double host = 0;
    for (int i = 0; i < 3; i++) fn();
    CUDA_OK(cudaStreamSynchronize(st));
    std::vector<double> per;
    for (int b = 0; b < batches; b++) {
        double t0 = now_s();
        for (int i = 0; i < per_batch; i++) fn();
        double t1 = now_s();
        per.push_back((t1 - t0) / per_batch);
        host += t1 - t0;
        CUDA_OK(cudaStreamSynchronize(st));
    }
    (void)host;
    return median(per) * 1e6;
}

static void host_cost_run(dcpattn_context *ctx, cudaStream_t st) {
    /* a tiny case: one sequence, G1's heads, 1024 local tokens, q_len 1, W = 1 */
    const attn_case tiny = {"HOST", 0, 0, 1, 64, 8, 128, 128, 1024, 16, 1, 0, 1, {1}};
    const int B = tiny.B, Hq = tiny.Hq, Hkv = tiny.Hkv, D = tiny.Dqk, S = tiny.S, page = tiny.page, npg = S / page;
    dcpattn_attn_desc d = case_desc(&tiny, 1, 0);
    dcpattn_attn_plan *plans[2];
    dcpattn_attn_args a;
    void *d_k, *d_v, *d_q, *d_out, *ws[2] = {NULL, NULL};
    float *d_lse;
    int32_t *d_bt, *d_cu, *d_used;
    std::vector<int32_t> bt((size_t)npg), cu = {0, 1}, used = {S};
    size_t wsb[2];
    printf("\n== host cost: tiny case B=1 Hq=64 Hkv=8 D=128 S=1024 page 16 q_len 1 W=1\n");
    for (int i = 0; i < npg; i++) bt[(size_t)i] = npg - 1 - i;
    CUDA_OK(cudaMalloc(&d_k, (size_t)S * Hkv * D * 2));
    CUDA_OK(cudaMalloc(&d_v, (size_t)S * Hkv * D * 2));
    CUDA_OK(cudaMalloc(&d_q, (size_t)Hq * D * 2));
    CUDA_OK(cudaMalloc(&d_out, (size_t)Hq * D * 2));
    CUDA_OK(cudaMalloc((void **)&d_lse, (size_t)Hq * 4));
    fill_dev_bf16(d_k, (size_t)S * Hkv * D, g_seed ^ 1, 1.0f);
    fill_dev_bf16(d_v, (size_t)S * Hkv * D, g_seed ^ 2, 1.0f);
    fill_dev_bf16(d_q, (size_t)Hq * D, g_seed ^ 3, 1.0f);
    d_bt = (int32_t *)gpu_upload(bt.data(), (size_t)npg * 4);
    d_cu = (int32_t *)gpu_upload(cu.data(), 8);
    d_used = (int32_t *)gpu_upload(used.data(), 4);
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 2; i++) {
        d.num_splits = i == 0 ? 0 : 1; /* 0: the heuristic; 1: one launch */
        DC_OK(dcpattn_attn_plan_create(ctx, &d, &plans[i]));
        wsb[i] = dcpattn_attn_workspace_size(plans[i]);
        if (wsb[i]) CUDA_OK(cudaMalloc(&ws[i], wsb[i]));
    }
    g_host_splits = dcpattn_attn_num_splits(plans[0]);
    memset(&a, 0, sizeof a);
    a.batch = B;
    a.q = d_q;
    a.k_cache = d_k;
    a.v_cache = d_v;
    a.num_pages = npg;
    a.block_table = d_bt;
    a.cu_seqlens_q = d_cu;
    a.seqused_k = d_used;
    a.out = d_out;
    a.lse = d_lse;
    double host[2], eager[2], replay[2];
    for (int i = 0; i < 2; i++) {
        auto fn = [&]() {
            dcpattn_status s = dcpattn_attn_run(plans[i], &a, ws[i], wsb[i], st);
            if (s) die("host cost: attn_run: %s: %s", dcpattn_status_string(s), dcpattn_last_error());
        };
        host[i] = host_cost_us(fn, st, 20, 100);
        /* GPU time per run, back to back: 200 eager runs, then 200 replays of a graph of one run */
        cudaEvent_t e0, e1;
        float ms;
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        CUDA_OK(cudaEventRecord(e0, st));
        for (int k = 0; k < 200; k++) fn();
        CUDA_OK(cudaEventRecord(e1, st));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        eager[i] = ms * 1e3 / 200;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        {
            dcpattn_status s = dcpattn_attn_run(plans[i], &a, ws[i], wsb[i], st);
            if (s) {
                cudaGraph_t junk;
                cudaStreamEndCapture(st, &junk);
                die("host cost: attn_run in capture: %s: %s", dcpattn_status_string(s), dcpattn_last_error());
            }
        }
        CUDA_OK(cudaStreamEndCapture(st, &g));
        CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
        for (int k = 0; k < 5; k++) CUDA_OK(cudaGraphLaunch(ge, st));
        CUDA_OK(cudaStreamSynchronize(st));
        CUDA_OK(cudaEventRecord(e0, st));
        for (int k = 0; k < 200; k++) CUDA_OK(cudaGraphLaunch(ge, st));
        CUDA_OK(cudaEventRecord(e1, st));
        CUDA_OK(cudaEventSynchronize(e1));
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        replay[i] = ms * 1e3 / 200;
        if (i == 0) {
            auto gl = [&]() { CUDA_OK(cudaGraphLaunch(ge, st)); };
            g_graph_launch_us = host_cost_us(gl, st, 20, 100);
            std::vector<double> w;
            for (int k = 0; k < 100; k++) {
                double t0 = now_s();
                CUDA_OK(cudaGraphLaunch(ge, st));
                CUDA_OK(cudaStreamSynchronize(st));
                w.push_back((now_s() - t0) * 1e6);
            }
            g_graph_single_us = median(w);
        }
        CUDA_OK(cudaGraphExecDestroy(ge));
        CUDA_OK(cudaGraphDestroy(g));
        CUDA_OK(cudaEventDestroy(e0));
        CUDA_OK(cudaEventDestroy(e1));
    }
    {
        auto ek = [&]() {
            empty_kernel<<<1, 32, 0, st>>>(NULL);
            LAUNCH_OK();
        };
        g_host_empty_us = host_cost_us(ek, st, 20, 100);
    }
    {
        /* MLA: one sequence, 16 heads, 1024 tokens in pages of 64, V = K's first 512 channels;
           its run also encodes the tensor map of the K pool (cuTensorMapEncodeTiled) */
        const attn_case mt = {"HOST-MLA", 0, 1, 1, 16, 1, 576, 512, 1024, 64, 1, 0, 1, {1}};
        const int mpg = mt.S / mt.page;
        std::vector<int32_t> mbt((size_t)mpg);
        void *d_mk, *d_mq, *d_mout;
        float *d_mlse;
        for (int i = 0; i < mpg; i++) mbt[(size_t)i] = mpg - 1 - i;
        CUDA_OK(cudaMalloc(&d_mk, (size_t)mt.S * mt.Dqk * 2));
        CUDA_OK(cudaMalloc(&d_mq, (size_t)mt.Hq * mt.Dqk * 2));
        CUDA_OK(cudaMalloc(&d_mout, (size_t)mt.Hq * mt.Dv * 2));
        CUDA_OK(cudaMalloc((void **)&d_mlse, (size_t)mt.Hq * 4));
        fill_dev_bf16(d_mk, (size_t)mt.S * mt.Dqk, g_seed ^ 4, 1.0f);
        fill_dev_bf16(d_mq, (size_t)mt.Hq * mt.Dqk, g_seed ^ 5, 1.0f);
        int32_t *d_mbt = (int32_t *)gpu_upload(mbt.data(), (size_t)mpg * 4);
        dcpattn_attn_desc md = case_desc(&mt, 1, 0);
        md.num_splits = 1;
        dcpattn_attn_plan *mp = NULL;
        if (dcpattn_attn_plan_create(ctx, &md, &mp) != DCPATTN_STATUS_SUCCESS) {
            printf("dcpattn_attn_run host cost, MLA: n/a (%s)\n", dcpattn_last_error());
            mp = NULL;
        }
        dcpattn_attn_args ma;
        memset(&ma, 0, sizeof ma);
        ma.batch = 1;
        ma.q = d_mq;
        ma.k_cache = d_mk;
        ma.v_cache = d_mk;
        ma.num_pages = mpg;
        ma.block_table = d_mbt;
        ma.cu_seqlens_q = d_cu;
        ma.seqused_k = d_used;
        ma.out = d_mout;
        ma.lse = d_mlse;
        auto mf = [&]() {
            dcpattn_status s = dcpattn_attn_run(mp, &ma, NULL, 0, st);
            if (s) die("host cost: MLA attn_run: %s: %s", dcpattn_status_string(s), dcpattn_last_error());
        };
        if (mp) {
            g_host_mla_us = host_cost_us(mf, st, 20, 100);
            printf("dcpattn_attn_run host cost, MLA (B=1 Hq=16 S=1024 page 64, tensor map encoded per call): "
                   "%.2f us/call\n", g_host_mla_us);
        }
        CUDA_OK(cudaStreamSynchronize(st));
        dcpattn_attn_plan_destroy(mp);
        CUDA_OK(cudaFree(d_mk));
        CUDA_OK(cudaFree(d_mq));
        CUDA_OK(cudaFree(d_mout));
        CUDA_OK(cudaFree(d_mlse));
        CUDA_OK(cudaFree(d_mbt));
    }
    g_host_call_us = host[0];
    g_host_call1_us = host[1];
    g_eager_us = eager[0];
    g_eager1_us = eager[1];
    g_graph_replay_us = replay[0];
    g_graph1_replay_us = replay[1];
    printf("dcpattn_attn_run host cost: %.2f us/call (%d splits: %s), %.2f us/call (1 split); "
           "empty kernel launch %.2f us\n",
           host[0], g_host_splits, wsb[0] ? "attention + merge launches" : "one launch, merged in clusters", host[1],
           g_host_empty_us);
    printf("GPU time per run, back to back: eager %.2f us, graph replay %.2f us (%d splits); eager %.2f us, "
           "graph replay %.2f us (1 split)\n",
           eager[0], replay[0], g_host_splits, eager[1], replay[1]);
    printf("cudaGraphLaunch host cost %.2f us; one replay, launch to synchronize, %.2f us\n", g_graph_launch_us,
           g_graph_single_us);
    g_host_note = "tiny case B=1 Hq=64 Hkv=8 D=128 S=1024 page 16 q_len 1; host us = median over 20 batches of 100 "
                  "calls (stream synchronized between batches)";
    for (int i = 0; i < 2; i++) {
        dcpattn_attn_plan_destroy(plans[i]);
        if (ws[i]) CUDA_OK(cudaFree(ws[i]));
    }
    CUDA_OK(cudaFree(d_k));
    CUDA_OK(cudaFree(d_v));
    CUDA_OK(cudaFree(d_q));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_lse));
    CUDA_OK(cudaFree(d_bt));
    CUDA_OK(cudaFree(d_cu));
    CUDA_OK(cudaFree(d_used));
}

/* ------------------------------------------------------------------ peers */

static bool jfield_str(const std::string &line, const char *key, std::string *out) {
    std::string pat = std::string("\"") + key + "\":\"";
    size_t p = line.find(pat);
    if (p == std::string::npos) return false;
    p += pat.size();
    size_t e = line.find('"', p);
    if (e == std::string::npos) return false;
    *out = line.substr(p, e - p);
    return true;
}
static bool jfield_num(const std::string &line, const char *key, double *out) {
    std::string pat = std::string("\"") + key + "\":";
    size_t p = line.find(pat);
    if (p == std::string::npos) return false;
    const char *s = line.c_str() + p + pat.size();
    char *end;
    double v = strtod(s, &end);
    if (end == s) return false;
    *out = v;
    return true;
}

/* the case whose data a row's kernel reads: a P or B suffix (the same case under another plan)
   shares the peers of its case */
static std::string peer_case(const std::string &id) {
    size_t n = id.size();
    if (n > 2 && (id[n - 1] == 'P' || id[n - 1] == 'B') && isdigit((unsigned char)id[n - 2])) return id.substr(0, n - 1);
    return id;
}

/* the peers of every case this run measured (bench_peers.py skips the ones it does not know) */
static void run_peers(std::string script, int budget) {
    std::string only;
    for (const row &r : g_rows) {
        std::string id = peer_case(r.caseid);
        if (("," + only + ",").find("," + id + ",") == std::string::npos) only += (only.empty() ? "" : ",") + id;
    }
    if (only.empty()) {
        g_peer_note = "peers: no case to compare";
        return;
    }
    if (access(script.c_str(), R_OK) && !access("examples/bench_peers.py", R_OK)) script = "examples/bench_peers.py";
    if (access(script.c_str(), R_OK)) {
        g_peer_note = "peers: " + script + " not found";
        printf("\n%s\n", g_peer_note.c_str());
        return;
    }
    if (system("python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)' >/dev/null 2>&1")) {
        g_peer_note = "peers: skipped (python3 cannot import torch, or torch sees no CUDA device)";
        printf("\n%s\n", g_peer_note.c_str());
        return;
    }
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "timeout %d python3 '%s' --budget %d --seed %llu --only %s", budget + 60, script.c_str(),
             budget, (unsigned long long)(g_seed & 0xffffffffu), only.c_str());
    printf("\n== peers: %s\n", cmd);
    fflush(stdout);
    double t0 = now_s();
    FILE *p = popen(cmd, "r");
    if (!p) {
        g_peer_note = "peers: popen failed";
        return;
    }
    char buf[8192];
    while (fgets(buf, sizeof buf, p)) {
        std::string line(buf);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        if (line.empty() || line[0] != '{') {
            printf("  peers| %s\n", line.c_str());
            continue;
        }
        g_peer_lines.push_back(line);
        std::string key, peer, status;
        double us = NAN;
        if (!jfield_str(line, "case", &key) || !jfield_str(line, "peer", &peer)) {
            printf("  peers| %s\n", line.c_str());
            continue;
        }
        jfield_str(line, "status", &status);
        jfield_num(line, "us", &us);
        if (status == "ok") {
            double gbps = NAN;
            jfield_num(line, "gbps", &gbps);
            std::string mask;
            jfield_str(line, "mask", &mask);
            printf("  peer %-6s %-6s %10.1f us %8.0f GB/s%s%s\n", key.c_str(), peer.c_str(), us, gbps,
                   mask.empty() ? "" : "  mask: ", mask.c_str());
            for (row &r : g_rows)
                if (peer_case(r.caseid) + r.key.substr(r.caseid.size()) == key) {
                    if (peer == "flex") r.peer_flex_us = us;
                    else if (peer == "sdpa") r.peer_sdpa_us = us;
                    else if (peer == "eager") r.peer_eager_us = us;
                    else if (peer == "flashinfer") r.peer_fi_us = us, r.peer_fi_causal = mask.rfind("causal", 0) == 0;
                    else if (peer == "flashmla") r.peer_fmla_us = us, r.peer_fmla_causal = mask.rfind("causal", 0) == 0;
                }
        } else {
            if (status == "wrong")
                for (row &r : g_rows)
                    if (peer_case(r.caseid) + r.key.substr(r.caseid.size()) == key) {
                        if (peer == "flashinfer") r.peer_fi_us = -1;
                        else if (peer == "flashmla") r.peer_fmla_us = -1;
                    }
            std::string why;
            jfield_str(line, "reason", &why);
            printf("  peer %-6s %-6s %s: %s\n", key.c_str(), peer.c_str(), status.c_str(), why.c_str());
        }
    }
    int rc = pclose(p);
    char note[200];
    snprintf(note, sizeof note, "peers: exit status %d after %.1f s", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1,
             now_s() - t0);
    g_peer_note = note;
    printf("%s\n", note);
}

/* ------------------------------------------------------------------ table */

static std::string fmt(const char *f, double v) {
    char b[64];
    if (!std::isfinite(v)) return "-";
    snprintf(b, sizeof b, f, v);
    return b;
}

static void print_table(void) {
    std::vector<row> rows = g_rows;
    std::stable_sort(rows.begin(), rows.end(), [](const row &x, const row &y) {
        return x.order != y.order ? x.order < y.order : x.q_len < y.q_len;
    });
    printf("\nceilings: HBM read %.0f GB/s (%s); bf16 GEMM %.1f TFLOP/s\n", g_read_gbps, g_read_cfg.c_str(),
           g_gemm_tflops);
    if (g_host_call_us >= 0)
        printf("host: dcpattn_attn_run %.2f us/call (%d splits), %.2f us/call (1 split), empty launch %.2f us; "
               "graph replay %.2f us GPU (%d splits), %.2f us (1 split)\n",
               g_host_call_us, g_host_splits, g_host_call1_us, g_host_empty_us, g_graph_replay_us, g_host_splits,
               g_graph1_replay_us);
    if (g_host_mla_us >= 0) printf("host: dcpattn_attn_run %.2f us/call for an MLA plan (1 split)\n", g_host_mla_us);
    printf("peer columns: peer time / dcpattn time (> 1: dcpattn faster; same bytes, so = GB/s ratio); "
           "(c): the peer ran a plain causal mask, not this row's DCP mask; wrong: its output failed the check\n\n");
    printf("%-7s %-5s %-26s %6s %10s %10s %7s %8s %7s %6s %6s %6s %10s %9s\n", "case", "check", "variant", "splits",
           "median_us", "GB/s", "%read", "TFLOP/s", "%gemm", "flex", "sdpa", "eager", "flashinfer", "flashmla");
    for (const row &r : rows) {
        if (r.status == "n/a") {
            printf("%-7s %-5s %s\n", r.key.c_str(), r.status.c_str(), r.note.c_str());
            continue;
        }
        auto paged = [&](double us, bool causal) {
            return us < 0 ? std::string("wrong") : fmt("%.2fx", us / r.us) + (causal && us > 0 ? "(c)" : "");
        };
        printf("%-7s %-5s %-26s %6d %10s %10s %7s %8s %7s %6s %6s %6s %10s %9s\n", r.key.c_str(), r.status.c_str(),
               r.variant.c_str(), r.splits, fmt("%.1f", r.us).c_str(), fmt("%.0f", r.gbps).c_str(),
               fmt("%.1f%%", r.pct_read).c_str(), fmt("%.1f", r.tflops).c_str(), fmt("%.1f%%", r.pct_gemm).c_str(),
               fmt("%.2fx", r.peer_flex_us / r.us).c_str(), fmt("%.2fx", r.peer_sdpa_us / r.us).c_str(),
               fmt("%.2fx", r.peer_eager_us / r.us).c_str(), paged(r.peer_fi_us, r.peer_fi_causal).c_str(),
               paged(r.peer_fmla_us, r.peer_fmla_causal).c_str());
    }
    /* pairs measured in this run: a skewed batch against the even batch of the same total keys
       and query rows (same bytes and FLOPs: the time ratio is the GB/s and TFLOP/s ratio), and the
       default plan (the balanced schedule) against the per-sequence split, and an FP8 cache against
       the bf16 one (ratio: the speedup) */
    bool head = false;
    for (const auto &pr : g_pairs)
        for (const row &r : rows) {
            if (r.caseid != pr.first || r.status != "PASS") continue;
            for (const row &e : rows)
                if (e.caseid == pr.second && e.q_len == r.q_len && e.status == "PASS") {
                    if (!head) printf("\n%-8s %-9s %10s %10s %8s\n", "case", "against", "us", "us (it)", "ratio");
                    head = true;
                    printf("%-8s %-9s %10.1f %10.1f %7.1f%%\n", r.key.c_str(), e.key.c_str(), r.us, e.us,
                           100.0 * e.us / r.us);
                }
        }
    fflush(stdout);
}

/* ------------------------------------------------------------------ CPU self-test */

/* Without a GPU: the validation path itself. A fake "device output" (the bf16-math reference,
   rounded to bf16) must pass; one computed without the causal mask must fail. */
static int cpu_selftest(void) {
    const attn_case c = {"T", 0, 0, 3, 8, 2, 64, 64, 256, 16, 4, 1, 2, {3}, 0, 0};
    const int64_t L = pick_L(c.S, c.W, c.r, c.I);
    const int ppseq = c.S / c.page, q_len = 3, total_q = c.B * q_len;
    const int64_t k_page = page_elems(&c, c.Dqk);
    const int vseq[2] = {0, c.B - 1};
    uint64_t rng = 42;
    std::vector<uint16_t> hq((size_t)total_q * c.Hq * c.Dqk), kv[2], vv[2];
    std::vector<int32_t> ident((size_t)ppseq);
    int fails = 0;
    for (int i = 0; i < ppseq; i++) ident[(size_t)i] = i;
    ref_fill_uniform(hq.data(), (int64_t)hq.size(), REF_BF16, 4.0, &rng);
    for (int v = 0; v < 2; v++) {
        kv[v].resize((size_t)(ppseq * k_page));
        vv[v].resize((size_t)(ppseq * k_page));
        ref_fill_uniform(kv[v].data(), (int64_t)kv[v].size(), REF_BF16, 1.0, &rng);
        ref_fill_uniform(vv[v].data(), (int64_t)vv[v].size(), REF_BF16, 1.0, &rng);
    }
    for (int wrong = 0; wrong < 2; wrong++) {
        std::vector<ref_job> jobs, fake;
        std::vector<uint16_t> hout((size_t)total_q * c.Hq * c.Dv, 0x7fc0);
        std::vector<float> hlse((size_t)total_q * c.Hq, NAN);
        for (int v = 0; v < 2; v++)
            for (int h0 = 0; h0 < c.Hq; h0 += c.Hq / c.Hkv)
                for (int lowp = 0; lowp < 2; lowp++) {
                    ref_job j;
                    j.c = &c;
                    j.q_len = q_len;
                    j.vs = vseq[v];
                    j.h0 = h0;
                    j.nh = c.Hq / c.Hkv;
                    j.lowp = lowp;
                    j.non_causal = 0;
                    j.L = L;
                    j.used = seq_S(&c, vseq[v]);
                    j.q = hq.data();
                    j.q_row0 = vseq[v] * q_len;
                    j.k = kv[v].data();
                    j.v = vv[v].data();
                    j.bt = ident.data();
                    j.npages = ppseq;
                    j.rc = 0;
                    jobs.push_back(j);
                    if (lowp) {
                        j.non_causal = wrong;
                        fake.push_back(j);
                    }
                }
        run_jobs(jobs);
        run_jobs(fake);
        for (const ref_job &f : fake)
            for (int i = 0; i < q_len; i++)
                for (int h = 0; h < f.nh; h++) {
                    int64_t t = f.q_row0 + i;
                    for (int d = 0; d < c.Dv; d++)
                        hout[(size_t)((t * c.Hq + f.h0 + h) * c.Dv + d)] =
                            ref_float_to_bf16((float)f.out[(size_t)((i * f.nh + h) * c.Dv + d)]);
                    hlse[(size_t)(t * c.Hq + f.h0 + h)] = (float)f.lse[(size_t)(i * f.nh + h)];
                }
        std::string eo, el;
        bool ok = check_attn(&c, jobs, hout.data(), hlse.data(), &eo, &el);
        printf("self-test (%s output): %s\n  out: %s\n  lse: %s\n", wrong ? "unmasked, must fail" : "bf16 math, must pass",
               ok ? "passes" : "fails", eo.c_str(), el.c_str());
        if (ok == (wrong != 0)) fails++;
    }
    printf("self-test: %s\n", fails ? "WRONG" : "ok");
    return fails ? 1 : 0;
}

/* ------------------------------------------------------------------ main */

static bool wanted(const std::string &only, const char *id) {
    if (only.empty()) return true;
    std::string s = "," + only + ",";
    return s.find(std::string(",") + id + ",") != std::string::npos;
}

int main(int argc, char **argv) {
    std::string only, script;
    int peers = 1, budget = 300; /* FlashInfer may compile its modules on a first run */
    const char *why;
    g_seed = (uint64_t)time(NULL) * 2654435761u;
#ifdef DCPATTN_DATA_DIR
    script = std::string(DCPATTN_DATA_DIR) + "/examples/bench_peers.py";
#else
    script = "examples/bench_peers.py";
#endif
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) {
                fprintf(stderr, "bench: %s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--json") g_json_path = val();
        else if (a == "--only") only = val();
        else if (a == "--iters") g_iters = std::max(20, atoi(val()));
        else if (a == "--seed") g_seed = strtoull(val(), NULL, 0);
        else if (a == "--no-peers") peers = 0;
        else if (a == "--plan-q-len") g_plan_q_len = atoi(val());
        else if (a == "--splits") g_force_splits = atoi(val());
        else if (a == "--q") g_only_q = atoi(val());
        else if (a == "--num-sms") g_plan_sms = atoi(val());
        else if (a == "--hnd") g_hnd = 1;
        else if (a == "--l2") g_l2_pages = std::max(1, atoi(val()));
        else if (a == "--peers-budget") budget = atoi(val());
        else if (a == "--peers-script") script = val();
        else if (a == "--selftest-cpu") return cpu_selftest();
        else {
            fprintf(stderr,
                    "usage: bench [--json FILE] [--only G1,G1P,G2,...,S4E] [--iters N>=20] [--seed N] "
                    "[--no-peers] [--peers-budget SECONDS] [--peers-script PATH]\n"
                    "experiments: [--plan-q-len N] (plan attention for at least N query tokens: a larger M "
                    "tile) [--splits N] (force the split count) [--q N] (only q_len N of each case) [--hnd] "
                    "(GQA pages head-major, no peers) [--l2 N] (every sequence's pages among the same N: KV "
                    "from L2, no peers)\n");
            return 2;
        }
    }
    if (g_hnd || g_l2_pages) peers = 0; /* the peers read token-major pages of their own */
    if (gpu_count(&why) == 0) {
        fprintf(stderr, "bench: no CUDA device (%s): the benchmark needs a GPU; checking the validation path "
                        "on the CPU instead\n",
                why);
        cpu_selftest();
        return 2;
    }
    gpu_use(0);
    {
        cudaDeviceProp pr;
        CUDA_OK(cudaGetDeviceProperties(&pr, 0));
        g_num_sms = pr.multiProcessorCount;
        char b[400];
        snprintf(b, sizeof b, "%s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB", pr.name, pr.major, pr.minor, g_num_sms,
                 (double)pr.totalGlobalMem / (1 << 30), pr.l2CacheSize >> 20);
        g_device = b;
    }
    printf("dcpattn %s bench on %s; seed %llu\n", dcpattn_version(), g_device.c_str(), (unsigned long long)g_seed);
    fflush(stdout);
    double t_start = now_s();
    measure_read_ceiling();
    measure_gemm_ceiling();
    fflush(stdout);

    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    cudaStream_t st;
    memset(&cd, 0, sizeof cd);
    DC_OK(dcpattn_context_create(&cd, &ctx));
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    const int PS = DCPATTN_SPLITS_PER_SEQUENCE;
    /* the standard cases under the default plan (the balanced schedule) and, suffix P, under the
       per-sequence split */
    const attn_case G1 = {"G1", 1, 0, 64, 64, 8, 128, 128, 8192, 16, 4, 1, 1, {1, 2, 4, 8}, 0, 0, {}, NULL};
    const attn_case G1P = {"G1P", 2, 0, 64, 64, 8, 128, 128, 8192, 16, 4, 1, 1, {1, 2, 4, 8}, 0, PS, {}, NULL};
    const attn_case G2 = {"G2", 3, 0, 8, 64, 8, 128, 128, 65536, 64, 8, 3, 16, {1, 2, 4, 8}, 0, 0, {}, NULL};
    const attn_case G2P = {"G2P", 4, 0, 8, 64, 8, 128, 128, 65536, 64, 8, 3, 16, {1, 2, 4, 8}, 0, PS, {}, NULL};
    /* G1 and G2 with an FP8 e4m3 cache (bytes: the e4m3 bytes read) */
    const attn_case G1F = {"G1F", 7, 0, 64, 64, 8, 128, 128, 8192, 16, 4, 1, 1, {1, 2, 4, 8}, 0, 0, {}, NULL, 1};
    const attn_case G2F = {"G2F", 8, 0, 8, 64, 8, 128, 128, 65536, 64, 8, 3, 16, {1, 2, 4, 8}, 0, 0, {}, NULL, 1};
    /* M1: W = 8, rank 0, I = 1. M2: W = 1, q_len 1 and 2 (multi-token prediction). */
    const attn_case M1 = {"M1", 10, 1, 32, 128, 1, 576, 512, 8192, 64, 8, 0, 1, {2}, 0, 0, {}, NULL};
    const attn_case M1P = {"M1P", 11, 1, 32, 128, 1, 576, 512, 8192, 64, 8, 0, 1, {2}, 0, PS, {}, NULL};
    const attn_case M2 = {"M2", 12, 1, 128, 16, 1, 576, 512, 8192, 64, 1, 0, 1, {1, 2}, 0, 0, {}, NULL};
    const attn_case M2P = {"M2P", 13, 1, 128, 16, 1, 576, 512, 8192, 64, 1, 0, 1, {1, 2}, 0, PS, {}, NULL};
    /* M1 and M2 with an FP8 e4m3 cache (bytes: the 576 e4m3 bytes of a row) */
    const attn_case M1F = {"M1F", 14, 1, 32, 128, 1, 576, 512, 8192, 64, 8, 0, 1, {2}, 0, 0, {}, NULL, 1};
    const attn_case M2F = {"M2F", 15, 1, 128, 16, 1, 576, 512, 8192, 64, 1, 0, 1, {1, 2}, 0, 0, {}, NULL, 1};
    /* skewed batches, each against the even batch of the same total keys (suffix E), default plan:
       S1 GQA (G1's heads) 1 x 65536 + 31 x 2048 local keys; S2 GQA 64 lengths from a fixed-seed
       lognormal (median 2048, max 131072, the longest first); S3 MLA 1 x 65536 + 31 x 2048 with
       M1's heads (S3P: the per-sequence split, as before the balanced default) and 1 x 65536 +
       127 x 2048 with M2's; S4 256 sequences of 1..64 global keys under W = 8 (mostly empty shards) */
    std::vector<int> s2_glens(64), s4_glens(256);
    {
        uint64_t s = 0x5eed5eedull;
        for (int b = 0; b < 64; b++) {
            double u1 = (double)((ref_rand_u64(&s) >> 11) + 1) / 9007199254740993.0;
            double u2 = (double)(ref_rand_u64(&s) >> 11) / 9007199254740992.0;
            double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            int keys = (int)std::min(131072.0, std::max(16.0, 2048.0 * exp(1.2 * z)));
            s2_glens[(size_t)b] = (int)pick_L(b == 0 ? 131072 : keys, 8, 3, 16);
        }
        for (int b = 0; b < 256; b++) s4_glens[(size_t)b] = 1 + (int)(ref_rand_u64(&s) % 64);
    }
    auto total_local = [](const std::vector<int> &g, int W, int r, int I) {
        int64_t t = 0;
        for (int x : g) t += ref_local_len(x, W, r, I);
        return t;
    };
    const int s2_even = (int)(total_local(s2_glens, 8, 3, 16) / 64);
    const int s4_even = std::max(1, (int)(total_local(s4_glens, 8, 0, 1) / 256));
    const attn_case S1 = {"S1", 20, 0, 32, 64, 8, 128, 128, 65536, 16, 4, 1, 1, {1, 4}, 2048, 0, {}, "S1E"};
    const attn_case S1E = {"S1E", 21, 0, 32, 64, 8, 128, 128, 4032, 16, 4, 1, 1, {1, 4}, 0, 0, {}, NULL};
    const attn_case S2 = {"S2", 22, 0, 64, 64, 8, 128, 128, 131072, 16, 8, 3, 16, {2}, 0, 0, s2_glens, "S2E"};
    const attn_case S2E = {"S2E", 23, 0, 64, 64, 8, 128, 128, s2_even, 16, 8, 3, 16, {2}, 0, 0, {}, NULL};
    const attn_case S3 = {"S3", 24, 1, 32, 128, 1, 576, 512, 65536, 64, 8, 0, 1, {2}, 2048, 0, {}, "S3E"};
    const attn_case S3P = {"S3P", 25, 1, 32, 128, 1, 576, 512, 65536, 64, 8, 0, 1, {2}, 2048, PS, {}, "S3E"};
    const attn_case S3E = {"S3E", 26, 1, 32, 128, 1, 576, 512, 4032, 64, 8, 0, 1, {2}, 0, 0, {}, NULL};
    const attn_case S3M = {"S3M", 27, 1, 128, 16, 1, 576, 512, 65536, 64, 1, 0, 1, {1}, 2048, 0, {}, "S3ME"};
    const attn_case S3ME = {"S3ME", 28, 1, 128, 16, 1, 576, 512, 2544, 64, 1, 0, 1, {1}, 0, 0, {}, NULL};
    const attn_case S4 = {"S4", 29, 0, 256, 64, 8, 128, 128, 64, 16, 8, 0, 1, {1}, 0, 0, s4_glens, "S4E"};
    const attn_case S4E = {"S4E", 30, 0, 256, 64, 8, 128, 128, s4_even, 16, 8, 0, 1, {1}, 0, 0, {}, NULL};
    const merge_case R1 = {"R1", 5, 8, 256, 128, 512};
    const merge_case R2 = {"R2", 6, 4, 4096, 64, 128};
    g_pairs = {{"G1", "G1P"}, {"G2", "G2P"}, {"M1", "M1P"}, {"M2", "M2P"}, {"S1", "S1E"}, {"S2", "S2E"},
               {"S3", "S3E"}, {"S3P", "S3E"}, {"S3M", "S3ME"}, {"S4", "S4E"}, {"G1F", "G1"}, {"G2F", "G2"},
               {"M1F", "M1"}, {"M2F", "M2"}};

    for (const attn_case *c : {&G1, &G1P, &G2, &G2P, &G1F, &G2F})
        if (wanted(only, c->id)) attn_case_run(ctx, c, st);
    if (wanted(only, "R1")) merge_case_run(ctx, &R1, st);
    if (wanted(only, "R2")) merge_case_run(ctx, &R2, st);
    if (wanted(only, "HOST")) host_cost_run(ctx, st);
    for (const attn_case *c : {&S1, &S1E, &S2, &S2E, &S4, &S4E})
        if (wanted(only, c->id)) attn_case_run(ctx, c, st);
    /* MLA last: a kernel under construction that faults would take the CUDA context with it */
    for (const attn_case *c : {&M1, &M1P, &M2, &M2P, &M1F, &M2F, &S3, &S3P, &S3E, &S3M, &S3ME})
        if (wanted(only, c->id)) attn_case_run(ctx, c, st);
    /* sparse MLA (top-k 2048 of 4096 keys per token, FP8 656-byte cache): SP1 compute-bound
       (Hq 128), SP2 memory-bound (Hq 16), SP3 = SP1 on rank 0 of W = 4, I = 64; SP4 = SP1 on
       an e4m3 cache of 576-byte rows with per-tensor scales */
    const sparse_case SP1 = {"SP1", 40, 128, 128, 2, 2048, SPARSE_FP8DS, 1, 1, 4096};
    const sparse_case SP2 = {"SP2", 41, 128, 16, 2, 2048, SPARSE_FP8DS, 1, 1, 4096};
    const sparse_case SP3 = {"SP3", 42, 128, 128, 2, 2048, SPARSE_FP8DS, 4, 64, 4096};
    const sparse_case SP4 = {"SP4", 43, 128, 128, 2, 2048, SPARSE_E4M3, 1, 1, 4096};
    for (const sparse_case *c : {&SP1, &SP2, &SP3, &SP4})
        if (wanted(only, c->id)) sparse_case_run(ctx, c, st);
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaStreamDestroy(st));
    dcpattn_context_destroy(ctx);
    printf("\ndcpattn part done in %.1f s\n", now_s() - t_start);

    if (peers) {
        run_peers(script, budget);
    } else {
        g_peer_note = g_hnd ? "peers: not run (--hnd: they read token-major pages)" : "peers: disabled (--no-peers)";
    }
    write_json();
    printf("total %.1f s; %d validation failure%s\n", now_s() - t_start, g_failures, g_failures == 1 ? "" : "s");
    print_table();
    return g_failures ? 1 : 0;
}
