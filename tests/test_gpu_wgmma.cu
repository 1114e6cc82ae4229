/* test_gpu_wgmma — what MLA's tiles (templates/mla.cuh, "Narrow tiles" and the 64-row tile's
   P) take for granted of Hopper's wgmma and stmatrix, each on one warpgroup against a CPU
   product of small integers (exact in bf16, and their sums below 2^10 exact in fp32
   accumulation), so that a wrong layout shows as a wrong element, not as an error that a
   tolerance hides:
     1. S^T = K Q^T (m64n16k16, m64n32k16): A = K and B = Q, both K-major in 128-byte swizzle,
        as the MLA kernel's stages and Q tile hold them (an FP8 cache's stages too, once
        converted to fp16);
     2. O^T = V^T P^T: A = V as an MN-major 128-byte-swizzled operand (the bytes TMA lays for
        K), B = P K-major;
     3. the 64-row tile's P: a warpgroup's 16-bit fragments stored by stmatrix
        (sw128_stsm_store, templates/ptx.cuh) land where the K-major SW128 operand holds them;
     4. the narrow tiles' P: the S^T accumulator's pairs stored by stmatrix .trans
        (sw128_stsm_trans_row, templates/ptx.cuh) land as the K-major SW128 P tile (rows x keys);
     5. an e4m3 cache on the narrow tiles (mla.cuh, "FP8 on the narrow tiles"): S^T = K Q^T with
        K's fp16 A fragments from the e4m3 stage (64-byte swizzle, as TMA lays it) by ldmatrix
        (sw64_e4m3_k_frags), Q (fp16) K-major SW128 with each 16 channels in k16_channel's order;
     6. and its O^T = V^T P^T: V^T's fp16 A fragments from the e4m3 stage by ldmatrix .trans
        (sw64_e4m3_vt_frags), P (fp16) K-major SW128, the rows in its channel order (row
        16 w + g + 8 h is channel 16 w + 2 g + h);
   every result read through the accumulator fragment map (row 16 w + g + 8 h, column 8 i +
   2 q4 + e). Built with nvcc for sm_90a; without such a GPU it says so and runs nothing. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "ptx.cuh"
#include "check.h"
#include "ref.h" /* small integers: exact in bf16, fp16 and e4m3 */

using namespace dcpattn;

enum { KEYS = 64, SMEM = 64 * 1024 };

// The position (row, column) of accumulator element j of this thread in a 64 x N tile.
__device__ void frag_at(int j, int &row, int &col) {
    const int wi = threadIdx.x >> 5, lane = threadIdx.x & 31;
    row = 16 * wi + (lane >> 2) + 8 * ((j >> 1) & 1);
    col = 8 * (j >> 2) + 2 * (lane & 3) + (j & 1);
}
// 128-byte swizzle of a byte offset inside a 1024-byte-aligned region (rows of 128 bytes).
__device__ unsigned sw128(unsigned off) { return off ^ (((off >> 7) & 7u) << 4); }

// rows x 64 16-bit values (row-major) into shared memory at dst, rows of 128 bytes, SW128
__device__ void fill_sw128(unsigned dst, const unsigned short *src, int rows) {
    for (int i = threadIdx.x; i < rows * 64; i += 128)
        asm volatile("st.shared.u16 [%0], %1;" ::"r"(dst + sw128((i >> 6) * 128 + (i & 63) * 2)), "h"(src[i]));
}
// 64-byte swizzle of a byte offset inside a 512-byte-aligned region (rows of 64 bytes).
__device__ unsigned sw64(unsigned off) { return off ^ (((off >> 7) & 3u) << 4); }
// rows x 64 bytes (row-major) into shared memory at dst, rows of 64 bytes, SW64
__device__ void fill_sw64(unsigned dst, const unsigned char *src, int rows) {
    for (int i = threadIdx.x; i < rows * 64; i += 128)
        asm volatile("st.shared.u8 [%0], %1;" ::"r"(dst + sw64(i)), "h"((unsigned short)src[i]));
}
// this thread's accumulators of a 64 x N tile to d (row-major)
template <int N> __device__ void store_tile(const float (&acc)[N / 2], float *d) {
    for (int j = 0; j < N / 2; ++j) {
        int r, c;
        frag_at(j, r, c);
        d[r * N + c] = acc[j];
    }
}

// 1 (PV = 0): D (64 x N) = K (64 x 64) Q^T (Q: N x 64), bf16, both K-major SW128.
// 2 (PV = 1): D (64 channels x N) = V^T P^T: a = V (64 keys x 64 channels) as the MN-major
// SW128 operand, b = P (N x 64 keys) K-major SW128.
template <int N, int PV> __global__ void __launch_bounds__(128) bf16_kernel(const unsigned short *a, const unsigned short *b, float *d) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char sm[];
    const unsigned base = (smem_u32(sm) + 1023u) & ~1023u, sa = base, sb = base + 8192;
    fill_sw128(sa, a, KEYS);
    fill_sw128(sb, b, N);
    fence_proxy_async();
    __syncthreads();
    float acc[N / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        if (PV)  // (16 keys a k-step: 16 rows of 128 bytes)
            wgmma_ss_narrow<bf16, N, 1>(acc, sw128_desc(sa + kk * 16 * 128, 8192, 1024), sw128_desc(sb + kk * 32, 16, 1024),
                                        kk > 0);
        else
            wgmma_ss_narrow<bf16, N, 0>(acc, sw128_desc(sa + kk * 32, 16, 1024), sw128_desc(sb + kk * 32, 16, 1024), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    store_tile<N>(acc, d);
}

// 3: a warpgroup's 64 x 64 16-bit values (p, row-major) as mma fragments, stored by stmatrix into a
// K-major SW128 tile (sw128_stsm_store), then read back through the swizzle map (d: the values).
__global__ void __launch_bounds__(128) stsm_kernel(const unsigned short *p, const unsigned short *, float *d) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char sm[];
    const unsigned base = (smem_u32(sm) + 1023u) & ~1023u;
    const int wi = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q4 = lane & 3;
    unsigned pa[4][4];
    for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i) {  // matrix i of k-step j: rows + 8 (i % 2), columns 16 j + 8 (i / 2)
            const int at = (16 * wi + g + 8 * (i & 1)) * 64 + 16 * j + 8 * (i >> 1) + 2 * q4;
            pa[j][i] = p[at] | (unsigned)p[at + 1] << 16;
        }
    sw128_stsm_store(sw128_stsm_row(base, wi, lane), pa);
    __syncthreads();
    for (int i = threadIdx.x; i < 64 * 64; i += 128) {
        unsigned short v;
        asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(base + sw128((i >> 6) * 128 + (i & 63) * 2)));
        d[i] = (float)v;
    }
}

// 4: the narrow P store. p: N rows x 64 keys (row-major); the thread's accumulator pairs (elements
// 4 j + 2 h, + 1 of S^T: key 16 wi + g + 8 h, rows 8 j + 2 q4, + 1) packed as the narrow softmax
// packs them, stored by stsm_x4_trans at sw128_stsm_trans_row, read back through the swizzle map.
template <int N> __global__ void __launch_bounds__(128) stsm_narrow_kernel(const unsigned short *p, const unsigned short *, float *d) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char sm[];
    const unsigned base = (smem_u32(sm) + 1023u) & ~1023u;
    const int wi = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q4 = lane & 3;
    for (int i = threadIdx.x; i < N * 64 / 2; i += 128)  // (rows a warp does not store stay zero)
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(base + 4 * i), "r"(0u));
    __syncthreads();
    unsigned pa[4][4];
    for (int j = 0; j < N / 2; j += 2) {
        const int key = 16 * wi + g + 8 * ((j >> 1) & 1), q = 8 * (j >> 2) + 2 * q4;
        pa[j >> 3][(j >> 1) & 3] = p[q * 64 + key] | (unsigned)p[(q + 1) * 64 + key] << 16;
    }
    const unsigned row = sw128_stsm_trans_row(base, wi, lane);
    for (int i = 0; i < N / 16; ++i) stsm_x4_trans(row + 2048 * i, pa[i]);
    __syncthreads();
    for (int i = threadIdx.x; i < N * 64; i += 128) {
        unsigned short v;
        asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(base + sw128((i >> 6) * 128 + (i & 63) * 2)));
        d[i] = (float)v;
    }
}

// 5 (PV = 0): D (64 x N) = K (64 x 64) Q^T: a = K (64 keys x 64 channels, e4m3, SW64) into fp16 A
// fragments by sw64_e4m3_k_frags, b = Q (N x 64 channels, fp16, each 16 in k16_channel's order)
// K-major SW128.
// 6 (PV = 1): D (64 channels x N) = V^T P^T: a = V (64 keys x 64 channels, e4m3, SW64) into fp16
// A fragments by sw64_e4m3_vt_frags, b = P (N x 64 keys, fp16) K-major SW128; row r of the
// accumulator holds channel 16 (r / 16) + 2 (r % 8) + (r % 16) / 8, so d is written through it.
template <int N, int PV>
__global__ void __launch_bounds__(128) e4m3_kernel(const unsigned char *a, const unsigned short *b, float *d) {
    extern __shared__ __attribute__((aligned(1024))) unsigned char sm[];
    const unsigned base = (smem_u32(sm) + 1023u) & ~1023u, sa = base, sb = base + 8192;
    const int wi = threadIdx.x >> 5, lane = threadIdx.x & 31;
    fill_sw64(sa, a, KEYS);
    fill_sw128(sb, b, N);
    fence_proxy_async();
    __syncthreads();
    float acc[N / 2];
    unsigned va[4][4];
    for (int j = 0; j < N / 2; ++j) acc[j] = 0.f;
    if (PV)
        sw64_e4m3_vt_frags(sa, wi, lane, va);
    else
        sw64_e4m3_k_frags(sa, wi, lane, va);
    fence_regs(va);
    fence_regs(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs_narrow<fp16, N>(acc, va[kk], sw128_desc(sb + kk * 32, 16, 1024), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    for (int j = 0; j < N / 2; ++j) {
        int r, c;
        frag_at(j, r, c);
        if (PV) r = 16 * (r >> 4) + 2 * (r & 7) + ((r >> 3) & 1);
        d[r * N + c] = acc[j];
    }
}

// ---- host ----
static int rnd(int lo, int hi) { return lo + rand() % (hi - lo + 1); }

// Uploads a and b, runs launch(a, b, d) on one warpgroup, and compares d with want (n floats).
template <class Launch>
static void run_case(const char *what, const void *a, size_t na, const void *b, size_t nb, const float *want, int n,
                     Launch launch) {
    void *da, *db;
    float *dd, *got = (float *)malloc(sizeof(float) * (size_t)n);
    int bad = 0, first = -1;
    cudaMalloc(&da, na);
    cudaMalloc(&db, nb);
    cudaMalloc((void **)&dd, sizeof(float) * (size_t)n);
    cudaMemcpy(da, a, na, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, nb, cudaMemcpyHostToDevice);
    cudaMemset(dd, 0xff, sizeof(float) * (size_t)n);  // (NaN where nothing is written)
    launch(da, db, dd);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "%s: launch", what);
    cudaMemcpy(got, dd, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; i++)
        if (!(got[i] == want[i])) {
            if (first < 0) first = i;
            bad++;
        }
    CHECK(bad == 0, "%s: %d of %d elements differ (first [%d]: %g, want %g)", what, bad, n, first,
          first >= 0 ? got[first] : 0.f, first >= 0 ? want[first] : 0.f);
    cudaFree(da), cudaFree(db), cudaFree(dd);
    free(got);
}

// want[r * cols + c] = sum over x < len of A(r, x) B(c, x), of small integers
template <class FA, class FB> static void product(float *want, int rows, int cols, int len, FA A, FB B) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            int s = 0;
            for (int x = 0; x < len; x++) s += A(r, x) * B(c, x);
            want[r * cols + c] = (float)s;
        }
}

// The two products of a narrow tile on one K tile (KEYS keys x 64 channels, small integers ki)
// and N query rows (qi): S^T = K Q^T, launched by score(k, q, d) on k and q, and O^T = V^T P^T
// with the K tile as V and the rows as P (N x 64 keys), launched by pv(k, p, d) on k and p; k,
// q, p are the uploaded bytes of the operands in the kernels' formats.
template <int N, class Score, class Pv>
static void narrow_products(const char *format, const void *k, size_t nk, const void *q, const void *p, size_t nq,
                            const int *ki, const int *qi, const char *s_how, const char *o_how, Score score, Pv pv) {
    static float want[KEYS * N];
    char what[128];
    product(want, KEYS, N, 64, [&](int r, int x) { return ki[r * 64 + x]; }, [&](int c, int x) { return qi[c * 64 + x]; });
    snprintf(what, sizeof what, "S^T = K Q^T, m64n%dk16 %s, %s", N, format, s_how);
    run_case(what, k, nk, q, nq, want, KEYS * N, score);
    product(want, 64, N, KEYS, [&](int ch, int key) { return ki[key * 64 + ch]; },
            [&](int c, int key) { return qi[c * 64 + key]; });
    snprintf(what, sizeof what, "O^T = V^T P^T, m64n%dk16 %s, %s", N, format, o_how);
    run_case(what, k, nk, p, nq, want, 64 * N, pv);
}

// bf16, N query rows
template <int N> static void test_bf16(void) {
    static unsigned short k[KEYS * 64], q[N * 64];
    static int ki[KEYS * 64], qi[N * 64];
    for (int i = 0; i < KEYS * 64; i++) k[i] = ref_float_to_bf16((float)(ki[i] = rnd(-3, 3)));
    for (int i = 0; i < N * 64; i++) q[i] = ref_float_to_bf16((float)(qi[i] = rnd(0, 3)));
    narrow_products<N>("bf16", k, sizeof k, q, q, sizeof q, ki, qi, "K-major SW128", "A MN-major SW128",
        [](void *a, void *b, float *d) {
            bf16_kernel<N, 0><<<1, 128, SMEM>>>((const unsigned short *)a, (const unsigned short *)b, d);
        },
        [](void *a, void *b, float *d) {
            bf16_kernel<N, 1><<<1, 128, SMEM>>>((const unsigned short *)a, (const unsigned short *)b, d);
        });
}

// K (and V) e4m3 converted into fp16 fragments, Q and P fp16, N query rows
template <int N> static void test_e4m3(void) {
    static unsigned char k[KEYS * 64];
    static unsigned short q[N * 64], p[N * 64];
    static int ki[KEYS * 64], qi[N * 64];
    for (int i = 0; i < KEYS * 64; i++) k[i] = ref_double_to_e4m3(ki[i] = rnd(-3, 3));
    for (int i = 0; i < N * 64; i++) p[i] = ref_float_to_fp16((float)(qi[i] = rnd(0, 3)));
    for (int i = 0; i < N * 64; i++) q[i] = p[(i & ~15) + k16_channel(i & 15)];  // (channel order of K's fragments)
    narrow_products<N>("e4m3 -> fp16", k, sizeof k, q, p, sizeof q, ki, qi, "K from e4m3 SW64 by ldmatrix",
        "V^T from e4m3 SW64 by ldmatrix .trans",
        [](void *a, void *b, float *d) {
            e4m3_kernel<N, 0><<<1, 128, SMEM>>>((const unsigned char *)a, (const unsigned short *)b, d);
        },
        [](void *a, void *b, float *d) {
            e4m3_kernel<N, 1><<<1, 128, SMEM>>>((const unsigned char *)a, (const unsigned short *)b, d);
        });
}

// the 64-row tile's P store
static void test_stsm(void) {
    static unsigned short p[64 * 64];
    static float want[64 * 64];
    for (int i = 0; i < 64 * 64; i++) want[i] = p[i] = (unsigned short)rnd(0, 65535);
    run_case("P by stmatrix (sw128_stsm_store) into a K-major SW128 tile", p, sizeof p, p, sizeof p, want, 64 * 64,
             [](void *a, void *, float *d) { stsm_kernel<<<1, 128, SMEM>>>((const unsigned short *)a, NULL, d); });
}

// the narrow tiles' P store (N query rows)
template <int N> static void test_stsm_narrow(void) {
    static unsigned short p[N * 64];
    static float want[N * 64];
    char what[96];
    for (int i = 0; i < N * 64; i++) want[i] = p[i] = (unsigned short)rnd(0, 65535);
    snprintf(what, sizeof what, "narrow P (%d rows) by stmatrix .trans into a K-major SW128 tile", N);
    run_case(what, p, sizeof p, p, sizeof p, want, N * 64, [](void *a, void *, float *d) {
        stsm_narrow_kernel<N><<<1, 128, SMEM>>>((const unsigned short *)a, NULL, d);
    });
}

int main(void) {
    check_line_buffered();
    int n = 0, major = 0, minor = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no GPU found: GPU tests not run\n");
        return check_summary();
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major != 9 || minor != 0) {
        printf("no sm_90 GPU (device 0 is sm_%d%d): wgmma tests not run\n", major, minor);
        return check_summary();
    }
    cudaFuncSetAttribute(bf16_kernel<16, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(bf16_kernel<32, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(bf16_kernel<16, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(bf16_kernel<32, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(e4m3_kernel<16, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(e4m3_kernel<32, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(e4m3_kernel<16, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(e4m3_kernel<32, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(stsm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(stsm_narrow_kernel<16>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaFuncSetAttribute(stsm_narrow_kernel<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    srand(12345);
    for (int rep = 0; rep < 3; rep++) {  // (fresh random integers each time)
        test_bf16<16>();
        test_bf16<32>();
        test_e4m3<16>();
        test_e4m3<32>();
        test_stsm();
        test_stsm_narrow<16>();
        test_stsm_narrow<32>();
    }
    return check_summary();
}
