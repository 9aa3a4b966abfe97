"""Catalogs as older overlapscope versions wrote them, for the upgrade tests.

Up to schema version 3 a catalog held every run's raw rows (events, tracks,
collectives, flows, memory, annotation_roles) in its own tables, with no run
store beside it. ``version_3`` writes such a file from real traces, the way
those versions stored a run: every event in the catalog, then its headline,
findings and figures; the tests take older versions from it by dropping what
those lacked.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from overlapscope.analyzer import sql
from overlapscope.analyzer.engine.load import load
from overlapscope.analyzer.runs import derive


def version_3(path: Path, runs: list[tuple[list[str], str, dict]]) -> None:
    """A schema-3 catalog at ``path`` holding ``runs`` (paths, name, tags), ids from 1."""
    con = duckdb.connect(str(path))
    try:
        for name in ("schema", "raw", "intervals"):
            con.execute(sql.text(name))
        con.execute("INSERT INTO catalog_info VALUES ('schema_version', '3')")
        for paths, name, tags in runs:
            load(paths, con=con, name=name, tags=tags, detail="full", after=derive.write)
        con.execute("ALTER TABLE runs DROP COLUMN data_dir")  # version 4's
        con.execute("ALTER TABLE runs DROP COLUMN idempotency_key")  # version 5's
        con.execute("ALTER TABLE ranks DROP COLUMN text_replaced")  # version 5's
    finally:
        con.close()
