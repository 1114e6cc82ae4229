// merge.cuh — exact N-way merge of partial attention states (docs/contract.md 5).
//
// LAUNCH CONTRACT (the host computes exactly this; ITEMS = kMergeItems below, 1):
//     block   = THREADS threads (256), dynamic shared memory 0, grid.y = grid.z = 1
//     VPR     = head_dim * sizeof(IN_T) / 16                  (16-byte input vectors per row-head)
//     grid.x  = ceil(rows * heads * VPR / (THREADS * ITEMS))  (64-bit arithmetic; 0 work -> no launch)
// The flat vector index runs over [rows][heads][VPR]; block b owns indices
// [b * THREADS * ITEMS, (b + 1) * THREADS * ITEMS) and thread i of it the indices
// b * THREADS * ITEMS + k * THREADS + i (k < ITEMS). One index is one 16-byte vector of one
// (row, head) of every input state: VEC = 16 / sizeof(IN_T) channels. So any head_dim that is
// a multiple of VEC works (8 or 24 for fp32, 96 or 192 for bf16, ... no upper limit) and a
// warp may straddle row-heads. rows is an upper bound: rows >= *rows_limit are not touched.
//
// Per vector: the states are taken kMergeUnroll (4) at a time; a group's LSE loads (same
// address across the threads of a row-head: one broadcast transaction) and its o loads are
// issued together, all in flight at once, and the o loads do not wait for the LSE: the o of
// an empty state (non-finite LSE) or of one whose weight underflows is read but never used
// (its term is skipped, so NaN or garbage there cannot leak into the result). With more
// states than one group, the next group's loads are issued before the current group is
// folded (software pipeline). Each group is folded into a running (max, sum, acc) in fp32
// (online softmax in base 2), so any num_states up to 64 works with no shared memory. The
// loads are predicated inside the instruction so a group stays one basic block;
// merge_inst.cu's __launch_bounds__(THREADS, 4) (<= 64 registers) is what lets ptxas keep a
// group's loads in flight together (without a minimum it interleaves them with the FMAs).
// Measured on the H200 (R1/R2 of docs/performance.md): issuing the o loads
// with the LSE loads gained 2-3 % over waiting for the weights; one vector per thread beat two.
//
// Output: VEC channels of OUT_T — one 16-byte store when sizeof(OUT_T) == sizeof(IN_T), two
// when a 16-bit input is written as fp32, one 8-byte store for fp32 input written as 16-bit.
// In place (out == o[0], same strides, OUT_T == IN_T): each thread reads every input it uses
// before it writes, and no other thread reads those bytes, so it is safe. lse_out must not
// alias any lse[n] (the threads of one row-head read lse after another may have written).
#pragma once
#include "ptx.cuh"

namespace dcpattn {

// Tuned on an H200 (R1/R2 of docs/performance.md): 4 states per load group, 1 vector per thread.
// kMergeItems is part of the launch contract above (gen/dcpattn/merge.lua binds ITEMS to it).
constexpr int kMergeUnroll = 4;
constexpr int kMergeItems = 1;
namespace merge_detail {

// 16 bytes of IN_T -> VEC floats.
template <class T> struct vec_traits;
template <> struct vec_traits<float> {
    static constexpr int VEC = 4;
    __device__ __forceinline__ static void unpack(const u32x4 &r, float *f) {
        f[0] = __uint_as_float(r.x);
        f[1] = __uint_as_float(r.y);
        f[2] = __uint_as_float(r.z);
        f[3] = __uint_as_float(r.w);
    }
};
template <class H> struct vec_traits_16 {
    static constexpr int VEC = 8;
    __device__ __forceinline__ static void unpack(const u32x4 &r, float *f) {
        const H tag = {};
        f[0] = lo_float(tag, r.x); f[1] = hi_float(tag, r.x);
        f[2] = lo_float(tag, r.y); f[3] = hi_float(tag, r.y);
        f[4] = lo_float(tag, r.z); f[5] = hi_float(tag, r.z);
        f[6] = lo_float(tag, r.w); f[7] = hi_float(tag, r.w);
    }
};
template <> struct vec_traits<bf16> : vec_traits_16<bf16> {};
template <> struct vec_traits<fp16> : vec_traits_16<fp16> {};

// Store VEC floats as OUT_T at ptr (aligned to VEC * sizeof(OUT_T) bytes).
template <class OUT_T, int VEC> struct storer;
template <> struct storer<float, 4> {
    __device__ __forceinline__ static void store(void *p, const float *f) {
        st16(p, __float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
    }
};
template <> struct storer<float, 8> {
    __device__ __forceinline__ static void store(void *p, const float *f) {
        st16(p, __float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
        st16((char *)p + 16, __float_as_uint(f[4]), __float_as_uint(f[5]), __float_as_uint(f[6]),
             __float_as_uint(f[7]));
    }
};
template <class H> struct storer16_4 {
    __device__ __forceinline__ static void store(void *p, const float *f) {
        st8(p, pack2<H>(f[0], f[1]), pack2<H>(f[2], f[3]));
    }
};
template <class H> struct storer16_8 {
    __device__ __forceinline__ static void store(void *p, const float *f) {
        st16(p, pack2<H>(f[0], f[1]), pack2<H>(f[2], f[3]), pack2<H>(f[4], f[5]), pack2<H>(f[6], f[7]));
    }
};
template <> struct storer<bf16, 4> : storer16_4<bf16> {};
template <> struct storer<bf16, 8> : storer16_8<bf16> {};
template <> struct storer<fp16, 4> : storer16_4<fp16> {};
template <> struct storer<fp16, 8> : storer16_8<fp16> {};

struct item {
    long long lse_off, o_off, out_off, lse_out_off;
    bool ok, first;  // first: this thread writes the row-head's lse_out
};

// (row, head, vector) of flat vector index gi over [rows][heads][vpr].
__device__ __forceinline__ item decode(const dcpattn_merge_kparams &p, unsigned long long gi, unsigned vpr,
                                       bool small, int limit, int vec) {
    const unsigned heads = (unsigned)p.heads;
    unsigned long long t, h, v;
    if (small) {
        const unsigned g = (unsigned)gi, rh = g / vpr, tt = rh / heads;
        v = g - rh * vpr;
        t = tt;
        h = rh - tt * heads;
    } else {
        const unsigned long long rh = gi / vpr;
        v = gi - rh * vpr;
        t = rh / heads;
        h = rh - t * heads;
    }
    item it;
    it.ok = t < (unsigned long long)limit;
    it.first = v == 0;
    const long long tl = (long long)t, hl = (long long)h, dl = (long long)v * vec;
    it.lse_off = tl * p.lse_st + hl * p.lse_sh;
    it.o_off = tl * p.o_st + hl * p.o_sh + dl;
    it.out_off = tl * p.out_st + hl * p.out_sh + dl;
    it.lse_out_off = tl * p.lse_out_st + hl * p.lse_out_sh;
    return it;
}

// The launch contract's arithmetic for this thread: its ITEMS vectors, THREADS apart.
template <class IN_T, int THREADS, int ITEMS> struct block_items {
    static constexpr int VEC = vec_traits<IN_T>::VEC;
    static_assert(VEC * (int)sizeof(IN_T) == 16, "one 16-byte input vector per thread");
    unsigned vpr;
    unsigned long long base;
    bool small;
    int limit;
    float sc;

    __device__ __forceinline__ explicit block_items(const dcpattn_merge_kparams &p) {
        vpr = (unsigned)p.head_dim / VEC;
        base = (unsigned long long)blockIdx.x * (THREADS * ITEMS);
        small = ((base + THREADS * ITEMS) >> 32) == 0;  // 32-bit index math fits
        limit = p.rows;
        if (p.rows_limit != nullptr) limit = min(limit, *p.rows_limit);
        sc = p.lse_base2_in ? 1.0f : kLog2e;  // exponents in base 2: x = lse * sc
    }
    // Vector k of this thread.
    __device__ __forceinline__ item at(const dcpattn_merge_kparams &p, int k) const {
        return decode(p, base + k * THREADS + threadIdx.x, vpr, small, limit, VEC);
    }
};

// LSE of states c .. c+U-1 (non-finite and absent -> -inf); issued together, no branch.
template <int U>
__device__ __forceinline__ void load_lse(const dcpattn_merge_kparams &p, const item &it, int c, float *l) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
        const float x = ld_f32_if(p.lse[c + i] + it.lse_off, it.ok && c + i < p.n);
        l[i] = is_finite(x) ? x : neg_inf();
    }
}

// LSE and o of states c .. c+U-1 (absent ones: -inf and zeros, memory not touched), all
// issued together, no branch.
template <class IN_T, int U>
__device__ __forceinline__ void load_group(const dcpattn_merge_kparams &p, const item &it, int c, float *l, u32x4 *r) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
        const bool present = it.ok && c + i < p.n;
        l[i] = ld_f32_if(p.lse[c + i] + it.lse_off, present);
        r[i] = ld_stream16_if(static_cast<const IN_T *>(p.o[c + i]) + it.o_off, present);
    }
}

// Fold a loaded group (raw LSE in lraw, o vectors in r) into the running (m, s, acc).
template <class IN_T, int U, int VEC>
__device__ __forceinline__ void fold(const float *lraw, const u32x4 *r, float sc, float &m, float &s, float *acc) {
    float l[U], cm = m;
#pragma unroll
    for (int i = 0; i < U; ++i) {
        l[i] = is_finite(lraw[i]) ? lraw[i] : neg_inf();  // empty state
        cm = fmaxf(cm, l[i]);
    }
    const float mu = is_finite(cm) ? cm : 0.0f;  // nothing non-empty yet: every weight is 0
    float w[U], ws = 0.0f;
#pragma unroll
    for (int i = 0; i < U; ++i) {
        w[i] = fast_exp2((l[i] - mu) * sc);  // empty: 2^-inf = 0
        ws += w[i];
    }
    const float alpha = fast_exp2((m - mu) * sc);  // m = -inf before the first non-empty state: 0
    m = cm;
    s = fmaf(s, alpha, ws);
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] *= alpha;
#pragma unroll
    for (int i = 0; i < U; ++i) {
        float f[VEC];
        vec_traits<IN_T>::unpack(r[i], f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] = w[i] != 0.0f ? fmaf(w[i], f[j], acc[j]) : acc[j];
    }
}

template <class OUT_T, int VEC>
__device__ __forceinline__ void finish(const dcpattn_merge_kparams &p, const item &it, float m, float s, float *acc) {
    float lse_out;
    if (is_finite(m)) {
        const float inv = 1.0f / s;  // s >= 1: the max state has weight 1
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc[j] *= inv;
        // M + log(sum) in the input base, then converted to the output base.
        const float lg = fast_log2(s);
        lse_out = p.lse_base2_in ? m + lg : fmaf(lg, kLn2, m);
        if (p.lse_base2_in != p.lse_base2_out) lse_out *= p.lse_base2_in ? kLn2 : kLog2e;
    } else {
        lse_out = neg_inf();  // all empty: acc stays exactly 0
    }
    storer<OUT_T, VEC>::store(static_cast<OUT_T *>(p.out) + it.out_off, acc);
    if (p.lse_out != nullptr && it.first) p.lse_out[it.lse_out_off] = lse_out;
}

}  // namespace merge_detail

// See the contract at the top of this file. Each thread merges ITEMS vectors, THREADS apart;
// UNROLL states have their loads in flight together.
template <class IN_T, class OUT_T, int THREADS, int UNROLL = kMergeUnroll, int ITEMS = kMergeItems>
__device__ __forceinline__ void merge_states(const dcpattn_merge_kparams &p) {
    using namespace merge_detail;
    using Block = block_items<IN_T, THREADS, ITEMS>;
    const Block blk(p);
    constexpr int VEC = Block::VEC, U = UNROLL;
    const float sc = blk.sc;
    const int n = p.n;

    if (n <= U) {  // one group: every load of every vector in flight at once
        item its[ITEMS];
        float l[ITEMS][U];
        u32x4 r[ITEMS][U];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            its[k] = blk.at(p, k);
            load_group<IN_T, U>(p, its[k], 0, l[k], r[k]);
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            float m = neg_inf(), s = 0.0f, acc[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
            fold<IN_T, U, VEC>(l[k], r[k], sc, m, s, acc);
            if (its[k].ok) finish<OUT_T, VEC>(p, its[k], m, s, acc);
        }
    } else {
#pragma unroll 1
        for (int k = 0; k < ITEMS; ++k) {
            const item it = blk.at(p, k);
            float m = neg_inf(), s = 0.0f, acc[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
            float l[U];
            u32x4 r[U];
            load_group<IN_T, U>(p, it, 0, l, r);
            for (int c = 0; c < n; c += U) {
                float l2[U];
                u32x4 r2[U];
                load_group<IN_T, U>(p, it, c + U, l2, r2);  // past the last state: predicated off
                fold<IN_T, U, VEC>(l, r, sc, m, s, acc);
#pragma unroll
                for (int i = 0; i < U; ++i) {
                    l[i] = l2[i];
                    r[i] = r2[i];
                }
            }
            if (it.ok) finish<OUT_T, VEC>(p, it, m, s, acc);
        }
    }
}

}  // namespace dcpattn
