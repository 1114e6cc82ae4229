#!/bin/sh
# run_tests.sh BUILD — runs every test program, sums their "N passed, N failed" lines and
# ends with the total in the same form. GPU programs say so themselves when no GPU is found
# (and test_gpu_big when the device cannot hold its 4.5 GiB pool: "skipped: ...").
build=${1:-build}
lua=${LUA:-lua5.4}
total_pass=0
total_fail=0
status=0
no_gpu=""
run() {
    name=$1
    shift
    out=$("$@" 2>&1)
    rc=$?
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 20
        echo "  $name: no summary line (exit $rc)"
        total_fail=$((total_fail + 1))
        status=1
        return
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
        printf '%s\n' "$out" | grep -vE '^[0-9]+ passed, [0-9]+ failed$' | tail -n 40
        status=1
        [ "$f" -eq 0 ] && f=1
    fi
    note=$(printf '%s\n' "$out" | grep -m1 -iE 'no gpu|^skipped' || true)
    printf '  %-24s %s%s\n' "$name" "$line" "${note:+  ($note)}"
    case "$note" in "no GPU found"*) no_gpu="$no_gpu $name" ;; esac  # (gpu_util.h, gpu_found)
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
}
echo "tests:"
run generator "$lua" tests/test_gen.lua
run header-c "$build/test_header_c"
run header-c++ "$build/test_header_cpp"
run cpu-reference "$build/test_cpu"
run schedule "$build/test_sched"
run validation "$build/test_validate"
run launch "$build/test_launch"
run timeline "$build/test_timeline"
run limits "$build/test_limits" "$build/cache-limits"
run sparse-cpu "$build/test_sparse_cpu"
run cache "$build/test_cache"
# (on a GPU machine the driver's threads are alive when the lock test forks its waiters)
run cache-tsan env TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}die_after_fork=0" "$build/test_cache_tsan"
if [ -x "$build/fuzz_host" ]; then
    mkdir -p "$build/fuzz-corpus"
    run fuzz-15s sh -c "'$build/fuzz_host' -max_total_time=15 '$build/fuzz-corpus' >'$build/fuzz.log' 2>&1 \
        && echo '1 passed, 0 failed' || { tail -n 30 '$build/fuzz.log'; echo '0 passed, 1 failed'; }"
fi
run install sh tests/test_install.sh "$build"
run wgmma-serial sh tests/wgmma_serial.sh
run combine "$build/test_combine"
run gpu-merge "$build/test_gpu"
run gpu-gqa "$build/test_gpu_attn"
run gpu-mla "$build/test_gpu_mla"
run gpu-sparse "$build/test_gpu_sparse"
run gpu-threads "$build/test_gpu_threads"
run gpu-big-pool "$build/test_gpu_big"
run gpu-sm80-ptx "$build/test_gpu_sm80"
run gpu-wgmma "$build/test_gpu_wgmma"
run python "${PYTHON:-python3}" python/tests/run.py "$build"
[ -n "$no_gpu" ] && echo "no GPU, so their GPU parts did not run:$no_gpu"
echo "$total_pass passed, $total_fail failed"
exit $status
