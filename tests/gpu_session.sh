#!/bin/sh
# gpu_session.sh [STEP...] — one call on the GPU machine: Lua from the carried .deb/ folder
# (that machine has no package registry), then the build and the given make targets, with
# logs under $OUT. Steps default to "test demo".
set -u
OUT=${OUT:-/tmp/dcpattn-out}
mkdir -p "$OUT"
. tests/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
steps=${*:-test demo}
rc=0
for s in $steps; do
    echo "=== make $s"
    make -j8 "$s" > "$OUT/$s.log" 2>&1 || rc=1
    tail -n 40 "$OUT/$s.log"
done
exit $rc
