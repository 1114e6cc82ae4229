#!/bin/bash
# Session 7, call 1: test_gpu_mla on HEAD (619c390's host change), M1/M2 with the balanced
# schedule (--splits -1) against the default plan alternating, then ncu of M1 and of G1 q4/q8.
. examples/results/s7-calls/lib.sh
make -s -j16 build/bench build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc
timeout 120 build/test_gpu_mla > $R/test-mla.log 2>&1; echo "test_gpu_mla exit $?"; tail -1 $R/test-mla.log; grep -m5 FAIL $R/test-mla.log
for s in -1 0 -1 0; do
  timeout 40 build/bench --only M1,M2 --no-peers --splits $s > $R/b$s.log 2>&1
  grep -E "^M[12]/q[0-9] +PASS" $R/b$s.log | sed "s/^/splits=$s /"
done
snap
profile m1 "--only M1" mla
profile g8 "--only G1 --q 8" gqa
profile g4 "--only G1 --q 4" gqa
