"""F, W and the latency term, measured on the trace itself.

- F: matmul FLOPs (the profiler's FLOP counts, with_flops=True) over the time
  the matmuls took: their kernels on GPU traces (linked by External id), the
  ops themselves on CPU-only traces.
- W: bus bandwidth (nccl-tests) of the large collectives. A collective lasts as
  long as its slowest participant arrives, so each instance is timed by its
  shortest duration over the ranks (the transfer; the rest is waiting).
- latency: fitted on the small collectives with the W the model uses (model_collectives).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.model.ring import fit_latency, wire_bytes

LARGE_QUANTILE = 0.75  # collectives at or above this bytes quantile measure W (bandwidth-bound)
SMALL_QUANTILE = 0.25  # collectives at or below it measure the latency term
SQL_MATMUL_GPU = """
SELECT sum(o.flops) AS flops, sum(k.dur_ns) AS ns, count(*) AS ops
FROM events o
JOIN (SELECT rank, external_id, sum(dur_ns) AS dur_ns FROM events
      WHERE run_id = $run AND kind = 'compute' AND external_id IS NOT NULL GROUP BY ALL) k
  ON k.rank = o.rank AND k.external_id = o.external_id
WHERE o.run_id = $run AND o.flops > 0 AND o.cat = 'cpu_op'
"""
SQL_MATMUL_CPU = """
SELECT sum(flops) AS flops, sum(dur_ns) AS ns, count(*) AS ops
FROM events WHERE run_id = $run AND flops > 0 AND kind = 'compute'
"""


def flops_per_s(con, run_id: int) -> dict:
    """Achieved matmul FLOP/s of one device over the whole trace (None without FLOP counts)."""
    kind = con.execute("SELECT device_kind FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    flops, ns, ops = con.execute(SQL_MATMUL_GPU if kind == "gpu" else SQL_MATMUL_CPU, {"run": run_id}).fetchone()
    value = flops / (ns / 1e9) if flops and ns else None
    return {"flops_per_s": value, "matmul_ops": ops or 0, "matmul_ms": (ns or 0) / 1e6}


def instance_times(rows: list[dict]) -> dict[tuple, float]:
    """Shortest comm time (s) of each collective instance over the ranks that ran it.

    An instance is the n-th transfer of one (step, microbatch, kind, id, phase):
    every rank runs the same collectives in the same order.
    """
    seen: dict[tuple, int] = defaultdict(int)
    best: dict[tuple, float] = {}
    for r in sorted(rows, key=lambda r: (r["rank"], r["launch_ts_ns"] or 0, r["event_id"])):
        base = (r["step"], r["microbatch"], r["kind"], r["id"], r["phase"])
        n = seen[(r["rank"], base)]
        seen[(r["rank"], base)] += 1
        key = base + (n,)
        r["instance"] = key
        t = r["comm_ms"] / 1e3
        best[key] = min(best.get(key, t), t)
    return best


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def _sized(rows: list[dict]) -> tuple[list[dict], dict[int, float], dict[tuple, float]]:
    """Collectives with a size, group and kind; their wire bytes; each instance's transfer time."""
    best = instance_times(rows)
    wires: dict[int, float] = {}
    for r in rows:
        if r["bytes"] and r["group_size"] and r["group_size"] > 1 and r["collective"]:
            try:
                wires[id(r)] = wire_bytes(r["collective"], r["bytes"], r["group_size"])
            except ValueError:
                continue
    return [r for r in rows if id(r) in wires], wires, best


def bandwidth(rows: list[dict]) -> dict:
    """W (bytes/s): median bus bandwidth of the large collectives (each instance at its fastest rank)."""
    sized, wires, best = _sized(rows)
    out = {"bus_bandwidth_bytes_per_s": None, "large_collectives": 0}
    if not sized:
        return out
    large_cut = _quantile([r["bytes"] for r in sized], LARGE_QUANTILE)
    large = [r for r in sized if r["bytes"] >= large_cut and best[r["instance"]] > 0]
    if large:
        out.update(bus_bandwidth_bytes_per_s=statistics.median(wires[id(r)] / best[r["instance"]] for r in large),
                   large_collectives=len(large))
    return out


def latency(rows: list[dict], w_bytes_per_s: float | None) -> dict:
    """The per-collective latency term, fitted on the small collectives with W fixed."""
    sized, wires, best = _sized(rows)
    if not sized or not w_bytes_per_s:
        return {"latency_s": None, "small_collectives": 0}
    small_cut = _quantile([r["bytes"] for r in sized], SMALL_QUANTILE)
    small = [r for r in sized if r["bytes"] <= small_cut]
    fit = fit_latency([(wires[id(r)], best[r["instance"]]) for r in small], busbw_bytes_per_s=w_bytes_per_s)
    return {"latency_s": fit.latency_s, "small_collectives": len(small)}
