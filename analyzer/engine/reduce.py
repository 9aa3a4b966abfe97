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

import pyarrow as pa

from overlapscope.analyzer import sql
from overlapscope.analyzer.engine.rank import RankResult
from overlapscope.analyzer.engine.scripts import script_params
from overlapscope.contract.manifest import Manifest

RUN_ID = 1  # the run's id in a reduce's store


def concat(tables: list[pa.Table]) -> pa.Table:
    """One rank's tables after another (their types may differ only where a rank has no rows)."""
    tables = [t for t in tables if t is not None]
    non_empty = [t for t in tables if t.num_rows] or tables[:1]
    return pa.concat_tables(non_empty, promote_options="permissive")


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
        database.insert_arrow(con, table, run_id, concat([_table(r, table) for r in results]))
    scripts = results[0].scripts if results else ()
    largest = 0  # rows of the largest table provided

    def table_of(name: str) -> pa.Table:
        nonlocal largest
        table = concat([r.table(name) for r in results])
        largest = max(largest, table.num_rows)
        return table

    for script in scripts:
        params = script_params(script, run_id)
        if script == "steps":  # a stored table, inserted above
            sql.mark_done(con, script, **params)
            continue
        # one table of every rank at a time (ranks' results may be files: RankResult.table)
        sql.provide(con, script, table_of, **params)
    if largest < database.ONE_THREAD_MAX_ROWS:  # the run scripts and the analyses that follow
        con.execute("SET threads = 1")
    else:  # the ranks' tables compressed: what the parent holds through the analyses (below)
        database.compress(con)
    return con, run_id


def _table(result: RankResult, name: str):
    try:
        return result.table(name)
    except KeyError:
        return None
