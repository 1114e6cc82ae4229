# lib.sh — what session 7's call scripts share (sourced from the repository root on the GPU
# machine): Lua, a fresh log folder /tmp/r packed into $OUT/all.tgz after every step.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
# step NAME SECONDS COMMAND...: bounded, logged to $R/NAME.log, exit status and time printed
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
# sel V: the environment of variant V: N = the working tree, else the copy var/V
sel() { if [ "$1" = N ]; then echo DCPATTN_CACHE_DIR=${NCACHE:-/tmp/dc-N}; else echo DCPATTN_HOME=$PWD/var/$1 DCPATTN_CACHE_DIR=/tmp/dc-$1; fi; }
# ab CASES PATTERN V...: the benchmark's CASES for each variant in turn, its PASS lines
ab() { cases=$1; pat=$2; shift 2; for v in "$@"; do
  env $(sel $v) timeout 60 build/bench --only $cases --no-peers > $R/b-$v.log 2>&1
  grep -E "$pat" $R/b-$v.log | sed "s/^/$v /"; done; }
# profile NAME "BENCH ARGS" KERNEL_REGEX: ncu --set full of one launch, exported as text
profile() {
  timeout 150 ncu --kernel-name regex:$3 --launch-skip 4 --launch-count 1 --set full --import-source yes -o $R/$1 build/bench $2 --no-peers --iters 20 > $R/$1-ncu.log 2>&1; echo "ncu $1 rc $?"
  ncu -i $R/$1.ncu-rep --page source --csv --print-source sass > $R/$1-sass.csv 2>&1
  ncu -i $R/$1.ncu-rep --page details > $R/$1-details.txt 2>&1
  ncu -i $R/$1.ncu-rep --page raw --csv > $R/$1-raw.csv 2>&1
  rm -f $R/$1.ncu-rep; snap
}
# final_steps: make test, the benchmark with peers, the demo, the MLA suite under
# compute-sanitizer, tests/gpu_multi.sh at the GPUs present
final_steps() {
  export DCPATTN_CACHE_DIR=/tmp/dcpattn-cache
  step test 240 make -j16 test; tail -16 $R/test.log
  make -s build/bench > $R/build-bench.log 2>&1
  step bench 200 build/bench --json $R/bench.json --peers-budget ${PEERS:-45}; grep -E "ceiling|^(G|M|R)[123B]*/?[a-z0-9]* +(PASS|FAIL)|run\(\)|host:|graph|empty" $R/bench.log | head -40
  step demo 40 make demo; tail -3 $R/demo.log
  for tool in memcheck synccheck racecheck; do
    step san-$tool 100 env DCPATTN_TEST_QUICK=1 compute-sanitizer --tool $tool --error-exitcode 9 build/test_gpu_mla; grep -E "passed|ERROR SUMMARY|RACECHECK SUMMARY" $R/san-$tool.log | tail -2
  done
  step multi 60 env OUT=$R RUN_SECONDS=30 sh tests/gpu_multi.sh; tail -2 $R/multi-summary.log
  snap
}
