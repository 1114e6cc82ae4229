#include "dcpattn_abi.h"
#include "common.cuh"
#include "gqa.cuh"

using ${NAME}_traits = dcpattn::GqaTraits<${T}, ${HEAD_DIM}, ${GROUP}, ${M_TILE}, ${KV_TILE}, ${STAGES}, ${THREADS}, ${WGMMA}>;

extern "C" __global__ void __launch_bounds__(${THREADS}, ${NAME}_traits::MIN_BLOCKS)
    ${NAME}(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::gqa_decode<${NAME}_traits>(p);
}
