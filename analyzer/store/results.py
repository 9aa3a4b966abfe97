"""What the catalog derives once, at ingest, and stores with a run: its headline
(``runs.headline`` and the ``metrics`` rows) and the checklist's findings.

Written inside the ingest's transaction (``store.database.insert_run``'s ``after``),
and again for every stored run when an older catalog is upgraded.
"""

from __future__ import annotations

import json

from overlapscope.analyzer import checklist, sql
from overlapscope.analyzer.headline import failed, headline
from overlapscope.analyzer.predict import buckets

# The headline's numbers, as rows of the metrics table (for CI gates and SQL).
METRICS = ("step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms", "overlap_pct", "exposed_pct",
           "slowest_rank")


def write(con, run_id: int) -> dict:
    """Compute and store a run's headline and findings; return the headline."""
    a = buckets.analysis(con, run_id)
    findings = checklist.diagnose(con, a)["findings"]
    head = headline(a.overlap, failed(findings))
    con.execute(sql.query("catalog.set_headline"), {"run_id": run_id, "headline": json.dumps(head)})
    con.execute(sql.query("catalog.delete_metrics"), {"run_id": run_id})
    con.execute(sql.query("catalog.delete_findings"), {"run_id": run_id})
    con.executemany(sql.query("catalog.insert_metric"),
                    [{"run_id": run_id, "name": k, "value": head[k]} for k in METRICS if head[k] is not None])
    con.executemany(sql.query("catalog.insert_finding"),
                    [{"run_id": run_id, **{k: f[k] for k in ("id", "status", "severity", "impact_ms", "title",
                                                             "evidence", "fix")}} for f in findings])
    return head
