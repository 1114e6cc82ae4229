#include "dcpattn_abi.h"
#include "common.cuh"
#include "mla.cuh"

// the launch's dynamic shared memory (the generator's formula) is the kernel's layout
static_assert(dcpattn::MlaTraits<${T}, ${GROUP}, ${THREADS}>::SMEM_BYTES == ${SMEM}, "MLA shared memory");

extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${NAME}(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::mla_decode<dcpattn::MlaTraits<${T}, ${GROUP}, ${THREADS}>>(p);
}
