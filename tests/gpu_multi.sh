#!/bin/sh
# gpu_multi.sh — the multi-GPU job (issue: DCP over NCCL on 2, 4 and 8 GPUs) in one bounded
# script: for every W the machine has GPUs for (1 always; 2, 4, 8 where present),
# examples/dcp_nccl on the GQA shape of G1 and the MLA shape of M1 scaled to fit, checked
# against one-GPU attention over the unsharded cache:
#   - every transport x result layout at q_len 2, I = 16;
#   - q_len 1 and 4, and I = 1 and the page size, with a2a / scatter;
#   - a graph of attention + combine replayed on fresh q (--graph 3);
#   - the benchmark (--bench 50): each transport against raw NCCL exchanges of the same bytes
#     and the whole decode step.
# One line per run in $OUT/multi-summary.log ("ok" or "FAILED"), full logs in $OUT/multi/.
OUT=${OUT:-/tmp/dcpattn-out}
mkdir -p "$OUT/multi"
. tests/gpu_env.sh
export DCPATTN_CACHE_DIR=${DCPATTN_CACHE_DIR:-/tmp/dcpattn-cache}
make -s build/dcp_nccl > "$OUT/multi/build.log" 2>&1 || { tail -n 20 "$OUT/multi/build.log"; exit 1; }
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
S="$OUT/multi-summary.log"
: > "$S"
n=0
run() { # W args...
    n=$((n + 1))
    timeout -k 5 "${RUN_SECONDS:-120}" build/dcp_nccl -W "$@" > "$OUT/multi/run$n.log" 2>&1
    rc=$?
    line=$(grep '^dcp_nccl ' "$OUT/multi/run$n.log" | tail -n 1)
    [ -n "$line" ] || line="dcp_nccl -W $*: exit $rc (no summary line)"
    echo "$line  [-W $*] (run$n.log)" | tee -a "$S"
    grep '^bench ' "$OUT/multi/run$n.log" >> "$S"
}
GQA="--heads 64 --kv-heads 8 --batch 4 --len 1500"
MLA="--mla --heads 128 --batch 2 --len 1200"
for W in 1 2 4 8; do
    [ "$W" -le "$NGPU" ] || { echo "W = $W: not run ($NGPU GPUs)" | tee -a "$S"; continue; }
    for shape in gqa mla; do
        if [ $shape = gqa ]; then A=$GQA; PAGE=16; else A=$MLA; PAGE=64; fi
        for t in a2a ag_rs; do
            for l in scatter replicate; do run "$W" $A -I 16 --q-len 2 --transport $t --layout $l; done
        done
        run "$W" $A -I 16 --q-len 2 --std-layout
        for q in 1 4; do run "$W" $A -I 16 --q-len $q; done
        for I in 1 $PAGE; do run "$W" $A -I $I --q-len 2; done
        run "$W" $A -I 16 --q-len 2 --graph 3
        run "$W" $A -I 16 --q-len 2 --bench 50
    done
done
echo "=== multi-GPU summary ($NGPU GPUs)"; cat "$S"
grep -c FAILED "$S" | sed 's/^/failed runs: /'
