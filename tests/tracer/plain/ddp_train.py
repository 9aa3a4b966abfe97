"""A plain DDP training script (CPU, gloo) that knows nothing of overlapscope: what
``overlapscope capture`` must capture as it is. Launched by torchrun (environment
variables) or by itself with ``--spawn N`` (``mp.spawn``).

Options: --steps N, --accum K (micro-batches per optimizer step), --no-sync (accumulate
under DDP's no_sync), --own-hook (register a comm hook of its own), --fail-rank R (that
rank exits with status 3 after its 3rd step), --sleep-ms MS (a longer step), --tracer DIR
(the same loop inside overlapscope's ``Tracer``: the bundle to compare a capture with;
only this option imports overlapscope).
"""

import argparse
import contextlib
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank: int, world: int, args) -> None:
    if "RANK" not in os.environ:  # mp.spawn: this process sets up its own group
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Flatten(), nn.Linear(64 * 16, 256), nn.ReLU(),
                          nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    ddp = DDP(model, bucket_cap_mb=0.25)
    if args.own_hook:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ends = []
    with _tracer(ddp, args) as tracer:
        for step in range(args.steps):
            for micro in range(args.accum):
                tokens = torch.randint(0, 1000, (8, 16))
                target = torch.randint(0, 10, (8,))
                last = micro == args.accum - 1
                with (tracer.microbatch(micro) if tracer else contextlib.nullcontext()):
                    if args.no_sync and not last:
                        with ddp.no_sync():
                            nn.functional.cross_entropy(ddp(tokens), target).backward()
                    else:
                        nn.functional.cross_entropy(ddp(tokens), target).backward()
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)
            opt.step()
            opt.zero_grad()
            if tracer:
                tracer.step()
            if step == 2 and dist.get_rank() == args.fail_rank:
                os._exit(3)
            ends.append(time.perf_counter())
    if args.report and dist.get_rank() == 0:  # the steady state: the second half's mean step
        half = ends[len(ends) // 2:]
        print(f"step_ms={1000 * (half[-1] - half[0]) / max(1, len(half) - 1):.3f}", flush=True)
    dist.barrier()
    # Free DDP before the group: its reducer, freed with the GIL held, must not be the group's
    # last owner. Then ~ProcessGroupGloo joins a gloo thread that needs the GIL to free a
    # finished work (pytorch#56297): the rank hung at exit in 2 of 30 armed captures on 2 busy
    # cores. destroy_process_group frees the group with the GIL released.
    del ddp, model, opt
    gc.collect()
    dist.destroy_process_group()


def _tracer(model, args):
    if not args.tracer:
        return contextlib.nullcontext()
    from overlapscope.tracer import RunFacts, TraceConfig, Tracer

    return Tracer(model, TraceConfig(args.tracer, calibrate=False),
                  RunFacts(tokens_per_microbatch=128, micro_batch_size=8, accumulation_steps=args.accum,
                           no_sync=args.no_sync))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--no-sync", action="store_true")
    p.add_argument("--own-hook", action="store_true")
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--sleep-ms", type=float, default=0)
    p.add_argument("--spawn", type=int, default=0)
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--tracer", metavar="DIR")
    p.add_argument("--report", action="store_true", help="rank 0 prints its mean step time (second half)")
    args = p.parse_args()
    if args.spawn:
        mp.spawn(train, args=(args.spawn, args), nprocs=args.spawn)
    else:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)


if __name__ == "__main__":
    sys.exit(main())
