"""Calibrate F (matmul FLOP/s) and W (bus bandwidth) on the run's own hardware.

W comes from timed collectives on the process groups the run communicates on,
converted to bus bandwidth with the nccl-tests formulas; F from timed square
matmuls at the run's dtype. Everything runs before profiling starts and draws
no random numbers, so the trace and the training numerics stay untouched.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from overlapscope.contract.collectives import bus_factor

COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter")

# The *_single names replace *_tensor in recent PyTorch; older releases have only the latter.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


# Message sizes when none are configured: gloo on loopback saturates at a few
# MiB; NCCL needs tens of MiB before latency stops mattering.
CPU_MESSAGE_BYTES = (1 << 16, 1 << 20, 1 << 22)
GPU_MESSAGE_BYTES = (1 << 20, 1 << 24, 1 << 27)


@dataclass(frozen=True)
class CalibrationConfig:
    """How long and how hard calibration measures."""

    message_bytes: tuple[int, ...] | None = None
    """Full buffer sizes per collective (gathered output / scattered input), ascending;
    None picks ``CPU_MESSAGE_BYTES`` or ``GPU_MESSAGE_BYTES`` by device."""
    iterations: int = 5
    """Timed repetitions per measurement; the per-iteration mean is reported."""
    warmup_iterations: int = 1
    """Untimed repetitions first (connection set-up, allocator)."""
    matmul_size: int | None = None
    """Side of the square matmul; None picks 1024 on CPU and 8192 on GPU."""
    matmul_iterations: int = 5
    """Timed matmuls."""
    time_budget_s: float = 5.0
    """Stop measuring larger messages once collectives took this long in total."""

    def __post_init__(self) -> None:
        if self.message_bytes is not None:
            if not self.message_bytes or any(b <= 0 for b in self.message_bytes):
                raise ValueError("message_bytes must be positive sizes")
            if list(self.message_bytes) != sorted(self.message_bytes):
                raise ValueError("message_bytes must be ascending")
        if self.iterations < 1 or self.warmup_iterations < 0 or self.matmul_iterations < 1:
            raise ValueError("iterations and matmul_iterations must be >= 1, warmup_iterations >= 0")
        if self.matmul_size is not None and self.matmul_size < 16:
            raise ValueError("matmul_size must be >= 16")
        if self.time_budget_s <= 0:
            raise ValueError("time_budget_s must be > 0")


@dataclass(frozen=True)
class CommTarget:
    """A process group to measure and the collective kinds the run uses on it."""

    name: str
    """Role of the group in the run: "data_parallel", "shard" or "replicate"."""
    group: dist.ProcessGroup
    kinds: tuple[str, ...] = COLLECTIVE_KINDS


def calibrate(
    config: CalibrationConfig,
    targets: list[CommTarget],
    device: torch.device,
    param_dtype: torch.dtype,
    reduce_dtype: torch.dtype,
) -> dict:
    """Measure F and W on every rank together; the same result on every rank."""
    matmul = measure_matmul(config, device, param_dtype)
    collectives = _measure_collectives(config, targets, device, param_dtype, reduce_dtype)
    return {
        "flops_per_s": matmul["flops_per_s"],
        "bus_bandwidth_bytes_per_s": headline_bus_bandwidth(collectives),
        "matmul": matmul,
        "collectives": collectives,
    }


def headline_bus_bandwidth(collectives: list[dict]) -> float | None:
    """W: the median bus bandwidth of the largest message measured, over kinds and groups."""
    if not collectives:
        return None
    largest = max(c["bytes"] for c in collectives)
    return statistics.median(c["busbw_bytes_per_s"] for c in collectives if c["bytes"] == largest)


def measure_matmul(config: CalibrationConfig, device: torch.device, dtype: torch.dtype) -> dict:
    """Achieved FLOP/s of an n x n matmul on each rank; F is the slowest rank's."""
    n = config.matmul_size or (8192 if device.type == "cuda" else 1024)
    # Constant inputs: timing does not depend on values, and no RNG state moves.
    a = torch.full((n, n), 1.0 / n, device=device, dtype=dtype)
    b = torch.full((n, n), 1.0, device=device, dtype=dtype)
    # All ranks multiply at once, as they compute at once in training.
    seconds = _timed_s(lambda: torch.mm(a, b), config.matmul_iterations, 1, device, dist.group.WORLD, slowest=False)
    per_rank = _gather_floats(2 * n**3 / seconds, device)
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "size": n,
        "seconds": 2 * n**3 / min(per_rank),
        "flops_per_s": min(per_rank),
        "per_rank_flops_per_s": per_rank,
    }


def _measure_collectives(config, targets, device, param_dtype, reduce_dtype) -> list[dict]:
    results: list[dict] = []
    spent_s = 0.0
    default_bytes = GPU_MESSAGE_BYTES if device.type == "cuda" else CPU_MESSAGE_BYTES
    for nbytes in config.message_bytes or default_bytes:
        # Groups agree on their own times only (HSDP has several shard groups),
        # so agree on the budget over all ranks: all must stop at the same size.
        if _world_max(spent_s, device) > config.time_budget_s:
            break
        for target in targets:
            for kind in target.kinds:
                dtype = param_dtype if kind == "all_gather" else reduce_dtype
                entry = measure_collective(kind, nbytes, target, device, dtype, config)
                spent_s += entry["seconds"] * (config.iterations + config.warmup_iterations)
                results.append(entry)
    return results


def measure_collective(
    kind: str,
    nbytes: int,
    target: CommTarget,
    device: torch.device,
    dtype: torch.dtype,
    config: CalibrationConfig,
) -> dict:
    """Time one collective of about ``nbytes`` (full buffer) on ``target.group``."""
    n = target.group.size()
    shard_numel = max(1, nbytes // (dtype.itemsize * n))
    full = torch.zeros(shard_numel * n, device=device, dtype=dtype)
    shard = torch.zeros(shard_numel, device=device, dtype=dtype)
    run = _collective(kind, full, shard, target.group)
    seconds = _timed_s(run, config.iterations, config.warmup_iterations, device, target.group, slowest=True)
    full_bytes = full.numel() * full.element_size()
    algbw = full_bytes / seconds
    return {
        "kind": kind,
        "group": target.name,
        "group_size": n,
        "dtype": str(dtype).removeprefix("torch."),
        "bytes": full_bytes,
        "seconds": seconds,
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * bus_factor(kind, n),
    }


def _collective(kind: str, full: torch.Tensor, shard: torch.Tensor, group) -> Callable[[], None]:
    if kind == "all_reduce":
        return lambda: dist.all_reduce(full, group=group)
    if kind == "all_gather":
        return lambda: _all_gather(full, shard, group=group)
    if kind == "reduce_scatter":
        return lambda: _reduce_scatter(shard, full, group=group)
    raise ValueError(f"unknown collective kind {kind!r}")


def _timed_s(fn, iterations: int, warmup: int, device: torch.device, group, slowest: bool) -> float:
    """Mean seconds per call, started together on ``group``; the slowest rank's if ``slowest``."""
    for _ in range(warmup):
        fn()
    _synchronize(device)
    dist.barrier(group=group)
    start_s = time.perf_counter()
    for _ in range(iterations):
        fn()
    _synchronize(device)
    elapsed_s = time.perf_counter() - start_s
    if slowest:
        # A collective ends when its slowest rank does.
        t = torch.tensor([elapsed_s], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        elapsed_s = t.item()
    return elapsed_s / iterations


def _world_max(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _gather_floats(value: float, device: torch.device) -> list[float]:
    out = torch.zeros(dist.get_world_size(), dtype=torch.float64, device=device)
    _all_gather(out, torch.tensor([value], dtype=torch.float64, device=device))
    return out.tolist()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
