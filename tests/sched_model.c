/* sched_model — a time model of MLA's balanced schedule (templates/mla.cuh, MlaSchedule), for
   weighing a schedule change before a GPU measures it. It cuts a batch exactly as the kernel does
   (templates/sched.cuh: the units, the workers' ranges, the merge tree; the run-time worker count
   of include/dcpattn.h) and runs each worker's pieces, last first, on a clock of per-piece costs
   that a timeline build measures (docs/performance.md, "Timeline"; the defaults are S3's, from
   its timeline there): a piece costs fill + tile x its KV tiles, a worker's next piece `between`
   more; a piece that publishes (its sequence goes on in the next worker's range) first adds the
   states of its subtree, each `read` once its flag is set, then `publish`; the piece that ends a
   cut sequence adds the tree's sums the same way; a piece that ends its sequence stores its rows
   (`epilogue`). The launch ends with its last worker; the row tiles run alike, so one is modelled.

   usage: build/sched_model [--restart N] [--fill US] [--tile US] [--between US] [--epilogue US]
                            [--publish US] [--read US] [--workers N] LENGTHS
          LENGTHS: the sequences' local keys, e.g. 65536,2048x31 (x: repeated)
   --workers: the plan's (MLA: the SMs over the row tiles; 33 for M1's heads on 132 SMs), which a
   run lowers as dcpattn__run_workers does. Prints the modelled time, the worker that ends last,
   and how many pieces the most cut sequence has. S3 against its even twin S3E (the same total
   keys, whose measured epilogue was 6.5 us):
       build/sched_model 65536,2048x31;  build/sched_model --epilogue 6.5 4032x32 */
#define DCPATTN_IMPLEMENTATION /* (for dcpattn__run_workers, the run's worker count) */
#include "dcpattn.h"

#include "../templates/sched.cuh"

enum { KV_TILE = 64, MAX_B = 4096 };

/* the worker that holds piece i of the job whose units start at s (w0: the owner of unit s): the
   next worker per piece where every worker holds a unit (U >= G), else the owner of unit s + i
   (a piece per unit) */
static int worker_of(long long U, int G, int w0, long long s, int i) {
    return U >= G ? w0 + i : dcpattn_sched_owner(U, G, s + i);
}

static int parse_lengths(const char *s, int *len) {
    int n = 0;
    while (*s) {
        char *end;
        const long v = strtol(s, &end, 10);
        long rep = 1;
        if (end == s || v < 0) return -1;
        if (*end == 'x') {
            s = end + 1;
            rep = strtol(s, &end, 10);
            if (end == s || rep < 1) return -1;
        }
        for (long i = 0; i < rep; i++) {
            if (n == MAX_B) return -1;
            len[n++] = (int)v;
        }
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int main(int argc, char **argv) {
    static int len[MAX_B];
    static long long first_unit[MAX_B + 1];
    double fill = 4.8, tile = 1.80, between = 0.7, epilogue = 5.0, publish = 3.5, read = 1.1;
    int restart = DCPATTN_SCHED_RESTART, plan_workers = 33, B = -1;
    for (int i = 1; i < argc; i++) {
        double *dst = !strcmp(argv[i], "--fill")       ? &fill
                      : !strcmp(argv[i], "--tile")     ? &tile
                      : !strcmp(argv[i], "--between")  ? &between
                      : !strcmp(argv[i], "--epilogue") ? &epilogue
                      : !strcmp(argv[i], "--publish")  ? &publish
                      : !strcmp(argv[i], "--read")     ? &read
                                                       : NULL;
        if (dst && i + 1 < argc) {
            *dst = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--restart") && i + 1 < argc) {
            restart = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--workers") && i + 1 < argc) {
            plan_workers = atoi(argv[++i]);
        } else if (argv[i][0] != '-' && B < 0) {
            B = parse_lengths(argv[i], len);
        } else {
            B = -1;
            break;
        }
    }
    if (B <= 0 || plan_workers < 1 || restart < 0) {
        fprintf(stderr, "usage: sched_model [--restart N] [--fill US] [--tile US] [--between US] [--epilogue US]\n"
                        "                   [--publish US] [--read US] [--workers N] LENGTHS (e.g. 65536,2048x31)\n");
        return 2;
    }
    const int G = dcpattn__run_workers(plan_workers, B);
    for (int b = 0; b < B; b++) first_unit[b + 1] = first_unit[b] + dcpattn_sched_units(len[b], KV_TILE, restart);
    const long long U = first_unit[B];
    /* published[w]: when worker w published the state of its first-run piece (a worker publishes
       at most once: for the sequence that goes on past its range, which it runs first). A worker
       waits only for the states of lower workers, so one sweep in worker order sees every
       publication before a read of it. */
    double *published = calloc((size_t)G, sizeof *published), end_max = 0;
    int last_worker = 0, most_pieces = 1;
    for (int w = 0; w < G; w++) {
        const long long lo = dcpattn_sched_lo(U, G, w), hi = dcpattn_sched_lo(U, G, w + 1);
        double t = 0;
        int b = 0, first = 1;
        if (lo == hi) continue;
        while (first_unit[b + 1] <= hi - 1) b++; /* the sequence of the range's last unit */
        for (;; b--) {
            const long long s = first_unit[b], u = first_unit[b + 1] - s;
            const long long plo = s > lo ? s : lo, phi = s + u < hi ? s + u : hi;
            const int k0 = dcpattn_sched_key(plo - s, KV_TILE, len[b]), k1 = dcpattn_sched_key(phi - s, KV_TILE, len[b]);
            /* this piece's index j among the sequence's pieces 0 .. n */
            const int w0 = dcpattn_sched_owner(U, G, s), n = dcpattn_sched_pieces(U, G, s, s + u) - 1;
            const int j = U >= G ? w - w0 : (int)(lo - s);
            if (!first) t += between;
            first = 0;
            t += fill + tile * ((k1 - k0 + KV_TILE - 1) / KV_TILE);
            if (n > 0) { /* a cut sequence: the states this piece adds, each once its flag is set */
                if (n + 1 > most_pieces) most_pieces = n + 1;
                for (int k = 0; k < 31 && (U >= G ? (1 << k) <= j : k < j); k++) {
                    const int src = U >= G ? dcpattn_sched_tree_read(j, j == n, k) : j == n ? k : -1;
                    if (src < 0) continue;
                    const double at = published[worker_of(U, G, w0, s, src)];
                    t = (t > at ? t : at) + read;
                }
            }
            if (j < n) {
                t += publish;
                published[w] = t;
            } else {
                t += epilogue;
            }
            if (s <= lo) break;
        }
        if (t > end_max) end_max = t, last_worker = w;
    }
    printf("%d sequences, %lld units over %d workers (the plan's %d), restart units %d: %.1f us, ended by worker %d; "
           "a cut sequence has at most %d pieces\n",
           B, U, G, plan_workers, restart, end_max, last_worker, most_pieces);
    free(published);
    return 0;
}
