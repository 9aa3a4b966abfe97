"""The DuckDB store: the schema, the interval macros, and the atomic insert of a decoded run."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb

from overlapscope.analyzer import sql
from overlapscope.analyzer.ingest.decode import RankData
from overlapscope.contract import manifest as contract_manifest
from overlapscope.contract.manifest import Manifest

# Per-rank tables a decoded rank brings, in insert order.
RANK_TABLES = ("tracks", "events", "collectives", "flows", "memory", "roles")
_TABLE_OF = {"roles": "annotation_roles"}


def connect(path: str = ":memory:", read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (or create) a store with its schema and macros; an older catalog is brought up to date."""
    from overlapscope.analyzer.store import migrate

    con = duckdb.connect(path, read_only=read_only)
    if read_only:
        migrate.check_readable(con, path)
        con.execute(sql.text("intervals").replace("CREATE OR REPLACE MACRO", "CREATE OR REPLACE TEMP MACRO"))
        return con
    if path == ":memory:":  # a one-shot store: nothing to upgrade
        con.execute(sql.text("schema"))
        con.execute(sql.text("intervals"))
        return con
    found = migrate.version(con)  # before the schema adds what a newer version has
    con.execute(sql.text("schema"))
    con.execute(sql.text("intervals"))
    migrate.upgrade(con, found)  # after the macros: an upgrade recomputes headlines
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
            "dropped_events": json.dumps(r.counts.get("dropped") or {}), "name_rank": m.get("name_rank")}


def _insert_row(con, table: str, row: dict) -> None:
    cols = ", ".join(f'"{c}"' for c in row)
    con.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


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
        run_id = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchone()[0]
        _insert_row(con, "runs", {"run_id": run_id, **_run_row(name, source, ranks, manifest, manifest_text, tags,
                                                                  pushed_by)})
        for r in ranks:
            _insert_row(con, "ranks", {"run_id": run_id, **_rank_row(r)})
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
    found = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    return (found[0] if found else None) or ":memory:"
