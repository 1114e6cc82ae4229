// common.cuh — element types, conversions and small math shared by every dcpattn kernel.
// No CUDA headers: NVRTC compiles this in a fraction of the time cuda_bf16.h would cost.
#pragma once

namespace dcpattn {

struct bf16 { unsigned short bits; };
struct fp16 { unsigned short bits; };
struct e4m3 { unsigned char bits; };  // OCP FP8 e4m3fn: KV caches only (dequantized to bf16/fp16)

// A if C, else B (no <type_traits> under NVRTC).
template <bool C, class A, class B> struct type_if { using type = A; };
template <class A, class B> struct type_if<false, A, B> { using type = B; };
template <class A, class B> constexpr bool same_type = false;
template <class A> constexpr bool same_type<A, A> = true;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float((unsigned)v.bits << 16); }
__device__ __forceinline__ float to_float(fp16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}

template <class T> __device__ __forceinline__ T from_float(float f);
template <> __device__ __forceinline__ float from_float<float>(float f) { return f; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float f) {
    bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
    return r;
}
template <> __device__ __forceinline__ fp16 from_float<fp16>(float f) {
    fp16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
    return r;
}

// Two floats packed into one 32-bit register of 16-bit elements: lo in bits 0-15.
template <class T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<bf16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ unsigned pack2<fp16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Unpack a 32-bit register of two 16-bit elements.
__device__ __forceinline__ float lo_float(bf16, unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_float(bf16, unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float lo_float(fp16, unsigned w) { fp16 h; h.bits = (unsigned short)(w & 0xffff); return to_float(h); }
__device__ __forceinline__ float hi_float(fp16, unsigned w) { fp16 h; h.bits = (unsigned short)(w >> 16); return to_float(h); }

// ---- FP8 e4m3 -> 16-bit ----
// The four e4m3 bytes of w (byte 0 first) as two registers of two T each, (b0, b1) and
// (b2, b3), exactly: every e4m3 value is a bf16 and an fp16 value. Bit placement instead
// of cvt (one instruction per pair, but on the conversion pipe, which a KV tile per
// iteration would saturate; sm_80 has no e4m3 cvt at all): each byte goes to the high byte
// of a 16-bit half, its sign stays at bit 15, its exponent and mantissa move down into T's
// field positions, and one multiply by 2^(bias(T) - 7) rebiases the exponent. An e4m3
// subnormal lands on a T subnormal, which the multiply (a 16-bit FMA, subnormals kept)
// scales exactly; the NaN bytes (0x7f, 0xff) come out as +-480, which no kernel reads (slots
// past a sequence's keys are never loaded).
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
template <class T> __device__ __forceinline__ unsigned e4m3x2_place(unsigned x);
template <> __device__ __forceinline__ unsigned e4m3x2_place<fp16>(unsigned x) {
    unsigned r;  // fp16: 5-bit exponent, bias 15: shift 1, times 2^8
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"((x & 0x80008000u) | ((x >> 1) & 0x3f803f80u)), "r"(0x5c005c00u));
    return r;
}
template <> __device__ __forceinline__ unsigned e4m3x2_place<bf16>(unsigned x) {
    unsigned r;  // bf16: 8-bit exponent, bias 127: shift 4, times 2^120 (+ -0 keeps a zero's sign)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;"
        : "=r"(r)
        : "r"((x & 0x80008000u) | ((x >> 4) & 0x07f007f0u)), "r"(0x7b807b80u), "r"(0x80008000u));
    return r;
}
template <class T> __device__ __forceinline__ void e4m3x4_to(unsigned w, unsigned &p01, unsigned &p23) {
    p01 = e4m3x2_place<T>(prmt(w, 0u, 0x1404u));  // bytes 0, 1 -> bytes 1, 3
    p23 = e4m3x2_place<T>(prmt(w, 0u, 0x3424u));  // bytes 2, 3 -> bytes 1, 3
}
// The same, pairing bytes (b0, b2) and (b1, b3): the two 16-bit halves of an ldmatrix.trans
// register of e4m3 bytes are two keys x two channels, and an mma operand pairs the keys.
template <class T> __device__ __forceinline__ void e4m3x4_split(unsigned w, unsigned &p02, unsigned &p13) {
    p02 = e4m3x2_place<T>(prmt(w, 0u, 0x2404u));  // bytes 0, 2 -> bytes 1, 3
    p13 = e4m3x2_place<T>(prmt(w, 0u, 0x3414u));  // bytes 1, 3 -> bytes 1, 3
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// bf16 pairs x times a scale given as s_hi + s_lo (both bf16 pairs: s_hi = bf16(s), s_lo =
// bf16(s - s_hi)), with one rounding: the result is bf16(x * s) but within 2^-17 of a tie.
__device__ __forceinline__ unsigned bf16x2_scale(unsigned x, unsigned s_hi, unsigned s_lo) {
    unsigned t, r;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(t) : "r"(x), "r"(s_lo));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(s_hi), "r"(t));
    return r;
}
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// To fp16 from sm_89 on: the hardware conversion, one instruction per pair (low byte -> low
// half). The kernels that convert every KV element in registers (GQA's FRAG8 tiles) compute
// in fp16 for it; the conversion pipe then carries what the bit placement put on the ALUs.
// Unlike the placement, it turns the NaN bytes into NaN (no kernel reads them: see above).
// Bytes 0, 1 of w -> p_lo and bytes 2, 3 -> p_hi (the upper pair through the conversion's
// half selector, not a shift).
__device__ __forceinline__ void e4m3x4_cvt_f16(unsigned w, unsigned &p_lo, unsigned &p_hi) {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.rn.f16x2.e4m3x2 %0, lo;\ncvt.rn.f16x2.e4m3x2 %1, hi;\n}"
        : "=r"(p_lo), "=r"(p_hi)
        : "r"(w));
}
template <> __device__ __forceinline__ void e4m3x4_to<fp16>(unsigned w, unsigned &p01, unsigned &p23) {
    e4m3x4_cvt_f16(w, p01, p23);
}
template <> __device__ __forceinline__ void e4m3x4_split<fp16>(unsigned w, unsigned &p02, unsigned &p13) {
    e4m3x4_cvt_f16(prmt(w, 0u, 0x3120u), p02, p13);  // bytes b0, b2, b1, b3
}
#endif
// e4m3 from fp32 (sm_89 on; the query operand of an e4m3 MMA): x0, x1 as the e4m3 pairs
// hi = e4m3(x) and lo = e4m3(x - hi), byte 0 from x0. hi + lo holds x to 2^-8 of itself (each
// rounding keeps 4 significant bits), down to e4m3's smallest subnormal (2^-9); 448 at most.
__device__ __forceinline__ void f32x2_to_e4m3x2_hilo(float x0, float x1, unsigned &hi, unsigned &lo) {
    unsigned short h, l;
    unsigned hf;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(x1), "f"(x0));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hf) : "h"(h));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
        : "=h"(l)
        : "f"(x1 - hi_float(fp16{}, hf)), "f"(x0 - lo_float(fp16{}, hf)));
    hi = h;
    lo = l;
}

// x as ptxas knows it: the same in every lane of the warp (lane 0's x; every lane must hold
// the same). A value read from shared memory may differ between the lanes as far as ptxas
// knows, and a loop or branch on one before or around the wgmmas makes it serialize them
// (C7515, C7520: tests/wgmma_serial.sh).
template <class T> __device__ __forceinline__ T warp_uniform(T x) { return __shfl_sync(0xffffffffu, x, 0); }

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ bool is_finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

// 2^x with flush to zero; exp2(-inf) = 0.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float fast_log2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// DCP placement (docs/contract.md 2): tokens this rank holds of a global prefix of length L.
__device__ __forceinline__ int local_len(int L, int world, int rank, int interleave) {
    const int span = world * interleave;
    const int rem = L % span - rank * interleave;
    return (L / span) * interleave + min(max(rem, 0), interleave);
}

}  // namespace dcpattn
