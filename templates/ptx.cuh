// ptx.cuh — the inline-PTX wrappers of the dcpattn kernels: shared-memory addresses, async
// copies, predicated and streaming global loads, vector stores, ldmatrix, mbarriers, and the
// tensor-core MMAs (mma.sync for every arch, wgmma for sm_90a), each written once.
#pragma once
#include "common.cuh"

namespace dcpattn {

// ---- addresses, async copies, global memory ----

__device__ __forceinline__ unsigned smem_u32(const void *p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// 16-byte async copy; src_bytes = 0 writes zeros and reads nothing. L2_FETCH 128: L2 brings in the
// whole aligned 128-byte line around src at once (gathered rows, whose next copies read the rest
// of the line: the sparse MLA gather 0.6-1.5 % faster; with 256 bytes the contiguous GQA stream
// lost 3-5 %, docs/performance.md).
template <int L2_FETCH = 0> __device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int src_bytes) {
    static_assert(L2_FETCH == 0 || L2_FETCH == 128, "L2_FETCH: 0 or 128");
    if constexpr (L2_FETCH == 128)
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                     : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                     : "memory");
}
// The same copy, or 16 zero bytes where !ok (src is then not read; keep it a valid address).
__device__ __forceinline__ void cp_async16_or_zero(unsigned dst, const void *src, bool ok) {
    asm volatile("{\n .reg .pred z;\n setp.eq.u32 z, %2, 0;\n cp.async.cg.shared.global [%0], [%1], 16, z;\n}\n" ::"r"(dst),
                 "l"(src), "r"((unsigned)ok)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N groups of this thread's copies are in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Wait until every copy this thread issued has landed, committed to a group or not.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Generic-proxy writes of shared memory (cp.async included) -> visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Warpgroup register budgets (sm_90a; every thread of the warpgroup executes it): a warpgroup
// gives registers back to the CTA's pool, another takes them (waiting until they are there).
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Read-only (non-coherent) 32-bit load.
__device__ __forceinline__ int ldg_i32(const int *p) {
    int v;
    asm volatile("ld.global.nc.b32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

struct u32x4 { unsigned x, y, z, w; };

// 16-byte load that does not allocate in L1 (every byte read once), predicated in the
// instruction itself so that a group of such loads stays in one basic block and ptxas keeps
// them all in flight; returns zeros when pred is false (the memory is then not touched).
__device__ __forceinline__ u32x4 ld_stream16_if(const void *ptr, bool pred) {
    u32x4 r;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %5, 0;\n\t"
        "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
        "@p ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(ptr), "r"((int)pred));
    return r;
}
// fp32 load predicated in the instruction; -inf when pred is false (the memory is then not touched).
__device__ __forceinline__ float ld_f32_if(const float *ptr, bool pred) {
    float r;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %2, 0;\n\t"
        "mov.b32 %0, 0xff800000;\n\t"
        "@p ld.global.f32 %0, [%1];\n\t}"
        : "=f"(r)
        : "l"(ptr), "r"((int)pred));
    return r;
}

// 16- and 8-byte global stores (ptr aligned to their size).
__device__ __forceinline__ void st16(void *ptr, unsigned a, unsigned b, unsigned c, unsigned d) {
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(a), "r"(b), "r"(c), "r"(d)
                 : "memory");
}
__device__ __forceinline__ void st16(void *ptr, float a, float b, float c, float d) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void st8(void *ptr, unsigned a, unsigned b) {
    asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(ptr), "r"(a), "r"(b) : "memory");
}

// ---- shared memory by address; thread-block clusters (sm_90: distributed shared memory) ----

// 4- and 16-byte fp32 loads by shared address: ld_shared_* from this CTA, ld_cluster_* from
// a shared::cluster address (cluster_map below).
#define DCPATTN_LD_SHARED(NAME, SPACE)                                                                    \
    __device__ __forceinline__ float ld_##NAME##_f32(unsigned addr) {                                      \
        float v;                                                                                         \
        asm volatile("ld." SPACE ".f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");                     \
        return v;                                                                                        \
    }                                                                                                    \
    __device__ __forceinline__ void ld_##NAME##_f4(unsigned addr, float (&v)[4]) {                         \
        asm volatile("ld." SPACE ".v4.f32 {%0, %1, %2, %3}, [%4];\n"                                       \
                     : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])                                    \
                     : "r"(addr)                                                                         \
                     : "memory");                                                                        \
    }
DCPATTN_LD_SHARED(shared, "shared")
// 8- and 16-byte loads and stores of 32-bit words by shared address (this CTA).
__device__ __forceinline__ void ld_shared_u2(unsigned addr, unsigned &a, unsigned &b) {
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(a), "=r"(b) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ld_shared_u4(unsigned addr, unsigned (&v)[4]) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void st_shared_u2(unsigned addr, unsigned a, unsigned b) {
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(a), "r"(b) : "memory");
}
__device__ __forceinline__ void st_shared_u4(unsigned addr, const unsigned (&v)[4]) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                 : "memory");
}
#if __CUDA_ARCH__ >= 900
#define DCPATTN_HAS_CLUSTERS 1
DCPATTN_LD_SHARED(cluster, "shared::cluster")
// Every thread of every CTA of the cluster: shared-memory writes before it are visible to
// the cluster's reads after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// The shared::cluster address of this CTA's shared address `addr` in the cluster's CTA `rank`.
__device__ __forceinline__ unsigned cluster_map(unsigned addr, unsigned rank) {
    unsigned r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}
#else
#define DCPATTN_HAS_CLUSTERS 0
#endif
#undef DCPATTN_LD_SHARED

// ---- ldmatrix, mbarriers, wgmma bookkeeping ----

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// sm_90: four 8x8 b16 matrices of a warp's fragments to shared memory (r[i]: row lane / 4,
// columns 2 (lane % 4), + 1 of matrix i, the mma fragment layout); lane l gives the address of
// row l % 8 of matrix l / 8 (16 contiguous bytes)
__device__ __forceinline__ void stsm_x4(unsigned addr, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}
// The same, each matrix stored transposed (lane l gives the address of column l % 8 of matrix
// l / 8: that column's eight 16-bit values, rows 0-7, in 16 contiguous bytes).
__device__ __forceinline__ void stsm_x4_trans(unsigned addr, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}
// stmatrix into a K-major 128-byte-swizzled wgmma operand tile at `tile` (1024-byte aligned;
// 16-byte chunk n of row r at chunk n ^ (r % 8)): warp wi's 16 rows x 64 columns of 16-bit mma
// fragments, frag[j] = the matrices (rows 16 wi + lane / 4, + 8) x (chunks 2j, 2j + 1). This lane
// addresses row 16 wi + lane % 16 at chunk 2j + lane / 16, at sw128_stsm_row(tile, wi, lane) ^
// (j << 5): the row's base has bits 4-6 clear, so the chunk's XOR with r % 8 splits in two.
__device__ __forceinline__ unsigned sw128_stsm_row(unsigned tile, int wi, int lane) {
    return tile + (wi * 16 + (lane & 15)) * 128 + ((((lane >> 4) & 1) ^ (lane & 7)) << 4);
}
__device__ __forceinline__ void sw128_stsm_store(unsigned row, const unsigned (&frag)[4][4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) stsm_x4(row ^ (j << 5), frag[j]);
}
// stmatrix .trans of a 64 x N accumulator (warp wi: rows 16 wi + lane / 4, + 8) into the N x 64
// K-major SW128 tile of its transpose, one x4 a 16 columns i: frag[i][m] packs the elements of
// columns 2 (lane % 4), + 1 of column block 2 i + m / 2, row half m % 2 (an mma accumulator's pair
// 4 j + 2 h, + 1), so matrix m lands as chunk 2 wi + m % 2 of tile rows 8 (2 i + m / 2) .. + 7.
// This lane addresses tile row 8 (m / 2) + lane % 8 (m = lane / 8) of the 16: at
// sw128_stsm_trans_row(tile, wi, lane) + 2048 i (16 rows further, the same swizzle).
__device__ __forceinline__ unsigned sw128_stsm_trans_row(unsigned tile, int wi, int lane) {
    return tile + (((lane >> 4) << 3) + (lane & 7)) * 128 + (((2 * wi + ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

// Arrive on mbarrier `bar` (release: this thread's earlier writes are seen by its waiters).
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Expect `bytes` more of the bulk (TMA) copies on `bar` and arrive (its count is 1).
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Barrier initializations -> visible to the async proxy (the TMA unit that completes them).
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// TMA: the box at coordinates (c0, c1, c2) of the 3-D tensor map `tmap` (a __grid_constant__
// parameter) into shared memory at `dst`, completing on mbarrier `bar`.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void *tmap, int c0, int c1, int c2, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :
                 : "r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

// Vectors of floats for 8- and 16-byte accesses.
struct alignas(8) f2 {
    float x, y;
};
struct alignas(16) f4 {
    float x, y, z, w;
};
// Global memory shared between the CTAs of one launch: 16-byte stores and loads at L2 (never
// a stale L1 line), and a 64-bit word written with release and read with acquire semantics
// at GPU scope.
__device__ __forceinline__ void st_cg_f4(f4 *dst, f4 v) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
}
__device__ __forceinline__ f4 ld_cg_f4(const f4 *src) {
    f4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(src)
                 : "memory");
    return v;
}
__device__ __forceinline__ float ld_cg_f32(const float *src) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(src) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_u64(unsigned long long *dst, unsigned long long v) {
    asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(dst), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_acquire_u64(const unsigned long long *src) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(src) : "memory");
    return v;
}
__device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }
__device__ __forceinline__ void nanosleep_ns(unsigned ns) { asm volatile("nanosleep.u32 %0;\n" ::"r"(ns)); }

// Named barriers with immediate ids (a register id makes ptxas reserve all 16).
template <int ID, int N> __device__ __forceinline__ void nbar_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}
// The same where the threads meeting there run different code (a producer's loop and the
// math warpgroup's): barrier.sync without .aligned, which bar.sync implies.
template <int ID, int N> __device__ __forceinline__ void nbar_sync_apart() {
    asm volatile("barrier.sync %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}
template <int ID, int N> __device__ __forceinline__ void nbar_arrive() {
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most N of this warpgroup's committed wgmma groups are still running.
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_wait0() { wgmma_wait<0>(); }
// Keeps the compiler from moving accesses of r across a wgmma (which reads and writes it).
template <int N> __device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for A fragments in registers, which a running wgmma reads.
template <int N> __device__ __forceinline__ void fence_regs(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1]), "+r"(r[i][2]), "+r"(r[i][3])::"memory");
}

// Blocks 0 .. NB - 1 of A fragments in registers through SETS register sets: ready(b) waits for
// block b's bytes, then block b takes set b % SETS once the wgmma group of block b - SETS, the
// set's last reader, is done; issue(b, set) fills the set and commits the block's wgmmas as one
// group. The caller waits for the last groups.
template <int NB, int SETS, class Ready, class Issue>
__device__ __forceinline__ void wgmma_frag_ring(unsigned (&sets)[SETS][4][4], Ready &&ready, Issue &&issue) {
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        ready(b);
        if (b >= SETS) {
            wgmma_wait<SETS - 1>();
            fence_regs(sets[b % SETS]);
        }
        issue(b, sets[b % SETS]);
    }
}

// A shared-memory descriptor from its two halves, built where it is used (volatile: the
// compiler would otherwise hoist all loop-invariant descriptors into registers).
__device__ __forceinline__ unsigned long long desc_at(unsigned lo, unsigned hi) {
    unsigned long long d;
    asm volatile("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo), "r"(hi));
    return d;
}
// base + off, opaque to the compiler (so that it is not hoisted into a register of its own).
__device__ __forceinline__ unsigned add_at(unsigned base, unsigned off) {
    unsigned r;
    asm volatile("add.u32 %0, %1, %2;" : "=r"(r) : "r"(base), "r"(off));
    return r;
}
// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ unsigned long long sw128_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3ffffu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

// An e4m3 tile of 64 keys x 64 channels (bytes) in TMA's 64-byte swizzle (K-major rows of 64
// bytes in atoms of 8 rows, the 16-byte chunk c of row r at chunk c ^ ((r / 2) % 4), the tile
// 512-byte aligned) at `tile` as the transposed A operand of an fp16 wgmma (V^T: channels x
// keys), in registers: warp wi's 16 rows for the four k16 steps (keys 16 kk ..), va[kk].
// ldmatrix .trans of 16-bit pairs (two channels of a key) gives a lane, of an 8-key matrix,
// channels 2 g, 2 g + 1 of the warp's 16 for keys 2 q4, + 1 (g = lane / 4, q4 = lane % 4),
// which e4m3x4_split parts: so row g of the warp's rows is channel 16 wi + 2 g and row g + 8
// channel 16 wi + 2 g + 1. One x4 covers two k16 steps.
__device__ __forceinline__ void sw64_e4m3_vt_frags(unsigned tile, int wi, int lane, unsigned (&va)[4][4]) {
    const int key_l = 8 * (lane >> 3) + (lane & 7);  // this lane's row of the x4: key 32 kp + key_l
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {
        const int key = 32 * kp + key_l;
        unsigned r[4];
        ldsm_x4_trans(tile + key * 64 + (((wi ^ (key >> 1)) & 3) << 4), r);
#pragma unroll
        for (int m = 0; m < 4; ++m)  // matrix m: keys 16 (2 kp + m / 2) + 8 (m % 2) ..
            e4m3x4_split<fp16>(r[m], va[2 * kp + (m >> 1)][2 * (m & 1)], va[2 * kp + (m >> 1)][2 * (m & 1) + 1]);
    }
}

// An e4m3 tile of 64 keys x 64 channels (bytes) in the same layout at `tile` as the A operand of an
// fp16 wgmma (K: keys x channels), in registers: warp wi's 16 keys for the four k16 steps
// (channels 16 kk ..), ka[kk]. ldmatrix (not .trans) gives a lane four consecutive bytes of a
// row, channels 4 q4 .. 4 q4 + 3 of the step's 16 (q4 = lane % 4), which e4m3x4_to turns into
// the two fp16 pairs of its A fragment: so the step's k index j holds channel k16_channel(j),
// and the B operand (Q) must hold its channels in that order (mla.cuh, q_tile_to_fp16_k16). One
// x4 covers two k16 steps.
__host__ __device__ constexpr int k16_channel(int j) { return 4 * ((j & 7) >> 1) + (j & 1) + 2 * (j >> 3); }
__device__ __forceinline__ void sw64_e4m3_k_frags(unsigned tile, int wi, int lane, unsigned (&ka)[4][4]) {
    const int key = 16 * wi + 8 * ((lane >> 3) & 1) + (lane & 7);  // matrix lane / 8: keys + 8 (m % 2)
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {
        const int chunk = 2 * kp + (lane >> 4);  // .. and channels 16 (2 kp + m / 2) ..
        unsigned r[4];
        ldsm_x4(tile + key * 64 + (((chunk ^ (key >> 1)) & 3) << 4), r);
#pragma unroll
        for (int s = 0; s < 2; ++s) {  // step 2 kp + s: matrices 2 s (keys g) and 2 s + 1 (keys g + 8)
            e4m3x4_to<fp16>(r[2 * s], ka[2 * kp + s][0], ka[2 * kp + s][2]);
            e4m3x4_to<fp16>(r[2 * s + 1], ka[2 * kp + s][1], ka[2 * kp + s][3]);
        }
    }
}

// ---- tensor-core MMAs, fp32 accumulation; specialized below for bf16 and fp16 ----

// c += a (16x16, row) * b (16x8, col).
template <class T> __device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
// d (64 x 64) (+)= A (64 x 16, smem, K-major) * B (16 x 64, smem, K-major).
template <class T> __device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], unsigned long long da, unsigned long long db, int accumulate);
// d (64 x N, N = 16 or 32) (+)= A (64 x 16, smem; K-major, or MN-major with TA = 1) * B (16 x N,
// smem, K-major).
template <class T, int N, int TA>
__device__ __forceinline__ void wgmma_ss_narrow(float (&d)[N / 2], unsigned long long da, unsigned long long db, int accumulate);
// d (64 x N, N = 16 or 32) (+)= A (64 x 16, registers) * B (16 x N, smem, K-major).
template <class T, int N>
__device__ __forceinline__ void wgmma_rs_narrow(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db,
                                                int accumulate = 1);
// d (64 x 256) += A (64 x 16, smem, K-major) * B (16 x 256, smem, MN-major).
template <class T> __device__ __forceinline__ void wgmma_ss_n256(float (&d)[128], unsigned long long da, unsigned long long db);
// d (64 x 64) (+)= A (64 x 16, registers) * B (16 x 64, smem, K-major).
template <class T> __device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const unsigned (&a)[4], unsigned long long db, int accumulate);
// d (64 x 128) += A (64 x 16, registers) * B (16 x 128, smem, MN-major).
template <class T> __device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const unsigned (&a)[4], unsigned long long db);
// d (64 x 256) += A (64 x 16, registers) * B (16 x 256, smem, MN-major).
template <class T> __device__ __forceinline__ void wgmma_rs_n256(float (&d)[128], const unsigned (&a)[4], unsigned long long db);

#define DCPATTN_F8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
    "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define DCPATTN_F32(d, i) DCPATTN_F8(d, i), DCPATTN_F8(d, i + 8), DCPATTN_F8(d, i + 16), DCPATTN_F8(d, i + 24)

// The accumulator operands of a wgmma as PTX text: {%0, ..., %N-1} for N = 32, 64, 128.
#define DCPATTN_R0_31 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define DCPATTN_R32_63 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "              \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define DCPATTN_R64_127 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                                 \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "                     \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define DCPATTN_D32 "{" DCPATTN_R0_31 "}"
#define DCPATTN_D64 "{" DCPATTN_R0_31 ", " DCPATTN_R32_63 "}"
#define DCPATTN_D128 "{" DCPATTN_R0_31 ", " DCPATTN_R32_63 ", " DCPATTN_R64_127 "}"

// m64nNk16 from shared memory (N = 16: 8 accumulators, 32: 16), A transposed (MN-major) when TA
// is 1; DREGS, DA, DB, AC: the PTX operands (the accumulators, da, db, the accumulate flag),
// OUTS: the accumulators' output constraints
#define DCPATTN_SS_NARROW(T, PT, N, TA, DREGS, DA, DB, AC, OUTS)                                                      \
    template <> __device__ __forceinline__ void wgmma_ss_narrow<T, N, TA>(float (&d)[N / 2], unsigned long long da,    \
                                                                          unsigned long long db, int accumulate) {     \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " AC ", 0;\n"                                                  \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PT "." PT " " DREGS ", " DA ", " DB            \
                     ", p, 1, 1, " #TA ", 0;\n}\n"                                                                    \
                     : OUTS                                                                                            \
                     : "l"(da), "l"(db), "r"(accumulate));                                                             \
    }
#define DCPATTN_SS_N16(T, PT, TA) DCPATTN_SS_NARROW(T, PT, 16, TA, "{%0, %1, %2, %3, %4, %5, %6, %7}", "%8", "%9", "%10", \
                                                    DCPATTN_F8(d, 0))
#define DCPATTN_SS_N32(T, PT, TA)                                                                                     \
    DCPATTN_SS_NARROW(T, PT, 32, TA, "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}", "%16",  \
                      "%17", "%18", DCPATTN_F8(d, 0) DCPATTN_COMMA DCPATTN_F8(d, 8))
#define DCPATTN_COMMA ,
// m64nNk16 with A in registers, B K-major; operands as DCPATTN_SS_NARROW's (A: the four registers)
#define DCPATTN_RS_NARROW(T, PT, N, DREGS, A, DB, AC, OUTS)                                                           \
    template <> __device__ __forceinline__ void wgmma_rs_narrow<T, N>(float (&d)[N / 2], const unsigned (&a)[4],       \
                                                                      unsigned long long db, int accumulate) {         \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " AC ", 0;\n"                                                  \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PT "." PT " " DREGS ", " A ", " DB              \
                     ", p, 1, 1, 0;\n}\n"                                                                             \
                     : OUTS                                                                                            \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));                         \
    }
#define DCPATTN_RS_N16(T, PT) DCPATTN_RS_NARROW(T, PT, 16, "{%0, %1, %2, %3, %4, %5, %6, %7}", "{%8, %9, %10, %11}",  \
                                                "%12", "%13", DCPATTN_F8(d, 0))
#define DCPATTN_RS_N32(T, PT)                                                                                         \
    DCPATTN_RS_NARROW(T, PT, 32, "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}",            \
                      "{%16, %17, %18, %19}", "%20", "%21", DCPATTN_F8(d, 0) DCPATTN_COMMA DCPATTN_F8(d, 8))

// The MMAs for element type T, whose PTX name is PT ("bf16", "f16").
#define DCPATTN_MMAS(T, PT)                                                                                           \
    template <> __device__ __forceinline__ void mma16816<T>(float (&c)[4], const unsigned (&a)[4], unsigned b0,        \
                                                            unsigned b1) {                                             \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PT "." PT ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "   \
                     "{%8, %9}, {%0, %1, %2, %3};\n"                                                                   \
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                                  \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                                  \
    }                                                                                                                  \
    template <> __device__ __forceinline__ void wgmma_ss_n64<T>(float (&d)[32], unsigned long long da,                 \
                                                                unsigned long long db, int accumulate) {               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                      \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PT "." PT " "                                       \
                     DCPATTN_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                     \
                     : DCPATTN_F32(d, 0)                                                                               \
                     : "l"(da), "l"(db), "r"(accumulate));                                                             \
    }                                                                                                                  \
    DCPATTN_SS_N16(T, PT, 0)                                                                                           \
    DCPATTN_SS_N16(T, PT, 1)                                                                                           \
    DCPATTN_SS_N32(T, PT, 0)                                                                                           \
    DCPATTN_SS_N32(T, PT, 1)                                                                                           \
    DCPATTN_RS_N16(T, PT)                                                                                              \
    DCPATTN_RS_N32(T, PT)                                                                                              \
    template <> __device__ __forceinline__ void wgmma_ss_n256<T>(float (&d)[128], unsigned long long da,               \
                                                                 unsigned long long db) {                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                     \
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." PT "." PT " "                                      \
                     DCPATTN_D128 ", "                                                                                 \
                     "%128, %129, p, 1, 1, 0, 1;\n}\n"                                                                 \
                     : DCPATTN_F32(d, 0), DCPATTN_F32(d, 32), DCPATTN_F32(d, 64), DCPATTN_F32(d, 96)                   \
                     : "l"(da), "l"(db), "r"(1));                                                                      \
    }                                                                                                                  \
    template <> __device__ __forceinline__ void wgmma_rs_n64<T>(float (&d)[32], const unsigned (&a)[4],                \
                                                                unsigned long long db, int accumulate) {               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                      \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32." PT "." PT " "                                       \
                     DCPATTN_D32 ", {%32, %33, %34, %35}, %36, p, "                                                    \
                     "1, 1, 0;\n}\n"                                                                                   \
                     : DCPATTN_F32(d, 0)                                                                               \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));                          \
    }                                                                                                                  \
    template <> __device__ __forceinline__ void wgmma_rs_n128<T>(float (&d)[64], const unsigned (&a)[4],               \
                                                                 unsigned long long db) {                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                      \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." PT "." PT " "                                      \
                     DCPATTN_D64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                       \
                     : DCPATTN_F32(d, 0), DCPATTN_F32(d, 32)                                                           \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));                                   \
    }                                                                                                                  \
    template <> __device__ __forceinline__ void wgmma_rs_n256<T>(float (&d)[128], const unsigned (&a)[4],              \
                                                                 unsigned long long db) {                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                                     \
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." PT "." PT " "                                      \
                     DCPATTN_D128 ", "                                                                                 \
                     "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"                                                \
                     : DCPATTN_F32(d, 0), DCPATTN_F32(d, 32), DCPATTN_F32(d, 64), DCPATTN_F32(d, 96)                   \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));                                  \
    }
DCPATTN_MMAS(bf16, "bf16")
DCPATTN_MMAS(fp16, "f16")
#undef DCPATTN_MMAS
#undef DCPATTN_SS_N16
#undef DCPATTN_SS_N32
#undef DCPATTN_SS_NARROW
#undef DCPATTN_RS_N16
#undef DCPATTN_RS_N32
#undef DCPATTN_RS_NARROW
#undef DCPATTN_COMMA
// e4m3 x e4m3: one k-step is 32 channels (A 64 x 32, B 32 x 64, both K-major: FP8 wgmma has no
// transposed operand), 32 bytes of a row as a 16-bit k16 step is.
template <> __device__ __forceinline__ void wgmma_ss_n64<e4m3>(float (&d)[32], unsigned long long da, unsigned long long db,
                                                              int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " DCPATTN_D32 ", %32, %33, p, 1, 1;\n}\n"
                 : DCPATTN_F32(d, 0)
                 : "l"(da), "l"(db), "r"(accumulate));
}
#undef DCPATTN_F32
#undef DCPATTN_F8
#undef DCPATTN_D128
#undef DCPATTN_D64
#undef DCPATTN_D32
#undef DCPATTN_R64_127
#undef DCPATTN_R32_63
#undef DCPATTN_R0_31

}  // namespace dcpattn
