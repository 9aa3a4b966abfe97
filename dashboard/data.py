"""The dashboard's only door to the catalog: short connections, cached analyses.

DuckDB lets one process hold a read-write connection, or any number of
processes read-only ones, never both. So the dashboard opens a read-only
connection for each analysis and closes it at once (``overlapscope ingest`` in
another process waits at most for one analysis), and a read-write one only for
an upload. Inside this process a read-write lock keeps the two apart (DuckDB
refuses two configurations of one file in one process). Analyses are cached per
(catalog, run id, run creation time): switching pages recomputes nothing, and a
run replaced under the same id (a new catalog file) is never served stale.

Every function here calls an analyzer function and returns what it returns.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import streamlit as st

from overlapscope.analyzer import api, sql
from overlapscope.analyzer.errors import CatalogBusy  # also what a page shows after WAIT_S
from overlapscope.analyzer.measure import collectives, timeline as timeline_analysis
from overlapscope.analyzer.store import catalog
from overlapscope.analyzer.store.runinfo import run_info

WAIT_S = 10.0  # how long a page waits for a catalog another process is writing
RETRY_S = 0.2


class _ReadWriteLock:
    """Many readers or one writer, with a timeout."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def hold(self, write: bool, timeout_s: float):
        with self._cond:
            free = (lambda: not self._writer and self._readers == 0) if write else (lambda: not self._writer)
            if not self._cond.wait_for(free, timeout=timeout_s):
                raise CatalogBusy("the catalog is busy in this dashboard (an upload is being stored)")
            if write:
                self._writer = True
            else:
                self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                if write:
                    self._writer = False
                else:
                    self._readers -= 1
                self._cond.notify_all()


_LOCKS: dict[str, _ReadWriteLock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(db: str) -> _ReadWriteLock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(db, _ReadWriteLock())


def _open(db: str, write: bool, wait_s: float):
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return catalog.open_catalog(db, read_only=not write)
        except (duckdb.IOException, CatalogBusy):  # another process holds the file
            if time.monotonic() > deadline:
                raise CatalogBusy(f"{db}: the catalog is in use by another process "
                                  "(an ingest?); try again in a moment") from None
            time.sleep(RETRY_S)


@contextmanager
def connect(db: str, write: bool = False, wait_s: float | None = None):
    """A connection to the catalog for one render or one action, closed afterwards.

    Waits up to ``wait_s`` (default ``WAIT_S``) for a lock another process holds,
    then raises ``CatalogBusy``.
    """
    wait_s = WAIT_S if wait_s is None else wait_s
    with _lock_for(db).hold(write, wait_s):
        con = _open(db, write, wait_s)
        try:
            yield con
        finally:
            con.close()


def prepare_catalog(db: str, load_samples: bool, samples_dir: str | None = None) -> list[int]:
    """Create the catalog if needed; load the sample runs into an empty one.

    Opens it read-write only when it is new or empty, so a dashboard on a
    populated catalog never takes the write lock.
    """
    if Path(db).exists():
        with connect(db) as con:
            if sql.one(con, "catalog.count")[0] or not load_samples:
                return []
    with connect(db, write=True) as con:
        if not load_samples:
            return []
        return catalog.ensure_samples(con, Path(samples_dir)) if samples_dir else catalog.ensure_samples(con)


@st.cache_data(ttl=3, show_spinner=False)
def runs(db: str) -> list[dict]:
    """The catalog's runs, newest first (``catalog.runs``), cached for a few seconds."""
    with connect(db) as con:
        return catalog.runs(con)


def stamp(run: dict) -> str:
    """The run's creation time: with its id, the key of every cached analysis."""
    return str(run.get("created_at"))


@st.cache_data(show_spinner="Analyzing the run...", max_entries=32)
def _core(db: str, run_id: int, run_stamp: str) -> dict:
    """``analyze_run`` and the per-collective attribution, on one connection so that
    the attribution reuses the overlap tables the analysis just built."""
    with connect(db) as con:
        result = api.analyze_run(con, run_id)
        return {"analysis": result, "attribution": collectives.compute(con, run_info(con, run_id))}


def analysis(db: str, run_id: int, run_stamp: str) -> dict:
    """``analyze_run``: per rank and per step compute, comm, exposed comm, idle."""
    return _core(db, run_id, run_stamp)["analysis"]


def attribution(db: str, run_id: int, run_stamp: str) -> list[collectives.Collective]:
    """``collectives.compute``: bucket or unit, phase, bytes and exposed time of each collective."""
    return _core(db, run_id, run_stamp)["attribution"]


@st.cache_data(show_spinner="Attributing collectives...", max_entries=32)
def buckets(db: str, run_id: int, run_stamp: str) -> dict:
    """``buckets_run``: per bucket, unit and phase, with the model beside it."""
    with connect(db) as con:
        return api.buckets_run(con, run_id)


@st.cache_data(show_spinner="Running the checklist...", max_entries=32)
def diagnosis(db: str, run_id: int, run_stamp: str) -> dict:
    """``diagnose_run``: the checklist findings, failed first."""
    with connect(db) as con:
        return api.diagnose_run(con, run_id)


@st.cache_data(show_spinner=False, max_entries=32)
def facts(db: str, run_id: int, run_stamp: str) -> dict:
    """Parameters, tokens and device memory of the run (``RunInfo.facts``)."""
    with connect(db) as con:
        return run_info(con, run_id).facts()


@st.cache_data(show_spinner=False, max_entries=32)
def steps(db: str, run_id: int, run_stamp: str) -> list[dict]:
    """The steps that have a window (``timeline.steps``)."""
    with connect(db) as con:
        return timeline_analysis.steps(con, run_id)


@st.cache_data(show_spinner="Building the timeline...", max_entries=64)
def timeline(db: str, run_id: int, run_stamp: str, step: int, ranks: tuple[int, ...], max_marks: int,
             aligned: bool = True) -> dict:
    """``timeline.timeline`` of one step, with the cached attribution (ranks on one clock unless not ``aligned``)."""
    rows = attribution(db, run_id, run_stamp)
    with connect(db) as con:
        return timeline_analysis.timeline(con, run_id, step, list(ranks), attribution=rows, max_marks=max_marks,
                                          aligned=aligned)


def ingest(db: str, paths: list[str], name: str, tags: dict, on_decoded=None) -> int:
    """Store a run (``catalog.ingest``: all of it or nothing); return its id.

    Safe to call from a worker thread (no Streamlit calls); call ``runs.clear()``
    afterwards so the new run shows in the picker at once. ``on_decoded(done,
    total)`` reports each decoded file.
    """
    with connect(db, write=True) as con:
        return catalog.ingest(con, paths, name, tags, on_decoded=on_decoded)
