"""Per-rank facts (host, device) and version strings, gathered to every rank."""

from __future__ import annotations

import os
import platform
import socket

import torch
import torch.distributed as dist


def rank_facts(device: torch.device) -> dict:
    """This rank's host and device: ``{rank, hostname, device, name, memory_bytes}``."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, memory_bytes = props.name, props.total_memory
        device_str = f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}"
    else:
        name, memory_bytes, device_str = _cpu_name(), _host_memory_bytes(), device.type
    return {
        "rank": dist.get_rank(),
        "hostname": socket.gethostname(),
        "device": device_str,
        "name": name,
        "memory_bytes": memory_bytes,
    }


def gather_rank_facts(device: torch.device) -> list[dict]:
    """Every rank's ``rank_facts``, ordered by rank (a collective: all ranks call it)."""
    out: list[dict | None] = [None] * dist.get_world_size()
    dist.all_gather_object(out, rank_facts(device))
    return sorted(out, key=lambda facts: facts["rank"])


def nccl_version() -> str | None:
    """NCCL's version when the run uses NCCL, else None."""
    if dist.get_backend() != "nccl":
        return None
    version = torch.cuda.nccl.version()  # a tuple; an int in old releases
    return ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
