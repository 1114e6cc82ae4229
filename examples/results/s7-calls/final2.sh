#!/bin/bash
# Session 7, last call: first M1/M2 of HEAD's MLA kernel (N, the lookups moved) against the one
# before it (var/C = c075af6) alternating, then the final steps of final.sh on HEAD.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
echo "tree of ${COMMIT:-?}" | tee $R/commit.txt
make -s -j16 build/bench > $R/build-bench.log 2>&1 || tail -20 $R/build-bench.log
sel() { if [ "$1" = N ]; then echo DCPATTN_CACHE_DIR=/tmp/dcpattn-cache; else echo DCPATTN_HOME=$PWD/var/$1 DCPATTN_CACHE_DIR=/tmp/dc-$1; fi; }
for v in C N C N; do
  env $(sel $v) timeout 60 build/bench --only M1,M2 --no-peers > $R/ab-$v.log 2>&1
  grep -E "^M[12]/q[0-9] +PASS +m" $R/ab-$v.log | sed "s/^/$v /"
done
snap
export DCPATTN_CACHE_DIR=/tmp/dcpattn-cache
step test 240 make -j16 test; tail -16 $R/test.log
step bench 200 build/bench --json $R/bench.json --peers-budget 40; grep -E "ceiling|^(G|M|R)[123B]*/?[a-z0-9]* +(PASS|FAIL)|run\(\)|host:|graph|empty" $R/bench.log | head -40
step demo 40 make demo; tail -3 $R/demo.log
for tool in memcheck synccheck racecheck; do
  step san-$tool 100 env DCPATTN_TEST_QUICK=1 compute-sanitizer --tool $tool --error-exitcode 9 build/test_gpu_mla; grep -E "passed|ERROR SUMMARY|RACECHECK SUMMARY" $R/san-$tool.log | tail -2
done
step multi 60 env OUT=$R RUN_SECONDS=30 sh tests/gpu_multi.sh; tail -2 $R/multi-summary.log
snap
