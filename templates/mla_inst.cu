#include "dcpattn_abi.h"
#include "common.cuh"
#include "mla.cuh"

extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${NAME}(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::mla_decode<dcpattn::MlaTraits<${T}, ${GROUP}, ${THREADS}>>(p);
}
