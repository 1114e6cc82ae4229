#!/usr/bin/env bash
# gpu_peers.sh [BUDGET] — the paged peers of the benchmark on a GPU machine without a package
# registry, from the repository root (any directory works: it changes to the root):
#   1. installs the wheels in .whl/ (FlashInfer and what it imports that the machine lacks) into
#      /tmp/site and copies FlashInfer modules compiled ahead (.peers/flashinfer-aot/, the same
#      FlashInfer, nvcc and sm_90a) where FlashInfer looks for them first (NO_AOT=1: not, so
#      that step 2 measures their compile time here);
#   2. builds FlashMLA's dense and sparse decode (examples/peers/build_flashmla.sh, from .peers/flashmla)
#      and compiles the FlashInfer modules not compiled ahead, both at once, at most BUILD_SECONDS
#      (default 200) each; without a build, the FlashMLA extension compiled ahead
#      (.peers/flashmla/prebuilt, against the same PyTorch release; flashmla_sparse.so next to
#      flashmla_dense.so) is the peer;
#   3. runs examples/bench_peers.py on every case it knows with the peers flashinfer, flashmla,
#      sdpa and eager (FlexAttention compiles for minutes: `make bench` runs it), at most BUDGET
#      seconds (default 240), and prints a summary.
# Logs go to $OUT (default /tmp/peers-out): install.log, build-flashmla.log,
# build-flashinfer.log, peers.jsonl (the JSON lines), peers.err. Files under /tmp stay for a
# later command on the same machine, where `make bench` then measures the same peers (the peer
# script finds /tmp/site, /tmp/flashinfer-ws and /tmp/flashmla by default).
set -u
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-/tmp/peers-out}
budget=${1:-240}
build_s=${BUILD_SECONDS:-200}
cases=G1,G2,G1F,G2F,M1,M2,M1F,M2F,S1,S1E,S2,S2E,S3,S3E,S3M,S3ME,S4,S4E,R1,R2,SP1,SP2
mkdir -p "$out" || exit 2
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/flashinfer-ws}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1
export PATH="$CUDA_HOME/bin:$PATH"
t0=$(date +%s)
step() { echo "[$(($(date +%s) - t0)) s] $*"; }

if ls .whl/*.whl >/dev/null 2>&1; then
    # installed once per machine: a reinstall gives FlashInfer's headers new times, and its JIT
    # cache would then compile every module again
    have=$(cd .whl && ls -l *.whl | awk '{print $5, $NF}')
    if [ "$have" = "$(cat /tmp/site/.carried 2>/dev/null)" ]; then
        step "the wheels are installed in /tmp/site already"
    else
        step "installing $(cd .whl && echo *.whl) into /tmp/site"
        if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl > "$out/install.log" 2>&1; then
            echo "$have" > /tmp/site/.carried
        else
            echo "pip install failed: see install.log"
        fi
    fi
else
    echo "no .whl/*.whl: FlashInfer runs only if python3 imports it already"
fi
if [ -z "${NO_AOT:-}" ] && [ -d .peers/flashinfer-aot ] && [ -d /tmp/site/flashinfer/data ]; then
    mkdir -p /tmp/site/flashinfer/data/aot && cp -r .peers/flashinfer-aot/. /tmp/site/flashinfer/data/aot/
    step "FlashInfer modules compiled ahead: $(ls .peers/flashinfer-aot | wc -l)"
fi
python3 -c 'import torch, flashinfer; print("torch", torch.__version__, "CUDA", torch.version.cuda,
"flashinfer", flashinfer.__version__, torch.cuda.get_device_name(0))' 2>&1 | tail -n 1
nvcc --version 2>/dev/null | tail -n 1

step "building FlashMLA and FlashInfer's modules (at most $build_s s)"
FLASHMLA_BUILD_SECONDS=$build_s bash examples/peers/build_flashmla.sh .peers/flashmla > "$out/build-flashmla.log" 2>&1 &
mla=$!
timeout $((build_s + 10)) python3 examples/bench_peers.py --prebuild > "$out/build-flashinfer.log" 2>&1
echo "FlashInfer prebuild exit $?"
grep -E "^flashinfer" "$out/build-flashinfer.log"
wait $mla
tail -n 1 "$out/build-flashmla.log"
so=${FLASHMLA_BUILD:-/tmp/flashmla}/build/flashmla_dense.so
[ -f "$so" ] || so=.peers/flashmla/prebuilt/flashmla_dense.so
[ -f "$so" ] && echo "FlashMLA extension: $so"
[ -f "$(dirname "$so")/flashmla_sparse.so" ] && echo "FlashMLA sparse extension: $(dirname "$so")/flashmla_sparse.so"

step "running the peers on $cases (at most $budget s)"
timeout $((budget + 60)) python3 examples/bench_peers.py --budget "$budget" --peers eager,sdpa,flashinfer,flashmla \
    --flashmla-so "$so" --only "$cases" > "$out/peers.jsonl" 2> "$out/peers.err"
echo "bench_peers.py exit $?"
python3 - "$out/peers.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        print("  " + line.rstrip())
        continue
    if "case" not in d:
        print("  %s" % d)
        continue
    extra = " ".join("%s=%s" % (k, d[k]) for k in ("variant", "mask", "module", "plan_first_s", "plan_warm_ms",
                                                  "plan_first_ms", "max_err") if k in d)
    if d.get("status") == "ok":
        print("  %-8s %-10s %10.1f us %8.0f GB/s %7.1f TFLOP/s  %s" % (d["case"], d["peer"], d["us"], d["gbps"],
                                                                     d.get("tflops", 0), extra))
    else:
        print("  %-8s %-10s %s: %s %s" % (d["case"], d["peer"], d.get("status"), d.get("reason", ""), extra))
    for name, v in (d.get("variants") or {}).items():
        print("  %-8s   %-12s %s" % ("", name, " ".join("%s=%s" % kv for kv in v.items())))
EOF
step done
