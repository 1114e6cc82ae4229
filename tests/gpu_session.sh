#!/bin/sh
# gpu_session.sh — everything one call on the GPU machine runs, in priority order, each step
# bounded, logs under $OUT (what is there comes back even if the call runs out of time):
# make test, make demo, the benchmark, compute-sanitizer over the quick GPU subsets.
OUT=${OUT:-/tmp/dcpattn-out}
mkdir -p "$OUT"
. tests/gpu_env.sh
export DCPATTN_CACHE_DIR=${DCPATTN_CACHE_DIR:-/tmp/dcpattn-cache}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
step() { # name seconds command...
    name=$1; secs=$2; shift 2
    t0=$(date +%s)
    timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log"
}
step test 300 make -j16 test
TAIL=12 step demo 60 make demo
make -s build/bench > "$OUT/build-bench.log" 2>&1
TAIL=40 step bench 240 build/bench --json "$OUT/bench.json" --peers-budget 60
export DCPATTN_TEST_QUICK=1
# priority order; whatever the call's time limit cuts off is simply missing from the log
for run in "memcheck test_gpu_attn" "racecheck test_gpu_attn" "memcheck test_gpu_mla" \
           "racecheck test_gpu_mla" "initcheck test_gpu_attn" "synccheck test_gpu_attn" "memcheck test_gpu"; do
    set -- $run
    echo "--- $1 $2" >> "$OUT/sanitizer.log"
    timeout 50 compute-sanitizer --tool "$1" --error-exitcode 9 "build/$2" 2>&1 | tail -n 4 >> "$OUT/sanitizer.log"
done
echo "=== sanitizer"; cat "$OUT/sanitizer.log"
