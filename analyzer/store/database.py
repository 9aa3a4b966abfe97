"""The DuckDB store: schema, macros, and the atomic insert of a decoded run."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from importlib import resources

import duckdb

from overlapscope.analyzer.ingest.decode import RankData

# Statements applied to every connection: the schema and the reusable macros.
_SETUP_FILES = ("schema.sql", "intervals.sql")


def sql_text(name: str) -> str:
    """The text of one of the named SQL files in analyzer/sql/."""
    return resources.files("overlapscope.analyzer.sql").joinpath(name).read_text()


def connect(path: str = ":memory:", read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (or create) a store and make sure its schema and macros exist."""
    con = duckdb.connect(path, read_only=read_only)
    if not read_only:
        for name in _SETUP_FILES:
            con.execute(sql_text(name))
    else:
        con.execute(sql_text("intervals.sql").replace("CREATE OR REPLACE MACRO", "CREATE OR REPLACE TEMP MACRO"))
    return con


def run_script(con: duckdb.DuckDBPyConnection, name: str, **variables) -> None:
    """Run a named SQL file after setting its variables (read with getvariable())."""
    for key, value in variables.items():
        con.execute(f"SET VARIABLE {key} = ?", [value])
    con.execute(sql_text(name))


def _run_row(run_id: int, name: str, source: str, ranks: list[RankData], manifest, tags) -> list:
    metas = [r.meta for r in ranks]
    world = max((m["world_size"] or 0 for m in metas), default=0) or (max(m["rank"] for m in metas) + 1)
    backends = sorted({m["backend"] for m in metas if m["backend"]})
    device_kind = "gpu" if any(m["device_kind"] == "gpu" for m in metas) else "cpu"
    return [run_id, name, datetime.now(timezone.utc).replace(tzinfo=None), source, world,
            ",".join(backends) or None, device_kind,
            json.dumps(manifest) if manifest is not None else None,
            json.dumps(tags or {})]


def _rank_row(run_id: int, r: RankData) -> list:
    m = r.meta
    return [run_id, m["rank"], m["file"], m["rank_source"], m["world_size"], m["backend"], m["nccl_version"],
            m["device_kind"], m["device_names"], m["device_memory_bytes"], m["hostname"], m["base_time_ns"], 0,
            m["pg_config"], r.counts.get("events")]


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
               manifest: dict | None = None, tags: dict | None = None) -> int:
    """Store one run in a single transaction: all of it, or nothing."""
    con.execute("BEGIN TRANSACTION")
    try:
        run_id = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM runs").fetchone()[0]
        con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    _run_row(run_id, name, source, ranks, manifest, tags))
        for r in ranks:
            con.execute("INSERT INTO ranks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", _rank_row(run_id, r))
            for table in ("tracks", "events", "collectives", "flows", "memory"):
                _insert_table(con, table, run_id, r.meta["rank"], getattr(r, table))
        run_script(con, "steps.sql", run_id=run_id)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return run_id
