#!/bin/bash
# Session 7, closing call (device time nearly spent): the GPU suites of every timed kernel
# (test_gpu_attn, test_gpu_mla) and the benchmark, in one command, on HEAD (the lookup move
# reverted: the MLA kernel is c075af6's again).
. examples/results/s7-calls/lib.sh
export DCPATTN_CACHE_DIR=/tmp/dcpattn-cache
make -s -j16 build/bench build/test_gpu_attn build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
step test-attn 60 build/test_gpu_attn; tail -1 $R/test-attn.log
step test-mla 90 build/test_gpu_mla; tail -1 $R/test-mla.log
step bench 120 build/bench --json $R/bench.json --peers-budget 25; grep -E "ceiling|^(G|M|R)[123B]*/?[a-z0-9]* +(PASS|FAIL)|host:" $R/bench.log | tail -22
