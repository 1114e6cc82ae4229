// mla.cuh — DeepSeek MLA absorbed decode over one rank's DCP shard, Hopper (sm_90a) wgmma
// (DESIGN.md 3, 6). Dqk = 576 (512 latent + 64 rope), Dv = 512, one latent KV head whose V
// is the first 512 channels of the K row: every KV tile is read once, for QK^T and for PV.
//
// One CTA = one (sequence, split) x 64 packed query rows (packed row R = z*64 + m is query
// token R / GROUP, head R % GROUP, GROUP = Hq) x the split's KV tokens in tiles of 64.
//
// Warps (384 threads): two consumer warpgroups (warps 0-7) and one producer warpgroup
// (warps 8-11); setmaxnreg moves registers from the producer to the consumers.
//   producer: gathers each 64 x 576 K tile into shared memory with 16-byte cp.async (page
//     looked up per token, so any page size and any 16-byte-aligned token stride works;
//     tokens past the CTA's last visible key are zero-filled and never read from memory),
//     waits for its own copies, fences them into the async proxy and arrives on the stage's
//     `full` mbarrier. Two stages; the consumers free a stage through its `empty` mbarrier.
//   consumers: warpgroup w computes S = Q K^T for the 64 rows x keys [32w, 32w+32) of the
//     tile (wgmma m64n32k16, Q and K from shared memory, 36 k-steps), the two warpgroups
//     exchange row maxima through shared memory (one named barrier), each turns its S into
//     bf16/fp16 P fragments, they swap fragments (second named barrier), and warpgroup w
//     accumulates O[:, 256w : 256w+256] += P (registers) x V (wgmma m64n256k16, V the
//     transposed view of the same K tile). Each consumer thread holds 128 fp32 of O.
//
// Shared layout: Q tile, then the K stages, each a 128-byte-swizzled K-major tile: nine
// column blocks of 64 channels, each 64 rows x 128 B, the 16-byte chunk c of row r stored at
// chunk c ^ (r % 8) (the hardware's 128B swizzle; blocks are 1024-byte aligned). The same
// bytes are an MN-major SW128 operand for PV (LBO = 8192 between 64-channel blocks,
// SBO = 1024 between 8-token groups).
//
// Dynamic shared memory (bytes), as the generator computes it:
//     (1 + STAGES) * 64 * 576 * 2 + 2*8*128*4 + 2*64*4 + 64 + 1024 (alignment slack)
//
// Alignment: q, k and out 16-byte aligned; every element stride a multiple of 8 elements
// (the host validates this). v must alias k with the same strides (the host requires it).
#pragma once
#include "attn.cuh"

namespace dcpattn {

template <class T_, int GROUP_, int THREADS_> struct MlaTraits {
    using T = T_;
    static constexpr int GROUP = GROUP_;
    static constexpr int THREADS = THREADS_;
    static constexpr int DQK = 576, DV = 512;
    static constexpr int M_TILE = 64, KV_TILE = 64, STAGES = 2;
    static constexpr int CHUNKS = DQK / 8;                   // 16-byte chunks per row
    static constexpr int BLOCK_BYTES = 64 * 128;             // one 64-channel column block
    static constexpr int TILE_BYTES = (DQK / 64) * BLOCK_BYTES;  // 73728
    static constexpr int SMEM_Q = 0;
    static constexpr int SMEM_K = TILE_BYTES;
    static constexpr int SMEM_P = SMEM_K + STAGES * TILE_BYTES;  // P fragments [2][8][128] u32
    static constexpr int SMEM_X = SMEM_P + 2 * 8 * 128 * 4;      // row max / sum [2][64] f32
    static constexpr int SMEM_BAR = SMEM_X + 2 * 64 * 4;         // full[STAGES], empty[STAGES]
    static constexpr int SMEM_BYTES = SMEM_BAR + 64 + 1024;      // + slack to align to 1024

    static_assert(THREADS == 384, "two consumer warpgroups and one producer warpgroup");
    static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;  // 128*40 + 256*232 <= 65536
    static_assert(GROUP >= 1 && GROUP <= 128, "query heads");
    static_assert(STAGES == 2, "the parity arithmetic assumes two stages");
};

namespace mla_detail {

// The two consumer warpgroups only (barrier 0 is __syncthreads).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

struct alignas(8) f2 { float x, y; };

}  // namespace mla_detail

template <class Tr> __device__ __forceinline__ void mla_decode(const dcpattn_attn_kparams &p) {
    using namespace mla_detail;
    using T = typename Tr::T;
    constexpr int GROUP = Tr::GROUP, M_TILE = Tr::M_TILE, KV_TILE = Tr::KV_TILE, THREADS = Tr::THREADS;
    constexpr int CHUNKS = Tr::CHUNKS, TILE_BYTES = Tr::TILE_BYTES, BLOCK_BYTES = Tr::BLOCK_BYTES;

    extern __shared__ __attribute__((aligned(1024))) unsigned char mla_smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    AttnCta<GROUP, M_TILE, KV_TILE> cta(p);
    if (cta.empty()) return;
    cta.find_keys();
    const int row0 = cta.row0, nrows = cta.nrows, kv_begin = cta.kv_begin;
    const int cta_hi = cta.cta_hi, cta_lo = cta.cta_lo, n_tiles = cta.n_tiles;

    // 1024-byte aligned base (the SW128 atoms need it)
    const unsigned raw = smem_u32(mla_smem);
    const unsigned base = (raw + 1023u) & ~1023u;
    unsigned char *gsm = mla_smem + (base - raw);
    const unsigned sQ = base + Tr::SMEM_Q, sK = base + Tr::SMEM_K;
    const unsigned bar_full = base + Tr::SMEM_BAR, bar_empty = bar_full + 8 * Tr::STAGES;

    // ---- Q tile: 64 packed rows x 576, swizzled; rows past the end are zero ----
    {
        const char *qb = static_cast<const char *>(p.q);
        for (int idx = tid; idx < M_TILE * CHUNKS; idx += THREADS) {
            const int r = idx / CHUNKS, c = idx % CHUNKS, R = row0 + r;
            const bool ok = R < nrows;
            const long long off =
                ok ? ((long long)cta.token(R) * p.q_st + (long long)cta.head(0, R) * p.q_sh + c * 8) * 2 : 0;
            cp_async16(sQ + (c >> 3) * BLOCK_BYTES + r * 128 + (((c & 7) ^ (r & 7)) << 4), qb + off, ok ? 16 : 0);
        }
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async();
    }
    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < Tr::STAGES; ++s) {
            mbar_init(bar_full + 8 * s, 128);   // every producer thread
            mbar_init(bar_empty + 8 * s, 256);  // every consumer thread
        }
    }
    __syncthreads();

    if (warp >= 8) {
        // ================= producer warpgroup: K tiles by 16-byte cp.async gathers =================
        // thread -> token (pt / 8) of a group of 16, 16-byte chunk (pt % 8) + 8j of its row:
        // each warp instruction covers 4 tokens x 128 contiguous bytes.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tr::PRODUCER_REGS));
        const int pt = tid - 256;
        const int *bt = p.block_table + (long long)cta.b * p.bt_stride;
        const int ps = p.page_size;
        const bool ps_pow2 = (ps & (ps - 1)) == 0;
        const int ps_shift = __ffs(ps) - 1;
        const int sub = pt & 7, trow = pt >> 3;
        const char *kb = static_cast<const char *>(p.k) + sub * 16;
        for (int t = 0; t < n_tiles; ++t) {
            const int s = t & 1;
            if (t >= Tr::STAGES) mbar_wait(bar_empty + 8 * s, ((t >> 1) - 1) & 1);
            const unsigned stage = sK + s * TILE_BYTES;
            const int ts = kv_begin + t * KV_TILE;
#pragma unroll
            for (int rnd = 0; rnd < KV_TILE / 16; ++rnd) {
                const int tok = rnd * 16 + trow, l = ts + tok;
                const bool ok = l < cta_hi;
                long long off = 0;
                if (ok) {
                    const int pi = ps_pow2 ? (l >> ps_shift) : (l / ps);
                    const int pg = ldg_i32(bt + pi);
                    off = ((long long)pg * p.k_sp + (long long)(l - pi * ps) * p.k_st) * 2;
                }
                const unsigned dst = stage + tok * 128 + ((sub ^ (tok & 7)) << 4);
                const char *src = kb + off;
#pragma unroll
                for (int j = 0; j < CHUNKS / 8; ++j) cp_async16(dst + j * BLOCK_BYTES, src + j * 128, ok ? 16 : 0);
            }
            cp_async_commit();
            cp_async_wait<0>();
            fence_proxy_async();  // generic-proxy writes -> read by wgmma (async proxy)
            mbar_arrive(bar_full + 8 * s);
        }
        return;
    }

    // ================= consumer warpgroups =================
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tr::CONSUMER_REGS));
    const int wg = warp >> 2, wi = warp & 3, tw = tid & 127;
    const int g = lane >> 2, q4 = lane & 3;
    const int r_lo = wi * 16 + g, r_hi = r_lo + 8;
    const int lim_lo = cta.row_limit(r_lo), lim_hi = cta.row_limit(r_hi);
    const float scale = p.scale_log2;
    float *xm = reinterpret_cast<float *>(gsm + Tr::SMEM_X);        // [2][64]
    unsigned *pb = reinterpret_cast<unsigned *>(gsm + Tr::SMEM_P);  // [2][8][128]

    const unsigned long long dq0 = sw128_desc(sQ, 16, 1024);
    const unsigned long long dk0 = sw128_desc(sK + wg * 32 * 128, 16, 1024);
    const unsigned long long dv0 = sw128_desc(sK + wg * 4 * BLOCK_BYTES, BLOCK_BYTES, 1024);

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float m_lo = neg_inf(), m_hi = neg_inf(), l_lo = 0.f, l_hi = 0.f;

    for (int t = 0; t < n_tiles; ++t) {
        const int s = t & 1;
        mbar_wait(bar_full + 8 * s, (t >> 1) & 1);
        const unsigned soff = s * TILE_BYTES;

        // S = Q K^T: 64 rows x this warpgroup's 32 keys
        float sacc[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) sacc[i] = 0.f;
        fence_regs(sacc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < Tr::DQK / 16; ++kk) {
            const unsigned koff = (kk >> 2) * BLOCK_BYTES + (kk & 3) * 32;
            wgmma_ss_n32<T>(sacc, dq0 + (koff >> 4), dk0 + ((soff + koff) >> 4), 1);
        }
        wgmma_commit();
        wgmma_wait0();
        fence_regs(sacc);

        // scale to log2 units, mask past each row's limit
        const int ts = kv_begin + t * KV_TILE;
        const bool need_mask = ts + KV_TILE > cta_lo;
        float mx_lo = neg_inf(), mx_hi = neg_inf();
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            const int col = ts + wg * 32 + n * 8 + 2 * q4;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float a = sacc[4 * n + e] * scale, c = sacc[4 * n + 2 + e] * scale;
                if (need_mask) {
                    if (col + e >= lim_lo) a = neg_inf();
                    if (col + e >= lim_hi) c = neg_inf();
                }
                sacc[4 * n + e] = a;
                sacc[4 * n + 2 + e] = c;
                mx_lo = fmaxf(mx_lo, a);
                mx_hi = fmaxf(mx_hi, c);
            }
        }
        mx_lo = quad_max(mx_lo);
        mx_hi = quad_max(mx_hi);
        if (q4 == 0) {
            xm[wg * 64 + r_lo] = mx_lo;
            xm[wg * 64 + r_hi] = mx_hi;
        }
        consumer_sync();  // #1: row maxima of both halves of the tile
        mx_lo = fmaxf(fmaxf(mx_lo, xm[(wg ^ 1) * 64 + r_lo]), m_lo);
        mx_hi = fmaxf(fmaxf(mx_hi, xm[(wg ^ 1) * 64 + r_hi]), m_hi);
        // a row with nothing visible yet keeps max -inf; subtract 0 so exp2 gives exact 0
        const float mu_lo = mx_lo == neg_inf() ? 0.f : mx_lo;
        const float mu_hi = mx_hi == neg_inf() ? 0.f : mx_hi;
        const float al_lo = fast_exp2(m_lo - mu_lo), al_hi = fast_exp2(m_hi - mu_hi);
        m_lo = mx_lo;
        m_hi = mx_hi;
        float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            sacc[4 * n + 0] = fast_exp2(sacc[4 * n + 0] - mu_lo);
            sacc[4 * n + 1] = fast_exp2(sacc[4 * n + 1] - mu_lo);
            sacc[4 * n + 2] = fast_exp2(sacc[4 * n + 2] - mu_hi);
            sacc[4 * n + 3] = fast_exp2(sacc[4 * n + 3] - mu_hi);
            sum_lo += sacc[4 * n + 0] + sacc[4 * n + 1];
            sum_hi += sacc[4 * n + 2] + sacc[4 * n + 3];
        }
        l_lo = l_lo * al_lo + sum_lo;
        l_hi = l_hi * al_hi + sum_hi;

        // P as A fragments of two k16 steps (this warpgroup's 32 keys), swapped with the other
        unsigned pown[2][4], poth[2][4];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            pown[j][0] = pack2<T>(sacc[8 * j + 0], sacc[8 * j + 1]);
            pown[j][1] = pack2<T>(sacc[8 * j + 2], sacc[8 * j + 3]);
            pown[j][2] = pack2<T>(sacc[8 * j + 4], sacc[8 * j + 5]);
            pown[j][3] = pack2<T>(sacc[8 * j + 6], sacc[8 * j + 7]);
#pragma unroll
            for (int i = 0; i < 4; ++i) pb[(wg * 8 + j * 4 + i) * 128 + tw] = pown[j][i];
        }
        consumer_sync();  // #2: P of both halves
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) poth[j][i] = pb[((wg ^ 1) * 8 + j * 4 + i) * 128 + tw];

#pragma unroll
        for (int i = 0; i < 32; ++i) {
            o[4 * i + 0] *= al_lo;
            o[4 * i + 1] *= al_lo;
            o[4 * i + 2] *= al_hi;
            o[4 * i + 3] *= al_hi;
        }

        // O[:, 256 wg : 256 wg + 256] += P V, keys in four k16 steps
        fence_regs(o);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const bool mine = (j >> 1) == wg;
            unsigned a[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = mine ? pown[j & 1][i] : poth[j & 1][i];
            wgmma_rs_n256<T>(o, a, dv0 + ((soff + j * 16 * 128) >> 4));
        }
        wgmma_commit();
        wgmma_wait0();
        fence_regs(o);
        mbar_arrive(bar_empty + 8 * s);  // this thread is done with the stage
    }

    // ---- epilogue: row sums of both warpgroups, normalize, write ----
    l_lo = quad_sum(l_lo);
    l_hi = quad_sum(l_hi);
    consumer_sync();  // the other warpgroup has read the last tile's maxima
    if (q4 == 0) {
        xm[wg * 64 + r_lo] = l_lo;
        xm[wg * 64 + r_hi] = l_hi;
    }
    consumer_sync();
    l_lo += xm[(wg ^ 1) * 64 + r_lo];
    l_hi += xm[(wg ^ 1) * 64 + r_hi];

    const bool split_out = p.num_splits > 1;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int R = row0 + (half ? r_hi : r_lo);
        if (R >= nrows) continue;
        const float l = half ? l_hi : l_lo, m = half ? m_hi : m_lo;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const AttnRowOut out = cta.row_out(0, R);
        const float lse2 = row_lse2(m, l);
        if (split_out) {
            const long long prow = out.part(cta.split);
            float *dst = p.o_part + prow * Tr::DV + wg * 256 + 2 * q4;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                f2 v;
                v.x = o[4 * i + 2 * half] * inv;
                v.y = o[4 * i + 2 * half + 1] * inv;
                *reinterpret_cast<f2 *>(dst + i * 8) = v;
            }
            if (wg == 0 && q4 == 0) p.lse_part[prow] = lse2;
        } else {
            unsigned *dst =
                reinterpret_cast<unsigned *>(static_cast<char *>(p.out) + (out.out_index() + wg * 256 + 2 * q4) * 2);
#pragma unroll
            for (int i = 0; i < 32; ++i) dst[i * 4] = pack2<T>(o[4 * i + 2 * half] * inv, o[4 * i + 2 * half + 1] * inv);
            if (wg == 0 && q4 == 0 && p.lse) out.lse(lse2);
        }
    }
}

}  // namespace dcpattn
