"""Real multi-rank gloo runs with one cause induced, captured with plain torch.profiler.

Written as a user's training script would be: it never imports overlapscope, so the
analyzer is tested on what PyTorch itself writes, and the expected figures come from
how the run was made (the sleep, the micro-batches, the bucket cap) and from the
script's own wall clock, never from the code under test.

    python tests/induced.py OUT --nproc 4 [--sleep-rank R --sleep-ms X] [--accum M [--no-sync]]
                            [--bucket-mb MB | --fsdp [--prefetch]] [--width W --layers L --batch B]
                            [--active N] [--port P]

    python tests/induced.py --serve     (runs one argument list per line of standard input)

With ``--serve`` torch is imported once and each line (a JSON list: the arguments above) is
a run, forked from this process as a run of its own would fork its ranks; after each run a
line ``DONE <exit status>`` (0, else 1 with the error on standard error). The suite's runs
then take their turn on the machine without importing torch each time (2 s of a 5 s run).

Each rank writes ``rank-<r>.pt.trace.json`` (the profiled steps) and
``rank-<r>.walls`` (JSON): the wall time of every step it ran, profiled or not, and of
the unprofiled steps after the profiler stopped (what a run without the profiler's
overhead takes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule



def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--sleep-rank", type=int, default=None)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("--bucket-mb", type=float, default=None, help="DDP bucket_cap_mb (default: left unset)")
    p.add_argument("--active", type=int, default=4, help="profiled steps")
    p.add_argument("--after", type=int, default=4, help="unprofiled steps timed after the profiler")
    p.add_argument("--width", type=int, default=512, help="the model: LAYERS Linear(WIDTH, WIDTH)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=64, help="rows per micro-batch")
    p.add_argument("--fsdp", action="store_true", help="FSDP2: fully_shard each Linear, then the whole")
    p.add_argument("--prefetch", action="store_true", help="FSDP2: explicit prefetch of the next unit's gathers "
                   "(forward and backward)")
    p.add_argument("--port", type=int, default=29561)
    return p.parse_args(argv)


def _step(ddp, opt, batches, args, rank: int) -> None:
    if rank == args.sleep_rank and args.sleep_ms:
        time.sleep(args.sleep_ms / 1000)  # a straggler: late to every step (its data loading, say)
    for i, x in enumerate(batches):
        last = i == len(batches) - 1
        if args.fsdp:  # FSDP2's no_sync: no reduce-scatter until the last micro-batch
            ddp.set_requires_gradient_sync(last or not args.no_sync)
            ddp(x).pow(2).mean().backward()
        elif args.no_sync and not last:
            with ddp.no_sync():
                ddp(x).pow(2).mean().backward()
        else:
            ddp(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _fsdp(model: torch.nn.Sequential, args: argparse.Namespace) -> torch.nn.Module:
    """FSDP2 over every rank: one unit per Linear, the root holding none; with ``--prefetch`` each
    unit issues the next one's all-gather in forward (and the previous one's in backward) itself."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (args.nproc,))
    layers = list(model)
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if args.prefetch:
        for a, b in zip(layers, layers[1:]):
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    return model


def worker(rank: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.nproc)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width) for _ in range(args.layers)])
    if args.fsdp:
        ddp = _fsdp(model, args)
    else:
        kw = {} if args.bucket_mb is None else {"bucket_cap_mb": args.bucket_mb}
        ddp = torch.nn.parallel.DistributedDataParallel(model, **kw)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(rank)
    batches = [torch.randn(args.batch, args.width, generator=gen) for _ in range(args.accum)]
    walls: list[float] = []

    def ready(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"rank-{rank}.pt.trace.json"))

    wait, warmup = 1, 1  # the first step: DDP rebuilds its buckets
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=wait, warmup=warmup, active=args.active),
                 on_trace_ready=ready, record_shapes=True) as prof:
        for _ in range(wait + warmup + args.active):
            t0 = time.perf_counter()
            _step(ddp, opt, batches, args, rank)
            walls.append(time.perf_counter() - t0)
            prof.step()
    after = []
    for _ in range(args.after):
        t0 = time.perf_counter()
        _step(ddp, opt, batches, args, rank)
        after.append(time.perf_counter() - t0)
    with open(os.path.join(args.out, f"rank-{rank}.walls"), "w") as f:
        json.dump({"profiled_ms": [1e3 * w for w in walls[wait + warmup:]], "after_ms": [1e3 * w for w in after]}, f)
    del ddp, model, opt, prof  # DDP before the group: see tests/tracer/plain/ddp_train.py
    gc.collect()
    dist.destroy_process_group()


def step_ms(out: str, which: str = "profiled_ms") -> float:
    """The run's step by its own wall clock: the median over steps of the slowest rank's (the
    ranks finish a step together within a collective's jitter)."""
    import statistics
    per_rank = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".walls"):
            with open(os.path.join(out, name)) as f:
                per_rank.append(statistics.median(json.load(f)[which]))
    return max(per_rank)


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    os.makedirs(args.out, exist_ok=True)
    # fork: the ranks inherit the imported torch (CPU only)
    mp.start_processes(worker, args=(args,), nprocs=args.nproc, start_method="fork")


DONE = "DONE"  # --serve's reply after each run


def serve() -> None:
    for line in sys.stdin:
        try:
            main(json.loads(line))
            status = 0
        except BaseException as err:  # noqa: BLE001 (a run's failure is reported, the next run still served)
            print(f"induced run {line.strip()}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            status = 1
        print(f"{DONE} {status}", flush=True)


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:])
