"""One rank of test_gpu.py's multi-GPU combine: python combine_worker.py RANK WORLD STORE.
Each rank makes its own random partial state; the reference is the float64 merge of every
rank's state (gathered with torch.distributed); dcp_combine is checked for both transports,
both layouts and both LSE layouts."""

import sys

import torch
import torch.distributed as dist

import dcpattn

rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.cuda.set_device(rank)
dev = torch.device("cuda", rank)
dist.init_process_group("nccl", init_method="file://" + store, rank=rank, world_size=world, device_id=dev)
dist.barrier()
comm = dcpattn.nccl_comm_from_torch()
T, H, D = 37, 4 * world, 128
g = torch.Generator().manual_seed(100 + rank)
o = (torch.rand((T, H, D), generator=g) * 2 - 1).to(torch.bfloat16).to(dev)
lse = (torch.randn((T, H), generator=g) * 3).to(dev)
lse[5 + rank] = float("-inf")  # a row empty on this rank
lse[2] = float("-inf")  # a row empty everywhere
all_o = [torch.empty_like(o) for _ in range(world)]
all_lse = [torch.empty_like(lse) for _ in range(world)]
dist.all_gather(all_o, o)
dist.all_gather(all_lse, lse)
ls = torch.stack([x.double() for x in all_lse])
m = torch.logsumexp(ls, 0)
ref = (torch.nan_to_num(torch.exp(ls - m), nan=0.0)[..., None] * torch.stack([x.double() for x in all_o])).sum(0)
failed = passed = 0
for transport in ("a2a", "ag_rs"):
    for layout in ("scatter", "replicate"):
        for head_major in (False, True):
            l_in = lse.T.contiguous().T if head_major else lse
            out, out_lse = dcpattn.dcp_combine(o, l_in, comm, world_size=world, rank=rank, transport=transport,
                                               layout=layout, return_lse=True)
            dcpattn.dcp_wait(comm, timeout_ms=120000)
            h0, h1 = (rank * H // world, (rank + 1) * H // world) if layout == "scatter" else (0, H)
            err = (out.double() - ref[:, h0:h1]).abs().max().item()
            fin = torch.isfinite(m[:, h0:h1])
            lerr = (out_lse.double()[fin] - m[:, h0:h1][fin]).abs().max().item()
            # ag_rs sums bf16 partials in NCCL: one rounding per rank
            ok = err <= (1.5e-2 if transport == "a2a" else 2e-3 * (world + 2)) and lerr <= 1e-3 and bool((out[2] == 0).all()) and \
                bool(torch.isinf(out_lse[2]).all()) and not torch.isnan(out.float()).any()
            print("rank %d: %s %s head-major=%d: max |out - ref| %.3g, |lse - ref| %.3g %s"
                  % (rank, transport, layout, head_major, err, lerr, "ok" if ok else "FAIL"))
            passed, failed = passed + ok, failed + (not ok)
dist.destroy_process_group()
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
