#include "dcpattn_abi.h"
#include "common.cuh"
#include "merge.cuh"
extern "C" __global__ void __launch_bounds__(${THREADS}, 4) ${NAME}(const __grid_constant__ dcpattn_merge_kparams p) {
    dcpattn::merge_states<${IN_T}, ${OUT_T}, ${THREADS}, dcpattn::kMergeUnroll, ${ITEMS}>(p);
}
