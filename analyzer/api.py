"""The library calls behind the CLI commands: paths in, JSON-ready dicts out."""

from __future__ import annotations

from . import overlap, runinfo
from .load import load


def analyze(paths: list[str], workers: int | None = None) -> dict:
    """Per-rank and per-step compute, comm, exposed comm, overlap % and idle time.

    Loads the traces into an in-memory store (only what the analysis reads) and
    returns ``{"run": {...}, "ranks": [...], "steps": [...]}`` with times in ms.
    """
    loaded = load(paths, full=False, workers=workers)
    return analyze_run(loaded.con, loaded.run_id)


def analyze_run(con, run_id: int) -> dict:
    """``analyze`` for a run already in a store (the catalog, the dashboard)."""
    return {"run": runinfo.describe(con, run_id), **overlap.compute(con, run_id)}
