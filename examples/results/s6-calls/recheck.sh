#!/bin/bash
# Session 6, last call, after host-only edits to dcpattn_attn_run (0ddbab1): the MLA and GQA
# GPU suites and M1/M2/M3 again on the final tree.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
make -s -j16 build/test_gpu_mla build/test_gpu_attn build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc
step test-mla 120 build/test_gpu_mla; tail -1 $R/test-mla.log
step test-gqa 120 build/test_gpu_attn; tail -1 $R/test-gqa.log
step bench 150 build/bench --only M1,M2,M3 --no-peers; grep -E "^M[123]B?/q[0-9] +PASS +m" $R/bench.log
snap
