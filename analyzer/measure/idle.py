"""Device idle time per rank and step, and the part of it spent waiting for the host.

Runs ``sql/checklist.sql`` (its ``check_idle``): an idle gap ended by work that
started within ``LAUNCH_GAP_US`` of its own launch was the device waiting for the
host, not for other work. The checklist's ``host_bound`` rule and the model's
reconciliation read the same figures.
"""

from __future__ import annotations

from overlapscope.analyzer import sql
from overlapscope.analyzer.ingest.classify import NORM_OPS
from overlapscope.analyzer.units import NS_PER_US

LAUNCH_GAP_US = 20.0  # the checklist's launch_gap_us threshold (its reason: checklist/findings.py)
# sql/checklist.sql's parameters besides the run (the per-rank map runs it with the same)
CHECKLIST_PARAMS = {"launch_gap_ns": int(LAUNCH_GAP_US * NS_PER_US), "norm_ops": sorted(NORM_OPS)}


def ensure(con, run_id: int) -> None:
    sql.ensure(con, "checklist", run_id=run_id, **CHECKLIST_PARAMS)


def per_step(con, run_id: int) -> list[dict]:
    """rank, step, idle_ns, host_idle_ns."""
    ensure(con, run_id)
    return sql.rows(con, "checklist.idle")
