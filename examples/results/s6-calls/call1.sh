#!/bin/bash
# Session 6, call 1: branch mla-warp-lazy (var/W: per-warp lazy max) against main's MLA kernel
# (working tree): test_gpu_mla on both, then M1/M2 alternating main, W, main, W; racecheck of
# W and of bf68df5's kernel (var/J, clean under racecheck in session 4) with this binary; then
# make -j16 test on main (first GPU run of the 64-byte aligned plans).
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
sel() { if [ $1 = main ]; then echo "DCPATTN_CACHE_DIR=/tmp/dc-main"; else echo "DCPATTN_HOME=$PWD/var/$1 DCPATTN_CACHE_DIR=/tmp/dc-$1"; fi; }
for v in main W; do step test-$v 60 env $(sel $v) build/test_gpu_mla; tail -1 $R/test-$v.log; done
for i in 1 2; do for v in main W; do
  step bench-$v-$i 60 env $(sel $v) build/bench --only M1,M2 --no-peers
  grep -E "^M[12]/" $R/bench-$v-$i.log | sed "s/^/$v$i /"
done; done
for v in W J; do
  step race-$v 60 env $(sel $v) compute-sanitizer --tool racecheck build/test_gpu_mla; grep -E "passed|RACECHECK SUMMARY" $R/race-$v.log | tail -2
done
step test 200 env DCPATTN_CACHE_DIR=/tmp/dcpattn-cache make -j16 test; tail -12 $R/test.log
snap
