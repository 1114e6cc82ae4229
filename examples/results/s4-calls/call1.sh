#!/bin/bash
# call 1: host-change check, dcp_nccl at W=1, ncu of the MLA M1 kernel (main J) and the seesaw v2
. tests/gpu_env.sh
export DCPATTN_CACHE_DIR=/tmp/dc
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
t0=$(date +%s)
make -s -j16 aot build/test_combine build/test_gpu_attn build/test_gpu_mla build/bench build/dcp_nccl > $R/build.log 2>&1 || { tail -30 $R/build.log; }
echo "build $(( $(date +%s)-t0 )) s"
timeout 120 build/test_combine > $R/combine.log 2>&1; echo "combine rc $?"; tail -2 $R/combine.log
DCPATTN_TEST_QUICK=1 timeout 120 build/test_gpu_attn > $R/attn.log 2>&1; echo "attn rc $?"; tail -2 $R/attn.log
OUT=$R RUN_SECONDS=40 timeout 200 sh tests/gpu_multi.sh > $R/multi-out.log 2>&1; echo "multi rc $?"; tail -32 $R/multi-out.log
timeout 60 build/bench --only M1 --no-peers > $R/m1-main.log 2>&1; grep -E "M1|ceiling" $R/m1-main.log | tail -4
DCPATTN_HOME=$PWD/var/v2 DCPATTN_CACHE_DIR=/tmp/dcv2 timeout 60 build/bench --only M1 --no-peers > $R/m1-v2.log 2>&1; grep -E "M1|ceiling" $R/m1-v2.log | tail -4
timeout 150 ncu --kernel-name regex:mla --launch-skip 3 --launch-count 1 --set full --import-source yes -o $R/j build/bench --only M1 --no-peers --iters 20 > $R/ncu-j.log 2>&1; echo "ncu j rc $?"
DCPATTN_HOME=$PWD/var/v2 DCPATTN_CACHE_DIR=/tmp/dcv2 timeout 150 ncu --kernel-name regex:mla --launch-skip 3 --launch-count 1 --set full --import-source yes -o $R/v2 build/bench --only M1 --no-peers --iters 20 > $R/ncu-v2.log 2>&1; echo "ncu v2 rc $?"
for x in j v2; do
  ncu -i $R/$x.ncu-rep --page details > $R/$x-details.txt 2>&1
  ncu -i $R/$x.ncu-rep --page source --csv --print-source sass > $R/$x-sass.csv 2>&1
  ncu -i $R/$x.ncu-rep --page raw --csv > $R/$x-raw.csv 2>&1
done
grep -E "Duration|Throughput|Pipe|Issue Slots|Warp Cycles|Stall" $R/j-details.txt | head -40
cd $OUT && tar czf all.tgz r && rm -rf r && ls -la all.tgz
