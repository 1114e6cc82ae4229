#!/bin/bash
# Session 6, calls 2-4 (kernel.sh): M1/M2 of MLA kernel variants, each validated against the
# CPU reference by the bench before timing, alternating twice. VARIANTS: names of var/NAME
# copies (R = the working tree); NCU=NAME: then ncu of M1 on that variant. Call 2: VARIANTS="M R
# RW" NCU=R (M: HEAD, R: rolled QK loop, RW: R + per-warp lazy max); call 3: VARIANTS="M R P4"
# (R: L2 prefetch of tile t0+3 mid-pair, P4: R + prefetch of t0+4).
. tests/gpu_env.sh
R=/tmp/r; rm -rf $R; mkdir -p $R
snap() { tar czf $OUT/all.tgz -C /tmp r; }
step() { name=$1; secs=$2; shift 2; t0=$(date +%s); timeout "$secs" "$@" > "$R/$name.log" 2>&1; rc=$?; echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"; snap; return $rc; }
make -s -j16 build/bench > $R/build.log 2>&1 || tail -20 $R/build.log
sel() { if [ $1 = R ]; then echo "DCPATTN_CACHE_DIR=/tmp/dc-R"; else echo "DCPATTN_HOME=$PWD/var/$1 DCPATTN_CACHE_DIR=/tmp/dc-$1"; fi; }
for i in 1 2; do for v in ${VARIANTS:-M R RW}; do
  step bench-$v-$i 60 env $(sel $v) build/bench --only M1,M2 --no-peers
  grep -E "^M[12]/" $R/bench-$v-$i.log | grep -v "vs CPU" | sed "s/^/$v$i /"
done; done
if [ -n "${NCU:-}" ]; then
  env $(sel $NCU) timeout 150 ncu --kernel-name regex:mla --launch-skip 3 --launch-count 1 --set full --import-source yes -o $R/t build/bench --only M1 --no-peers --iters 20 > $R/ncu.log 2>&1; echo "ncu rc $?"
  ncu -i $R/t.ncu-rep --page source --csv --print-source sass > $R/t-sass.csv 2>&1
  ncu -i $R/t.ncu-rep --page details > $R/t-details.txt 2>&1
  rm -f $R/t.ncu-rep
fi
snap
