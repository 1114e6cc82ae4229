#!/bin/sh
# sass_diff.sh [REV [NAME...]] — proves a kernel refactor is a no-op: renders and compiles every
# variant of the default set (or the NAMEs, which both sides must know) with NVRTC
# (build/aot_build, as the library does) once from REV's gen/, templates/ and include/ and once
# from the working tree, disassembles both (cuobjdump -sass, encodings and addresses stripped)
# and lists the variants whose SASS differs.
# Needs build/aot_build (make aot) and cuobjdump ($CUOBJDUMP, $CUDA/bin or PATH); no GPU.
set -e
. "$(dirname "$0")/sass_lib.sh"
REV=${1:-HEAD}
[ $# -gt 0 ] && shift
sass_setup sass_diff
NAMES=${*:-$(./gen/dcpattn-gen --list)}
sass_compile sass_diff rev "$REV" $NAMES
sass_compile sass_diff tree "" $NAMES
for side in rev tree; do
    mkdir -p "$T/sass-$side"
    for f in "$T/elf-$side"/*.elf; do
        "$CUO" -sass "$f" | grep -E '^\s+/\*[0-9a-f]{4,}\*/' |
            sed 's|/\* 0x[0-9a-f]* \*/||; s|^\s*/\*[0-9a-f]*\*/||' > "$T/sass-$side/$(basename "$f" .elf).sass"
    done
done
nd=0
for f in "$T/sass-rev"/*.sass; do
    cmp -s "$f" "$T/sass-tree/$(basename "$f")" || { echo "differs: $(basename "$f" .sass)"; nd=$((nd + 1)); }
done
echo "$(ls "$T/sass-rev" | wc -l) variants, $nd with different SASS ($REV vs the working tree)"
