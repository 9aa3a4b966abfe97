"""One ``torch.profiler`` per rank with a wait/warmup/active schedule.

The schedule runs one cycle (``repeat=1``) so each rank writes exactly one
trace, ``rank-<r>.pt.trace.json.gz``, holding one ``ProfilerStep#N`` span per
active step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from overlapscope.contract.names import trace_file_name


@dataclass(frozen=True)
class ProfileConfig:
    """What the profiler records and when."""

    wait_steps: int = 1
    """Steps not recorded at all. At least 1: DDP's first iteration uses a
    provisional bucket layout that it rebuilds afterwards."""
    warmup_steps: int = 1
    """Steps traced but discarded, so start-up cost stays out of the trace."""
    active_steps: int = 3
    """Steps written to the trace."""
    record_shapes: bool = True
    """Input shapes of each op (the analyzer sizes gloo collectives from them)."""
    with_flops: bool = True
    """FLOP estimates of matmuls and convolutions."""
    profile_memory: bool = True
    """Allocator events, for memory timelines."""
    with_stack: bool = False
    """Python stacks: large traces, so off by default."""

    def __post_init__(self) -> None:
        if self.wait_steps < 1:
            raise ValueError("wait_steps must be >= 1 (DDP's first iteration uses provisional buckets)")
        if self.warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0")
        if self.active_steps < 1:
            raise ValueError("active_steps must be >= 1")

    @property
    def total_steps(self) -> int:
        """Steps a run needs before its trace is written."""
        return self.wait_steps + self.warmup_steps + self.active_steps

    def profiled_steps(self) -> list[int]:
        """The ``N`` of the ``ProfilerStep#N`` spans in the trace (numbered from 0)."""
        first = self.wait_steps + self.warmup_steps
        return list(range(first, first + self.active_steps))


def build_profiler(config: ProfileConfig, trace_path: Path) -> profile:
    """A profiler that writes one gzipped Chrome trace to ``trace_path``."""
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return profile(
        activities=activities,
        schedule=schedule(
            wait=config.wait_steps,
            warmup=config.warmup_steps,
            active=config.active_steps,
            repeat=1,
        ),
        on_trace_ready=_writer(trace_path),
        record_shapes=config.record_shapes,
        with_flops=config.with_flops,
        profile_memory=config.profile_memory,
        with_stack=config.with_stack,
    )


def trace_path(out_dir: Path, rank: int) -> Path:
    """Where ``rank`` writes its trace inside the bundle folder."""
    return out_dir / trace_file_name(rank)


def _writer(path: Path):
    def on_trace_ready(prof: profile) -> None:
        # A ".gz" path makes export_chrome_trace gzip the JSON it writes.
        prof.export_chrome_trace(str(path))

    return on_trace_ready
