"""The overlap condition: when does the communication hide behind compute?

Pure functions, no I/O. docs/model.md, "When communication hides" (the
tokens-per-GPU threshold T >= F/W (N-1)/N and its variants per stage, HSDP's
replica all-reduce included) and "The verdict". Notation and units as in
``model.memory``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from overlapscope.analyzer.model.memory import GRAD_BYTES, WEIGHT_BYTES, check_count, check_positive, check_stage

# --- compute -------------------------------------------------------------------------

# FLOPs per parameter and token (docs/model.md): the forward pass multiplies once
# (2), the backward twice (one matmul for the input gradient, one for the weight
# gradient: 4). Attention scores are left out.
FORWARD_FLOPS_PER_PARAM = 2
BACKWARD_FLOPS_PER_PARAM = 4
# The backward's share of one micro-batch's compute: 4 / (2 + 4). The hiding
# compute of DDP's all-reduce and of ZeRO's reduce-scatter.
BACKWARD_SHARE = BACKWARD_FLOPS_PER_PARAM / (FORWARD_FLOPS_PER_PARAM + BACKWARD_FLOPS_PER_PARAM)


# --- overlap: tokens that hide the communication ------------------------------------------


def tokens_to_hide(
    flops_per_s: float, bandwidth_bytes_per_s: float, gpus: int | None = None,
    grad_bytes: float = GRAD_BYTES,
) -> float:
    """Tokens per GPU per micro-batch above which the DDP all-reduce hides (docs/model.md).

    T >= (grad_bytes / 2) F / W (N-1)/N: bf16 gives F/W (N-1)/N, fp32 reduction
    doubles it. ``gpus=None`` gives the large-N approximation F/W.
    """
    check_positive("flops_per_s", flops_per_s)
    check_positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    check_positive("grad_bytes", grad_bytes)
    share = 1.0
    if gpus is not None:
        check_count("gpus", gpus)
        share = (gpus - 1) / gpus
    return grad_bytes / 2 * flops_per_s / bandwidth_bytes_per_s * share


def stage_tokens_to_hide(
    stage: str, flops_per_s: float, bandwidth_bytes_per_s: float, gpus: int | None = None,
    grad_bytes: float = GRAD_BYTES, weight_bytes: float = WEIGHT_BYTES,
    reduce_bandwidth_bytes_per_s: float | None = None, replicas: int | None = None,
    replicate_bandwidth_bytes_per_s: float | None = None,
) -> float:
    """Tokens per GPU per micro-batch at which a stage's comm time equals its compute.

    The comm is held against the compute that can hide it (docs/model.md, the
    overlap condition and the worked example, step 4):

    - ddp: all-reduce of the gradients against the backward pass (4 Psi T / F);
    - zero1, zero2: reduce-scatter of the gradients against the backward pass (the
      worked example's "0.50 s, just under the 0.53 s backward"); the weight
      all-gather after the optimizer step hides behind nothing and is left out;
    - zero3: per phase, forward all-gather against the forward pass and backward
      all-gather plus reduce-scatter against the backward pass; the worse phase
      counts (with bf16 both equal F/W (N-1)/N);
    - hsdp: zero3 inside the shard group (``gpus`` = G), and in the backward phase
      also the all-reduce of each rank's gradient shard (Psi/G elements) across the
      ``replicas`` (R = N_d / G) at ``replicate_bandwidth_bytes_per_s``.

    ``bandwidth_bytes_per_s`` is W of the stage's collective (the all-reduce for
    ddp, the all-gather for zero3 and hsdp); ``reduce_bandwidth_bytes_per_s`` W of
    the reduce-scatter where it differs (zero1/2/3, hsdp; kinds reach different bus
    bandwidths on the same links, gloo's by 4x); ``replicate_bandwidth_bytes_per_s``
    W of hsdp's replica all-reduce (another group, often other links). Omitted: the
    same W.
    """
    check_stage(stage)
    check_positive("grad_bytes", grad_bytes)
    check_positive("weight_bytes", weight_bytes)
    base = tokens_to_hide(flops_per_s, bandwidth_bytes_per_s, gpus, grad_bytes=2)
    reduce_base = base if reduce_bandwidth_bytes_per_s is None else tokens_to_hide(
        flops_per_s, reduce_bandwidth_bytes_per_s, gpus, grad_bytes=2)
    if stage == "ddp":
        return grad_bytes / 2 * base
    if stage in ("zero1", "zero2"):
        return grad_bytes / 4 * reduce_base
    forward = weight_bytes / 2 * base
    backward = (weight_bytes * base + grad_bytes * reduce_base) / 4
    if stage == "zero3":
        return max(forward, backward)
    return max(forward, backward + _replica_tokens(flops_per_s, bandwidth_bytes_per_s, gpus, grad_bytes,
                                                   replicas, replicate_bandwidth_bytes_per_s))


def _replica_tokens(flops_per_s: float, bandwidth_bytes_per_s: float, group: int | None, grad_bytes: float,
                    replicas: int | None, replicate_bandwidth_bytes_per_s: float | None) -> float:
    """HSDP's replica all-reduce in tokens of backward (docs/model.md): gb Psi / G bytes, ring
    all-reduced over R ranks, take 2 (R-1)/R gb Psi / (G W_ar); the backward's 4 Psi T / F
    hides them when T >= 2 gb / (4 G) x F / W_ar x (R-1)/R = gb / (2 G) x F / W_ar x (R-1)/R."""
    if group is None or replicas is None:
        raise ValueError("the hsdp verdict needs the shard group size G (gpus) and the replicas R")
    check_count("replicas", replicas)
    w = replicate_bandwidth_bytes_per_s if replicate_bandwidth_bytes_per_s is not None else bandwidth_bytes_per_s
    return grad_bytes / (2 * group) * tokens_to_hide(flops_per_s, w, replicas, grad_bytes=2)


# Verdict thresholds on ratio = comm time / compute time that should hide it.
# Each entry: (ratio upper bound, verdict, reason). Kept in this one place.
VERDICT_THRESHOLDS = (
    (0.8, "hidden",
     "comm needs at most 80% of the compute that hides it; the 20% margin covers NCCL "
     "kernels sharing SMs and memory with compute during overlap, bus bandwidth below "
     "nccl-tests' idle figure, and latency"),
    (1.0, "marginal",
     "comm needs 80-100% of the compute that hides it: hidden on paper, exposed as soon "
     "as bandwidth drops under overlap"),
    (math.inf, "exposed",
     "comm takes longer than the compute that should hide it, even on paper"),
)


@dataclass(frozen=True)
class OverlapVerdict:
    """Whether a stage's communication hides behind compute, by the data-parallel model."""

    tokens_to_hide: float
    """Tokens per GPU per micro-batch at which comm time equals compute time."""
    ratio: float
    """Comm time / compute time that should hide it (= tokens_to_hide / tokens)."""
    verdict: str
    """``hidden``, ``marginal`` or ``exposed`` (see ``VERDICT_THRESHOLDS``)."""
    reason: str
    """One sentence: why this verdict."""


def verdict_of(ratio: float) -> tuple[str, str]:
    """(verdict, reason) of a comm-to-compute ratio (``VERDICT_THRESHOLDS``)."""
    for bound, verdict, reason in VERDICT_THRESHOLDS:
        if ratio <= bound:
            return verdict, reason
    raise AssertionError("unreachable: the last threshold is infinite")


def overlap_verdict(
    tokens: float, flops_per_s: float, bandwidth_bytes_per_s: float, gpus: int | None = None,
    stage: str = "ddp", grad_bytes: float = GRAD_BYTES, weight_bytes: float = WEIGHT_BYTES,
    reduce_bandwidth_bytes_per_s: float | None = None, replicas: int | None = None,
    replicate_bandwidth_bytes_per_s: float | None = None,
) -> OverlapVerdict:
    """Verdict for ``tokens`` per GPU per micro-batch (see ``stage_tokens_to_hide``).

    Psi cancels (docs/model.md), so no parameter count is needed.
    """
    check_positive("tokens", tokens)
    threshold = stage_tokens_to_hide(stage, flops_per_s, bandwidth_bytes_per_s, gpus,
                                     grad_bytes, weight_bytes, reduce_bandwidth_bytes_per_s,
                                     replicas, replicate_bandwidth_bytes_per_s)
    ratio = threshold / tokens
    return OverlapVerdict(threshold, ratio, *verdict_of(ratio))
