"""Command-line options of the example, as one validated dataclass.

Every flag maps to one ``TrainConfig`` field; bad values raise ``UsageError``
with a one-line message (the CLI prints it instead of a traceback).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields, replace

import torch

from overlapscope.tracer.manifest import WRAPPINGS
from overlapscope.tracer.profiling import ProfileConfig
from overlapscope.tracer.examples.model import MODEL_SIZES, ModelConfig

PARALLELISMS = ("ddp", "fsdp", "hsdp")
BACKENDS = ("gloo", "nccl")
DTYPES = ("float32", "bfloat16")


class UsageError(ValueError):
    """An option value the example cannot run with."""


@dataclass(frozen=True)
class TrainConfig:
    """One run of the example; defaults make a 2-rank CPU DDP run of the tiny model."""

    parallel: str = "ddp"
    """"ddp", "fsdp" (FSDP over all ranks) or "hsdp" (2-D mesh: replicate x shard)."""
    nproc: int = 2
    """Ranks to spawn (under torchrun: WORLD_SIZE)."""
    steps: int = 5
    """Optimizer steps; at least wait + warmup + active when tracing."""
    out: str | None = None
    """Bundle folder; required unless ``trace`` is False."""
    trace: bool = True
    """Run under the tracer (False: the same training without it, for comparison)."""
    calibrate: bool = True
    """Measure F and W before profiling."""
    reduce_in_place: bool = False
    """Each rank reduces its trace to its per-rank tables at the end (TraceConfig.reduce_in_place)."""
    wait_steps: int = 1
    warmup_steps: int = 1
    active_steps: int = 3
    model_size: str = "tiny"
    """A preset of ``MODEL_SIZES``."""
    layers: int | None = None
    """Override the preset's number of blocks."""
    micro_batch_size: int = 4
    accumulation_steps: int = 1
    no_sync: bool = False
    """Skip gradient sync in all but the last micro-batch (DDP/FSDP1 ``no_sync``, FSDP2 ``set_requires_gradient_sync``)."""
    bucket_cap_mb: float | None = None
    """DDP bucket size (DDP's default 25 when None)."""
    wrapping: str | None = None
    """FSDP: "per-block" (default) or "root-only"."""
    reshard_after_forward: bool | None = None
    """FSDP: reshard the blocks after forward (default True)."""
    fsdp_version: int | None = None
    """FSDP: 2 (``fully_shard``, default) or 1 (``FullyShardedDataParallel``)."""
    replicate: int | None = None
    """HSDP: size of the replicate mesh dimension (default 2)."""
    param_dtype: str = "float32"
    """FSDP mixed-precision compute dtype (DDP trains in float32)."""
    reduce_dtype: str | None = None
    """Gradient reduction dtype; DDP with bfloat16 uses the bf16 compression hook."""
    backend: str | None = None
    """"gloo" (CPU) or "nccl" (GPU); default nccl when a GPU is present."""
    slow_rank: int | None = None
    """Rank that sleeps ``slow_ms`` before every backward (a straggler)."""
    slow_ms: float = 0.0
    seed: int = 0
    lr: float = 3e-3
    loss_file: str | None = None
    """Write every rank's per-step losses here as JSON."""
    command_line: str | None = None
    """Recorded in the manifest (set by the CLI)."""

    def __post_init__(self) -> None:
        self._check_choices()
        self._check_counts()
        self._check_applicability()

    def _check_choices(self) -> None:
        _choice("--parallel", self.parallel, PARALLELISMS)
        _choice("--model-size", self.model_size, tuple(MODEL_SIZES))
        _choice("--param-dtype", self.param_dtype, DTYPES)
        if self.reduce_dtype is not None:
            _choice("--reduce-dtype", self.reduce_dtype, DTYPES)
        if self.wrapping is not None:
            _choice("--wrapping", self.wrapping, WRAPPINGS)
        if self.backend is not None:
            _choice("--backend", self.backend, BACKENDS)
        if self.fsdp_version not in (None, 1, 2):
            raise UsageError("--fsdp-version must be 1 or 2")

    def _check_counts(self) -> None:
        for flag, value in (("--nproc", self.nproc), ("--steps", self.steps), ("--micro-batch-size", self.micro_batch_size),
                            ("--accumulation-steps", self.accumulation_steps), ("--active-steps", self.active_steps),
                            ("--wait-steps", self.wait_steps)):
            if value < 1:
                raise UsageError(f"{flag} must be >= 1, got {value}")
        if self.warmup_steps < 0:
            raise UsageError("--warmup-steps must be >= 0")
        if self.layers is not None and self.layers < 1:
            raise UsageError("--layers must be >= 1")
        if self.bucket_cap_mb is not None and self.bucket_cap_mb <= 0:
            raise UsageError("--bucket-cap-mb must be > 0")
        if self.trace and self.steps < self.profile_config().total_steps:
            raise UsageError(f"--steps must be >= wait + warmup + active = {self.profile_config().total_steps}")
        if self.trace and not self.out:
            raise UsageError("--out DIR is required (or --no-trace)")
        if self.slow_ms < 0:
            raise UsageError("--slow-ms must be >= 0")
        if self.slow_rank is not None and not 0 <= self.slow_rank < self.nproc:
            raise UsageError(f"--slow-rank must be a rank in 0..{self.nproc - 1}")
        if self.no_sync and self.accumulation_steps < 2:
            raise UsageError("--no-sync needs --accumulation-steps >= 2")

    def _check_applicability(self) -> None:
        sharded = self.parallel != "ddp"
        for flag, value, applies in (
            ("--bucket-cap-mb", self.bucket_cap_mb, not sharded),
            ("--wrapping", self.wrapping, sharded),
            ("--reshard-after-forward", self.reshard_after_forward, sharded),
            ("--fsdp-version", self.fsdp_version, sharded),
            ("--replicate", self.replicate, self.parallel == "hsdp"),
        ):
            if value is not None and not applies:
                raise UsageError(f"{flag} does not apply to --parallel {self.parallel}")
        if self.param_dtype != "float32" and not sharded:
            raise UsageError("--param-dtype applies to fsdp/hsdp (FSDP mixed precision); DDP trains in float32")
        if self.parallel == "hsdp":
            if self.replicate_size < 1 or self.nproc % self.replicate_size:
                raise UsageError(f"--replicate {self.replicate_size} must divide the {self.nproc} ranks")
        if self.device_type == "cuda" and not torch.cuda.is_available():
            raise UsageError("--backend nccl needs a CUDA GPU")
        if self.device_type == "cuda" and self.nproc > torch.cuda.device_count() and "LOCAL_RANK" not in os.environ:
            raise UsageError(f"--nproc {self.nproc} is more than the {torch.cuda.device_count()} GPUs here")

    @property
    def backend_name(self) -> str:
        return self.backend or ("nccl" if torch.cuda.is_available() else "gloo")

    @property
    def device_type(self) -> str:
        return "cuda" if self.backend_name == "nccl" else "cpu"

    @property
    def replicate_size(self) -> int:
        return self.replicate or 2

    def model_config(self) -> ModelConfig:
        preset = MODEL_SIZES[self.model_size]
        return replace(preset, layers=self.layers) if self.layers else preset

    def profile_config(self) -> ProfileConfig:
        return ProfileConfig(wait_steps=self.wait_steps, warmup_steps=self.warmup_steps, active_steps=self.active_steps)


def _choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m overlapscope.tracer.examples.train", description="Train a small LM data-parallel and trace it.")
    p.add_argument("--parallel", choices=PARALLELISMS, default="ddp")
    p.add_argument("--nproc", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", help="bundle folder")
    p.add_argument("--no-trace", dest="trace", action="store_false", help="train without the tracer")
    p.add_argument("--no-calibrate", dest="calibrate", action="store_false")
    p.add_argument("--reduce-in-place", action="store_true",
                   help="each rank writes its per-rank tables next to its trace (ingest collects them)")
    p.add_argument("--wait-steps", type=int, default=1)
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--active-steps", type=int, default=3)
    p.add_argument("--model-size", choices=tuple(MODEL_SIZES), default="tiny")
    p.add_argument("--layers", type=int)
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--accumulation-steps", type=int, default=1)
    p.add_argument("--no-sync", action="store_true", help="no gradient sync before the last micro-batch")
    p.add_argument("--bucket-cap-mb", type=float, help="DDP bucket size in MiB")
    p.add_argument("--wrapping", choices=WRAPPINGS)
    p.add_argument("--reshard-after-forward", type=_parse_bool, metavar="{true,false}")
    p.add_argument("--fsdp-version", type=int, choices=(1, 2))
    p.add_argument("--replicate", type=int, help="HSDP replicate degree (default 2)")
    p.add_argument("--param-dtype", choices=DTYPES, default="float32")
    p.add_argument("--reduce-dtype", choices=DTYPES)
    p.add_argument("--fp32-reduce", dest="reduce_dtype", action="store_const", const="float32",
                   help="same as --reduce-dtype float32")
    p.add_argument("--backend", choices=BACKENDS)
    p.add_argument("--slow-rank", type=int, help="rank that sleeps before every backward")
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--loss-file", help="write per-rank, per-step losses here (JSON)")
    return p


def parse_args(argv: list[str], command_line: str | None = None, world_size: int | None = None) -> TrainConfig:
    """Options to a validated ``TrainConfig``; ``world_size`` (torchrun) overrides ``--nproc``."""
    args = vars(build_parser().parse_args(argv))
    known = {f.name for f in fields(TrainConfig)}
    config = {k: v for k, v in args.items() if k in known}
    if world_size is not None:
        config["nproc"] = world_size
    return TrainConfig(**config, command_line=command_line)


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
