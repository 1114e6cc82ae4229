#!/bin/bash
# Session 6, last call: test_gpu_mla with every workspace filled with 0xff bytes before the run.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
make -s -j16 build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
DCPATTN_CACHE_DIR=/tmp/dc timeout 120 build/test_gpu_mla > $R/test-mla.log 2>&1; echo "test_gpu_mla exit $?"; tail -1 $R/test-mla.log; grep -m5 FAIL $R/test-mla.log
tar czf $OUT/all.tgz -C /tmp r
