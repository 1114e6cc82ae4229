// mla.cuh — DeepSeek MLA absorbed decode over one rank's DCP shard, Hopper (sm_90a) wgmma
// and TMA (docs/contract.md 1-4, 8). Dqk = 576 (512 latent + 64 rope), Dv = 512, one latent KV head
// whose V is the first 512 channels of the K row: every KV tile is read once from memory, for
// QK^T and for PV.
//
// One CTA = one (sequence, split) x 64 packed query rows (packed row R = z*64 + m is query
// token R / GROUP, head R % GROUP, GROUP = Hq) x the split's KV tokens in tiles of 64; or, in
// the balanced schedule (kernel NAME_balanced, see MlaSchedule), the same for each piece of
// one equal range of the whole batch's keys, one piece after the other.
// 256 threads: two warpgroups, no producer. Warpgroup w owns O[:, 256w : 256w + 256] (128
// fp32 per thread); the tiles go in pairs, t0 (even, stage 0) of warpgroup 0 and t1 (odd,
// stage 1) of warpgroup 1 (FlashMLA's seesaw, reordered):
//   warpgroup 0: softmax of S(t0) against the running reference max, P(t0) to shared memory
//     (published with the reference), O0 += P(t0) V(t0) (P from registers); then, once P(t1)
//     is out, O0 += P(t1) V(t1) (P from shared memory), and S(t0 + 2) = Q K(t0 + 2)^T, its
//     column blocks 0-3 first;
//   warpgroup 1: S(t1) while warpgroup 0 does its softmax, O1 += P(t0) V(t0) before its own
//     softmax (so that this PV runs during it), softmax of S(t1), P(t1) out, O1 += P(t1) V(t1).
// S: wgmma m64n64k16, 36 k-steps, Q from shared memory but for the rope block, whose
// fragments stay in registers; block by block as each lands. PV: m64n256k16. Lazy max: as
// long as no row of a tile tops the reference by more than MAX_SLACK, P <= 2^MAX_SLACK and
// nothing is rescaled; when one does (the first tile, rarely later) the owner publishes the
// new reference of every row and a flag, and both warpgroups rescale their O and row sums
// before adding anything computed against the new reference. The reference passes from tile
// to tile in order (warpgroup 1's softmax of t1 follows warpgroup 0's of t0, whose next
// softmax follows it).
//
// Narrow tiles (M_TILE N = 16 or 32 packed rows: Hq 16 at q_len 1 or 2): a 64-row tile would
// leave three quarters or half of every MMA empty, so S and O are computed transposed and the 64
// keys of a KV tile fill the wgmma's 64 rows: S^T = K Q^T (m64nNk16, K from its stage and Q,
// both K-major, Q from shared memory whole), and O^T[my half] += V^T P^T (m64nNk16 per 64-channel
// block of V, which is the MN-major A operand that the same bytes make, P a K-major N x 64
// operand that each warpgroup writes to shared memory). The pipeline, the pair order, the loads,
// the FP8 conversion and the lazy max are the m64 tile's; a row's max over a tile's keys runs over
// the eight lanes of a quad column and the warpgroup's four warps, which meet in shared memory
// only when the reference moves. Each thread holds N / 4 rows (narrow_row), O^T 2 N floats.
//
// Stages of a segment (mla_decode), by name: functions in mla_detail:: and attn.cuh, and the
// lambdas of mla_decode, which hold the hand-ordered seesaw in one function body:
//   select          sparse only: sparse_select (sparse.cuh), the token's kept rows, once per CTA
//   load Q          load_q_tile (cp.async of the Q tile, sources from AttnCta::q_chunk), FP8 with
//                   a bf16 query q_tile_to_fp16, then load_q_rope (the rope block's Q
//                   fragments, kept in registers; narrow tiles: none, S reads the whole Q
//                   tile from shared memory)
//   per tile
//     gather        lookup (a tile's pages), load (TMA of its column blocks), refill (a block
//                   for the tile two ahead once its last reader is done), zero_tail (the
//                   last tile's V rows past the last visible key); FP8: convert (convert_tile);
//                   sparse: sparse_gather (the producer warpgroup's cp.async of the kept rows),
//                   release (warpgroup 0 is done with the bytes the next gather overwrites)
//     scores        qk_blocks (four column blocks of S = Q K^T), qk_rope (the rope block)
//     mask          mask_key (attn.cuh) inside softmax, on tiles that reach a limit
//     softmax       softmax (lazy max: mask, row max, exponent, P to A fragments, row sums),
//                   rescale (O and l when the reference max moves), store_p (P to shared
//                   memory for the other warpgroup); narrow: softmax_narrow, rescale_n, adopt
//                   (the other warpgroup's reference)
//     PV            pv_own (P from registers), pv_other (P of the other warpgroup's tile);
//                   narrow: both through pv_narrow (P from shared memory)
//   epilogue        sum_warpgroups (the two halves' row sums), store_rows (out and lse, or the
//                   split's partial state); narrow: sum_narrow, store_narrow
//   split merge     balanced schedule: MlaSchedule::publish (a piece's state for the worker
//                   that ends its sequence), MlaSchedule::merge (adds them, before the epilogue)
// The lambdas stay lambdas: rescale as a function of its own changed the SASS of every MLA
// variant (docs/architecture.md, "Kernel stages"). Timeline builds (templates/timeline.cuh) mark
// where each stage ends (tl.mark) and wait for a tile's bytes in one place (tl_wait); elsewhere
// the marks are nothing.
//
// Loads: a KV tile is nine 8 KB column blocks (64 channels x 64 tokens), each on its own
// `full` mbarrier, brought in by TMA from a 3-D tensor map over the paged pool (576 channels
// x page_size tokens x pages; box 64 channels x min(page_size, 64) tokens; 128-byte swizzle)
// that the host encodes per call. One thread per warp of the warpgroup refills a block for the
// tile two ahead as soon as the block's last reader is done: blocks 0-3 (V of warpgroup 0)
// by warpgroup 0 after its PV of that tile, blocks 4-8 (V of warpgroup 1 and rope) by
// warpgroup 1 after its PV. Tiles 0 and 1 are loaded at the start. In the CTA's last tile,
// each warpgroup zeroes the V rows of its half past the last visible key once they land (a
// NaN there would survive P = 0).
//
// FP8 (e4m3) cache: the MMAs run in fp16 (MT), every e4m3 value being an fp16 one; a bf16 Q
// tile is rescaled into fp16 by a power of two that joins the softmax scale with k_scale, and
// v_scale multiplies O at the end. A tile lands by TMA as nine raw 4 KB blocks (64 tokens x 64
// bytes, unswizzled) where the stage's 16-bit blocks 0-3 and 8 go, and the warpgroup that
// computes its S first converts it in place into the stage's nine SW128 fp16 blocks
// (convert_tile; rows past the last visible key become zeros, which replaces zero_tail).
// Shared memory stays as it is. Warpgroup 0 loads the whole raw tile into a stage as soon as it
// is done with blocks 0-3 (its refills above; block 8 is read only by S, long done), so the
// bytes are on their way as early as a 16-bit tile's first half; warpgroup 0 converts t0 + 2
// once warpgroup 1 is done with V(t0) (barrier 4, met there instead of before store_p). So runs
// the 64-row tile (and the sparse narrow tile); the dense narrow tiles do not convert:
//
// FP8 on the narrow tiles (MlaTraits DIRECT: an e4m3 cache, at most 32 packed rows, dense): the
// tile stays e4m3 where it lands, nine raw blocks in TMA's 64-byte swizzle (the host encodes the
// generator's kv_swizzle, 64), and both MMAs take their e4m3 operand from there into registers,
// converted to fp16 (one cvt a pair): S^T = K Q^T reads each block of K by ldmatrix (qk_direct,
// sw64_e4m3_k_frags) as the A operand of fp16 wgmmas whose B is the Q tile in fp16, its channels
// in the order those fragments hold them (q_tile_to_fp16_k16, k16_channel); PV reads the
// warpgroup's V half by ldmatrix .trans (pv_direct, sw64_e4m3_vt_frags). So no warpgroup converts
// a whole tile in shared memory on its path, and a tile's bytes cross shared memory once (the
// 16-bit conversion wrote 72 KB and the MMAs read them back). (S on e4m3 wgmmas, Q split into
// e4m3 hi + lo, missed the lse tolerance: Hopper's FP8 MMAs accumulate 576 channels with fewer
// bits than fp32; docs/performance.md.) Its rows then hold the channels in the order that
// ldmatrix gives them (row g of a warp's 16 is channel 2 g, row g + 8 channel 2 g + 1), which
// store_narrow follows. The loads, refills, zero_tail and barriers are the 16-bit tile's.
//
// Sparse (MlaTraits SPARSE; instances sparse_bf16_kvfp8ds_m64_sm90 and
// sparse_<dtype>_kve4m3_m64_sm90, templates/sparse_sm90_inst.cu): the same pipeline over one query
// token's top-k keys in DeepSeek's FP8 cache (SCALED, 656-byte rows: 512 e4m3 values, 4 fp32
// scales, 64 bf16 RoPE values) or in rows of 576 e4m3 bytes with per-tensor scales. One CTA = one
// query token x 64 heads (grid batch*max_q_len x ceil(Hq / 64), slots past a sequence's q_len
// return; SparseCta), 384 threads: the two math warpgroups and a producer warpgroup. First the
// stage "select" of sparse.cuh, by all 384: the cache offsets of the token's kept ids into this
// CTA's part of the workspace (p.topk_rows); every row sees every kept key. Then the producer hands
// most of its registers to the math warpgroups (setmaxnreg: 40 against their 232) and gathers every
// tile (sparse_gather): 64 kept rows by 16-byte cp.async where TMA puts a dense FP8 tile (the e4m3
// values as raw blocks 0-7, the RoPE chunks straight into 16-bit block 8, swizzled, the scales to
// scales_at(stage): stage 0 a buffer of its own, stage 1 P1, free from warpgroup 0's PV of the
// stage's last tile until warpgroup 1's next store_p, which follows its conversion), one mbarrier
// per stage, on which each producer thread arrives once its copies of the tile have landed and been
// fenced for the async proxy (wgmma reads the RoPE block as it landed). It gathers tile t into
// stage s as soon as warpgroup 0 is done with the bytes there (raw_free[s]: one arrival from each
// of its warps, after its PV of t - 2: P(t0) V(t0) for stage 0, P(t1) V(t1) for stage 1, which
// follows warpgroup 1's S of t1); warpgroup 1's V half (blocks 4-7) is not touched by the gather,
// and the conversion of the stage waits for warpgroup 1 as for a dense FP8 tile (barrier 4, or its
// own order). SCALED: convert_tile makes each value bf16(e4m3 * scale), the MMAs multiply bf16, no
// k_scale / v_scale. Rows of e4m3 with per-tensor scales: the RoPE bytes go to raw block 8 like the
// rest, and the tile is converted, scaled and multiplied as a dense FP8 tile (fp16, k_scale,
// v_scale). The head's sink (rank 0) joins the row in the epilogue. Named barriers: 1 the math
// warpgroups' (math_sync), 5 "Q's rope block is read" (the producer then gathers tile 1, whose
// scales go to P1). At most 16 heads take the narrow tile of 16 (sparse_<dtype>_kv<cache>_m16_sm90,
// see "Narrow tiles"): stage 1's scales then have a slot of their own (SMEM_SC1: P1 is read by
// warpgroup 1's own PV).
//
// Code size is a first-order cost here: the two warpgroups run different code, and with the
// TMA issue loops unrolled (6.7 k instructions) M1 ran at 482 TFLOP/s against 580 at 4.6 k
// (docs/performance.md). So issue loops stay rolled; and ptxas serializes every wgmma
// when a path may read an accumulator while a wgmma runs (C7514), hence the straight-line
// shape of warpgroup 1's pair (tests/wgmma_serial.sh checks every wgmma kernel for it).
//
// Shared layout: Q tile, then the two K stages, each a 128-byte-swizzled K-major tile: nine
// column blocks of 64 channels, each 64 rows x 128 B, the 16-byte chunk c of row r stored at
// chunk c ^ (r % 8) (the hardware's 128B swizzle, what TMA writes; blocks 1024-byte aligned).
// The same bytes are an MN-major SW128 operand for PV (LBO = 8192 between 64-channel blocks,
// SBO = 1024 between 8-token groups). P of warpgroup 0 has its own 8 KB block; P of warpgroup
// 1 reuses Q's rope block (its fragments live in registers; narrow tiles: both P in P0's block,
// see MlaTraits). Named barriers: 2 / 3 "P and
// reference of t0 / t1 published", 4 "warpgroup 1 is done with P(t0) and its reference",
// 6 + w inside warpgroup w.
//
// (DIRECT: the Q tile's channels in k16_channel's order inside each 16; each stage holds two raw
// tiles, see MlaTraits::SLOTS and raw_at.)
// Dynamic shared memory (bytes), as the generator computes it:
//     M_TILE * 576 * 2 + STAGES * 64 * 576 * 2 + P_BLOCK + 2*64*4 + 16 + SLOTS*9*8 + 1024 (alignment slack)
// (P_BLOCK: 64 * 128, or for a narrow tile of 32 rows 2 * 32 * 128 + 64 * 32)
//
// Alignment: q, k and out 16-byte aligned; every element stride a multiple of 8 elements
// (the host validates this). v must alias k with the same strides (the host requires it).
// Page sizes: 16, 32, 64 or a multiple of 64 (the TMA box of a tile never crosses a page).
#pragma once
#include "attn.cuh"
#include "sparse.cuh"
#include "timeline.cuh"

namespace dcpattn {

// SPARSE_ROW_: 0 dense; sparse MLA over gathered rows of that many bytes: 656 (fp8ds), 576 (e4m3
// with per-tensor scales)
// M_TILE_: packed query rows per CTA, 64, or 16 or 32 for the narrow tiles (see "Narrow tiles" above)
template <class T_, class KV_T_, int GROUP_, int THREADS_, int SPARSE_ROW_ = 0, int MAX_TOPK_ = 0, int M_TILE_ = 64>
struct MlaTraits {
    using T = T_;
    using KV_T = KV_T_;  // the cache's element type: T, or e4m3 (converted to fp16, see MT)
    static constexpr bool FP8 = sizeof(KV_T) == 1;
    static constexpr bool SPARSE = SPARSE_ROW_ != 0;  // sparse MLA over gathered rows (see "Sparse" above)
    static constexpr bool SCALED = SPARSE_ROW_ == SPARSE_FP8DS_ROW;  // fp8ds: each value times its block's fp32 scale
    static constexpr int MAX_TOPK = MAX_TOPK_;  // sparse: ids per query token
    // what the MMAs multiply (fp8ds: e4m3 times its fp32 scale, rounded to bf16)
    using MT = typename type_if<FP8 && !SCALED, fp16, T>::type;
    static constexpr int GROUP = GROUP_;
    static constexpr int THREADS = THREADS_;
    // two warpgroups of math; sparse: a third, the producer (see "Sparse" above), and how the
    // 168 registers a thread gets at launch are shared out between them (setmaxnreg)
    static constexpr int MATH_THREADS = 256, PRODUCER_THREADS = SPARSE ? 128 : 0;
    static constexpr int MATH_REGS = 232, PRODUCER_REGS = 40;
    static constexpr int DQK = 576, DV = 512;
    static constexpr int M_TILE = M_TILE_, KV_TILE = 64, STAGES = 2;
    static constexpr bool NARROW = M_TILE <= 32;  // S^T = K Q^T and O^T = V^T P^T (see "Narrow tiles")
    // FP8 on a dense narrow tile: the tile stays as it landed (see "FP8 on the narrow tiles");
    // else an FP8 tile is converted in shared memory (convert_tile)
    static constexpr bool DIRECT = FP8 && NARROW && !SPARSE;
    static constexpr bool CONVERT = FP8 && !DIRECT;
    // slots of the K stages: a tile t goes to slot t % SLOTS, in stage t % 2 (the stage of the
    // warpgroup that computes its S); DIRECT: a raw tile takes half a stage, so each stage holds two
    // (raw_at's half (t / 2) % 2), and tile t + 4 is on its way while t + 1 .. t + 3 are ahead
    static constexpr int SLOTS = DIRECT ? 4 : 2;
    // the swizzle (bytes) of the TMA map that brings K (the generator's kv_swizzle, which the host encodes)
    static constexpr int KV_SWIZZLE = !FP8 ? 128 : DIRECT ? 64 : 0;
    // per thread: S's accumulators (narrow: also those of one 64-channel block of O^T), O's, and
    // the query rows whose max and sum it keeps
    static constexpr int S_REGS = NARROW ? M_TILE / 2 : 32, O_REGS = NARROW ? 4 * S_REGS : 128;
    static constexpr int ROWS = NARROW ? M_TILE / 4 : 2;
    static constexpr float MAX_SLACK = 8.f;  // log2 units a tile's row max may top the running max
    static constexpr int CHUNKS = DQK / 8;                   // 16-byte chunks per row
    static constexpr int BLOCKS = DQK / 64;                  // 64-channel column blocks: 8 of V, 1 rope
    static constexpr int BLOCK_BYTES = 64 * 128;             // one 64-channel column block
    static constexpr int TILE_BYTES = BLOCKS * BLOCK_BYTES;  // 73728
    // FP8: a tile lands as nine raw 4 KB blocks of 64 tokens x 64 bytes in its stage, blocks
    // 0-7 where the 16-bit blocks 0-3 go, block 8 where the 16-bit block 8 goes, and is
    // converted in place into the stage's nine 16-bit blocks (see convert_tile); DIRECT: the
    // stage's other half (half 1) holds a second raw tile, blocks 0-7 where the 16-bit blocks
    // 4-7 go and block 8 after the first one's
    static constexpr int RAW_BLOCK = 64 * 64;
    static constexpr __device__ __forceinline__ int raw_at(int blk, int half = 0) {
        return blk < BLOCKS - 1 ? (blk + 8 * half) * RAW_BLOCK : (BLOCKS - 1) * BLOCK_BYTES + half * RAW_BLOCK;
    }
    // the Q tile: nine column blocks of M_TILE rows x 128 bytes (64 channels), swizzled as K's
    static constexpr int Q_BLOCK = M_TILE * 128;
    static constexpr int SMEM_Q = 0;
    static constexpr int SMEM_K = BLOCKS * Q_BLOCK;
    static constexpr int SMEM_P0 = SMEM_K + STAGES * TILE_BYTES;    // P of warpgroup 0 (A tile, 64 x 64)
    // P of warpgroup 1: Q's rope block (its fragments live in registers); narrow: P0 and P1 are
    // M_TILE x 64 operands (M_TILE x 128 bytes each) in P0's block, and the row maxima / sums of
    // the warps (red, 2 x 2 x 4 x M_TILE floats) after them; the block is P_BLOCK bytes
    static constexpr int SMEM_P1 = NARROW ? SMEM_P0 + M_TILE * 128 : SMEM_Q + (BLOCKS - 1) * BLOCK_BYTES;
    static constexpr int SMEM_RED = SMEM_P0 + 2 * M_TILE * 128;
    // (sparse narrow: the scales of stage 1's tile after red, 64 rows x 16 bytes)
    static constexpr int SMEM_SC1 = SMEM_RED + 64 * M_TILE;
    static constexpr int P_END = SMEM_SC1 + (SPARSE_ROW_ ? 64 * 16 : 0) - SMEM_P0;
    static constexpr int P_BLOCK = NARROW && P_END > BLOCK_BYTES ? P_END : BLOCK_BYTES;
    static constexpr int SMEM_X = SMEM_P0 + P_BLOCK;                // reference max per row [2][64] f32
    static constexpr int SMEM_FLAG = SMEM_X + 2 * 64 * 4;           // "reference moved" [2] u32 (+pad)
    static constexpr int SMEM_BAR = SMEM_FLAG + 16;                 // full[SLOTS][BLOCKS]
    // Sparse: the scales of a tile (64 rows x 4 fp32) of stage 0 here, of stage 1 in P1
    static constexpr int SMEM_SC = SMEM_BAR + SLOTS * BLOCKS * 8;
    static constexpr int SMEM_BYTES = SMEM_SC + (SPARSE ? 64 * 16 : 0) + 1024;  // + slack to align to 1024
    // (narrow: P1 is read by warpgroup 1's own PV too, so stage 1's scales have a slot of their own)
    static constexpr __device__ __forceinline__ int scales_at(int stage) {
        return stage ? (NARROW ? SMEM_SC1 : SMEM_P1) : SMEM_SC;
    }
    // Sparse: an fp8ds row is 41 chunks of 16 bytes: 32 of e4m3 values, then the 4 scales (chunk
    // SP_SCALES), then 8 of bf16 RoPE
    static constexpr int SP_SCALES = 32;

    static_assert(THREADS == MATH_THREADS + PRODUCER_THREADS, "two warpgroups (sparse: and the producer)");
    static_assert(2 * MATH_REGS + PRODUCER_REGS <= 3 * 168, "the registers of a 384-thread CTA");
    static_assert(GROUP >= 1 && GROUP <= 128, "query heads");
    static_assert(STAGES == 2, "stage w holds the tiles of warpgroup w");
    static_assert(M_TILE == 64 || M_TILE == 16 || (M_TILE == 32 && !SPARSE_ROW_),
                  "tiles of 64 rows, or narrow tiles of 16 (also sparse) or 32");
    static_assert(SMEM_BYTES <= 232448, "shared memory of an sm_90 CTA");
    static_assert(!FP8 || same_type<KV_T, e4m3>, "an 8-bit cache is e4m3");
    static_assert(BLOCKS == 9 && 2 * RAW_BLOCK == BLOCK_BYTES, "convert_tile's order");
    static_assert(!SPARSE || (FP8 && (SPARSE_ROW_ == DQK || (SCALED && same_type<T, bf16>))),
                  "sparse: e4m3 rows, or fp8ds rows (bf16 RoPE) with bf16 queries");
};

namespace mla_detail {

// bar.sync over the 128 threads of a warpgroup that also returns whether any passed true.
template <int ID> __device__ __forceinline__ bool nbar_or128(bool x) {
    unsigned r;
    asm volatile("{\n.reg .pred pi, po;\nsetp.ne.u32 pi, %1, 0;\nbar.red.or.pred po, %2, 128, pi;\nselp.u32 %0, 1, 0, po;\n}\n"
                 : "=r"(r)
                 : "r"((unsigned)x), "n"(ID)
                 : "memory");
    return r != 0;
}
// The barrier inside warpgroup wg (warp-uniform).
__device__ __forceinline__ bool wg_or(int wg, bool x) { return wg ? nbar_or128<7>(x) : nbar_or128<6>(x); }
__device__ __forceinline__ void wg_sync(int wg) { wg ? nbar_sync<7, 128>() : nbar_sync<6, 128>(); }
// The barrier of the two math warpgroups: the CTA's, or (sparse, with a producer) barrier 1.
template <class Tr> __device__ __forceinline__ void math_sync() {
    if constexpr (Tr::THREADS == Tr::MATH_THREADS)
        __syncthreads();
    else
        nbar_sync<1, Tr::MATH_THREADS>();
}

// Descriptor offset (16-byte units) of k16 step kk of a K-major SW128 tile: column block kk / 4,
// 32 bytes per step inside it. The start address field (low 14 bits) never carries: shared
// memory offsets stay below 256 KB.
__device__ __forceinline__ unsigned kstep(int kk) { return ((kk >> 2) * (64 * 128) + (kk & 3) * 32) >> 4; }
// The same in the Q tile, whose column blocks are Q_BLOCK bytes apart.
template <class Tr> __device__ __forceinline__ unsigned qstep(int kk) {
    return ((kk >> 2) * Tr::Q_BLOCK + (kk & 3) * 32) >> 4;
}

// Stage "load Q": the M_TILE packed rows x 576 channels of the CTA's tile (zero rows past the end)
// into the Q tile at sQ, 128-byte swizzled like the K tiles, and waited for.
template <class Tr, class Cta>
__device__ __forceinline__ void load_q_tile(const dcpattn_attn_kparams &p, const Cta &cta, unsigned sQ, int tid) {
    constexpr int CHUNKS = Tr::CHUNKS;
    const char *qb = static_cast<const char *>(p.q);
    for (int idx = tid; idx < Tr::M_TILE * CHUNKS; idx += Tr::MATH_THREADS) {
        const int r = idx / CHUNKS, c = idx % CHUNKS, R = cta.row0 + r;
        const bool ok = R < cta.nrows;
        const long long off = cta.q_chunk(0, R, c);
        cp_async16(sQ + (c >> 3) * Tr::Q_BLOCK + r * 128 + (((c & 7) ^ (r & 7)) << 4), qb + off, ok ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
}

// A finished row (reference max m, sum l, both log2 domain) of the output `out`: the factor its O
// takes (1 / l; sparse: the head's sink joins the row first; FP8: v_scale) and, in lse2, its LSE.
template <class Tr>
__device__ __forceinline__ float row_finish(const dcpattn_attn_kparams &p, const AttnRowOut &out, float m, float l,
                                            float &lse2) {
    float inv = 1.f;
    if constexpr (Tr::SPARSE) inv = sparse_sink(p, out.h, m, l);  // (m, l then include the sink)
    inv *= sum_inv(l);
    if constexpr (Tr::FP8 && !Tr::SCALED) inv *= p.v_scale[0];  // (value = e4m3 * v_scale)
    lse2 = row_lse2(m, l);
    return inv;
}

// Stage "epilogue": this thread's fragments of rows r_lo and r_hi, the channels of warpgroup wg,
// normalized by the rows' sums l and written: to o_part and lse_part (split-KV across launches),
// else to out and lse. Sparse: the head's sink (rank 0) joins the row first.
template <class Tr, class Cta>
__device__ __forceinline__ void store_rows(const dcpattn_attn_kparams &p, const Cta &cta, const float (&o)[128],
                                           float m_lo, float m_hi, float l_lo, float l_hi, int wg, int r_lo, int r_hi,
                                           int q4) {
    using T = typename Tr::T;
    const bool split_out = p.num_splits > 1;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int R = cta.row0 + (half ? r_hi : r_lo);
        if (R >= cta.nrows) continue;
        const AttnRowOut out = cta.row_out(0, R);
        float lse2;
        const float inv = row_finish<Tr>(p, out, half ? m_hi : m_lo, half ? l_hi : l_lo, lse2);
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
            unsigned *dst = reinterpret_cast<unsigned *>(static_cast<char *>(p.out) +
                                                         (out.out_index() + wg * 256 + 2 * q4) * 2);
#pragma unroll
            for (int i = 0; i < 32; ++i)
                dst[i * 4] = pack2<T>(o[4 * i + 2 * half] * inv, o[4 * i + 2 * half + 1] * inv);
            if (wg == 0 && q4 == 0 && p.lse) out.lse(lse2);
        }
    }
}

// The rope block's four k16 steps of warp wi's 16 Q rows as wgmma A fragments (ldmatrix from
// the swizzled Q tile: matrix i = rows +8(i&1), channels +8(i>>1)); they stay in registers.
template <class Tr> __device__ __forceinline__ void load_q_rope(unsigned (&qr)[4][4], unsigned sQ, int wi, int lane) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int mi = lane >> 3, row = wi * 16 + (mi & 1) * 8 + (lane & 7);
        const int c = (Tr::DQK / 16 - 4 + i) * 2 + (mi >> 1);
        ldsm_x4(sQ + (c >> 3) * Tr::BLOCK_BYTES + row * 128 + (((c & 7) ^ (row & 7)) << 4), qr[i]);
    }
}

// FP8 cache: the exponent e that puts the largest magnitude of the landed Q tile at sQ (T) in
// [2^top, 2^(top + 1)) (attn.cuh, q_exponent). Each thread reads the 16-byte chunks tid, tid +
// 256, .. (the passes of q_tile_to_fp16 below); the warps' maxima meet in red
// (8 words no one else uses meanwhile).
template <class Tr> __device__ __forceinline__ int q_tile_exponent(unsigned sQ, unsigned *red, int tid, int top) {
    constexpr int THREADS = Tr::MATH_THREADS, ALL = Tr::M_TILE * Tr::CHUNKS;
    constexpr int N = (ALL + THREADS - 1) / THREADS;  // passes (the narrow tile's last one partial)
    math_sync<Tr>();  // every thread's cp.async of the tile has landed
    unsigned mx = 0, v[4];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        if (ALL % THREADS != 0 && tid + j * THREADS >= ALL) break;
        ld_shared_u4(sQ + (tid + j * THREADS) * 16, v);
#pragma unroll
        for (int k = 0; k < 4; ++k) mx = max(mx, bf16_mag2(v[k]));
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, d));
    if ((tid & 31) == 0) red[tid >> 5] = mx;
    math_sync<Tr>();
#pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) mx = max(mx, red[w]);
    return q_exponent<typename Tr::T>(mx, top);
}

// FP8 cache, bf16 query: the landed Q tile at sQ into fp16 in place, times 2^-e (e for
// Q_FP16_TOP); returns 2^e, by which the scores are then scaled. Ends with the tile in fp16 for
// the async proxy; the caller's barrier makes it every thread's.
template <class Tr> __device__ __forceinline__ float q_tile_to_fp16(unsigned sQ, unsigned *red, int tid) {
    constexpr int THREADS = Tr::MATH_THREADS, ALL = Tr::M_TILE * Tr::CHUNKS;
    constexpr int N = (ALL + THREADS - 1) / THREADS;
    const int e = q_tile_exponent<Tr>(sQ, red, tid, Q_FP16_TOP);
    const float down = exp2i(-e);
    unsigned v[4];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        if (ALL % THREADS != 0 && tid + j * THREADS >= ALL) break;
        const unsigned a = sQ + (tid + j * THREADS) * 16;
        ld_shared_u4(a, v);
        bf16x8_to_fp16(v, down);
        st_shared_u4(a, v);
    }
    fence_proxy_async();
    return exp2i(e);
}

// DIRECT (FP8 on a dense narrow tile): the landed Q tile at sQ (T, 128-byte swizzled) in fp16 in
// place (bf16: times 2^-e, as q_tile_to_fp16), each 16 channels in k16_channel's order, the
// order in which S's A fragments of K hold them (sw64_e4m3_k_frags): of a 16-channel group's
// fp16 pairs 0-7 (two 16-byte chunks, a and b), the first chunk takes pairs 0, 2, 4, 6 and the
// second 1, 3, 5, 7. The two chunks of a group are stored chunks 2 i and 2 i + 1 of the tile
// (the swizzle XORs the chunk index with the row, so it swaps them in odd rows); a thread
// takes both. Returns 2^e, by which the scores are then scaled (1 for an fp16 query); ends with
// the tile visible to wgmma (the caller's barrier makes it every thread's).
template <class Tr> __device__ __forceinline__ float q_tile_to_fp16_k16(unsigned sQ, unsigned *red, int tid) {
    constexpr int THREADS = Tr::MATH_THREADS, GROUPS = Tr::M_TILE * Tr::CHUNKS / 2;
    constexpr int N = (GROUPS + THREADS - 1) / THREADS;
    constexpr bool BF16 = !same_type<typename Tr::T, fp16>;
    static_assert(k16_channel(2) == 4 && k16_channel(8) == 2, "the pair order below");
    int e = 0;
    if constexpr (BF16)
        e = q_tile_exponent<Tr>(sQ, red, tid, Q_FP16_TOP);  // (its barriers: the tile landed, and is read)
    else
        math_sync<Tr>();  // every thread's cp.async of the tile has landed
    const float down = exp2i(-e);
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const int i = tid + j * THREADS;
        if (GROUPS % THREADS != 0 && i >= GROUPS) break;
        const int r = (i >> 2) % Tr::M_TILE;  // the row of stored chunks 2 i, 2 i + 1
        const unsigned lo = sQ + 32 * i + (r & 1) * 16, hi = sQ + 32 * i + (~r & 1) * 16;  // channels +0, +8
        unsigned a[4], b[4];
        ld_shared_u4(lo, a);
        ld_shared_u4(hi, b);
        if constexpr (BF16) {
            bf16x8_to_fp16(a, down);
            bf16x8_to_fp16(b, down);
        }
        const unsigned even[4] = {a[0], a[2], b[0], b[2]}, odd[4] = {a[1], a[3], b[1], b[3]};
        st_shared_u4(lo, even);
        st_shared_u4(hi, odd);
    }
    fence_proxy_async();
    return exp2i(e);
}

// Token rows r0.. (r0 < KV_TILE) of NB consecutive 16-bit blocks of a stage (blk0.., st: the
// stage's first byte; RAW: raw e4m3 blocks at raw_at, rows of 64 bytes) become zeros, by the 128
// threads of one warpgroup (tw): the V rows past a piece's last visible key, where unused slots
// may hold NaN, which would survive P = 0. (Whole rows: the swizzle does not matter.)
template <class Tr, int NB, bool RAW = false>
__device__ __forceinline__ void zero_v_rows(unsigned st, int blk0, int r0, int tw, int half = 0) {
    const unsigned zero[4] = {0u, 0u, 0u, 0u};
    constexpr int LC = RAW ? 2 : 3, C = 1 << LC;  // chunks a row: 1 << LC
    static_assert((NB & (NB - 1)) == 0, "NB: a power of two");
    for (int idx = tw; idx < (Tr::KV_TILE - r0) * NB * C; idx += 128) {  // C chunks a row and block
        const int blk = blk0 + ((idx >> LC) & (NB - 1));
        st_shared_u4(st + (RAW ? Tr::raw_at(blk, half) : blk * Tr::BLOCK_BYTES) + (r0 + (idx >> LC) / NB) * (16 * C) +
                         ((idx & (C - 1)) << 4),
                     zero);
    }
}

// Stage "convert" (FP8): the tile whose stage starts at st, landed as nine raw e4m3 blocks (64
// tokens x 64 bytes at raw_at(b), each on its mbarrier at bars + 8 b with parity par), into the
// stage's nine fp16 blocks (the SW128 layout of a 16-bit tile), in place, by the 128 threads of one
// warpgroup (tw: the thread's index in it); V's token rows from `valid` on (past the last visible
// key, where unused slots may hold NaN) then become zeros (K's are masked in the softmax). A thread
// takes 16-byte pieces i = tw, tw + 128 of a raw block (row i / 4, channels 16 (i % 4) + 0..15) and
// writes chunks 2 (i % 4) and 2 (i % 4) + 1 of the row: a warp reads 512 contiguous bytes and
// writes rows whose swizzle spreads each quarter-warp's chunks over all banks. Raw blocks 0-7 lie
// where 16-bit blocks 0-3 go (16-bit block b covers raw 2b and 2b + 1), raw 8 where 16-bit 8 goes;
// the order keeps every raw byte read before a 16-bit block covers it: 4-7 first (they cover no raw
// byte), the four loaded before any is converted; raw 8 and 0-3 into registers; the warpgroup
// meets; 8, 0-3. The caller makes sure that no one reads the stage's 16-bit blocks 4-7 any more.
// Ends with the tile ready for the warpgroup's wgmma (the other warpgroup reads its V half after a
// barrier it meets later).
// Sparse: the stage's one mbarrier (bars) brings the whole raw tile, its rows past the kept ones
// already zeros (sparse_gather), so no row is masked here. SCALED: raw blocks 0-7, the
// rows' scales at sc (16 bytes a row: the fp32 scale of channels 128 j.. at 4 j) and block 8
// already in bf16; a value becomes bf16(e4m3 * scale): the e4m3 byte placed exactly into bf16,
// then one rounding of its product with the scale split in two bf16 halves (bf16x2_scale); the
// scales of a piece's row are read once per two blocks. Block 8 is read by wgmma as the producer
// landed it (see sparse_gather).
template <class Tr>
__device__ __forceinline__ void convert_tile(unsigned st, unsigned bars, unsigned sc, unsigned par, int valid, int wg,
                                             int tw) {
    // (sparse: the scale of channels 128 sb.. of the thread's row of piece k as bf16 pairs hi, lo)
    struct Scale {
        unsigned hi, lo;
    };
    auto scale_of = [&](int sb, int k) -> Scale {
        const float x = ld_shared_f32(sc + ((tw + 128 * k) >> 2) * 16 + sb * 4);
        const unsigned hi = pack2<bf16>(x, x);
        const float lo = x - hi_float(bf16{}, hi);
        return {hi, pack2<bf16>(lo, lo)};
    };
    auto fetch = [&](int blk, int k, unsigned (&w)[4]) {
        if (!Tr::SPARSE && k == 0) mbar_wait(add_at(bars, 8 * blk), par);
        ld_shared_u4(st + Tr::raw_at(blk) + (tw + 128 * k) * 16, w);
    };
    auto put = [&](int blk, int k, const unsigned (&w)[4], Scale x) {
        const int i = tw + 128 * k, r = i >> 2, h = i & 3;
        unsigned a[4], b[4];
        if constexpr (Tr::SCALED) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                e4m3x4_to<bf16>(w[j], a[2 * j], a[2 * j + 1]);
                e4m3x4_to<bf16>(w[2 + j], b[2 * j], b[2 * j + 1]);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                a[j] = bf16x2_scale(a[j], x.hi, x.lo);
                b[j] = bf16x2_scale(b[j], x.hi, x.lo);
            }
        } else {
            e4m3x4_to<fp16>(w[0], a[0], a[1]);
            e4m3x4_to<fp16>(w[1], a[2], a[3]);
            e4m3x4_to<fp16>(w[2], b[0], b[1]);
            e4m3x4_to<fp16>(w[3], b[2], b[3]);
        }
        const unsigned row = st + blk * Tr::BLOCK_BYTES + r * 128;
        st_shared_u4(row + (((2 * h) ^ (r & 7)) << 4), a);
        st_shared_u4(row + (((2 * h + 1) ^ (r & 7)) << 4), b);
    };
    // the scales of the thread's two rows for channel blocks blk (sparse; unused otherwise)
    Scale x0{}, x1{};
    if constexpr (Tr::SPARSE) mbar_wait(bars, par);  // the whole tile, its scales first read below
    auto scales = [&](int blk) {
        if constexpr (Tr::SCALED) {
            x0 = scale_of(blk >> 1, 0);
            x1 = scale_of(blk >> 1, 1);
        }
    };
    // a thread's two pieces of four raw blocks, all loaded before any is converted
    unsigned w[4][2][4];
    auto fetch4 = [&](int b0) {
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            fetch(b0 + b, 0, w[b][0]);
            fetch(b0 + b, 1, w[b][1]);
        }
    };
    auto put2 = [&](int blk, int b) {
        if (!(blk & 1)) scales(blk);
        put(blk, 0, w[b][0], x0);
        put(blk, 1, w[b][1], x1);
    };
    fetch4(4);
#pragma unroll
    for (int b = 0; b < 4; ++b) put2(4 + b, b);
    unsigned r8[2][4];
    if constexpr (!Tr::SCALED) {
        fetch(8, 0, r8[0]);
        fetch(8, 1, r8[1]);
    }
    fetch4(0);
    wg_sync(wg);  // every raw byte read
    if constexpr (!Tr::SCALED) {
        put(8, 0, r8[0], x0);
        put(8, 1, r8[1], x1);
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) put2(b, b);
    if (!Tr::SPARSE && valid < Tr::KV_TILE) {  // (the last tile of a piece only)
        wg_sync(wg);  // the conversion's stores to those rows are done
        zero_v_rows<Tr, 8>(st, 0, max(valid, 0), tw);  // V's 8 blocks
    }
    fence_proxy_async();  // generic-proxy writes -> read by wgmma
    wg_sync(wg);
}

// Sparse: the producer warpgroup (pt = tid - 256) gathers every tile: tile t, the kept rows
// 64 t .. 64 t + 63 of the list `rows` (n entries), into stage s = t % 2 once warpgroup 0 is done
// with the bytes there that the gather overwrites (raw_free[s], its 4 warps' arrivals; tile 1 once
// Q's rope block, where stage 1's scales go, is read: named barrier 5), two threads a row by
// 16-byte cp.async; each thread waits for its copies (cp.async.wait_all), fences them for the async
// proxy and arrives on the stage's mbarrier (the converting warpgroup waits for it). Half h =
// pt % 2 of a row's threads takes the e4m3 chunks c = 2 i + h (channels 16 c..), each to raw
// block c / 4 (64 bytes a row, as TMA lays a dense FP8 tile); of a SCALED row (41 chunks) the
// RoPE chunks 4 h .. 4 h + 3 (bf16 already) into 16-bit block 8, swizzled, and half 0 the scales,
// to scales_at(stage); of an e4m3 row (36 chunks) the RoPE chunks 32 + 2 h, 33 + 2 h to raw
// block 8. Rows past the list land as zeros (copies that read nothing).
template <class Tr>
__device__ __forceinline__ void sparse_gather(const dcpattn_attn_kparams &p, const long long *rows, int n,
                                              unsigned base, unsigned bars, int pt, Timeline &tl) {
    constexpr int KV_TILE = Tr::KV_TILE, BLOCKS = Tr::BLOCKS;
    const char *kb = static_cast<const char *>(p.k);
    const int n_tiles = (n + KV_TILE - 1) / KV_TILE, r = pt >> 1, h = pt & 1;
#pragma unroll 1
    for (int t = 0; t < n_tiles; ++t) {
        const int s = t & 1, k = t * KV_TILE + r;
        const long long off = k < n ? rows[k] : -1;
        if (t == 1) nbar_sync<5, Tr::THREADS>();  // Q's rope block is read
        if (t >= 2) mbar_wait(bars + 8 * (BLOCKS * s + 1), ((t >> 1) - 1) & 1);  // raw_free[s] of tile t - 2
        tl.mark(TL_WAIT_PEER);
        // a row past the kept ones lands as zeros (nothing read: the conversion masks no row)
        const int sz = off >= 0 ? 16 : 0;
        const char *row = kb + (off >= 0 ? off : 0);
        const unsigned st = base + Tr::SMEM_K + s * Tr::TILE_BYTES, raw = st + r * 64 + h * 16;
#pragma unroll
        for (int i = 0; i < 16; ++i)  // e4m3 chunk 2 i + h
            cp_async16<128>(raw + (i >> 1) * Tr::RAW_BLOCK + (i & 1) * 32, row + 32 * i + 16 * h, sz);
        if constexpr (Tr::SCALED) {
            if (h == 0) cp_async16<128>(base + Tr::scales_at(s) + r * 16, row + 16 * Tr::SP_SCALES, sz);
            const unsigned rope = st + (BLOCKS - 1) * Tr::BLOCK_BYTES + r * 128;
#pragma unroll
            for (int i = 0; i < 4; ++i) {  // RoPE chunk j = 4 h + i
                const int j = 4 * h + i;
                cp_async16<128>(rope + ((j ^ (r & 7)) << 4), row + 16 * (Tr::SP_SCALES + 1 + j), sz);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 2; ++i)  // RoPE chunk j = 2 h + i, e4m3 like the rest: raw block 8
                cp_async16<128>(st + Tr::raw_at(BLOCKS - 1) + r * 64 + (2 * h + i) * 16,
                                row + 16 * (32 + 2 * h + i), sz);
        }
        tl.mark(TL_GATHER);
        // the rows landed; the fence orders them (the RoPE block, which wgmma reads as it landed)
        // before the async proxy; then the stage's mbarrier
        cp_async_wait_all();
        fence_proxy_async();
        mbar_arrive(bars + 8 * (BLOCKS * s));
        tl.mark(TL_WAIT_LOAD);
    }
    if (n_tiles < 2) nbar_sync<5, Tr::THREADS>();  // (the math warpgroups' arrival there)
}

// Stage "split merge" of the two warpgroups: each holds the sums of its half of every row's keys
// (l_lo, l_hi of this thread's quad); both end with the whole rows' sums. xm: 2 x 64 floats of
// shared memory no one else reads meanwhile.
template <class Tr>
__device__ __forceinline__ void sum_warpgroups(float &l_lo, float &l_hi, float *xm, int wg, int r_lo, int r_hi, int q4) {
    l_lo = quad_sum(l_lo);
    l_hi = quad_sum(l_hi);
    math_sync<Tr>();  // every reader of xm is past it
    if (q4 == 0) {
        xm[wg * 64 + r_lo] = l_lo;
        xm[wg * 64 + r_hi] = l_hi;
    }
    math_sync<Tr>();
    l_lo += xm[(wg ^ 1) * 64 + r_lo];
    l_hi += xm[(wg ^ 1) * 64 + r_hi];
}

// Narrow tiles (S^T and O^T, 64 x N accumulators, N / 2 elements a thread): accumulator element
// e of a group of N / 2 belongs to the thread's query row c = narrow_c(e) (of N / 4), which is
// row narrow_row(c, q4) of the tile; elements e and e + 2 are channels (keys) 8 apart.
__device__ __forceinline__ int narrow_c(int e) { return ((e >> 2) << 1) | (e & 1); }
__device__ __forceinline__ int narrow_row(int c, int q4) { return 8 * (c >> 1) + 2 * q4 + (c & 1); }

// Narrow tiles, stage "split merge" of the warps: each thread holds sums over its keys of its
// rows; every thread ends with the whole rows' sums (red: 8 x M_TILE floats of shared memory no
// one else reads meanwhile).
template <class Tr> __device__ __forceinline__ void sum_narrow(float (&l)[Tr::ROWS], float *red, int warp, int lane) {
    constexpr int N = Tr::M_TILE;
#pragma unroll
    for (int c = 0; c < Tr::ROWS; ++c)
#pragma unroll
        for (int d = 4; d < 32; d <<= 1) l[c] += __shfl_xor_sync(0xffffffffu, l[c], d);
    math_sync<Tr>();  // every reader of red is past it
    if (lane < 4)
#pragma unroll
        for (int c = 0; c < Tr::ROWS; ++c) red[warp * N + narrow_row(c, lane)] = l[c];
    math_sync<Tr>();
#pragma unroll
    for (int c = 0; c < Tr::ROWS; ++c) {
        float x = 0.f;
#pragma unroll
        for (int w = 0; w < Tr::MATH_THREADS / 32; ++w) x += red[w * N + narrow_row(c, lane & 3)];
        l[c] = x;
    }
}

// Narrow tiles, stage "epilogue": this thread's O^T elements (channels 256 wg + 16 wi + g + 64 b
// + 8 h of its rows; DIRECT: 256 wg + 16 wi + 2 g + 64 b + h, see pv_narrow), normalized by the
// rows' sums l and written as store_rows writes.
template <class Tr, class Cta>
__device__ __forceinline__ void store_narrow(const dcpattn_attn_kparams &p, const Cta &cta, const float (&o)[Tr::O_REGS],
                                             const float (&m)[Tr::ROWS], const float (&l)[Tr::ROWS], int wg, int wi,
                                             int lane) {
    constexpr int E = Tr::S_REGS;  // elements of a block of O^T's 64 rows
    using T = typename Tr::T;
    const bool split_out = p.num_splits > 1, owner = wg == 0 && wi == 0 && lane < 4;  // (owner: writes the lse)
    constexpr int HALF = Tr::DIRECT ? 1 : 8;  // channels between a block's halves
    const int ch0 = 256 * wg + 16 * wi + (Tr::DIRECT ? 2 : 1) * (lane >> 2);  // (block b, half h: ch0 + 64 b + HALF h)
#pragma unroll
    for (int c = 0; c < Tr::ROWS; ++c) {
        const int R = cta.row0 + narrow_row(c, lane & 3);
        if (R >= cta.nrows) continue;
        const AttnRowOut out = cta.row_out(0, R);
        float lse2;
        const float inv = row_finish<Tr>(p, out, m[c], l[c], lse2);
        // the row's channel ch0 + 64 b + HALF h (block b of O^T, half h), normalized
        auto val = [&](int b, int h) { return o[E * b + 4 * (c >> 1) + 2 * h + (c & 1)] * inv; };
        if (split_out) {
            const long long prow = out.part(cta.split);
            float *dst = p.o_part + prow * Tr::DV + ch0;
#pragma unroll
            for (int b = 0; b < 4; ++b)
#pragma unroll
                for (int h = 0; h < 2; ++h) dst[64 * b + HALF * h] = val(b, h);
            if (owner) p.lse_part[prow] = lse2;
        } else {
            unsigned short *dst = reinterpret_cast<unsigned short *>(out.out(ch0));
#pragma unroll
            for (int b = 0; b < 4; ++b)
#pragma unroll
                for (int h = 0; h < 2; ++h) dst[64 * b + HALF * h] = (unsigned short)pack2<T>(val(b, h), 0.f);
            if (owner && p.lse) out.lse(lse2);
        }
    }
}

}  // namespace mla_detail

// The balanced schedule (p.workers > 0; grid p.workers x 1 x row tiles): every sequence costs
// one unit per 64-key tile of its local keys and DCPATTN_SCHED_RESTART units more for starting
// and ending a piece (Q and the first tiles loaded with nothing to overlap them, the epilogue),
// all sequences in order, cut into p.workers ranges of equal length; the restart units come after
// a sequence's tiles and hold no keys (a piece inside them has none, and a sequence without
// keys still has a piece that writes its rows);
// CTA (w, z) runs row tile z of every sequence piece in range w, the last piece first. A
// sequence cut between ranges w0 < ... < w1: its pieces in w0 .. w1 - 1 (index j = w - w0)
// are the last piece of their range, run first, and each leaves its state in the workspace
// (record of CTA (w, z): 33 x 256 f4, thread-major) under a flag set to the run's token;
// CTA (w1, z) runs its piece last, waits for the flags (set long before: lower workers run
// those pieces first, and a CTA only ever waits for CTAs launched before it), adds the states
// to its own and writes the rows. The states are added along a binomial tree
// (dcpattn_sched_tree_read, templates/sched.cuh), so that no CTA adds a long chain of them
// after the pieces end (each a round trip of a state, up to 135 KB, through L2): piece j with
// t trailing one bits first adds the states of pieces j - 1, j - 2, j - 4, .., j - 2^(t-1) to
// its own and leaves the sum, each as soon as its flag is set; the last piece adds one sum per
// one bit of its index. (Only where every worker holds a unit; with fewer units than workers
// the last piece adds every state.) A reader waits for each flag and resets it, so a graph
// replay with the same token starts clean; a fresh token per run keeps any stale word from
// matching; the order of the additions depends only on the lengths, so a replay gives the bits
// of an eager run.
struct MlaSchedule {
    enum { FINAL = 0, PUBLISH = 1, MERGE = 2 };
    static_assert(DCPATTN_BAL_RECORD_F4 == (32 + 1) * 256, "a record: 32 float4 of O and one of (m, l) per thread");
    long long lo, hi;  // this worker's units
    long long s;       // first unit of sequence b
    long long U;       // all units
    int b, u;          // current sequence, its units
    static constexpr int KV_TILE = 64;  // keys per unit (MlaTraits::KV_TILE)

    static __device__ __forceinline__ int units(const dcpattn_attn_kparams &p, int b) {
        return dcpattn_sched_units(ldg_i32(p.seqused_k + b), KV_TILE, DCPATTN_SCHED_RESTART);
    }
    // Finds this worker's range and its last sequence; false: the range is empty. `scratch`:
    // 259 long longs of shared memory that no one else touches until init returns.
    __device__ __forceinline__ bool init(const dcpattn_attn_kparams &p, long long *scratch) {
        // one sequence per thread (the host asks for at most 256); straight-line code: a
        // thread-dependent loop or branch here makes ptxas serialize the kernel's wgmmas (C7520)
        const int tid = threadIdx.x, lane = tid & 31, B = p.batch;
        const long long n = tid < B ? units(p, tid) : 0;
        scratch[tid] = n;
        __syncthreads();
        if (tid < 32) {  // exclusive scan of the 256 counts: 8 per lane, then across the lanes
            long long v[8], tot = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) tot += v[i] = scratch[lane * 8 + i];
            long long inc = tot;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const unsigned ylo = __shfl_up_sync(0xffffffffu, (unsigned)inc, d);
                const unsigned yhi = __shfl_up_sync(0xffffffffu, (unsigned)(inc >> 32), d);
                if (lane >= d) inc += (long long)(((unsigned long long)yhi << 32) | ylo);
            }
            long long ex = inc - tot;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                scratch[lane * 8 + i] = ex;
                ex += v[i];
            }
            if (lane == 31) scratch[256] = inc;
        }
        __syncthreads();
        const long long total = scratch[256], G = p.workers, at = scratch[tid];
        lo = total * blockIdx.x / G;
        hi = total * (blockIdx.x + 1) / G;
        if (at < hi && hi <= at + n) {  // this thread's sequence holds the range's last unit
            scratch[257] = tid;
            scratch[258] = at;
        }
        fence_proxy_async();  // (TMA writes these bytes next)
        __syncthreads();
        const bool any = lo < hi;  // (else scratch[257..258] were not written)
        b = warp_uniform(any ? (int)scratch[257] : 0);
        s = warp_uniform(any ? scratch[258] : 0ll);
        lo = warp_uniform(lo);
        hi = warp_uniform(hi);
        U = warp_uniform(total);
        u = units(p, b);
        return lo < hi;
    }
    // The keys of the current piece into cta; its role.
    template <class Cta> __device__ __forceinline__ int keys(Cta &cta) const {
        const long long plo = max(s, lo), phi = min(s + u, hi);
        const int Lk = cta.p.seqused_k[b];
        cta.set_keys(Lk, dcpattn_sched_key(plo - s, KV_TILE, Lk), dcpattn_sched_key(phi - s, KV_TILE, Lk));
        return s + u > hi ? PUBLISH : s < lo ? MERGE : FINAL;
    }
    // The piece before (a lower sequence); false: none is left.
    __device__ __forceinline__ bool next(const dcpattn_attn_kparams &p) {
        if (s <= lo) return false;
        --b;
        u = units(p, b);
        s -= u;
        return true;
    }
    // The word of CTA (w, blockIdx.z): its publication flag.
    static __device__ __forceinline__ unsigned long long *pub_flag(const dcpattn_attn_kparams &p, int w) {
        return p.flags + (long long)w * gridDim.z + blockIdx.z;
    }
    static __device__ __forceinline__ f4 *record(const dcpattn_attn_kparams &p, int w) {
        return reinterpret_cast<f4 *>(p.o_part) + ((long long)w * gridDim.z + blockIdx.z) * DCPATTN_BAL_RECORD_F4 +
               threadIdx.x;
    }
    // Which of the thread's NR rows its O element i belongs to: the m64 tile's two (elements 4 k,
    // 4 k + 1 the first, 4 k + 2, 4 k + 3 the second), a narrow tile's N / 4 (mla_detail::narrow_c
    // of the element's place in its 64-channel block of 2 NR).
    template <int NR> static __device__ __forceinline__ int row_of(int i) {
        return NR == 2 ? (i >> 1) & 1 : mla_detail::narrow_c(i % (2 * NR));
    }
    // This thread's O (relative to its rows' reference max m) and row-sum parts, then the flag;
    // a piece inside the tree (see above) adds its subtree's states first. live: whether this
    // thread's warp holds a row of the tile (its rows are 16 apart from the other warps': a 64-row
    // tile holding 16 rows moves a quarter of the bytes; on a narrow tile every thread holds
    // channels of every row). A record holds NO / 4 float4 of O, then the NR maxima and the NR sums.
    template <int NO, int NR>
    __device__ __forceinline__ void publish(const dcpattn_attn_kparams &p, float (&o)[NO], float (&m)[NR],
                                            float (&l)[NR], bool live) const {
        static_assert(NO / 4 + NR / 2 <= 33, "a thread's part of a record");
        if (U >= p.workers) merge(p, o, m, l, live, false);
        f4 *r = record(p, blockIdx.x);
        if (live) {
#pragma unroll
            for (int i = 0; i < NO / 4; ++i) st_cg_f4(r + i * 256, f4{o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]});
            float ml[2 * NR];
#pragma unroll
            for (int k = 0; k < NR; ++k) ml[k] = m[k], ml[NR + k] = l[k];
#pragma unroll
            for (int i = 0; i < NR / 2; ++i) st_cg_f4(r + (NO / 4 + i) * 256, f4{ml[4 * i], ml[4 * i + 1], ml[4 * i + 2], ml[4 * i + 3]});
        }
        fence_gpu();
        __syncthreads();
        if (threadIdx.x == 0) st_release_u64(pub_flag(p, blockIdx.x), p.token);
    }
    // Whether worker w has any unit (with fewer units than workers, some have none and publish
    // nothing).
    __device__ __forceinline__ bool has_units(const dcpattn_attn_kparams &p, int w) const {
        return dcpattn_sched_lo(U, p.workers, w) < dcpattn_sched_lo(U, p.workers, w + 1);
    }
    // Adds the states of the current sequence's pieces that this one reads (last: it is the
    // sequence's last piece), each once its flag is set: its tree reads (see above), or where some
    // worker holds no unit (the last piece only) every earlier piece's.
    template <int NO, int NR>
    __device__ __forceinline__ void merge(const dcpattn_attn_kparams &p, float (&o)[NO], float (&m)[NR],
                                          float (&l)[NR], bool live, bool last) const {
        const int w0 = dcpattn_sched_owner(U, p.workers, s), j = blockIdx.x - w0;  // (w0 holds its first unit)
        const bool tree = U >= p.workers;
#pragma unroll 1
        for (int k = 0, reads = tree ? 32 - __clz(j) : j; k < reads; ++k) {
            const int c = tree ? dcpattn_sched_tree_read(j, last, k) : has_units(p, w0 + k) ? k : -1;
            if (c < 0) continue;
            if (threadIdx.x == 0) {
                unsigned long long *f = pub_flag(p, w0 + c);
                while (ld_acquire_u64(f) != p.token) nanosleep_ns(100);
                *reinterpret_cast<volatile unsigned long long *>(f) = 0ull;  // clean for a replay
            }
            __syncthreads();
            if (!live) continue;
            const f4 *r = record(p, w0 + c);
            float ml[2 * NR], a[NR], cw[NR];
#pragma unroll
            for (int i = 0; i < NR / 2; ++i) {
                const f4 st = ld_cg_f4(r + (NO / 4 + i) * 256);
                ml[4 * i] = st.x, ml[4 * i + 1] = st.y, ml[4 * i + 2] = st.z, ml[4 * i + 3] = st.w;
            }
#pragma unroll
            for (int k = 0; k < NR; ++k) {
                const float nm = fmaxf(m[k], ml[k]);
                // (a row empty in both stays empty: both factors 0)
                a[k] = state_weight(m[k], nm);
                cw[k] = state_weight(ml[k], nm);
                l[k] = fmaf(l[k], a[k], ml[NR + k] * cw[k]);
                m[k] = nm;
            }
#pragma unroll
            for (int i = 0; i < NO / 4; ++i) {
                const f4 v = ld_cg_f4(r + i * 256);
                const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int k = row_of<NR>(4 * i + e);
                    o[4 * i + e] = fmaf(o[4 * i + e], a[k], x[e] * cw[k]);
                }
            }
        }
    }
};

// Sparse: query token t's heads [h0, h0 + nrows) against the n keys of its kept list, every key
// visible to every row (causality is the indexer's, in its ids): what mla_decode reads of AttnCta.
struct SparseCta {
    const dcpattn_attn_kparams &p;
    long long t;
    int h0, b, split, row0, nrows, kv_begin, cta_hi, cta_lo, n_tiles;
    __device__ __forceinline__ SparseCta(const dcpattn_attn_kparams &p_, long long t_, int h0_, int b_, int n, int m_tile)
        : p(p_), t(t_), h0(h0_), b(b_), split(0), row0(0), nrows(min(m_tile, p_.hq - h0_)), kv_begin(0), cta_hi(n),
          cta_lo(n), n_tiles((n + 63) / 64) {}
    __device__ __forceinline__ bool empty() const { return false; }
    __device__ __forceinline__ int row_limit(int) const { return cta_hi; }
    __device__ __forceinline__ long long q_chunk(int, int R, int c) const {
        return R < nrows ? (t * p.q_st + (long long)(h0 + R) * p.q_sh + c * 8) * 2 : 0;
    }
    __device__ __forceinline__ AttnRowOut row_out(int, int R) const { return {p, t, h0 + R}; }
};

// BALANCED: the balanced schedule (p.workers > 0), else one (sequence, split) per CTA (the
// kernel entry picks; two instances, so that the common one keeps its straight-line code).
template <class Tr, bool BALANCED> __device__ __forceinline__ void mla_decode(const dcpattn_attn_kparams &p) {
    using namespace mla_detail;
    using MT = typename Tr::MT;  // the MMAs' type (fp16 for an e4m3 cache)
    constexpr int GROUP = Tr::GROUP, M_TILE = Tr::M_TILE, KV_TILE = Tr::KV_TILE;
    constexpr int BLOCKS = Tr::BLOCKS, TILE_BYTES = Tr::TILE_BYTES, BLOCK_BYTES = Tr::BLOCK_BYTES;

    extern __shared__ __attribute__((aligned(1024))) unsigned char mla_smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    Timeline tl;  // (timeline builds only: templates/timeline.cuh; warpgroup w keeps record w)

    // 1024-byte aligned base (the SW128 atoms need it)
    const AttnSmem sm = align_smem<1024u>(mla_smem);
    const unsigned base = sm.addr;
    unsigned char *gsm = sm.ptr;
    const unsigned sQ = base + Tr::SMEM_Q, sK = base + Tr::SMEM_K;
    const unsigned bar_full = base + Tr::SMEM_BAR;  // + 8 * (BLOCKS * stage + block)
    // (computed where used: hoisted out of the loop, the addresses would take registers)
    auto full = [&](int slot, int blk) { return add_at(bar_full, 8 * (BLOCKS * slot + blk)); };
    constexpr int SLOTS = Tr::SLOTS;
    // tile t's slot, and where its raw block blk lies from sK (FP8; see MlaTraits::SLOTS)
    auto slot = [](int t) { return t & (SLOTS - 1); };
    auto raw_off = [](int t, int blk) { return (t & 1) * TILE_BYTES + Tr::raw_at(blk, (t >> 1) & (SLOTS / 2 - 1)); };

    // ---- which keys of which sequences: one (sequence, split) or the balanced schedule; sparse:
    // one query token (grid.x = batch * max_q_len slots, grid.y = blocks of 64 heads) ----
    MlaSchedule sched;
    static_assert(MlaSchedule::KV_TILE == KV_TILE, "the schedule's unit is one KV tile");
    if constexpr (BALANCED)
        if (!sched.init(p, reinterpret_cast<long long *>(gsm + Tr::SMEM_K))) return;  // (stage 0 as scratch)
    int sp_b = 0, sp_n = 0;
    long long sp_t = 0;
    if constexpr (Tr::SPARSE) {
        sp_b = blockIdx.x / p.max_q_len;
        const int i = blockIdx.x % p.max_q_len, q0 = ldg_i32(p.cu_seqlens_q + sp_b);
        if (i >= ldg_i32(p.cu_seqlens_q + sp_b + 1) - q0) return;
        sp_t = q0 + i;
    }
    if (tid == 0) {
#pragma unroll
        // (sparse: at block 0 the gather's, counting the producer's threads; at block 1 raw_free,
        // counting warpgroup 0's warps)
        for (int i = 0; i < Tr::SLOTS * BLOCKS; ++i)
            mbar_init(bar_full + 8 * i, !Tr::SPARSE            ? 1
                                        : i % BLOCKS == 1 ? Tr::MATH_THREADS / 2 / 32
                                                          : Tr::PRODUCER_THREADS);
        fence_mbar_init();
    }
    if constexpr (Tr::SPARSE) {  // stage "select" into this CTA's part of the workspace (ends with a barrier)
        long long *rows = p.topk_rows + ((long long)blockIdx.x * gridDim.y + blockIdx.y) * p.topk;
        sp_n = sparse_select<Tr::THREADS, Tr::MAX_TOPK, 1>(p, sp_b, sp_t, rows,
                                                          reinterpret_cast<long long *>(gsm + Tr::SMEM_X));
        sp_n = warp_uniform(sp_n);  // (the narrow tile's loop on a per-lane count serialized its wgmmas, C7515)
        // the producer warpgroup (warps 8-11) gathers; the math warpgroups take its registers
        if (warp_uniform(warp) >= Tr::MATH_THREADS / 32) {
            setmaxnreg_dec<Tr::PRODUCER_REGS>();
            tl.segment((sp_n + KV_TILE - 1) / KV_TILE);
            sparse_gather<Tr>(p, rows, sp_n, base, bar_full, tid - Tr::MATH_THREADS, tl);
            tl.finish();
            return;
        }
        setmaxnreg_inc<Tr::MATH_REGS>();
    }
    using Cta = typename type_if<Tr::SPARSE, SparseCta, AttnCta<GROUP, M_TILE, KV_TILE>>::type;
    unsigned phb = 0;  // bit s: parity of the next fill of slot s from before this segment
    for (;;) {  // one segment (all the keys of this CTA, or one sequence's piece of its range)
        auto make_cta = [&]() -> Cta {
            if constexpr (Tr::SPARSE)
                return Cta(p, sp_t, (int)blockIdx.y * M_TILE, sp_b, sp_n, M_TILE);
            else
                return Cta(p, BALANCED ? sched.b : blockIdx.x / p.num_splits, BALANCED ? 0 : blockIdx.x % p.num_splits);
        };
        Cta cta = make_cta();
        int role = MlaSchedule::FINAL;
        if constexpr (BALANCED)
            role = sched.keys(cta);
        else if constexpr (!Tr::SPARSE)
            cta.find_keys();
        if (!cta.empty()) {
            const int row0 = cta.row0, nrows = cta.nrows, kv_begin = cta.kv_begin;
            const int cta_hi = cta.cta_hi, cta_lo = cta.cta_lo, n_tiles = cta.n_tiles;
            // parity of the fill of tile t's slot that brings tile t
            auto parity = [&](int t) { return ((unsigned)t / SLOTS ^ (phb >> slot(t))) & 1u; };
            tl.segment(n_tiles);
            // Timeline builds wait here for blocks [b0, b0 + nb) of tile t (sparse: the stage's one
            // mbarrier), so that waiting for bytes is a stage of its own, not part of the next
            auto tl_wait = [&](int t, int b0, int nb) {
#ifdef DCPATTN_TIMELINE
                if constexpr (Tr::SPARSE)
                    mbar_wait(full(t & 1, 0), parity(t));
                else
                    for (int b = b0; b < b0 + nb; ++b) mbar_wait(full(slot(t), b), parity(t));
#endif
                tl.mark(TL_WAIT_LOAD);
            };

            // ---- TMA loads: column blocks of tile t into stage t % 2 ----
            const void *tmap = &p.k_tmap;
            const int ps = p.page_size, box = min(ps, KV_TILE), nbox = KV_TILE / box;  // boxes per block (<= 4)
            const int *bt = p.block_table + (long long)cta.b * p.bt_stride;
            // Where tile t comes from: the page of each of its boxes and, for pages longer than a tile,
            // the tile's first slot in its page. kv_begin is a multiple of 64, so with ps <= 64 a tile
            // holds whole pages and with ps > 64 (a multiple of 64) it never crosses one. Pages past the
            // last visible key's repeat it (the rows they bring are zeroed before any PV reads them).
            struct TileSrc {
                int page[4], slot;
            };
            const int tile0 = kv_begin / KV_TILE, tiles_per_page = max(ps / KV_TILE, 1);
            const int last_page = n_tiles > 0 ? (cta_hi - 1) / ps : 0;
            auto lookup = [&](int t, TileSrc &src) {
                const int first = ps <= KV_TILE ? (tile0 + t) * nbox : (tile0 + t) / tiles_per_page;
                src.slot = ps <= KV_TILE ? 0 : (tile0 + t - first * tiles_per_page) * KV_TILE;
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    if (i < nbox) src.page[i] = ldg_i32(bt + min(first + i, last_page));
            };
            // (rolled loops: one thread of a warp runs them, and unrolled they would fill the instruction cache)
            // blocks first, first + step, ... below end
            // (FP8: raw blocks of 64 bytes per token, placed by raw_at, see convert_tile)
            constexpr int ROW = Tr::FP8 ? 64 : 128, DST = Tr::FP8 ? Tr::RAW_BLOCK : BLOCK_BYTES;  // bytes
            auto load = [&](int t, const TileSrc &src, int first, int end, int step) {
                const int s = t & 1;
#pragma unroll 1
                for (int blk = first; blk < end; blk += step) {
                    const unsigned bar = full(slot(t), blk);
                    const unsigned dst = sK + (Tr::FP8 ? raw_off(t, blk) : s * TILE_BYTES + blk * BLOCK_BYTES);
                    mbar_expect_tx(bar, DST);
#pragma unroll 1
                    for (int i = 0; i < nbox; ++i)  // (selects, not src.page[i]: that would put it in local memory)
                        tma_load_3d(dst + i * box * ROW, tmap, blk * 64, src.slot,
                                    i == 0   ? src.page[0]
                                    : i == 1 ? src.page[1]
                                    : i == 2 ? src.page[2]
                                             : src.page[3],
                                    bar);
                }
            };
            if (!Tr::SPARSE && tid == 0) {  // (sparse: the producer's)
                for (int t = 0; t < SLOTS && t < n_tiles; ++t) {
                    TileSrc src;
                    lookup(t, src);
                    load(t, src, 0, BLOCKS, 1);
                }
            }

            load_q_tile<Tr>(p, cta, sQ, tid);
            // FP8: k_scale joins the softmax scale (read here, not on the host, so that a captured
            // graph sees the value the scale holds at replay); a bf16 Q tile goes into fp16
            float scale = p.scale_log2;
            if constexpr (Tr::FP8 && !Tr::SCALED) {
                scale *= p.k_scale[0];
                unsigned *red = reinterpret_cast<unsigned *>(gsm + Tr::SMEM_P0);
                if constexpr (Tr::DIRECT)  // (in the channel order of S's K fragments)
                    scale *= q_tile_to_fp16_k16<Tr>(sQ, red, tid);
                else if constexpr (!same_type<typename Tr::T, fp16>)
                    scale *= q_tile_to_fp16<Tr>(sQ, red, tid);
            }
            math_sync<Tr>();  // Q in place, barriers initialized

            // warp-uniform for ptxas (a per-thread wg would make it serialize the wgmmas)
            const int wg = warp_uniform(warp >> 2), wi = warp & 3, tw = tid & 127;
            const int g = lane >> 2, q4 = lane & 3;
            const int r_lo = wi * 16 + g, r_hi = r_lo + 8;
            const int lim_lo = cta.row_limit(r_lo), lim_hi = cta.row_limit(r_hi);
            // narrow: the limits of the thread's query rows (see mla_detail::narrow_row)
            int lim_n[Tr::ROWS];
#pragma unroll
            for (int c = 0; c < Tr::ROWS; ++c) lim_n[c] = Tr::NARROW ? cta.row_limit(narrow_row(c, q4)) : 0;
            float *xm = reinterpret_cast<float *>(gsm + Tr::SMEM_X);  // [2][64] reference max per row
            volatile unsigned *flag = reinterpret_cast<volatile unsigned *>(gsm + Tr::SMEM_FLAG);

            unsigned qr[4][4];  // (narrow: S reads the whole Q tile from shared memory)
            if constexpr (!Tr::NARROW) {
                load_q_rope<Tr>(qr, sQ, wi, lane);
                math_sync<Tr>();  // Q's rope block is read: from here on it holds P of warpgroup 1
            }
            if constexpr (Tr::SPARSE)  // (and the scales of stage 1's tiles until their conversion)
                nbar_arrive<5, Tr::THREADS>();  // the producer may gather tile 1

            // P of warpgroup w (64 rows x 64 keys) as a 128-byte-swizzled K-major A tile, stored from pa
            // by stmatrix (sw128_stsm_store; p_row: this lane's row address; narrow: sw128_stsm_trans_row)
            const unsigned sP_mine = base + (wg ? Tr::SMEM_P1 : Tr::SMEM_P0);
            const unsigned sP_other = base + (wg ? Tr::SMEM_P0 : Tr::SMEM_P1);
            const unsigned p_row = Tr::NARROW ? sw128_stsm_trans_row(sP_mine, wi, lane) : sw128_stsm_row(sP_mine, wi, lane);

            // K-major SW128 operands (Q, K): the descriptors share their high word (LBO, SBO, swizzle)
            const unsigned long long dq = sw128_desc(sQ, 16, 1024);
            const unsigned long long dv = sw128_desc(sK + wg * 4 * BLOCK_BYTES, BLOCK_BYTES, 1024);  // + stage
            const unsigned long long dp = sw128_desc(sP_other, 16, 1024);
            const unsigned long long dpm = sw128_desc(sP_mine, 16, 1024);  // (narrow: PV reads its own P there)
            const unsigned ql = (unsigned)dq, dhi = (unsigned)(dq >> 32);
            const unsigned kl0 = (unsigned)sw128_desc(sK, 16, 1024);  // + stage
            // DIRECT: the blocks of e4m3 fragments in registers at once: in S (qk_direct) two; in
            // PV (pv_direct) two on the tile of 16 rows, one on the tile of 32 (64 accumulators of
            // O), where two made its balanced kernel spill
            constexpr int QK_SETS = 2, PV_SETS = Tr::M_TILE == 16 ? 2 : 1;

            float o[Tr::O_REGS];
#pragma unroll
            for (int i = 0; i < Tr::O_REGS; ++i) o[i] = 0.f;
            // the reference max and the sum of each of the thread's rows (m64: rows r_lo, r_hi)
            float mr[Tr::ROWS], lr[Tr::ROWS];
#pragma unroll
            for (int c = 0; c < Tr::ROWS; ++c) mr[c] = neg_inf(), lr[c] = 0.f;
            float &m_lo = mr[0], &m_hi = mr[1], &l_lo = lr[0], &l_hi = lr[1];
            float sacc[Tr::S_REGS];
            unsigned pa[4][4];  // P of this warpgroup's tile as A fragments of its four k16 steps (read by its PV)
#pragma unroll
            for (int i = 0; i < 4; ++i) pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = 0u;
            // O and the row sum scaled by 2^(m - nm) for rows whose reference moves to nm
            auto rescale = [&](float nm_lo, float nm_hi) {
                const float al_lo = m_lo == nm_lo ? 1.f : fast_exp2(m_lo - nm_lo);
                const float al_hi = m_hi == nm_hi ? 1.f : fast_exp2(m_hi - nm_hi);
                m_lo = nm_lo;
                m_hi = nm_hi;
                l_lo *= al_lo;
                l_hi *= al_hi;
                scale_rows(reinterpret_cast<float(&)[Tr::O_REGS / 4][4]>(o), al_lo, al_hi);
            };
            // narrow: the same for the thread's rows
            auto rescale_n = [&](const float (&nm)[Tr::ROWS]) {
                float al[Tr::ROWS];
#pragma unroll
                for (int c = 0; c < Tr::ROWS; ++c) {
                    al[c] = mr[c] == nm[c] ? 1.f : fast_exp2(mr[c] - nm[c]);
                    mr[c] = nm[c];
                    lr[c] *= al[c];
                }
#pragma unroll
                for (int i = 0; i < Tr::O_REGS; ++i) o[i] *= al[narrow_c(i % Tr::S_REGS)];
            };
            // take the reference that warpgroup w published in xm after its tile
            auto adopt = [&](int w) {
                if constexpr (Tr::NARROW) {
                    float nm[Tr::ROWS];
#pragma unroll
                    for (int c = 0; c < Tr::ROWS; ++c) nm[c] = xm[w * 64 + narrow_row(c, q4)];
                    rescale_n(nm);
                } else {
                    rescale(xm[w * 64 + r_lo], xm[w * 64 + r_hi]);
                }
            };

            // A refill of blocks [b0, b0 + nb) is shared by the warps of the warpgroup: one thread of
            // warp wi issues blocks b0 + wi and b0 + wi + 4 (no warp lags far behind the others at
            // the next wgmma, where the warpgroup meets)
            const bool elected = lane == 0;
            auto refill = [&](int t, const TileSrc &src, int b0, int nb) { load(t, src, b0 + wi, b0 + nb, 4); };
            // (tile t's slot is t % SLOTS, and its fill of that slot has parity t / SLOTS % 2)
            auto k_lo = [&](int t) { return add_at(kl0, ((t & 1) * TILE_BYTES) >> 4); };
            // DIRECT: S^T = K Q^T over the nine raw blocks of tile t, each waited for as it lands:
            // its K fragments into registers in fp16 (sw64_e4m3_k_frags), then four k16 wgmmas with
            // Q from shared memory, a group a block, QK_SETS blocks' registers in flight. One call a
            // tile, so that the fragments' pipeline drains once: it returns with every wgmma done
            // (their registers are free again). rope_mid: the rope block (8) after blocks 0-3, as
            // warpgroup 1 takes them (its blocks 4-8 are refilled last), else in channel order
            auto qk_direct = [&](int t, bool rope_mid) {
                if constexpr (Tr::DIRECT) {
                    const unsigned par = parity(t);
                    unsigned ka[QK_SETS][4][4];
                    auto blk_of = [&](int b) { return !rope_mid || b < 4 ? b : b == 4 ? BLOCKS - 1 : b - 1; };
                    wgmma_frag_ring<BLOCKS, QK_SETS>(ka, [&](int b) { mbar_wait(full(slot(t), blk_of(b)), par); },
                                                     [&](int b, unsigned (&k)[4][4]) {
                        const int blk = blk_of(b);
                        sw64_e4m3_k_frags(sK + raw_off(t, blk), wi, lane, k);
                        fence_regs(k);  // (converted before the fence)
                        wgmma_fence();
#pragma unroll
                        for (int kk = 0; kk < 4; ++kk)
                            wgmma_rs_narrow<MT, Tr::M_TILE>(sacc, k[kk],
                                                            desc_at(add_at(ql, qstep<Tr>(4 * blk + kk)), dhi),
                                                            b == 0 && kk == 0 ? 0 : 1);
                        wgmma_commit();
                    });
                    wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < QK_SETS; ++i) fence_regs(ka[i]);
                }
            };
            // S (+)= Q K(t)^T over the four column blocks [b0, b0 + 4) (Q from shared memory), each
            // waited for as it lands; the first k-step of block 0 overwrites S
            auto qk_blocks = [&](int t, int b0) {
                const unsigned par = parity(t), kl = k_lo(t);
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const int blk = b0 + b;
                    if constexpr (!Tr::CONVERT) mbar_wait(full(slot(t), blk), par);  // (else convert_tile waited)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const unsigned off = kstep(4 * blk + i);
                        if constexpr (Tr::NARROW)  // S^T = K Q^T: the 64 keys are the rows
                            wgmma_ss_narrow<MT, Tr::M_TILE, 0>(sacc, desc_at(add_at(kl, off), dhi),
                                                               desc_at(add_at(ql, qstep<Tr>(4 * blk + i)), dhi),
                                                               b0 == 0 && b == 0 && i == 0 ? 0 : 1);
                        else
                            wgmma_ss_n64<MT>(sacc, desc_at(add_at(ql, off), dhi), desc_at(add_at(kl, off), dhi),
                                             b0 == 0 && b == 0 && i == 0 ? 0 : 1);
                    }
                }
            };
            // S += Q K(t)^T over the rope block (Q fragments from registers; narrow: from shared memory)
            auto qk_rope = [&](int t) {
                const unsigned kl = k_lo(t);
                if constexpr (!Tr::CONVERT) mbar_wait(full(slot(t), BLOCKS - 1), parity(t));
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    if constexpr (Tr::NARROW)
                        wgmma_ss_narrow<MT, Tr::M_TILE, 0>(sacc, desc_at(add_at(kl, kstep(32 + i)), dhi),
                                                           desc_at(add_at(ql, qstep<Tr>(32 + i)), dhi), 1);
                    else
                        wgmma_rs_n64<MT>(sacc, qr[i], desc_at(add_at(kl, kstep(32 + i)), dhi), 1);
                }
            };
            // S of tile t, whole: blocks 0-3 first (their loads went out first), then the rope block and
            // blocks 4-7 (rope_mid) or blocks 4-7 and the rope block
            auto qk_tile = [&](int t, bool rope_mid) {
                if constexpr (Tr::DIRECT) {
                    qk_direct(t, rope_mid);
                } else {
                    qk_blocks(t, 0);
                    if (rope_mid) qk_rope(t);
                    qk_blocks(t, 4);
                    if (!rope_mid) qk_rope(t);
                }
            };
            // O[:, my half] += P V(t)[:, my half]: P of this warpgroup's tile (registers) or of the other's
            // (shared memory)
            // Narrow: O^T[my half] += V(t)^T[my half] P^T, P (16 x 64, K-major) from shared memory at
            // descriptor dpp: each of the warpgroup's four 64-channel blocks of V is an MN-major A
            // operand (the same bytes that the m64 tile reads as B)
            // DIRECT: V^T comes from the e4m3 stage into registers instead, as the A operand in fp16
            // (sw64_e4m3_vt_frags: row g of warp wi's 16 is channel 16 wi + 2 g, row g + 8 channel
            // 16 wi + 2 g + 1, which store_narrow follows), block by block, each block's four wgmmas
            // a group (all four blocks' registers at once made ptxas serialize the wgmmas for want of
            // registers). Rows past the last visible key were zeroed in the stage (zero_tail).
            auto pv_direct = [&](int t, unsigned long long dpp) {
                if constexpr (Tr::DIRECT) {
                    unsigned va[PV_SETS][4][4];
                    wgmma_frag_ring<4, PV_SETS>(va, [](int) {}, [&](int b, unsigned (&v)[4][4]) {
                        sw64_e4m3_vt_frags(sK + raw_off(t, 4 * wg + b), wi, lane, v);
                        fence_regs(v);  // (converted before the fence)
                        fence_regs(o);
                        wgmma_fence();
#pragma unroll
                        for (int kk = 0; kk < 4; ++kk)
                            wgmma_rs_narrow<MT, Tr::M_TILE>(reinterpret_cast<float(&)[4][Tr::S_REGS]>(o)[b], v[kk],
                                                            dpp + ((kk * 32) >> 4));
                        wgmma_commit();
                    });
                }
            };
            auto pv_narrow = [&](int t, unsigned long long dpp) {
                if constexpr (Tr::DIRECT) {
                    pv_direct(t, dpp);
                } else if constexpr (Tr::NARROW) {
                    fence_regs(o);
                    wgmma_fence();
#pragma unroll
                    for (int b = 0; b < 4; ++b)
#pragma unroll
                        for (int kk = 0; kk < 4; ++kk)
                            wgmma_ss_narrow<MT, Tr::M_TILE, 1>(
                                reinterpret_cast<float(&)[4][Tr::S_REGS]>(o)[b],
                                dv + (((t & 1) * TILE_BYTES + b * BLOCK_BYTES + kk * 16 * 128) >> 4), dpp + ((kk * 32) >> 4),
                                1);
                    wgmma_commit();
                }
            };
            auto pv_own = [&](int t) {
                if constexpr (Tr::NARROW) {
                    pv_narrow(t, dpm);
                } else {
                    fence_regs(o);
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < 4; ++kk)
                        wgmma_rs_n256<MT>(o, pa[kk], dv + (((t & 1) * TILE_BYTES + kk * 16 * 128) >> 4));
                    wgmma_commit();
                }
            };
            auto pv_other = [&](int t) {
                if constexpr (Tr::NARROW) {
                    pv_narrow(t, dp);
                } else {
                    fence_regs(o);
                    wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < 4; ++kk)
                        wgmma_ss_n256<MT>(o, dp + ((kk * 32) >> 4), dv + (((t & 1) * TILE_BYTES + kk * 16 * 128) >> 4));
                    wgmma_commit();
                }
            };
            // The CTA's last tile t: once this warpgroup's V half of it has landed, zero its rows past
            // the last visible key.
            auto zero_tail = [&](int t) {
#pragma unroll 1
                for (int b = 0; b < 4; ++b) mbar_wait(full(slot(t), 4 * wg + b), parity(t));
                zero_v_rows<Tr, 4, Tr::DIRECT>(sK + (t & 1) * TILE_BYTES, 4 * wg, cta_hi - (kv_begin + t * KV_TILE), tw,
                                               (t >> 1) & (SLOTS / 2 - 1));
                fence_proxy_async();
                wg_sync(wg);
            };
            // Softmax of tile t (S in sacc) against the running reference max. Lazy max: as long as no
            // row of this warpgroup's tile tops it by more than MAX_SLACK, P <= 2^MAX_SLACK and nothing
            // moves (a row that has seen nothing, m = -inf, tops it with any visible key); else every
            // row takes max(m, its tile max), O and l are rescaled (O must be idle) and xm[wg] holds the
            // new reference of every row (O is waited for first). P goes to pa (A fragments), its row
            // sums to l. Returns whether the reference moved (warpgroup-uniform).
            // Narrow: S^T holds keys (rows) x query rows (columns), so a row's max runs over the eight
            // lanes of a quad's column and the four warps; the warps' maxima meet in shared memory only
            // when the reference moves. P goes to pa in accumulator pairs (one key, rows c and c + 1), for store_p.
            auto softmax_narrow = [&](int t) -> bool {
                constexpr int NR = Tr::ROWS, N = Tr::M_TILE;
                const int ts = kv_begin + t * KV_TILE, key0 = ts + wi * 16 + g;
                const bool need_mask = ts + KV_TILE > cta_lo;
                float mx[NR];
#pragma unroll
                for (int c = 0; c < NR; ++c) mx[c] = neg_inf();
#pragma unroll
                for (int j = 0; j < Tr::S_REGS; ++j) {
                    const int c = narrow_c(j);
                    if (need_mask) mask_key(sacc[j], key0 + 8 * ((j >> 1) & 1), lim_n[c]);
                    mx[c] = fmaxf(mx[c], sacc[j]);
                }
                bool up = false;
#pragma unroll
                for (int c = 0; c < NR; ++c) {
#pragma unroll
                    for (int d = 4; d < 32; d <<= 1) mx[c] = fmaxf(mx[c], __shfl_xor_sync(0xffffffffu, mx[c], d));
                    mx[c] *= scale;
                    up = up || mx[c] > mr[c] + Tr::MAX_SLACK;
                }
                const bool moved = wg_or(wg, up);
                if (moved) {  // (red: [tile pair parity][warpgroup][warp][row])
                    float *red = reinterpret_cast<float *>(gsm + Tr::SMEM_RED) + (((t >> 1) & 1) * 2 + wg) * 4 * N;
                    if (g == 0)
#pragma unroll
                        for (int c = 0; c < NR; ++c) red[wi * N + narrow_row(c, q4)] = mx[c];
                    wg_sync(wg);
                    float nm[NR];
#pragma unroll
                    for (int c = 0; c < NR; ++c) {
                        nm[c] = mr[c];
#pragma unroll
                        for (int w = 0; w < 4; ++w) nm[c] = fmaxf(nm[c], red[w * N + narrow_row(c, q4)]);
                    }
                    wgmma_wait<0>();  // a PV into O may still run
                    fence_regs(o);
                    rescale_n(nm);
                    if (wi == 0 && g == 0)
#pragma unroll
                        for (int c = 0; c < NR; ++c) xm[wg * 64 + narrow_row(c, q4)] = mr[c];
                }
                float nmu[NR];
#pragma unroll
                for (int c = 0; c < NR; ++c) nmu[c] = mr[c] == neg_inf() ? 0.f : -mr[c];
#pragma unroll
                for (int j = 0; j < Tr::S_REGS; j += 2) {  // elements j, j + 1: one key, rows c and c + 1
                    const int c = narrow_c(j);
                    const float e0 = fast_exp2(fmaf(sacc[j], scale, nmu[c]));
                    const float e1 = fast_exp2(fmaf(sacc[j + 1], scale, nmu[c + 1]));
                    lr[c] += e0;
                    lr[c + 1] += e1;
                    pa[j >> 3][(j >> 1) & 3] = pack2<MT>(e0, e1);  // (as sw128_stsm_trans_row takes them)
                }
                return moved;
            };
            auto softmax = [&](int t) -> bool {
                if constexpr (Tr::NARROW) {
                    return softmax_narrow(t);
                } else {
                    const int ts = kv_begin + t * KV_TILE;
                    const bool need_mask = ts + KV_TILE > cta_lo;
                    // (raw scores until the exponent: scale > 0, so the max commutes with it)
                    float mx_lo = neg_inf(), mx_hi = neg_inf();
#pragma unroll
                    for (int n = 0; n < 8; ++n) {
                        const int col = ts + n * 8 + 2 * q4;
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            if (need_mask) {
                                mask_key(sacc[4 * n + e], col + e, lim_lo);
                                mask_key(sacc[4 * n + 2 + e], col + e, lim_hi);
                            }
                            mx_lo = fmaxf(mx_lo, sacc[4 * n + e]);
                            mx_hi = fmaxf(mx_hi, sacc[4 * n + 2 + e]);
                        }
                    }
                    mx_lo = quad_max(mx_lo) * scale;
                    mx_hi = quad_max(mx_hi) * scale;
                    const bool moved = wg_or(wg, mx_lo > m_lo + Tr::MAX_SLACK || mx_hi > m_hi + Tr::MAX_SLACK);
                    if (moved) {
                        wgmma_wait<0>();  // a PV into O may still run
                        fence_regs(o);
                        rescale(fmaxf(m_lo, mx_lo), fmaxf(m_hi, mx_hi));
                        if (q4 == 0) {
                            xm[wg * 64 + r_lo] = m_lo;
                            xm[wg * 64 + r_hi] = m_hi;
                        }
                    }
                    const float nmu_lo = m_lo == neg_inf() ? 0.f : -m_lo, nmu_hi = m_hi == neg_inf() ? 0.f : -m_hi;
#pragma unroll
                    for (int n = 0; n < 8; ++n) {
                        const float e0 = fast_exp2(fmaf(sacc[4 * n + 0], scale, nmu_lo));
                        const float e1 = fast_exp2(fmaf(sacc[4 * n + 1], scale, nmu_lo));
                        const float e2 = fast_exp2(fmaf(sacc[4 * n + 2], scale, nmu_hi));
                        const float e3 = fast_exp2(fmaf(sacc[4 * n + 3], scale, nmu_hi));
                        l_lo += e0 + e1;
                        l_hi += e2 + e3;
                        pa[n >> 1][(n & 1) * 2 + 0] = pack2<MT>(e0, e1);
                        pa[n >> 1][(n & 1) * 2 + 1] = pack2<MT>(e2, e3);
                    }
                    return moved;
                }
            };
            // P of this warpgroup's tile into its shared-memory A tile (key block n at chunk n ^ (r % 8)),
            // for the other warpgroup's PV
            // (narrow: P (M_TILE rows x 64 keys) as the K-major B operand, from S^T's fragments by
            // stmatrix .trans, see sw128_stsm_trans_row; the warpgroup's own PV reads it next, hence
            // the barrier)
            auto store_p = [&]() {
                if constexpr (Tr::NARROW) {
#pragma unroll
                    for (int i = 0; i < Tr::M_TILE / 16; ++i) stsm_x4_trans(p_row + 2048 * i, pa[i]);
                    fence_proxy_async();
                    wg_sync(wg);
                } else {
                    sw128_stsm_store(p_row, pa);
                    fence_proxy_async();  // generic-proxy writes -> read by the other warpgroup's wgmma
                }
            };

            // Sparse: warpgroup 0 is done with the bytes of stage s that the next gather there overwrites
            // (raw_free[s], one arrival a warp, after the warp's wait for its last wgmma reading them)
            auto release = [&](int s) {
                if (lane == 0) mbar_arrive(full(s, 1));
            };
            // FP8: tile t into fp16 by the warpgroup that computes its S, before it does
            auto convert = [&](int t) {
                convert_tile<Tr>(sK + (t & 1) * TILE_BYTES, full(t & 1, 0), base + Tr::scales_at(t & 1), parity(t),
                                 cta_hi - (kv_begin + t * KV_TILE), wg, tw);
            };
            // Refills: warpgroup 0 brings blocks 0-3 of a stage (FP8: the whole raw tile, whose
            // blocks land where 16-bit blocks 0-3 and 8 go), warpgroup 1 blocks 4-8 (FP8: none)
            constexpr int N0 = Tr::CONVERT ? BLOCKS : 4;

            // S of tile 0 (tiles 0 and 1 are on their way)
            tl.mark(TL_START);
            if (wg == 0 && n_tiles > 0) {
                tl_wait(0, 0, Tr::CONVERT ? BLOCKS : 4);
                if constexpr (Tr::CONVERT) convert(0);
                tl.mark(TL_CONVERT);
                fence_regs(sacc);
                wgmma_fence();
                qk_tile(0, false);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(sacc);
                tl.mark(TL_SCORES);
            }

            // Pairs of tiles: t0 (stage 0) is warpgroup 0's, t1 (stage 1) warpgroup 1's. Warpgroup 1
            // computes S of t1 while warpgroup 0 does its softmax of t0, and adds P(t0) V(t0) to its
            // half of O before its own softmax; warpgroup 0 adds P(t1) V(t1) and computes S of t0 + 2
            // while warpgroup 1 finishes t1. Each column block is refilled by the warpgroup that reads
            // it last, as soon as it is done with it.
            TileSrc pg0, pg1;  // where tiles t0 + SLOTS and t0 + 1 + SLOTS come from (lane 0 of each warp)
            for (int t0 = 0; t0 < n_tiles; t0 += 2) {
                const int t1 = t0 + 1;
                const bool has1 = t1 < n_tiles, next0 = t0 + 2 < n_tiles, next1 = t0 + 3 < n_tiles;
                // the tiles that refill the slots of t0 and t1 (SLOTS 2: t0 + 2 and t0 + 3)
                const bool fill0 = t0 + SLOTS < n_tiles, fill1 = t0 + 1 + SLOTS < n_tiles;
                if (!Tr::SPARSE && elected) {
                    if (fill0) lookup(t0 + SLOTS, pg0);
                    if (fill1) lookup(t0 + 1 + SLOTS, pg1);
                }
                if (!Tr::CONVERT && !next0 && kv_begin + n_tiles * KV_TILE > cta_hi)
                    zero_tail(n_tiles - 1);  // the last pair (FP8: the conversions zero those rows)
                if (wg == 0) {
                    const bool moved0 = softmax(t0);
                    tl.mark(TL_SOFTMAX);
                    if (!Tr::CONVERT && t0 >= 2) nbar_sync<4, 256>();  // warpgroup 1 is done with P(t0 - 2) and its reference
                    // (FP8: waited for before converting t0 into stage 0, see below)
                    tl.mark(TL_WAIT_PEER);
                    if (tw == 0) flag[0] = moved0 ? 1u : 0u;
                    store_p();
                    nbar_arrive<2, 256>();  // P(t0) and the reference after t0 published
                    tl.mark(TL_PUBLISH);
                    pv_own(t0);  // O0 += P(t0) V(t0)[:, 0:256]
                    wgmma_wait<0>();
                    fence_regs(o);
                    if constexpr (Tr::SPARSE) {
                        if (next0) release(0);  // blocks 0-3 and 8 of stage 0 are read
                    } else if (elected && fill0) {
                        refill(t0 + SLOTS, pg0, 0, N0);  // blocks 0-3 of t0's slot are read
                    }
                    tl.mark(TL_PV);
                    if (has1) {
                        nbar_sync<3, 256>();  // P(t1) and the reference after t1 published
                        tl.mark(TL_WAIT_PEER);
                        if (flag[1]) adopt(1);
                        pv_other(t1);  // O0 += P(t1) V(t1)[:, 0:256]
                    }
                    if constexpr (Tr::SPARSE)
                        if (next1) {  // tile t0 + 3 may come before t0 + 2 is converted: warpgroup 1 converts it next
                            wgmma_wait<0>();
                            fence_regs(o);
                            release(1);  // blocks 0-3 of stage 1 are read (8 by warpgroup 1's S of t1, before P(t1))
                            tl.mark(TL_PV);
                        }
                    if constexpr (Tr::CONVERT)
                        if (next0) {
                            nbar_sync<4, 256>();  // warpgroup 1 is done with P(t0), its reference and V(t0)
                            tl.mark(TL_WAIT_PEER);
                            tl_wait(t0 + 2, 0, BLOCKS);
                            convert(t0 + 2);
                            tl.mark(TL_CONVERT);
                        }
                    if (!Tr::CONVERT && next0) tl_wait(t0 + 2, 0, 4);
                    if constexpr (Tr::DIRECT) {  // S of t0 + 2 in one pass, then t1's slot refilled
                        if (next0) {
                            fence_regs(sacc);
                            wgmma_fence();
                            qk_tile(t0 + 2, false);
                        }
                        wgmma_wait<0>();  // (O0 += P(t1) V(t1) done: blocks 0-3 of t1's slot are read)
                        if (fill1 && elected) refill(t0 + 1 + SLOTS, pg1, 0, N0);
                    } else {
                        if (next0) {  // S of t0 + 2: blocks 0-3 first (their loads went out above)
                            fence_regs(sacc);
                            wgmma_fence();
                            qk_blocks(t0 + 2, 0);
                            wgmma_commit();
                        }
                        if (!Tr::SPARSE && fill1) {  // blocks 0-3 of t1's slot are read once O0 += P(t1) V(t1) is done
                            wgmma_wait<1>();
                            if (elected) refill(t0 + 1 + SLOTS, pg1, 0, N0);
                        }
                        if (next0) {
                            qk_blocks(t0 + 2, 4);
                            qk_rope(t0 + 2);
                            wgmma_commit();
                        }
                        wgmma_wait<0>();
                    }
                    tl.mark(TL_SCORES);
                } else {
                    // P(t0) and the reference after t0; if that moved (rare) O1 is rescaled, with no
                    // wgmma running (ptxas serializes every wgmma if an accumulator may be read while one runs)
                    auto other_t0 = [&]() {
                        nbar_sync<2, 256>();
                        tl.mark(TL_WAIT_PEER);
                        if (flag[0]) {
                            wgmma_wait<0>();
                            fence_regs(sacc);
                            adopt(0);
                        }
                        pv_other(t0);  // O1 += P(t0) V(t0)[:, 256:512]
                    };
                    if (has1) {
                        tl_wait(t1, 0, Tr::CONVERT ? BLOCKS : 4);
                        if constexpr (Tr::CONVERT) convert(t1);
                        tl.mark(TL_CONVERT);
                        fence_regs(sacc);  // S of t1, the blocks loaded first first
                        wgmma_fence();
                        qk_tile(t1, true);
                        wgmma_commit();
                        tl.mark(TL_SCORES);
                        other_t0();
                        wgmma_wait<1>();  // S of t1
                        fence_regs(sacc);
                        tl.mark(TL_SCORES);
                        const bool moved1 = softmax(t1);
                        tl.mark(TL_SOFTMAX);
                        if (tw == 0) flag[1] = moved1 ? 1u : 0u;
                        store_p();
                        nbar_arrive<3, 256>();  // P(t1) and the reference after t1 published
                        tl.mark(TL_PUBLISH);
                    } else {
                        other_t0();
                    }
                    wgmma_wait<0>();
                    fence_regs(o);
                    if (next0) nbar_arrive<4, 256>();  // done with P(t0) and its reference
                    if (!Tr::CONVERT && elected && fill0) refill(t0 + SLOTS, pg0, 4, 5);  // blocks 4-8 of t0's slot are read
                    tl.mark(TL_PV);
                    if (has1) {
                        pv_own(t1);  // O1 += P(t1) V(t1)[:, 256:512]
                        wgmma_wait<0>();
                        if (!Tr::CONVERT && elected && fill1) refill(t0 + 1 + SLOTS, pg1, 4, 5);  // blocks 4-8 of t1's slot are read
                        tl.mark(TL_PV);
                    }
                }
                fence_regs(sacc);
                fence_regs(o);
            }

            // ---- epilogue ----
            // Balanced schedule: a piece whose sequence goes on in the next worker's range leaves its
            // state (O, reference max, row sums of this thread) for the worker that ends the sequence
            // (a piece inside the merge tree adds its subtree's states first); that one adds the
            // tree's sums to its own first. See MlaSchedule.
            // (narrow: every thread holds channels of every row)
            const bool live = Tr::NARROW || wi * 16 < nrows - row0;  // this warp holds a row of the tile
            if (role == MlaSchedule::PUBLISH) {
                sched.publish(p, o, mr, lr, live);
                tl.mark(TL_MERGE);
            } else {
                if (role == MlaSchedule::MERGE) sched.merge(p, o, mr, lr, live, true);
                tl.mark(TL_MERGE);
                if constexpr (Tr::NARROW) {
                    sum_narrow<Tr>(lr, reinterpret_cast<float *>(gsm + Tr::SMEM_RED), warp, lane);
                    store_narrow<Tr>(p, cta, o, mr, lr, wg, wi, lane);
                } else {
                    sum_warpgroups<Tr>(l_lo, l_hi, xm, wg, r_lo, r_hi, q4);
                    store_rows<Tr>(p, cta, o, m_lo, m_hi, l_lo, l_hi, wg, r_lo, r_hi, q4);
                }
                tl.mark(TL_EPILOGUE);
            }
            unsigned fills = 0;  // bit k: slot k took an odd number of fills, (n_tiles - k + SLOTS - 1) / SLOTS
#pragma unroll
            for (int k = 0; k < SLOTS; ++k) fills |= ((unsigned)(n_tiles - k + SLOTS - 1) / SLOTS & 1u) << k;
            phb ^= fills;
        }
        if constexpr (!BALANCED)
            break;
        else if (!sched.next(p))
            break;
    }
    tl.finish();
}

}  // namespace dcpattn
