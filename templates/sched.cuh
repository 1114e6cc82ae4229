// sched.cuh — the arithmetic of the balanced schedule: how a batch's real work is cut into
// equal ranges over a fixed number of workers (CTAs per KV head), read from the lengths on the
// device. Plain C as well as CUDA, so that the CPU tests check the very functions the kernels
// run (tests/test_sched.c: every key of every row covered exactly once).
//
// A job is one row tile of one sequence: (sequence b, row tile z), z < row_tiles(q_len_b).
// It costs units(seqused_k[b]) units: one per kv_tile keys, and the family's restart units
// (dcpattn_sched_units). The jobs, in order (b, then z), lay their units end to end: U units in
// all. Worker w takes the units [lo(w), lo(w + 1)) with lo(w) = U * w / G: equal
// shares to within one unit. The part of a job inside one worker's range is a piece; a job
// with more than one piece is cut, and its pieces are merged exactly (templates/gqa.cuh).
//
// Partial states: a worker's first piece (the one holding lo(w)) uses its slot 0, its last
// piece (holding lo(w + 1) - 1) slot 1 when that is another job. Only a worker's first and last
// piece can be cut, so two slots per worker hold every partial state of a run.
#pragma once

#if defined(__CUDACC__)
#define DCPATTN_SCHED_FN __device__ __forceinline__
#else
#define DCPATTN_SCHED_FN static inline
#endif

// Units of a job whose sequence holds `keys` local keys: one per kv_tile keys, then `restart`
// more, what starting and ending a piece costs in tiles' time (the family's choice); these come
// after the tiles and hold no keys. A job has at least one unit (a sequence without keys still
// writes its rows).
DCPATTN_SCHED_FN int dcpattn_sched_units(int keys, int kv_tile, int restart) {
    const int u = (keys + kv_tile - 1) / kv_tile + restart;
    return u > 0 ? u : 1;
}
// The restart units per job of both families' balanced schedules (templates/attn.cuh,
// templates/mla.cuh). Measured with make bench on the H200 (docs/performance.md): GQA 2 against
// 0 took S2 from 95 % to 97 % of its even twin; MLA's S3 and S3M ran best at 2 of 0, 2, 4 and 7.
enum { DCPATTN_SCHED_RESTART = 2 };
// The first key of unit x (0 <= x <= units) of a job of `keys` keys; past the tiles, `keys`.
DCPATTN_SCHED_FN int dcpattn_sched_key(long long x, int kv_tile, int keys) {
    return x * kv_tile < keys ? (int)x * kv_tile : keys;
}
// Row tiles (jobs) of a sequence of q_len query tokens, `group` rows each.
DCPATTN_SCHED_FN int dcpattn_sched_row_tiles(int q_len, int group, int m_tile) {
    return q_len > 0 ? (q_len * group + m_tile - 1) / m_tile : 0;
}
// First unit of worker w (0 <= w <= G; lo(G) = U).
DCPATTN_SCHED_FN long long dcpattn_sched_lo(long long U, int G, int w) { return U * w / G; }
// The worker that holds unit x (0 <= x < U): the largest w with lo(w) <= x.
DCPATTN_SCHED_FN int dcpattn_sched_owner(long long U, int G, long long x) {
    return (int)(((long long)G * (x + 1) + U - 1) / U - 1);
}
// Pieces of the job of units [js, je): the workers that hold one of its units. With U >= G every
// worker holds at least one unit; with fewer units each worker holds at most one.
DCPATTN_SCHED_FN int dcpattn_sched_pieces(long long U, int G, long long js, long long je) {
    return U >= G ? dcpattn_sched_owner(U, G, je - 1) - dcpattn_sched_owner(U, G, js) + 1 : (int)(je - js);
}
// Whether worker w holds no unit (only where U < G).
DCPATTN_SCHED_FN int dcpattn_sched_idle(long long U, int G, int w) {
    return dcpattn_sched_lo(U, G, w) == dcpattn_sched_lo(U, G, w + 1);
}
// The slot of the piece of job [js, je) that worker w holds (w holds one of its units).
DCPATTN_SCHED_FN int dcpattn_sched_slot(long long U, int G, int w, long long js) {
    return js > dcpattn_sched_lo(U, G, w) ? 1 : 0;
}
// The merge tree of a job cut into pieces 0 .. n whose states the pieces add up themselves
// (MLA's balanced schedule, templates/mla.cuh): a binomial tree. Piece j < n with t trailing one
// bits adds the states of pieces j - 2^k, k = 0 .. t - 1 (each the sum of the 2^k pieces ending
// there) to its own, so that it leaves the sum of the 2^t pieces ending at j; the last piece n
// adds, for each one bit k of n, the state of piece (n with bits 0..k cleared) + 2^k - 1 (the sum
// of the 2^k pieces from n with bits 0..k cleared). Every earlier state is added exactly once,
// and where the pieces end together and a read takes one unit of time, the last piece is done
// ceil(log2(n + 1)) reads after the others (tests/test_sched.c checks it; a flat sum: n reads).
// The piece that piece j (last: j = n) adds in its read k, k = 0 .. while 2^k <= j; -1: none.
DCPATTN_SCHED_FN int dcpattn_sched_tree_read(int j, int last, int k) {
    if (last) return (j >> k) & 1 ? (j & ~((2 << k) - 1)) + (1 << k) - 1 : -1;
    return ((j + 1) & ((2 << k) - 1)) == 0 ? j - (1 << k) : -1;
}
