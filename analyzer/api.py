"""The library calls behind the CLI commands: paths in, JSON-ready dicts out.

Each command has two forms: from trace paths (loaded into an in-memory store
with only what its analysis reads) and ``*_run`` for a run already in a store
(the catalog, the dashboard). Nothing here imports duckdb: a load forks its
decode workers before the store opens. The attribution and the checklist are
imported where they are used: ``analyze`` starts faster without them.
"""

from __future__ import annotations

from overlapscope.analyzer.headline import failed, headline
from overlapscope.analyzer.ingest.load import load
from overlapscope.analyzer.measure import overlap
from overlapscope.analyzer.store.runinfo import run_info


def analyze(paths: list[str], workers: int | None = None) -> dict:
    """Per-rank and per-step compute, comm, exposed comm, overlap % and idle time.

    Returns ``{"run", "headline", "ranks", "steps"}`` with times in ms.
    """
    loaded = load(paths, detail="overlap", workers=workers)
    return analyze_run(loaded.con, loaded.run_id)


def analyze_run(con, run_id: int) -> dict:
    """``analyze`` for a run already in a store; for a pruned run, the figures stored at ingest."""
    from overlapscope.analyzer.store import catalog

    info = run_info(con, run_id)
    result = catalog.figures(con, run_id) if info.pruned_at is not None else overlap.compute(con, run_id)
    return {"run": info.describe(), "headline": headline(result), **result}


def buckets(paths: list[str], workers: int | None = None, tokens: float | None = None) -> dict:
    """Per-collective attribution (bucket, unit, phase) with the model beside it.

    Returns ``run``, ``collectives``, ``summary``, ``steps``, ``model`` (per step:
    F, W, T, tokens to hide, verdict), ``measured`` and ``memory``.
    """
    loaded = load(paths, detail="attribution", workers=workers)
    return buckets_run(loaded.con, loaded.run_id, tokens)


def buckets_run(con, run_id: int, tokens: float | None = None) -> dict:
    from overlapscope.analyzer.predict import buckets as buckets_report

    run_info(con, run_id).require_events()
    a = buckets_report.analysis(con, run_id, tokens)
    return {"run": a.info.describe(), **buckets_report.report(a)}


def diagnose(paths: list[str], workers: int | None = None, tokens: float | None = None) -> dict:
    """The checklist: one finding per rule (failed first) with evidence from the trace."""
    loaded = load(paths, detail="attribution", workers=workers)
    return diagnose_run(loaded.con, loaded.run_id, tokens)


def diagnose_run(con, run_id: int, tokens: float | None = None) -> dict:
    """``diagnose`` for a run already in a store; its headline names the failed rules."""
    from overlapscope.analyzer import checklist
    from overlapscope.analyzer.predict import buckets as buckets_report

    run_info(con, run_id).require_events()
    a = buckets_report.analysis(con, run_id, tokens)
    result = checklist.diagnose(con, a)
    return {"run": a.info.describe(), "headline": headline(a.overlap, failed(result["findings"])), **result}
