#!/bin/sh
# gpu_session.sh [STEP...] — one call on the GPU machine: Lua from the carried .deb/ folder
# (that machine has no package registry), then the build and the given make targets, with
# logs under $OUT. Steps default to "test demo".
set -u
OUT=${OUT:-/tmp/dcpattn-out}
mkdir -p "$OUT"
if ! command -v lua5.4 >/dev/null 2>&1; then
    mkdir -p /tmp/dcpattn-lua
    for f in .deb/*.deb; do dpkg -x "$f" /tmp/dcpattn-lua; done
    L=/tmp/dcpattn-lua/usr
    export PATH="$L/bin:$PATH"
    export CPATH="$L/include/lua5.4:${CPATH:-}"
    export LIBRARY_PATH="$L/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}"
    export LD_LIBRARY_PATH="$L/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
steps=${*:-test demo}
rc=0
for s in $steps; do
    echo "=== make $s"
    make -j8 "$s" > "$OUT/$s.log" 2>&1 || rc=1
    tail -n 40 "$OUT/$s.log"
done
exit $rc
