#!/bin/bash
# Session 7: ncu of M1 on the working tree's MLA kernel (where the warps wait now).
. examples/results/s7-calls/lib.sh
make -s -j16 build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc-N
profile m1 "--only M1" mla
