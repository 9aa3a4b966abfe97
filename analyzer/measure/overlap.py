"""Exposed communication per rank and per step: ``sql/overlap.sql`` as JSON rows.

Rows are dicts with times in milliseconds: ``contract.figures``' RankFigures and
StepFigures as JSON (the contract of ``analyze``).
"""

from __future__ import annotations

from overlapscope.analyzer import sql
from overlapscope.analyzer.measure import waits
from overlapscope.analyzer.units import ms, pct
from overlapscope.contract.figures import RankFigures, StepFigures, overlap_pct


def compute(con, run_id: int) -> dict:
    """Per-rank and per-step compute, comm, exposed comm, overlap % and idle time; per rank
    also its clock offset and its comm split into waiting for peers and transfer."""
    sql.ensure(con, "overlap", run_id=run_id)
    split = waits.ranks(con, run_id)
    ranks = [RankFigures(
        rank=r["rank"],
        device_kind=r["device_kind"],
        steps=r["steps"],
        step_ms=ms(r["median_step_ns"]),
        compute_ms=ms(r["compute_ns"]),
        comm_ms=ms(r["comm_ns"]),
        exposed_comm_ms=ms(r["exposed_comm_ns"]),
        overlap_pct=overlap_pct(r["comm_ns"], r["exposed_comm_ns"]),
        idle_ms=ms(r["idle_ns"]),
        other_ms=ms(r["other_ns"]),
        span_ms=ms(r["span_ns"]),
        # HTA's comp_comm_overlap_pctg: only work launched before the last ProfilerStep.
        hta_overlap_pct=pct(r["hidden_hta_ns"], r["comm_hta_ns"]) if r["comm_hta_ns"] else None,
        # comparisons between ranks (measure/waits.py): the rank's clock offset, and its
        # comm split into waiting for peers and transfer (null without a peer loaded)
        **_split(split.get(r["rank"])),
    ).as_json() for r in sql.rows(con, "overlap.ranks")]
    steps = [StepFigures(
        rank=s["rank"],
        step=s["step"],
        step_ms=ms(s["step_ns"]),
        compute_ms=ms(s["compute_ns"]),
        comm_ms=ms(s["comm_ns"]),
        exposed_comm_ms=ms(s["exposed_comm_ns"]),
        overlap_pct=overlap_pct(s["comm_ns"], s["exposed_comm_ns"]),
        idle_ms=ms(s["idle_ns"]),
        other_ms=ms(s["other_ns"]),
        spill_in_ms=ms(s["spill_in_ns"]),
        spill_out_ms=ms(s["spill_out_ns"]),
    ).as_json() for s in sql.rows(con, "overlap.steps")]
    return {"ranks": ranks, "steps": steps}


def _split(w: dict | None) -> dict:
    if w is None:
        return {"clock_offset_ms": 0.0, "comm_wait_ms": None, "comm_transfer_ms": None, "exposed_wait_ms": None}
    return {k: w[k] for k in ("clock_offset_ms", "comm_wait_ms", "comm_transfer_ms", "exposed_wait_ms")}
