"""An independent, deliberately simple reference for the overlap figures.

Plain Python over the raw JSON (stdlib json, sorted lists): no DuckDB, no
msgspec, no code from analyzer/. Tests compare the analyzer against it.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal


def read(path) -> dict:
    """The trace with every number as an exact Decimal (microseconds with 3 decimals are exact)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.load(f, parse_float=Decimal, parse_int=Decimal)


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(intervals):
    return sum((e - s for s, e in intervals), Decimal(0))


def intersection(a, b):
    i = j = 0
    total = Decimal(0)
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def gpu_overlap(trace: dict) -> dict:
    """README definition: comm = NCCL kernels, compute = every other kernel (us)."""
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    comm = union((e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e["name"].lower())
    comp = union((e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower())
    comm_us = length(comm)
    hidden = intersection(comm, comp)
    return {"comm_ms": float(comm_us / 1000), "exposed_comm_ms": float((comm_us - hidden) / 1000),
            "compute_ms": float(length(comp) / 1000),
            "overlap_pct": float(100 * hidden / comm_us) if comm_us else None}


def gloo_overlap(trace: dict) -> dict:
    """CPU-only: comm = gloo:* spans, compute = aten::* ops off the gloo threads (us)."""
    xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    comm_events = [e for e in xs if e["name"].startswith("gloo:")]
    comm_threads = {e["tid"] for e in comm_events}
    comm = union((e["ts"], e["ts"] + e["dur"]) for e in comm_events)
    comp = union((e["ts"], e["ts"] + e["dur"]) for e in xs
                 if e.get("cat") == "cpu_op" and e["name"].startswith("aten::") and e["tid"] not in comm_threads)
    comm_us = length(comm)
    hidden = intersection(comm, comp)
    return {"comm_ms": float(comm_us / 1000), "exposed_comm_ms": float((comm_us - hidden) / 1000),
            "compute_ms": float(length(comp) / 1000),
            "overlap_pct": float(100 * hidden / comm_us) if comm_us else None}
