"""Event classification: every rule that turns a (category, name) into a kind.

This is the only place that looks at event names to decide what an event is.
Rules run once per distinct (category, name) pair, never per event, and the
result is mapped onto the events with one vectorised lookup.

Kinds (the ``events.kind`` column, DESIGN "Definitions"):

============== ===============================================================
compute        GPU kernels that are not communication; on CPU-only traces the
               ``aten::*`` ops of training and autograd threads (all of them, not
               only leaves: see decode._mark_cpu_compute)
comm           collective kernels (NCCL/RCCL/MSCCL) on GPU traces; ``gloo:*``
               (and ``mpi:*``, ``ucc:*``) spans on CPU-only traces
memcpy, memset GPU copies and fills: busy, but neither compute nor comm
sync           GPU-side waits (``cuda_sync``) and CPU ops that only wait:
               never compute
gpu_annotation ranges drawn on GPU streams (``gpu_user_annotation``)
step           ``ProfilerStep#N`` ranges
comm_launch    CPU-side collective calls: ``c10d::*``, ``nccl:*``,
               ``record_param_comms``, functional collectives
runtime        CUDA/HIP runtime and driver calls (launches carry a correlation)
cpu_op         other CPU operators (on GPU traces all ``aten::*`` ops)
annotation     other ``record_function`` / user annotation ranges
python         Python function events (with_stack)
memory         ``[memory]`` allocator events
other          anything else (profiler spans, markers, counters)
============== ===============================================================
"""

from __future__ import annotations

import re

import numpy as np

KINDS = (
    "compute", "comm", "memcpy", "memset", "sync", "gpu_annotation", "step", "comm_launch",
    "runtime", "cpu_op", "annotation", "python", "memory", "other",
)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}

# Device-side categories: events that run on a GPU stream.
DEVICE_CATEGORIES = {
    "kernel": "compute",  # refined to comm by name (COMM_KERNEL)
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
    "gpu_user_annotation": "gpu_annotation",
}
RUNTIME_CATEGORIES = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "privateuse1_runtime"}

# Collective kernels under every naming PyTorch's NCCL/RCCL builds have used:
# ncclKernel_AllReduce_RING_LL_Sum_float (NCCL < 2.19), ncclDevKernel_Generic /
# ncclDevKernel_AllGather_RING_LL (2.19+), ncclSymkDevKernel_* (symmetric, 2.27+),
# mscclKernel_* (MSCCL), with or without a leading "void " and template args.
COMM_KERNEL = re.compile(r"^(?:void\s+)?(?:\w+::)*(?:nccl|rccl|msccl)\w*(?:Kernel|Symk)", re.IGNORECASE)

# CPU-only traces: collective spans that the backend's worker threads record.
CPU_COMM_SPAN = re.compile(r"^(?:gloo|mpi|ucc):")

# CPU-side collective calls (launches, not the transfer itself).
COMM_LAUNCH = re.compile(
    r"^(?:c10d::|c10d_functional::|_c10d_functional::|nccl:|rccl:|record_param_comms$|"
    r"torch\.distributed\.|gloo:)"
)

PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")

# CPU ops that only wait for other work: never compute on CPU-only traces.
CPU_WAIT_OP = re.compile(r"wait|synchroniz|_local_scalar_dense$|::item$", re.IGNORECASE)

ATEN_OP = re.compile(r"^aten::")


def is_comm_kernel(name: str) -> bool:
    return COMM_KERNEL.match(name) is not None


def step_number(name: str) -> int | None:
    m = PROFILER_STEP.match(name)
    return int(m.group(1)) if m else None


def _classify_pair(cat: str, name: str, gpu_trace: bool) -> str:
    device_kind = DEVICE_CATEGORIES.get(cat)
    if device_kind is not None:
        return "comm" if cat == "kernel" and is_comm_kernel(name) else device_kind
    if cat in RUNTIME_CATEGORIES:
        return "runtime"
    if PROFILER_STEP.match(name):
        return "step"
    if cat == "cpu_instant_event" or name == "[memory]":
        return "memory" if name == "[memory]" else "other"
    if not gpu_trace and CPU_COMM_SPAN.match(name):
        return "comm"
    if COMM_LAUNCH.match(name):
        return "comm_launch"
    if cat == "python_function":
        return "python"
    if cat == "cpu_op":
        if not gpu_trace and ATEN_OP.match(name):
            # aten ops become compute once the comm threads are known; waits never do.
            return "sync" if CPU_WAIT_OP.search(name) else "cpu_op"
        return "cpu_op"
    if cat in ("user_annotation", "gpu_user_annotation"):
        return "annotation"
    return "other"


def classify_pairs(cats: list[str], names: list[str], gpu_trace: bool) -> np.ndarray:
    """Kind code of each distinct (category, name) pair."""
    return np.fromiter(
        (KIND_CODE[_classify_pair(c, n, gpu_trace)] for c, n in zip(cats, names)),
        dtype=np.int8,
        count=len(cats),
    )


def aten_mask(names: list[str]) -> np.ndarray:
    """Per distinct name: does it name an ``aten::`` operator?"""
    return np.fromiter((ATEN_OP.match(n) is not None for n in names), dtype=bool, count=len(names))
