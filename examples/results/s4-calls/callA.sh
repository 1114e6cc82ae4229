#!/bin/bash
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -30 $R/build.log
for v in ${VARIANTS:-main v4 v4q}; do
  export DCPATTN_HOME=$PWD/var/$v DCPATTN_CACHE_DIR=/tmp/dc-$v
  timeout 120 build/test_gpu_mla > $R/test-$v.log 2>&1; rc=$?; echo "$v test rc $rc $(tail -1 $R/test-$v.log)"
  [ $rc = 0 ] || { grep -i "fail\|error" $R/test-$v.log | head -5; continue; }
  timeout 90 build/bench --only M1,M2 --no-peers > $R/bench-$v.log 2>&1
  grep -E "TFLOP/s =|GB/s =" $R/bench-$v.log | sed "s/^/$v /"
  snap
done
export DCPATTN_HOME=$PWD/var/v4 DCPATTN_CACHE_DIR=/tmp/dc-v4
timeout 150 ncu --kernel-name regex:mla --launch-skip 3 --launch-count 1 --set full --import-source yes -o $R/v4 build/bench --only M1 --no-peers --iters 20 > $R/ncu-v4.log 2>&1; echo "ncu v4 rc $?"
ncu -i $R/v4.ncu-rep --page source --csv --print-source sass > $R/v4-sass.csv 2>&1
ncu -i $R/v4.ncu-rep --page raw --csv > $R/v4-raw.csv 2>&1
rm -f $R/v4.ncu-rep; snap; ls -la $OUT
