"""The dashboard's only door to the catalog: shared access, cached analyses.

This process shares one DuckDB instance of the catalog (``analyzer/store/access.py``):
each render reads on its own cursor (committed runs only), and every write (an
upload, a push through the API) runs on the catalog's single writer thread, so
pages, uploads and pushes never race. Served by ``overlapscope dashboard``, the
file stays open for a moment after each use; elsewhere (tests) it is closed
after each. When another process holds the file, a page waits up to ``WAIT_S``
and then says so. Analyses are cached per (catalog, run id, run creation time):
switching pages recomputes nothing, and a run replaced under the same id (a new
catalog file) is never served stale.

Every function here calls an analyzer function and returns what it returns.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import streamlit as st

from overlapscope.analyzer import api, gate
from overlapscope.analyzer import runs as library_runs
from overlapscope.analyzer.runs import apart
from overlapscope.analyzer.errors import CatalogBusy  # also what a page shows after WAIT_S

WAIT_S = 10.0  # how long a page waits for a catalog another process is writing


@contextmanager
def connect(db: str, wait_s: float | None = None):
    """A cursor on the catalog for one render, closed afterwards.

    Waits up to ``wait_s`` (default ``WAIT_S``) for a file another process holds,
    then raises ``CatalogBusy``.
    """
    with library_runs.shared(db).read(WAIT_S if wait_s is None else wait_s) as con:
        yield con


def write(db: str, work, wait_s: float | None = None):
    """``work(cursor)`` on the catalog's single writer, after the writes queued before it."""
    return library_runs.shared(db).write(work, WAIT_S if wait_s is None else wait_s)


def prepare_catalog(db: str, load_samples: bool, samples_dir: str | None = None) -> list[int]:
    """Create the catalog if needed; load the sample runs a catalog of samples only lacks
    (``api.missing_samples``: all of them into an empty one)."""
    folder = Path(samples_dir) if samples_dir else api.samples_dir()
    if Path(db).exists():
        with connect(db) as con:
            if not load_samples or not api.missing_samples(con, folder):
                return []
    if not load_samples:
        write(db, lambda con: None)  # creates the file
        return []
    return write(db, lambda con: library_runs.ensure_samples(con, folder))


@st.cache_data(ttl=3, show_spinner=False)
def runs(db: str) -> list[dict]:
    """The catalog's runs, newest first (``api.runs``), cached for a few seconds."""
    with connect(db) as con:
        return api.runs(con)


def stamp(run: dict) -> str:
    """The run's creation time: with its id, the key of every cached analysis."""
    return str(run.get("created_at"))


@st.cache_data(show_spinner="Reading the run...", max_entries=32)
def analysis(db: str, run_id: int, run_stamp: str) -> dict:
    """``analyze_run``: per rank and per step compute, comm, exposed comm, idle (as stored at ingest)."""
    with connect(db) as con:
        return api.analyze_run(con, run_id)


@st.cache_resource(show_spinner=False, max_entries=8)
def attribution(db: str, run_id: int, run_stamp: str) -> list | None:
    """The bucket or unit, phase, bytes and exposed time of each collective, as ingest
    attributed them (``api.attribution``; shared, not copied: callers only read it); None
    for a run that keeps them as columns: the timeline reads its ranks' rows itself."""
    with connect(db) as con:
        return api.attribution(con, run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def has_analyses(db: str, run_id: int, run_stamp: str) -> bool:
    """Whether the run's buckets and model analyses can be shown: stored at ingest, or its
    events are there to make them (a run pruned before the run store had neither)."""
    with connect(db) as con:
        return api.has_analyses(con, run_id)


@st.cache_data(show_spinner="Reading the collectives...", max_entries=32)
def buckets(db: str, run_id: int, run_stamp: str) -> dict:
    """``buckets_run``: per bucket, unit and phase, with the model beside it (the pages read
    the summary, steps and model: the per-collective rows stay out of the cache)."""
    with connect(db) as con:
        return api.buckets_run(con, run_id, leave_out=("collectives",))


@st.cache_data(show_spinner="Reading the checklist...", max_entries=32)
def diagnosis(db: str, run_id: int, run_stamp: str) -> dict:
    """``diagnose_run``: the checklist findings, failed first."""
    with connect(db) as con:
        return api.diagnose_run(con, run_id)


@st.cache_resource(show_spinner="Reading the run for the what-if...", max_entries=4)
def whatif_analysis(db: str, run_id: int, run_stamp: str):
    """``whatif_analysis``: the run's analysis, kept to replay it under many changes."""
    with connect(db) as con:
        return api.whatif_analysis(con, run_id)


@st.cache_data(show_spinner="Replaying the run...", max_entries=64)
def whatif(db: str, run_id: int, run_stamp: str, flags: tuple[tuple[str, object], ...],
           sweep: str | None = None) -> dict:
    """``whatif_of`` under ``flags`` (command-line names and values, whatif.changes.read), with
    ``sweep`` (``NAME=V1,V2,...``) on top of them."""
    from overlapscope.analyzer.predict import changes as whatif_changes

    if not flags:  # the run as measured (and its first sweep): stored at ingest
        with connect(db) as con:
            stored = api.whatif_stored(con, run_id, sweep)
        if stored is not None:
            return stored
    base = whatif_changes.read(dict(flags))
    a, info = whatif_analysis(db, run_id, run_stamp)
    return api.whatif_of(a, info, base, whatif_changes.sweep(sweep, base) if sweep else None)


@st.cache_data(show_spinner=False, max_entries=32)
def facts(db: str, run_id: int, run_stamp: str) -> dict:
    """Parameters, tokens and device memory of the run (``RunInfo.facts``)."""
    with connect(db) as con:
        return api.run_facts(con, run_id)


@st.cache_data(show_spinner=False, max_entries=32)
def steps(db: str, run_id: int, run_stamp: str) -> list[dict]:
    """The steps that have a window (``api.timeline_steps``)."""
    with connect(db) as con:
        return api.timeline_steps(con, run_id)


@st.cache_data(show_spinner="Building the timeline...", max_entries=64)
def timeline(db: str, run_id: int, run_stamp: str, step: int, ranks: tuple[int, ...], max_marks: int,
             aligned: bool = True) -> dict:
    """``api.timeline`` of one step, with the cached attribution (ranks on one clock unless not ``aligned``)."""
    rows = attribution(db, run_id, run_stamp)
    with connect(db) as con:
        return api.timeline(con, run_id, step, list(ranks), attribution=rows, max_marks=max_marks, aligned=aligned)


def ingest(db: str, paths: list[str], name: str, tags: dict, on_decoded=None, pushed_by: str | None = None,
           limits=None, shown_from: str | None = None) -> int:
    """Store a run (decoded here, stored by the catalog's writer: all of it or nothing); its id.

    Safe to call from a worker thread (no Streamlit calls); call ``runs.clear()``
    afterwards so the new run shows in the picker at once. ``on_decoded(done,
    total)`` reports each decoded file. ``limits``: the input caps (uploads pass
    ``limits.for_uploads``: what anyone who reaches the page may send). ``shown_from``: the
    uploads' folder, never shown (``runs.prepare``).
    """
    # not in the writer, and in a child process that exits once done (``runs.apart``): the
    # server keeps none of what the decode took
    prepared = apart.prepare(db, paths, on_decoded=on_decoded, limits=limits, shown_from=shown_from)
    try:
        return write(db, lambda con: library_runs.commit(con, prepared, name, tags, pushed_by=pushed_by))
    except BaseException:
        prepared.discard()
        raise


@st.cache_data(show_spinner=False, max_entries=64)
def figures(db: str, run_id: int, run_stamp: str) -> dict:
    """The per-rank and per-step figures stored at ingest (what a pruned run keeps)."""
    with connect(db) as con:
        return api.stored_figures(con, run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def findings(db: str, run_id: int, run_stamp: str) -> list[dict]:
    """The checklist's findings as stored at ingest."""
    with connect(db) as con:
        return api.stored_findings(con, run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def comparison(db: str, run_id: int, run_stamp: str, baseline_id: int, baseline_stamp: str) -> dict:
    """``gate.compare``: every headline metric, every bucket or unit by its change, warnings."""
    with connect(db) as con:
        return gate.compare(con, run_id, baseline_id, top=None)
