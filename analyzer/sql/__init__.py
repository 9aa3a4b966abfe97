"""Named SQL over the store: every query of the analyzer lives in this folder.

Two kinds of file:

- **Scripts** (``<name>.sql``) build documented tables on a connection. A header
  of ``--`` lines declares, before any statement::

      -- params:   run_id             variables the script reads with getvariable()
      -- scope:    rank               rank: it reads one rank's rows at a time (the map
                                      over ranks may run it on each rank alone, in the
                                      worker that decoded the rank); run: it compares ranks
      -- requires: overlap            scripts whose tables it reads (run first)
      -- inputs:   timeline_attribution   tables the caller registers (documented there)
      -- provides: collective_stats   the tables other code may read
      -- stays:    compute_union      of those, the ones a rank script keeps to its rank:
                                      only other rank scripts read them

  ``ensure(con, "collectives", run_id=3)`` runs what a script requires, then the
  script, once per connection and parameters: a temp table (``_sql_done``)
  remembers what ran, and running a script again with other parameters forgets
  everything that depends on it. No caller passes "already done" flags. A
  script with inputs runs on every call (its inputs may be new). The tables a
  script makes for itself alone (``_xx_*``, ``Script.private``) are dropped once
  it has run: a worker's store holds tens of ranks, a server's store lives long.
- **Query files** (``queries/<group>.sql``) hold named SELECTs, each after a
  ``-- name: <name>`` line; ``rows(con, "<group>.<name>", **params)`` runs one
  with ``$param`` placeholders and returns dicts.

``schema.sql`` (the catalog's tables), ``raw.sql`` (the raw per-rank tables of
in-memory stores) and ``intervals.sql`` (the interval algebra, as macros) are
applied when a connection opens (``store.database.connect``).
"""

from __future__ import annotations

import functools
import json
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Callable

_HEADER = re.compile(r"^--\s*(params|scope|requires|inputs|provides|stays):\s*(.*)$")
_NAME = re.compile(r"^--\s*name:\s*([\w.]+)\s*$", re.M)
_PRIVATE_TABLE = re.compile(r"CREATE OR REPLACE TEMP TABLE (_[a-z]{2}_\w+)")
SETUP = ("schema", "raw", "intervals")  # applied by connect(), never by ensure()


@dataclass(frozen=True)
class Script:
    """One script and what its header declares."""

    name: str
    text: str
    params: tuple[str, ...]
    scope: tuple[str, ...]  # ("rank",) or ("run",); () for the setup files
    requires: tuple[str, ...]
    inputs: tuple[str, ...]
    provides: tuple[str, ...]
    stays: tuple[str, ...]

    @property
    def per_rank(self) -> bool:
        return self.scope == ("rank",)

    @property
    def private(self) -> tuple[str, ...]:
        """The tables it makes for itself alone (``_xx_*``): dropped once it has run (``ensure``)."""
        return tuple(dict.fromkeys(_PRIVATE_TABLE.findall(self.text)))

    @property
    def shipped(self) -> tuple[str, ...]:
        """What a rank script hands to the comparison across ranks (all it provides but what stays)."""
        return tuple(t for t in self.provides if t not in self.stays)


def text(name: str) -> str:
    """The text of ``<name>.sql`` in this folder."""
    return resources.files(__name__).joinpath(f"{name}.sql").read_text()


@functools.cache
def script(name: str) -> Script:
    """A script with its parsed header (the leading ``--`` lines)."""
    body = text(name)
    declared: dict[str, tuple[str, ...]] = {"params": (), "scope": (), "requires": (), "inputs": (), "provides": (),
                                            "stays": ()}
    for line in body.splitlines():
        if not line.startswith("--"):
            if line.strip():
                break
            continue
        m = _HEADER.match(line)
        if m:
            words = tuple(w.strip() for w in re.split(r"[,\s]+", m.group(2)) if w.strip() and w.strip() != "-")
            declared[m.group(1)] = declared[m.group(1)] + words
    return Script(name, body, **declared)


def _dependents(name: str, done: list[str]) -> set[str]:
    """Scripts among ``done`` that read (directly or not) what ``name`` provides."""
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for other in done:
            if other not in out and other != name and any(r == name or r in out for r in script(other).requires):
                out.add(other)
                changed = True
    return out


_READY = weakref.WeakSet()  # connections that have _sql_done and the interval macros
# No key: a row is replaced by a delete and an insert (_record), 1 ms where INSERT OR
# REPLACE on a primary key took 2-8 ms (measured), twice or more per analysis.
_DONE_TABLE = "CREATE TEMP TABLE IF NOT EXISTS _sql_done (script VARCHAR, params VARCHAR)"


def _ready(con) -> None:
    if con not in _READY:  # the first script on this connection
        con.execute(_DONE_TABLE)
        ensure_macros(con)
        _READY.add(con)


def _done(con) -> dict[str, str]:
    _ready(con)
    return dict(con.execute("SELECT script, params FROM _sql_done").fetchall())


def setup(con, *names: str) -> None:
    """Run setup files (``schema``, ``raw``, ``intervals``) on a new connection; with
    ``intervals`` it is ready for scripts (``ensure`` need not look for the macros)."""
    for name in names:
        con.execute(text(name))
    if "intervals" in names:
        con.execute(_DONE_TABLE)
        _READY.add(con)


def ensure_macros(con) -> None:
    """The interval macros on a connection that lacks them (a read-only catalog gets them as
    temporary macros, on its first script: reads that run none start without them)."""
    if not one(con, "store.has_macros")[0]:
        con.execute(text("intervals").replace("CREATE OR REPLACE MACRO", "CREATE OR REPLACE TEMP MACRO"))


def has_table(con, name: str) -> bool:
    """Whether the connection has a table or view ``name``."""
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? UNION ALL "
                        "SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [name, name]).fetchall()
    return any(n for (n,) in found)


def ensure(con, name: str, /, **params) -> None:
    """Run script ``name`` (and what it requires) unless it already ran with ``params``.

    Each script gets the parameters its header names; a missing one is an error.
    """
    s = script(name)
    mine = {k: params[k] for k in s.params if k in params}
    missing = [p for p in s.params if p not in params]
    if missing:
        raise TypeError(f"sql script {name!r} needs {', '.join(missing)}")
    key = json.dumps(mine, sort_keys=True, default=str)
    done = _done(con)
    # done with these parameters (and what it read still there: running a script again
    # forgets its dependents); a script with inputs runs every time: they may be new
    if not s.inputs and done.get(name) == key and all(r in done for r in s.requires):
        return
    for required in s.requires:
        ensure(con, required, **{k: v for k, v in params.items() if k in script(required).params})
    if s.requires:  # what they ran
        done = _done(con)
    for table in s.inputs:
        if not has_table(con, table):
            raise RuntimeError(f"sql script {name!r} reads {table!r}, which the caller must register first")
    for key_name, value in mine.items():
        con.execute(f"SET VARIABLE {key_name} = ?", [value])
    con.execute(s.text)
    if s.private:  # what only the script read goes (a worker's store holds tens of ranks)
        con.execute("".join(f"DROP TABLE IF EXISTS {t};" for t in s.private))
    _record(con, name, key, forget=_dependents(name, list(done)))


def _record(con, name: str, key: str, forget: set[str] = frozenset()) -> None:
    """Script ``name`` ran with parameters ``key``; the scripts in ``forget`` must run again."""
    con.execute("DELETE FROM _sql_done WHERE list_contains(?, script)", [sorted({name, *forget})])
    con.execute("INSERT INTO _sql_done VALUES (?, ?)", [name, key])


@dataclass(frozen=True)
class ParquetFiles:
    """Parquet files that hold one provided table's rows together (``provide``): DuckDB reads
    them, ``per_insert`` at a time, on its own threads, instead of each through Arrow and
    an insert of its own; ``between()`` runs between two inserts (a store compressed)."""

    paths: tuple[str, ...]
    per_insert: int
    between: Callable[[], None] | None = None


def _insert_parquet(con, table: str, files: ParquetFiles) -> None:
    read = "read_parquet(?, union_by_name = true)"
    # the columns of every file type the table (a file of a rank without rows may have untyped ones)
    con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM {read} LIMIT 0", [list(files.paths)])
    for i in range(0, len(files.paths), files.per_insert):
        if i and files.between:
            files.between()
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {read}", [list(files.paths[i:i + files.per_insert])])


def provide(con, name: str, table_of, /, **params) -> None:
    """Record that rank script ``name`` ran with ``params``, its tables computed elsewhere.

    ``table_of(table)`` gives the rows of each table the script ships (``Script.shipped``):
    Arrow tables, one insert each (at least one: the first makes the table and gives its
    columns), or ``ParquetFiles`` (columns by name across the files: a file of a rank
    without rows may have untyped ones). It is asked for one table at a time, so that a
    caller reading them from files holds a part of one at once: the map over ranks ran
    the script on every rank apart and the comparison across ranks gets the rows of all
    of them. Later ``ensure`` calls of the script, or of scripts that require it, take
    them as they are. They are stored tables, not temporary ones as the script makes
    them, so that a checkpoint compresses them (the reduce's in-memory store:
    engine/reduce.py).
    """
    for table in script(name).shipped:
        parts = table_of(table)
        if isinstance(parts, ParquetFiles):
            _insert_parquet(con, table, parts)
            continue
        for i, part in enumerate(parts):
            con.register("_provided", part)
            try:
                con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM _provided" if i == 0 else
                            f"INSERT INTO {table} BY NAME SELECT * FROM _provided")
            finally:
                con.unregister("_provided")
    mark_done(con, name, **params)


def mark_done(con, name: str, /, **params) -> None:
    """Record that script ``name`` ran with ``params`` (its tables are in place)."""
    s = script(name)
    mine = {k: params[k] for k in s.params if k in params}
    _ready(con)
    _record(con, name, json.dumps(mine, sort_keys=True, default=str))


@functools.cache
def _queries(group: str) -> dict[str, str]:
    body = resources.files(__name__).joinpath("queries", f"{group}.sql").read_text()
    parts = _NAME.split(body)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def query(name: str) -> str:
    """The text of a named query: ``"<group>.<name>"``."""
    group, _, short = name.partition(".")
    try:
        return _queries(group)[short]
    except KeyError:
        raise KeyError(f"no query {name!r} in analyzer/sql/queries/{group}.sql") from None


def rows(con, name: str, /, **params) -> list[dict]:
    """A named query's rows as dicts (``$name`` placeholders take ``params``)."""
    cur = con.execute(query(name), params or None)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def arrow_batches(con, name: str, /, batch: int = 20_000, **params):
    """A named query's rows as Arrow record batches of ``batch`` rows, never every row at
    once: for callers that compute some columns in Arrow and build one object per row from
    the others (2.07 million rows of 21 columns in 1.4 s through Arrow, where ``fetchmany``'s
    tuples took 3.2-3.9 s and turning them into columns as much again; measured)."""
    return con.sql(query(name), params=params or None).to_arrow_reader(batch)


def tuples(con, name: str, /, **params) -> list[tuple]:
    """A named query's rows as tuples."""
    return con.execute(query(name), params or None).fetchall()


def one(con, name: str, /, **params):
    """The first row of a named query as a tuple (None when it returns none). Fetched to
    the end: DuckDB refuses relation queries (``con.sql``) on a connection whose last
    ``execute`` result is unfinished."""
    found = con.execute(query(name), params or None).fetchall()
    return found[0] if found else None


def scripts() -> list[str]:
    """Every script in this folder (the setup files included)."""
    return sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".sql"))
