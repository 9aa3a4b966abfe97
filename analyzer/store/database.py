"""The DuckDB store: the schema, the interval macros, and the atomic insert of a decoded run."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb

from overlapscope.analyzer import sql
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # decode's imports (numpy, pyarrow) are not a store reader's
    from overlapscope.analyzer.ingest.decode import RankData
from overlapscope.contract import manifest as contract_manifest
from overlapscope.contract.manifest import Manifest

# Per-rank tables a decoded rank brings, in insert order.
RANK_TABLES = ("tracks", "events", "collectives", "flows", "memory", "roles")
_TABLE_OF = {"roles": "annotation_roles"}


connections_opened = 0  # how many connections this process opened (fork_is_safe reads it)


def connect(path: str = ":memory:", read_only: bool = False, threads: int | None = None,
            memory_limit_bytes: int | None = None, spill_dir: str | None = None,
            derive=None) -> duckdb.DuckDBPyConnection:
    """Open (or create) a store with its schema and macros; an older catalog is brought up to date.

    ``:memory:`` is a one-shot store (an analysis of paths, one rank's worker): it also
    holds the raw per-rank tables (``raw.sql``). ``threads``, ``memory_limit_bytes`` and
    ``spill_dir`` bound its DuckDB (a worker per rank: one thread, a budget, spilling
    beyond it). ``derive``: what an upgrade of a catalog of schema version 3 or older
    computes for each run (``migrate.upgrade``).
    """
    from overlapscope.analyzer.store import migrate

    config = {}
    if threads:
        config["threads"] = threads
    if memory_limit_bytes:
        config["memory_limit"] = f"{max(memory_limit_bytes // 2**20, 64)}MiB"
    if spill_dir:
        config["temp_directory"] = spill_dir
    global connections_opened
    connections_opened += 1  # engine.local.fork_is_safe: no fork once DuckDB may run threads here
    con = duckdb.connect(path, read_only=read_only, config=config)
    # DuckDB draws a progress bar on stdout for a query past 2 s: it would land inside
    # the JSON that a large run's `analyze --json` prints (and a worker shares stdout)
    con.execute("SET enable_progress_bar = false")
    if read_only:  # the interval macros come with the first script (sql.ensure)
        migrate.check_readable(con, path)
        return con
    if path == ":memory:":  # a one-shot store: nothing to upgrade
        sql.setup(con, "schema", "raw", "intervals")
        return con
    found = migrate.version(con)  # before the schema adds what a newer version has
    sql.setup(con, "schema", "intervals")
    migrate.upgrade(con, found, derive)  # after the macros: an upgrade recomputes headlines
    return con


def _run_row(name: str, source: str, ranks: list[RankData], manifest: Manifest | None, manifest_text, tags,
             pushed_by: str | None = None) -> dict:
    metas = [r.meta for r in ranks]
    world = max((m["world_size"] or 0 for m in metas), default=0) or (max(m["rank"] for m in metas) + 1)
    backends = sorted({m["backend"] for m in metas if m["backend"]})
    device_kind = "gpu" if any(m["device_kind"] == "gpu" for m in metas) else "cpu"
    return {
        "name": name, "created_at": datetime.now(timezone.utc).replace(tzinfo=None), "source": source,
        "world_size": world, "backend": ",".join(backends) or None, "device_kind": device_kind,
        # the manifest as given (keys of a newer minor version stay), else as the struct writes it
        "manifest": manifest_text or (contract_manifest.encode(manifest, indent=0).decode() if manifest else None),
        "tags": json.dumps(tags or {}),
        "parallelism": manifest.parallelism if manifest is not None else None,
        "pushed_by": pushed_by,
    }


def _rank_row(r: RankData) -> dict:
    m = r.meta
    return {"rank": m["rank"], "file": m["file"], "rank_source": m["rank_source"], "world_size": m["world_size"],
            "backend": m["backend"], "nccl_version": m["nccl_version"], "device_kind": m["device_kind"],
            "device_names": m["device_names"], "device_memory_bytes": m["device_memory_bytes"],
            "hostname": m["hostname"], "base_time_ns": m["base_time_ns"], "clock_offset_ns": 0,
            "pg_config": m["pg_config"], "events": r.counts.get("events"),
            "dropped_events": json.dumps(r.counts.get("dropped") or {}), "name_rank": m.get("name_rank"),
            "text_replaced": r.counts.get("text_replaced", 0)}


def next_run_id(con) -> int:
    return sql.one(con, "store.next_run_id")[0]


def insert_run_rows(con, run_id: int, ranks, name: str, source: str, manifest: Manifest | None = None,
                    manifest_text: str | None = None, tags: dict | None = None, pushed_by: str | None = None,
                    data_dir: str | None = None, clock_offsets_ns: dict | None = None,
                    idempotency_key: str | None = None) -> None:
    """The ``runs`` row of run ``run_id`` and its ``ranks`` rows (``ranks``: anything with
    ``meta`` and ``counts``, decoded ranks or their results), with each rank's clock offset."""
    row = {"run_id": run_id, **_run_row(name, source, ranks, manifest, manifest_text, tags, pushed_by)}
    if data_dir is not None:
        row["data_dir"] = data_dir
    if idempotency_key is not None:
        row["idempotency_key"] = idempotency_key
    _insert_row(con, "runs", row)
    offsets = clock_offsets_ns or {}
    _insert_rows(con, "ranks", [{"run_id": run_id, **_rank_row(r), "clock_offset_ns": offsets.get(r.meta["rank"], 0)}
                                for r in ranks])


def insert_arrow(con, table: str, run_id: int, data) -> None:
    """Rows of an Arrow table into ``table`` with ``run_id``, matched by column name."""
    if data.num_rows == 0:
        return
    con.register("_incoming", data)
    try:
        cols = ", ".join(f'"{c}"' for c in data.column_names if c != "run_id")
        con.execute(f"INSERT INTO {table} (run_id, {cols}) SELECT ?, {cols} FROM _incoming", [run_id])
    finally:
        con.unregister("_incoming")


def _insert_row(con, table: str, row: dict) -> None:
    _insert_rows(con, table, [row])


# Rows of one INSERT statement (a statement costs 1-2 ms however few its rows: a run of 256
# ranks took half a second row by row).
# DuckDB splits work by row groups of 122,880 rows: a store whose tables are all smaller gives
# a second thread nothing to do but wait, so it runs on one (one rank of the reference trace,
# 22k rows: its scripts 55 ms at one thread, 65 ms at two; a 4-rank reduce's clocks and waits
# 53 against 62 ms; measured).
ONE_THREAD_MAX_ROWS = 122_880

ROWS_PER_INSERT = 256


def _insert_rows(con, table: str, rows: list[dict]) -> None:
    """Rows with the same keys into ``table``, a few statements for all of them."""
    for i in range(0, len(rows), ROWS_PER_INSERT):
        chunk = rows[i:i + ROWS_PER_INSERT]
        cols = ", ".join(f'"{c}"' for c in chunk[0])
        one_row = f"({', '.join('?' * len(chunk[0]))})"
        con.execute(f"INSERT INTO {table} ({cols}) VALUES {', '.join([one_row] * len(chunk))}",
                    [v for row in chunk for v in row.values()])


def _insert_table(con, table: str, run_id: int, rank: int, data) -> None:
    if data.num_rows == 0:
        return
    con.register("_incoming", data)
    try:
        cols = ", ".join(f'"{c}"' for c in data.column_names)
        con.execute(f"INSERT INTO {table} (run_id, rank, {cols}) SELECT ?, ?, {cols} FROM _incoming",
                    [run_id, rank])
    finally:
        con.unregister("_incoming")


def compress(con) -> None:
    """Compress an in-memory store's tables (a checkpoint: DuckDB compresses what it holds
    when it checkpoints, and checkpoints by itself only after a large insert)."""
    con.execute("CHECKPOINT")


def insert_ranks_run(con, run_id: int, device_kind: str | None, parallelism: str | None = None) -> None:
    """The ``runs`` row of a one-shot store's ranks (a worker's group: ``engine.rank.map_group``)."""
    _insert_row(con, "runs", {"run_id": run_id, "name": "ranks", "parallelism": parallelism,
                              "device_kind": device_kind})


def insert_rank(con, run_id: int, data: RankData, tables: tuple[str, ...] = RANK_TABLES) -> int:
    """One decoded rank's row and tables (``tables`` of RANK_TABLES) into run ``run_id``
    (``insert_ranks_run`` first; ``steps`` once every rank is in); the bytes inserted (Arrow's)."""
    _insert_row(con, "ranks", {"run_id": run_id, **_rank_row(data)})
    inserted = 0
    for table in tables:
        rows = getattr(data, table)
        _insert_table(con, _TABLE_OF.get(table, table), run_id, data.meta["rank"], rows)
        inserted += rows.nbytes
    return inserted


def insert_run(con: duckdb.DuckDBPyConnection, ranks: list[RankData], name: str, source: str,
               manifest: Manifest | None = None, tags: dict | None = None, after=None,
               manifest_text: str | None = None, pushed_by: str | None = None) -> int:
    """Store one run in a single transaction: all of it, or nothing.

    ``after(con, run_id)`` runs inside the same transaction once the rows are in
    (the catalog stores the run's headline and findings there), so a failure or a
    kill at any point leaves the catalog without the run.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        run_id = next_run_id(con)
        insert_run_rows(con, run_id, ranks, name, source, manifest, manifest_text, tags, pushed_by)
        for r in ranks:
            for table in RANK_TABLES:
                _insert_table(con, _TABLE_OF.get(table, table), run_id, r.meta["rank"], getattr(r, table))
        sql.ensure(con, "steps", run_id=run_id)
        if after is not None:
            after(con, run_id)
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise
    return run_id


def rollback(con) -> None:
    """Undo the open transaction; a connection that cannot (its disk failed) is left
    to the caller's error: the uncommitted rows never reach the file either way."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def path_of(con) -> str:
    """The file behind a connection (":memory:" for an in-memory store)."""
    from overlapscope.analyzer.store import runstore

    return runstore.path_of(con)
