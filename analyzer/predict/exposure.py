"""The seed's model beside the measurement, per collective and per step.

Predicted comm time: the latency term plus the bytes one rank puts on the wire
over W (model_collectives). Predicted exposed time: each step replayed with the
seed's timeline model (model_timeline) using what the trace says about it:

- DDP: buckets launch on one comm stream in the order their gradients became
  ready; a bucket's ready time is when the device finished the compute launched
  before it (GPU), or its launch (CPU-only: the CPU is the device). The backward
  pass ends when the last bucket is ready.
- FSDP: units in the order of their forward all-gathers; each unit's forward and
  backward compute is the step's measured forward / backward compute split in
  proportion to the unit's bytes (compute per token is 2 and 4 FLOPs per
  parameter: seed, section 3). Backward prefetch as FSDP2 does it; forward
  prefetch only on GPUs, where the CPU runs ahead (FIELD_NOTES cause 1).
"""

from __future__ import annotations

from collections import defaultdict

from overlapscope.analyzer.model.ring import collective_time_s
from overlapscope.analyzer.model.replay import Bucket, FsdpOptions, FsdpUnit, replay_ddp, replay_fsdp

SQL_READY_GPU = """
WITH done AS (
    SELECT rank, launch_ts_ns,
           max(ts_ns + dur_ns) OVER (PARTITION BY rank ORDER BY launch_ts_ns ROWS UNBOUNDED PRECEDING) AS done_ns
    FROM events WHERE run_id = $run AND kind = 'compute' AND launch_ts_ns IS NOT NULL
)
SELECT s.rank, s.event_id, d.done_ns
FROM collective_stats s
ASOF LEFT JOIN done d ON d.rank = s.rank AND s.cpu_launch_ts_ns >= d.launch_ts_ns
"""

# Compute time launched (GPU) or run (CPU) in [from_ns, to_ns) of each window.
SQL_WINDOW_COMPUTE_GPU = """
SELECT w.rank, w.key, coalesce(sum(e.dur_ns), 0) AS ns
FROM _pr_windows w
LEFT JOIN events e ON e.run_id = $run AND e.rank = w.rank AND e.kind = 'compute'
                  AND e.launch_ts_ns >= w.from_ns AND e.launch_ts_ns < w.to_ns
GROUP BY ALL
"""
SQL_WINDOW_COMPUTE_CPU = """
SELECT w.rank, w.key, coalesce(sum(overlap_ns(w.from_ns, w.to_ns, u.ts_ns, u.end_ns)), 0) AS ns
FROM _pr_windows w
LEFT JOIN _ov_u u ON u.rank = w.rank AND u.step IS NULL AND u.what = 'compute'
                 AND u.ts_ns < w.to_ns AND w.from_ns < u.end_ns
GROUP BY ALL
"""


def predict_comm(rows: list[dict], w_bytes_per_s: float | None, latency_s: float | None) -> None:
    """predicted_comm_ms of each collective, in place (None when bytes or W are unknown)."""
    for r in rows:
        r["predicted_comm_ms"] = None
        if not (w_bytes_per_s and r["bytes"] and r["group_size"] and r["group_size"] > 1 and r["collective"]):
            continue
        try:
            t = collective_time_s(r["collective"], r["bytes"], r["group_size"], w_bytes_per_s, latency_s or 0.0)
        except ValueError:
            continue
        r["predicted_comm_ms"] = round(t * 1e3, 6)


def _groups(rows: list[dict], kind: str) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["kind"] == kind and r["step"] is not None:
            groups[(r["rank"], r["step"], r["microbatch"])].append(r)
    for g in groups.values():
        g.sort(key=lambda r: (r["launch_ts_ns"] or r["start_ns"], r["event_id"]))
    return groups


def _replay_ddp(con, run_id: int, rows: list[dict], device_kind: str) -> None:
    groups = _groups(rows, "ddp_bucket")
    if not groups:
        return
    ready: dict[tuple, int] = {}
    if device_kind == "gpu":
        for rank, event_id, done_ns in con.execute(SQL_READY_GPU, {"run": run_id}).fetchall():
            if done_ns is not None:
                ready[(rank, event_id)] = done_ns
    for group in groups.values():
        if any(r["predicted_comm_ms"] is None for r in group):
            continue
        at = [ready.get((r["rank"], r["event_id"]), r["launch_ts_ns"] or r["start_ns"]) for r in group]
        origin = min(at)
        buckets = [Bucket((t - origin) / 1e9, r["predicted_comm_ms"] / 1e3) for t, r in zip(at, group)]
        timeline = replay_ddp(buckets, backward_end_s=(max(at) - origin) / 1e9)
        for r, span in zip(group, timeline.buckets):
            r["predicted_exposed_ms"] = round(span.exposed_s * 1e3, 6)


def _fsdp_windows(con, run_id: int, groups: dict, device_kind: str) -> dict[tuple, tuple[float, float]]:
    """Measured forward and backward compute (s) of each (rank, step, microbatch)."""
    windows = []
    for key, group in groups.items():
        rank = key[0]
        starts = [r["launch_ts_ns"] or r["start_ns"] for r in group]
        back = [s for s, r in zip(starts, group) if r["phase"] in ("backward_allgather", "reduce_scatter", "allreduce")]
        if not back:
            continue
        first, boundary, last = min(starts), min(back), max(back)
        windows += [(rank, repr(key) + "/f", first, boundary), (rank, repr(key) + "/b", boundary, last)]
    con.execute("CREATE OR REPLACE TEMP TABLE _pr_windows (rank INTEGER, key VARCHAR, from_ns BIGINT, to_ns BIGINT)")
    if not windows:
        return {}
    con.executemany("INSERT INTO _pr_windows VALUES (?, ?, ?, ?)", windows)
    sql = SQL_WINDOW_COMPUTE_GPU if device_kind == "gpu" else SQL_WINDOW_COMPUTE_CPU
    params = {"run": run_id} if "$run" in sql else None
    measured = {k: ns / 1e9 for _, k, ns in con.execute(sql, params).fetchall()}
    return {key: (measured.get(repr(key) + "/f", 0.0), measured.get(repr(key) + "/b", 0.0)) for key in groups}


def _replay_fsdp(con, run_id: int, rows: list[dict], device_kind: str, reshard: bool) -> None:
    groups = _groups(rows, "fsdp_unit")
    compute = _fsdp_windows(con, run_id, groups, device_kind)
    for key, group in groups.items():
        if key not in compute or any(r["predicted_comm_ms"] is None for r in group):
            continue
        forward_s, backward_s = compute[key]
        order = [r["id"] for r in group if r["phase"] == "forward_allgather"]
        by_phase = {(r["id"], r["phase"]): r for r in group}
        sizes = {u: (by_phase[(u, "forward_allgather")]["bytes"] or 0) for u in order}
        total = sum(sizes.values()) or 1
        units, reduce_parts = [], {}
        for u in order:
            ag = by_phase[(u, "forward_allgather")]["predicted_comm_ms"] / 1e3
            # the reduce after a unit's backward: its reduce-scatter, then (HSDP) the
            # all-reduce across replicas, one after the other on the comm lane
            parts = [by_phase[(u, p)]["predicted_comm_ms"] / 1e3 for p in ("reduce_scatter", "allreduce")
                     if (u, p) in by_phase]
            reduce_parts[u] = parts
            share = sizes[u] / total
            units.append(FsdpUnit(u, forward_s * share, backward_s * share, ag, sum(parts)))
        if not units:
            continue
        options = FsdpOptions(forward_prefetch=device_kind == "gpu", backward_prefetch=True,
                              reshard_after_forward=reshard)
        exposed = defaultdict(float)
        for span in replay_fsdp(units, options).spans:
            exposed[(span.unit, span.phase)] += span.exposed_s
        for r in group:
            if r["phase"] in ("reduce_scatter", "allreduce") and (r["id"], "reduce_scatter") in exposed:
                # split the unit's reduce exposure between its reduce-scatter and all-reduce by time
                parts = reduce_parts.get(r["id"]) or [0.0]
                mine = r["predicted_comm_ms"] / 1e3
                total_s = sum(parts) or 1.0
                r["predicted_exposed_ms"] = round(exposed[(r["id"], "reduce_scatter")] * mine / total_s * 1e3, 6)
            elif (r["id"], r["phase"]) in exposed:
                r["predicted_exposed_ms"] = round(exposed[(r["id"], r["phase"])] * 1e3, 6)


def predict_exposed(con, run_id: int, rows: list[dict], device_kind: str, manifest: dict) -> None:
    """predicted_exposed_ms of each collective, in place (None where no replay applies)."""
    for r in rows:
        r["predicted_exposed_ms"] = None
    _replay_ddp(con, run_id, rows, device_kind)
    units = [u for u in manifest.get("units") or [] if u.get("name")]
    reshard = all(u.get("reshard_after_forward", True) for u in units) if units else True
    _replay_fsdp(con, run_id, rows, device_kind, reshard)
