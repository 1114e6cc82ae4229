#!/bin/bash
# Session 7, call 2: the GQA kernels' instruction diet (working tree) against HEAD's kernels
# (var/H): test_gpu_attn on the new ones, then G1/G2 alternating, then ncu of G1 q8 (new).
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
make -s -j16 build/bench build/test_gpu_attn > $R/build.log 2>&1 || tail -20 $R/build.log
sel() { if [ "$1" = N ]; then echo DCPATTN_CACHE_DIR=/tmp/dc-N; else echo DCPATTN_HOME=$PWD/var/$1 DCPATTN_CACHE_DIR=/tmp/dc-$1; fi; }
env $(sel N) timeout 200 build/test_gpu_attn > $R/test-attn.log 2>&1; echo "test_gpu_attn exit $?"; tail -1 $R/test-attn.log; grep -m5 FAIL $R/test-attn.log
for v in ${VARIANTS:-H N H N}; do
  env $(sel $v) timeout 60 build/bench --only ${CASES:-G1,G2} --no-peers > $R/b-$v.log 2>&1
  grep -E "^G[12]/q[0-9] +PASS +g|^M[12]/q[0-9] +PASS +m|ceiling" $R/b-$v.log | sed "s/^/$v /"
done
snap
env $(sel N) timeout 150 ncu --kernel-name regex:gqa --launch-skip 4 --launch-count 1 --set full -o $R/g8 build/bench --only G1 --q 8 --no-peers --iters 20 > $R/g8-ncu.log 2>&1; echo "ncu rc $?"
ncu -i $R/g8.ncu-rep --page details > $R/g8-details.txt 2>&1
ncu -i $R/g8.ncu-rep --page raw --csv > $R/g8-raw.csv 2>&1
rm -f $R/g8.ncu-rep; snap
