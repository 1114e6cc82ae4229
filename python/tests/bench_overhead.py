"""The host cost of flash_attn_varlen_func on the CPU, with no GPU: python3 python/tests/bench_overhead.py

The call is examples/vllm_style_decode.py's rank 0 (GQA, 32 query and 8 KV heads of 128,
pages of 16, batch 16, W = 4, out and softmax_lse given), with the plan's run a no-op C
function (offline.py), over faketorch tensors (PyTorch's accessors written in Python); when
PyTorch is installed, also over real PyTorch tensors in host memory, each told to report
device 0 (an instance attribute over get_device, a C method of about its cost): PyTorch's
own accessors, the rest of the call as on a GPU. Then arrays seen only through DLPack
(every call takes the general path). Printed: microseconds of CPU time per call over
--reps runs of --n calls, the median and the fastest run: the call, the no-op alone, and
their difference, the package's own work. Needs build/libdcpattn.so (`make`) for the host
checks a new plan makes once."""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
if not os.environ.get("DCPATTN_LIBRARY") and os.path.isfile(os.path.join(HERE, "..", "..", "build", "libdcpattn.so")):
    os.environ["DCPATTN_LIBRARY"] = os.path.join(HERE, "..", "..", "build", "libdcpattn.so")

import dcpattn  # noqa: E402
import faketorch  # noqa: E402
from dcpattn import _arrays  # noqa: E402
from fakes import DL  # noqa: E402
from offline import NOOP, offline  # noqa: E402


class Time(float):
    """Microseconds per call: the median over runs, printed with the fastest run."""

    def __new__(cls, times):
        t = float.__new__(cls, statistics.median(times))
        t.best = min(times)
        return t

    def __sub__(self, other):
        t = Time([float(self) - float(other)])
        t.best = self.best - other.best
        return t

    def __str__(self):
        return "%.2f us (fastest run %.2f)" % (self, self.best)


def per_call(fn, n, reps):
    """Microseconds of CPU time per call of fn over reps runs of n calls: the process's own
    time, which other processes on the machine inflate less than the wall clock (they still
    share its caches and cores)."""
    times = []
    for _ in range(reps):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        times.append((time.process_time() - t0) / n * 1e6)
    return Time(times)


def decode_call(make, bf16, i32, f32):
    B, hq, hkv, d, page, pages, width = 16, 32, 8, 128, 16, 1200, 128
    return dict(q=make((B, hq, d), bf16), k_cache=make((pages, page, hkv, d), bf16),
                v_cache=make((pages, page, hkv, d), bf16), cu_seqlens_q=make((B + 1,), i32),
                seqused_k=make((B,), i32), block_table=make((B, width), i32), max_seqlen_q=1, max_seqlen_k=1500,
                return_softmax_lse=True, cp_world_size=4, cp_rank=0, cp_tot_seqused_k=make((B,), i32),
                cp_kv_cache_interleave_size=1, out=make((B, hq, d), bf16), softmax_lse=make((hq, B), f32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="calls per run")
    ap.add_argument("--reps", type=int, default=51, help="runs (the median is printed)")
    a = ap.parse_args()
    f = dcpattn.flash_attn_varlen_func
    t_noop = per_call(lambda: NOOP(0, 0, 0, 0, faketorch.STREAM), a.n, a.reps)
    torch = faketorch.module()
    with offline(torch=torch):
        c = decode_call(faketorch.Tensor, torch.bfloat16, torch.int32, torch.float32)
        f(**c)
        t = per_call(lambda: f(**c), a.n, a.reps)
    print("no-op launch alone: %s" % t_noop)
    print("PyTorch tensors (faketorch): %s per call; the package's own work %s" % (t, t - t_noop))
    try:
        import torch
    except ImportError:
        print("PyTorch tensors (PyTorch): not measured, PyTorch is not installed")
    else:
        def make(shape, dtype):
            x = torch.empty(shape, dtype=dtype)
            x.get_device = (0).__index__
            return x

        with offline():
            _arrays._raw_stream = lambda dev: faketorch.STREAM  # (restored by offline)
            c = decode_call(make, torch.bfloat16, torch.int32, torch.float32)
            f(**c)
            t = per_call(lambda: f(**c), a.n, a.reps)
        print("PyTorch tensors (PyTorch %s): %s per call; the package's own work %s"
              % (torch.__version__, t, t - t_noop))
    with offline():
        c = decode_call(DL, "bfloat16", "int32", "float32")
        f(**c)
        t = per_call(lambda: f(**c), a.n // 4, a.reps)
    print("DLPack arrays (the general path): %s per call; the package's own work %s" % (t, t - t_noop))


if __name__ == "__main__":
    main()
