#!/usr/bin/env bash
# prepare.sh FLASHMLA_GIT CUTLASS_GIT [--compile] — on a machine with PyPI access, fills the two
# git-ignored folders that examples/peers/gpu_peers.sh reads on a GPU machine without one:
#   .whl/    flashinfer-python and apache-tvm-ffi (the only package FlashInfer imports that the
#            GPU image lacks), Python 3.12 x86-64 wheels;
#   .peers/flashmla/   flashmla-COMMIT.tar.xz (git archive of FlashMLA at FLASHMLA_COMMIT, the
#            last snapshot with the dense SM90 decode) and cutlass-COMMIT.tar.xz (include/ and
#            tools/util/include of the CUTLASS commit FlashMLA pins as its submodule).
# FLASHMLA_GIT and CUTLASS_GIT are clones (or bare mirrors) of FlashMLA and CUTLASS. With
# --compile, and PyTorch 2.11 + nvcc 13.0 on this machine (FLASHINFER_PYTHON, default python3),
# it also compiles ahead, for sm_90a: FlashInfer's modules (bf16 caches, and e4m3 caches for
# the decode and FA2 prefill wrappers) into .peers/flashinfer-aot/ and FlashMLA's extensions
# (dense, and sparse where the snapshot has it) into .peers/flashmla/prebuilt/ (tens of minutes
# on few cores). Run it
# from anywhere; it writes into the repository root. Add /.whl/ and /.peers/ to
# .git/info/exclude: neither folder is committed.
set -eu -o pipefail
FLASHINFER_VERSION=${FLASHINFER_VERSION:-0.6.18.post1}
TVM_FFI_VERSION=${TVM_FFI_VERSION:-0.1.13.post3}
FLASHMLA_COMMIT=${FLASHMLA_COMMIT:-9241ae3}
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 2; }
fm_git=$(cd "$1" && pwd)
cu_git=$(cd "$2" && pwd)
compile=${3:-}
cd "$(dirname "$0")/../.."
root=$(pwd)
gd() { if [ -d "$1/.git" ]; then echo "$1/.git"; else echo "$1"; fi; }

mkdir -p .whl .peers/flashmla
python3 -m pip download -q --no-deps -d .whl "flashinfer-python==$FLASHINFER_VERSION"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    -d .whl "apache-tvm-ffi==$TVM_FFI_VERSION"

fm=$(git --git-dir="$(gd "$fm_git")" rev-parse --short=7 "$FLASHMLA_COMMIT")
cu=$(git --git-dir="$(gd "$fm_git")" ls-tree "$fm" csrc/cutlass | awk '{print $3}')
[ -n "$cu" ] || { echo "prepare: FlashMLA $fm pins no csrc/cutlass" >&2; exit 1; }
rm -f .peers/flashmla/flashmla-*.tar.xz .peers/flashmla/cutlass-*.tar.xz
git --git-dir="$(gd "$fm_git")" archive --format=tar --prefix=flashmla/ "$fm" | xz -9 > ".peers/flashmla/flashmla-$fm.tar.xz"
git --git-dir="$(gd "$cu_git")" archive --format=tar "$cu" include tools/util/include | xz -9 \
    > ".peers/flashmla/cutlass-${cu:0:7}.tar.xz"

if [ "$compile" = --compile ]; then
    py=${FLASHINFER_PYTHON:-python3}
    tmp=$(mktemp -d)
    "$py" -m pip install -q --no-index --no-deps --no-compile --target "$tmp/site" .whl/*.whl
    FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE="$tmp/ws" BENCH_PEERS_SITE="$tmp/site" \
        "$py" examples/bench_peers.py --prebuild
    rm -rf .peers/flashinfer-aot
    for m in "$tmp"/ws/.cache/flashinfer/*/90a/cached_ops/*/; do
        n=$(basename "$m")
        [ -f "$m/$n.so" ] && mkdir -p ".peers/flashinfer-aot/$n" && cp "$m/$n.so" ".peers/flashinfer-aot/$n/"
    done
    PYTHON=$py FLASHMLA_BUILD="$tmp/flashmla" FLASHMLA_BUILD_SECONDS=3600 bash examples/peers/build_flashmla.sh
    mkdir -p .peers/flashmla/prebuilt && cp "$tmp/flashmla/build/flashmla_dense.so" .peers/flashmla/prebuilt/
    [ -f "$tmp/flashmla/build/flashmla_sparse.so" ] && cp "$tmp/flashmla/build/flashmla_sparse.so" .peers/flashmla/prebuilt/
    rm -rf "$tmp"
fi
du -sh "$root/.whl" "$root/.peers"
