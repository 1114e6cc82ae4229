#!/bin/sh
# gpu_all.sh [sanitize-full] [LOGDIR] — everything a GPU host runs, in priority order, each
# step bounded by a timeout: make test, make demo, the benchmark, its timeline build on the
# MLA cases and G1F, DCP over NCCL
# (tests/gpu_multi.sh), compute-sanitizer over the quick GPU subsets, then compute-sanitizer
# over the full GPU suites (a step of at most SANITIZE_FULL_SECONDS, 200 by default).
# `tests/gpu_all.sh sanitize-full` runs only that last step (building what it needs first).
# Logs go to LOGDIR (default $OUT, else /tmp/dcpattn-out), one file per step, written as the
# step runs, so a run stopped early keeps the logs of the steps before it.
MODE=
if [ "${1:-}" = sanitize-full ]; then MODE=sanitize-full; shift; fi
OUT=${1:-${OUT:-/tmp/dcpattn-out}}
export OUT # tests/gpu_multi.sh logs under the same folder
mkdir -p "$OUT"
. tests/gpu_env.sh
export DCPATTN_CACHE_DIR=${DCPATTN_CACHE_DIR:-/tmp/dcpattn-cache}
step() { # name seconds command...
    name=$1; secs=$2; shift 2
    t0=$(date +%s)
    timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"
    tail -n "${TAIL:-25}" "$OUT/$name.log"
}
# The full (not DCPATTN_TEST_QUICK) GPU suites under compute-sanitizer, in priority order:
# memcheck of every GPU program first, then racecheck, synccheck and initcheck of the merge,
# GQA and MLA suites. Each run is bounded by what is left of the step's deadline (at most
# 60 s a run), so the step never takes much more than SANITIZE_FULL_SECONDS; a run cut off
# says "timed out", one that did not fit says "not run". Full logs: $OUT/san-TOOL-PROGRAM.log.
sanitize_full() {
    deadline=$(( $(date +%s) + ${SANITIZE_FULL_SECONDS:-200} ))
    log="$OUT/sanitizer-full.log"
    : > "$log"
    for run in "memcheck test_gpu_attn" "memcheck test_gpu_mla" "memcheck test_gpu" "memcheck test_gpu_threads" \
               "memcheck test_gpu_big" "memcheck test_gpu_sparse" "racecheck test_gpu_attn" "racecheck test_gpu_mla" \
               "racecheck test_gpu" "racecheck test_gpu_sparse" \
               "synccheck test_gpu_attn" "synccheck test_gpu_mla" "synccheck test_gpu" \
               "initcheck test_gpu_attn" "initcheck test_gpu_mla" "initcheck test_gpu"; do
        set -- $run
        left=$(( deadline - $(date +%s) ))
        if [ "$left" -lt 10 ]; then
            echo "--- $1 $2: not run (the step's time is spent)" >> "$log"
            continue
        fi
        cap=60
        [ "$left" -lt "$cap" ] && cap=$left
        t0=$(date +%s)
        env -u DCPATTN_TEST_QUICK timeout -k 5 "$cap" compute-sanitizer --tool "$1" --error-exitcode 9 "build/$2" \
            > "$OUT/san-$1-$2.log" 2>&1
        rc=$?
        case $rc in
            0) what="clean" ;;
            9) what="SANITIZER ERRORS" ;;
            124|137) what="timed out after $cap s" ;;
            *) what="failed" ;;
        esac
        echo "--- $1 $2: exit $rc ($what) in $(( $(date +%s) - t0 )) s" >> "$log"
        grep -E 'passed, [0-9]+ failed$|ERROR SUMMARY|^skipped|no GPU' "$OUT/san-$1-$2.log" | tail -n 3 >> "$log"
    done
    echo "=== sanitizer, full suites"; cat "$log"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if [ "$MODE" = sanitize-full ]; then
    make -s aot build/test_gpu build/test_gpu_attn build/test_gpu_mla build/test_gpu_threads build/test_gpu_big build/test_gpu_sparse \
        > "$OUT/build-sanitize.log" 2>&1 || { tail -n 30 "$OUT/build-sanitize.log"; exit 1; }
    sanitize_full
    exit 0
fi
step test 300 make -j16 test
TAIL=12 step demo 60 make demo
make -s build/bench > "$OUT/build-bench.log" 2>&1
TAIL=40 step bench 240 build/bench --json "$OUT/bench.json" --peers-budget 60
# where the kernels' cycles go (docs/performance.md, "Timeline"): the benchmark's timeline build,
# its kernels JIT-compiled with the marks
make -s build/bench_timeline > "$OUT/build-bench-timeline.log" 2>&1
TAIL=60 step timeline 240 build/bench_timeline --no-peers --only M1,M2,M1F,M2F,S3,S3M,SP1,SP2,G1F --json "$OUT/bench-timeline.json"
python3 examples/bench_plot.py "$OUT/bench-timeline.json" "$OUT" > "$OUT/plot-timeline.log" 2>&1
# DCP over NCCL (examples/dcp_nccl) for every world size this host has GPUs for (W = 1 on one)
RUN_SECONDS=60 TAIL=30 step multi 300 sh tests/gpu_multi.sh
# the quick subsets, in priority order: a run stopped early by an outer time limit keeps the
# lines of the runs before it. A third word is a kernel-name filter: only the kernels whose
# name holds it are instrumented (the others run at full speed), so that the narrow MLA tiles
# (variants ..._m16 and ..._m32) get a whole quick pass within the cap
for run in "memcheck test_gpu_attn" "racecheck test_gpu_attn" "memcheck test_gpu_mla _m16" \
           "memcheck test_gpu_mla _m32" "memcheck test_gpu_sparse _m16" "memcheck test_gpu_mla" \
           "racecheck test_gpu_mla" "initcheck test_gpu_attn" "synccheck test_gpu_attn" "memcheck test_gpu"; do
    set -- $run
    cap=50
    [ "$2" = test_gpu_mla ] && cap=120  # (its quick pass has the FP8 cases, whose CPU reference is slower)
    [ "$2" = test_gpu_sparse ] && cap=100
    echo "--- $1 $2${3:+ (kernels named *$3*)}" >> "$OUT/sanitizer.log"
    DCPATTN_TEST_QUICK=1 timeout "$cap" compute-sanitizer --tool "$1" ${3:+--kernel-name kns=$3} --error-exitcode 9 \
        "build/$2" 2>&1 | tail -n 4 >> "$OUT/sanitizer.log"
done
echo "=== sanitizer"; cat "$OUT/sanitizer.log"
sanitize_full
