#!/bin/sh
# wgmma_serial.sh — every default variant with a wgmma path compiles for sm_90a (also as a
# timeline build) without ptxas serializing its wgmmas ("wgmma.mma_async instructions are
# serialized", C7510-C7520: a path that may read or write an accumulator while a wgmma runs, a
# warpgroup-divergent wgmma, a function call). That costs a kernel a large share of its speed
# and changes none of its results, so only this check sees it (on the H200 a serialized MLA
# kernel ran at 379 TFLOP/s, against 482 once straight-line). Needs lua5.4 and nvcc; prints
# each variant that fails, exits 1 on any.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${WGMMA_SERIAL_DIR:-${TMPDIR:-/tmp}/dcpattn-wgmma-serial.$$}
NVCC=${NVCC:-nvcc}
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT
lua5.4 "$ROOT/gen/dcpattn-gen" --all -o "$OUT" || exit 1
# two nvcc per variant, the second with DCPATTN_TIMELINE (templates/timeline.cuh: its marks must
# not serialize the wgmmas either), as many at once as the machine has cores (JOBS); each leaves
# its verdict in NAME[+timeline].result
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
export ROOT OUT NVCC
for f in "$OUT"/mla_*.cu "$OUT"/gqa_*_m64.cu "$OUT"/sparse_*_sm90.cu; do  # the kernels with a wgmma path
    [ -f "$f" ] || continue
    printf '%s\n' "$f"
    printf '%s timeline\n' "$f"
done | xargs -P "$JOBS" -L 1 sh -c '
    f=$1 name=$(basename "$1" .cu) def=
    if [ "${2:-}" = timeline ]; then name=$name+timeline def=-DDCPATTN_TIMELINE; fi
    log=$("$NVCC" -arch=sm_90a -cubin -std=c++17 $def -I"$ROOT/templates" -I"$ROOT/include" -Xptxas -v \
          -o "$OUT/$name.cubin" "$f" 2>&1)
    if [ $? -ne 0 ]; then
        { echo "FAIL: $name: nvcc failed"; echo "$log" | tail -5; } > "$OUT/$name.result"
    elif echo "$log" | grep -q "instructions are serialized"; then
        echo "FAIL: $name: $(echo "$log" | grep "instructions are serialized" | head -1 | sed "s/.*(C/(C/")" \
            > "$OUT/$name.result"
    else
        echo PASS > "$OUT/$name.result"
    fi' sh
pass=0 fail=0
for r in "$OUT"/*.result; do
    [ -f "$r" ] || continue
    if [ "$(cat "$r")" = PASS ]; then
        pass=$((pass + 1))
    else
        cat "$r"
        fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
