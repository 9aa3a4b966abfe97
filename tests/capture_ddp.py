"""Capture a real 2-rank DDP run on CPU (gloo) with plain torch.profiler.

Independent of overlapscope's tracer on purpose: the analyzer is tested on what
PyTorch itself writes. Usage: python tests/capture_ddp.py OUT_DIR [PORT]
"""

from __future__ import annotations

import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 4  # wait 1 (DDP rebuilds its buckets), warmup 1, active 2


def worker(rank: int, world: int, out: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)  # two ranks on two cores: no oversubscription
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)])
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.3)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)

    def ready(prof):
        prof.export_chrome_trace(os.path.join(out, f"rank-{rank}.pt.trace.json"))

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=ready, record_shapes=True) as prof:
        for _ in range(STEPS):
            x = torch.randn(64, 256, generator=gen)
            ddp(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    del ddp, model, opt, prof  # DDP before the group: see tests/tracer/plain/ddp_train.py
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 29541
    # fork: the ranks inherit the imported torch instead of importing it again (CPU only)
    mp.start_processes(worker, args=(2, out_dir, port), nprocs=2, start_method="fork")
