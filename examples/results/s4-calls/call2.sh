#!/bin/bash
. tests/gpu_env.sh
R=$OUT/r; mkdir -p $R
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -30 $R/build.log
for v in ${VARIANTS:-j jp v2p v3 v3b}; do
  export DCPATTN_HOME=$PWD/var/$v DCPATTN_CACHE_DIR=/tmp/dc-$v
  timeout 120 build/test_gpu_mla > $R/test-$v.log 2>&1; echo "$v test rc $? $(tail -1 $R/test-$v.log)"
  timeout 90 build/bench --only M1,M2 --no-peers > $R/bench-$v.log 2>&1
  grep -E "^M[12]/" $R/bench-$v.log | grep -v PASS | head -0; grep -E "TFLOP/s =|GB/s =" $R/bench-$v.log | sed "s/^/$v /"
done
cd $OUT && tar czf all.tgz r && rm -rf r
