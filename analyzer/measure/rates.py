"""F, W and the latency term, measured on the trace itself.

- F: matmul FLOPs (the profiler's FLOP counts, with_flops=True, or derived from
  shapes at load) over the time the matmuls took: their kernels on GPU traces
  (linked by External id), the ops themselves on CPU-only traces.
- W: bus bandwidth (nccl-tests) of the large collectives (the top quarter by size, and
  BANDWIDTH_MIN_BYTES or more: bandwidth-bound), over all of them and per collective
  kind; a trace whose collectives are all smaller is latency-bound and measures no W
  (its figure is kept as a lower bound). A collective lasts as long as its slowest participant
  arrives, so each instance is timed by its shortest duration over the ranks (the
  transfer; the rest is waiting).
- latency: fitted on the small collectives with the W the model uses (model.ring).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer import sql
from overlapscope.analyzer.measure.collectives import Collective
from overlapscope.analyzer.model.ring import fit_latency, wire_bytes
from overlapscope.analyzer.units import NS_PER_MS, NS_PER_S

LARGE_QUANTILE = 0.75  # collectives at or above this bytes quantile measure W (bandwidth-bound)
# ... and only from this size: below 1 MiB a collective is latency-bound on every transport (NCCL's
# rings reach their bus bandwidth from a few MiB; gloo's TCP from about 1 MiB), and its bus bandwidth
# measures the per-message latency, not the links (264 KB buckets read 18% of the calibrated W)
BANDWIDTH_MIN_BYTES = 1 << 20
SMALL_QUANTILE = 0.25  # collectives at or below it measure the latency term

Instance = tuple  # (step, microbatch, kind, id, phase, n): the n-th such collective of a rank


def flops_per_s(con, run_id: int) -> dict:
    """Achieved matmul FLOP/s of one device over the whole trace (None without FLOP counts):
    the matmul FLOPs of every rank over the time they took (sql/rank_facts.sql)."""
    sql.ensure(con, "rank_facts", run_id=run_id)
    flops, ns, ops = sql.one(con, "rates.matmul")
    value = flops / (ns / NS_PER_S) if flops and ns else None
    return {"flops_per_s": value, "matmul_ops": ops or 0, "matmul_ms": (ns or 0) / NS_PER_MS}


def instances(rows: list[Collective]) -> list[Instance]:
    """Each row's collective instance, in the rows' order.

    An instance is the n-th transfer of one (step, microbatch, kind, id, phase):
    every rank runs the same collectives in the same order. Rows come rank by rank
    (collectives.compute's order): a rank's stretches of rows are found first, and only
    one rank's rows are sorted (by launch) at a time.
    """
    stretches: dict[int, list[range]] = defaultdict(list)
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i].rank != rows[start].rank:
            stretches[rows[start].rank].append(range(start, i))
            start = i
    out: list = [None] * len(rows)
    same: dict[Instance, Instance] = {}  # one tuple per instance, not one per rank that ran it
    for ranges in stretches.values():
        seen: dict[tuple, int] = defaultdict(int)
        for i in sorted((i for r in ranges for i in r), key=lambda i: (rows[i].launch_ts_ns or 0, rows[i].event_id)):
            r = rows[i]
            base = (r.step, r.microbatch, r.kind, r.id, r.phase)
            instance = base + (seen[base],)
            seen[base] += 1
            out[i] = same.setdefault(instance, instance)
    return out


def transfer_s(rows: list[Collective], of: list[Instance]) -> dict[Instance, float]:
    """Shortest comm time (s) of each instance over the ranks that ran it: the transfer
    itself (``of``: each row's instance, ``instances``)."""
    best: dict[Instance, float] = {}
    for r, key in zip(rows, of):
        t = r.comm_ms / 1e3
        best[key] = min(best.get(key, t), t)
    return best


def sized(rows: list[Collective]) -> tuple[list[Collective], list[float], list[float]]:
    """Collectives with a size, group and kind; their wire bytes; their instance's transfer
    time (s) (what ``bandwidth`` and ``latency`` read: computed once for both, ``sized_rows``).
    Lists aligned with the rows, not dicts keyed by them: 2 million rows at 1,024 ranks."""
    of = instances(rows)
    best = transfer_s(rows, of)
    out: tuple[list, list, list] = ([], [], [])
    for r, key in zip(rows, of):
        if r.bytes and r.group_size and r.group_size > 1 and r.collective:
            try:
                wire = wire_bytes(r.collective, r.bytes, r.group_size)
            except ValueError:
                continue
            out[0].append(r)
            out[1].append(wire)
            out[2].append(best[key])
    return out


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def bandwidth(rows: list[Collective], sized_rows: tuple | None = None) -> dict:
    """W (bytes/s): median bus bandwidth of the large collectives (each instance at its fastest rank),
    None where every collective is under BANDWIDTH_MIN_BYTES (``latency_bound``: then
    ``latency_bound_bytes_per_s`` is the same median over the largest ones, a lower bound of W,
    and ``largest_bytes`` their size). ``sized_rows``: ``sized(rows)`` when the caller has it."""
    sized_, wires, transfers = sized_rows or sized(rows)
    out = {"bus_bandwidth_bytes_per_s": None, "large_collectives": 0, "latency_bound": False,
           "latency_bound_bytes_per_s": None, "largest_bytes": None}
    if not sized_:
        return out
    large_cut = _quantile([r.bytes for r in sized_], LARGE_QUANTILE)
    top = [(r.bytes, w / t) for r, w, t in zip(sized_, wires, transfers) if r.bytes >= large_cut and t > 0]
    large = [bw for b, bw in top if b >= BANDWIDTH_MIN_BYTES]
    if large:
        out.update(bus_bandwidth_bytes_per_s=statistics.median(large), large_collectives=len(large))
    elif top:
        out.update(latency_bound=True, latency_bound_bytes_per_s=statistics.median(bw for _, bw in top),
                   largest_bytes=max(b for b, _ in top))
    return out


def bandwidth_by_kind(rows: list[Collective]) -> dict[str, dict]:
    """W of each collective kind the trace sizes: ``bandwidth`` over that kind's rows only
    (kinds differ: gloo's all-gathers and reduce-scatters reach a fraction of its all-reduces)."""
    kinds = sorted({r.collective for r in rows if r.collective and r.bytes})
    return {k: bandwidth([r for r in rows if r.collective == k]) for k in kinds}


def latency(rows: list[Collective], w_bytes_per_s: float | None, w_by_kind: dict[str, float] | None = None,
            sized_rows: tuple | None = None) -> dict:
    """The per-collective latency term, fitted on the small collectives with W fixed
    (each kind's own W from ``w_by_kind`` where given, else ``w_bytes_per_s``): the mean
    of measured time minus wire bytes over W, never below 0 (``model.ring.fit_latency``)."""
    sized_, wires, transfers = sized_rows or sized(rows)
    w_by_kind = w_by_kind or {}
    if not sized_ or not (w_bytes_per_s or w_by_kind):
        return {"latency_s": None, "small_collectives": 0}
    small_cut = _quantile([r.bytes for r in sized_], SMALL_QUANTILE)
    ref = w_bytes_per_s or next(iter(w_by_kind.values()))
    small = []
    for r, wire, t in zip(sized_, wires, transfers):
        w = w_by_kind.get(r.collective) or w_bytes_per_s
        if r.bytes <= small_cut and w:
            # scaled so that wire / ref is this kind's wire / W
            small.append((wire * ref / w, t))
    if not small:
        return {"latency_s": None, "small_collectives": 0}
    fit = fit_latency(small, busbw_bytes_per_s=ref)
    return {"latency_s": fit.latency_s, "small_collectives": len(small)}
