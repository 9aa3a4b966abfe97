"""A plain FSDP2 (``fully_shard``) training script on CPU gloo that knows nothing of
overlapscope: each block is a unit, the root the last. Launched by torchrun.

Options: --steps N, --accum K (micro-batches per optimizer step), --tracer DIR (the same
loop inside overlapscope's ``Tracer``; only this option imports overlapscope).
"""

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--tracer", metavar="DIR")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Flatten(),
                          *[nn.Sequential(nn.Linear(64 * 16 if i == 0 else 256, 256), nn.ReLU()) for i in range(3)],
                          nn.Linear(256, 10))
    for block in model[2:5]:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.001)
    tracer = None
    if args.tracer:
        from overlapscope.tracer import RunFacts, TraceConfig, Tracer

        tracer = Tracer(model, TraceConfig(args.tracer, calibrate=False),
                        RunFacts(tokens_per_microbatch=128, micro_batch_size=8, accumulation_steps=args.accum))
    with tracer or contextlib.nullcontext():
        for _ in range(args.steps):
            for micro in range(args.accum):
                with tracer.microbatch(micro) if tracer else contextlib.nullcontext():
                    tokens = torch.randint(0, 1000, (8, 16))
                    nn.functional.cross_entropy(model(tokens), torch.randint(0, 10, (8,))).backward()
            opt.step()
            opt.zero_grad()
            if tracer:
                tracer.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
