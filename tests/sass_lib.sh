# sass_lib.sh — sourced by sass_diff.sh and sass_loops.sh, which compile variants without a GPU
# and read their SASS. Run from the repository root; needs build/aot_build (make aot) and
# cuobjdump ($CUOBJDUMP, $CUDA/bin or PATH).

# sass_setup TOOL: CUO (cuobjdump) and T (a temporary directory, removed on exit); exits 2 with
# TOOL's name where a tool is missing.
sass_setup() {
    CUDA=${CUDA:-/usr/local/cuda}
    CUO=${CUOBJDUMP:-$(command -v cuobjdump || echo "$CUDA/bin/cuobjdump")}
    [ -x "$CUO" ] || { echo "$1: no cuobjdump (set CUOBJDUMP)"; exit 2; }
    AOT_BUILD=${AOT_BUILD:-build/aot_build}
    [ -x "$AOT_BUILD" ] || { echo "$1: $AOT_BUILD missing (make $AOT_BUILD)"; exit 2; }
    T=$(mktemp -d)
    trap 'rm -rf "$T"' EXIT
}

# sass_compile TOOL SIDE REV NAME...: gen/, templates/ and include/ of revision REV (empty: the
# working tree) compiled with NVRTC for sm_90a as the library does, each variant's ELF image at
# $T/elf-SIDE/NAME.elf; exits 1 with the log's tail if compiling fails.
sass_compile() {
    tool=$1 side=$2 rev=$3
    shift 3
    mkdir -p "$T/$side" "$T/elf-$side"
    if [ -n "$rev" ]; then git archive "$rev" gen templates include | tar -x -C "$T/$side"
    else tar -c gen templates include | tar -x -C "$T/$side"; fi
    DCPATTN_HOME="$T/$side" "./$AOT_BUILD" --arch sm_90a --out "$T/aot-$side" -j 2 "$@" > "$T/$side.log" 2>&1 ||
        { echo "$tool: compiling the $side side failed"; tail -n 5 "$T/$side.log"; exit 1; }
    for f in "$T/aot-$side"/*.cubin; do
        # a cache entry is a header followed by the ELF image
        python3 -c "import sys; d=open(sys.argv[1],'rb').read(); open(sys.argv[2],'wb').write(d[d.find(b'\x7fELF'):])" \
            "$f" "$T/elf-$side/$(basename "$f" | cut -d. -f1).elf"
    done
}
