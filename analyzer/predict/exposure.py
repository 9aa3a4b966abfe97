"""The data-parallel model beside the measurement, per collective.

Predicted comm time: the latency term plus the bytes one rank puts on the wire
over W of the collective's kind (model.ring). Predicted exposed time: each step replayed with the model's
timelines (model.replay) using what the trace says about it:

- DDP: buckets launch on one comm stream in the order their gradients became
  ready; a bucket's ready time is when the device finished the compute launched
  before it (GPU), or its launch (CPU-only: the CPU is the device). The backward
  pass ends when the last bucket is ready.
- FSDP: units in the order of their forward all-gathers; each unit's forward and
  backward compute is the step's measured forward / backward compute split in
  proportion to the unit's bytes (compute per token is 2 and 4 FLOPs per
  parameter: docs/model.md). Backward prefetch as FSDP2 does it; forward
  prefetch only on GPUs, where the CPU runs ahead (docs/checklist.md, cause 1).

Both functions put new rows (``msgspec.structs.replace``) in place of the list's rows and
return the list: a run's rows are never held twice (two million of them at 1,024 ranks).
"""

from __future__ import annotations

from collections import defaultdict

import msgspec

from overlapscope.analyzer.measure.collectives import Collective
from overlapscope.analyzer.model.replay import Bucket, FsdpOptions, FsdpUnit, replay_ddp, replay_fsdp
from overlapscope.analyzer.model.ring import collective_time_s
from overlapscope.analyzer.store.runinfo import RunInfo
from overlapscope.analyzer.units import NS_PER_S

_replace = msgspec.structs.replace


def predict_comm(rows: list[Collective], w_bytes_per_s: float | None, latency_s: float | None,
                 w_by_kind: dict[str, float] | None = None) -> list[Collective]:
    """Each row with predicted_comm_ms (None when bytes or W are unknown); W of the row's
    own kind from ``w_by_kind`` where it has one, else ``w_bytes_per_s``."""
    w_by_kind = w_by_kind or {}
    known: dict[tuple, float | None] = {}  # one prediction per kind, size and group: rows share a few
    for i, r in enumerate(rows):
        w = w_by_kind.get(r.collective) or w_bytes_per_s
        key = (r.collective, r.bytes, r.group_size, w)
        if key not in known:
            known[key] = None
            if w and r.bytes and r.group_size and r.group_size > 1 and r.collective:
                try:
                    known[key] = round(collective_time_s(r.collective, r.bytes, r.group_size, w,
                                                         latency_s or 0.0) * 1e3, 6)
                except ValueError:
                    pass
        rows[i] = _replace(r, predicted_comm_ms=known[key])
    return rows


def _groups(rows: list[Collective], kind: str) -> dict[tuple, list[Collective]]:
    groups: dict[tuple, list[Collective]] = defaultdict(list)
    for r in rows:
        if r.kind == kind and r.step is not None:
            groups[(r.rank, r.step, r.microbatch)].append(r)
    for g in groups.values():
        g.sort(key=lambda r: (r.launch_ts_ns or r.start_ns, r.event_id))
    return groups


def _ready_ns(r: Collective, device_kind: str) -> int:
    """When a bucket's gradients were ready: on GPUs, when the compute launched before it
    had finished (collectives.sql's ready_ns); else (or without one) its launch."""
    if device_kind == "gpu" and r.ready_ns is not None:
        return r.ready_ns
    return r.launch_ts_ns or r.start_ns


def _replay_ddp(info: RunInfo, rows: list[Collective]) -> dict[tuple[int, int], float]:
    """Predicted exposed ms of each bucket all-reduce, keyed by (rank, event_id)."""
    groups = _groups(rows, "ddp_bucket")
    out = {}
    for group in groups.values():
        if any(r.predicted_comm_ms is None for r in group):
            continue
        at = [_ready_ns(r, info.device_kind) for r in group]
        origin = min(at)
        buckets = [Bucket((t - origin) / NS_PER_S, r.predicted_comm_ms / 1e3) for t, r in zip(at, group)]
        timeline = replay_ddp(buckets, backward_end_s=(max(at) - origin) / NS_PER_S)
        for r, span in zip(group, timeline.buckets):
            out[(r.rank, r.event_id)] = round(span.exposed_s * 1e3, 6)
    return out


_BACKWARD = ("backward_allgather", "reduce_scatter", "allreduce")


def _fsdp_compute(groups: dict) -> dict[tuple, tuple[float, float]]:
    """Measured forward and backward compute (s) of each (rank, step, microbatch): the
    compute from its first collective's launch to its first backward one (forward), and
    from there to its last backward one. Each row knows the compute before its launch
    (collectives.sql's compute_before_ns, monotone in time), so a window's compute is
    the difference between its ends' rows."""
    out = {}
    for key, group in groups.items():
        back = [r.compute_before_ns for r in group if r.phase in _BACKWARD]
        if not back:  # no backward collective: no window to measure
            out[key] = (0.0, 0.0)
            continue
        first = min(r.compute_before_ns for r in group)
        out[key] = ((min(back) - first) / NS_PER_S, (max(back) - min(back)) / NS_PER_S)
    return out


def _replay_fsdp(info: RunInfo, rows: list[Collective]) -> dict[tuple[int, int], float]:
    """Predicted exposed ms of each unit collective, keyed by (rank, event_id)."""
    groups = _groups(rows, "fsdp_unit")
    compute = _fsdp_compute(groups)
    options = FsdpOptions(forward_prefetch=info.device_kind == "gpu", backward_prefetch=True,
                          reshard_after_forward=info.manifest.reshard_after_forward)
    out = {}
    for key, group in groups.items():
        if key not in compute or any(r.predicted_comm_ms is None for r in group):
            continue
        forward_s, backward_s = compute[key]
        order = [r.id for r in group if r.phase == "forward_allgather"]
        by_phase = {(r.id, r.phase): r for r in group}
        sizes = {u: (by_phase[(u, "forward_allgather")].bytes or 0) for u in order}
        total = sum(sizes.values()) or 1
        units, reduce_parts = [], {}
        for u in order:
            gather_s = by_phase[(u, "forward_allgather")].predicted_comm_ms / 1e3
            # the reduce after a unit's backward: its reduce-scatter, then (HSDP) the
            # all-reduce across replicas, one after the other on the comm lane
            parts = [by_phase[(u, p)].predicted_comm_ms / 1e3 for p in ("reduce_scatter", "allreduce")
                     if (u, p) in by_phase]
            reduce_parts[u] = parts
            share = sizes[u] / total
            units.append(FsdpUnit(u, forward_s * share, backward_s * share, gather_s, sum(parts)))
        if not units:
            continue
        exposed: dict[tuple, float] = defaultdict(float)
        for span in replay_fsdp(units, options).spans:
            exposed[(span.unit, span.phase)] += span.exposed_s
        for r in group:
            if r.phase in ("reduce_scatter", "allreduce") and (r.id, "reduce_scatter") in exposed:
                # the unit's reduce exposure, split between its reduce-scatter and all-reduce by time
                total_s = sum(reduce_parts.get(r.id) or [0.0]) or 1.0
                share = r.predicted_comm_ms / 1e3 / total_s
                out[(r.rank, r.event_id)] = round(exposed[(r.id, "reduce_scatter")] * share * 1e3, 6)
            elif (r.id, r.phase) in exposed:
                out[(r.rank, r.event_id)] = round(exposed[(r.id, r.phase)] * 1e3, 6)
    return out


def predict_exposed(info: RunInfo, rows: list[Collective]) -> list[Collective]:
    """Each row with predicted_exposed_ms (None where no replay applies)."""
    predicted = {**_replay_ddp(info, rows), **_replay_fsdp(info, rows)}
    for i, r in enumerate(rows):
        rows[i] = _replace(r, predicted_exposed_ms=predicted.get((r.rank, r.event_id)))
    return rows
