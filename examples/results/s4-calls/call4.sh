#!/bin/bash
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc-main
timeout 120 compute-sanitizer --tool initcheck --error-exitcode 9 build/test_gpu_mla > $R/san-initcheck-mla.log 2>&1; echo "initcheck rc $?"; grep -E "passed|ERROR SUMMARY" $R/san-initcheck-mla.log | tail -2; snap
export DCPATTN_HOME=$PWD/var/v3 DCPATTN_CACHE_DIR=/tmp/dc-v3
timeout 150 ncu --kernel-name regex:mla --launch-skip 3 --launch-count 1 --set full --import-source yes -o $R/v3 build/bench --only M1 --no-peers --iters 20 > $R/ncu-v3.log 2>&1; echo "ncu v3 rc $?"
ncu -i $R/v3.ncu-rep --page source --csv --print-source sass > $R/v3-sass.csv 2>&1
ncu -i $R/v3.ncu-rep --page raw --csv > $R/v3-raw.csv 2>&1
rm -f $R/v3.ncu-rep; snap; ls -la $OUT
