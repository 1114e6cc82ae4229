#!/bin/bash
# Session 5, final call. First the choice of the MLA kernel: the working tree (E: softmax on
# raw scores, exponent by one FFMA) against var/C9 (HEAD: call 9's kernel, 580.2 TFLOP/s):
# E is kept only if it passes test_gpu_mla and is faster on M1 in this run; else C9's
# mla.cuh replaces it here. Then everything on the chosen tree: make test, bench with peers,
# demo, the MLA suite under compute-sanitizer, tests/gpu_multi.sh at W = 1.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
m1() { grep -E "^M1/q2 +PASS" "$1" | awk '{print $8}'; }
DCPATTN_CACHE_DIR=/tmp/dc-E step testE 60 build/test_gpu_mla; okE=$?; tail -1 $R/testE.log
DCPATTN_CACHE_DIR=/tmp/dc-E step benchE 60 build/bench --only M1,M2 --no-peers
DCPATTN_HOME=$PWD/var/C9 DCPATTN_CACHE_DIR=/tmp/dc-C9 step benchC9 60 build/bench --only M1,M2 --no-peers
e=$(m1 $R/benchE.log); c=$(m1 $R/benchC9.log); echo "M1 TFLOP/s: E ${e:-none} C9 ${c:-none}"
if [ $okE = 0 ] && [ -n "$e" ] && [ -n "$c" ] && awk -v e="$e" -v c="$c" 'BEGIN{exit !(e > c)}'; then
  echo "CHOSEN: E" | tee $R/chosen.txt
else
  cp var/C9/templates/mla.cuh templates/mla.cuh; echo "CHOSEN: C9" | tee $R/chosen.txt
fi
export DCPATTN_CACHE_DIR=/tmp/dcpattn-cache
step test 200 make -j16 test; tail -20 $R/test.log
make -s build/bench > $R/build-bench.log 2>&1
step bench 150 build/bench --json $R/bench.json --peers-budget 50; grep -E "ceiling|^(G|M|R)[12]/?[a-z0-9]* +(PASS|FAIL)|run\(\)|graph|empty" $R/bench.log | head -40
step demo 40 make demo; tail -4 $R/demo.log
for tool in memcheck racecheck synccheck; do
  step san-$tool 45 compute-sanitizer --tool $tool --error-exitcode 9 build/test_gpu_mla; grep -E "passed|ERROR SUMMARY|RACECHECK SUMMARY" $R/san-$tool.log | tail -2
done
step multi 50 env OUT=$R RUN_SECONDS=30 sh tests/gpu_multi.sh; tail -3 $R/multi-summary.log; grep -c FAILED $R/multi-summary.log
snap
