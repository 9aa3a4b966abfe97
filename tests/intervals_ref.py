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


def minus(a, b):
    """The union ``a`` less the union ``b``, as intervals."""
    out = []
    j = 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > s:
                out.append([s, b[k][0]])
            s = max(s, b[k][1])
            k += 1
        if e > s:
            out.append([s, e])
    return out


def clip(a, start, end):
    """The part of the union ``a`` inside [start, end]."""
    return [[max(s, start), min(e, end)] for s, e in a if min(e, end) > max(s, start)]


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


def _gloo_events(trace: dict) -> tuple[list, list, list]:
    """CPU-only: the X events, the comm events (gloo:* spans) and the compute events (aten::*
    ops off the gloo threads)."""
    xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    comm_events = [e for e in xs if e["name"].startswith("gloo:")]
    comm_threads = {e["tid"] for e in comm_events}
    comp_events = [e for e in xs
                   if e.get("cat") == "cpu_op" and e["name"].startswith("aten::") and e["tid"] not in comm_threads]
    return xs, comm_events, comp_events


def gloo_overlap(trace: dict) -> dict:
    """CPU-only: comm = gloo:* spans, compute = aten::* ops off the gloo threads (us)."""
    _, comm_events, comp_events = _gloo_events(trace)
    comm = union((e["ts"], e["ts"] + e["dur"]) for e in comm_events)
    comp = union((e["ts"], e["ts"] + e["dur"]) for e in comp_events)
    comm_us = length(comm)
    hidden = intersection(comm, comp)
    return {"comm_ms": float(comm_us / 1000), "exposed_comm_ms": float((comm_us - hidden) / 1000),
            "compute_ms": float(length(comp) / 1000),
            "overlap_pct": float(100 * hidden / comm_us) if comm_us else None}


def exposed_by_kernel(trace: dict) -> dict:
    """GPU, per collective kernel (by correlation id): its interval minus the compute union, where
    a stretch with c collectives running and no compute is shared out equally (d / c each), as
    docs/definitions.md defines it (us)."""
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    comm = [(e["ts"], e["ts"] + e["dur"], e["args"]["correlation"]) for e in kernels if "nccl" in e["name"].lower()]
    comp = union((e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower())
    cuts = sorted({t for s, e, _ in comm for t in (s, e)} | {t for s, e in comp for t in (s, e)})
    out = {c: Decimal(0) for _, _, c in comm}
    i = 0  # the first compute interval that ends after the segment's start (both lists are sorted)
    for a, b in zip(cuts, cuts[1:]):
        while i < len(comp) and comp[i][1] <= a:
            i += 1
        if i < len(comp) and comp[i][0] <= a:  # segments never straddle an edge of the union
            continue
        running = [c for s, e, c in comm if s <= a and b <= e]
        for c in running:
            out[c] += (b - a) / len(running)
    return out


def launches(trace: dict) -> dict:
    """Correlation id -> (step, name of the innermost user range around the launch on its thread): the
    step is the ProfilerStep#N whose range holds the CPU launch (None outside every step)."""
    xs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in xs
             if e["name"].startswith("ProfilerStep#")]
    ranges = [e for e in xs if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#")]
    out = {}
    for e in xs:
        if e.get("cat") != "cuda_runtime" or "correlation" not in e.get("args", {}):
            continue
        ts = e["ts"]
        step = next((n for s, end, n in steps if s <= ts < end), None)
        around = [r for r in ranges if r["tid"] == e["tid"] and r["ts"] <= ts <= r["ts"] + r["dur"]]
        inner = min(around, key=lambda r: r["dur"])["name"] if around else None
        out[e["args"]["correlation"]] = (step, inner)
    return out


def gloo_steps(trace: dict) -> list:
    """CPU-only, per ProfilerStep (docs/definitions.md "step", "spill in, spill out"), in ms:
    compute, comm, exposed comm, step, idle, spill in and spill out. An op belongs to the
    ProfilerStep range it starts in; a window runs from its range's start to the next one's,
    the last one's to the end of its range or of its own work, whichever is later. Assumes
    no memcpy/memset (a gloo CPU trace has none)."""
    xs, comm_events, comp_events = _gloo_events(trace)
    ranges = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
                    for e in xs if e["name"].startswith("ProfilerStep#"))

    def step_of(e):
        return next((n for start, end, n in ranges if start <= e["ts"] < end), None)

    def by_step(events):  # step -> intervals of the events it launched (zero-length ones left out)
        out: dict = {}
        for e in events:
            if e["dur"] > 0:
                out.setdefault(step_of(e), []).append((e["ts"], e["ts"] + e["dur"]))
        return out

    comm, comp = by_step(comm_events), by_step(comp_events)
    all_comp = union(iv for ivs in comp.values() for iv in ivs)
    all_work = union([iv for ivs in comp.values() for iv in ivs] + [iv for ivs in comm.values() for iv in ivs])

    def ms(us):
        return float(us / 1000)

    steps = []
    for i, (start, end, n) in enumerate(ranges):
        own_comp, own_comm = union(comp.get(n, [])), union(comm.get(n, []))
        exposed = minus(own_comm, all_comp)
        own = union(own_comp + exposed)  # disjoint: exposed comm lies outside all compute
        if i + 1 < len(ranges):
            w_end = ranges[i + 1][0]
        else:
            w_end = max([end] + [e for _, e in own_comp + own_comm])
        own_in = length(clip(own, start, w_end))
        steps.append({
            "step": n, "compute_ms": ms(length(own_comp)), "comm_ms": ms(length(own_comm)),
            "exposed_comm_ms": ms(length(exposed)), "step_ms": ms(w_end - start),
            "idle_ms": ms(w_end - start - length(clip(all_work, start, w_end))),
            "spill_in_ms": ms(length(clip(all_work, start, w_end)) - own_in),
            "spill_out_ms": ms(length(own) - own_in),
        })
    return steps
