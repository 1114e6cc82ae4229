#!/bin/bash
# Session 7, final call, on the tree committed before it: make -j16 test (every CPU suite and
# GPU program), the benchmark with peers (M3: the skewed batch, split heuristic and balanced
# schedule), the demo, the MLA suite (one pass) under memcheck / synccheck / racecheck, and
# tests/gpu_multi.sh at W = 1. Each step bounded; logs in $OUT/all.tgz after every step.
. examples/results/s7-calls/lib.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
echo "tree of ${COMMIT:-?}" | tee $R/commit.txt
final_steps
