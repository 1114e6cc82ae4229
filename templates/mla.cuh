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
//     looked up per token, so any page size and any 16-byte-aligned token stride works; the
//     next tile's page ids are loaded before the current tile's stage is waited for, so no
//     page-table latency sits between a freed stage and its copies; tokens past the CTA's
//     last visible key are zero-filled and never read from memory),
//     waits for its own copies, fences them into the async proxy and arrives on the stage's
//     `full` mbarrier. Two stages; the consumers free a stage through its `empty` mbarrier.
//   consumers: warpgroup w computes S = Q K^T for the 64 rows x keys [32w, 32w+32) of the
//     tile (wgmma m64n32k16, 36 k-steps; K from shared memory, Q from shared memory except
//     the last Q_REG_STEPS k-steps, whose Q fragments stay in registers for the whole CTA to
//     spare shared-memory bandwidth). Each turns its S into bf16/fp16 P fragments against the
//     running row max m ("lazy max": as long as no row of the tile tops m by more than
//     MAX_SLACK, P <= 2^MAX_SLACK and neither m nor O changes), writes them to shared memory,
//     and one named barrier (bar.red.or) both publishes them and tells whether any row of the
//     CTA topped m; only then (the first tile, rare later) do the warpgroups exchange row
//     maxima, take P again against the new max and rescale O (one more barrier). Warpgroup
//     w then accumulates O[:, 256w : 256w+256] += P (registers) x V (wgmma m64n256k16, V the
//     transposed view of the same K tile). Each consumer thread holds 128 fp32 of O. Two
//     more named barriers (2, 3) let a warpgroup overwrite its P words only after the other
//     has read them.
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
    static constexpr int Q_REG_STEPS = 10;   // k16 steps of QK^T whose Q operand stays in registers
    static constexpr float MAX_SLACK = 8.f;  // log2 units a tile's row max may top the running max
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
    static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
    // The consumers' setmaxnreg.inc waits for registers in the CTA's pool, which holds what the
    // launch allocated (384 threads x 168, the most __launch_bounds__(384, 1) leaves) plus what
    // the producer's setmaxnreg.dec gives back: asking for more than that never returns.
    static_assert(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 384 * 168, "register pool of the launch");
    static_assert(GROUP >= 1 && GROUP <= 128, "query heads");
    static_assert(STAGES == 2, "the parity arithmetic assumes two stages");
};

namespace mla_detail {

// The two consumer warpgroups only (barrier 0 is __syncthreads).
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
// consumer_sync that also returns whether any consumer thread passed true.
__device__ __forceinline__ bool consumer_sync_or(bool x) {
    unsigned r;
    asm volatile("{\n.reg .pred pi, po;\nsetp.ne.u32 pi, %1, 0;\nbar.red.or.pred po, 1, 256, pi;\nselp.u32 %0, 1, 0, po;\n}\n"
                 : "=r"(r)
                 : "r"((unsigned)x)
                 : "memory");
    return r != 0;
}
// One-way signal between the consumer warpgroups: barrier 2 + w is arrived at by the other
// warpgroup (128 threads) and waited at by warpgroup w (128 threads). Immediate barrier ids:
// a register id makes ptxas reserve all 16 barriers.
__device__ __forceinline__ void named_arrive(int id) {
    if (id == 2) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
    else asm volatile("bar.arrive 3, 256;\n" ::: "memory");
}
__device__ __forceinline__ void named_sync(int id) {
    if (id == 2) asm volatile("bar.sync 2, 256;\n" ::: "memory");
    else asm volatile("bar.sync 3, 256;\n" ::: "memory");
}

struct alignas(8) f2 { float x, y; };

// d (64 x 32) += A (64 x 16, registers) * B (16 x 32, smem, K-major).
template <class T>
__device__ __forceinline__ void wgmma_rs_n32(float (&d)[16], const unsigned (&a)[4], unsigned long long db);
#define DCPATTN_MLA_RS32(T, PT)                                                                                      \
    template <>                                                                                                      \
    __device__ __forceinline__ void wgmma_rs_n32<T>(float (&d)[16], const unsigned (&a)[4], unsigned long long db) { \
        asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32." PT "." PT " "                                     \
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "                       \
                     "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"                                                        \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                                                                                          \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));                                         \
    }
DCPATTN_MLA_RS32(bf16, "bf16")
DCPATTN_MLA_RS32(fp16, "f16")
#undef DCPATTN_MLA_RS32

// Keeps registers alive and unmoved up to here (wgmma A operands that may still be read).
__device__ __forceinline__ void pin_regs4(unsigned (&r)[4][4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
        asm volatile("" : "+r"(r[j][0]), "+r"(r[j][1]), "+r"(r[j][2]), "+r"(r[j][3])::"memory");
}

// A shared-memory descriptor from its two halves, built where it is used (volatile: the
// compiler would otherwise hoist all 72 loop-invariant descriptors into registers).
__device__ __forceinline__ unsigned long long desc_at(unsigned lo, unsigned hi) {
    unsigned long long d;
    asm volatile("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo), "r"(hi));
    return d;
}

// s = Q K^T over the 36 k16 steps of Dqk = 576 (the first step overwrites s); the last NQR
// steps take Q from registers (qr), sparing shared-memory bandwidth. The start address field
// (low 14 bits) never carries: shared memory offsets stay below 256 KB.
template <class T, int NQR>
__device__ __forceinline__ void mla_qk(float (&s)[16], unsigned long long dq, unsigned long long dk,
                                       const unsigned (&qr)[NQR][4]) {
    const unsigned ql = (unsigned)dq, qh = (unsigned)(dq >> 32), kl = (unsigned)dk, kh = (unsigned)(dk >> 32);
#pragma unroll
    for (int kk = 0; kk < 576 / 16; ++kk) {
        const unsigned koff = ((kk >> 2) * (64 * 128) + (kk & 3) * 32) >> 4;
        if (kk < 576 / 16 - NQR)
            wgmma_ss_n32<T>(s, desc_at(ql + koff, qh), desc_at(kl + koff, kh), kk > 0);
        else
            wgmma_rs_n32<T>(s, qr[kk - (576 / 16 - NQR)], desc_at(kl + koff, kh));
    }
}

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
    const AttnSmem sm = align_smem<1024u>(mla_smem);
    const unsigned base = sm.addr;
    unsigned char *gsm = sm.ptr;
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
        // page of token rnd * 16 + trow of tile t (clamped to the last visible key: the copy of a
        // token past it is zero-filled and reads nothing)
        auto pages = [&](int t, int (&pg)[KV_TILE / 16]) {
#pragma unroll
            for (int rnd = 0; rnd < KV_TILE / 16; ++rnd) {
                const int l = min(kv_begin + t * KV_TILE + rnd * 16 + trow, cta_hi - 1);
                pg[rnd] = ldg_i32(bt + (ps_pow2 ? (l >> ps_shift) : (l / ps)));
            }
        };
        int pg_next[KV_TILE / 16];
        if (n_tiles > 0) pages(0, pg_next);
        for (int t = 0; t < n_tiles; ++t) {
            const int s = t & 1;
            int pg[KV_TILE / 16];
#pragma unroll
            for (int rnd = 0; rnd < KV_TILE / 16; ++rnd) pg[rnd] = pg_next[rnd];
            if (t + 1 < n_tiles) pages(t + 1, pg_next);
            if (t >= Tr::STAGES) mbar_wait(bar_empty + 8 * s, ((t >> 1) - 1) & 1);
            const unsigned stage = sK + s * TILE_BYTES;
            const int ts = kv_begin + t * KV_TILE;
#pragma unroll
            for (int rnd = 0; rnd < KV_TILE / 16; ++rnd) {
                const int tok = rnd * 16 + trow, l = ts + tok;
                const bool ok = l < cta_hi;
                const int pi = ps_pow2 ? (l >> ps_shift) : (l / ps);
                const long long off = ok ? ((long long)pg[rnd] * p.k_sp + (long long)(l - pi * ps) * p.k_st) * 2 : 0;
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
    const int wg = warp >> 2, wi = warp & 3;
    const int g = lane >> 2, q4 = lane & 3;
    const int r_lo = wi * 16 + g, r_hi = r_lo + 8;
    const int lim_lo = cta.row_limit(r_lo), lim_hi = cta.row_limit(r_hi);
    const float scale = p.scale_log2;
    float *xm = reinterpret_cast<float *>(gsm + Tr::SMEM_X);        // [2][64]
    unsigned *pb = reinterpret_cast<unsigned *>(gsm + Tr::SMEM_P);  // P words [2][8][128]
    const int tw = tid & 127;

    const unsigned long long dq0 = sw128_desc(sQ, 16, 1024);
    const unsigned long long dk0 = sw128_desc(sK + wg * 32 * 128, 16, 1024);
    const unsigned long long dv0 = sw128_desc(sK + wg * 4 * BLOCK_BYTES, BLOCK_BYTES, 1024);

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float m_lo = neg_inf(), m_hi = neg_inf(), l_lo = 0.f, l_hi = 0.f;
    float sacc[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) sacc[i] = 0.f;
    // P = 2^(S - mu) of this thread's S fragments as packed A words (pw[n] = rows lo, hi of key
    // block n), and their row sums
    auto exp_pack = [&](float mu_lo, float mu_hi, float &sum_lo, float &sum_hi, unsigned (&pw)[4][2]) {
        sum_lo = sum_hi = 0.f;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            const float e0 = fast_exp2(sacc[4 * n + 0] - mu_lo), e1 = fast_exp2(sacc[4 * n + 1] - mu_lo);
            const float e2 = fast_exp2(sacc[4 * n + 2] - mu_hi), e3 = fast_exp2(sacc[4 * n + 3] - mu_hi);
            sum_lo += e0 + e1;
            sum_hi += e2 + e3;
            pw[n][0] = pack2<T>(e0, e1);
            pw[n][1] = pack2<T>(e2, e3);
        }
    };

    // the last NQR k16 steps of this warp's 16 Q rows as wgmma A fragments (ldmatrix from the
    // swizzled Q tile: matrix i = rows +8(i&1), channels +8(i>>1))
    constexpr int NQR = Tr::Q_REG_STEPS;
    unsigned qr[NQR][4];
#pragma unroll
    for (int i = 0; i < NQR; ++i) {
        const int mi = lane >> 3, row = wi * 16 + (mi & 1) * 8 + (lane & 7);
        const int c = (Tr::DQK / 16 - NQR + i) * 2 + (mi >> 1);
        ldsm_x4(sQ + (c >> 3) * BLOCK_BYTES + row * 128 + (((c & 7) ^ (row & 7)) << 4), qr[i]);
    }

    // Per tile: S(t) in sacc -> softmax against the running max -> P exchange (one barrier) ->
    // PV(t) -> wait -> free stage t -> QK(t+1) -> wait. (Queueing QK(t+1) behind PV(t) without
    // the wait in between measured slower: examples/BENCH_NOTES.md.)
    if (n_tiles > 0) {
        mbar_wait(bar_full, 0);
        fence_regs(sacc);
        wgmma_fence();
        mla_qk<T>(sacc, dq0, dk0, qr);
        wgmma_commit();
        wgmma_wait0();
    }
    fence_regs(sacc);

    for (int t = 0; t < n_tiles; ++t) {
        const int s = t & 1;
        const unsigned soff = s * TILE_BYTES;

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
        // Lazy max: P is taken against the running max m as long as no row of the tile tops it by
        // more than MAX_SLACK (P <= 2^MAX_SLACK then), so the common tile needs no exchange of
        // maxima and no rescale of O: one barrier, which also ORs the rows' "tops it" flags.
        // A row that has seen nothing (m = -inf) tops it with any visible key.
        const bool up = mx_lo > m_lo + Tr::MAX_SLACK || mx_hi > m_hi + Tr::MAX_SLACK;
        unsigned pa[4][4];
        {
            const float mu_lo = m_lo == neg_inf() ? 0.f : m_lo, mu_hi = m_hi == neg_inf() ? 0.f : m_hi;
            float sum_lo, sum_hi;
            unsigned pw[4][2];
            exp_pack(mu_lo, mu_hi, sum_lo, sum_hi, pw);
            // the other warpgroup has read this warpgroup's P of the previous tile (it signals
            // once its PV of that tile has completed)
            if (t > 0) named_sync(2 + wg);
#pragma unroll
            for (int k = 0; k < 8; ++k) pb[(wg * 8 + k) * 128 + tw] = pw[k >> 1][k & 1];
            if (!consumer_sync_or(up)) {  // #1: P of both halves (common case)
                l_lo += sum_lo;
                l_hi += sum_hi;
            } else {
                // some row of the CTA moves its max: every row takes max(m, both halves' maxima),
                // P is rewritten against it and O rescaled
                const float nm_lo = fmaxf(fmaxf(mx_lo, xm[(wg ^ 1) * 64 + r_lo]), m_lo);
                const float nm_hi = fmaxf(fmaxf(mx_hi, xm[(wg ^ 1) * 64 + r_hi]), m_hi);
                const float nu_lo = nm_lo == neg_inf() ? 0.f : nm_lo, nu_hi = nm_hi == neg_inf() ? 0.f : nm_hi;
                const bool same_lo = m_lo == nm_lo, same_hi = m_hi == nm_hi;
                const float al_lo = same_lo ? 1.f : fast_exp2(m_lo - nu_lo);
                const float al_hi = same_hi ? 1.f : fast_exp2(m_hi - nu_hi);
                const bool rescale = __any_sync(0xffffffffu, !(same_lo && same_hi));
                m_lo = nm_lo;
                m_hi = nm_hi;
                exp_pack(nu_lo, nu_hi, sum_lo, sum_hi, pw);
                l_lo = l_lo * al_lo + sum_lo;
                l_hi = l_hi * al_hi + sum_hi;
#pragma unroll
                for (int k = 0; k < 8; ++k) pb[(wg * 8 + k) * 128 + tw] = pw[k >> 1][k & 1];
                if (rescale) {
#pragma unroll
                    for (int i = 0; i < 32; ++i) {
                        o[4 * i + 0] *= al_lo;
                        o[4 * i + 1] *= al_lo;
                        o[4 * i + 2] *= al_hi;
                        o[4 * i + 3] *= al_hi;
                    }
                }
                consumer_sync();  // #2: P rewritten (and maxima read: xm is free)
            }
            // A fragments of the tile's four k16 steps: this warpgroup's keys from registers, the
            // other's from shared memory (fragment k16 step j: rows lo/hi x keys 16j + 2q4 (+8))
            unsigned pot[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) pot[k] = pb[((wg ^ 1) * 8 + k) * 128 + tw];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int j = jj & 1;
                const bool mine = (jj >> 1) == wg;
                pa[jj][0] = mine ? pw[2 * j][0] : pot[4 * j + 0];
                pa[jj][1] = mine ? pw[2 * j][1] : pot[4 * j + 1];
                pa[jj][2] = mine ? pw[2 * j + 1][0] : pot[4 * j + 2];
                pa[jj][3] = mine ? pw[2 * j + 1][1] : pot[4 * j + 3];
            }
            pin_regs4(pa);
        }

        // O[:, 256 wg : 256 wg + 256] += P V, keys in four k16 steps
        fence_regs(o);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; ++j) wgmma_rs_n256<T>(o, pa[j], dv0 + ((soff + j * 16 * 128) >> 4));
        wgmma_commit();
        wgmma_wait<0>();  // PV(t) done: stage t is free, and this warpgroup is done with P
        mbar_arrive(bar_empty + 8 * s);
        if (t + 1 < n_tiles) {
            named_arrive(2 + (wg ^ 1));
            const int s1 = s ^ 1;
            mbar_wait(bar_full + 8 * s1, ((t + 1) >> 1) & 1);
            fence_regs(sacc);
            wgmma_fence();
            mla_qk<T>(sacc, dq0, dk0 + ((s1 * TILE_BYTES) >> 4), qr);
            wgmma_commit();
            wgmma_wait<0>();
        }
        pin_regs4(pa);
        fence_regs(o);
        fence_regs(sacc);
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
