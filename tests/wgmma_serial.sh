#!/bin/sh
# wgmma_serial.sh — every default variant with a wgmma path compiles for sm_90a without
# ptxas serializing its wgmmas ("wgmma.mma_async instructions are serialized", C7514-C7520:
# a path that may read or write an accumulator while a wgmma runs, or a warpgroup-divergent
# wgmma). That costs a kernel a large share of its speed and changes none of its results, so
# only this check sees it (on the H200 a serialized MLA kernel ran at 379 TFLOP/s, against 482
# once straight-line). Needs lua5.4 and nvcc; one line per variant, exits 1 on any serialized.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${WGMMA_SERIAL_DIR:-${TMPDIR:-/tmp}/dcpattn-wgmma-serial.$$}
NVCC=${NVCC:-nvcc}
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT
lua5.4 "$ROOT/gen/dcpattn-gen" --all -o "$OUT" || exit 1
pass=0 fail=0
for f in "$OUT"/mla_*.cu "$OUT"/gqa_*_m64.cu "$OUT"/sparse_*_sm90.cu; do  # the kernels with a wgmma path
    [ -f "$f" ] || continue
    name=$(basename "$f" .cu)
    log=$("$NVCC" -arch=sm_90a -cubin -std=c++17 -I"$ROOT/templates" -I"$ROOT/include" -Xptxas -v \
          -o "$OUT/$name.cubin" "$f" 2>&1)
    if [ $? -ne 0 ]; then
        echo "FAIL: $name: nvcc failed"; echo "$log" | tail -5; fail=$((fail + 1))
    elif echo "$log" | grep -q "instructions are serialized"; then
        echo "FAIL: $name: $(echo "$log" | grep "instructions are serialized" | head -1 | sed 's/.*(C/(C/')"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
