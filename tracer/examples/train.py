"""Train a small transformer LM data-parallel and capture a run bundle.

    python -m overlapscope.tracer.examples.train --parallel ddp|fsdp|hsdp --nproc N --steps S --out DIR

Spawns ``--nproc`` ranks itself, or runs as one rank under ``torchrun``
(detected from ``RANK``/``WORLD_SIZE``). ``--help`` lists every option.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from overlapscope.tracer import RunFacts, TraceConfig, Tracer
from overlapscope.tracer.examples.launch import launch, running_under_torchrun
from overlapscope.tracer.examples.model import TinyLM, lm_loss, synthetic_batches
from overlapscope.tracer.examples.options import TrainConfig, UsageError, parse_args
from overlapscope.tracer.examples.parallelize import parallelize

PROG = "python -m overlapscope.tracer.examples.train"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    world_size = int(os.environ["WORLD_SIZE"]) if running_under_torchrun() else None
    try:
        cfg = parse_args(argv, command_line=shlex.join(["python", "-m", "overlapscope.tracer.examples.train", *argv]),
                         world_size=world_size)
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    return launch(run_rank, cfg)


def run_rank(cfg: TrainConfig, rank: int, world_size: int, local_rank: int) -> None:
    """One rank's whole job: set up, train (traced or not), write losses."""
    device = _device(cfg, local_rank)
    losses = train(cfg, rank, world_size, device)
    if cfg.loss_file:
        gathered: list = [None] * world_size
        dist.all_gather_object(gathered, losses)
        if rank == 0:
            Path(cfg.loss_file).write_text(json.dumps({"losses": gathered}) + "\n")


def train(cfg: TrainConfig, rank: int, world_size: int, device: torch.device) -> list[float]:
    """Train ``cfg.steps`` optimizer steps; this rank's loss per step."""
    model_cfg = cfg.model_config()
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    model = parallelize(TinyLM(model_cfg).to(device), cfg, device, world_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    batches = iter(synthetic_batches(model_cfg, cfg.micro_batch_size, cfg.steps * cfg.accumulation_steps, cfg.seed, rank))
    step_losses = []
    with _tracer(model, cfg) as tracer:
        for _ in range(cfg.steps):
            loss = torch.zeros((), device=device)
            for i in range(cfg.accumulation_steps):
                tokens, targets = (t.to(device) for t in next(batches))
                last = i == cfg.accumulation_steps - 1
                with tracer.microbatch(i), _gradient_sync(model, cfg, enabled=last or not cfg.no_sync):
                    micro_loss = lm_loss(model(tokens), targets) / cfg.accumulation_steps
                    if rank == cfg.slow_rank:
                        time.sleep(cfg.slow_ms / 1000)  # a straggler: late to every backward
                    micro_loss.backward()
                loss += micro_loss.detach()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step_losses.append(loss)
            tracer.step()
    # One device-to-host copy at the end: .item() per step would sync inside the trace.
    return torch.stack(step_losses).tolist()


def _tracer(model: nn.Module, cfg: TrainConfig):
    hook, state = _ddp_hook(model, cfg)
    if not cfg.trace:
        if hook is not None:
            model.register_comm_hook(state, hook)
        return _Untraced()
    model_cfg = cfg.model_config()
    facts = RunFacts(
        tokens_per_microbatch=cfg.micro_batch_size * model_cfg.seq_len,
        micro_batch_size=cfg.micro_batch_size,
        accumulation_steps=cfg.accumulation_steps,
        no_sync=cfg.no_sync,
        wrapping=None if cfg.parallel == "ddp" else (cfg.wrapping or "per-block"),
        reduce_dtype=cfg.reduce_dtype if cfg.parallel == "ddp" else None,
        model={"name": "TinyLM", "size": cfg.model_size, **asdict(model_cfg),
               "fsdp_version": None if cfg.parallel == "ddp" else (cfg.fsdp_version or 2)},
        command_line=cfg.command_line,
    )
    config = TraceConfig(out_dir=cfg.out, profile=cfg.profile_config(), calibrate=cfg.calibrate,
                         reduce_in_place=cfg.reduce_in_place)
    return Tracer(model, config, facts, ddp_comm_hook=hook, ddp_comm_state=state)


def _ddp_hook(model: nn.Module, cfg: TrainConfig):
    """DDP with --reduce-dtype bfloat16: PyTorch's bf16 compression hook."""
    if cfg.parallel != "ddp" or cfg.reduce_dtype in (None, "float32"):
        return None, None
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

    return bf16_compress_hook, model.process_group


@contextlib.contextmanager
def _gradient_sync(model: nn.Module, cfg: TrainConfig, enabled: bool) -> Iterator[None]:
    """Turn gradient reduction off for this micro-batch when ``enabled`` is False."""
    if enabled:
        yield
    elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:  # DDP and FSDP1
        with model.no_sync():
            yield


class _Untraced:
    """The tracer's interface doing nothing, for runs without it."""

    def __enter__(self) -> _Untraced:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def step(self) -> None:
        pass

    def microbatch(self, index: int) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


def _device(cfg: TrainConfig, local_rank: int) -> torch.device:
    if cfg.device_type == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


if __name__ == "__main__":
    sys.exit(main())
