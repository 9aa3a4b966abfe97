"""Exposed communication per rank and per step: runs ``sql/overlap.sql``.

Returns plain rows (dicts) with times in milliseconds, the JSON contract's units.
"""

from __future__ import annotations

from overlapscope.analyzer.store.database import run_script

NS_PER_MS = 1e6


def _pct(hidden_ns: float, comm_ns: float) -> float | None:
    return round(100.0 * hidden_ns / comm_ns, 2) if comm_ns else None


def _ms(ns) -> float | None:
    return None if ns is None else round(ns / NS_PER_MS, 6)  # keeps every nanosecond


def _rows(con, sql: str) -> list[dict]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def compute(con, run_id: int) -> dict:
    """Per-rank and per-step compute, comm, exposed comm, overlap % and idle time."""
    run_script(con, "overlap.sql", run_id=run_id)
    ranks = []
    for r in _rows(con, "SELECT * FROM overlap_rank ORDER BY rank"):
        ranks.append({
            "rank": r["rank"],
            "device_kind": r["device_kind"],
            "steps": r["steps"],
            "step_ms": _ms(r["median_step_ns"]),
            "compute_ms": _ms(r["compute_ns"]),
            "comm_ms": _ms(r["comm_ns"]),
            "exposed_comm_ms": _ms(r["exposed_comm_ns"]),
            "overlap_pct": _pct(r["comm_ns"] - r["exposed_comm_ns"], r["comm_ns"]),
            "idle_ms": _ms(r["idle_ns"]),
            "other_ms": _ms(r["other_ns"]),
            "span_ms": _ms(r["span_ns"]),
            # HTA's comp_comm_overlap_pctg: only work launched before the last ProfilerStep.
            "hta_overlap_pct": _pct(r["hidden_hta_ns"], r["comm_hta_ns"]) if r["comm_hta_ns"] else None,
        })
    steps = []
    for s in _rows(con, "SELECT * FROM overlap_step ORDER BY rank, step"):
        steps.append({
            "rank": s["rank"],
            "step": s["step"],
            "step_ms": _ms(s["step_ns"]),
            "compute_ms": _ms(s["compute_ns"]),
            "comm_ms": _ms(s["comm_ns"]),
            "exposed_comm_ms": _ms(s["exposed_comm_ns"]),
            "overlap_pct": _pct(s["comm_ns"] - s["exposed_comm_ns"], s["comm_ns"]),
            "idle_ms": _ms(s["idle_ns"]),
            # step_ms = compute + exposed comm + other + idle + spill_in - spill_out, exactly
            "other_ms": _ms(s["other_ns"]),
            "spill_in_ms": _ms(s["spill_in_ns"]),
            "spill_out_ms": _ms(s["spill_out_ns"]),
        })
    return {"ranks": ranks, "steps": steps}
