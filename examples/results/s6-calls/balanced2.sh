#!/bin/bash
# Session 6, call 5: the balanced schedule as its own kernel (NAME_balanced, asked for with
# num_splits = DCPATTN_SPLITS_BALANCED) and the per-sequence kernel back to straight-line code:
# test_gpu_mla; M1/M2 of the working tree against var/M (HEAD's kernel), alternating twice;
# then M3 (skewed batch: heuristic split, then balanced).
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
step test-mla 150 env DCPATTN_CACHE_DIR=/tmp/dc-new build/test_gpu_mla; ok=$?; tail -1 $R/test-mla.log; grep -m8 FAIL $R/test-mla.log
sel() { if [ $1 = new ]; then echo "DCPATTN_CACHE_DIR=/tmp/dc-new"; else echo "DCPATTN_HOME=$PWD/var/$1 DCPATTN_CACHE_DIR=/tmp/dc-$1"; fi; }
for i in 1 2; do for v in new M; do
  step bench-$v-$i 60 env $(sel $v) build/bench --only M1,M2 --no-peers
  grep -E "^M[12]/" $R/bench-$v-$i.log | grep -v "vs CPU" | sed "s/^/$v$i /"
done; done
if [ $ok = 0 ]; then
  step bench-m3 120 env $(sel new) build/bench --only M3 --no-peers --iters 20
  grep -E "^M3|skewed" $R/bench-m3.log
fi
snap
