#!/bin/bash
# Session 7, call 1: test_gpu_mla on HEAD (619c390's host change), M1/M2 with the balanced
# schedule (--splits -1) against the default plan alternating, then ncu of M1 and of G1 q4/q8.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/bench build/test_gpu_mla > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc
timeout 120 build/test_gpu_mla > $R/test-mla.log 2>&1; echo "test_gpu_mla exit $?"; tail -1 $R/test-mla.log; grep -m5 FAIL $R/test-mla.log
for s in -1 0 -1 0; do
  timeout 40 build/bench --only M1,M2 --no-peers --splits $s > $R/b$s.log 2>&1
  grep -E "^M[12]/q[0-9] +PASS" $R/b$s.log | sed "s/^/splits=$s /"
done
snap
nc() { # name, bench args, kernel regex
  timeout 150 ncu --kernel-name regex:$3 --launch-skip 4 --launch-count 1 --set full --import-source yes -o $R/$1 build/bench $2 --no-peers --iters 20 > $R/$1-ncu.log 2>&1; echo "ncu $1 rc $?"
  ncu -i $R/$1.ncu-rep --page source --csv --print-source sass > $R/$1-sass.csv 2>&1
  ncu -i $R/$1.ncu-rep --page details > $R/$1-details.txt 2>&1
  ncu -i $R/$1.ncu-rep --page raw --csv > $R/$1-raw.csv 2>&1
  rm -f $R/$1.ncu-rep; snap
}
nc m1 "--only M1" mla
nc g8 "--only G1 --q 8" gqa
nc g4 "--only G1 --q 4" gqa
ls -la $R
