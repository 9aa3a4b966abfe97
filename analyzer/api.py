"""The library calls behind the CLI commands: paths in, JSON-ready dicts out."""

from __future__ import annotations

from overlapscope.analyzer.ingest.load import load


def analyze(paths: list[str], workers: int | None = None) -> dict:
    """Per-rank and per-step compute, comm, exposed comm, overlap % and idle time.

    Loads the traces into an in-memory store (only what the analysis reads) and
    returns ``{"run": {...}, "ranks": [...], "steps": [...]}`` with times in ms.
    """
    loaded = load(paths, detail="overlap", workers=workers)
    return analyze_run(loaded.con, loaded.run_id)


def analyze_run(con, run_id: int) -> dict:
    """``analyze`` for a run already in a store (the catalog, the dashboard)."""
    from overlapscope.analyzer.measure import overlap
    from overlapscope.analyzer.store import runinfo  # imports duckdb: after load() has forked its workers

    return {"run": runinfo.describe(con, run_id), **overlap.compute(con, run_id)}


def buckets(paths: list[str], workers: int | None = None, tokens: float | None = None) -> dict:
    """Per-collective attribution (bucket, unit, phase) with the model beside it.

    Returns ``run``, ``collectives``, ``summary``, ``steps``, ``model`` (per step:
    F, W, T, tokens to hide, verdict), ``measured`` and ``memory``.
    """
    loaded = load(paths, detail="attribution", workers=workers)
    return buckets_run(loaded.con, loaded.run_id, tokens)


def buckets_run(con, run_id: int, tokens: float | None = None) -> dict:
    from overlapscope.analyzer.predict import buckets as buckets_analysis
    from overlapscope.analyzer.store import runinfo

    return {"run": runinfo.describe(con, run_id), **buckets_analysis.compute(con, run_id, tokens)}


def diagnose(paths: list[str], workers: int | None = None, tokens: float | None = None) -> dict:
    """The checklist: one finding per rule (failed first) with evidence from the trace."""
    loaded = load(paths, detail="attribution", workers=workers)
    return diagnose_run(loaded.con, loaded.run_id, tokens)


def diagnose_run(con, run_id: int, tokens: float | None = None) -> dict:
    from overlapscope.analyzer.checklist import findings as diagnose_analysis
    from overlapscope.analyzer.store import runinfo

    return {"run": runinfo.describe(con, run_id), **diagnose_analysis.compute(con, run_id, tokens)}
