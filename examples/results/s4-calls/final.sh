#!/bin/bash
# final call of session 4: everything at HEAD (working tree == HEAD)
. tests/gpu_env.sh
export DCPATTN_CACHE_DIR=/tmp/dcpattn-cache
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; }
step test 240 make -j16 test; tail -14 $R/test.log
make -s build/bench > $R/build-bench.log 2>&1
step bench 200 build/bench --json $R/bench.json --peers-budget 60; grep -E "^(G|M|R)[12]/?[a-z0-9]* +(PASS|FAIL)|ceilings|host|run\(\)|graph|empty" $R/bench.log | head -40
step demo 60 make demo; tail -6 $R/demo.log
for tool in memcheck racecheck synccheck; do
  step san-$tool 60 compute-sanitizer --tool $tool --error-exitcode 9 build/test_gpu_mla; grep -E "passed|ERROR SUMMARY|RACECHECK SUMMARY" $R/san-$tool.log | tail -2
done
step multi 150 env OUT=$R RUN_SECONDS=40 sh tests/gpu_multi.sh; tail -4 $R/multi-summary.log; grep -c FAILED $R/multi-summary.log
snap; ls -la $OUT
