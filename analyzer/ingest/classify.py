"""Event classification: every rule that turns a (category, name) into a kind.

This is the only place that looks at event names to decide what an event is.
Rules run once per distinct (category, name) pair, never per event, and the
result is mapped onto the events with one vectorised lookup.

Kinds (the ``events.kind`` column, docs/definitions.md):

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
from typing import TYPE_CHECKING

from overlapscope.contract import names
from overlapscope.contract.collectives import collective_kind

if TYPE_CHECKING:  # NumPy is imported where used: the scan's keep() reads this module before NumPy loads
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


# Matmul-like ops: their FLOP counts and kernels give the achieved FLOP/s (F).
MATMUL_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
    "aten::_scaled_mm", "aten::addmv", "aten::mv", "aten::convolution", "aten::_convolution",
    "aten::cudnn_convolution", "aten::conv2d", "aten::_addmm_activation",
})


# Gradient-norm ops (clip_grad_norm_): with sharded gradients the global norm
# needs an all-reduce of the local norms (docs/checklist.md, local_grad_clipping).
NORM_OPS = frozenset({"aten::_foreach_norm", "aten::linalg_vector_norm", "aten::norm", "aten::frobenius_norm"})


def needed_for_attribution(name: str) -> bool:
    """Host ops an attribution load keeps on GPU traces: launches, matmuls, norms, memory."""
    return (name in MATMUL_OPS or name in NORM_OPS or name == "[memory]"
            or COMM_LAUNCH.match(name) is not None)


# The collective in a kernel's name, for traces whose kernels carry no
# "Collective name" arg: ncclKernel_AllReduce_RING_LL_Sum_float -> AllReduce.
_KERNEL_COLLECTIVE = re.compile(r"(?:nccl|rccl|msccl)\w*?Kernel_(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|"
                                r"SendRecv|AllToAll|Send|Recv)", re.IGNORECASE)


def kernel_collective(name: str) -> str | None:
    m = _KERNEL_COLLECTIVE.search(name)
    return m.group(1) if m else None


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
    import numpy as np

    return np.fromiter(
        (KIND_CODE[_classify_pair(c, n, gpu_trace)] for c, n in zip(cats, names)),
        dtype=np.int8,
        count=len(cats),
    )


def aten_mask(names: list[str]) -> np.ndarray:
    """Per distinct name: does it name an ``aten::`` operator?"""
    import numpy as np

    return np.fromiter((ATEN_OP.match(n) is not None for n in names), dtype=bool, count=len(names))


# --- annotation roles: what a CPU range says about the collectives launched inside it ---
#
# role              arg          written by
# ddp_bucket        bucket index overlapscope tracer's comm hook (contract.names.BUCKET_ANNOTATION)
# microbatch        index        overlapscope tracer (contract.names.MICROBATCH_ANNOTATION)
# fsdp_all_gather   unit fqn     FSDP2 FSDPParamGroup.unshard ("" for the root unit)
# fsdp_reduce       unit fqn     FSDP2 post_backward_reduce; FSDP1 _post_backward_hook (no fqn)
# fsdp_backward     unit fqn     FSDP2 pre_backward / backward_prefetch / post_backward_*;
#                                FSDP1 _pre_backward_hook, _post_backward_hook, backward prefetch
# fsdp_forward      unit fqn     FSDP2 pre_forward / forward_prefetch; FSDP1 _pre_forward
# fsdp_root_forward unit fqn     FSDP2 root_pre_forward: the whole model's forward begins (one per
#                                micro-batch, as ddp_forward)
# ddp_forward       -            DistributedDataParallel.forward
# ddp_reducer       -            DDP's reducer ops around a bucket's all-reduce (the gradients divided
#                                by the world, the bucket copied back into them): compute that only
#                                a pass that reduces does (no_sync skips it)
# grad_ready        -            autograd's AccumulateGrad of one parameter: its gradient is ready
#                                (DDP's buckets fill in this order)
# launch            collective   the backend's CPU range around a launch (nccl:all_to_all)
# (pattern, role, root_when_unnamed): FSDP2 names the unit after the range, and
# a range without a name belongs to the root unit (""); FSDP1 never names the
# unit (arg None: attribution infers it from the order).
_ROLE_RULES = (
    (names.BUCKET_PATTERN, "ddp_bucket", False),
    (names.MICROBATCH_PATTERN, "microbatch", False),
    (re.compile(r"^FSDP::all_gather(?: \((.*)\))?$"), "fsdp_all_gather", True),
    (re.compile(r"^FSDP::post_backward_reduce(?: \((.*)\))?$"), "fsdp_reduce", True),
    (re.compile(r"^FullyShardedDataParallel\._post_backward_hook$"), "fsdp_reduce", False),
    (re.compile(r"^FSDP::(?:pre_backward|post_backward_\w+|root_post_backward_callback)(?: \((.*)\))?$"),
     "fsdp_backward", True),
    (re.compile(r"^FSDP::backward_prefetch for (.*)$"), "fsdp_backward", False),
    (re.compile(r"^FullyShardedDataParallel\.(?:_pre_backward_hook|_pre_backward_prefetch|"
                r"_post_backward_prefetch|_post_backward_final_callback)$"), "fsdp_backward", False),
    (re.compile(r"^FSDP::root_pre_forward(?: \((.*)\))?$"), "fsdp_root_forward", True),
    (re.compile(r"^FSDP::pre_forward(?: \((.*)\))?$"), "fsdp_forward", True),
    (re.compile(r"^FSDP::forward_prefetch for (.*)$"), "fsdp_forward", False),
    (re.compile(r"^FullyShardedDataParallel\.(?:_pre_forward|_pre_forward_prefetch)$"), "fsdp_forward", False),
    (re.compile(r"^DistributedDataParallel\.forward$"), "ddp_forward", False),
    (re.compile(r"^(?:torch::distributed::reducer::mul_out|torch\.distributed\.ddp\.reducer::copy_bucket_to_grad)$"),
     "ddp_reducer", False),
    (re.compile(r"^autograd::engine::evaluate_function: torch::autograd::AccumulateGrad$"), "grad_ready", False),
    (re.compile(r"^(?:nccl|rccl|gloo|ucc|mpi):(\w+)$"), "launch", False),
)


def annotation_role(name: str) -> tuple[str, str | None] | None:
    """(role, arg) of a range that attribution reads, or None (table above). A launch
    range's arg is the canonical kind of its collective (``nccl:all_to_all`` -> all_to_all)."""
    for pattern, role, root_when_unnamed in _ROLE_RULES:
        m = pattern.match(name)
        if m:
            arg = m.group(1) if m.groups() else None
            if role == "launch":
                arg = collective_kind(arg)
            return role, ("" if arg is None and root_when_unnamed else arg)
    return None


# Collective families: how a launch (c10d op) and its transfer (gloo span, NCCL
# kernel) are named differently for one operation. gloo has no reduce-scatter:
# FSDP's reduce-scatter runs as a gloo:all_reduce span (docs/checklist.md, "What
# PyTorch writes into traces"), so both reductions are one family.
_FAMILY = {"reduce_scatter": "reduce", "all_reduce": "reduce", "all_gather": "gather", "gather": "gather"}


def collective_family(kind: str | None) -> str | None:
    """The family of a canonical collective kind (contract.collectives.collective_kind)."""
    return None if kind is None else _FAMILY.get(kind, kind)


def parallelism_seen(names: list[str]) -> str | None:
    """What the trace's own ranges show: fsdp (FSDP1 or FSDP2 ranges), ddp (DDP's
    forward), or None. Files of one run agree on it (consistency.check_ranks)."""
    if any(n.startswith(("FSDP::", "FullyShardedDataParallel.")) for n in names):
        return "fsdp"
    if "DistributedDataParallel.forward" in names:
        return "ddp"
    return None
