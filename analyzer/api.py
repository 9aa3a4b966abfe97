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


def _catalog():
    """The catalog's queries (store.catalog), imported by the calls that read a catalog: ``analyze``
    of paths starts without them."""
    from overlapscope.analyzer.store import catalog

    return catalog


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
    info = run_info(con, run_id)
    stored = info.stored or info.pruned_at is not None
    result = _catalog().figures(con, run_id) if stored else overlap.compute(con, run_id)
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


def _stored(info, name: str, tokens: float | None, leave_out: tuple[str, ...] = ()) -> dict | None:
    """The analysis ``name`` stored at ingest, when it answers for ``tokens`` (without its keys
    in ``leave_out``)."""
    from overlapscope.analyzer.store import runstore

    return runstore.read_document(info.run_dir, name, leave_out) if _answers(info, name, tokens) else None


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


def buckets_run(con, run_id: int, tokens: float | None = None, leave_out: tuple[str, ...] = ()) -> dict:
    """``buckets`` for a run already in a store; a catalog's run answers with what ingest stored
    (with other ``tokens``, its ranks' stored results are reduced again). ``leave_out``: top-level
    keys the caller does not read (the dashboard: ``collectives``, half a million rows at 256 ranks)."""
    from overlapscope.analyzer.predict import buckets as buckets_report

    info = run_info(con, run_id)
    document = _stored(info, "buckets", tokens, leave_out)
    if document is not None:
        return {"run": info.describe(), **document}
    if info.stored:
        reduced, reduced_id = _reduced(info)
        result = {**buckets_run(reduced, reduced_id, tokens), "run": info.describe()}
    else:
        info.require_events()
        a = buckets_report.analysis(con, run_id, tokens)
        result = {"run": a.info.describe(), **buckets_report.report(a)}
    return {k: v for k, v in result.items() if k not in leave_out}


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


def _analysis(con, run_id: int, tokens: float | None = None, info=None):
    """The buckets report's RunAnalysis of a run in a store; a catalog's run from its ranks'
    stored results (reduced again: the what-if reads the collectives' internal times).
    ``info``: the run's RunInfo where the caller read it."""
    from overlapscope.analyzer.predict import buckets as buckets_report

    info = info or run_info(con, run_id)
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
    a, info = whatif_analysis(con, run_id)
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
    caller may keep (the dashboard caches it per run) and predict from many times. A
    catalog's run: the prediction engine's state that ingest stored (predict.state: its
    plans, comm model and step rows, never its collectives); a run stored before it was
    kept: its ranks reduced again."""
    from overlapscope.analyzer.predict import state

    info = run_info(con, run_id)
    if info.stored:
        _answers(info, "buckets", None)  # the run's files must be there
        a = state.read(info.run_dir, info)
        if a is not None:
            return a, info
    return _analysis(con, run_id, info=info)


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


# --- stored runs: what the dashboard, the server and the CLI read of a catalog ----------------
# The front ends read a catalog through these calls, never through the store or its SQL
# (tests/test_architecture.py holds them to it). ``con`` is a catalog connection (a cursor
# of ``runs.shared``, or ``runs.open_catalog``'s).


def catalog_path(path=None):
    """The catalog file a command or the server means: ``path``, else ``$OVERLAPSCOPE_DB``, else
    the user data directory's."""
    return _catalog().resolve_path(path)


def samples_dir():
    """The sample runs shipped as package data (one folder per bundle)."""
    return _catalog().SAMPLES_DIR


def sample_name(bundle) -> str:
    """A sample run's name: ``sample/<its folder>``."""
    return _catalog().sample_name(bundle)


def missing_samples(con, folder=None) -> list:
    """The sample bundles a catalog of samples only lacks (all of them for an empty one)."""
    catalog = _catalog()
    return catalog.missing_samples(con, folder or catalog.SAMPLES_DIR)


def check_run_name(name: str | None) -> str:
    """A run name as stored, or one line saying what is wrong with it."""
    return _catalog().check_run_name(name)


def check_tags(tags: dict | None) -> dict:
    """Tags as stored, or one line saying what is wrong with them."""
    return _catalog().check_tags(tags)


def max_run_name_chars() -> int:
    return _catalog().MAX_RUN_NAME_CHARS


def resolve_run(con, ref: str | int) -> int:
    """The run id ``--run`` means: the newest run of that name, or #ID (digits that no run is
    named are an id); ``RunNotFound`` names what was asked."""
    return _catalog().resolve_run(con, ref)


def runs(con, name: str | None = None) -> list[dict]:
    """The catalog's runs (of ``name``), newest first, with their headlines (``history --json``)."""
    return _catalog().runs(con, name)


def run(con, run_id: int) -> dict:
    """One stored run as ``runs`` lists it."""
    return _catalog().run(con, run_id)


def run_count(con) -> int:
    from overlapscope.analyzer import sql

    return sql.one(con, "catalog.count")[0]


def run_detail(con, run_id: int) -> dict:
    """A stored run with its per-rank figures and findings (the API's ``GET /runs/{id}``)."""
    return _catalog().detail(con, run_id)


def run_of_key(con, idempotency_key: str, pushed_by: str | None) -> int | None:
    """The run a push with this Idempotency-Key by ``pushed_by`` stored; None."""
    return _catalog().run_of_key(con, idempotency_key, pushed_by)


def stored_figures(con, run_id: int) -> dict:
    """The per-rank and per-step figures stored at ingest (what a pruned run keeps)."""
    return _catalog().figures(con, run_id)


def stored_findings(con, run_id: int) -> list[dict]:
    """The checklist's findings as stored at ingest."""
    from overlapscope.analyzer import sql

    return sql.rows(con, "catalog.findings", run_id=run_id)


def describe_run(con, run_id: int) -> dict:
    """The ``run`` object of a stored run (``RunInfo.describe``: what every command's JSON opens with)."""
    return run_info(con, run_id).describe()


def run_facts(con, run_id: int) -> dict:
    """Parameters, tokens and device memory of a stored run (``RunInfo.facts``)."""
    return run_info(con, run_id).facts()


def has_analyses(con, run_id: int) -> bool:
    """Whether a stored run's buckets and model analyses can be shown: stored at ingest, or
    its events are there to make them (a run pruned before the run store had neither)."""
    info = run_info(con, run_id)
    return info.stored or info.pruned_at is None


def attribution(con, run_id: int) -> list | None:
    """The bucket or unit, phase, bytes and exposed time of each collective of a stored run,
    as ingest attributed them (measure.collectives.Collective rows), for ``timeline`` to
    draw; None for a run that keeps them as columns (``timeline`` then reads the rows of
    the ranks it draws, never the whole run's)."""
    from overlapscope.analyzer.measure import collectives, timeline
    from overlapscope.analyzer.store import runstore

    info = run_info(con, run_id)
    if info.stored:
        if runstore.has_attribution(info.run_dir):
            return None
        return timeline.stored_attribution(info) or []
    return [] if info.pruned_at is not None else collectives.compute(con, info)


def timeline_steps(con, run_id: int) -> list[dict]:
    """The steps of a run that have a window (``measure.timeline.steps``)."""
    from overlapscope.analyzer.measure import timeline

    return timeline.steps(con, run_id)


def timeline(con, run_id: int, step: int, ranks: list[int], attribution=None, max_marks: int | None = None,
             aligned: bool = True) -> dict:
    """One step's timeline of ``ranks`` (``measure.timeline.timeline``; its mark cap by default)."""
    from overlapscope.analyzer.measure import timeline as timeline_analysis

    marks = {} if max_marks is None else {"max_marks": max_marks}
    return timeline_analysis.timeline(con, run_id, step, ranks, attribution=attribution, aligned=aligned, **marks)


# --- the model's formulas as reports: ``model memory|comm|hide`` (docs/model.md) ---------------


def _model_call(fn, *args, **kwargs):
    """Run a model formula; its ``ValueError`` becomes a one-line ``UsageError``."""
    try:
        return fn(*args, **kwargs)
    except ValueError as err:
        raise UsageError(str(err)) from None


def model_memory(params: float, gpus: int, k: float, group: int | None) -> dict:
    """JSON payload of ``model memory``: model-state bytes and GB per GPU per stage."""
    from overlapscope.analyzer.model.memory import STAGES, model_state_bytes, to_gb

    payload: dict = {"params": params, "gpus": gpus, "k": k, "group": group}
    stages = [s for s in STAGES if s != "hsdp" or group is not None]
    for stage in stages:
        nbytes = _model_call(model_state_bytes, stage, params, gpus, k, group)
        payload[f"{stage}_bytes"] = nbytes
        payload[f"{stage}_gb"] = to_gb(nbytes)
    return payload


def model_comm(params: float, gpus: int, stage: str, accum: int, group: int | None,
                grad_bytes: float, reshard_after_forward: bool,
                bandwidth: float | None, intra_bandwidth: float | None) -> dict:
    """JSON payload of ``model comm``: what one GPU sends per optimizer step."""
    from overlapscope.analyzer.model.memory import comm_per_gpu, stage_collectives, to_gb

    kwargs = dict(accum=accum, group=group, grad_bytes=grad_bytes,
                  reshard_after_forward=reshard_after_forward)
    comm = _model_call(comm_per_gpu, stage, params, gpus, **kwargs)
    colls = _model_call(stage_collectives, stage, params, gpus, **kwargs)
    payload: dict = {
        "stage": stage, "params": params, "gpus": gpus, "accum": accum, "group": group,
        "grad_bytes": grad_bytes, "reshard_after_forward": reshard_after_forward,
        "elements_per_gpu": comm.elements,
        "wire_elements_per_gpu": comm.wire_elements,
        "bytes_per_gpu": comm.bytes,
        "gb_per_gpu": to_gb(comm.bytes),
    }
    if stage == "hsdp":
        payload.update(intra_bytes_per_gpu=comm.intra_bytes, intra_gb_per_gpu=to_gb(comm.intra_bytes),
                       inter_bytes_per_gpu=comm.inter_bytes, inter_gb_per_gpu=to_gb(comm.inter_bytes))
        if bandwidth is not None:
            payload["inter_ms"] = 1e3 * comm.inter_bytes / bandwidth
        if intra_bandwidth is not None:
            payload["intra_ms"] = 1e3 * comm.intra_bytes / intra_bandwidth
    elif bandwidth is not None:
        payload["comm_ms"] = 1e3 * comm.bytes / bandwidth
    payload["collectives"] = [
        {"kind": c.kind, "tensor": c.tensor, "message_elements": c.message_elements,
         "bytes_per_element": c.bytes_per_element, "group_size": c.group_size,
         "count": c.count, "link": c.link, "wire_bytes": c.wire_bytes}
        for c in colls
    ]
    return payload


def model_hide(flops: float, bandwidth: float, gpus: int | None, grad_bytes: float,
                tokens: float | None, stage: str | None) -> dict:
    """JSON payload of ``model hide``: tokens per GPU per micro-batch that hide the comm."""
    from overlapscope.analyzer.model.hide import overlap_verdict, stage_tokens_to_hide, tokens_to_hide

    payload: dict = {
        "flops_per_s": flops, "bandwidth_bytes_per_s": bandwidth, "gpus": gpus,
        "grad_bytes": grad_bytes,
        "tokens_to_hide": _model_call(tokens_to_hide, flops, bandwidth, gpus, grad_bytes),
    }
    if stage is not None:
        payload["stage"] = stage
        payload["stage_tokens_to_hide"] = _model_call(stage_tokens_to_hide, stage, flops, bandwidth,
                                                gpus, grad_bytes)
    if tokens is not None:
        verdict = _model_call(overlap_verdict, tokens, flops, bandwidth, gpus, stage or "ddp", grad_bytes)
        payload.update(stage=stage or "ddp", stage_tokens_to_hide=verdict.tokens_to_hide,
                       tokens=tokens, ratio=verdict.ratio, verdict=verdict.verdict,
                       reason=verdict.reason)
    return payload


def model_tokens_to_hide(row: dict) -> float:
    """Tokens per GPU per micro-batch that hide a step's comm, from one row of the buckets
    report's ``model`` (its F, W, stage, GPUs, bytes and HSDP terms): what the analysis gives
    as ``tokens_to_hide``, for an analysis stored without it. A ``UsageError`` says why not."""
    from overlapscope.analyzer.model.hide import stage_tokens_to_hide

    replicas = row.get("replicas")  # HSDP: zero3 in the shard group plus the replica all-reduce
    return _model_call(stage_tokens_to_hide, "hsdp" if replicas else row.get("stage"), row.get("flops_per_s"),
                       row.get("bus_bandwidth_bytes_per_s"), row.get("gpus"),
                       grad_bytes=row.get("grad_bytes") or 2.0, weight_bytes=row.get("weight_bytes") or 2.0,
                       reduce_bandwidth_bytes_per_s=row.get("reduce_bus_bandwidth_bytes_per_s"), replicas=replicas,
                       replicate_bandwidth_bytes_per_s=row.get("replicate_bus_bandwidth_bytes_per_s"))
