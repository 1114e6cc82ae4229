#!/bin/bash
# Session 7, calls 3 and 4: an MLA variant (working tree, N) against a var/ copy (call 3: var/H
# = 619c390; call 4: VARIANTS="C N C N C N" QUICK=1, var/C = c075af6): test_gpu_mla on N,
# then M1/M2 alternating.
. examples/results/s7-calls/lib.sh
make -s -j16 build/bench build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
env $(sel N) DCPATTN_TEST_QUICK=${QUICK:-0} timeout 200 build/test_gpu_mla > $R/test-mla.log 2>&1; echo "test_gpu_mla exit $?"; tail -1 $R/test-mla.log; grep -m5 FAIL $R/test-mla.log
ab ${CASES:-M1,M2} "^(G[12]|M[12])/q[0-9] +PASS +[gm]" ${VARIANTS:-H N H N H N}
snap
