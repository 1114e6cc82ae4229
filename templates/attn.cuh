// attn.cuh — what the attention kernels (gqa.cuh, mla.cuh) share: which packed query rows and
// which keys a CTA owns (split-KV range, the causal DCP limit of each row, docs/contract.md 3), the
// online-softmax step of a row, and where a finished row goes (out and lse, or the split
// partials o_part and lse_part).
#pragma once
#include "ptx.cuh"

namespace dcpattn {

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
    __device__ __forceinline__ AttnCta(const dcpattn_attn_kparams &p_, int b_, int split_) : p(p_) {
        split = split_;
        b = b_;
        row0 = blockIdx.z * M_TILE;
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

    // Query token and head of packed row R.
    __device__ __forceinline__ int token(int R) const { return q_begin + R / GROUP; }
    __device__ __forceinline__ int head(int h0, int R) const { return h0 + R % GROUP; }
    __device__ __forceinline__ AttnRowOut row_out(int h0, int R) const { return {p, token(R), head(h0, R)}; }
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

// Max and sum over the four lanes of a quad (the threads holding one row of an MMA fragment).
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Base-2 LSE of a row from its max m and sum l; -inf for a row that saw nothing.
__device__ __forceinline__ float row_lse2(float m, float l) { return l > 0.f ? m + fast_log2(l) : neg_inf(); }

}  // namespace dcpattn
