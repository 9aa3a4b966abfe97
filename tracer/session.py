"""The tracer around a training loop: ``with Tracer(...) as tracer: ... tracer.step()``.

On entry it annotates DDP buckets (FSDP annotates itself), calibrates F and W
and starts the profiler; ``step()`` advances the profiler schedule; on exit
each rank's trace is on disk and rank 0 writes the manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from overlapscope.tracer.calibration import COLLECTIVE_KINDS, CalibrationConfig, CommTarget, calibrate
from overlapscope.tracer.ddp_buckets import BucketRecorder, CommHook, annotate_buckets, reducer_bucket_bytes
from overlapscope.tracer.facts import gather_rank_facts, nccl_version
from overlapscope.tracer.fsdp_units import is_fsdp, sharding_groups, sharding_layout
from overlapscope.contract.manifest import Manifest
from overlapscope.tracer.manifest import ModelFacts, RunFacts, build_manifest, write_manifest
from overlapscope.contract.names import microbatch_annotation
from overlapscope.tracer.profiling import ProfileConfig, build_profiler, trace_path


@dataclass(frozen=True)
class TraceConfig:
    """Where the bundle goes and what the tracer measures."""

    out_dir: str | Path
    """Bundle folder: ``rank-<r>.pt.trace.json.gz`` per rank and ``manifest.json``."""
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    """Profiler schedule and what it records."""
    calibrate: bool = True
    """Measure F and W before profiling (a few seconds); False writes ``calibration: null``."""
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    """Sizes and repetitions of the calibration."""
    reduce_in_place: bool = False
    """At the end of profiling, each rank reduces its own trace to its per-rank tables next
    to it (``rank-<r>.pt.trace.json.gz.overlapscope/``), in parallel on the job's nodes, so
    that ``overlapscope ingest`` only collects them. Runs ``overlapscope reduce-rank`` in
    a subprocess (the analyzer must be installed where the job runs); a failure is a
    warning, never the job's."""

    def __post_init__(self) -> None:
        if not str(self.out_dir):
            raise ValueError("out_dir must name a folder")


class Tracer:
    """Capture one run bundle of a DDP, FSDP2, FSDP1 or HSDP training loop.

    Create it after wrapping the model and before the first backward; call
    ``step()`` once per optimizer step and wrap each micro-batch's forward and
    backward in ``microbatch(i)``. Every rank must enter and leave it.

    For DDP, pass your comm hook as ``ddp_comm_hook``/``ddp_comm_state``
    instead of registering it: DDP takes one hook, and the tracer wraps yours.
    """

    def __init__(
        self,
        model: nn.Module,
        config: TraceConfig,
        facts: RunFacts | None = None,
        *,
        ddp_comm_hook: CommHook | None = None,
        ddp_comm_state: object = None,
    ):
        if not dist.is_initialized():
            raise RuntimeError("initialize the process group before creating the Tracer")
        if not isinstance(model, DistributedDataParallel) and not is_fsdp(model):
            raise TypeError("wrap the model in DistributedDataParallel or FSDP before tracing it")
        if ddp_comm_hook is not None and not isinstance(model, DistributedDataParallel):
            raise TypeError("ddp_comm_hook needs a DistributedDataParallel model")
        self.model = model
        self.config = config
        self.facts = facts or RunFacts()
        self.out_dir = Path(config.out_dir)
        self.rank = dist.get_rank()
        self.device = _model_device(model)
        self._hook = (ddp_comm_hook, ddp_comm_state)
        self._buckets: BucketRecorder | None = None
        self._profiler: torch.profiler.profile | None = None
        self._steps = 0
        self._start_time = ""
        self.calibration: dict | None = None

    def __enter__(self) -> Tracer:
        self._start_time = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if isinstance(self.model, DistributedDataParallel):
            self._buckets = annotate_buckets(self.model, *self._hook)
        if self.config.calibrate:
            param_dtype, reduce_dtype = self._dtypes()
            self.calibration = calibrate(
                self.config.calibration, self._comm_targets(), self.device, param_dtype, reduce_dtype
            )
        self._profiler = build_profiler(self.config.profile, trace_path(self.out_dir, self.rank))
        self._profiler.start()
        return self

    def step(self) -> None:
        """Mark the end of one optimizer step (advances the profiler schedule)."""
        self._profiler.step()
        self._steps += 1

    @contextlib.contextmanager
    def microbatch(self, index: int) -> Iterator[None]:
        """A trace range ``overlapscope:microbatch#<index>`` around one micro-batch."""
        with torch.profiler.record_function(microbatch_annotation(index)):
            yield

    def __exit__(self, exc_type, exc, tb) -> None:
        self._profiler.stop()
        if exc_type is not None:
            return  # a failing rank must not enter the manifest's collectives
        profile = self.config.profile
        if self._steps < profile.total_steps:
            # A cut-short schedule leaves a trailing, partial ProfilerStep in the trace.
            raise RuntimeError(
                f"the run took {self._steps} steps; the profiler schedule needs {profile.total_steps} "
                f"(wait {profile.wait_steps} + warmup {profile.warmup_steps} + active {profile.active_steps})"
            )
        ranks = gather_rank_facts(self.device)
        if self.rank == 0:
            write_manifest(self.out_dir, self._manifest(ranks, profile.profiled_steps()))
        if self.config.reduce_in_place:
            self._reduce_in_place()
        # Every rank leaves with the bundle complete on disk.
        dist.barrier()

    def _reduce_in_place(self) -> None:
        """This rank's trace reduced to its per-rank tables beside it (TraceConfig.reduce_in_place)."""
        import subprocess
        import sys

        command = [sys.executable, "-m", "overlapscope.cli", "reduce-rank", str(trace_path(self.out_dir, self.rank)),
                   "--parallelism", self._model_facts().parallelism]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            warnings.warn(f"rank {self.rank}: reduce in place failed ({done.stderr.strip()[-300:]}); ingest will "
                          "decode this rank's trace instead", stacklevel=3)

    def _manifest(self, ranks: list[dict], profiled: list[int]) -> Manifest:
        return build_manifest(
            model_facts=self._model_facts(),
            run_facts=self.facts,
            ranks=ranks,
            calibration=self.calibration,
            profiled_steps=profiled,
            profile=dataclasses.asdict(self.config.profile),
            start_time=self._start_time,
            backend=str(dist.get_backend()),
            nccl_version=nccl_version(),
        )

    def _model_facts(self) -> ModelFacts:
        if isinstance(self.model, DistributedDataParallel):
            return self._ddp_facts()
        layout = sharding_layout(self.model)
        return ModelFacts(
            parallelism=layout.parallelism,
            params=layout.params,
            param_dtype=layout.param_dtype,
            reduce_dtype=layout.reduce_dtype,
            gradient_bytes=layout.params * layout.reduce_dtype.itemsize,
            units=[u.to_json() for u in layout.units],
            mesh=layout.mesh,
        )

    def _ddp_facts(self) -> ModelFacts:
        module = self.model.module
        # no recorder: ``overlapscope capture`` found the job's own comm hook (the analyzer infers the buckets)
        buckets = self._buckets.buckets() if self._buckets is not None else []
        if not buckets and self._buckets is not None:
            warnings.warn("no synchronizing backward pass was seen: the manifest has no bucket map", stacklevel=3)
        reducer_bytes = reducer_bucket_bytes(self.model)
        param_dtype = next(module.parameters()).dtype
        return ModelFacts(
            parallelism="ddp",
            params=sum(p.numel() for p in module.parameters()),
            param_dtype=param_dtype,
            reduce_dtype=param_dtype,
            gradient_bytes=sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad),
            buckets=[b.to_json() for b in buckets],
            bucket_cap_mb=round(self.model.bucket_bytes_cap / 2**20, 4),  # DDP keeps whole bytes
            # torch records whether the cap was left unset (only then a 1 MiB first bucket);
            # older releases do not, and None says so.
            bucket_cap_default=getattr(self.model, "bucket_bytes_cap_default", None),
            buckets_verified=None if reducer_bytes is None else reducer_bytes == [b.bytes for b in buckets],
        )

    def _dtypes(self) -> tuple[torch.dtype, torch.dtype]:
        if isinstance(self.model, DistributedDataParallel):
            dtype = next(self.model.module.parameters()).dtype
            return dtype, getattr(torch, self.facts.reduce_dtype) if self.facts.reduce_dtype else dtype
        layout = sharding_layout(self.model)
        return layout.param_dtype, layout.reduce_dtype

    def _comm_targets(self) -> list[CommTarget]:
        if isinstance(self.model, DistributedDataParallel):
            group = self.model.process_group
            return [CommTarget("data_parallel", group)] if group.size() > 1 else []
        groups = sharding_groups(self.model)
        targets = []
        if groups.shard is not None:
            targets.append(CommTarget("shard", groups.shard, COLLECTIVE_KINDS))
        if groups.replicate is not None:
            targets.append(CommTarget("replicate", groups.replicate, ("all_reduce",)))
        return targets


def _model_device(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    if param is None:
        raise ValueError("the model has no parameters")
    device = param.device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device
