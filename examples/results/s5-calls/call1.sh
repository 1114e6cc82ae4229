#!/bin/bash
# Session 5, call 1: test_combine's GPU part (after 8f4c4df), then the MLA variants under var/
# (each passes test_gpu_mla before it is timed).
. tests/gpu_env.sh
R=/tmp/r; mkdir -p $R
make -s -j16 build/test_gpu_mla build/bench build/test_combine > $R/build.log 2>&1 || tail -30 $R/build.log
timeout 120 build/test_combine > $R/combine.log 2>&1; echo "combine rc $? $(tail -1 $R/combine.log)"
for v in ${VARIANTS:-J P8 K8 P10 K12 P12}; do
  export DCPATTN_HOME=$PWD/var/$v DCPATTN_CACHE_DIR=/tmp/dc-$v
  timeout 120 build/test_gpu_mla > $R/test-$v.log 2>&1; rc=$?; echo "$v test rc $rc $(tail -1 $R/test-$v.log)"
  if [ $rc = 0 ]; then
    timeout 90 build/bench --only M1,M2 --no-peers > $R/bench-$v.log 2>&1
    grep -E "ceiling:|us \(min|^M[12]/" $R/bench-$v.log | sed "s/^/$v /"
  fi
  (cd /tmp && tar czf $OUT/all.tgz r)
done
