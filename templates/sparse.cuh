// sparse.cuh — sparse MLA decode (DeepSeek V3.2 / GLM-5 top-k attention) over one rank's DCP
// shard (docs/contract.md, "Sparse MLA"). Dqk = 576 (512 latent + 64 rope), Dv = 512, one
// latent KV head whose first 512 channels are V; each query token attends to the keys of its
// own list of global positions, those this rank owns.
//
// One CTA = one query token x M_TILE (64) query heads (rows past Hq are zero and never
// written); grid batch*max_q_len x ceil(Hq / 64), slots past a sequence's q_len return.
// Stages, each a device function below:
//   1. sparse_select: the CTA reads its token's ids (each thread a run of them, its loads
//      issued together), keeps those in range (0 <= g < L) and owned ((g / I) % W == rank),
//      maps each to its local index (g / (W*I))*I + g % I, to its page through the block
//      table and to the byte offset of its cache row, and compacts the offsets in list order
//      into shared memory (a scan over the CTA): n keys, repeats kept. On sm_90a the FP8
//      cache takes mla.cuh's sparse kernel, which shares this stage.
//   2. sparse_attend: tiles of KV_TILE (32) keys of the compacted list, two stages deep: the
//      rows are gathered with 16-byte cp.async (zero fill past n) into XOR-swizzled tiles
//      (the 16-byte chunk c of row r at chunk c ^ (r % 8)); an FP8 (fp8ds) cache lands as raw
//      656-byte rows and is dequantized into one bf16 tile (value = e4m3 * its 128-value
//      block's fp32 scale, rounded to bf16; the RoPE part copied); an e4m3 cache with
//      per-tensor scales (E4M3) lands as raw 576-byte rows and is converted exactly into one
//      T tile (every e4m3 value is a bf16 and an fp16 value): k_scale joins the softmax scale
//      and v_scale multiplies O at the end, both read on the device. Eight warps = 4 row groups
//      of 16 heads x 2 halves: for QK^T, half h owns the keys 16h..16h+15 of a tile (36 k-steps
//      of mma.sync m16n8k16 over 576 channels); the two warps of a row group swap their S
//      fragments through shared memory (a named barrier of the pair), so both hold the row's
//      32 scores in the same lanes, run the same online softmax (base 2, scale folded into the
//      exponent's FMA) with bit-identical row max and sum, and each adds P V for its half of
//      the 512 V columns (128 fp32 accumulators per thread).
//   3. the epilogue: the sink of the head on rank 0 (p.sinks is NULL elsewhere) joins the
//      normalizer as one more logit, then out (T) and lse (natural or base 2) from registers.
//
// Dynamic shared memory (bytes), as the generator computes it:
//     M_TILE*576*2 (Q) + 2*KV_TILE*576*2 (K stages; FP8: KV_TILE*576*2 + 2*KV_TILE*RAW_ROW,
//     RAW_ROW 656 for fp8ds, 576 for E4M3)
//     + MAX_TOPK*8 (the compacted list) + WARPS*256*4 (the S exchange)
//
// Alignment: q, k and out 16-byte aligned; q and out element strides multiples of 8, cache
// strides multiples of 16 bytes (the host validates this). v must alias k (the host requires it).
#pragma once
#include "attn.cuh"

namespace dcpattn {

// DeepSeek's FP8 row (fp8ds): 512 e4m3 values, 4 fp32 scales (one per 128 values), 64 bf16 RoPE
// values; the byte rows of a sparse kernel's cache name its layout (SparseTraits, MlaTraits).
constexpr int SPARSE_FP8DS_ROW = 656;

// RAW_ROW_: the cache's rows of bytes, converted into a T tile in shared memory: 656 (fp8ds),
// 576 (e4m3 with per-tensor scales), or 0 (rows of 576 T, read as they are).
template <class T_, int RAW_ROW_, int M_TILE_, int KV_TILE_, int MAX_TOPK_, int THREADS_> struct SparseTraits {
    using T = T_;
    static constexpr int DQK = 576, DV = 512;
    static constexpr int RAW_ROW = RAW_ROW_;
    static constexpr bool RAW = RAW_ROW != 0;
    static constexpr bool FP8DS = RAW_ROW == SPARSE_FP8DS_ROW;
    static constexpr bool E4M3 = RAW_ROW == DQK;   // per-tensor scales (p.k_scale, p.v_scale)
    static constexpr int M_TILE = M_TILE_, KV_TILE = KV_TILE_, MAX_TOPK = MAX_TOPK_, THREADS = THREADS_;
    static constexpr int WARPS = THREADS / 32;
    static constexpr int ROW_GROUPS = M_TILE / 16;
    static constexpr int HALF_KEYS = KV_TILE / 2;  // keys of a tile whose S one warp computes
    static constexpr int CHUNKS = DQK / 8;         // 16-byte chunks of a T row
    static constexpr int ROW_BYTES = DQK * 2;
    static constexpr int TILE_BYTES = KV_TILE * ROW_BYTES;
    // fp8ds: the scales (one fp32 per 128 values) and the RoPE values after the 512 e4m3 values
    static constexpr int RAW_CHUNKS = RAW_ROW / 16, RAW_SCALES = 512, RAW_ROPE = 528;
    static constexpr int RAW_E4M3 = FP8DS ? 512 / 8 : DQK / 8;  // 8-byte pieces of e4m3 a row
    static constexpr int RAW_TILE = KV_TILE * RAW_ROW;
    static constexpr int SMEM_Q = 0;
    static constexpr int SMEM_K = M_TILE * ROW_BYTES;                    // K stages, or the dequantized tile
    static constexpr int SMEM_RAW = SMEM_K + (RAW ? 1 : 2) * TILE_BYTES;  // FP8: two stages of raw rows
    static constexpr int SMEM_LIST = SMEM_RAW + (RAW ? 2 * RAW_TILE : 0);
    static constexpr int SMEM_X = SMEM_LIST + MAX_TOPK * 8;
    static constexpr int SMEM_BYTES = SMEM_X + WARPS * 256 * 4;

    static_assert(M_TILE % 16 == 0 && WARPS == 2 * ROW_GROUPS, "warps: row groups of 16 heads x 2 halves");
    static_assert(HALF_KEYS == 16, "a warp's S covers 16 keys: one k-step of P V");
    static_assert(!FP8DS || same_type<T, bf16>, "fp8ds dequantizes to bf16");
    static_assert(RAW_ROW == 0 || FP8DS || E4M3, "a cache layout");
    static_assert(RAW_TILE % 16 == 0 && SMEM_LIST % 16 == 0, "16-byte copies");
    static_assert(!FP8DS || KV_TILE * 8 == THREADS, "RoPE copy: one 16-byte chunk per thread");
    static_assert(!RAW || (KV_TILE * RAW_E4M3) % THREADS == 0, "dequantization: whole passes");
};

namespace sparse_detail {

// Byte offset of 16-byte chunk c of row r in a tile of T rows.
template <class Tr> __device__ __forceinline__ unsigned tile_off(int r, int c) {
    return r * Tr::ROW_BYTES + ((c ^ (r & 7)) << 4);
}

// The two warps of row group g (warps g and g + ROW_GROUPS): barrier 1 + g of 64 threads.
__device__ __forceinline__ void pair_sync(int g) { asm volatile("bar.sync %0, 64;\n" ::"r"(1 + g) : "memory"); }

// FP8 (RAW): the raw rows at shared address raw into the T tile at t (tile_off layout). A
// thread takes 8 e4m3 bytes -> one 16-byte chunk: fp8ds times their block's scale (then one
// RoPE chunk, bf16 already), E4M3 exactly (its per-tensor scales apply to the scores and O).
template <class Tr> __device__ __forceinline__ void dequant_tile(unsigned raw, unsigned t, int tid) {
    using T = typename Tr::T;
    constexpr int PIECES = Tr::RAW_E4M3, ITEMS = Tr::KV_TILE * PIECES;
#pragma unroll
    for (int j = 0; j < ITEMS / Tr::THREADS; ++j) {
        const unsigned i = tid + j * Tr::THREADS;  // (unsigned: fp8ds's 64 pieces a row are a shift and a mask)
        const int r = i / PIECES, c = i % PIECES;
        const unsigned row = raw + r * Tr::RAW_ROW;
        unsigned w0, w1, a[4];
        ld_shared_u2(row + c * 8, w0, w1);
        float sc = 1.f;
        if constexpr (Tr::FP8DS) sc = ld_shared_f32(row + Tr::RAW_SCALES + (c >> 4) * 4);
        e4m3x4_to<T>(w0, a[0], a[1]);
        e4m3x4_to<T>(w1, a[2], a[3]);
        if constexpr (Tr::FP8DS)
#pragma unroll
            for (int k = 0; k < 4; ++k) a[k] = pack2<bf16>(lo_float(bf16{}, a[k]) * sc, hi_float(bf16{}, a[k]) * sc);
        st_shared_u4(t + tile_off<Tr>(r, c), a);
    }
    if constexpr (Tr::FP8DS) {
        const int r = tid >> 3, c = tid & 7;
        float v[4];
        ld_shared_f4(raw + r * Tr::RAW_ROW + Tr::RAW_ROPE + c * 16, v);
        const unsigned u[4] = {__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                               __float_as_uint(v[3])};
        st_shared_u4(t + tile_off<Tr>(r, 64 + c), u);
    }
}

}  // namespace sparse_detail

// The epilogue's sink: the sink of head h (p.sinks: rank 0 only, else NULL; a non-finite sink is
// none) joins a row's state (m: base-2 reference max, l: the sum against it) as one more logit
// with no value, lse' = log2(2^lse + 2^sink2); returns the factor by which O, relative to the old
// m, goes to the new one (0 for a row that saw nothing).
__device__ __forceinline__ float sparse_sink(const dcpattn_attn_kparams &p, int h, float &m, float &l) {
    float alpha = 1.f;
    if (p.sinks) {
        const float sink = p.sinks[h];
        if (is_finite(sink)) {
            const float s2 = sink * kLog2e, mn = fmaxf(m, s2);
            alpha = fast_exp2(m - mn);  // m = -inf: 0
            l = l * alpha + fast_exp2(s2 - mn);
            m = mn;
        }
    }
    return alpha;
}

// Stage "select" (this kernel and mla.cuh's sparse one): the byte offsets of the cache rows of
// token t's kept ids, in list order, into list[0, n) (shared or global memory, this CTA's own);
// returns n. Thread i takes the ids [i E, i E + E), E = ceil(count / THREADS) (at most
// MAX_TOPK / THREADS: all of its loads issued together), a scan over the CTA places each
// thread's kept rows after those of the threads before it. Every thread of the CTA calls it;
// scratch: 32 long longs of shared memory no one else touches meanwhile. Ends with the list
// complete for every thread of the CTA.
template <int THREADS, int MAX_TOPK, int ROW_BYTES_PER_ELEM>
__device__ __forceinline__ int sparse_select(const dcpattn_attn_kparams &p, int b, long long t, long long *list,
                                             long long *scratch) {
    constexpr int PER = (MAX_TOPK + THREADS - 1) / THREADS;
    const int tid = threadIdx.x;
    const int Lk = ldg_i32(p.seqused_k + b);
    const int L = p.seqused_k_global ? ldg_i32(p.seqused_k_global + b) : Lk;
    const int count = p.topk_count ? min(max(ldg_i32(p.topk_count + t), 0), p.topk) : p.topk;
    const int per = (count + THREADS - 1) / THREADS, j0 = tid * per;
    const int *ids = p.topk_ids + t * p.topk_st;
    const int *bt = p.block_table + (long long)b * p.bt_stride;
    const int W = p.world, rank = p.rank, I = p.interleave, ps = p.page_size;
    const int span = W * I;  // (< 2^31: the host checks W * I)
    int l[PER], page[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        const int j = j0 + k;
        const int g = k < per && j < count ? ldg_i32(ids + j) : -1;
        // kept: in range, owned; its local index (always < Lk for consistent lengths: never a
        // block-table entry past them)
        const bool keep = g >= 0 && g < L && (g / I) % W == rank;
        l[k] = keep ? (g / span) * I + g % I : Lk;
        l[k] = l[k] < Lk ? l[k] : -1;
    }
    int kept = 0;
#pragma unroll
    for (int k = 0; k < PER; ++k) {
        page[k] = l[k] >= 0 ? ldg_i32(bt + l[k] / ps) : 0;
        kept += l[k] >= 0;
    }
    long long total;
    long long at = block_scan<THREADS>(kept, scratch, total) - kept;
#pragma unroll
    for (int k = 0; k < PER; ++k)
        if (l[k] >= 0)
            list[at++] = ((long long)page[k] * p.k_sp + (long long)(l[k] % ps) * p.k_st) * ROW_BYTES_PER_ELEM;
    __syncthreads();
    return (int)total;
}

// Stages 2 and 3: query heads [h0, h0 + M_TILE) of token t over the n keys of the list.
template <class Tr>
__device__ __forceinline__ void sparse_attend(const dcpattn_attn_kparams &p, long long t, int h0, int n,
                                              unsigned char *smem) {
    using namespace sparse_detail;
    using T = typename Tr::T;
    constexpr int KV_TILE = Tr::KV_TILE, CHUNKS = Tr::CHUNKS, ROW_BYTES = Tr::ROW_BYTES, THREADS = Tr::THREADS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rg = warp % Tr::ROW_GROUPS, hv = warp / Tr::ROW_GROUPS;  // row group; key half of S, V half of O
    const int rows = min(Tr::M_TILE, p.hq - h0);
    const unsigned s_base = smem_u32(smem);
    const unsigned sQ = s_base + Tr::SMEM_Q, sK = s_base + Tr::SMEM_K, sRaw = s_base + Tr::SMEM_RAW;
    const long long *list = reinterpret_cast<const long long *>(smem + Tr::SMEM_LIST);
    float *xs = reinterpret_cast<float *>(smem + Tr::SMEM_X);  // [warp][8][32] S fragments

    // ---- Q: the M_TILE heads of token t, zero rows past Hq ----
    {
        const char *qb = static_cast<const char *>(p.q);
        for (int idx = tid; idx < Tr::M_TILE * CHUNKS; idx += THREADS) {
            const int r = idx / CHUNKS, c = idx % CHUNKS;
            const bool ok = r < rows;
            const long long off = ok ? (t * p.q_st + (long long)(h0 + r) * p.q_sh + c * 8) * 2 : 0;
            cp_async16(sQ + tile_off<Tr>(r, c), qb + off, ok ? 16 : 0);
        }
    }
    // ---- gather of tile tt into stage st (rows past n: zeros, nothing read) ----
    const char *kb = static_cast<const char *>(p.k);
    auto issue = [&](int tt, int st) {
        const int k0 = tt * KV_TILE;
        if constexpr (Tr::RAW) {
            const unsigned dst = sRaw + st * Tr::RAW_TILE;
            for (int idx = tid; idx < KV_TILE * Tr::RAW_CHUNKS; idx += THREADS) {
                const int r = idx / Tr::RAW_CHUNKS, c = idx % Tr::RAW_CHUNKS;
                const bool ok = k0 + r < n;
                cp_async16_or_zero(dst + r * Tr::RAW_ROW + c * 16, kb + (ok ? list[k0 + r] : 0) + c * 16, ok);
            }
        } else {
            const unsigned dst = sK + st * Tr::TILE_BYTES;
            for (int idx = tid; idx < KV_TILE * CHUNKS; idx += THREADS) {
                const int r = idx / CHUNKS, c = idx % CHUNKS;
                const bool ok = k0 + r < n;
                cp_async16_or_zero(dst + tile_off<Tr>(r, c), kb + (ok ? list[k0 + r] : 0) + c * 16, ok);
            }
        }
    };
    const int n_tiles = (n + KV_TILE - 1) / KV_TILE;
    if (n_tiles > 0) issue(0, 0);
    cp_async_commit();  // Q and tile 0

    // ---- per-thread rows and state ----
    const int g = lane >> 2, q4 = lane & 3;
    const bool active = rg * 16 < rows;  // warp-uniform: both warps of a row group agree
    // (E4M3: k_scale joins the softmax scale, read here so that a captured graph sees its value)
    const float scale = Tr::E4M3 ? p.scale_log2 * p.k_scale[0] : p.scale_log2;
    float o[Tr::DV / 16][4];  // this warp's half: 16 rows x 256 columns
#pragma unroll
    for (int i = 0; i < Tr::DV / 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_lo = neg_inf(), m_hi = neg_inf(), l_lo = 0.f, l_hi = 0.f;

    // ldmatrix addresses: the XOR touches chunk bits 0-2 only, so chunk pair kk of a row is a
    // per-lane base for kk % 4 plus (kk / 4) * 128 bytes
    const int fx = lane & 7;
    unsigned qa[4], ka[4], va[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        qa[j] = sQ + (rg * 16 + (lane & 15)) * ROW_BYTES + (((2 * j + (lane >> 4)) ^ fx) << 4);
        ka[j] = (hv * 16 + (lane & 7) + ((lane >> 4) << 3)) * ROW_BYTES + (((2 * j + ((lane >> 3) & 1)) ^ fx) << 4);
        va[j] = ((lane & 7) + (((lane >> 3) & 1) << 3)) * ROW_BYTES + hv * (Tr::DV / 2) * 2 +
                (((2 * j + (lane >> 4)) ^ fx) << 4);
    }

    for (int tt = 0; tt < n_tiles; ++tt) {
        if (tt + 1 < n_tiles) issue(tt + 1, (tt + 1) & 1);  // its stage's readers passed the last barrier
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();  // tile tt landed for all
        unsigned tile = sK + (Tr::RAW ? 0u : (tt & 1) * Tr::TILE_BYTES);
        if constexpr (Tr::RAW) {
            dequant_tile<Tr>(sRaw + (tt & 1) * Tr::RAW_TILE, sK, tid);
            __syncthreads();
        }
        if (active) {
            // S = Q K^T: 16 rows x this half's 16 keys, over 576 channels
            float s[2][4];
#pragma unroll
            for (int e = 0; e < 4; ++e) s[0][e] = s[1][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < Tr::DQK / 16; ++kk) {
                unsigned a[4], kf[4];
                ldsm_x4(qa[kk & 3] + (kk >> 2) * 128, a);
                ldsm_x4(tile + ka[kk & 3] + (kk >> 2) * 128, kf);
                mma16816<T>(s[0], a, kf[0], kf[1]);
                mma16816<T>(s[1], a, kf[2], kf[3]);
            }
            // keys past n (the last tile only): -inf
            const int kbase = tt * KV_TILE + hv * 16 + 2 * q4;
            if (tt * KV_TILE + KV_TILE > n) {
#pragma unroll
                for (int nn = 0; nn < 2; ++nn)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (kbase + nn * 8 + (e & 1) >= n) s[nn][e] = neg_inf();
            }
            // swap S with the other half of the row group: both then hold keys 0-15 (p0) and
            // 16-31 (p1) of the tile at the same lanes
#pragma unroll
            for (int nn = 0; nn < 2; ++nn)
#pragma unroll
                for (int e = 0; e < 4; ++e) xs[(warp * 8 + nn * 4 + e) * 32 + lane] = s[nn][e];
            pair_sync(rg);
            const int other = rg + (1 - hv) * Tr::ROW_GROUPS;
            float p0[2][4], p1[2][4];
#pragma unroll
            for (int nn = 0; nn < 2; ++nn)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float x = xs[(other * 8 + nn * 4 + e) * 32 + lane];
                    p0[nn][e] = hv ? x : s[nn][e];
                    p1[nn][e] = hv ? s[nn][e] : x;
                }

            // online softmax, base 2; the same values in the same order in both warps
            float rx_lo = neg_inf(), rx_hi = neg_inf();
#pragma unroll
            for (int nn = 0; nn < 2; ++nn) {
                rx_lo = fmaxf(rx_lo, fmaxf(fmaxf(p0[nn][0], p0[nn][1]), fmaxf(p1[nn][0], p1[nn][1])));
                rx_hi = fmaxf(rx_hi, fmaxf(fmaxf(p0[nn][2], p0[nn][3]), fmaxf(p1[nn][2], p1[nn][3])));
            }
            const float mx_lo = fmaxf(m_lo, quad_max(rx_lo) * scale);
            const float mx_hi = fmaxf(m_hi, quad_max(rx_hi) * scale);
            // a row with no key yet keeps max -inf; subtract 0 so exp2 gives exact 0
            const float mu_lo = mx_lo == neg_inf() ? 0.f : mx_lo;
            const float mu_hi = mx_hi == neg_inf() ? 0.f : mx_hi;
            const float al_lo = fast_exp2(m_lo - mu_lo), al_hi = fast_exp2(m_hi - mu_hi);
            m_lo = mx_lo;
            m_hi = mx_hi;
            float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
            for (int nn = 0; nn < 2; ++nn) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    p0[nn][e] = fast_exp2(fmaf(p0[nn][e], scale, -mu_lo));
                    p0[nn][2 + e] = fast_exp2(fmaf(p0[nn][2 + e], scale, -mu_hi));
                    p1[nn][e] = fast_exp2(fmaf(p1[nn][e], scale, -mu_lo));
                    p1[nn][2 + e] = fast_exp2(fmaf(p1[nn][2 + e], scale, -mu_hi));
                }
            }
#pragma unroll
            for (int nn = 0; nn < 2; ++nn) sum_lo += p0[nn][0] + p0[nn][1], sum_hi += p0[nn][2] + p0[nn][3];
#pragma unroll
            for (int nn = 0; nn < 2; ++nn) sum_lo += p1[nn][0] + p1[nn][1], sum_hi += p1[nn][2] + p1[nn][3];
            l_lo = l_lo * al_lo + sum_lo;
            l_hi = l_hi * al_hi + sum_hi;
            if (__any_sync(0xffffffffu, al_lo != 1.f || al_hi != 1.f)) {
#pragma unroll
                for (int i = 0; i < Tr::DV / 16; ++i) {
                    o[i][0] *= al_lo;
                    o[i][1] *= al_lo;
                    o[i][2] *= al_hi;
                    o[i][3] *= al_hi;
                }
            }

            // O += P V: keys 0-15 (p0) and 16-31 (p1) x this warp's 256 V columns
            unsigned pa[2][4];
            pa[0][0] = pack2<T>(p0[0][0], p0[0][1]);
            pa[0][1] = pack2<T>(p0[0][2], p0[0][3]);
            pa[0][2] = pack2<T>(p0[1][0], p0[1][1]);
            pa[0][3] = pack2<T>(p0[1][2], p0[1][3]);
            pa[1][0] = pack2<T>(p1[0][0], p1[0][1]);
            pa[1][1] = pack2<T>(p1[0][2], p1[0][3]);
            pa[1][2] = pack2<T>(p1[1][0], p1[1][1]);
            pa[1][3] = pack2<T>(p1[1][2], p1[1][3]);
#pragma unroll
            for (int kk = 0; kk < 2; ++kk)
#pragma unroll
                for (int dd = 0; dd < Tr::DV / 32; ++dd) {
                    unsigned vf[4];
                    ldsm_x4_trans(tile + va[dd & 3] + (dd >> 2) * 128 + kk * 16 * ROW_BYTES, vf);
                    mma16816<T>(o[2 * dd], pa[kk], vf[0], vf[1]);
                    mma16816<T>(o[2 * dd + 1], pa[kk], vf[2], vf[3]);
                }
        }
        __syncthreads();  // every warp done with this tile's stage and the S exchange
    }
    cp_async_wait<0>();
    if (!active) return;

    // ---- epilogue: the sink (rank 0), then out and lse of this warp's rows and half ----
    l_lo = quad_sum(l_lo);
    l_hi = quad_sum(l_hi);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = rg * 16 + g + 8 * half;
        if (r >= rows) continue;
        float m = half ? m_hi : m_lo, l = half ? l_hi : l_lo;
        const float alpha = sparse_sink(p, h0 + r, m, l) * (Tr::E4M3 ? p.v_scale[0] : 1.f);
        const float inv = l > 0.f ? alpha / l : 0.f;
        const AttnRowOut out{p, t, h0 + r};
#pragma unroll
        for (int i = 0; i < Tr::DV / 16; ++i)
            *reinterpret_cast<unsigned *>(out.out(hv * (Tr::DV / 2) + 8 * i + 2 * q4)) =
                pack2<T>(o[i][2 * half] * inv, o[i][2 * half + 1] * inv);
        if (hv == 0 && q4 == 0 && p.lse) out.lse(row_lse2(m, l));
    }
}

// One CTA per (sequence b x query slot i, head block blockIdx.y); grid.x = batch * max_q_len.
template <class Tr> __device__ __forceinline__ void sparse_decode(const dcpattn_attn_kparams &p) {
    extern __shared__ __attribute__((aligned(16))) unsigned char sparse_smem[];
    const int b = blockIdx.x / p.max_q_len, i = blockIdx.x % p.max_q_len;
    const int q0 = ldg_i32(p.cu_seqlens_q + b);
    if (i >= ldg_i32(p.cu_seqlens_q + b + 1) - q0) return;
    const long long t = q0 + i;
    const int n = sparse_select<Tr::THREADS, Tr::MAX_TOPK, Tr::RAW ? 1 : 2>(
        p, b, t, reinterpret_cast<long long *>(sparse_smem + Tr::SMEM_LIST),
        reinterpret_cast<long long *>(sparse_smem + Tr::SMEM_X));
    sparse_attend<Tr>(p, t, (int)blockIdx.y * Tr::M_TILE, n, sparse_smem);
}

}  // namespace dcpattn
