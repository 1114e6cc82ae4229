#include "dcpattn_abi.h"
#include "common.cuh"
#include "sparse.cuh"

using ${NAME}_traits = dcpattn::SparseTraits<${T}, ${RAW_ROW}, ${M_TILE}, ${KV_TILE}, ${MAX_TOPK}, ${THREADS}>;

// the launch's dynamic shared memory (the generator's formula) is the kernel's layout
static_assert(${NAME}_traits::SMEM_BYTES == ${SMEM}, "sparse MLA shared memory");

// one (query token, block of M_TILE heads) per CTA
extern "C" __global__ void __launch_bounds__(${THREADS}, 1) ${NAME}(const __grid_constant__ dcpattn_attn_kparams p) {
    dcpattn::sparse_decode<${NAME}_traits>(p);
}
