#!/bin/bash
# Session 7, last call: first M1/M2 of HEAD's MLA kernel (N, the lookups moved) against the one
# before it (var/C = c075af6) alternating, then the final steps of final.sh on HEAD.
. examples/results/s7-calls/lib.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
echo "tree of ${COMMIT:-?}" | tee $R/commit.txt
make -s -j16 build/bench > $R/build-bench.log 2>&1 || tail -20 $R/build-bench.log
NCACHE=/tmp/dcpattn-cache ab M1,M2 "^M[12]/q[0-9] +PASS +m" C N C N
snap
PEERS=40 final_steps
