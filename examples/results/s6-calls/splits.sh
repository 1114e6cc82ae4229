#!/bin/bash
# Session 6, call 8: G1 and G2 with forced split counts (bench --splits N), to see whether
# the split heuristic leaves the q_len 4/8 rows (92.9-93.5 % in the final call) short.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc
for run in "G1 0" "G1 2" "G1 3" "G2 0" "G2 8" "G1 0" "G2 0"; do
  set -- $run
  timeout 60 build/bench --only $1 --no-peers --splits $2 > $R/b-$1-$2.log 2>&1
  grep -E "^$1/q[48] " $R/b-$1-$2.log | sed "s/^/splits=$2 /"
  snap
done
