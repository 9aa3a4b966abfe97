"""Bring a catalog written by an older overlapscope up to the current schema.

Version 1 (no ``catalog_info``): runs without ``parallelism``, collectives
without ``kind`` and ``family``, no ``annotation_roles``, no ``findings``.
Version 2 stores what classification and the checklist derive once, at load.
Version 3 adds who pushed a run and when it was pruned (``runs.pushed_by``,
``runs.pruned_at``) and the figures per rank, step and bucket or unit that outlive
a prune (``rank_metrics``, ``step_metrics``, ``group_metrics``).
A catalog of a newer version than this code knows is refused in one line.
"""

from __future__ import annotations

from overlapscope.analyzer.errors import UsageError

SCHEMA_VERSION = 3


class CatalogOutdated(UsageError):
    """A read-only connection met a catalog of an older schema (open it for writing once to upgrade)."""


def version(con) -> int | None:
    """The catalog's schema version; None for a file without tables (a new catalog)."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()}
    if "runs" not in tables:
        return None
    if "catalog_info" not in tables:
        return 1
    found = con.execute("SELECT value FROM catalog_info WHERE key = 'schema_version'").fetchone()
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


def _columns(con, table: str) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND NOT internal", [table]).fetchall()}


def upgrade(con, found: int | None) -> None:
    """Upgrade from version ``found`` (``version()`` before the schema ran) in one
    transaction; a new catalog (None) only gets its version."""
    if found is not None and found > SCHEMA_VERSION:
        raise UsageError(f"catalog schema version {found} is newer than this overlapscope "
                         f"({SCHEMA_VERSION}); upgrade overlapscope")
    if found == SCHEMA_VERSION:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        if found == 1:
            _from_1(con)
        if found in (1, 2):
            _from_2(con)
            _recompute(con)
        con.execute("INSERT OR REPLACE INTO catalog_info VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        con.execute("COMMIT")
    except BaseException:
        import duckdb

        try:
            con.execute("ROLLBACK")
        except duckdb.Error:  # the disk failed: nothing was committed either way
            pass
        raise


def _from_1(con) -> None:
    from overlapscope.analyzer.ingest import classify
    from overlapscope.contract.collectives import collective_kind

    if "parallelism" not in _columns(con, "runs"):
        con.execute("ALTER TABLE runs ADD COLUMN parallelism VARCHAR")
        con.execute("UPDATE runs SET parallelism = json_extract_string(manifest, '$.parallelism')")
    if "headline" not in _columns(con, "runs"):
        con.execute("ALTER TABLE runs ADD COLUMN headline JSON")
    for column, kind in (("dropped_events", "JSON"), ("name_rank", "INTEGER")):
        if column not in _columns(con, "ranks"):
            con.execute(f"ALTER TABLE ranks ADD COLUMN {column} {kind}")
    if "kind" not in _columns(con, "collectives"):
        con.execute("ALTER TABLE collectives ADD COLUMN kind VARCHAR")
        con.execute("ALTER TABLE collectives ADD COLUMN family VARCHAR")
        names = [r[0] for r in con.execute("SELECT DISTINCT collective FROM collectives "
                                           "WHERE collective IS NOT NULL").fetchall()]
        mapping = [(n, collective_kind(n), classify.collective_family(collective_kind(n))) for n in names]
        if mapping:
            con.execute("CREATE TEMP TABLE _kinds (collective VARCHAR, kind VARCHAR, family VARCHAR)")
            con.executemany("INSERT INTO _kinds VALUES (?, ?, ?)", mapping)
            con.execute("UPDATE collectives c SET kind = k.kind, family = k.family FROM _kinds k "
                        "WHERE c.collective = k.collective")
            con.execute("DROP TABLE _kinds")
    names = con.execute("SELECT DISTINCT run_id, rank, name FROM events "
                        "WHERE kind IN ('annotation', 'cpu_op', 'comm_launch')").fetchall()
    roles = [(run, rank, name, *role) for run, rank, name in names if (role := classify.annotation_role(name))]
    if roles:
        con.executemany("INSERT INTO annotation_roles VALUES (?, ?, ?, ?, ?)", roles)


def _from_2(con) -> None:
    for column, kind in (("dropped_events", "JSON"), ("name_rank", "INTEGER")):  # in version 2 of later builds
        if column not in _columns(con, "ranks"):
            con.execute(f"ALTER TABLE ranks ADD COLUMN {column} {kind}")
    columns = _columns(con, "runs")
    if "pushed_by" not in columns:
        con.execute("ALTER TABLE runs ADD COLUMN pushed_by VARCHAR")
    if "pruned_at" not in columns:
        con.execute("ALTER TABLE runs ADD COLUMN pruned_at TIMESTAMP")


def _recompute(con) -> None:
    """The headline, findings and figures of every stored run, by today's definitions
    (no run of an older catalog is pruned: pruning came with version 3)."""
    from overlapscope.analyzer.store import results

    for (run_id,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall():
        results.write(con, run_id)
