#!/bin/bash
# Session 5, call 12: racecheck of main's previous MLA kernel (var/J = bf68df5's templates,
# 384 threads, cp.async producer, bar.arrive hand-offs, clean under racecheck in session 4)
# with this session's test binary and tool: does the tool report the same kind of hazards?
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
make -s -j16 build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
DCPATTN_HOME=$PWD/var/J DCPATTN_CACHE_DIR=/tmp/dc-J timeout 50 compute-sanitizer --tool racecheck build/test_gpu_mla > $R/race-J.log 2>&1; echo "J racecheck rc $?"; grep -E "passed|RACECHECK SUMMARY" $R/race-J.log | tail -2
tar czf $OUT/all.tgz -C /tmp r
