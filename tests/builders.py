"""Build small Kineto traces by hand, for tests with known answers.

Times are given in microseconds relative to ``BASE_US`` (a realistic absolute
clock value, so nanosecond precision is exercised). Device events launched in a
step get a ``cudaLaunchKernel`` inside that step's ProfilerStep range, linked by
correlation id, the way Kineto writes them.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field

BASE_US = 1_669_783_687_384_669.0  # a real trace's clock (us); 1.6e15 needs int ns to stay exact
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"


@dataclass
class GpuTrace:
    """A GPU trace: ProfilerStep ranges on the CPU, kernels on streams."""

    rank: int = 0
    world_size: int = 2
    events: list = field(default_factory=list)
    device_memory: int = 85_000_000_000
    _corr: int = 1000
    _steps: dict = field(default_factory=dict)

    def step(self, number: int, start_us: float, dur_us: float) -> "GpuTrace":
        self._steps[number] = (start_us, dur_us)
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}",
                            "pid": 100, "tid": 100, "ts": BASE_US + start_us, "dur": dur_us,
                            "args": {"External id": number}})
        return self

    def annotation(self, name: str, start_us: float, dur_us: float, tid: int = 100) -> "GpuTrace":
        """A record_function range on a CPU thread (bucket, FSDP unit, DDP forward ...)."""
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": tid,
                            "ts": BASE_US + start_us, "dur": dur_us, "args": {}})
        return self

    def kernel(self, start_us: float, dur_us: float, stream: int = 7, step: int | None = None,
               name: str = GEMM, cat: str = "kernel", args: dict | None = None,
               launch_us: float | None = None, tid: int = 100) -> "GpuTrace":
        """A device event; with ``step`` (or ``launch_us``) also its launch on CPU thread ``tid``.

        The launch happens at ``launch_us``, else just after the step begins.
        """
        self._corr += 1
        kargs = {"device": 0, "stream": stream, "correlation": self._corr, "External id": self._corr}
        kargs.update(args or {})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                            "ts": BASE_US + start_us, "dur": dur_us, "args": kargs})
        if step is not None or launch_us is not None:
            if launch_us is None:
                s0, sdur = self._steps[step]
                launch_us = s0 + min(1.0, sdur / 4)
            self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                                "pid": 100, "tid": tid, "ts": BASE_US + launch_us, "dur": 0.5,
                                "args": {"correlation": self._corr, "External id": self._corr}})
        return self

    def comm(self, start_us: float, dur_us: float, stream: int = 20, step: int | None = None,
             nelems: int = 1 << 20, dtype: str = "Float", collective: str = "allreduce",
             out_nelems: int | None = None, launch_us: float | None = None, tid: int = 100) -> "GpuTrace":
        """A collective kernel (NCCL's args: Collective name, In/Out msg nelems, dtype, ...)."""
        return self.kernel(start_us, dur_us, stream, step, name=NCCL_ALLREDUCE if collective == "allreduce"
                           else f"ncclDevKernel_{collective}_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                           args={"Collective name": collective, "In msg nelems": nelems,
                                 "Out msg nelems": out_nelems or nelems, "dtype": dtype,
                                 "Group size": self.world_size, "Process Group Name": "0",
                                 "Process Group Ranks": "[0, 1]"},
                           launch_us=launch_us, tid=tid)

    def cpu_op(self, name: str, start_us: float, dur_us: float, tid: int = 100, **args) -> "GpuTrace":
        """A CPU op (cat cpu_op); ``args`` go into its Kineto args (flops, Input Dims, External id)."""
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid,
                            "ts": BASE_US + start_us, "dur": dur_us, "args": args})
        return self

    def memory(self, at_us: float, allocated_bytes: int, device: int = 0) -> "GpuTrace":
        """An allocator event ([memory]) with the allocator's total after it."""
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "s": "t", "pid": 100,
                            "tid": 100, "ts": BASE_US + at_us,
                            "args": {"Device Type": 1, "Device Id": device, "Bytes": 1024,
                                     "Total Allocated": allocated_bytes, "Total Reserved": allocated_bytes}})
        return self

    def to_json(self) -> dict:
        return {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": self.device_memory}],
            "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world_size},
            "traceEvents": self.events + [
                {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100, "args": {"name": "python"}},
            ],
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        }


@dataclass
class CpuTrace:
    """A CPU-only gloo trace: aten ops on the training thread, gloo spans on a runloop thread."""

    rank: int = 0
    world_size: int = 2
    events: list = field(default_factory=list)

    def step(self, number: int, start_us: float, dur_us: float) -> "CpuTrace":
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}",
                            "pid": 7, "tid": 7, "ts": BASE_US + start_us, "dur": dur_us, "args": {}})
        return self

    def op(self, start_us: float, dur_us: float, name: str = "aten::mm", tid: int = 7) -> "CpuTrace":
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid,
                            "ts": BASE_US + start_us, "dur": dur_us,
                            "args": {"Input Dims": [[64, 256], [256, 256]]}})
        return self

    def gloo(self, start_us: float, dur_us: float, elements: int = 131584, tid: int = 9,
             name: str = "gloo:all_reduce") -> "CpuTrace":
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 7, "tid": tid,
                            "ts": BASE_US + start_us, "dur": dur_us,
                            "args": {"Input Dims": [[elements]], "Input type": ["float"]}})
        return self

    def to_json(self) -> dict:
        return {
            "schemaVersion": 1,
            "deviceProperties": [],
            "distributedInfo": {"backend": "gloo", "rank": self.rank, "world_size": self.world_size},
            "traceEvents": self.events + [
                {"ph": "M", "name": "thread_name", "pid": 7, "tid": 7, "args": {"name": "thread 7 (python)"}},
                {"ph": "M", "name": "thread_name", "pid": 7, "tid": 9, "args": {"name": "thread 9 (pt_gloo_runloop)"}},
            ],
        }


def write(trace, path, gz: bool = False) -> str:
    data = json.dumps(trace.to_json() if hasattr(trace, "to_json") else trace).encode()
    path = str(path)
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
    return path


def write_bundle(folder, traces, manifest: dict | None = None) -> str:
    """A run bundle: rank-<r>.json per trace and, when given, manifest.json."""
    import os

    os.makedirs(folder, exist_ok=True)
    for tr in traces:
        write(tr, os.path.join(str(folder), f"rank-{tr.rank}.json"))
    if manifest is not None:
        with open(os.path.join(str(folder), "manifest.json"), "w") as f:
            json.dump({"schema_version": 1, **manifest}, f)
    return str(folder)
