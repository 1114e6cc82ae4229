#include "dcpattn_abi.h"
#include "common.cuh"
#include "mla.cuh"

// the launch's dynamic shared memory (the generator's formula) is the kernel's layout
static_assert(dcpattn::MlaTraits<${T}, ${KV_T}, ${GROUP}, ${THREADS}, 0, 0, ${M_TILE}>::SMEM_BYTES == ${SMEM}, "MLA shared memory");
// and the TMA map that the host encodes for its K tiles (the generator's kv_swizzle) is the one it reads
static_assert(dcpattn::MlaTraits<${T}, ${KV_T}, ${GROUP}, ${THREADS}, 0, 0, ${M_TILE}>::KV_SWIZZLE == ${KV_SWIZZLE}, "MLA K swizzle");

// the balanced schedule (p.workers > 0): a kernel of its own, so that each keeps its registers
// (defined first: ptxas then reports the other first, whose figures the library records)
extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${NAME}_balanced(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::mla_decode<dcpattn::MlaTraits<${T}, ${KV_T}, ${GROUP}, ${THREADS}, 0, 0, ${M_TILE}>, true>(p);
}
// one (sequence, split) per CTA
extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${NAME}(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::mla_decode<dcpattn::MlaTraits<${T}, ${KV_T}, ${GROUP}, ${THREADS}, 0, 0, ${M_TILE}>, false>(p);
}
