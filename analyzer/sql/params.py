"""Which rank scripts a load runs, and with which parameters (the map, the reduce and a
catalog's upgrade run them alike)."""

from __future__ import annotations

from overlapscope.analyzer.ingest.classify import NORM_OPS
from overlapscope.analyzer.units import NS_PER_US

# The rank scripts (sql headers ``-- scope: rank``) each detail runs, in order: what they
# read must be in the detail's load (ingest/decode.py, DETAILS).
RANK_SCRIPTS = {
    "overlap": ("steps", "overlap", "instances"),
    "attribution": ("steps", "overlap", "instances", "collectives", "checklist", "rank_facts"),
}
RANK_SCRIPTS["full"] = RANK_SCRIPTS["attribution"]

LAUNCH_GAP_US = 20.0  # the checklist's launch_gap_us threshold (its reason: checklist/findings.py)
# checklist.sql's parameters besides the run (the per-rank map, the reduce and measure/idle.py alike)
CHECKLIST_PARAMS = {"launch_gap_ns": int(LAUNCH_GAP_US * NS_PER_US), "norm_ops": sorted(NORM_OPS)}


def script_params(script: str, run_id: int) -> dict:
    """The parameters every caller runs ``script`` with (the reduce records the same)."""
    if script == "checklist":
        return {"run_id": run_id, **CHECKLIST_PARAMS}
    return {"run_id": run_id}
