#!/usr/bin/env bash
# build_flashmla.sh [SRC] — builds FlashMLA's dense bf16 SM90 decode (the MLA peer of
# examples/bench_peers.py) and, where the snapshot has it, its sparse FP8 SM90 decode (the peer of
# SP1) as two PyTorch extensions, with nvcc, for sm_90a only.
#
# SRC (default .peers/flashmla, git-ignored) holds two archives that this repository does not
# carry: flashmla-*.tar.xz (a FlashMLA source snapshot with the dense SM90 decode kernel) and
# cutlass-*.tar.xz (CUTLASS's include/ and tools/util/include at the commit FlashMLA pins).
# They are unpacked under FLASHMLA_BUILD (default /tmp/flashmla); the four translation units
# of the dense decode path (the kernel, its scheduler, the combine kernel and a binding of
# dense_decode_fwd alone) are compiled there, MAX_JOBS at a time (default: the core count),
# and the extension lands in $FLASHMLA_BUILD/build/flashmla_dense.so; the sparse one (its four
# SM90 instantiations, the same scheduler and combine, a binding of sparse_decode_fwd whose SM100
# paths refuse) is built in $FLASHMLA_BUILD/build-sparse and copied next to it as
# flashmla_sparse.so ("flashmla sparse: skipped: WHY" where it does not build; the dense one
# stands alone). The build stops after
# FLASHMLA_BUILD_SECONDS (default 300). On any failure the last line says
# "flashmla: skipped: WHY" and the exit status is 3; the benchmark then reports FlashMLA as
# skipped. A second run reuses what the first compiled.
set -u
src=${1:-.peers/flashmla}
dst=${FLASHMLA_BUILD:-/tmp/flashmla}
limit=${FLASHMLA_BUILD_SECONDS:-300}
py=${PYTHON:-python3}

skip() {
    echo "flashmla: skipped: $*"
    exit 3
}

fm=$(ls "$src"/flashmla-*.tar.xz 2>/dev/null | head -n 1)
cu=$(ls "$src"/cutlass-*.tar.xz 2>/dev/null | head -n 1)
[ -n "$fm" ] || skip "no flashmla-*.tar.xz in $src"
[ -n "$cu" ] || skip "no cutlass-*.tar.xz in $src"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
command -v nvcc >/dev/null || skip "nvcc not found (CUDA_HOME=$CUDA_HOME)"
"$py" -c 'import torch.utils.cpp_extension' 2>/dev/null || skip "$py cannot import torch.utils.cpp_extension"

mkdir -p "$dst/build" || skip "cannot create $dst"
stamp="$dst/src.stamp"
want="$(basename "$fm") $(basename "$cu")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    rm -rf "$dst/flashmla" "$dst/cutlass"
    mkdir -p "$dst/cutlass"
    tar -xJf "$fm" -C "$dst" || skip "cannot unpack $fm"
    tar -xJf "$cu" -C "$dst/cutlass" || skip "cannot unpack $cu"
    echo "$want" > "$stamp"
fi
csrc="$dst/flashmla/csrc"
for f in api/dense_decode.h sm90/decode/dense/instantiations/bf16.cu \
         smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu smxx/decode/combine/combine.cu; do
    [ -f "$csrc/$f" ] || skip "the snapshot has no csrc/$f (not a FlashMLA tree with the dense SM90 decode)"
done
[ -f "$dst/cutlass/include/cute/tensor.hpp" ] || skip "no CUTLASS headers in $cu"

# the binding of the dense decode alone: FlashMLA's own api.cpp also pulls in the sparse and
# SM100 paths, which this peer does not need
# (rewritten only when it changes: ninja would rebuild the binding for a newer file)
cat > "$dst/dense_binding.cpp.new" <<'EOF'
#include <pybind11/pybind11.h>

#include "api/dense_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("dense_decode_fwd", &dense_attn_decode_interface);
}
EOF
cat > "$dst/sparse_binding.cpp.new" <<'EOF'
#include <pybind11/pybind11.h>
#include <torch/extension.h>

// the SM100 entry points that the interface names, never reached on sm_90a: they refuse
// (defined before the interface)
#include "sm100/decode/head64/kernel.h"
#include "sm100/prefill/sparse/fwd_for_small_topk/head128/phase1.h"

namespace sm100::decode::head64 {
template <> void run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::V32>(const SparseAttnDecodeParams &) {
    TORCH_CHECK(false, "this build has the SM90 sparse decode only");
}
template <> void run_flash_splitkv_mla_fp8_sparse_kernel<ModelType::MODEL1>(const SparseAttnDecodeParams &) {
    TORCH_CHECK(false, "this build has the SM90 sparse decode only");
}
}  // namespace sm100::decode::head64
namespace sm100::fwd_for_small_topk::head128 {
template <>
void run_fwd_for_small_topk_phase1_kernel<SparseAttnFwdMode::DecodeWithSplitKV, 512>(
    const SparseFwdArgT<SparseAttnFwdMode::DecodeWithSplitKV> &) {
    TORCH_CHECK(false, "this build has the SM90 sparse decode only");
}
}  // namespace sm100::fwd_for_small_topk::head128

#include "api/sparse_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("sparse_decode_fwd", &sparse_attn_decode_interface);
}
EOF
for b in dense sparse; do
    if cmp -s "$dst/${b}_binding.cpp.new" "$dst/${b}_binding.cpp"; then rm -f "$dst/${b}_binding.cpp.new"
    else mv "$dst/${b}_binding.cpp.new" "$dst/${b}_binding.cpp"; fi
done
# a build stopped by the time limit leaves PyTorch's build lock behind, and the next build
# would wait on it
rm -f "$dst/build/lock" "$dst/build-sparse/lock"
mkdir -p "$dst/build-sparse"

export MAX_JOBS=${MAX_JOBS:-$(nproc)}
export TORCH_CUDA_ARCH_LIST=9.0a
echo "flashmla: building $(basename "$fm") into $dst/build, the dense and the sparse extension at once, $MAX_JOBS jobs each, at most $limit s"
cat > "$dst/build_ext.py" <<'EOF'
import os, shutil, sys
from torch.utils.cpp_extension import load
dst, which = sys.argv[1], sys.argv[2]
csrc = os.path.join(dst, "flashmla", "csrc")
cut = os.path.join(dst, "cutlass")
flags = ["-O3", "-std=c++20", "-DNDEBUG", "-DFLASH_MLA_DISABLE_FP16"]
# CUDA 13 keeps libcu++ (cuda/std/...) under include/cccl, which nvcc finds and the host compiler
# of the binding does not
cccl = [p for p in [os.path.join(os.environ["CUDA_HOME"], "include", "cccl")] if os.path.isdir(p)]
cuda_flags = flags + ["-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
                      "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                      "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
                      "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
                      "--ptxas-options=--register-usage-level=10",
                      "-gencode", "arch=compute_90a,code=sm_90a"]
includes = [csrc, os.path.join(csrc, "kerutils", "include"), os.path.join(csrc, "sm90"),
            os.path.join(cut, "include"), os.path.join(cut, "tools", "util", "include")] + cccl
common = [os.path.join(csrc, "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu"),
          os.path.join(csrc, "smxx/decode/combine/combine.cu")]
if which == "dense":
    load(name="flashmla_dense",
         sources=[os.path.join(dst, "dense_binding.cpp")] + common +
                 [os.path.join(csrc, "sm90/decode/dense/instantiations/bf16.cu")],
         extra_cflags=flags + ["-Wno-deprecated-declarations"], extra_cuda_cflags=cuda_flags,
         extra_include_paths=includes, build_directory=os.path.join(dst, "build"), verbose=True)
    print("flashmla: dense built", flush=True)
    sys.exit(0)
inst = os.path.join(csrc, "sm90/decode/sparse_fp8/instantiations")
if not (os.path.isdir(inst) and os.path.exists(os.path.join(csrc, "api/sparse_decode.h"))):
    print("flashmla sparse: skipped: the snapshot has no SM90 sparse FP8 decode")
else:
    try:
        load(name="flashmla_sparse",
             sources=[os.path.join(dst, "sparse_binding.cpp")] + common +
                     [os.path.join(inst, f) for f in sorted(os.listdir(inst)) if f.endswith(".cu")],
             extra_cflags=flags + ["-Wno-deprecated-declarations"], extra_cuda_cflags=cuda_flags,
             extra_include_paths=includes, build_directory=os.path.join(dst, "build-sparse"), verbose=True)
        shutil.copy(os.path.join(dst, "build-sparse", "flashmla_sparse.so"), os.path.join(dst, "build"))
        print("flashmla sparse: built", flush=True)
    except Exception as e:  # the dense peer stands without it
        print("flashmla sparse: skipped: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__))
EOF
t0=$(date +%s)
# both extensions at once (one after the other, the sparse one did not finish inside 200 s on a
# 16-core host); the sparse build's log goes to build-sparse.log, its last line after this one's
timeout "$limit" "$py" "$dst/build_ext.py" "$dst" sparse > "$dst/build-sparse.log" 2>&1 &
sparse_pid=$!
timeout "$limit" "$py" "$dst/build_ext.py" "$dst" dense
rc=$?
wait $sparse_pid
[ $? -eq 124 ] && echo "flashmla sparse: skipped: the build ran past $limit s ($dst/build-sparse.log)"
tail -n 1 "$dst/build-sparse.log"
secs=$(( $(date +%s) - t0 ))
[ $rc -eq 124 ] && skip "the build ran past $limit s (log above)"
[ $rc -eq 0 ] || skip "the build failed after $secs s (exit $rc, log above)"
[ -f "$dst/build/flashmla_dense.so" ] || skip "no $dst/build/flashmla_dense.so after the build"
echo "flashmla: built $dst/build/flashmla_dense.so in $secs s"
