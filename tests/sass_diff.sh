#!/bin/sh
# sass_diff.sh [REV] — proves a kernel refactor is a no-op: renders and compiles every variant of
# the default set with NVRTC (build/aot_build, as the library does) once from REV's gen/,
# templates/ and include/ and once from the working tree, disassembles both (cuobjdump -sass,
# encodings and addresses stripped) and lists the variants whose SASS differs.
# Needs build/aot_build (make aot) and cuobjdump ($CUOBJDUMP, $CUDA/bin or PATH); no GPU.
set -e
REV=${1:-HEAD}
CUDA=${CUDA:-/usr/local/cuda}
CUO=${CUOBJDUMP:-$(command -v cuobjdump || echo "$CUDA/bin/cuobjdump")}
[ -x "$CUO" ] || { echo "sass_diff: no cuobjdump (set CUOBJDUMP)"; exit 2; }
[ -x build/aot_build ] || { echo "sass_diff: build/aot_build missing (make aot)"; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/rev" "$T/tree"
git archive "$REV" gen templates include | tar -x -C "$T/rev"
tar -c gen templates include | tar -x -C "$T/tree"
NAMES=$(./gen/dcpattn-gen --list)
for side in rev tree; do
    DCPATTN_HOME="$T/$side" ./build/aot_build --arch sm_90a --out "$T/aot-$side" -j 2 $NAMES > "$T/$side.log" 2>&1 ||
        { echo "sass_diff: compiling the $side side failed"; tail -n 5 "$T/$side.log"; exit 1; }
    mkdir -p "$T/sass-$side"
    for f in "$T/aot-$side"/*.cubin; do
        n=$(basename "$f" | cut -d. -f1)
        # a cache entry is a header followed by the ELF image
        python3 -c "import sys; d=open(sys.argv[1],'rb').read(); open(sys.argv[2],'wb').write(d[d.find(b'\x7fELF'):])" \
            "$f" "$T/x.cubin"
        "$CUO" -sass "$T/x.cubin" | grep -E '^\s+/\*[0-9a-f]{4}\*/' |
            sed 's|/\* 0x[0-9a-f]* \*/||; s|^\s*/\*[0-9a-f]*\*/||' > "$T/sass-$side/$n.sass"
    done
done
nd=0
for f in "$T/sass-rev"/*.sass; do
    cmp -s "$f" "$T/sass-tree/$(basename "$f")" || { echo "differs: $(basename "$f" .sass)"; nd=$((nd + 1)); }
done
echo "$(ls "$T/sass-rev" | wc -l) variants, $nd with different SASS ($REV vs the working tree)"
