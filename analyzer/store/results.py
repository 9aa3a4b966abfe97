"""A run's derived results as the catalog stores them: its headline (``runs.headline``
and the ``metrics`` rows), the checklist's findings, and the figures per rank, step and
bucket or unit (``rank_metrics``, ``step_metrics``, ``group_metrics``), which outlive the
raw events when a run is pruned.

What they are is computed above the store (``runs/derive.py``: the measurement, the
model, the checklist); this module only writes them, inside the ingest's transaction
and again for every stored run when an older catalog is upgraded.
"""

from __future__ import annotations

import json

import pyarrow as pa

from overlapscope.analyzer import sql
from overlapscope.contract import figures
# The headline's numbers, as rows of the metrics table (for CI gates and SQL).
METRICS = tuple(m.name for m in figures.METRICS)
# The stored figures: table -> (registered name, insert query, columns of analyze's rows).
RANK_COLUMNS = ("rank", "device_kind", "steps", "step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct",
                "idle_ms", "other_ms", "span_ms", "hta_overlap_pct", "clock_offset_ms", "comm_wait_ms",
                "comm_transfer_ms", "exposed_wait_ms")
STEP_COLUMNS = ("rank", "step", "step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct", "idle_ms",
                "other_ms", "spill_in_ms", "spill_out_ms")
GROUP_COLUMNS = ("kind", "id", "phase", "count", "bytes", "comm_ms", "exposed_ms", "busbw_gbps", "predicted_comm_ms",
                 "predicted_exposed_ms", "inferred")
_FIGURES = (("rank_metrics", RANK_COLUMNS), ("step_metrics", STEP_COLUMNS), ("group_metrics", GROUP_COLUMNS))


def save(con, run_id: int, computed: dict) -> dict:
    """Store what ``derive.compute`` derived as run ``run_id``'s; return the headline."""
    head, findings = computed["headline"], computed["findings"]
    con.execute(sql.query("catalog.set_headline"), {"run_id": run_id, "headline": json.dumps(head)})
    con.execute(sql.query("catalog.delete_metrics"), {"run_id": run_id})
    con.execute(sql.query("catalog.delete_findings"), {"run_id": run_id})
    con.executemany(sql.query("catalog.insert_metric"),
                    [{"run_id": run_id, "name": k, "value": head[k]} for k in METRICS if head[k] is not None])
    con.executemany(sql.query("catalog.insert_finding"),
                    [{"run_id": run_id, **{k: f[k] for k in ("id", "status", "severity", "impact_ms", "title",
                                                             "evidence", "fix")}} for f in findings])
    _write_figures(con, run_id, computed["figures"])
    return head


def _write_figures(con, run_id: int, rows_of: dict[str, list[dict]]) -> None:
    """Replace the run's rows of each figures table (one insert per table, from Arrow)."""
    for table, columns in _FIGURES:
        con.execute(sql.query(f"catalog.delete_{table}"), {"run_id": run_id})
        rows = rows_of[table]
        if not rows:
            continue
        con.register("_figures", pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows]))
        try:
            con.execute(sql.query(f"catalog.insert_{table}"), {"run_id": run_id})
        finally:
            con.unregister("_figures")
