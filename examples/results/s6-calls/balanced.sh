#!/bin/bash
# Session 6, calls 4-: the MLA balanced schedule (working tree): test_gpu_mla (balanced cases
# included), then M1/M2 with it (default) and without it (DCPATTN_BALANCE=0), alternating
# twice; then, with FULL=1, make -j16 test.
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
make -s -j16 build/test_gpu_mla build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
export DCPATTN_CACHE_DIR=/tmp/dc-bal
step test-mla 150 build/test_gpu_mla; ok=$?; tail -1 $R/test-mla.log; grep -m8 FAIL $R/test-mla.log
if [ $ok = 0 ]; then
  for i in 1 2; do for v in bal off; do
    if [ $v = off ]; then e=0; else e=; fi
    step bench-$v-$i 60 env ${e:+DCPATTN_BALANCE=$e} build/bench --only M1,M2 --no-peers
    grep -E "^M[12]/" $R/bench-$v-$i.log | sed "s/^/$v$i /"
  done; done
fi
if [ -n "${FULL:-}" ]; then step test 220 env DCPATTN_CACHE_DIR=/tmp/dcpattn-cache make -j16 test; tail -14 $R/test.log; fi
snap
