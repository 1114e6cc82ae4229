#!/bin/bash
# Session 7, call 2: the GQA kernels' instruction diet (working tree) against HEAD's kernels
# (var/H): test_gpu_attn on the new ones, then G1/G2 alternating, then ncu of G1 q8 (new).
. examples/results/s7-calls/lib.sh
make -s -j16 build/bench build/test_gpu_attn > $R/build.log 2>&1 || tail -20 $R/build.log
env $(sel N) timeout 200 build/test_gpu_attn > $R/test-attn.log 2>&1; echo "test_gpu_attn exit $?"; tail -1 $R/test-attn.log; grep -m5 FAIL $R/test-attn.log
ab ${CASES:-G1,G2} "^G[12]/q[0-9] +PASS +g|^M[12]/q[0-9] +PASS +m|ceiling" ${VARIANTS:-H N H N}
snap
export $(sel N); profile g8 "--only G1 --q 8" gqa
