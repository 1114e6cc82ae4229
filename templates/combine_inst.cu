#include "dcpattn_abi.h"
#include "common.cuh"
#include "merge.cuh"
#include "combine.cuh"
extern "C" __global__ void __launch_bounds__(${THREADS}, 4) ${NAME}(const __grid_constant__ dcpattn_merge_kparams p) {
    dcpattn::rescale_state<${IN_T}, ${OUT_T}, ${THREADS}, dcpattn::kMergeUnroll, ${ITEMS}>(p);
}
