"""The reduce: every rank's tables in one small in-memory store, where the comparisons
across ranks run.

``reduce_results`` inserts the run's row, its ranks and steps, and provides each rank
script's tables (all ranks' rows together) as if the script had run here
(``sql.provide``). The run scripts (clocks, waits, the timeline) and every analysis
after them (analyze, buckets, diagnose: ``analyzer/api.py``) then read this store
as they read a store of every event: the same tables, a few rows per step and per
collective instead of every event.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator

import pyarrow as pa

from overlapscope.analyzer import sql
from overlapscope.analyzer.engine.rank import RankResult
from overlapscope.analyzer.sql.params import script_params
from overlapscope.contract.manifest import Manifest

RUN_ID = 1  # the run's id in a reduce's store


def concat(tables: list[pa.Table]) -> pa.Table:
    """One rank's tables after another (their types may differ only where a rank has no rows)."""
    tables = [t for t in tables if t is not None]
    non_empty = [t for t in tables if t.num_rows] or tables[:1]
    return pa.concat_tables(non_empty, promote_options="permissive")


# Ranks whose tables are in memory together while the reduce's store takes them, with the
# store compressed between batches where it is large. Concatenating every rank's table before
# inserting it held all of them in Arrow beside DuckDB's uncompressed copy: a 1,024-rank
# ingest of the reference trace peaked at 1,088 MiB in the reduce's inserts, 507-520 MiB in
# batches (measured; as fast: 18.6-21.8 against 19.5 s).
RANKS_PER_BATCH = 64
# ... and ranks read by one insert where their tables are files: DuckDB reads them itself,
# streaming, on its threads (1,024 ranks: the reduce's inserts 6.5-6.9 s at 256 ranks an
# insert, 10.5-11.0 s at 64, 18.6 s through Arrow 64 at a time; peaks alike, 466-483 MiB).
RANKS_PER_FILE_INSERT = 256


def batches(tables: Iterable[pa.Table | None]) -> Iterator[pa.Table]:
    """The ranks' tables (read as they are asked for) concatenated ``RANKS_PER_BATCH`` at a
    time, for one insert each: batches with rows only (an empty rank's columns may have no
    type: the first batch types the table), or one empty batch where none has rows."""
    tables, rows, first = iter(tables), 0, None
    while batch := list(itertools.islice(tables, RANKS_PER_BATCH)):
        if all(t is None for t in batch):  # ranks without the table (_table)
            continue
        batch = concat(batch)
        rows += batch.num_rows
        if batch.num_rows:
            yield batch
        elif first is None:
            first = batch
    if not rows and first is not None:
        yield first


# The ranks' tables are stored tables of the reduce's store, not temporary ones
# (sql.provide): DuckDB compresses stored tables when it checkpoints, and cannot compress
# temporary ones. A large reduce is compressed once they are in: in a 256-rank ingest the
# parent then peaked at 812-816 MiB instead of 913 MiB (measured; 0.3 s more).
def reduce_results(results: list[RankResult], name: str, source: str, manifest: Manifest | None = None,
                   manifest_text: str | None = None, tags: dict | None = None, threads: int | None = None,
                   con=None):
    """An in-memory store holding the ranks' results as run ``RUN_ID``; (connection, run id).

    ``con``: a new in-memory store (``database.connect()``) already opened, else one is."""
    from overlapscope.analyzer.store import database

    con = con if con is not None else database.connect(threads=threads)
    run_id = RUN_ID
    database.insert_run_rows(con, run_id, results, name, source, manifest, manifest_text, tags)
    for table in ("steps", "annotation_roles"):
        for batch in batches(_table(r, table) for r in results):
            database.insert_arrow(con, table, run_id, batch)
    scripts = results[0].scripts if results else ()
    largest = 0  # rows of the largest table provided through Arrow
    from_files: list[str] = []  # tables read from the ranks' files (counted once in)

    def rows_of(table: str) -> int:
        return con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]

    def compress_if_large(table: str) -> None:
        # between two inserts of a table: a large reduce's rows compressed before more go in (below)
        if rows_of(table) >= database.ONE_THREAD_MAX_ROWS:
            database.compress(con)

    def parts(name: str) -> Iterator[pa.Table]:
        # a batch of ranks at a time (RankResult.table reads a rank's from its file as its
        # batch needs it)
        nonlocal largest
        rows = 0
        for batch in batches(r.table(name) for r in results):
            if rows:
                compress_if_large(name)
            yield batch
            rows += batch.num_rows
        largest = max(largest, rows)

    def table_of(name: str) -> sql.ParquetFiles | Iterator[pa.Table]:
        # one table of every rank at a time: from the ranks' files where each has one (ingest,
        # and results handed over in files), read by DuckDB a batch of ranks at a time; else
        # through Arrow
        paths = _files(results, name)
        if paths is None:
            return parts(name)
        from_files.append(name)
        return sql.ParquetFiles(paths, RANKS_PER_FILE_INSERT, functools.partial(compress_if_large, name))

    for script in scripts:
        params = script_params(script, run_id)
        if script == "steps":  # a stored table, inserted above
            sql.mark_done(con, script, **params)
            continue
        sql.provide(con, script, table_of, **params)
    largest = max([largest] + [rows_of(t) for t in from_files])
    if largest < database.ONE_THREAD_MAX_ROWS:  # the run scripts and the analyses that follow
        con.execute("SET threads = 1")
    else:  # the ranks' tables compressed: what the parent holds through the analyses (below)
        database.compress(con)
    return con, run_id


def _files(results: list[RankResult], name: str) -> tuple[str, ...] | None:
    """The ranks' files of table ``name`` where every rank's is in one, else None."""
    from overlapscope.analyzer.store import runstore

    if not results or any(r.tables_in is None or name in r.tables or name not in r.table_names for r in results):
        return None
    return tuple(str(runstore.rank_file(r.tables_in, runstore.RANK, name, r.rank)) for r in results)


def _table(result: RankResult, name: str):
    try:
        return result.table(name)
    except KeyError:
        return None
