"""What ingest derives once from a run and the catalog stores with it (``store/results.py``):
its headline, the checklist's findings, the figures per rank, step and bucket or unit,
its ranks' clock offsets, and its analyses as documents.

Computed outside the catalog's single writer (a server, ``runs.prepare``), and
for every stored run when a catalog of schema version 3 or older is upgraded (the
store's ``migrate`` is handed ``compute``).
"""

from __future__ import annotations

from overlapscope.analyzer import checklist

from overlapscope.analyzer.predict import whatif
from overlapscope.analyzer.errors import InputError, UsageError
from overlapscope.analyzer.headline import failed, headline
from overlapscope.analyzer.ingest.memory import release_freed
from overlapscope.analyzer.measure import collectives, timeline, waits
from overlapscope.analyzer.predict import buckets
from overlapscope.analyzer.store import results, runstore
from overlapscope.analyzer.predict import changes, state


def compute(con, run_id: int) -> dict:
    """A run's headline, findings and figures (what ``save`` stores), its ranks' clock
    offsets, its analyses as documents (``buckets``: the buckets result; ``diagnose``:
    the checklist's), the prediction engine's state (``engine_state``: predict.state's
    bytes packed as stored, ``runstore.pack_engine_state``; None where it cannot be kept)
    and the collectives as the Timeline reads them (``attribution``: Arrow tables, a row
    group each), from a store that holds the run (the reduce's, for ingest);
    ``runstore.write_derived`` writes the last three.

    Computed outside the catalog's single writer; the writer only saves them
    (``store.results.save``).
    """
    a = buckets.analysis(con, run_id)  # hands back the pages it read of mapped columns itself
    # glibc keeps the pages of a phase's freed copies of the columns where they lie inside its
    # heap, and the next phase's copies come on top of them: trimmed between phases, 1,024
    # ranks' derive held 601 MiB into the summary, against 640 (measured; 5 ms a trim)
    release_freed()
    engine_state = state.encode(a)  # before the checklist's predictions: what a fresh what-if reads
    if engine_state is not None:  # packed at once: the derive's later phases run beside it
        engine_state = runstore.pack_engine_state(engine_state)
    diagnosed = checklist.diagnose(con, a)  # each rule hands back its pages (checklist.evaluate)
    release_freed()
    findings = diagnosed["findings"]
    summarized = buckets.summary(a.collectives)
    collectives.release(a.collectives)
    release_freed()
    groups = [{**g, "id": None if g["id"] is None else str(g["id"])} for g in summarized]
    head = headline(a.overlap, failed(findings))
    return {"headline": head, "findings": findings,
            "figures": {"rank_metrics": a.overlap["ranks"], "step_metrics": a.overlap["steps"],
                        "group_metrics": groups},
            "clock_offsets_ns": waits.clock_offsets_ns(con, run_id),
            "documents": {"buckets": buckets.report(a, streamed=True, summarized=summarized),
                          "diagnose": {"headline": head, **diagnosed},
                          **_whatif(a)},
            "tokens": a.tokens, "engine_state": engine_state,
            "attribution": timeline.attribution_chunks(a.collectives)}


def _whatif(a) -> dict:
    """The run replayed as measured with its first sweep (``whatif --json --sweep``, without
    ``run``): what the Model page shows first, so that its first visit reads it instead of
    reducing the ranks again (4.5 s at 64 ranks). None stored for a run the what-if refuses."""
    try:
        prepared = whatif.prepare(a)
        result = whatif.predict(a, changes.Changes(), prepared)
        spec = changes.default_sweep(a.info.describe().get("parallelism"))
        result["sweep"] = whatif.sweep(a, *changes.sweep(spec, changes.Changes()), prepared=prepared)
    except (InputError, UsageError):
        return {}
    return {"whatif": result}


def write(con, run_id: int) -> dict:
    """Compute and store a run's headline, findings and figures; return the headline."""
    return results.save(con, run_id, compute(con, run_id))
