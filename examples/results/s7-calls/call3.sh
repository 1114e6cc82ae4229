#!/bin/bash
# Session 7, call 3: MLA refills shared by the four warps of a warpgroup (working tree, N)
# against HEAD's kernel (var/H): test_gpu_mla on N, then M1/M2 alternating.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/bench build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
sel() { if [ "$1" = N ]; then echo DCPATTN_CACHE_DIR=/tmp/dc-N; else echo DCPATTN_HOME=$PWD/var/$1 DCPATTN_CACHE_DIR=/tmp/dc-$1; fi; }
env $(sel N) DCPATTN_TEST_QUICK=${QUICK:-0} timeout 200 build/test_gpu_mla > $R/test-mla.log 2>&1; echo "test_gpu_mla exit $?"; tail -1 $R/test-mla.log; grep -m5 FAIL $R/test-mla.log
for v in ${VARIANTS:-H N H N H N}; do
  env $(sel $v) timeout 60 build/bench --only ${CASES:-M1,M2} --no-peers > $R/b-$v.log 2>&1
  grep -E "^(G[12]|M[12])/q[0-9] +PASS +[gm]" $R/b-$v.log | sed "s/^/$v /"
done
snap
