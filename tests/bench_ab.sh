#!/bin/sh
# bench_ab.sh [--rounds N] [--plus PATCH2]... PATCH CASES [BENCH-ARGS...] — an A/B benchmark of a
# kernel change on a GPU host, which needs no git there: B is this tree, A the same tree with
# PATCH (a `git diff` from A to B, kept where the tree does not track it) taken out again; each
# --plus adds a side C, D, ... = B with PATCH2 applied on top (a `git diff` from B), so that a
# change and a variant of it are measured in one run. Every side is copied to a temporary
# folder without build/ and built (build/bench), side by side, each with a kernel cache of its
# own. A warm-up pass then runs every side's benchmark at once (`--iters 20`, results dropped),
# so that their kernels compile in parallel and the timed runs find them cached (AB_WARM=0
# skips it); then the sides run in turns, A, B, C, ..., N rounds (2 by default):
#     build/bench --no-peers --only CASES --json ... [BENCH-ARGS...]
# (the benchmark validates every row against the CPU reference before it times it). Prints,
# per row and side, the times over the rounds (min-max) and the side's mean over A's (C, D, ...:
# over B's too); a row that fails on a side says so. The logs and JSON of every run go to $OUT (default /tmp/dcpattn-out)
# as ab-SIDE-ROUND.log / .json. With AB_SECONDS set, no run starts once that many seconds have
# passed since the start (the build counted): the table then holds the rounds that ran, so a
# host with a time limit still gets one. With AB_CACHE set, every side also reads kernels from
# that cache directory (e.g. the one a test suite of either tree just filled; its entries are
# keyed by the rendered source, so no side takes another's), which saves their compiles.
# Example:
#     git diff HEAD > .deb/change.patch     # here; then on the GPU host:
#     tests/bench_ab.sh .deb/change.patch G1F,G2F --q 8
set -eu
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ROUNDS=2
SIDES="A B"
while :; do
    case "${1:-}" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --plus) # the next side's letter, its patch kept as $W/LETTER.patch
        side=$(echo CDEFGH | cut -c$(($(echo $SIDES | wc -w) - 1)))
        [ -n "$side" ] || { echo "bench_ab: at most 6 --plus sides"; exit 2; }
        cp "$2" "$W/$side.patch"
        SIDES="$SIDES $side"
        shift 2 ;;
    *) break ;;
    esac
done
[ $# -ge 2 ] || { echo "usage: tests/bench_ab.sh [--rounds N] [--plus PATCH2]... PATCH CASES [BENCH-ARGS...]"; exit 2; }
cp "$1" "$W/B.patch"
CASES=$2
shift 2
OUT=${OUT:-/tmp/dcpattn-out}
T0=$(date +%s)
mkdir -p "$OUT"
. tests/gpu_env.sh
for side in $SIDES; do
    mkdir "$W/$side"
    tar -c --exclude=./build . | tar -x -C "$W/$side"
    if [ "$side" = A ]; then # A: this tree without PATCH; C, D, ...: with their PATCH2 on top
        (cd "$W/A" && patch -R -p1 -s -f < "$W/B.patch" > "$OUT/ab-patch.log" 2>&1) ||
            { echo "bench_ab: the patch of B does not come out of this tree"; cat "$OUT/ab-patch.log"; exit 1; }
    elif [ "$side" != B ]; then
        (cd "$W/$side" && patch -p1 -s -f < "$W/$side.patch" > "$OUT/ab-patch.log" 2>&1) ||
            { echo "bench_ab: the patch of $side does not apply to this tree"; cat "$OUT/ab-patch.log"; exit 1; }
    fi
done
for side in $SIDES; do
    (cd "$W/$side" && make -s -j"$(nproc)" build/bench > "$OUT/ab-build-$side.log" 2>&1) &
done
wait
for side in $SIDES; do
    [ -x "$W/$side/build/bench" ] || { echo "bench_ab: building $side failed"; tail -n 20 "$OUT/ab-build-$side.log"; exit 1; }
done
bench() { # side json-path bench-args...
    b_side=$1 b_json=$2
    shift 2
    (cd "$W/$b_side" && DCPATTN_CACHE_DIR="$W/cache-$b_side${AB_CACHE:+:$AB_CACHE}" build/bench --no-peers \
        --only "$CASES" --json "$b_json" "$@")
}
if [ "${AB_WARM:-1}" != 0 ]; then
    for side in $SIDES; do
        bench "$side" "$W/warm-$side.json" "$@" --iters 20 > "$OUT/ab-$side-warm.log" 2>&1 &
    done
    wait
fi
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for side in $SIDES; do
        if [ -n "${AB_SECONDS:-}" ] && [ $(( $(date +%s) - T0 )) -ge "$AB_SECONDS" ]; then
            echo "bench_ab: $AB_SECONDS s have passed: $side, round $r not run"
            continue
        fi
        bench "$side" "$OUT/ab-$side-$r.json" "$@" > "$OUT/ab-$side-$r.log" 2>&1 ||
            echo "bench_ab: $side, round $r: the benchmark exited with $? ($OUT/ab-$side-$r.log)"
    done
    r=$((r + 1))
done
python3 - "$OUT" "$ROUNDS" $SIDES <<'EOF'
import json, sys
out, rounds, sides = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times, order = {}, []
for side in sides:
    for r in range(1, rounds + 1):
        try:
            cases = json.load(open(f"{out}/ab-{side}-{r}.json"))["cases"]
        except (OSError, ValueError, KeyError):
            continue
        for c in cases:
            if c["key"] not in order:
                order.append(c["key"])
            t = c["median_us"] if c["status"] == "PASS" and c["median_us"] is not None else None
            times.setdefault(c["key"], {}).setdefault(side, []).append(t)
# each side against A; C, D, ... (B with a patch on top) against B as well
against = lambda side: [] if side == "A" else ["A"] if side == "B" else ["A", "B"]
print(f"{'row':10}" + "".join(f" {side + ' us (min-max)':>20}" + "".join(f" {side + '/' + o:>7}" for o in against(side))
                              for side in sides))
for key in order:
    line, means = f"{key:10}", {}
    for side in sides:
        ts = times[key].get(side, [])
        ok = [t for t in ts if t is not None]
        good = ok and len(ok) == len(ts)
        line += f" {f'{min(ok):.1f}-{max(ok):.1f}' if good else 'FAIL':>20}"
        means[side] = sum(ok) / len(ok) if good else None
        for o in against(side):
            m, b = means[side], means[o]
            line += f" {f'{m / b:.3f}' if m and b else '-':>7}"
    print(line)
EOF
