"""Device idle time per rank and step, and the part of it spent waiting for the host.

Runs ``sql/checklist.sql`` (its ``check_idle``): an idle gap ended by work that
started within ``LAUNCH_GAP_US`` (sql/params.py) of its own launch was the device waiting for the
host, not for other work. The checklist's ``host_bound`` rule and the model's
reconciliation read the same figures.
"""

from __future__ import annotations

from overlapscope.analyzer import sql
from overlapscope.analyzer.sql.params import CHECKLIST_PARAMS


def ensure(con, run_id: int) -> None:
    sql.ensure(con, "checklist", run_id=run_id, **CHECKLIST_PARAMS)


def per_step(con, run_id: int) -> list[dict]:
    """rank, step, idle_ns, host_idle_ns."""
    ensure(con, run_id)
    return sql.rows(con, "checklist.idle")
