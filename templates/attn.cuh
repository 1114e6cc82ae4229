// attn.cuh — what the attention kernels (gqa.cuh, mla.cuh) share:
//   - the row math of a thread's two rows (lo, hi) in MMA accumulator fragments, the stages
//     where both families do the same math: mask_key / mask_scores (the causal DCP mask),
//     row_max, exp_scores and online_softmax_step (the online softmax), p_fragment (P as an
//     MMA A operand), scale_rows (O rescaled per row), and for the end of a row quad_max,
//     quad_sum, state_weight (a state's weight in a merge), sum_inv, row_lse2;
//   - which packed query rows and which keys a CTA owns (AttnCta: split-KV range, the causal
//     DCP limit of each row, docs/contract.md 3; q_chunk, where a row's Q comes from) and where
//     a finished row goes (AttnRowOut: out and lse, or the split partials o_part and lse_part);
//   - the balanced schedule on the device (AttnSchedule), whose finish_cut merges a job cut
//     between workers.
#pragma once
#include "ptx.cuh"
#include "sched.cuh"

namespace dcpattn {

// Max and sum over the four lanes of a quad (the threads holding one row of an MMA fragment).
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The row math below works on a thread's share of MMA accumulator fragments, the layout of
// mma.sync m16n8 and of a warp's 16 rows of a wgmma m64nN accumulator: x[n][e] holds column
// 8n + 2 q4 + e (q4 = lane % 4) of the thread's row lo (e = 0, 1) and of row hi = lo + 8 (e =
// 2, 3). A scalar of the kernel goes in by value and comes back as a return value, never
// through a reference (elements of the fragment arrays may): a reference to a scalar local
// changed the kernel's SASS (docs/architecture.md, "Kernel stages").

// The mask of one raw score: key column col of a row that sees the keys below lim (its causal
// DCP limit on the local shard, AttnCta::row_limit) is -inf past it.
__device__ __forceinline__ void mask_key(float &s, int col, int lim) {
    if (col >= lim) s = neg_inf();
}

// Stage "mask": the causal DCP limit on the raw scores s of a tile, whose elements x[n][e] and
// x[n][2 + e] are key col0 + 8n + e (col0 includes the thread's 2 q4); a key at or past its
// row's limit becomes -inf.
template <int N>
__device__ __forceinline__ void mask_scores(float (&s)[N][4], int col0, int lim_lo, int lim_hi) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
        const int col = col0 + n * 8;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            mask_key(s[n][e], col + e, lim_lo);
            mask_key(s[n][2 + e], col + e, lim_hi);
        }
    }
}

// A value for each of the thread's two rows.
struct RowPair {
    float lo, hi;
};

// The largest raw score of each of the thread's rows in s.
template <int N> __device__ __forceinline__ RowPair row_max(const float (&s)[N][4]) {
    float rx_lo = neg_inf(), rx_hi = neg_inf();
#pragma unroll
    for (int n = 0; n < N; ++n) {
        rx_lo = fmaxf(rx_lo, fmaxf(s[n][0], s[n][1]));
        rx_hi = fmaxf(rx_hi, fmaxf(s[n][2], s[n][3]));
    }
    return {rx_lo, rx_hi};
}

// Raw scores s become p = 2^(s * scale + nm) (nm: minus the row's max, 0 for a row with nothing
// visible, whose p are then exact zeros); returns the sum of p of each row.
template <int N>
__device__ __forceinline__ RowPair exp_scores(float (&s)[N][4], float scale, float nm_lo, float nm_hi) {
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int n = 0; n < N; ++n) {
        s[n][0] = fast_exp2(fmaf(s[n][0], scale, nm_lo));
        s[n][1] = fast_exp2(fmaf(s[n][1], scale, nm_lo));
        s[n][2] = fast_exp2(fmaf(s[n][2], scale, nm_hi));
        s[n][3] = fast_exp2(fmaf(s[n][3], scale, nm_hi));
        sum_lo += s[n][0] + s[n][1];
        sum_hi += s[n][2] + s[n][3];
    }
    return {sum_lo, sum_hi};
}

// One tile's online-softmax step of the thread's two rows (lo, hi): their running max m (log2
// units; -inf while a row has seen no visible key) and sum l after the tile, and al = 2^(m_old -
// m), the factor their O takes.
struct SoftmaxStep {
    float m_lo, m_hi, l_lo, l_hi, al_lo, al_hi;
};

// Stage "online softmax", base 2, on the raw scores s of a tile: the tile's row max joins m, s
// becomes p = 2^(s * scale - m) (scale > 0, so the raw row max is the scaled one's) and its row
// sums join l.
template <int N>
__device__ __forceinline__ SoftmaxStep online_softmax_step(float (&s)[N][4], float m_lo, float m_hi, float l_lo,
                                                           float l_hi, float scale) {
    const RowPair rx = row_max(s);
    const float mx_lo = fmaxf(m_lo, quad_max(rx.lo) * scale);
    const float mx_hi = fmaxf(m_hi, quad_max(rx.hi) * scale);
    // a row with nothing visible yet keeps max -inf; subtract 0 so exp2 gives exact 0
    const float mu_lo = mx_lo == neg_inf() ? 0.f : mx_lo;
    const float mu_hi = mx_hi == neg_inf() ? 0.f : mx_hi;
    const float al_lo = fast_exp2(m_lo - mu_lo), al_hi = fast_exp2(m_hi - mu_hi);
    const RowPair sum = exp_scores(s, scale, -mu_lo, -mu_hi);
    return {mx_lo, mx_hi, l_lo * al_lo + sum.lo, l_hi * al_hi + sum.hi, al_lo, al_hi};
}

// O (accumulator fragments of the thread's rows lo and hi) scaled per row.
template <int N> __device__ __forceinline__ void scale_rows(float (&o)[N][4], float a_lo, float a_hi) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        o[i][0] *= a_lo;
        o[i][1] *= a_lo;
        o[i][2] *= a_hi;
        o[i][3] *= a_hi;
    }
}

// P of k16 step kk (keys 16kk .. 16kk + 15 of accumulator fragments s) as the A fragment of an
// MMA: an m16n8 accumulator pair is, packed to T, an m16k16 A operand in registers.
template <class T, int N>
__device__ __forceinline__ void p_fragment(unsigned (&a)[4], const float (&s)[N][4], int kk) {
    a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// The weight of a state whose max is m in a merge whose max is mx (both log2 units): 2^(m - mx),
// and 0 for an empty state (m = -inf), also where every state is empty.
__device__ __forceinline__ float state_weight(float m, float mx) { return m == neg_inf() ? 0.f : fast_exp2(m - mx); }

// What a row's O is multiplied by at the end: 1 / l, 0 for a row that saw nothing (l = 0).
__device__ __forceinline__ float sum_inv(float l) { return l > 0.f ? 1.f / l : 0.f; }

// Base-2 LSE of a row from its max m and sum l; -inf for a row that saw nothing.
__device__ __forceinline__ float row_lse2(float m, float l) { return l > 0.f ? m + fast_log2(l) : neg_inf(); }

// An e4m3 cache with bf16 queries: the MMAs run in fp16 (e4m3 -> fp16 is exact), so the Q tile
// is multiplied into fp16 by 2^-e, with e such that its largest magnitude lies in [2^14, 2^15)
// (Q_FP16_TOP; exact down to 2^-29 of it, where bf16's 8 significant bits still fit a normal
// fp16; what lies below that adds under 2^-29 of the largest product to a score), and the
// scores by 2^e (GQA's e4m3 MMAs split Q into e4m3 the same way, gqa.cuh q_tile_to_e4m3).
// bf16_mag2: the larger magnitude (bits) of a bf16 pair (of an fp16 pair too: both order as
// their values); q_exponent: e from the tile's largest magnitude bits, for [2^top, 2^(top + 1))
// (at least -100, so that 2^e and 2^-e, exp2i, are normal floats); bf16x8_to_fp16: a 16-byte
// chunk of bf16 times `down` (2^-e) in fp16.
constexpr int Q_FP16_TOP = 14;
__device__ __forceinline__ unsigned bf16_mag2(unsigned v) { return max(v & 0x7fffu, (v >> 16) & 0x7fffu); }
template <class T> __device__ __forceinline__ int q_exponent(unsigned mx, int top) {
    T big;
    big.bits = (unsigned short)mx;
    const int ex = same_type<T, bf16> ? (int)(mx >> 7) : (int)(__float_as_uint(to_float(big)) >> 23);
    return mx ? max(ex - 127 - top, -100) : 0;  // ex: the biased exponent (bf16's is fp32's)
}
__device__ __forceinline__ float exp2i(int e) { return __int_as_float((127 + e) << 23); }
__device__ __forceinline__ void bf16x8_to_fp16(unsigned (&v)[4], float down) {
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = pack2<fp16>(lo_float(bf16{}, v[k]) * down, hi_float(bf16{}, v[k]) * down);
}

// Where query row (token tq, query head h) is written.
struct AttnRowOut {
    const dcpattn_attn_kparams &p;
    long long tq;
    int h;

    // The row's index in lse_part (in o_part: times Dv) for split `split`.
    __device__ __forceinline__ long long part(int split) const {
        return (long long)split * p.part_split_stride + tq * p.hq + h;
    }
    // The row's first element in out (an element index), and 16-bit element c of the row.
    __device__ __forceinline__ long long out_index() const { return tq * p.out_st + (long long)h * p.out_sh; }
    __device__ __forceinline__ char *out(int c) const { return static_cast<char *>(p.out) + (out_index() + c) * 2; }
    // The row's LSE (lse2: base 2, -inf for a row that saw nothing) in the base asked for; only
    // where p.lse is given.
    __device__ __forceinline__ void lse(float lse2) const {
        p.lse[tq * p.lse_st + (long long)h * p.lse_sh] = (p.lse_base2 || lse2 == neg_inf()) ? lse2 : lse2 * kLn2;
    }
};

// One CTA's work: packed rows [row0, row0 + M_TILE) of sequence b (packed row R is query token
// R / GROUP, head h0 + R % GROUP for the CTA's first head h0) against the keys of its split.
// grid.x = batch * num_splits, grid.z = packed row tiles.
template <int GROUP, int M_TILE, int KV_TILE> struct AttnCta {
    const dcpattn_attn_kparams &p;
    int split, b, row0;
    int q_begin, q_len, nrows;  // the sequence's query tokens; its packed rows
    int L, kv_begin, kv_end;    // global prefix length; this split's keys on the local shard
    int cta_hi, cta_lo, n_tiles;  // key limits of the last and first row; KV tiles to visit

    __device__ __forceinline__ explicit AttnCta(const dcpattn_attn_kparams &p_)
        : AttnCta(p_, blockIdx.x / p_.num_splits, blockIdx.x % p_.num_splits) {}
    // Sequence b_, split split_ (a kernel with its own schedule: mla.cuh's balanced one).
    __device__ __forceinline__ AttnCta(const dcpattn_attn_kparams &p_, int b_, int split_)
        : AttnCta(p_, b_, split_, blockIdx.z) {}
    // Sequence b_, split split_, row tile z (gqa.cuh's balanced schedule).
    __device__ __forceinline__ AttnCta(const dcpattn_attn_kparams &p_, int b_, int split_, int z) : p(p_) {
        split = split_;
        b = b_;
        row0 = z * M_TILE;
        q_begin = p.cu_seqlens_q[b];
        q_len = p.cu_seqlens_q[b + 1] - q_begin;
        nrows = q_len * GROUP;
    }

    // No row of this CTA exists: it has nothing to do.
    __device__ __forceinline__ bool empty() const { return row0 >= nrows; }

    // The split's keys and the CTA's key limits (only for a CTA that is not empty()).
    __device__ __forceinline__ void find_keys() {
        const int Lk = p.seqused_k[b];
        int lo = 0, hi = Lk;
        if (p.num_splits > 1) {
            int chunk = (Lk + p.num_splits - 1) / p.num_splits;
            chunk = (chunk + KV_TILE - 1) / KV_TILE * KV_TILE;
            lo = min(split * chunk, Lk);
            hi = min(lo + chunk, Lk);
        }
        set_keys(Lk, lo, hi);
    }
    // The keys [lo, hi) of the local shard (lo a multiple of KV_TILE, hi <= Lk = seqused_k[b]).
    __device__ __forceinline__ void set_keys(int Lk, int lo, int hi) {
        L = p.seqused_k_global ? p.seqused_k_global[b] : Lk;
        kv_begin = lo;
        kv_end = hi;
        cta_hi = row_limit(M_TILE - 1);  // rows are sorted by token, limits grow with the row
        cta_lo = row_limit(0);
        n_tiles = cta_hi > kv_begin ? (cta_hi - kv_begin + KV_TILE - 1) / KV_TILE : 0;
    }

    // Keys row r of the CTA may see, [kv_begin, row_limit(r)): its causal limit on the local shard.
    __device__ __forceinline__ int row_limit(int r) const {
        const int i = min(row0 + r, nrows - 1) / GROUP;
        int lim = kv_end;
        if (p.causal) lim = min(lim, local_len(max(L - q_len + i + 1, 0), p.world, p.rank, p.interleave));
        return lim;
    }

    // Byte offset in q of 16-byte chunk c of packed row R (0, a valid address, for a row past the
    // end, whose copy reads nothing).
    __device__ __forceinline__ long long q_chunk(int h0, int R, int c) const {
        return R < nrows ? ((long long)token(R) * p.q_st + (long long)head(h0, R) * p.q_sh + c * 8) * 2 : 0;
    }
    // Query token and head of packed row R.
    __device__ __forceinline__ int token(int R) const { return q_begin + R / GROUP; }
    __device__ __forceinline__ int head(int h0, int R) const { return h0 + R % GROUP; }
    __device__ __forceinline__ AttnRowOut row_out(int h0, int R) const { return {p, token(R), head(h0, R)}; }
};

// Inclusive scan of one 64-bit value per thread over the CTA (THREADS threads); `total` gets the
// sum of all. `scratch`: 32 long longs of shared memory; every thread must call.
template <int THREADS> __device__ __forceinline__ long long block_scan(long long v, long long *scratch, long long &total) {
    constexpr int WARPS = THREADS / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    auto warp_scan = [&](long long x) {
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const unsigned ylo = __shfl_up_sync(0xffffffffu, (unsigned)x, d);
            const unsigned yhi = __shfl_up_sync(0xffffffffu, (unsigned)((unsigned long long)x >> 32), d);
            if (lane >= d) x += (long long)(((unsigned long long)yhi << 32) | ylo);
        }
        return x;
    };
    const long long inc = warp_scan(v);
    if (lane == 31) scratch[warp] = inc;
    __syncthreads();
    if (warp == 0) {
        const long long t = warp_scan(lane < WARPS ? scratch[lane] : 0);
        if (lane < WARPS) scratch[lane] = t;
    }
    __syncthreads();
    const long long before = warp > 0 ? scratch[warp - 1] : 0;
    total = scratch[WARPS - 1];
    __syncthreads();  // scratch free again
    return before + inc;
}

// The balanced schedule of a KV head's plane of CTAs (grid p.workers x KV heads), on the device
// from the real lengths: the arithmetic of sched.cuh, the walk over this worker's pieces, and
// the merge of a cut job by the piece that finishes last. Workspace (DCPATTN_KERNEL_ABI): the
// pieces' partial states (two slots per worker: o_part / lse_part rows
// ((w * 2 + slot) * hkv + kvh) * M_TILE + r), then in `flags` one arrival counter per
// (sequence, row tile, KV head). A counter holds the run's token
// (low 40 bits) above a 24-bit count, so a word from another run counts as zero; the last
// arrival resets it, so a graph replay (same token) starts clean. The merge reads every piece
// in worker order from the workspace, its own too: the bits do not depend on which piece ends
// last.
template <int GROUP, int M_TILE, int KV_TILE, int THREADS> struct AttnSchedule {
    long long U, lo, hi;  // all units; this worker's [lo, hi)
    long long js;         // first unit of the current job
    int G, b, z, u, rt;   // workers; the current job (b, z); units per job and row tiles of b

    static __device__ __forceinline__ int max_row_tiles(const dcpattn_attn_kparams &p) {
        return dcpattn_sched_row_tiles(p.max_q_len, GROUP, M_TILE);
    }
    // Row tiles and units per job of sequence bb (row tiles past the plan's max_q_len are not
    // run, as in the per-sequence grid).
    __device__ __forceinline__ void seq(const dcpattn_attn_kparams &p, int bb, int &rows, int &units) const {
        rows = min(dcpattn_sched_row_tiles(ldg_i32(p.cu_seqlens_q + bb + 1) - ldg_i32(p.cu_seqlens_q + bb), GROUP,
                                           M_TILE),
                   max_row_tiles(p));
        units = dcpattn_sched_units(ldg_i32(p.seqused_k + bb), KV_TILE, DCPATTN_SCHED_RESTART);
    }
    __device__ __forceinline__ unsigned long long *counter(const dcpattn_attn_kparams &p, int kvh) const {
        return p.flags + ((long long)b * max_row_tiles(p) + z) * p.hkv + kvh;
    }

    // This worker's range and its first job; false: the range is empty. `scratch`: 40 long longs
    // of shared memory that no one else touches until init returns.
    __device__ __forceinline__ bool init(const dcpattn_attn_kparams &p, long long *scratch) {
        const int tid = threadIdx.x, B = p.batch;
        G = p.workers;
        long long mine = 0, tot;
        for (int bb = tid; bb < B; bb += THREADS) {
            int r, n;
            seq(p, bb, r, n);
            mine += (long long)r * n;
        }
        block_scan<THREADS>(mine, scratch, tot);
        const long long l0 = dcpattn_sched_lo(tot, G, blockIdx.x), h0 = dcpattn_sched_lo(tot, G, blockIdx.x + 1);
        if (l0 < h0) {  // the sequence holding unit l0, a chunk of THREADS sequences at a time
            long long base = 0;
            for (int c = 0; c < B; c += THREADS) {
                const int bb = c + tid;
                int r = 0, n = 0;
                if (bb < B) seq(p, bb, r, n);
                const long long mine_u = (long long)r * n;
                long long chunk;
                const long long at = base + block_scan<THREADS>(mine_u, scratch, chunk) - mine_u;
                if (mine_u > 0 && at <= l0 && l0 < at + mine_u) {
                    scratch[32] = bb;
                    scratch[33] = at;
                }
                base += chunk;
                if (base > l0) break;
            }
        }
        __syncthreads();
        lo = warp_uniform(l0);
        hi = warp_uniform(h0);
        U = warp_uniform(tot);
        b = warp_uniform(l0 < h0 ? (int)scratch[32] : 0);
        const long long s = warp_uniform(l0 < h0 ? scratch[33] : 0ll);
        if (lo >= hi) return false;
        seq(p, b, rt, u);
        z = (int)((lo - s) / u);
        js = s + (long long)z * u;
        return true;
    }

    // The current piece's keys into cta; the first partial row of its slot, or -1 where the job
    // is not cut (its rows go to out).
    template <class Cta> __device__ __forceinline__ long long keys(Cta &cta, int kvh) const {
        const long long a = max(js, lo), e = min(js + u, hi);
        const int Lk = ldg_i32(cta.p.seqused_k + b);
        cta.set_keys(Lk, dcpattn_sched_key(a - js, KV_TILE, Lk), dcpattn_sched_key(e - js, KV_TILE, Lk));
        if (js >= lo && js + u <= hi) return -1;
        return (((long long)blockIdx.x * 2 + dcpattn_sched_slot(U, G, blockIdx.x, js)) * cta.p.hkv + kvh) * M_TILE;
    }

    // The next job of the range; false: none is left.
    __device__ __forceinline__ bool next(const dcpattn_attn_kparams &p) {
        if (js + u >= hi) return false;
        js += u;
        if (++z < rt) return true;
        z = 0;
        do seq(p, ++b, rt, u);
        while (rt == 0);  // (a sequence without query rows has no job)
        return true;
    }

    // After this worker wrote its piece of a cut job: count the arrival; the last piece merges
    // all of them (worker order) into out and lse. `smem`: free shared memory, 16 + 4 * (pieces)
    // bytes (pieces <= p.workers). The merge is bound by L2 latency: one pass, each item (8
    // channels of a row) loading AHEAD pieces' states before it adds them, its row's max and sum
    // kept online (the weights of the states so far are rescaled when the max moves).
    template <class T, int D, class Cta>
    __device__ __forceinline__ void finish_cut(const dcpattn_attn_kparams &p, const Cta &cta, int kvh,
                                               unsigned char *smem) const {
        constexpr int AHEAD = 4;  // (8 measured the same, and spills in the FP8 producer tile's 128 registers)
        const long long je = js + u;
        const int n = dcpattn_sched_pieces(U, G, js, je);
        int *flag = reinterpret_cast<int *>(smem);
        int *piece = reinterpret_cast<int *>(smem + 16);  // slot index of piece i
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long *c = counter(p, kvh);
            const unsigned long long tag = (p.token & 0xffffffffffull) << 24;
            unsigned long long seen, cur = *reinterpret_cast<volatile unsigned long long *>(c);
            unsigned k;
            do {
                seen = cur;
                k = (seen >> 24) == (tag >> 24) ? (unsigned)(seen & 0xffffffu) : 0u;
                cur = atomicCAS(c, seen, tag | (k + 1));
            } while (cur != seen);
            const bool last = (int)k + 1 == n;
            if (last) *reinterpret_cast<volatile unsigned long long *>(c) = 0ull;  // clean for a replay
            *flag = last;
        }
        __syncthreads();
        if (!*flag) return;
        __threadfence();
        // the pieces in worker order: with U >= G workers w0, w0 + 1, ...; else one unit each
        const int w0 = dcpattn_sched_owner(U, G, js);
        for (int i = threadIdx.x; i < n; i += THREADS) {
            const int w = U >= G ? w0 + i : dcpattn_sched_owner(U, G, js + i);
            piece[i] = (w * 2 + dcpattn_sched_slot(U, G, w, js)) * p.hkv + kvh;
        }
        __syncthreads();
        for (int it = threadIdx.x; it < M_TILE * (D / 8); it += THREADS) {
            const int r = it / (D / 8), c = (it % (D / 8)) * 8, R = cta.row0 + r;
            if (R >= cta.nrows) continue;
            float mx = neg_inf(), ls = 0.f;
            float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            for (int i = 0; i < n; i += AHEAD) {
                float l[AHEAD];
                f4 x[AHEAD], y[AHEAD];
#pragma unroll
                for (int k = 0; k < AHEAD; ++k) {
                    l[k] = neg_inf();
                    x[k] = y[k] = f4{0.f, 0.f, 0.f, 0.f};
                    if (i + k < n) {
                        const long long prow = (long long)piece[i + k] * M_TILE + r;
                        const f4 *src = reinterpret_cast<const f4 *>(p.o_part + prow * D + c);
                        l[k] = ld_cg_f32(p.lse_part + prow);
                        x[k] = ld_cg_f4(src);
                        y[k] = ld_cg_f4(src + 1);
                    }
                }
                float nm = mx;
#pragma unroll
                for (int k = 0; k < AHEAD; ++k) nm = fmaxf(nm, l[k]);
                if (nm == neg_inf()) continue;  // (every state so far empty)
                const float a = state_weight(mx, nm);
                ls *= a;
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[e] *= a;
#pragma unroll
                for (int k = 0; k < AHEAD; ++k) {
                    const float f = state_weight(l[k], nm);
                    ls += f;
                    acc[0] += f * x[k].x;
                    acc[1] += f * x[k].y;
                    acc[2] += f * x[k].z;
                    acc[3] += f * x[k].w;
                    acc[4] += f * y[k].x;
                    acc[5] += f * y[k].y;
                    acc[6] += f * y[k].z;
                    acc[7] += f * y[k].w;
                }
                mx = nm;
            }
            const float inv = sum_inv(ls);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] *= inv;
            const AttnRowOut out = cta.row_out(kvh * GROUP, R);
            st16(out.out(c), pack2<T>(acc[0], acc[1]), pack2<T>(acc[2], acc[3]), pack2<T>(acc[4], acc[5]),
                 pack2<T>(acc[6], acc[7]));
            if (c == 0 && p.lse) out.lse(ls > 0.f ? mx + fast_log2(ls) : neg_inf());
        }
    }
};

// A kernel's dynamic shared memory from its first ALIGN-byte boundary on (the generator adds
// ALIGN bytes of slack; 1024 for the 128-byte-swizzled wgmma operands, 1 for none): the
// shared-window address and a generic pointer to the same byte.
struct AttnSmem {
    unsigned addr;
    unsigned char *ptr;
};
template <unsigned ALIGN> __device__ __forceinline__ AttnSmem align_smem(unsigned char *raw) {
    const unsigned a = smem_u32(raw), b = (a + ALIGN - 1) & ~(ALIGN - 1);
    return {b, raw + (b - a)};
}

}  // namespace dcpattn
