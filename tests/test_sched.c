/* test_sched.c — the balanced schedule's partition (templates/sched.cuh, the functions the
   kernels run) on random batches: lengths with zeros and one huge sequence, query lengths
   0..16, restart units 0, 2 or 4, any worker count. Each case walks every worker's range as
   the kernel does (templates/attn.cuh, AttnSchedule) and checks that every key of every job is covered
   exactly once, that every job (one without keys too) has a piece, that the piece count and
   the slots the merging worker computes agree with what each worker used, and that no worker
   has more than its two slots of partial states. Then the merge tree of MLA's schedule
   (dcpattn_sched_tree_read) for every piece count up to 2048: every earlier piece's state
   reaches the last piece exactly once, each read is of a lower piece (a CTA waits only for
   CTAs launched before it), and when all pieces end together the last is done ceil(log2(n + 1))
   reads later.
   One CHECK per case. Build: cc -std=c99 -Itests tests/test_sched.c -o build/test_sched */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../templates/sched.cuh"
#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

typedef struct {
    long long js, je; /* units */
    int b, z, keys;
    int pieces, cut_slots; /* seen by the walk */
    int slot_of[600];      /* per worker: the slot it used for this job (-1: none) */
} job;

#define MAXB 320
#define MAXJOBS (MAXB * 16)

static job jobs[MAXJOBS];
static unsigned char *cover; /* per job, per key: how many pieces covered it */
static long long cover_at[MAXJOBS];

static int one_case(int B, const int *keys, const int *qlen, int group, int m_tile, int kv_tile, int restart, int G,
                    char *why, size_t nwhy) {
    int nj = 0, b, z, w, j;
    long long U = 0, ncover = 0;
    int slots_used[600][2];
    for (b = 0; b < B; b++) {
        const int rt = dcpattn_sched_row_tiles(qlen[b], group, m_tile), u = dcpattn_sched_units(keys[b], kv_tile, restart);
        for (z = 0; z < rt; z++) {
            job *J = &jobs[nj++];
            J->js = U;
            J->je = U + u;
            J->b = b;
            J->z = z;
            J->keys = keys[b];
            J->pieces = 0;
            for (w = 0; w < G; w++) J->slot_of[w] = -1;
            cover_at[nj - 1] = ncover;
            ncover += keys[b];
            U += u;
        }
    }
    cover = (unsigned char *)calloc((size_t)ncover + 1, 1);
    memset(slots_used, 0, sizeof slots_used);
    for (w = 0; w < G; w++) {
        const long long lo = dcpattn_sched_lo(U, G, w), hi = dcpattn_sched_lo(U, G, w + 1);
        int first = 1;
        if (lo >= hi) {
            if (!dcpattn_sched_idle(U, G, w)) {
                snprintf(why, nwhy, "worker %d: empty range but not idle", w);
                return 0;
            }
            continue;
        }
        /* the job holding lo (the kernel: a scan over sequences, then z = (lo - s) / u) */
        for (j = 0; j < nj && !(jobs[j].js <= lo && lo < jobs[j].je); j++) {}
        for (;; j++) {
            job *J = &jobs[j];
            const long long a = J->js > lo ? J->js : lo, e = J->je < hi ? J->je : hi;
            const int k0 = dcpattn_sched_key(a - J->js, kv_tile, J->keys);
            const int k1 = dcpattn_sched_key(e - J->js, kv_tile, J->keys);
            int k;
            const int cut = J->js < lo || J->je > hi;
            for (k = k0; k < k1; k++) cover[cover_at[j] + k]++;
            J->pieces++;
            if (cut) {
                const int s = dcpattn_sched_slot(U, G, w, J->js);
                if ((s == 0) != first || slots_used[w][s]++) {
                    snprintf(why, nwhy, "worker %d: slot %d for job %d (first piece %d)", w, s, j, first);
                    return 0;
                }
                J->slot_of[w] = s;
            }
            first = 0;
            if (J->je >= hi) break;
        }
    }
    for (j = 0; j < nj; j++) {
        job *J = &jobs[j];
        long long k;
        const int want = dcpattn_sched_pieces(U, G, J->js, J->je);
        if (J->pieces != want || J->pieces < 1) {
            snprintf(why, nwhy, "job %d (b %d z %d, units %lld..%lld of %lld, G %d): %d pieces, formula %d", j, J->b,
                     J->z, J->js, J->je, U, G, J->pieces, want);
            return 0;
        }
        for (k = 0; k < J->keys; k++)
            if (cover[cover_at[j] + k] != 1) {
                snprintf(why, nwhy, "job %d key %lld covered %d times", j, k, cover[cover_at[j] + k]);
                return 0;
            }
        if (J->pieces > 1) { /* what the merging worker computes: the same workers and slots */
            const int w0 = dcpattn_sched_owner(U, G, J->js);
            int i;
            for (i = 0; i < J->pieces; i++) {
                /* (as templates/attn.cuh, finish_cut, lists them) */
                w = U >= G ? w0 + i : dcpattn_sched_owner(U, G, J->js + i);
                if (dcpattn_sched_idle(U, G, w) || J->slot_of[w] != dcpattn_sched_slot(U, G, w, J->js)) {
                    snprintf(why, nwhy, "job %d piece %d: worker %d used slot %d, the merge reads %d", j, i, w,
                             J->slot_of[w], dcpattn_sched_slot(U, G, w, J->js));
                    return 0;
                }
            }
        }
    }
    free(cover);
    return 1;
}

/* The tree of pieces 0 .. n: fills why and returns 0 on the first fault. */
static int tree_case(int n, char *why, size_t nwhy) {
    static int readers[4096], ready[4096], cover[4096];
    int j, k, i, t = 0, want = 0;
    for (j = 0; j <= n; j++) readers[j] = cover[j] = 0;
    for (j = 0; j <= n; j++) { /* in order: a piece reads only lower ones, whose time is known */
        const int last = j == n;
        int tj = 0;
        for (k = 0; (1 << k) <= j; k++) {
            const int c = dcpattn_sched_tree_read(j, last, k);
            if (c < 0) continue;
            if (c >= j) {
                snprintf(why, nwhy, "piece %d (last %d) reads piece %d", j, last, c);
                return 0;
            }
            readers[c]++;
            tj = (tj > ready[c] ? tj : ready[c]) + 1;
        }
        ready[j] = tj;
    }
    for (j = 0; j < n; j++)
        if (readers[j] != 1) {
            snprintf(why, nwhy, "piece %d's state read %d times", j, readers[j]);
            return 0;
        }
    { /* the sum the last piece ends with: the pieces under its reads, walked down the tree */
        int stack[4096], top = 0;
        stack[top++] = n;
        while (top > 0) {
            const int x = stack[--top];
            cover[x]++;
            for (k = 0; (1 << k) <= x; k++) {
                const int c = dcpattn_sched_tree_read(x, x == n, k);
                if (c >= 0) stack[top++] = c;
            }
        }
    }
    for (i = 0; i <= n; i++)
        if (cover[i] != 1) {
            snprintf(why, nwhy, "piece %d added %d times into the last", i, cover[i]);
            return 0;
        }
    t = ready[n];
    while ((1 << want) < n + 1) want++;
    if (t != want) {
        snprintf(why, nwhy, "the last piece is done %d reads after the others, want %d", t, want);
        return 0;
    }
    return 1;
}

int main(void) {
    static int keys[MAXB], qlen[MAXB];
    static const int kv_tiles[] = {64, 32, 16};
    static const int m_tiles[] = {16, 64};
    int c;
    for (c = 0; c < 1500; c++) {
        const int B = (int)(rnd() % MAXB);
        const int kv_tile = kv_tiles[rnd() % 3], m_tile = m_tiles[rnd() % 2], restart = (int)(rnd() % 3) * 2;
        const int group = 1 << (rnd() % 5), kind = (int)(rnd() % 4);
        const int G = 1 + (int)(rnd() % 599);
        char why[256] = "";
        int b;
        for (b = 0; b < B; b++) {
            /* kind 0: short and mostly empty; 1: lognormal-ish; 2: one huge among short; 3: all even */
            keys[b] = kind == 0 ? (int)(rnd() % 9) * (int)(rnd() % 2)
                      : kind == 1 ? (int)((rnd() % 64 + 1) << (rnd() % 11))
                      : kind == 2 ? (b == 0 ? 1 << 20 : (int)(rnd() % 300))
                                  : 2048;
            qlen[b] = c % 7 == 0 ? (int)(rnd() % 17) : 1 + (int)(rnd() % 4);
        }
        if (kind == 2 && B > 0) keys[rnd() % B] = 131072 + (int)(rnd() % 64);
        CHECK(one_case(B, keys, qlen, group, m_tile, kv_tile, restart, G, why, sizeof why),
              "case %d: B %d kv_tile %d m_tile %d group %d restart %d G %d: %s", c, B, kv_tile, m_tile, group, restart, G,
              why);
    }
    for (c = 1; c <= 2048; c++) {
        char why[256] = "";
        CHECK(tree_case(c, why, sizeof why), "merge tree of %d pieces: %s", c + 1, why);
    }
    return check_summary();
}
