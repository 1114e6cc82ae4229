#!/bin/bash
# Session 6, last call: M1/M2 planned with the balanced schedule (bench --splits -1 =
# DCPATTN_SPLITS_BALANCED) against the default plan, in one call (the balanced kernel as its
# own entry point was timed only on M3 before).
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
make -s -j16 build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc
for s in -1 0 -1 0; do
  timeout 40 build/bench --only M1,M2 --no-peers --splits $s > $R/b$s.log 2>&1
  grep -E "^M[12]/q[0-9] +PASS +m" $R/b$s.log | sed "s/^/splits=$s /"
done
tar czf $OUT/all.tgz -C /tmp r
