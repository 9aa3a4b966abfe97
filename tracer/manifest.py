"""The run manifest: one JSON file of facts that traces lack, written by rank 0.

The keys are the contract's typed struct (``overlapscope.contract.manifest``);
``tracer/README.md`` says what each one means. Lists that do not apply to a run
are empty (``buckets`` of an FSDP run, ``units`` of a DDP run); single facts
that do not apply are null.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import torch

from overlapscope.contract import manifest as contract
from overlapscope.contract.manifest import WRAPPINGS, Manifest
from overlapscope.contract.names import MANIFEST_FILE, trace_file_name


@dataclass(frozen=True)
class RunFacts:
    """What the tracer cannot read from the model: how the training loop runs."""

    tokens_per_microbatch: int | None = None
    """Tokens one rank processes per micro-batch (T of the model)."""
    micro_batch_size: int | None = None
    """Samples one rank processes per micro-batch."""
    accumulation_steps: int = 1
    """Micro-batches per optimizer step."""
    no_sync: bool = False
    """Accumulation with gradient sync off for all but the last micro-batch."""
    wrapping: str | None = None
    """FSDP wrapping ("per-block" or "root-only"); None derives it from the units."""
    reduce_dtype: str | None = None
    """Gradient reduction dtype when a DDP comm hook changes it (e.g. "bfloat16")."""
    model: dict = field(default_factory=dict)
    """Whatever is known about the model (layers, hidden, seq_len, vocab, ...)."""
    command_line: str | None = None
    """The command that started the job; None takes this process's argv."""

    def __post_init__(self) -> None:
        for name in ("tokens_per_microbatch", "micro_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.accumulation_steps < 1:
            raise ValueError("accumulation_steps must be >= 1")
        if self.wrapping is not None and self.wrapping not in WRAPPINGS:
            raise ValueError(f"wrapping must be one of {', '.join(WRAPPINGS)}")
        if self.reduce_dtype is not None and not isinstance(getattr(torch, self.reduce_dtype, None), torch.dtype):
            raise ValueError(f"reduce_dtype {self.reduce_dtype!r} is not a torch dtype")


@dataclass(frozen=True)
class ModelFacts:
    """What the tracer read from the wrapped model."""

    parallelism: str
    """"ddp", "fsdp" or "hsdp"."""
    params: int
    """Parameter elements of the whole (unsharded) model."""
    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    gradient_bytes: int
    """Bytes of one full set of gradients at reduce dtype (what DP reduces)."""
    buckets: list[dict] = field(default_factory=list)
    units: list[dict] = field(default_factory=list)
    mesh: dict | None = None
    bucket_cap_mb: float | None = None
    bucket_cap_default: bool | None = None
    """DDP: bucket_cap_mb was left unset (torch then makes a 1 MiB first bucket)."""
    buckets_verified: bool | None = None
    """DDP: whether the hook's bucket sizes match the reducer's own log."""


def build_manifest(
    *,
    model_facts: ModelFacts,
    run_facts: RunFacts,
    ranks: list[dict],
    calibration: dict | None,
    profiled_steps: list[int],
    profile: dict,
    start_time: str,
    backend: str,
    nccl_version: str | None,
) -> Manifest:
    """The manifest of a run (the contract's struct; keys in contract order)."""
    wrapping = run_facts.wrapping
    if wrapping is None and model_facts.parallelism != "ddp":
        wrapping = "root-only" if len(model_facts.units) == 1 else "per-block"
    return msgspec.convert({
        "schema_version": contract.SCHEMA_VERSION,
        "world_size": len(ranks),
        "backend": backend,
        "devices": [{k: r[k] for k in ("rank", "device", "name", "memory_bytes")} for r in ranks],
        "parallelism": model_facts.parallelism,
        "params": model_facts.params,
        "param_dtype": _dtype_name(model_facts.param_dtype),
        "reduce_dtype": run_facts.reduce_dtype or _dtype_name(model_facts.reduce_dtype),
        "tokens_per_microbatch": run_facts.tokens_per_microbatch,
        "accumulation_steps": run_facts.accumulation_steps,
        "buckets": model_facts.buckets,
        "units": model_facts.units,
        "mesh": model_facts.mesh,
        "calibration": calibration,
        "torch_version": str(torch.__version__),
        "nccl_version": nccl_version,
        "hostnames": [r["hostname"] for r in ranks],
        "start_time": start_time,
        "command_line": run_facts.command_line or shlex.join([os.path.basename(sys.executable), *sys.argv]),
        "model": run_facts.model,
        "micro_batch_size": run_facts.micro_batch_size,
        "no_sync": run_facts.no_sync,
        "wrapping": wrapping,
        "bucket_cap_mb": model_facts.bucket_cap_mb,
        "bucket_cap_default": model_facts.bucket_cap_default,
        "profiled_steps": profiled_steps,
        "gradient_bytes": model_facts.gradient_bytes,
        "buckets_verified": model_facts.buckets_verified,
        "trace_files": [trace_file_name(r["rank"]) for r in ranks],
        "profile": profile,
    }, Manifest)


def write_manifest(out_dir: Path, manifest: Manifest) -> Path:
    """Write ``manifest.json`` atomically, so a reader never sees half a file."""
    path = out_dir / MANIFEST_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(contract.encode(manifest) + b"\n")
    tmp.replace(path)
    return path


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
