#include "dcpattn_abi.h"
#include "common.cuh"
#include "gqa.cuh"

using ${NAME}_traits = dcpattn::GqaTraits<${T}, ${KV_T}, ${HEAD_DIM}, ${GROUP}, ${M_TILE}, ${KV_TILE}, ${STAGES}, ${THREADS}, ${WGMMA}>;
static_assert(${NAME}_traits::SMEM_BYTES + (${WGMMA} ? 1024 : 0) == ${SMEM}, "GQA shared memory");

// the balanced schedule (p.workers > 0): a kernel of its own, so that each keeps its registers
// (defined first: ptxas then reports the other first, whose figures the library records)
extern "C" __global__ void __launch_bounds__(${THREADS}, ${NAME}_traits::MIN_BLOCKS)
    ${NAME}_balanced(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::gqa_decode_balanced<${NAME}_traits>(p);
}
#if ${STACKED_KERNEL} && DCPATTN_GQA_WGMMA
// the FP8 producer tile's balanced schedule with every segment's rows stacked (templates/gqa.cuh),
// which the host launches where the plan's max_q_len x group <= M_TILE / 2
extern "C" __global__ void __launch_bounds__(${THREADS}, ${NAME}_traits::MIN_BLOCKS)
    ${NAME}_balanced_stacked(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::gqa_decode_balanced<${NAME}_traits, true>(p);
}
#endif
// one (sequence, split) per CTA
extern "C" __global__ void __launch_bounds__(${THREADS}, ${NAME}_traits::MIN_BLOCKS)
    ${NAME}(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::gqa_decode<${NAME}_traits>(p);
}
