"""Bring a catalog written by an older overlapscope up to the current schema.

Version 1 (no ``catalog_info``): runs without ``parallelism``, collectives
without ``kind`` and ``family``, no ``annotation_roles``, no ``findings``.
Version 2 stores what classification and the checklist derive once, at load.
Version 3 adds who pushed a run and when it was pruned (``runs.pushed_by``,
``runs.pruned_at``) and the figures per rank, step and bucket or unit that outlive
a prune (``rank_metrics``, ``step_metrics``, ``group_metrics``).
Version 4 keeps each run's raw per-rank tables as Parquet files in the run store
beside the catalog (``runstore.py``), with its ranks' results and its analyses;
the catalog's own event tables go (``runs.data_dir`` names the run's folder).
Version 5 records the Idempotency-Key of a pushed run (``runs.idempotency_key``),
so that a push repeated after a lost answer gets its run instead of a copy, and
counts the text of each rank's file read as U+FFFD (``ranks.text_replaced``).
A catalog of a newer version than this code knows is refused in one line.
Every statement is a named query of ``sql/queries/migrate.sql``.
"""

from __future__ import annotations

import json

from overlapscope.analyzer import sql
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.ingest import classify
from overlapscope.analyzer.sql.params import RANK_SCRIPTS, script_params
from overlapscope.contract.collectives import collective_kind

SCHEMA_VERSION = 5
RAW_TABLES = ("tracks", "events", "collectives", "flows", "memory", "annotation_roles")  # raw.sql


class CatalogOutdated(UsageError):
    """A read-only connection met a catalog of an older schema (open it for writing once to upgrade)."""


def _tables(con) -> set[str]:
    return {r[0] for r in sql.tuples(con, "migrate.tables")}


def _columns(con, table: str) -> set[str]:
    return {r[0] for r in sql.tuples(con, "migrate.columns", table=table)}


def _run(con, name: str, **params) -> None:
    con.execute(sql.query(f"migrate.{name}"), params or None)


def version(con) -> int | None:
    """The catalog's schema version; None for a file without tables (a new catalog)."""
    tables = _tables(con)
    if "runs" not in tables:
        return None
    if "catalog_info" not in tables:
        return 1
    found = sql.one(con, "migrate.version")
    return int(found[0]) if found else 1


def check_readable(con, path) -> None:
    """A read-only connection cannot upgrade: say what to do with an old or newer catalog."""
    found = version(con)
    if found is not None and found > SCHEMA_VERSION:
        raise UsageError(f"{path}: catalog schema version {found} is newer than this overlapscope "
                         f"({SCHEMA_VERSION}); upgrade overlapscope")
    if found is not None and found < SCHEMA_VERSION:
        con.close()
        raise CatalogOutdated(f"{path}: the catalog was written by an older overlapscope; open it once for "
                              "writing (overlapscope ingest, or the dashboard) to upgrade it")


def upgrade(con, found: int | None, derive=None) -> None:
    """Upgrade from version ``found`` (``version()`` before the schema ran) in one
    transaction; a new catalog (None) only gets its version.

    ``derive(con, run_id)``: what ingest derives from a run (``runs.derive.compute``).
    Versions 1 to 3 held every run's events in the catalog, and their upgrade computes
    each run's analyses by today's definitions; those live above the store, so the
    layer that opens a catalog hands them in (``runs.open_catalog``)."""
    if found is not None and found > SCHEMA_VERSION:
        raise UsageError(f"catalog schema version {found} is newer than this overlapscope "
                         f"({SCHEMA_VERSION}); upgrade overlapscope")
    if found == SCHEMA_VERSION:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        if found in (1, 2, 3):
            con.execute(sql.text("raw"))  # the raw tables a version-1 catalog lacked (annotation_roles)
        if found == 1:
            _from_1(con)
        if found in (1, 2):
            _from_2(con)
        if found in (1, 2, 3, 4) and "text_replaced" not in _columns(con, "ranks"):
            _run(con, "add_ranks_text_replaced")  # before the run store's analyses read the ranks
        if found in (1, 2, 3):
            _to_run_store(con, derive)
        if "idempotency_key" not in _columns(con, "runs"):  # versions 1 to 4
            _run(con, "add_runs_idempotency_key")
        _run(con, "set_version", version=str(SCHEMA_VERSION))
        con.execute("COMMIT")
    except BaseException:
        import duckdb

        try:
            con.execute("ROLLBACK")
        except duckdb.Error:  # the disk failed: nothing was committed either way
            pass
        raise


def _from_1(con) -> None:
    if "parallelism" not in _columns(con, "runs"):
        _run(con, "add_runs_parallelism")
        _run(con, "fill_runs_parallelism")
    if "headline" not in _columns(con, "runs"):
        _run(con, "add_runs_headline")
    _ranks_columns(con)
    if "kind" not in _columns(con, "collectives"):
        _run(con, "add_collectives_kind")
        _run(con, "add_collectives_family")
        names = [r[0] for r in sql.tuples(con, "migrate.collective_names")]
        mapping = [{"collective": n, "kind": collective_kind(n), "family": classify.collective_family(collective_kind(n))}
                   for n in names]
        for row in mapping:
            _run(con, "set_collective_kind", **row)
    roles = [{"run_id": run, "rank": rank, "name": name, "role": role[0], "arg": role[1]}
             for run, rank, name in sql.tuples(con, "migrate.range_names") if (role := classify.annotation_role(name))]
    for row in roles:
        _run(con, "insert_role", **row)


def _ranks_columns(con) -> None:
    columns = _columns(con, "ranks")
    if "dropped_events" not in columns:
        _run(con, "add_ranks_dropped_events")
    if "name_rank" not in columns:
        _run(con, "add_ranks_name_rank")


def _from_2(con) -> None:
    _ranks_columns(con)  # in version 2 of later builds
    columns = _columns(con, "runs")
    if "pushed_by" not in columns:
        _run(con, "add_runs_pushed_by")
    if "pruned_at" not in columns:
        _run(con, "add_runs_pruned_at")


class _Stored:
    """A rank's results as the run store writes them (``runstore.write_results``)."""

    def __init__(self, meta: dict, counts: dict, tables: dict, scripts: tuple):
        self.meta, self.counts, self.tables, self.scripts = meta, counts, tables, scripts
        self.rank = meta["rank"]


def _to_run_store(con, derive) -> None:
    """Every run that still has its events in the catalog moves to the run store: its raw
    rows per rank as Parquet, its rank scripts run here (over its events, as the map runs
    them on each rank) with their results written per rank, its headline, findings,
    figures and analyses computed by today's definitions; then the catalog's event tables
    go. Runs pruned before keep what they kept (their figures and findings)."""
    from overlapscope.analyzer.store import results, runstore

    if "data_dir" not in _columns(con, "runs"):
        _run(con, "add_runs_data_dir")
    raw = [t for t in RAW_TABLES if t in _tables(con)]
    if "events" not in raw:
        return
    if derive is None:
        raise CatalogOutdated(f"{runstore.path_of(con)}: this catalog holds its runs' events (schema version 3 "
                              "or older); open it once with overlapscope (ingest, history or the dashboard) to "
                              "upgrade it")
    path = runstore.path_of(con)
    scripts = RANK_SCRIPTS["full"]
    for (run_id,) in sql.tuples(con, "migrate.runs_with_events"):
        staging = runstore.stage(path)
        try:
            for script in scripts:
                if script == "steps":  # a stored table: the run's rows are there
                    sql.mark_done(con, script, **script_params(script, run_id))
                else:
                    sql.ensure(con, script, **script_params(script, run_id))
            for r in sql.rows(con, "migrate.ranks_of", run_id=run_id):
                rank = r["rank"]
                runstore.write_raw(staging.path, rank, {t: _rows(con, t, run_id, rank) for t in raw})
                tables = {t: _rows(con, t, run_id, rank) for t in ("steps", "annotation_roles")}
                for script in scripts:
                    for table in sql.script(script).shipped:
                        if table != "steps":
                            tables[table] = con.sql(sql.query("migrate.result_rows"),
                                                    params={"table": table, "rank": rank}).to_arrow_table()
                counts = {"events": r.pop("events"), "dropped": json.loads(r.pop("dropped_events") or "{}")}
                runstore.write_results(staging.path, _Stored(r, counts, tables, scripts))
            computed = derive(con, run_id)
            runstore.write_derived(staging.path, computed)
            results.save(con, run_id, computed)
            data_dir = staging.publish()  # a failed upgrade leaves it unnamed: the next writer sweeps it
        except BaseException:
            staging.discard()
            raise
        _run(con, "set_data_dir", run_id=run_id, data_dir=data_dir)
        for rank, offset in computed["clock_offsets_ns"].items():
            _run(con, "set_clock_offset", run_id=run_id, rank=rank, offset=offset)
    for table in raw:
        _run(con, f"drop_{table}")


def _rows(con, table: str, run_id: int, rank: int):
    """One rank's rows of one of the catalog's tables, without the run id, as Arrow."""
    return con.sql(sql.query("migrate.rank_rows"), params={"table": table, "run_id": run_id, "rank": rank}
                   ).to_arrow_table()
