"""Load per-rank traces into one store: resolve inputs, decode ranks in parallel, insert.

This is the single-store route: every rank's events in one DuckDB store, the
analyses run over all of them at once (tests, the timeline's own tests, the
benchmarks' second route). The commands map over ranks instead (analyzer/engine:
each rank reduced to its tables by its worker); both run the same SQL.
Ranks are decoded in worker processes (engine.local); each sends back Arrow
tables. Nothing is stored unless every file decodes and the files make one run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from overlapscope.analyzer.engine.local import run as run_local
from overlapscope.analyzer.ingest.decode import DETAILS, RankData, decode_source
from overlapscope.analyzer.ingest.consistency import check_ranks
from overlapscope.analyzer.ingest.inputs import Inputs, TraceSource, resolve, source_text
from overlapscope.analyzer.ingest.limits import Limits, from_env as limits_from_env
from overlapscope.contract.manifest import Manifest


@dataclass
class Loaded:
    """A run in a store: the connection, its id, and the manifest if one came with it."""

    con: object  # duckdb.DuckDBPyConnection
    run_id: int
    manifest: Manifest | None


def decode_all(sources: list[TraceSource], detail: str = "full", workers: int | None = None,
               while_waiting=None, on_decoded=None, limits: Limits | None = None) -> list[RankData]:
    """Decode every source in worker processes (engine.local); the first bad file stops
    the load with its error.

    ``while_waiting`` runs in this process while the workers decode (opening
    the store overlaps with parsing instead of following it); ``on_decoded(done,
    total)`` is called as each file is decoded (a progress bar).
    """
    limits = limits or limits_from_env()
    return run_local(functools.partial(_decode, detail=detail, limits=limits), sources, workers=workers,
                     on_done=on_decoded, while_waiting=while_waiting)


def _decode(source: TraceSource, detail: str, limits: Limits) -> RankData:
    return decode_source(source, detail, True, limits)


@dataclass
class Decoded:
    """A run decoded and checked, not stored yet: what ``store`` inserts in one transaction."""

    inputs: Inputs
    ranks: list[RankData]
    source: str  # the input paths, space separated


def decode(paths: list[str], detail: str = "full", workers: int | None = None, on_decoded=None,
           while_waiting=None, limits: Limits | None = None) -> Decoded:
    """Resolve, decode and check the traces at ``paths`` (no store involved).

    A server decodes a pushed run here, outside its single writer, and hands the
    result to ``store``; ``while_waiting`` runs while worker processes decode.
    """
    if detail not in DETAILS:
        raise ValueError(f"detail must be one of {DETAILS}")
    limits = limits or limits_from_env()
    inputs: Inputs = resolve(paths, limits)
    try:
        ranks = decode_all(inputs.sources, detail=detail, workers=workers, while_waiting=while_waiting,
                           on_decoded=on_decoded, limits=limits)
    finally:
        inputs.release()
    check_ranks(ranks, inputs.manifest, inputs.manifest_source)
    ranks.sort(key=lambda r: r.meta["rank"])
    return Decoded(inputs, ranks, source_text(paths))


def store(con, decoded: Decoded, name: str | None = None, tags: dict | None = None, after=None,
          pushed_by: str | None = None) -> int:
    """Insert a decoded run into ``con`` in one transaction (store.database.insert_run); its id."""
    from overlapscope.analyzer.store import database

    return database.insert_run(con, decoded.ranks, name or decoded.source, decoded.source, decoded.inputs.manifest,
                               tags, after=after, manifest_text=decoded.inputs.manifest_text, pushed_by=pushed_by)


def load(paths: list[str], con=None, name: str | None = None, tags: dict | None = None,
         detail: str = "full", workers: int | None = None, on_decoded=None, open_con=None, after=None,
         limits: Limits | None = None) -> Loaded:
    """Load traces into ``con`` (a new in-memory store when None) as one run.

    ``detail`` (decode.DETAILS) chooses how much of each trace is kept: the
    catalog keeps everything; one-shot commands keep what their analysis reads.
    ``open_con`` opens the store instead (a catalog file) once the workers run:
    an open DuckDB connection makes forking them unsafe. ``after(con, run_id)``
    runs inside the insert's transaction (store.database.insert_run).
    """
    opened = {"con": con}

    def open_store():  # duckdb is imported here, after the workers have forked
        from overlapscope.analyzer.store import database

        if opened["con"] is None:
            opened["con"] = open_con() if open_con else database.connect()

    decoded = decode(paths, detail=detail, workers=workers, on_decoded=on_decoded, while_waiting=open_store,
                     limits=limits)
    run_id = store(opened["con"], decoded, name, tags, after=after)
    return Loaded(opened["con"], run_id, decoded.inputs.manifest)
