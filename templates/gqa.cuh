// gqa.cuh — paged GQA/MQA decode attention over one rank's DCP shard (docs/contract.md 1-4, 8).
//
// One segment = one row tile of one sequence x one KV head x a range of its keys: M_TILE packed
// query rows, where packed row R = z*M_TILE + m is query token R / GROUP and q head
// kvh*GROUP + R % GROUP, so every query row that shares a KV head reads each KV byte once.
// Two kernels run segments (entries at the end of this file): gqa_decode, one CTA per
// (sequence, split) x KV head x row tile; gqa_decode_balanced, the balanced schedule
// (attn.cuh, AttnSchedule): a CTA per worker and KV head runs the segments of its equal share
// of the batch's work, and the pieces of a job cut between workers are merged by the last one
// (the FP8 wgmma tile: a third instance of it, every segment's rows stacked, see FP8 below).
//
// Stages of a segment (gqa_segment), by name (gqa_detail:: here, attn.cuh for the shared ones):
//   load Q          load_q_tile (cp.async of the Q tile, sources from AttnCta::q_chunk), then,
//                   once it landed, load_q_frags (the Q fragments a warp keeps in registers;
//                   FRAG8: q_frag8; PRODUCER: q_tile_to_e4m3 instead); operand_rows: where
//                   each lane's ldmatrix rows of Q, K and V start
//   per KV tile
//     gather        KvGather: prologue (the first STAGES - 1 tiles), then per tile issue (the
//                   cp.async copies of a tile, at g_off) and fetch_page (the page-table lookup
//                   one tile ahead); FP8 but not FRAG8: convert_tile (e4m3 -> fp16 tiles);
//                   PRODUCER: the gather and V's conversion by the producer warpgroup, in its
//                   loop of gqa_segment
//     scores        scores_step (S = Q K^T, raw, on mma.sync or wgmma); FRAG8:
//                   scores_step_frag8 (K fragments from the e4m3 stage); PRODUCER:
//                   scores_issue_e4m3 (e4m3 wgmma on the K stage; stacked rows: then
//                   fold_stacked), in the math warpgroup's producer_math_tiles
//     mask          mask_scores (attn.cuh; mask_key per score), on tiles that reach a limit
//     softmax       online_softmax_step (attn.cuh; row_max, exp_scores), scale_rows of O where
//                   a row max of the warp moved
//     PV            p_fragment (attn.cuh: P as A fragments) and the MMAs, in the loop body
//                   (FRAG8: V fragments from the e4m3 stage, then frag8_unpermute of O once)
//   epilogue        the wgmma path without a cluster writes its rows from registers; else
//                   stash_state (a warp's m, l and O into shared memory) and the split merge
//                   over the warps (and the cluster's CTAs), in gqa_segment; a job of the
//                   balanced schedule cut between workers: AttnSchedule::finish_cut (attn.cuh)
// PV and the epilogue are written out in gqa_segment: as functions they compiled to different
// SASS (docs/architecture.md, "Kernel stages"). Timeline builds (templates/timeline.cuh) mark
// where each stage ends (tl.mark); elsewhere the marks are nothing.
//
// Warps: WARPS_M = M_TILE/16 row groups x WARPS_N = WARPS/WARPS_M key groups. Each warp
// owns 16 rows and KV_TILE/WARPS_N keys of every tile, keeps its own running max, sum
// and O (16 x D, fp32, in registers), and the WARPS_N partial states of a row group are
// merged through shared memory at the end (flash-decoding inside the CTA).
//
// Pipeline: K and V tiles of KV_TILE tokens x D are gathered row by row from the page
// table with 16-byte cp.async (zero fill past the end: keys past the last visible one are
// never read, and their zero V rows meet P = 0 exactly), STAGES tiles deep. The page
// indices of the tile after next are loaded into registers one iteration early, so no
// table lookup sits in front of a copy. Shared tiles are XOR-swizzled so ldmatrix is free
// of bank conflicts; QK^T and PV run on mma.sync m16n8k16 with fp32 accumulation and the
// S accumulators become the A operand of PV without leaving registers. Softmax in base 2 on
// raw scores (the scale joins the exponent's FFMA; the mask is a branch taken only by tiles
// that reach a row's limit), O rescaled only when a row max of the warp moves: the tile loop
// is short in instructions, which the q_len 4-8 rows need (docs/performance.md).
//
// Hopper (sm_90a), one warpgroup of 64 rows (M_TILE 64, 128 threads, D 128; FP8: and a
// producer warpgroup, below): the same pipeline and softmax, but QK^T and PV run on wgmma
// (m64n64k16 and m64n128k16, Q and P from registers, K and V from shared memory), so the
// tiles are read from shared memory once per CTA instead of once per warp. Tiles are then
// stored as 128-byte-swizzled column blocks of 64 channels (the chunk c of row r of a block
// at chunk c ^ (r % 8), blocks 1024-byte aligned): a K-major operand for QK^T and an
// MN-major one for PV. Elsewhere rows are stored whole with the XOR of chunk_xor below; both
// layouts keep ldmatrix free of bank conflicts.
// The two paths share the fragment layouts (an m64nN accumulator is four m16nN mma.sync
// accumulators, one per warp), so everything between the MMAs is one code.
//
// FP8 (e4m3) cache: the pipeline gathers rows of bytes (half the copies of a 16-bit cache),
// and the MMAs run in fp16 whatever T is (MT): e4m3 -> fp16 is exact and one conversion
// instruction per pair from sm_89 on (e4m3x4_to, common.cuh), and a bf16 Q tile is rescaled
// by a power of two into fp16 once it lands (q_tile_to_fp16), the power joining the softmax
// scale. On the mma.sync path (FRAG8) the stages are swizzled like T rows and the fragments
// are read from them directly: 8-byte loads for K (in a channel order that Q's fragments
// share, see q_frag8) and ldmatrix.trans for V (O's columns then come out permuted and are
// put back once, frag8_unpermute), each byte pair turned into two fp16 values in registers.
// Shared memory then carries one byte per element, which a decode step at twice the tokens
// per second needs. Elsewhere (the wgmma path, whose B operands come from shared memory, and
// head dim 96, whose 96-byte rows the swizzle does not fit) each landed V tile, and but for the
// wgmma path each K tile, is converted into fp16 tiles (convert_tile) for the 16-bit code. On the
// wgmma path (PRODUCER) S = Q K^T runs on e4m3 wgmma straight from the K stage as it landed (in
// 128-byte swizzle atoms, g_off), Q split once into two e4m3 tiles hi + lo (q_tile_to_e4m3:
// exact for a bf16 query, rescaled by a power of two), and a second warpgroup gathers and
// converts V: 256 threads, 128 registers each at launch, two CTAs per SM; the producer gives
// 32 of its registers to the math warpgroup (setmaxnreg) and converts the V of tile t into
// one of two fp16 tiles while the math warpgroup computes tile t - 1 (four e4m3 stages: the K
// the math warpgroup reads, the tile being converted, two in flight), one barrier between them
// a tile. The conversions and the gather, half of a tile's instructions,
// leave the chain of wgmmas and softmax, and each SM issues from four warpgroups. k_scale
// joins the softmax scale, v_scale multiplies O before the epilogue; both are read from
// device memory by the kernel. A segment of at most 32 rows (q_len x group <= 32, or the last
// row tile of a KV head) is stacked: row r's hi and lo parts take rows 16 (r / 8) + r % 8 and
// that + 8 of one e4m3 tile, the two rows one thread's fragments hold, so S is one pass of k32
// steps instead of two and the thread adds its two halves (fold_stacked; rows 32-63 of the
// 64-row tile would be zeros). Softmax, PV and the epilogue run as for 64 rows, both fragment
// rows of a thread carrying the same row (G1F, G2F at q_len 4: 4-5 % faster).
//
// Dynamic shared memory (bytes), as the generator computes it:
//     STAGES*KV_TILE*2*HEAD_DIM*2 + M_TILE*HEAD_DIM*2 (+ 1024 alignment slack on the wgmma path)
// (Q tile, then STAGES K tiles, then STAGES V tiles; the epilogue reuses it.) FP8 cache:
//     STAGES*KV_TILE*2*HEAD_DIM + M_TILE*HEAD_DIM*2 (+ KV_TILE*2*HEAD_DIM*2 where tiles are
//     converted: head dim 96, and the wgmma path, + 1024 there, STAGES = 4: 113 KiB, two CTAs
//     in an H200 SM's 228 KiB with the 1 KiB each reserves)
// (Q tile, [two converted tiles: K and V, or PRODUCER's two V tiles,] STAGES e4m3 K tiles,
// STAGES e4m3 V tiles.)
//
// Alignment: q, k, v, out and o_part 16-byte aligned; every element stride a multiple
// of 8 elements, of 16 for an e4m3 cache (the host validates this).
#pragma once
#include "attn.cuh"
#include "timeline.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DCPATTN_GQA_WGMMA 1
#else
#define DCPATTN_GQA_WGMMA 0
#endif

namespace dcpattn {

template <class T_, class KV_T_, int HEAD_DIM_, int GROUP_, int M_TILE_, int KV_TILE_, int STAGES_, int THREADS_,
          bool WGMMA_>
struct GqaTraits {
    using T = T_;
    using KV_T = KV_T_;  // the cache's element type: T, or e4m3 (converted to fp16, see MT)
    static constexpr int D = HEAD_DIM_;
    static constexpr int GROUP = GROUP_;
    static constexpr int M_TILE = M_TILE_;
    static constexpr int KV_TILE = KV_TILE_;
    static constexpr int STAGES = STAGES_;
    static constexpr int THREADS = THREADS_;

    // wgmma path (see the top of this file): where the generator asks for it and the arch has it
    static constexpr bool WG = WGMMA_ && DCPATTN_GQA_WGMMA;
    static constexpr bool FP8 = sizeof(KV_T) == 1;
    // FP8 on the wgmma path: a producer warpgroup (the second of THREADS = 256) gathers the
    // tiles and converts V while the first computes (gqa_segment), S = Q K^T running on e4m3
    // wgmma from the K stage as it landed; elsewhere every warp gathers and converts.
    // ROLE_THREADS: the threads of one role, the math warps and the gather's.
    static constexpr bool PRODUCER = FP8 && WG;
    static constexpr int ROLE_THREADS = PRODUCER ? THREADS / 2 : THREADS;
    static constexpr int PRODUCER_REGS = 96;  // of the 2 x 128 a thread pair has (the math warpgroup: the rest)
    static constexpr int WARPS = ROLE_THREADS / 32;
    static constexpr int WARPS_M = M_TILE / 16;
    static constexpr int WARPS_N = WARPS / WARPS_M;
    static constexpr int NW = KV_TILE / WARPS_N;  // keys of a tile per warp
    static constexpr int CHUNKS = D / 8;          // 16-byte chunks per row
    static constexpr int ROW_BYTES = D * 2;
    static constexpr int TILE_BYTES = KV_TILE * ROW_BYTES;  // one K or one V tile of T
    // FP8 cache: the STAGES-deep pipeline holds e4m3 tiles (G: rows of D bytes). FRAG8: they
    // are swizzled like T rows and read straight into mma.sync fragments; PRODUCER: K is read
    // by wgmma where it landed (128-byte swizzle, g_off) and V converted into the two T tiles
    // at SMEM_K, in turn (the one the math warpgroup reads and the one being converted); else
    // each tile's K and V are converted into the T tiles at SMEM_K and SMEM_V. The generator
    // decides the same (gen/dcpattn/gqa.lua; the instance checks that both agree on the shared
    // memory).
    static constexpr int KV_BYTES = sizeof(KV_T);
    static constexpr int G_CHUNKS = D * KV_BYTES / 16;  // 16-byte chunks per cache row
    static constexpr int G_TILE_BYTES = FP8 ? KV_TILE * D : TILE_BYTES;
    static constexpr bool FRAG8 = FP8 && !WGMMA_ && (G_CHUNKS % 8 == 0 || G_CHUNKS % 8 == 4) &&
                                  WARPS_N * M_TILE * D * 4 <= 2 * STAGES * G_TILE_BYTES;
    // 16-bit tiles per operand (the same with the generator's wgmma flag on an arch without
    // wgmma: the shared memory is the generator's, run on mma.sync with all warps)
    static constexpr int T_TILES = FRAG8 ? 0 : FP8 ? 1 : STAGES;
    static constexpr int Q8_BYTES = M_TILE * D;  // PRODUCER: Q as two e4m3 tiles, hi then lo (q_tile_to_e4m3)
    // The MMAs' element type: fp16 with an e4m3 cache (see the top of this file), else T.
    using MT = typename type_if<FP8, fp16, T>::type;
    static constexpr int SMEM_Q = 0;
    static constexpr int SMEM_K = M_TILE * ROW_BYTES;
    static constexpr int SMEM_V = SMEM_K + T_TILES * TILE_BYTES;
    static constexpr int SMEM_GK = FP8 ? SMEM_V + T_TILES * TILE_BYTES : SMEM_K;
    static constexpr int SMEM_GV = FP8 ? SMEM_GK + STAGES * G_TILE_BYTES : SMEM_V;
    static constexpr int SMEM_BYTES = SMEM_GV + STAGES * G_TILE_BYTES;
    static constexpr int WROWS = 32 / G_CHUNKS;  // token rows one warp copies per pass
    static constexpr int KV_LOADS = (KV_TILE + WARPS * WROWS - 1) / (WARPS * WROWS);  // passes per tile
    static constexpr int Q_LOADS = (M_TILE * CHUNKS + THREADS - 1) / THREADS;
    // Q fragments stay in registers only where that still leaves room for MIN_BLOCKS CTAs
    // (PRODUCER: S = Q K^T reads Q from shared memory).
    static constexpr bool Q_IN_REGS = D <= 128 && THREADS <= 128;
    // CTAs per SM the register budget is cut for (__launch_bounds__), from an estimate of
    // the live registers (O, S, Q fragments, ~48 others) and capped by shared memory; heads
    // over 128 take what they need.
    static constexpr int SMEM_PER_SM = 227 * 1024;
    static constexpr int REGS_EST = D / 2 + NW / 2 + (Q_IN_REGS ? D / 4 + 8 : 0) + 48;
    static constexpr int MIN_BLOCKS_REGS = D > 128 ? 1 : 65536 / (THREADS * REGS_EST);
    static constexpr int MIN_BLOCKS_SMEM = SMEM_PER_SM / (SMEM_BYTES + 1024);
    // PRODUCER: two CTAs, 128 registers a thread (the math warpgroup's O and S fit).
    static constexpr int MIN_BLOCKS = PRODUCER ? 2
                                      : MIN_BLOCKS_SMEM < MIN_BLOCKS_REGS ? MIN_BLOCKS_SMEM
                                      : MIN_BLOCKS_REGS < 1               ? 1
                                                                          : MIN_BLOCKS_REGS;

    static_assert(D % 32 == 0 && D >= 64 && D <= 256, "head dim");
    static_assert(GROUP >= 1, "group");
    static_assert(M_TILE % 16 == 0 && THREADS % 32 == 0 && WARPS % WARPS_M == 0, "warps");
    static_assert(KV_TILE % (16 * WARPS_N) == 0, "KV tile must give each warp 16k keys");
    static_assert(STAGES >= 2, "stages");
    static_assert(KV_BYTES == sizeof(T) || FP8, "a 16-bit cache has the query's type");
    static_assert(D * KV_BYTES % 16 == 0, "cache rows in 16-byte chunks");
    static_assert(WROWS >= 1 && KV_LOADS * WROWS <= 32, "one lookup lane per token of a warp");
    static_assert(CHUNKS % 8 == 0 || CHUNKS % 8 == 4, "swizzle");
    static_assert(!WGMMA_ || (M_TILE == 64 && THREADS == (FP8 ? 256 : 128) && D == 128 && KV_TILE == 64),
                  "wgmma path: one warpgroup of 64 rows (and the producer's), head dim 128, 64-key tiles");
    static_assert(!WG || PRODUCER || Q_IN_REGS, "wgmma path: Q from registers, or (PRODUCER) from shared memory");
    static_assert(!PRODUCER || (G_CHUNKS == 8 && STAGES >= 3 && 2 * Q8_BYTES == M_TILE * ROW_BYTES &&
                                SMEM_GK % 1024 == 0 && G_TILE_BYTES % 1024 == 0),
                  "producer: 128-byte e4m3 rows in 1024-byte aligned stages, one for the math warpgroup's K "
                  "beside two in flight");
    // epilogue: m, l in the Q region; the WARPS_N partial O in the K/V region
    static_assert(2 * WARPS_N * M_TILE * 4 <= SMEM_K, "epilogue m/l");
    static_assert(WARPS_N * M_TILE * D * 4 <= SMEM_BYTES - SMEM_K, "epilogue O");
};

template <class Tr> using GqaCta = AttnCta<Tr::GROUP, Tr::M_TILE, Tr::KV_TILE>;

namespace gqa_detail {

// XOR applied to the 16-byte chunk index of a row so that the 8 rows one ldmatrix phase
// reads land in 8 different bank groups. Depends only on row % 8; stays inside the row.
template <int CHUNKS> __device__ __forceinline__ int chunk_xor(int row) {
    if constexpr (CHUNKS % 8 == 0) return row & 7;
    else return (row >> 1) & 3;  // CHUNKS % 8 == 4: rows alternate halves of a 128-byte line
}

// Byte offset of 16-byte chunk c of row r in a tile of ROWS rows.
template <class Tr, int ROWS> __device__ __forceinline__ unsigned tile_off(int r, int c) {
    if constexpr (Tr::WG) return (c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
    else return r * Tr::ROW_BYTES + ((c ^ chunk_xor<Tr::CHUNKS>(r)) << 4);
}

// Byte offset of 16-byte chunk c of row r in a stage of the gather: T rows as tile_off; e4m3
// rows of D bytes swizzled the same way where fragments are read from them (FRAG8) or in
// 128-byte swizzle atoms, the K-major operand of the e4m3 wgmma (PRODUCER: 128-byte rows),
// plain where the tile is converted first.
template <class Tr> __device__ __forceinline__ unsigned g_off(int r, int c) {
    if constexpr (Tr::FRAG8 || Tr::PRODUCER) return r * Tr::D + ((c ^ chunk_xor<Tr::G_CHUNKS>(r)) << 4);
    else if constexpr (Tr::FP8) return r * Tr::D + c * 16;
    else return tile_off<Tr, Tr::KV_TILE>(r, c);
}
// Byte offset of the 8 e4m3 bytes 8c .. 8c + 7 of row r in an e4m3 stage (and, PRODUCER, in
// Q's e4m3 tiles, which take the K stage's layout): half c % 2 of chunk c / 2.
template <class Tr> __device__ __forceinline__ unsigned g_piece(int r, int c) {
    return g_off<Tr>(r, c >> 1) + (c & 1) * 8;
}

// FRAG8 fragments. mma.sync's k16 operands pair channels (2c, 2c+1) and (2c+8, 2c+9) of a
// lane c = lane % 4, which in an e4m3 row are bytes apart. Scores do not depend on the order of
// the channels, so QK^T takes them in another order, the same for Q and K: in each block of 32
// channels, lane c's 8 bytes 8c .. 8c+7 are its k16 steps 2*blk (bytes 0-3: b0 then b1) and
// 2*blk + 1 (bytes 4-7): one 8-byte load per key row and block, and a 16-byte Q row piece.
// Q's A fragments of steps 2*blk and 2*blk + 1, rows r and r + 8 of the Q tile, in that order:
template <class Tr>
__device__ __forceinline__ void q_frag8(unsigned sQ, int r, int blk, int c, unsigned (&a0)[4], unsigned (&a1)[4]) {
    unsigned lo[4], hi[4];
    const unsigned pl = sQ + tile_off<Tr, Tr::M_TILE>(r, 4 * blk + c), ph = sQ + tile_off<Tr, Tr::M_TILE>(r + 8, 4 * blk + c);
    ld_shared_u2(pl, lo[0], lo[1]);
    ld_shared_u2(pl + 8, lo[2], lo[3]);
    ld_shared_u2(ph, hi[0], hi[1]);
    ld_shared_u2(ph + 8, hi[2], hi[3]);
    a0[0] = lo[0], a0[1] = hi[0], a0[2] = lo[1], a0[3] = hi[1];
    a1[0] = lo[2], a1[1] = hi[2], a1[2] = lo[3], a1[3] = hi[3];
}
// PV's V operand pairs keys, one channel per n index: ldmatrix.trans over e4m3 rows read as
// 16-bit units gives a lane keys (2c, 2c+1) x channels (2u, 2u+1) of a 16-channel chunk, split
// by e4m3x4_split into an operand for the even channels and one for the odd ones. So O's n8
// block 2u holds the even channels of 16-channel group u and block 2u + 1 the odd ones (lane
// c: channels 4c, 4c+2 and 4c+1, 4c+3); this puts them back where the 16-bit path has them
// (lane c: 2c, 2c+1 in block 2u and 8+2c, 9+2c in block 2u + 1), by shuffles inside the quad.
template <int D> __device__ __forceinline__ void frag8_unpermute(float (&o)[D / 8][4], int lane) {
    const int src = (lane & ~3) | ((lane & 3) >> 1);  // holder of 2c, 2c+1; + 2: of 8+2c, 9+2c
    const bool odd = lane & 1;
#pragma unroll
    for (int u = 0; u < D / 16; ++u) {
#pragma unroll
        for (int h = 0; h < 4; h += 2) {  // row lo, row hi
            const float c0 = o[2 * u][h], c1 = o[2 * u + 1][h], c2 = o[2 * u][h + 1], c3 = o[2 * u + 1][h + 1];
            float t[4];
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const float x0 = __shfl_sync(0xffffffffu, c0, src + 2 * k), x2 = __shfl_sync(0xffffffffu, c2, src + 2 * k);
                const float x1 = __shfl_sync(0xffffffffu, c1, src + 2 * k), x3 = __shfl_sync(0xffffffffu, c3, src + 2 * k);
                t[2 * k] = odd ? x2 : x0;
                t[2 * k + 1] = odd ? x3 : x1;
            }
            o[2 * u][h] = t[0], o[2 * u][h + 1] = t[1], o[2 * u + 1][h] = t[2], o[2 * u + 1][h + 1] = t[3];
        }
    }
}

// The Q tile at sQ (T, tile_off): the bits of its largest magnitude, found by each warp over the
// whole tile (a few KB), so that no warp waits for the others (bf16 and fp16 bits order as their
// values).
template <class Tr> __device__ __forceinline__ unsigned q_tile_max_bits(unsigned sQ, int lane) {
    constexpr int ITEMS = Tr::M_TILE * Tr::CHUNKS;
    unsigned mx = 0;
    for (int i = lane; i < ITEMS; i += 32) {
        unsigned v[4];
        ld_shared_u4(sQ + tile_off<Tr, Tr::M_TILE>(i / Tr::CHUNKS, i % Tr::CHUNKS), v);
#pragma unroll
        for (int k = 0; k < 4; ++k) mx = max(mx, bf16_mag2(v[k]));
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, d));
    return mx;
}

// FP8 cache, bf16 query: the landed Q tile at sQ into fp16 in place, times 2^-e (attn.cuh,
// q_exponent, from q_tile_max_bits); returns 2^e, by which the scores are then scaled. Ends
// with the tile ready for every warp.
template <class Tr> __device__ __forceinline__ float q_tile_to_fp16(unsigned sQ, int tid, int lane) {
    constexpr int ITEMS = Tr::M_TILE * Tr::CHUNKS, MINE = (ITEMS + Tr::THREADS - 1) / Tr::THREADS;
    const unsigned mx = q_tile_max_bits<Tr>(sQ, lane);
    const int e = q_exponent<bf16>(mx, Q_FP16_TOP);
    const float down = exp2i(-e);
    __syncthreads();  // every warp has read the tile; a thread rewrites only its own chunks
#pragma unroll
    for (int j = 0; j < MINE; ++j) {
        const int i = tid + j * Tr::THREADS;
        if (i >= ITEMS) break;
        const unsigned a = sQ + tile_off<Tr, Tr::M_TILE>(i / Tr::CHUNKS, i % Tr::CHUNKS);
        unsigned v[4];
        ld_shared_u4(a, v);
        bf16x8_to_fp16(v, down);
        st_shared_u4(a, v);
    }
    __syncthreads();
    return exp2i(e);
}

// PRODUCER: the landed Q tile at sQ (T, tile_off) times 2^-e as two e4m3 tiles, hi at sQ and lo
// at sQ + Q8_BYTES (f32x2_to_e4m3x2_hilo; laid out as the K stage, g_piece: the K-major A
// operand of S's e4m3 wgmma), with e such that the tile's largest magnitude lies in [2^7, 2^8).
// hi + lo is then exact for a bf16 element down to 2^-9 of the largest (hi keeps 4 of its 8
// significant bits, lo the other 4), for fp16 to 2^-8 of itself; below that it is off by at
// most 2^-17 of the largest. Returns 2^e, by which the scores are then scaled. Ends with the tiles
// visible to every thread and to wgmma. STACKED (at most M_TILE / 2 rows, the rest zero): one
// tile at sQ, row r's hi at stacked_row(r) and its lo 8 rows below.
__device__ __forceinline__ int stacked_row(int r) { return 16 * (r >> 3) + (r & 7); }
template <class Tr, bool STACKED> __device__ __forceinline__ float q_tile_to_e4m3(unsigned sQ, int tid, int lane) {
    using T = typename Tr::T;
    constexpr int ITEMS = Tr::M_TILE * Tr::CHUNKS, MINE = ITEMS / Tr::THREADS;
    static_assert(ITEMS % Tr::THREADS == 0, "Q tile: whole chunks a thread");
    const unsigned mx = q_tile_max_bits<Tr>(sQ, lane);
    const int e = q_exponent<T>(mx, 7);  // [2^7, 2^8): hi never saturates (448)
    const float down = exp2i(-e);
    unsigned v[MINE][4];
#pragma unroll
    for (int j = 0; j < MINE; ++j) {
        const int i = tid + j * Tr::THREADS;
        ld_shared_u4(sQ + tile_off<Tr, Tr::M_TILE>(i / Tr::CHUNKS, i % Tr::CHUNKS), v[j]);
    }
    __syncthreads();  // the tile is read: its space takes the e4m3 tiles
#pragma unroll
    for (int j = 0; j < MINE; ++j) {
        const int i = tid + j * Tr::THREADS, r = i / Tr::CHUNKS, c = i % Tr::CHUNKS;
        unsigned hi[4], lo[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            f32x2_to_e4m3x2_hilo(lo_float(T{}, v[j][k]) * down, hi_float(T{}, v[j][k]) * down, hi[k], lo[k]);
        if (STACKED && r >= Tr::M_TILE / 2) continue;
        const unsigned a = sQ + g_piece<Tr>(STACKED ? stacked_row(r) : r, c);
        const unsigned b = STACKED ? sQ + g_piece<Tr>(stacked_row(r) + 8, c) : a + Tr::Q8_BYTES;
        st_shared_u2(a, hi[0] | hi[1] << 16, hi[2] | hi[3] << 16);
        st_shared_u2(b, lo[0] | lo[1] << 16, lo[2] | lo[3] << 16);
    }
    fence_proxy_async();  // -> visible to wgmma
    __syncthreads();
    return exp2i(e);
}

// FP8 cache: the e4m3 tile at shared address g (KV_TILE rows of D bytes) into the fp16 tile at t
// (the layout of tile_off). A thread takes 8 bytes -> one 16-byte chunk per pass: a warp reads
// 256 contiguous bytes and writes 32 chunks of rows whose swizzle spreads them over all banks.
// All passes' loads go out before the first conversion (one shared-memory latency, not one per
// pass).
template <class Tr> __device__ __forceinline__ void convert_tile(unsigned g, unsigned t, int tid) {
    constexpr int ITEMS = Tr::KV_TILE * Tr::CHUNKS, PASSES = ITEMS / Tr::ROLE_THREADS;
    static_assert(ITEMS % Tr::ROLE_THREADS == 0, "conversion: whole passes");
    unsigned w[PASSES][2];
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
        const int i = tid + j * Tr::ROLE_THREADS, r = i / Tr::CHUNKS, c = i % Tr::CHUNKS;
        ld_shared_u2(g + g_piece<Tr>(r, c), w[j][0], w[j][1]);
    }
#pragma unroll
    for (int j = 0; j < PASSES; ++j) {
        const int i = tid + j * Tr::ROLE_THREADS, r = i / Tr::CHUNKS, c = i % Tr::CHUNKS;
        unsigned a[4];
        e4m3x4_to<typename Tr::MT>(w[j][0], a[0], a[1]);
        e4m3x4_to<typename Tr::MT>(w[j][1], a[2], a[3]);
        st_shared_u4(t + tile_off<Tr, Tr::KV_TILE>(r, c), a);
    }
}

// Stage "load Q": the M_TILE packed rows of the CTA's tile (zero rows past the end) into the Q
// tile at sQ, as one cp.async group.
template <class Tr>
__device__ __forceinline__ void load_q_tile(const dcpattn_attn_kparams &p, const GqaCta<Tr> &cta, int kvh, unsigned sQ,
                                            int tid) {
    constexpr int M_TILE = Tr::M_TILE, CHUNKS = Tr::CHUNKS, THREADS = Tr::THREADS;
    const char *qb = static_cast<const char *>(p.q);
#pragma unroll
    for (int j = 0; j < Tr::Q_LOADS; ++j) {
        const int idx = tid + j * THREADS;
        if (Tr::Q_LOADS * THREADS > M_TILE * CHUNKS && idx >= M_TILE * CHUNKS) break;
        const int r = idx / CHUNKS, c = idx % CHUNKS, R = cta.row0 + r;
        const bool ok = R < cta.nrows;
        const long long off = cta.q_chunk(kvh * Tr::GROUP, R, c);
        cp_async16(sQ + tile_off<Tr, M_TILE>(r, c), qb + off, ok ? 16 : 0);
    }
    cp_async_commit();
}

// Stage "gather": K and V tiles of KV_TILE tokens from the page table into the pipeline's stages
// at sGK and sGV, one cp.async group per tile. Each warp copies WROWS whole token rows per pass
// (lane -> 16-byte chunk lane % G_CHUNKS of token lane / G_CHUNKS; lanes past WROWS*G_CHUNKS
// idle), KV_LOADS passes per tile. One lane per token of the warp looks the token up in the
// page table one tile ahead (pg, slot) and the copying lanes fetch its page and slot with a
// shuffle.
template <class Tr> struct KvGather {
    static constexpr int WROWS = Tr::WROWS, KV_LOADS = Tr::KV_LOADS, KV_TILE = Tr::KV_TILE;
    static constexpr int G_CHUNKS = Tr::G_CHUNKS, KVB = Tr::KV_BYTES;
    const dcpattn_attn_kparams &p;
    const int *bt;
    int ps, ps_shift;
    bool ps_pow2;
    int ld_sub, ld_c;  // the token row (of a pass) and chunk this lane copies
    bool ld_lane;
    const char *kb, *vb;
    int lk_tok;  // the token of a tile this lane looks up: pass lane / WROWS, row lane % WROWS
    bool lk_lane;
    int warp, kv_begin, cta_hi;
    unsigned sGK, sGV;
    int slot, pg;  // slot and page (-1: past the end, zero fill) of lk_tok in the next tile to issue

    __device__ __forceinline__ KvGather(const dcpattn_attn_kparams &p_, const GqaCta<Tr> &cta, int kvh, unsigned sGK_,
                                        unsigned sGV_, int lane, int warp_)
        : p(p_) {
        bt = p.block_table + (long long)cta.b * p.bt_stride;
        ps = p.page_size;
        ps_pow2 = (ps & (ps - 1)) == 0;
        ps_shift = __ffs(ps) - 1;
        ld_sub = lane / G_CHUNKS;
        ld_c = lane % G_CHUNKS;
        ld_lane = ld_sub < WROWS;
        kb = static_cast<const char *>(p.k) + ((long long)kvh * p.k_sh + ld_c * (16 / KVB)) * KVB;
        vb = static_cast<const char *>(p.v) + ((long long)kvh * p.v_sh + ld_c * (16 / KVB)) * KVB;
        lk_tok = (lane / WROWS) * (Tr::WARPS * WROWS) + warp_ * WROWS + lane % WROWS;
        lk_lane = lane < KV_LOADS * WROWS && lk_tok < KV_TILE;
        warp = warp_;
        kv_begin = cta.kv_begin;
        cta_hi = cta.cta_hi;
        sGK = sGK_;
        sGV = sGV_;
    }

    // pg and slot of this lane's lookup token of the tile at key ts
    __device__ __forceinline__ void fetch_page(int ts) {
        const int l = ts + lk_tok;
        pg = -1;
        slot = 0;
        if (lk_lane && l < cta_hi) {
            const int pi = ps_pow2 ? (l >> ps_shift) : (l / ps);
            pg = ldg_i32(bt + pi);
            slot = l - pi * ps;
        }
    }
    // The copies of the tile at key ts (looked up in pg and slot) into stage `stage`.
    __device__ __forceinline__ void issue_tile(int stage, int ts) {
        // the lookup lane's token as byte offsets into K and V, computed once per tile and
        // broadcast to the copying lanes of each pass; a copying lane knows from the token's
        // index whether it is past the end (zero fill, offset 0 kept as a valid address)
        long long ko = 0, vo = 0;
        if (pg >= 0) {
            ko = ((long long)pg * p.k_sp + (long long)slot * p.k_st) * KVB;
            vo = ((long long)pg * p.v_sp + (long long)slot * p.v_st) * KVB;
        }
#pragma unroll
        for (int j = 0; j < KV_LOADS; ++j) {
            const int src = j * WROWS + (ld_sub < WROWS ? ld_sub : 0);
            const long long jko = __shfl_sync(0xffffffffu, ko, src);
            const long long jvo = __shfl_sync(0xffffffffu, vo, src);
            const int tk = j * (Tr::WARPS * WROWS) + warp * WROWS + ld_sub;
            if (!ld_lane || (KV_LOADS * Tr::WARPS * WROWS > KV_TILE && tk >= KV_TILE)) continue;
            const bool ok = ts + tk < cta_hi;
            const unsigned so =
                stage * Tr::G_TILE_BYTES + g_off<Tr>(tk, ld_c);
            cp_async16_or_zero(sGK + so, kb + jko, ok);
            cp_async16_or_zero(sGV + so, vb + jvo, ok);
        }
    }
    // The tile at key ts into stage `stage`, as one group (then fetch_page of the next tile).
    __device__ __forceinline__ void issue(int stage, int ts) {
        issue_tile(stage, ts);
        cp_async_commit();
    }
    // Tiles 0 .. AHEAD - 1 into their stages (AHEAD: STAGES - 1, or STAGES where a stage is
    // freed before the tile after it is issued, PRODUCER).
    template <int AHEAD> __device__ __forceinline__ void prologue() {
        fetch_page(kv_begin);
#pragma unroll
        for (int s = 0; s < AHEAD; ++s) {
            issue(s, kv_begin + s * KV_TILE);
            fetch_page(kv_begin + (s + 1) * KV_TILE);
        }
    }
};

// Where this lane's ldmatrix rows of Q, K and V start (bytes, stage 0, swizzle applied).
// chunk_xor touches only the low bits of the chunk index, so the swizzled address of chunk
// pair kk is a per-lane base for kk % XP plus a constant: XP registers per operand.
template <class Tr> constexpr int GQA_XP = Tr::CHUNKS % 8 == 0 ? 4 : 2;
template <class Tr> using GqaRows = unsigned[GQA_XP<Tr>];
// fx: the swizzle of every ldmatrix row of this lane
template <class Tr>
__device__ __forceinline__ void operand_rows(GqaRows<Tr> &qa, GqaRows<Tr> &ka, GqaRows<Tr> &va, unsigned sQ, unsigned sK,
                                             unsigned sV, int lane, int wm, int wn, int fx) {
    constexpr int ROW_BYTES = Tr::ROW_BYTES, NW = Tr::NW;
    const unsigned q_row = sQ + (wm * 16 + (lane & 15)) * ROW_BYTES;
    const int q_hi = lane >> 4;
    const unsigned k_row = sK + (wn * NW + (lane & 7) + ((lane >> 4) << 3)) * ROW_BYTES;
    const int k_hi = (lane >> 3) & 1;
    const unsigned v_row = sV + (wn * NW + (lane & 7) + (((lane >> 3) & 1) << 3)) * ROW_BYTES;
    const int v_hi = lane >> 4;
#pragma unroll
    for (int j = 0; j < GQA_XP<Tr>; ++j) {
        qa[j] = q_row + (((2 * j + q_hi) ^ fx) << 4);
        ka[j] = k_row + (((2 * j + k_hi) ^ fx) << 4);
        va[j] = v_row + (((2 * j + v_hi) ^ fx) << 4);
    }
}
// The address of chunk pair kk of the rows at base.
template <class Tr> __device__ __forceinline__ unsigned swz(const GqaRows<Tr> &base, int kk) {
    constexpr int XP = GQA_XP<Tr>;
    return base[kk % XP] + (kk / XP) * XP * 32;
}

// Q fragments held in registers (Q_IN_REGS, as on the wgmma path without a producer; else one
// unused).
template <class Tr> using GqaQFrags = unsigned[Tr::Q_IN_REGS ? Tr::D / 16 : 1][4];

// This warp's Q fragments into registers from the Q tile (where they stay there: the wgmma path,
// Q_IN_REGS), after the Q tile landed.
template <class Tr>
__device__ __forceinline__ void load_q_frags(GqaQFrags<Tr> &qf, const GqaRows<Tr> &qa, unsigned sQ, int wm, int lane, int g,
                                             int q4) {
    if constexpr (Tr::FRAG8 && Tr::Q_IN_REGS) {
#pragma unroll
        for (int blk = 0; blk < Tr::D / 32; ++blk) q_frag8<Tr>(sQ, wm * 16 + g, blk, q4, qf[2 * blk], qf[2 * blk + 1]);
    } else if constexpr (Tr::WG && Tr::Q_IN_REGS) {
#pragma unroll
        for (int kk = 0; kk < Tr::D / 16; ++kk)
            ldsm_x4(sQ + tile_off<Tr, Tr::M_TILE>(wm * 16 + (lane & 15), 2 * kk + (lane >> 4)), qf[kk]);
    } else if constexpr (Tr::Q_IN_REGS) {
#pragma unroll
        for (int kk = 0; kk < Tr::D / 16; ++kk) ldsm_x4(swz<Tr>(qa, kk), qf[kk]);
    }
}

// The wgmma path's MMAs as one wgmma group left running, which wgmma_done completes; the
// descriptors advance on their low word (the start address field never carries).
// Stage "scores": S = Q K^T (the first k-step overwrites s), Q from qf, the K tile at dk0 +
// stage_off.
template <class Tr>
__device__ __forceinline__ void scores_issue(float (&s)[Tr::NW / 8][4], const GqaQFrags<Tr> &qf, unsigned long long dk0,
                                             unsigned stage_off) {
    constexpr unsigned KV_BLOCK = Tr::KV_TILE * 128;
    float(&sf)[Tr::NW / 2] = reinterpret_cast<float(&)[Tr::NW / 2]>(s);
    const unsigned lo = (unsigned)dk0, hi = (unsigned)(dk0 >> 32);
    fence_regs(sf);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Tr::D / 16; ++kk) {
        const unsigned off = (kk >> 2) * KV_BLOCK + (kk & 3) * 32;
        wgmma_rs_n64<typename Tr::MT>(sf, qf[kk], desc_at(add_at(lo, (stage_off + off) >> 4), hi), kk > 0);
    }
    wgmma_commit();
}
// PRODUCER's stage "scores": S = Q K^T in e4m3 k32 steps, Q's hi and lo tiles (q_tile_to_e4m3,
// at dq and dq + Q8_BYTES) against the e4m3 K stage at dk0 + stage_off. An e4m3 wgmma adds into
// its accumulators with about 14 significant bits, not fp32's 24 (truncating: a score comes out
// a little closer to 0), each step losing bits in proportion to the sum so far: a score carries
// an error of about 2^-13 of its size (G1F, G2F: LSE 1-4e-4 below the reference, within the
// FP8 floor of docs/contract.md 10). The lo tile's steps go first, while the sum is small (hi
// first measured no different, docs/performance.md). STACKED: the one stacked tile at dq (its
// rows' hi and lo parts, each summed on its own; fold_stacked adds them).
template <class Tr, bool STACKED>
__device__ __forceinline__ void scores_issue_e4m3(float (&s)[Tr::NW / 8][4], unsigned long long dq,
                                                  unsigned long long dk0, unsigned stage_off) {
    float(&sf)[Tr::NW / 2] = reinterpret_cast<float(&)[Tr::NW / 2]>(s);
    const unsigned lo = (unsigned)dk0, hi = (unsigned)(dk0 >> 32), qlo = (unsigned)dq, qhi = (unsigned)(dq >> 32);
    fence_regs(sf);
    wgmma_fence();
#pragma unroll
    for (int h = STACKED ? 0 : 1; h >= 0; --h)  // lo, then hi
#pragma unroll
        for (int kk = 0; kk < Tr::D / 32; ++kk)
            wgmma_ss_n64<e4m3>(sf, desc_at(add_at(qlo, (h * Tr::Q8_BYTES + kk * 32) >> 4), qhi),
                               desc_at(add_at(lo, (stage_off + kk * 32) >> 4), hi), kk > 0 || (h == 0 && !STACKED));
    wgmma_commit();
}
// Stacked rows: each row's score is its hi row's plus its lo row's (s[n][0, 1] and s[n][2, 3] of
// this thread); both halves take it.
template <class Tr> __device__ __forceinline__ void fold_stacked(float (&s)[Tr::NW / 8][4]) {
#pragma unroll
    for (int n = 0; n < Tr::NW / 8; ++n) {
        s[n][0] = s[n][2] = s[n][0] + s[n][2];
        s[n][1] = s[n][3] = s[n][1] + s[n][3];
    }
}
// Stage "PV": O += P V, P's A fragments (a) from the scores s, V the tile at dv0 + stage_off.
template <class Tr>
__device__ __forceinline__ void pv_issue(float (&o)[Tr::D / 8][4], unsigned (&a)[Tr::NW / 16][4],
                                         const float (&s)[Tr::NW / 8][4], unsigned long long dv0, unsigned stage_off) {
    float(&of)[Tr::D / 2] = reinterpret_cast<float(&)[Tr::D / 2]>(o);
#pragma unroll
    for (int kk = 0; kk < Tr::NW / 16; ++kk) p_fragment<typename Tr::MT>(a[kk], s, kk);
    const unsigned lo = (unsigned)dv0, hi = (unsigned)(dv0 >> 32);
    fence_regs(of);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Tr::NW / 16; ++kk)
        wgmma_rs_n128<typename Tr::MT>(of, a[kk], desc_at(add_at(lo, (stage_off + kk * 16 * 128) >> 4), hi));
    wgmma_commit();
}
template <int N> __device__ __forceinline__ void wgmma_done(float (&acc)[N]) {
    wgmma_wait0();
    fence_regs(acc);
}

// Stage "scores": S = Q K^T of this warp's 16 rows x NW keys of the tile at stage_off, raw
// (unscaled) in m16n8 accumulator fragments. Q from qf (Q_IN_REGS, wgmma) or the rows at qa,
// K from the rows at ka (mma.sync) or the wgmma descriptor dk0.
template <class Tr>
__device__ __forceinline__ void scores_step(float (&s)[Tr::NW / 8][4], const GqaQFrags<Tr> &qf, const GqaRows<Tr> &qa,
                                            const GqaRows<Tr> &ka, unsigned long long dk0, unsigned stage_off) {
    using T = typename Tr::MT;
    constexpr int D = Tr::D, NW = Tr::NW;
#pragma unroll
    for (int n = 0; n < NW / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    if constexpr (Tr::WG) {
        scores_issue<Tr>(s, qf, dk0, stage_off);
        wgmma_done(reinterpret_cast<float(&)[NW / 2]>(s));
    } else
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[4];
        if constexpr (Tr::Q_IN_REGS) {
            a[0] = qf[kk][0]; a[1] = qf[kk][1]; a[2] = qf[kk][2]; a[3] = qf[kk][3];
        } else {
            ldsm_x4(swz<Tr>(qa, kk), a);
        }
#pragma unroll
        for (int nn = 0; nn < NW / 16; ++nn) {
            unsigned kf[4];
            ldsm_x4(swz<Tr>(ka, kk) + stage_off + nn * 16 * Tr::ROW_BYTES, kf);
            mma16816<T>(s[2 * nn], a, kf[0], kf[1]);
            mma16816<T>(s[2 * nn + 1], a, kf[2], kf[3]);
        }
    }
}

// Stage "scores" on FRAG8 tiles (see q_frag8): per 32-channel block, Q's two k16 fragments
// (from qf, or the Q tile at row q_row) and, per 8 keys, one 8-byte load of e4m3 bytes from
// the K stage at stage_off, turned into the two steps' B operands.
template <class Tr>
__device__ __forceinline__ void scores_step_frag8(float (&s)[Tr::NW / 8][4], const GqaQFrags<Tr> &qf, unsigned sQ,
                                                  int q_row, int c, unsigned k8_row, int k8_x, unsigned stage_off) {
    using T = typename Tr::MT;
    constexpr int D = Tr::D, NW = Tr::NW;
#pragma unroll
    for (int n = 0; n < NW / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int blk = 0; blk < D / 32; ++blk) {
        unsigned a0[4], a1[4];
        if constexpr (Tr::Q_IN_REGS) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a0[i] = qf[2 * blk][i], a1[i] = qf[2 * blk + 1][i];
        } else {
            q_frag8<Tr>(sQ, q_row, blk, c, a0, a1);
        }
        const unsigned kb8 = k8_row + stage_off + (((2 * blk + (c >> 1)) ^ k8_x) << 4);
#pragma unroll
        for (int n = 0; n < NW / 8; ++n) {
            unsigned w0, w1, b[4];
            ld_shared_u2(kb8 + n * 8 * D, w0, w1);
            e4m3x4_to<T>(w0, b[0], b[1]);
            e4m3x4_to<T>(w1, b[2], b[3]);
            mma16816<T>(s[n], a0, b[0], b[1]);
            mma16816<T>(s[n], a1, b[2], b[3]);
        }
    }
}

// PRODUCER: the math warpgroup's tiles, in step with the producer's loop (gqa_segment): S on
// e4m3 wgmma (STACKED: the segment's rows stacked, then folded), the softmax (softmax_stage of
// gqa_segment), PV from the fp16 V tile t % 2, one barrier with the producer a tile.
template <class Tr, bool STACKED, class Softmax>
__device__ __forceinline__ void producer_math_tiles(float (&o)[Tr::D / 8][4], Softmax &softmax_stage,
                                                    unsigned long long dq, unsigned long long dk8,
                                                    unsigned long long dvt, int kv_begin, int n_tiles, Timeline &tl) {
    constexpr int NW = Tr::NW, D = Tr::D;
    for (int t = 0; t < n_tiles; ++t) {
        const int ts = kv_begin + t * Tr::KV_TILE;
        float s[NW / 8][4];
        scores_issue_e4m3<Tr, STACKED>(s, dq, dk8, (t % Tr::STAGES) * Tr::G_TILE_BYTES);
        wgmma_done(reinterpret_cast<float(&)[NW / 2]>(s));
        if constexpr (STACKED) fold_stacked<Tr>(s);
        tl.mark(TL_SCORES);
        softmax_stage(s, ts);
        tl.mark(TL_SOFTMAX);
        unsigned a[NW / 16][4];
        pv_issue<Tr>(o, a, s, dvt, (t & 1) * Tr::TILE_BYTES);
        wgmma_done(reinterpret_cast<float(&)[D / 2]>(o));
        fence_regs(a);
        tl.mark(TL_PV);
        nbar_sync_apart<2, Tr::THREADS>();  // tile t computed; tile t + 1 ready
        tl.mark(TL_WAIT_PEER);
    }
}

// Stage "epilogue", first half: this warp's state of rows r_lo and r_hi into shared memory, m and
// l at [wn][row] of sm_m and sm_l ([WARPS_N][M_TILE]), O at [wn][row] of red ([WARPS_N][M_TILE][D],
// 8-float chunks XOR-swizzled by row % 4).
template <class Tr>
__device__ __forceinline__ void stash_state(float *sm_m, float *sm_l, float *red, const float (&o)[Tr::D / 8][4],
                                            float m_lo, float m_hi, float l_lo, float l_hi, int wn, int r_lo, int r_hi,
                                            int q4) {
    constexpr int D = Tr::D, M_TILE = Tr::M_TILE;
    if (q4 == 0) {
        sm_m[wn * M_TILE + r_lo] = m_lo;
        sm_l[wn * M_TILE + r_lo] = l_lo;
        sm_m[wn * M_TILE + r_hi] = m_hi;
        sm_l[wn * M_TILE + r_hi] = l_hi;
    }
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
        const int col = i * 8 + 2 * q4;
        float *plo = red + (wn * M_TILE + r_lo) * D + (col ^ ((r_lo & 3) << 3));
        float *phi = red + (wn * M_TILE + r_hi) * D + (col ^ ((r_hi & 3) << 3));
        plo[0] = o[i][0];
        plo[1] = o[i][1];
        phi[0] = o[i][2];
        phi[1] = o[i][3];
    }
}

}  // namespace gqa_detail

// One segment: the rows of `cta` (one row tile of one sequence) over its keys, for KV head kvh,
// from the Q load to the written rows. Where the rows go:
//   BAL = false: out and lse, or (split-KV across launches, p.num_splits > 1 without a cluster)
//                split cta.split's partial states, or merged inside the cluster;
//   BAL = true:  out and lse, or (part_row0 >= 0: a piece of a cut job of the balanced
//                schedule) partial states at rows part_row0 + r of o_part and lse_part.
// A partial state is the normalized O in fp32 and the base-2 LSE, as the merge kernel reads it.
// sm: the kernel's dynamic shared memory, aligned by the caller (align_smem; the wgmma path's
// swizzle atoms need a 1024-byte aligned base).
template <class Tr, bool BAL, bool STACKED>
__device__ __forceinline__ void gqa_segment(const dcpattn_attn_kparams &p, const GqaCta<Tr> &cta, int kvh,
                                            long long part_row0, const AttnSmem sm, Timeline &tl) {
    static_assert(!STACKED || Tr::PRODUCER, "stacked rows: the FP8 producer tile only");
    using namespace gqa_detail;
    using T = typename Tr::T;
    constexpr int D = Tr::D, GROUP = Tr::GROUP, M_TILE = Tr::M_TILE, KV_TILE = Tr::KV_TILE;
    constexpr int STAGES = Tr::STAGES, THREADS = Tr::THREADS, CHUNKS = Tr::CHUNKS;
    constexpr int ROW_BYTES = Tr::ROW_BYTES, NW = Tr::NW, WARPS_M = Tr::WARPS_M, WARPS_N = Tr::WARPS_N;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    // PRODUCER: warpgroup 1 gathers and converts (its warps 0-3 in the gather's numbering)
    const bool producer = Tr::PRODUCER && warp >= Tr::WARPS;
    const int row0 = cta.row0, nrows = cta.nrows, kv_begin = cta.kv_begin;
    const int cta_hi = cta.cta_hi, cta_lo = cta.cta_lo, n_tiles = cta.n_tiles;
    tl.segment(n_tiles);

    const unsigned s_base = sm.addr;
    unsigned char *gqa_smem = sm.ptr;
    const unsigned sQ = s_base + Tr::SMEM_Q, sK = s_base + Tr::SMEM_K, sV = s_base + Tr::SMEM_V;
    const unsigned sGK = s_base + Tr::SMEM_GK, sGV = s_base + Tr::SMEM_GV;  // where the gather lands

    load_q_tile<Tr>(p, cta, kvh, sQ, tid);

    // stage "gather": the first AHEAD tiles go out now, one more per tile of the loop
    // (PRODUCER: by the producer alone, AHEAD = STAGES - 2: the math warpgroup reads K from a
    // stage while the producer converts the V of the next)
    constexpr int AHEAD = Tr::PRODUCER ? STAGES - 2 : STAGES - 1;
    KvGather<Tr> gather(p, cta, kvh, sGK, sGV, lane, Tr::PRODUCER ? warp & (Tr::WARPS - 1) : warp);
    if (!Tr::PRODUCER || producer) gather.template prologue<AHEAD>();

    // ---- per-thread rows and state ----
    const int g = lane >> 2, q4 = lane & 3;
    // this thread's fragment rows (STACKED: both carry row wm * 8 + g, top of this file)
    const int r_lo = STACKED ? wm * 8 + g : wm * 16 + g, r_hi = STACKED ? r_lo : r_lo + 8;
    const int lim_lo = cta.row_limit(r_lo), lim_hi = cta.row_limit(r_hi);
    const bool warp_active = row0 + wm * 16 < nrows;
    const int fx = chunk_xor<CHUNKS>(lane & 7);  // swizzle of every ldmatrix row of this lane
    // FP8: k_scale joins the softmax scale (read here, not on the host, so that a captured
    // graph sees the value the scale holds at replay); v_scale multiplies O at the end
    const int sc_i = p.kv_scale_per_head ? kvh : 0;
    float scale = Tr::FP8 ? p.scale_log2 * p.k_scale[sc_i] : p.scale_log2;

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m_lo = neg_inf(), m_hi = neg_inf(), l_lo = 0.f, l_hi = 0.f;

    GqaRows<Tr> qa, ka, va;
    operand_rows<Tr>(qa, ka, va, sQ, sK, sV, lane, wm, wn, fx);

    GqaQFrags<Tr> qf;
    if (Tr::PRODUCER && !producer) cp_async_wait<0>();  // the Q group
    else cp_async_wait<AHEAD>();                         // the Q group
    __syncthreads();
    if constexpr (Tr::PRODUCER) scale *= q_tile_to_e4m3<Tr, STACKED>(sQ, tid, lane);
    else if constexpr (Tr::FP8 && !same_type<T, fp16>) scale *= q_tile_to_fp16<Tr>(sQ, tid, lane);
    load_q_frags<Tr>(qf, qa, sQ, wm, lane, g, q4);
    // FRAG8 operand rows: K, this lane's key g of each 8 (chunk pair 2*blk + c / 2, half c % 2);
    // V, the ldmatrix.trans row of this lane (key lane % 16, chunk 2*j + lane / 16)
    const unsigned k8_row = sGK + (wn * NW + g) * D + (q4 & 1) * 8;
    const int k8_x = chunk_xor<Tr::G_CHUNKS>(g);
    const unsigned v8_row = sGV + (wn * NW + (lane & 15)) * D;
    const int v8_x = chunk_xor<Tr::G_CHUNKS>(lane & 7);
    // wgmma operand descriptors of stage 0: K (K-major) and V (MN-major), 64-channel blocks
    constexpr unsigned KV_BLOCK = KV_TILE * 128;
    const unsigned long long dk0 = sw128_desc(sK, 16, 1024), dv0 = sw128_desc(sV, KV_BLOCK, 1024);
    tl.mark(TL_START);

    // stage "mask": keys past each row's limit (only tiles that reach one); scores stay raw
    // until the exponent (scale > 0, so the raw row max is the scaled one's). Stage "online
    // softmax", base 2: m and l in log2 units, p = 2^(s * scale - m); O is rescaled only when
    // a row max of the warp moved (after the first tiles, rarely).
    auto softmax_stage = [&](float(&s)[NW / 8][4], int ts) {
        if (ts + KV_TILE > cta_lo) mask_scores(s, ts + wn * NW + 2 * q4, lim_lo, lim_hi);
        const SoftmaxStep sm = online_softmax_step(s, m_lo, m_hi, l_lo, l_hi, scale);
        m_lo = sm.m_lo;
        m_hi = sm.m_hi;
        l_lo = sm.l_lo;
        l_hi = sm.l_hi;
        if (__any_sync(0xffffffffu, sm.al_lo != 1.f || sm.al_hi != 1.f)) scale_rows(o, sm.al_lo, sm.al_hi);
    };

    if constexpr (Tr::PRODUCER) {
        // FP8 on wgmma, the two warpgroups in step, one barrier (2, the CTA's threads, met at
        // different instructions: barrier.sync, nbar_sync_apart) a tile:
        // in step t the producer sends tile t + AHEAD into the stage of tile t - 2 (free since
        // step t - 1) and converts the V of tile t (its e4m3 stage, landed) into the fp16 tile
        // t % 2, while the math warpgroup computes tile t - 1: S from Q's e4m3 tiles and the K
        // of its stage, PV from the fp16 tile (t - 1) % 2, converted in step t - 1. Each role has
        // a loop of its own and its share of the registers (setmaxnreg; 128 each again after
        // the loops, for the epilogue).
        if (producer) {
            setmaxnreg_dec<Tr::PRODUCER_REGS>();
            const int ptid = tid & (Tr::ROLE_THREADS - 1);  // (a power of two: the compiler sees the range)
            for (int t = 0; t < n_tiles; ++t) {
                gather.issue((t + AHEAD) % STAGES, kv_begin + (t + AHEAD) * KV_TILE);
                gather.fetch_page(kv_begin + (t + AHEAD + 1) * KV_TILE);
                tl.mark(TL_GATHER);
                cp_async_wait<AHEAD>();  // tile t, this thread's copies
                nbar_sync<1, 128>();     // ... and the other producers'
                tl.mark(TL_WAIT_LOAD);
                convert_tile<Tr>(sGV + (t % STAGES) * Tr::G_TILE_BYTES, sK + (t & 1) * Tr::TILE_BYTES, ptid);
                fence_proxy_async();            // tile t's K stage and fp16 V -> visible to wgmma
                tl.mark(TL_CONVERT);
                nbar_sync_apart<2, THREADS>();  // tile t ready; tile t - 1 computed
                tl.mark(TL_WAIT_PEER);
            }
            nbar_sync_apart<2, THREADS>();  // (the math warpgroup's last step)
            setmaxnreg_inc<128>();
            // the producer's state for the epilogue, set only now: its registers stay free in the loop
#pragma unroll
            for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        } else {
            setmaxnreg_inc<256 - Tr::PRODUCER_REGS>();
            // descriptors: Q's e4m3 tiles, the e4m3 K stages, the fp16 V tiles (at sK, see GqaTraits)
            const unsigned long long dq = sw128_desc(sQ, 16, 1024), dk8 = sw128_desc(sGK, 16, 1024);
            const unsigned long long dvt = sw128_desc(sK, KV_BLOCK, 1024);
            nbar_sync_apart<2, THREADS>();  // (the producer's first step)
            tl.mark(TL_WAIT_PEER);
            producer_math_tiles<Tr, STACKED>(o, softmax_stage, dq, dk8, dvt, kv_begin, n_tiles, tl);
            setmaxnreg_dec<128>();
        }
    } else {
        for (int t = 0; t < n_tiles; ++t) {
            cp_async_wait<STAGES - 2>();
            if constexpr (Tr::WG) fence_proxy_async();  // this thread's copies -> visible to wgmma
            __syncthreads();  // tile t landed for all; stage (t-1) % STAGES is free
            tl.mark(TL_WAIT_LOAD);
            {  // stage "gather" of the tile STAGES - 1 ahead
                const int tn = t + STAGES - 1;
                gather.issue(tn % STAGES, kv_begin + tn * KV_TILE);
                gather.fetch_page(kv_begin + (tn + 1) * KV_TILE);
            }
            tl.mark(TL_GATHER);
            if constexpr (Tr::FP8 && !Tr::FRAG8) {  // (not the wgmma path: PRODUCER above)
                convert_tile<Tr>(sGK + (t % STAGES) * Tr::G_TILE_BYTES, sK, tid);
                convert_tile<Tr>(sGV + (t % STAGES) * Tr::G_TILE_BYTES, sV, tid);
                __syncthreads();
                tl.mark(TL_CONVERT);
            }
            if (!Tr::WG && !warp_active) continue;  // wgmma is warpgroup-wide: every warp takes part

            const int ts = kv_begin + t * KV_TILE;
            const unsigned stage_off = Tr::FP8 && !Tr::FRAG8 ? 0u : (t % STAGES) * Tr::G_TILE_BYTES;

            float s[NW / 8][4];
            if constexpr (Tr::FRAG8) scores_step_frag8<Tr>(s, qf, sQ, wm * 16 + g, q4, k8_row, k8_x, stage_off);
            else scores_step<Tr>(s, qf, qa, ka, dk0, stage_off);
            tl.mark(TL_SCORES);

            softmax_stage(s, ts);
            tl.mark(TL_SOFTMAX);

            // stage "PV": O += P V
            if constexpr (Tr::WG) {
                unsigned a[NW / 16][4];
                pv_issue<Tr>(o, a, s, dv0, stage_off);
                wgmma_done(reinterpret_cast<float(&)[D / 2]>(o));
            } else
#pragma unroll
            for (int kk = 0; kk < NW / 16; ++kk) {
                unsigned a[4];
                p_fragment<typename Tr::MT>(a, s, kk);
                if constexpr (Tr::FRAG8) {
#pragma unroll
                    for (int j = 0; j < D / 32; ++j) {
                        unsigned vf[4], e0, o0, e1, o1;
                        ldsm_x4_trans(v8_row + stage_off + kk * 16 * D + (((2 * j + (lane >> 4)) ^ v8_x) << 4), vf);
                        e4m3x4_split<fp16>(vf[0], e0, o0);
                        e4m3x4_split<fp16>(vf[1], e1, o1);
                        mma16816<fp16>(o[4 * j], a, e0, e1);
                        mma16816<fp16>(o[4 * j + 1], a, o0, o1);
                        e4m3x4_split<fp16>(vf[2], e0, o0);
                        e4m3x4_split<fp16>(vf[3], e1, o1);
                        mma16816<fp16>(o[4 * j + 2], a, e0, e1);
                        mma16816<fp16>(o[4 * j + 3], a, o0, o1);
                    }
                } else {
#pragma unroll
                    for (int dd = 0; dd < D / 16; ++dd) {
                        unsigned vf[4];
                        ldsm_x4_trans(swz<Tr>(va, dd) + stage_off + kk * 16 * ROW_BYTES, vf);
                        mma16816<typename Tr::MT>(o[2 * dd], a, vf[0], vf[1]);
                        mma16816<typename Tr::MT>(o[2 * dd + 1], a, vf[2], vf[3]);
                    }
                }
            }
            tl.mark(TL_PV);
        }
    }
    if constexpr (Tr::FRAG8) frag8_unpermute<D>(o, lane);

    // ---- stage "epilogue": merge the partial states of each row, write ----
    // The wgmma path (one warp column) without a cluster: each thread writes its rows' fragments.
    // Else each warp leaves its rows' (m, l, O) in shared memory. Without a cluster, the CTA merges
    // its WARPS_N states per row and writes out (or, split-KV across launches, its partial).
    // With p.cluster_merge, the num_splits CTAs of one cluster are the splits of the same rows:
    // each merges a slice of the items over all num_splits x WARPS_N states, reading its
    // peers' shared memory (distributed shared memory), and writes the final rows; no partial
    // goes through global memory and no second kernel runs.
    cp_async_wait<0>();
    if constexpr (Tr::FP8) {
        const float vs = p.v_scale[sc_i];
        scale_rows(o, vs, vs);
    }
    l_lo = quad_sum(l_lo);
    l_hi = quad_sum(l_hi);
#if DCPATTN_HAS_CLUSTERS
    const bool in_cluster = !BAL && p.cluster_merge != 0;
#else
    constexpr bool in_cluster = false;
    if (p.cluster_merge) __trap();  // the host launches clusters only where the arch has them
#endif
    const bool split_out = BAL ? part_row0 >= 0 : p.num_splits > 1 && !in_cluster;
    // the partial-state row of packed row R
    auto part_row = [&](const AttnRowOut &out, int R) { return BAL ? part_row0 + (R - row0) : out.part(cta.split); };
    if (Tr::WG && !in_cluster) {
        // each row's whole state is in one warp: normalize and write from registers
        if (producer) return;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int R = row0 + (half ? r_hi : r_lo);
            if (R >= nrows || (STACKED && half)) continue;  // (STACKED: r_hi = r_lo)
            const float l = half ? l_hi : l_lo, inv = sum_inv(l);
            const float lse2 = row_lse2(half ? m_hi : m_lo, l);
            const AttnRowOut out = cta.row_out(kvh * GROUP, R);
            if (split_out) {
                const long long prow = part_row(out, R);
                float *dst = p.o_part + prow * D + 2 * q4;
#pragma unroll
                for (int i = 0; i < D / 8; ++i)
                    st8(dst + 8 * i, __float_as_uint(o[i][2 * half] * inv), __float_as_uint(o[i][2 * half + 1] * inv));
                if (q4 == 0) p.lse_part[prow] = lse2;
            } else {
#pragma unroll
                for (int i = 0; i < D / 8; ++i)
                    *reinterpret_cast<unsigned *>(out.out(8 * i + 2 * q4)) =
                        pack2<T>(o[i][2 * half] * inv, o[i][2 * half + 1] * inv);
                if (q4 == 0 && p.lse) out.lse(lse2);
            }
        }
        tl.mark(TL_EPILOGUE);
        return;
    }
    __syncthreads();  // all warps done with Q and K/V: reuse the space
    float *sm_m = reinterpret_cast<float *>(gqa_smem + Tr::SMEM_Q);  // [WARPS_N][M_TILE]
    float *sm_l = sm_m + WARPS_N * M_TILE;
    float *red = reinterpret_cast<float *>(gqa_smem + Tr::SMEM_K);  // [WARPS_N][M_TILE][D]
    if (!producer) stash_state<Tr>(sm_m, sm_l, red, o, m_lo, m_hi, l_lo, l_hi, wn, r_lo, r_hi, q4);
    if (in_cluster) {
#if DCPATTN_HAS_CLUSTERS
        cluster_sync();
#endif
    } else {
        __syncthreads();
    }

    // stage "split merge": states [src][w] of row r, src = the cluster's CTAs (or this CTA
    // alone), w = its warp columns
    const int nsrc = in_cluster ? p.num_splits : 1;
    const unsigned a_m = smem_u32(sm_m), a_l = smem_u32(sm_l), a_red = smem_u32(red);
    auto ld1 = [&](int q, unsigned a) {
#if DCPATTN_HAS_CLUSTERS
        if (in_cluster) return ld_cluster_f32(cluster_map(a, q));
#endif
        return ld_shared_f32(a);
    };
    auto ld4 = [&](int q, unsigned a, float (&v)[4]) {
#if DCPATTN_HAS_CLUSTERS
        if (in_cluster) return ld_cluster_f4(cluster_map(a, q), v);
#endif
        ld_shared_f4(a, v);
    };

    constexpr int ITEMS = M_TILE * (D / 8);
    // this CTA's slice of the items: all of them, or 1/num_splits of them in a cluster
    const int per = (ITEMS + nsrc - 1) / nsrc;
    const int it_begin = in_cluster ? cta.split * per : 0;
    const int it_end = min(it_begin + per, ITEMS);
    for (int it = it_begin + tid; it < it_end; it += THREADS) {
        const int r = it / (D / 8), c = (it % (D / 8)) * 8, R = row0 + r;
        if (R >= nrows) continue;
        float mx = neg_inf();
        for (int q = 0; q < nsrc; ++q)
#pragma unroll
            for (int w = 0; w < WARPS_N; ++w) mx = fmaxf(mx, ld1(q, a_m + (w * M_TILE + r) * 4));
        float lsum = 0.f, acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        const unsigned off = ((c ^ ((r & 3) << 3)) + r * D) * 4;
        for (int q = 0; q < nsrc; ++q)
#pragma unroll
            for (int w = 0; w < WARPS_N; ++w) {
                const float mw = ld1(q, a_m + (w * M_TILE + r) * 4);
                const float f = state_weight(mw, mx);
                lsum += f * ld1(q, a_l + (w * M_TILE + r) * 4);
                float x[4], y[4];
                ld4(q, a_red + w * M_TILE * D * 4 + off, x);
                ld4(q, a_red + w * M_TILE * D * 4 + off + 16, y);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    acc[e] += f * x[e];
                    acc[4 + e] += f * y[e];
                }
            }
        const float inv = sum_inv(lsum);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= inv;
        const AttnRowOut out = cta.row_out(kvh * GROUP, R);
        const float lse2 = row_lse2(mx, lsum);
        if (split_out) {
            const long long prow = part_row(out, R);
            float *dst = p.o_part + prow * D + c;
            st16(dst, acc[0], acc[1], acc[2], acc[3]);
            st16(dst + 4, acc[4], acc[5], acc[6], acc[7]);
            if (c == 0) p.lse_part[prow] = lse2;
        } else {
            st16(out.out(c), pack2<T>(acc[0], acc[1]), pack2<T>(acc[2], acc[3]), pack2<T>(acc[4], acc[5]),
                 pack2<T>(acc[6], acc[7]));
            if (c == 0 && p.lse) out.lse(lse2);
        }
    }
#if DCPATTN_HAS_CLUSTERS
    if (in_cluster) cluster_sync();  // peers may still read this CTA's shared memory
#endif
    tl.mark(TL_EPILOGUE);
}

// One (sequence, split) x KV head blockIdx.y x row tile blockIdx.z per CTA; on the FP8 producer
// tile, one of at most M_TILE / 2 rows runs stacked (top of this file).
template <class Tr> __device__ __forceinline__ void gqa_decode(const dcpattn_attn_kparams &p) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char gqa_smem_raw[];
    Timeline tl;  // (timeline builds only: templates/timeline.cuh; warpgroup w keeps record w)
    GqaCta<Tr> cta(p);
    if (cta.empty()) return;
    cta.find_keys();
    const AttnSmem sm = align_smem<Tr::WG ? 1024u : 1u>(gqa_smem_raw);
    if (Tr::PRODUCER && cta.nrows - cta.row0 <= Tr::M_TILE / 2)
        gqa_segment<Tr, false, Tr::PRODUCER>(p, cta, blockIdx.y, 0, sm, tl);  // (stacked)
    else
        gqa_segment<Tr, false, false>(p, cta, blockIdx.y, 0, sm, tl);
    tl.finish();
}

// The balanced schedule (p.workers > 0; grid p.workers x KV heads): worker blockIdx.x runs the
// pieces of its equal share of the batch's units (templates/sched.cuh) for KV head blockIdx.y.
// STACKED (the FP8 producer tile's NAME_balanced_stacked, which the host launches where the
// plan's max_q_len x GROUP <= M_TILE / 2): every segment's rows stacked (top of this file); a
// kernel of its own, because one that chose per segment spilled in its tile loops.
template <class Tr, bool STACKED = false> __device__ __forceinline__ void gqa_decode_balanced(const dcpattn_attn_kparams &p) {
    static_assert(!STACKED || Tr::PRODUCER, "stacked rows: the FP8 producer tile only");
    extern __shared__ __attribute__((aligned(1024))) unsigned char gqa_smem_raw[];
    // The segments' shared memory and tile count, in the forms in which ptxas keeps the tile
    // loops' counter, stage offsets and wgmma descriptors in uniform registers (as in the
    // per-sequence kernel): the address taken here, before the schedule's code (taken in the
    // segment, after it, the address went through vector registers), and the count broadcast
    // from lane 0 (ptxas cannot follow the schedule's arithmetic to a warp-uniform count). The
    // FP8 producer tile's math loop: 434 -> 392 instructions, 18 -> 3 register moves.
    const AttnSmem sm = align_smem<Tr::WG ? 1024u : 1u>(gqa_smem_raw);
    Timeline tl;  // (timeline builds only: templates/timeline.cuh; warpgroup w keeps record w)
    AttnSchedule<Tr::GROUP, Tr::M_TILE, Tr::KV_TILE, Tr::THREADS> sched;
    if (!sched.init(p, reinterpret_cast<long long *>(gqa_smem_raw))) return;
    const int kvh = blockIdx.y;
    for (bool first = true;; first = false) {
        if (!first) __syncthreads();  // the last segment's shared memory is free
        GqaCta<Tr> cta(p, sched.b, 0, sched.z);
        const long long part_row0 = sched.keys(cta, kvh);
        cta.n_tiles = warp_uniform(cta.n_tiles);
        if (STACKED && cta.nrows - cta.row0 > Tr::M_TILE / 2) __trap();  // (the host's rule broken)
        gqa_segment<Tr, true, STACKED>(p, cta, kvh, part_row0, sm, tl);
        if (part_row0 >= 0)
            sched.template finish_cut<typename Tr::T, Tr::D>(p, cta, kvh, gqa_smem_raw);
        tl.mark(TL_MERGE);
        if (!sched.next(p)) break;
    }
    tl.finish();
}

}  // namespace dcpattn
