#!/bin/bash
# Session 7: ncu of M1 on the working tree's MLA kernel (where the warps wait now).
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc-N
timeout 150 ncu --kernel-name regex:mla --launch-skip 4 --launch-count 1 --set full --import-source yes -o $R/m1 build/bench --only M1 --no-peers --iters 20 > $R/m1-ncu.log 2>&1; echo "ncu rc $?"
ncu -i $R/m1.ncu-rep --page source --csv --print-source sass > $R/m1-sass.csv 2>&1
ncu -i $R/m1.ncu-rep --page details > $R/m1-details.txt 2>&1
ncu -i $R/m1.ncu-rep --page raw --csv > $R/m1-raw.csv 2>&1
rm -f $R/m1.ncu-rep; snap
