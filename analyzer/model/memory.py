"""The analytic model of data parallelism, ZeRO and FSDP: pure functions, no I/O.

Every formula is derived in docs/model.md. Notation and units:

- ``params`` (Psi): number of parameters;
- ``gpus`` (N_d): data-parallel GPUs; ``group`` (G): HSDP shard group, R = N_d / G;
- ``k`` (K): optimizer bytes per parameter, 12 for mixed-precision Adam;
- ``accum`` (m): micro-batches per optimizer step (gradient accumulation);
- ``tokens`` (T): tokens one GPU processes per micro-batch;
- ``flops_per_s`` (F): achieved matmul FLOP/s of one GPU;
- ``bandwidth_bytes_per_s`` (W): bus bandwidth per GPU and direction (nccl-tests);
- weights and gradients are bf16 (``WEIGHT_BYTES = GRAD_BYTES = 2``); 1 GB = 1e9 bytes.

Stages: ``ddp`` (ZeRO-0), ``zero1``, ``zero2``, ``zero3`` (FSDP full shard) and
``hsdp`` (FSDP hybrid shard: ZeRO-3 inside groups of G, replicas across them).
This module: model-state memory and the collectives (elements, bytes) of a step.
Tokens to hide and the verdict live in ``model.hide``; ring collectives, bus
bandwidth and the latency fit in ``model.ring``; the overlap timelines (DDP
buckets, FSDP units) in ``model.replay``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from overlapscope.analyzer.model.ring import wire_bytes

STAGES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
BYTES_PER_GB = 1e9
WEIGHT_BYTES = 2  # bf16 weight
GRAD_BYTES = 2  # bf16 gradient
ADAM_K = 12  # fp32 master weight + m + v, 4 bytes each


# --- validation ------------------------------------------------------------------


def check_positive(name: str, value: float) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number > 0."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (real and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def check_count(name: str, value: int) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an integer >= 1."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_stage(stage: str) -> str:
    """Return ``stage`` if it is one of ``STAGES``, else raise ``ValueError``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    return stage


def check_group(gpus: int, group: int | None, stage: str) -> None:
    """For ``hsdp``: raise ``ValueError`` unless ``group`` (G) is given and divides ``gpus``."""
    if stage != "hsdp":
        return
    if group is None:
        raise ValueError("hsdp needs the shard group size G (GPUs per group, usually one node)")
    check_count("group", group)
    if group > gpus or gpus % group:
        raise ValueError(f"group {group} must divide the number of GPUs {gpus}")


def to_gb(num_bytes: float) -> float:
    """Bytes to GB (1 GB = 1e9 bytes, as docs/model.md counts)."""
    return num_bytes / BYTES_PER_GB


# --- model states (memory) -----------------------------------------------------------


@dataclass(frozen=True)
class ModelStateBytes:
    """Model-state bytes one GPU holds for one stage (activations not included)."""

    weights_bytes: float
    """bf16 weights: 2 Psi, or 2 Psi / N_d when sharded (ZeRO-3), 2 Psi / G (HSDP)."""
    grads_bytes: float
    """bf16 gradients: 2 Psi, or 2 Psi / N_d when sharded (ZeRO-2, ZeRO-3)."""
    optimizer_bytes: float
    """Optimizer states: K Psi, or K Psi / N_d when sharded (every ZeRO stage)."""

    @property
    def total_bytes(self) -> float:
        """All model states of one GPU (bytes)."""
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


def model_state_breakdown(
    stage: str, params: float, gpus: int, k: float = ADAM_K, group: int | None = None
) -> ModelStateBytes:
    """Weights, gradients and optimizer states per GPU (bytes), docs/model.md, model-state memory.

    DDP (4+K)Psi; ZeRO-1 4Psi + K Psi/N; ZeRO-2 2Psi + (2+K)Psi/N; ZeRO-3 (4+K)Psi/N;
    HSDP (4+K)Psi/G (``group`` required for ``hsdp``, ignored otherwise).
    """
    check_stage(stage)
    check_positive("params", params)
    check_count("gpus", gpus)
    if k < 0:
        raise ValueError(f"k must be >= 0 bytes per parameter, got {k}")
    check_group(gpus, group, stage)
    shards = {"ddp": (1, 1, 1), "zero1": (1, 1, gpus), "zero2": (1, gpus, gpus),
              "zero3": (gpus, gpus, gpus), "hsdp": (group, group, group)}[stage]
    w_div, g_div, o_div = shards
    return ModelStateBytes(
        weights_bytes=WEIGHT_BYTES * params / w_div,
        grads_bytes=GRAD_BYTES * params / g_div,
        optimizer_bytes=k * params / o_div,
    )


def model_state_bytes(
    stage: str, params: float, gpus: int, k: float = ADAM_K, group: int | None = None
) -> float:
    """Model-state bytes per GPU for ``stage`` (see ``model_state_breakdown``)."""
    return model_state_breakdown(stage, params, gpus, k, group).total_bytes


# --- communication per step ----------------------------------------------------------


@dataclass(frozen=True)
class Collective:
    """One kind of collective that a stage runs, as seen by one GPU."""

    kind: str
    """``all_reduce``, ``reduce_scatter`` or ``all_gather``."""
    tensor: str
    """What moves: ``weights`` or ``gradients``."""
    message_elements: float
    """Elements of the full buffer (all-gather output, reduce-scatter input)."""
    bytes_per_element: float
    """2 for bf16, 4 for fp32."""
    group_size: int
    """Ranks in the collective's process group."""
    count: int
    """How many times per optimizer step."""
    link: str
    """``all`` (whole data-parallel group), ``intra`` (HSDP shard group, usually
    NVLink) or ``inter`` (HSDP replica group, the network)."""

    @property
    def volume_elements(self) -> float:
        """Elements per step in the model's accounting: an all-reduce counts twice
        (reduce-scatter + all-gather), before the (N-1)/N factor."""
        return self.count * self.message_elements * (2 if self.kind == "all_reduce" else 1)

    @property
    def wire_elements(self) -> float:
        """Elements one GPU actually sends per step: volume x (N-1)/N."""
        return self.volume_elements * (self.group_size - 1) / self.group_size

    @property
    def wire_bytes(self) -> float:
        """Bytes one GPU sends per step on a ring."""
        return self.count * wire_bytes(self.kind, self.message_elements * self.bytes_per_element,
                                       self.group_size)


def stage_collectives(
    stage: str,
    params: float,
    gpus: int,
    accum: int = 1,
    group: int | None = None,
    grad_bytes: float = GRAD_BYTES,
    weight_bytes: float = WEIGHT_BYTES,
    reshard_after_forward: bool = True,
) -> tuple[Collective, ...]:
    """The collectives of one optimizer step of ``stage`` (docs/model.md, communication volume).

    - DDP: one all-reduce of the gradients per step (``no_sync`` inside accumulation).
    - ZeRO-1: one reduce-scatter of the gradients and one all-gather of the new
      weights per step.
    - ZeRO-2: a reduce-scatter per micro-batch (no full gradient is kept) and one
      all-gather per step: (m+1) Psi.
    - ZeRO-3: per micro-batch a forward all-gather, a backward all-gather and a
      reduce-scatter: 3 m Psi; ``reshard_after_forward=False`` drops the backward
      all-gather: 2 m Psi.
    - HSDP: ZeRO-3 inside each group of G GPUs, plus an all-reduce of each GPU's
      gradient shard (Psi/G elements) across the R = N/G replicas. Assumption (the
      model states the per-micro-batch case only): with accumulation the replica
      all-reduce runs in every micro-batch, FSDP2's default.
    """
    check_stage(stage)
    check_positive("params", params)
    check_count("gpus", gpus)
    check_count("accum", accum)
    check_positive("grad_bytes", grad_bytes)
    check_positive("weight_bytes", weight_bytes)
    check_group(gpus, group, stage)

    def coll(kind, tensor, elements, count, size=gpus, link="all"):
        nbytes = grad_bytes if tensor == "gradients" else weight_bytes
        return Collective(kind, tensor, elements, nbytes, size, count, link)

    gathers = 2 if reshard_after_forward else 1
    if stage == "ddp":
        return (coll("all_reduce", "gradients", params, 1),)
    if stage in ("zero1", "zero2"):
        scatters = accum if stage == "zero2" else 1
        return (coll("reduce_scatter", "gradients", params, scatters),
                coll("all_gather", "weights", params, 1))
    if stage == "zero3":
        return (coll("all_gather", "weights", params, gathers * accum),
                coll("reduce_scatter", "gradients", params, accum))
    replicas = gpus // group
    return (coll("all_gather", "weights", params, gathers * accum, group, "intra"),
            coll("reduce_scatter", "gradients", params, accum, group, "intra"),
            coll("all_reduce", "gradients", params / group, accum, replicas, "inter"))


@dataclass(frozen=True)
class CommPerGpu:
    """What one GPU sends per optimizer step."""

    elements: float
    """The model's volume (DDP 2Psi, ZeRO-1 2Psi, ZeRO-2 (m+1)Psi, ZeRO-3 3mPsi), before (N-1)/N."""
    wire_elements: float
    """Elements actually sent: each collective's volume x (n-1)/n of its group."""
    bytes: float
    """Bytes actually sent: elements x bytes per element x (n-1)/n."""
    intra_bytes: float | None = None
    """HSDP only: bytes sent inside the shard group (all-gathers, reduce-scatters)."""
    inter_bytes: float | None = None
    """HSDP only: bytes sent across replicas (the all-reduce of the gradient shard)."""


def comm_per_gpu(
    stage: str,
    params: float,
    gpus: int,
    accum: int = 1,
    group: int | None = None,
    grad_bytes: float = GRAD_BYTES,
    weight_bytes: float = WEIGHT_BYTES,
    reshard_after_forward: bool = True,
) -> CommPerGpu:
    """Elements and bytes one GPU sends per optimizer step (see ``stage_collectives``)."""
    colls = stage_collectives(stage, params, gpus, accum, group, grad_bytes, weight_bytes,
                              reshard_after_forward)
    intra = inter = None
    if stage == "hsdp":
        intra = sum(c.wire_bytes for c in colls if c.link == "intra")
        inter = sum(c.wire_bytes for c in colls if c.link == "inter")
    return CommPerGpu(
        elements=sum(c.volume_elements for c in colls),
        wire_elements=sum(c.wire_elements for c in colls),
        bytes=sum(c.wire_bytes for c in colls),
        intra_bytes=intra,
        inter_bytes=inter,
    )
