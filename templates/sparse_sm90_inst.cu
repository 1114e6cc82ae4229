#include "dcpattn_abi.h"
#include "common.cuh"
#include "mla.cuh"

// the MLA kernel over the kept rows of an FP8 cache, RAW_ROW bytes a row (templates/mla.cuh, "Sparse")
using ${NAME}_traits = dcpattn::MlaTraits<${T}, dcpattn::e4m3, 64, ${THREADS}, ${RAW_ROW}, ${MAX_TOPK}, ${M_TILE}>;

// the launch's dynamic shared memory (the generator's formula) is the kernel's layout
static_assert(${NAME}_traits::SMEM_BYTES == ${SMEM}, "sparse MLA (sm_90a) shared memory");

// one (query token, block of M_TILE heads) per CTA
extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${NAME}(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::mla_decode<${NAME}_traits, false>(p);
}
