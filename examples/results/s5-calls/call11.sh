#!/bin/bash
# Session 5, call 11: racecheck reported 170 hazards on xm/flag (and on the epilogue's two
# __syncthreads-separated accesses) for the final kernel, with 270/0 results. Diagnostic: the
# same kernel with every bar.arrive made a bar.sync (var/S) under racecheck, and the kernel
# itself again under racecheck and initcheck.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
DCPATTN_HOME=$PWD/var/S DCPATTN_CACHE_DIR=/tmp/dc-S timeout 60 compute-sanitizer --tool racecheck build/test_gpu_mla > $R/race-S.log 2>&1; echo "S racecheck rc $?"; grep -E "passed|RACECHECK SUMMARY" $R/race-S.log | tail -2; snap
DCPATTN_CACHE_DIR=/tmp/dc-E timeout 60 compute-sanitizer --tool racecheck --racecheck-report all build/test_gpu_mla > $R/race-E.log 2>&1; echo "E racecheck rc $?"; grep -E "passed|RACECHECK SUMMARY" $R/race-E.log | tail -2; snap
DCPATTN_CACHE_DIR=/tmp/dc-E timeout 60 compute-sanitizer --tool initcheck build/test_gpu_mla > $R/init-E.log 2>&1; echo "E initcheck rc $?"; grep -E "passed|ERROR SUMMARY" $R/init-E.log | tail -2; snap
