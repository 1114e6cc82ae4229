#!/bin/bash
# Session 5, calls 2, 3, 4, 6, 8, 9: test_gpu_mla, then M1 and M2, on the MLA kernel of the working tree
# (call 2 also timed main's previous kernel, VARIANTS=J with var/J carried).
. tests/gpu_env.sh
R=/tmp/r; mkdir -p $R
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -30 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc-new
timeout 100 build/test_gpu_mla > $R/test-new.log 2>&1; rc=$?; echo "new test rc $rc $(tail -1 $R/test-new.log)"
grep -m5 FAIL $R/test-new.log
if [ $rc = 0 ]; then
  timeout 90 build/bench --only M1,M2 --no-peers > $R/bench-new.log 2>&1
  grep -E "ceiling:|us \(min|^M[12]/" $R/bench-new.log | sed "s/^/new /"
fi
(cd /tmp && tar czf $OUT/all.tgz r)
for v in ${VARIANTS:-}; do
  export DCPATTN_HOME=$PWD/var/$v DCPATTN_CACHE_DIR=/tmp/dc-$v
  timeout 90 build/bench --only M1,M2 --no-peers > $R/bench-$v.log 2>&1
  grep -E "us \(min|^M[12]/" $R/bench-$v.log | sed "s/^/$v /"
done
(cd /tmp && tar czf $OUT/all.tgz r)
