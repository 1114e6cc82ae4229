#!/bin/bash
. tests/gpu_env.sh
make -s -j16 build/test_gpu_mla build/bench > /tmp/build.log 2>&1 || tail -30 /tmp/build.log
export DCPATTN_HOME=$PWD/var/v4 DCPATTN_CACHE_DIR=/tmp/dc-v4
timeout 45 build/test_gpu_mla > /tmp/t.log 2>&1; rc=$?; echo "v4 test rc $rc $(tail -1 /tmp/t.log)"; grep -i "FAIL" /tmp/t.log | head -3
[ $rc = 0 ] && timeout 45 build/bench --only M1,M2 --no-peers 2>&1 | grep -E "TFLOP/s =|GB/s =|ceilings"
