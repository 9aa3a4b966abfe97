"""The library calls behind the CLI commands: paths in, JSON-ready dicts out.

Each command has two forms: from trace paths (mapped over ranks, each rank keeping
only what its analysis reads, and reduced into a small in-memory store: analyzer/
engine) and ``*_run`` for a run already in a store (the reduce's, the catalog, the
dashboard). Nothing here imports duckdb: the map forks its workers before any
store opens. The attribution and the checklist are imported where they are used:
``analyze`` starts faster without them. ``engine``: ``local`` (processes here) or
``ray`` (``ray_address``: a cluster).
"""

from __future__ import annotations

from collections.abc import Iterator

from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.headline import failed, headline
from overlapscope.analyzer.measure import overlap
from overlapscope.analyzer.store.runinfo import run_info


def _engine():
    """The map over ranks (imported by the analyses of paths: a stored run needs none of it)."""
    from overlapscope.analyzer import engine

    return engine


def analyze(paths: list[str], workers: int | None = None, engine: str = "local", ray_address: str | None = None,
            on_mapped=None, limits=None) -> dict:
    """Per-rank and per-step compute, comm, exposed comm, overlap % and idle time.

    Returns ``{"run", "headline", "ranks", "steps"}`` with times in ms. ``limits``: the
    input caps (ingest.limits; the CLI's and the environment's when None).
    """
    mapped = _engine().map_run(paths, "overlap", workers, engine, ray_address, limits=limits, on_mapped=on_mapped)
    return analyze_run(mapped.con, mapped.run_id)


def analyze_run(con, run_id: int) -> dict:
    """``analyze`` for a run already in a store; for a run of a catalog (pruned or not),
    the figures stored at ingest."""
    from overlapscope.analyzer.store import catalog

    info = run_info(con, run_id)
    stored = info.stored or info.pruned_at is not None
    result = catalog.figures(con, run_id) if stored else overlap.compute(con, run_id)
    return {"run": info.describe(), "headline": headline(result), **result}


def _reduced(info):
    """A stored run's ranks reduced again from their stored results (not from events):
    for an analysis with other inputs than ingest's (``--tokens``)."""
    from overlapscope.analyzer.engine.rank import stored_results
    from overlapscope.analyzer.engine.reduce import reduce_results

    return reduce_results(stored_results(info.run_dir), info.name, info.source or info.name,
                          info.manifest if info.has_manifest else None)


def _answers(info, name: str, tokens: float | None) -> bool:
    """Whether the analysis ``name`` stored at ingest answers for ``tokens``."""
    from overlapscope.analyzer.store import runstore

    if not info.stored:
        return False
    if not info.run_dir.is_dir():
        raise UsageError(f"run {info.run_id} ({info.name}): its files are missing from {info.run_dir} (a catalog "
                         "is its .duckdb file and the .runs folder beside it: copy both)")
    facts = runstore.document_facts(info.run_dir, name)
    return facts is not None and (tokens is None or tokens == facts.get("tokens"))


def _stored(info, name: str, tokens: float | None) -> dict | None:
    """The analysis ``name`` stored at ingest, when it answers for ``tokens``."""
    from overlapscope.analyzer.store import runstore

    return runstore.read_document(info.run_dir, name) if _answers(info, name, tokens) else None


def stored_json(con, run_id: int, name: str, tokens: float | None = None) -> Iterator[bytes] | None:
    """``buckets``' or ``diagnose``'s JSON of a catalog's run, indented, straight from what
    ingest stored (no decoding, never whole in memory: large runs print at once), as pieces
    to write one after the other; None when it must be computed."""
    import itertools

    import msgspec

    from overlapscope.analyzer.store import runstore

    info = run_info(con, run_id)
    if not _answers(info, name, tokens):
        return None
    # the stored text opens '{\n  "key": ...' (runstore.write_document): the run goes first
    body = runstore.document_chunks(info.run_dir, name, skip=2)
    if body is None:
        return None
    run = msgspec.json.format(msgspec.json.encode(info.describe()), indent=2).replace(b"\n", b"\n  ")
    return itertools.chain([b'{\n  "run": ' + run + b",\n"], body)


def buckets(paths: list[str], workers: int | None = None, tokens: float | None = None, engine: str = "local",
            ray_address: str | None = None, on_mapped=None) -> dict:
    """Per-collective attribution (bucket, unit, phase) with the model beside it.

    Returns ``run``, ``collectives``, ``summary``, ``steps``, ``model`` (per step:
    F, W, T, tokens to hide, verdict), ``measured`` and ``memory``.
    """
    mapped = _engine().map_run(paths, "attribution", workers, engine, ray_address, on_mapped=on_mapped)
    return buckets_run(mapped.con, mapped.run_id, tokens)


def buckets_run(con, run_id: int, tokens: float | None = None) -> dict:
    """``buckets`` for a run already in a store; a catalog's run answers with what ingest stored
    (with other ``tokens``, its ranks' stored results are reduced again)."""
    from overlapscope.analyzer.predict import buckets as buckets_report

    info = run_info(con, run_id)
    document = _stored(info, "buckets", tokens)
    if document is not None:
        return {"run": info.describe(), **document}
    if info.stored:
        reduced, reduced_id = _reduced(info)
        return {**buckets_run(reduced, reduced_id, tokens), "run": info.describe()}
    info.require_events()
    a = buckets_report.analysis(con, run_id, tokens)
    return {"run": a.info.describe(), **buckets_report.report(a)}


def diagnose(paths: list[str], workers: int | None = None, tokens: float | None = None, engine: str = "local",
             ray_address: str | None = None, on_mapped=None) -> dict:
    """The checklist: one finding per rule (failed first) with evidence from the trace."""
    mapped = _engine().map_run(paths, "attribution", workers, engine, ray_address, on_mapped=on_mapped)
    return diagnose_run(mapped.con, mapped.run_id, tokens)


def diagnose_run(con, run_id: int, tokens: float | None = None) -> dict:
    """``diagnose`` for a run already in a store; its headline names the failed rules. A
    catalog's run answers with what ingest stored (other ``tokens``: reduced again)."""
    from overlapscope.analyzer import checklist
    from overlapscope.analyzer.predict import buckets as buckets_report

    info = run_info(con, run_id)
    document = _stored(info, "diagnose", tokens)
    if document is not None:
        return {"run": info.describe(), **document}
    if info.stored:
        reduced, reduced_id = _reduced(info)
        return {**diagnose_run(reduced, reduced_id, tokens), "run": info.describe()}
    info.require_events()
    a = buckets_report.analysis(con, run_id, tokens)
    result = checklist.diagnose(con, a)
    return {"run": a.info.describe(), "headline": headline(a.overlap, failed(result["findings"])), **result}


def _analysis(con, run_id: int, tokens: float | None = None):
    """The buckets report's RunAnalysis of a run in a store; a catalog's run from its ranks'
    stored results (reduced again: the what-if reads the collectives' internal times)."""
    from overlapscope.analyzer.predict import buckets as buckets_report

    info = run_info(con, run_id)
    if info.stored:
        _answers(info, "buckets", None)  # the run's files must be there
        reduced, reduced_id = _reduced(info)
        a = buckets_report.analysis(reduced, reduced_id, tokens)
        return a, info
    info.require_events()
    return buckets_report.analysis(con, run_id, tokens), info


def whatif(paths: list[str], changes=None, sweep: tuple | None = None, workers: int | None = None,
           engine: str = "local", ray_address: str | None = None, on_mapped=None) -> dict:
    """The run replayed under ``changes`` (whatif.Changes): measured, replayed, predicted
    and the model's figures, memory per GPU and the terms per collective; with ``sweep``
    (name, [(value, Changes)]) one prediction per value (``sweep``)."""
    mapped = _engine().map_run(paths, "attribution", workers, engine, ray_address, on_mapped=on_mapped)
    return whatif_run(mapped.con, mapped.run_id, changes, sweep)


def whatif_run(con, run_id: int, changes=None, sweep: tuple | None = None) -> dict:
    """``whatif`` for a run already in a store (a catalog's run: from its stored results)."""
    if sweep is None and (changes is None or changes.is_empty()):
        stored = whatif_stored(con, run_id)
        if stored is not None:
            return stored
    a, info = _analysis(con, run_id)
    return whatif_of(a, info, changes, sweep)


def whatif_stored(con, run_id: int, sweep_spec: str | None = None) -> dict | None:
    """``whatif_run`` with no change (and the sweep ``sweep_spec``, ``NAME=V1,V2,...``) of a
    catalog's run, as ingest stored it; None when it must be computed (another sweep, a run
    stored before this was kept, or not a catalog's run)."""
    from overlapscope.analyzer.predict.changes import sweep_spec as spec_of

    info = run_info(con, run_id)
    document = _stored(info, "whatif", None)
    if document is None:
        return None
    swept = document.pop("sweep", None)
    if sweep_spec is not None:
        if swept is None or spec_of(swept) != sweep_spec.replace(" ", ""):
            return None
        document["sweep"] = swept
    return {"run": info.describe(), **document}


def whatif_analysis(con, run_id: int):
    """What ``whatif_of`` reads of a stored run: (RunAnalysis, RunInfo), plain data that a
    caller may keep (the dashboard caches it per run) and predict from many times."""
    return _analysis(con, run_id)


def whatif_of(a, info, changes=None, sweep: tuple | None = None) -> dict:
    """``whatif`` from a run's analysis (``whatif_analysis``)."""
    from overlapscope.analyzer.predict import whatif as engine_whatif
    from overlapscope.analyzer.predict.changes import Changes

    prepared = engine_whatif.prepare(a)  # once for the prediction and every point of the sweep
    result = engine_whatif.predict(a, changes or Changes(), prepared)
    if sweep is not None:
        result["sweep"] = engine_whatif.sweep(a, *sweep, prepared=prepared)
    return {"run": info.describe(), **result}


def export_perfetto(paths: list[str], out: str, workers: int | None = None, engine: str = "local",
                    ray_address: str | None = None, on_rank=None) -> dict:
    """The run of ``paths`` as one Chrome-trace JSON for Perfetto (analyzer/export); counts."""
    from overlapscope.analyzer import export

    return export.from_paths(paths, out, workers, engine, ray_address, on_rank)


def export_perfetto_run(con, run_id: int, out: str, on_rank=None) -> dict:
    """``export_perfetto`` for a catalog's run (its raw events still stored)."""
    from overlapscope.analyzer import export

    if not run_info(con, run_id).stored:
        raise UsageError("export --run: give a run of a catalog")
    a, _ = _analysis(con, run_id)
    return export.from_run(con, run_id, out, a, diagnose_run(con, run_id)["findings"], on_rank)
