"""Which rank scripts a load runs, and with which parameters (the map, the reduce and a
catalog's upgrade run them alike)."""

from __future__ import annotations

# The rank scripts (sql headers ``-- scope: rank``) each detail runs, in order: what they
# read must be in the detail's load (ingest/decode.py, DETAILS).
RANK_SCRIPTS = {
    "overlap": ("steps", "overlap", "instances"),
    "attribution": ("steps", "overlap", "instances", "collectives", "checklist", "rank_facts"),
}
RANK_SCRIPTS["full"] = RANK_SCRIPTS["attribution"]


def script_params(script: str, run_id: int) -> dict:
    """The parameters every caller runs ``script`` with (the reduce records the same)."""
    if script == "checklist":
        from overlapscope.analyzer.measure import idle

        return {"run_id": run_id, **idle.CHECKLIST_PARAMS}
    return {"run_id": run_id}
