#!/bin/bash
# Session 5, calls 5 and 7: ncu of M1 on the MLA kernel of the working tree: where the warps wait.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/bench > $R/build.log 2>&1 || tail -30 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc-new
timeout 150 ncu --kernel-name regex:mla --launch-skip 3 --launch-count 1 --set full --import-source yes -o $R/t build/bench --only M1 --no-peers --iters 20 > $R/ncu.log 2>&1; echo "ncu rc $?"
ncu -i $R/t.ncu-rep --page source --csv --print-source sass > $R/t-sass.csv 2>&1
ncu -i $R/t.ncu-rep --page raw --csv > $R/t-raw.csv 2>&1
ncu -i $R/t.ncu-rep --page details > $R/t-details.txt 2>&1
rm -f $R/t.ncu-rep; snap; ls -la $R
