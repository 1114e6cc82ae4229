#!/bin/sh
# bench_ab.sh [--rounds N] PATCH CASES [BENCH-ARGS...] — an A/B benchmark of a kernel change on a
# GPU host, which needs no git there: B is this tree, A the same tree with PATCH (a `git diff`
# from A to B, kept where the tree does not track it) taken out again. Both are copied to a
# temporary folder without build/, built (build/bench) side by side, each with a kernel cache
# of its own, then run in turns, A then B, N rounds (2 by default):
#     build/bench --no-peers --only CASES --json ... [BENCH-ARGS...]
# (the benchmark validates every row against the CPU reference before it times it). Prints,
# per row, A's and B's median times over the rounds (min-max) and B's time over A's; a row that
# fails on either side says so. The logs and JSON of every run go to $OUT (default
# /tmp/dcpattn-out) as ab-SIDE-ROUND.log / .json. With AB_SECONDS set, no run starts once that many
# seconds have passed since the start (the build counted): the table then holds the rounds that
# ran, so a host with a time limit still gets one. Example:
#     git diff HEAD > .deb/change.patch     # here; then on the GPU host:
#     tests/bench_ab.sh .deb/change.patch G1F,G2F --q 8
set -eu
ROUNDS=2
if [ "${1:-}" = --rounds ]; then ROUNDS=$2; shift 2; fi
[ $# -ge 2 ] || { echo "usage: tests/bench_ab.sh [--rounds N] PATCH CASES [BENCH-ARGS...]"; exit 2; }
PATCH=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
CASES=$2
shift 2
OUT=${OUT:-/tmp/dcpattn-out}
T0=$(date +%s)
mkdir -p "$OUT"
. tests/gpu_env.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for side in A B; do
    mkdir "$W/$side"
    tar -c --exclude=./build . | tar -x -C "$W/$side"
done
(cd "$W/A" && patch -R -p1 -s -f < "$PATCH" > "$OUT/ab-patch.log" 2>&1) ||
    { echo "bench_ab: $PATCH does not come out of this tree"; cat "$OUT/ab-patch.log"; exit 1; }
for side in A B; do
    (cd "$W/$side" && make -s -j"$(nproc)" build/bench > "$OUT/ab-build-$side.log" 2>&1) &
done
wait
for side in A B; do
    [ -x "$W/$side/build/bench" ] || { echo "bench_ab: building $side failed"; tail -n 20 "$OUT/ab-build-$side.log"; exit 1; }
done
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for side in A B; do
        if [ -n "${AB_SECONDS:-}" ] && [ $(( $(date +%s) - T0 )) -ge "$AB_SECONDS" ]; then
            echo "bench_ab: $AB_SECONDS s have passed: $side, round $r not run"
            continue
        fi
        (cd "$W/$side" && DCPATTN_CACHE_DIR="$W/cache-$side" build/bench --no-peers --only "$CASES" \
            --json "$OUT/ab-$side-$r.json" "$@") > "$OUT/ab-$side-$r.log" 2>&1 ||
            echo "bench_ab: $side, round $r: the benchmark exited with $? ($OUT/ab-$side-$r.log)"
    done
    r=$((r + 1))
done
python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
times, order = {}, []
for side in "AB":
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
print(f"{'row':10} {'A us (min-max)':>20} {'B us (min-max)':>20} {'B/A':>7}")
for key in order:
    cols = []
    for side in "AB":
        ts = times[key].get(side, [])
        ok = [t for t in ts if t is not None]
        cols.append(("FAIL" if len(ok) < len(ts) or not ts else f"{min(ok):.1f}-{max(ok):.1f}", ok))
    ratio = (f"{(sum(cols[1][1]) / len(cols[1][1])) / (sum(cols[0][1]) / len(cols[0][1])):.3f}"
             if cols[0][0] != "FAIL" and cols[1][0] != "FAIL" else "-")
    print(f"{key:10} {cols[0][0]:>20} {cols[1][0]:>20} {ratio:>7}")
EOF
