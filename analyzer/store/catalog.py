"""The catalog: one embedded DuckDB file holding many runs, for the dashboard and CI.

By default it lives in the user's data directory; ``$OVERLAPSCOPE_DB`` or
``--db`` choose another file. Each run's per-rank tables (every event, every
argument) are Parquet files in the run store beside it (``runstore.py``); the
catalog holds the run index and what ingest derived. A run is stored whole or not
at all.
"""

from __future__ import annotations

import json
import os
import re
import time
from importlib import resources
from pathlib import Path

from overlapscope.analyzer import sql

from overlapscope.analyzer.errors import CatalogBusy, CatalogWriteError, RunNotFound, UsageError
from overlapscope.contract import figures

# store (and with it duckdb) is imported inside the functions: a command that
# decodes traces forks its workers before duckdb starts any thread.

# The sample runs ship as package data (overlapscope.sample_traces): found the same way
# in a checkout, an editable install and a wheel installed anywhere.
SAMPLES_DIR = Path(str(resources.files("overlapscope.sample_traces")))
RETRY_S = 0.25  # how often a wait for a catalog another process holds tries again


def default_path() -> Path:
    """``$OVERLAPSCOPE_DB``, else ``$XDG_DATA_HOME/overlapscope/catalog.duckdb`` (~/.local/share)."""
    if os.environ.get("OVERLAPSCOPE_DB"):
        return Path(os.environ["OVERLAPSCOPE_DB"])
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "overlapscope" / "catalog.duckdb"


def resolve_path(path: str | os.PathLike | None) -> Path:
    """The catalog file a command means: ``path``, else the default."""
    return Path(path) if path else default_path()


def open_catalog(path: str | os.PathLike | None = None, read_only: bool = False, wait_s: float = 0.0,
                 on_wait=None, derive=None):
    """Open (creating it if needed) the catalog file and return a DuckDB connection.

    A catalog written by an older overlapscope is upgraded first (briefly read-write).
    DuckDB lets one process write a file (or several read it): when another process
    holds it, try again for up to ``wait_s`` seconds, calling ``on_wait(message)``
    once, then raise ``CatalogBusy``. ``derive``: what an upgrade of a catalog of
    schema version 3 or older computes for each run (the commands open catalogs
    through ``runs.open_catalog``, which hands it in).
    """
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            return _open(path, read_only, derive)
        except CatalogBusy as err:
            if time.monotonic() >= deadline:
                if wait_s > 0:
                    raise CatalogBusy(f"{err} (still held after waiting {wait_s:g} s)") from None
                raise
            if on_wait is not None and not told:
                on_wait(f"{err}; waiting up to {wait_s:g} s for it")
                told = True
            time.sleep(RETRY_S)


def _open(path, read_only: bool, derive=None):
    import duckdb

    from overlapscope.analyzer.store import database, swaplock
    from overlapscope.analyzer.store.migrate import CatalogOutdated

    path = Path(path) if path else default_path()
    if read_only and not path.exists():
        raise UsageError(f"{path}: no catalog here yet (store a run with: overlapscope ingest PATH --run NAME)")
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            if read_only:
                return database.connect(str(path), read_only=True)
            with swaplock.held(path):  # never open a file that prune or delete is replacing
                return database.connect(str(path), derive=derive)
        except CatalogOutdated:
            with swaplock.held(path):
                database.connect(str(path), derive=derive).close()  # upgrades in one transaction
            return database.connect(str(path), read_only=True)
    except duckdb.IOException as err:
        first = str(err).splitlines()[0]
        if "lock" in first.lower():  # another process holds the file (a running dashboard): worth waiting for
            pid = re.search(r"\(PID (\d+)\)", first)  # DuckDB's line names the file, the program, the user
            raise CatalogBusy(f"{path}: the catalog is in use by another process (a dashboard or another writer"
                              f"{', process ' + pid.group(1) if pid else ''})") from None
        # the disk itself (read-only, missing permission): waiting would not help
        raise CatalogWriteError(f"{path}: cannot open the catalog: {first}") from None


def run_of_key(con, idempotency_key: str, pushed_by: str | None) -> int | None:
    """The run that a push with ``idempotency_key`` by ``pushed_by`` (a token's name) stored; None."""
    found = sql.one(con, "catalog.run_of_key", key=idempotency_key, pushed_by=pushed_by)
    return found[0] if found else None


# history's rows: these headline figures at the top level, as before the headline existed.
HISTORY_FIGURES = figures.HISTORY_FIGURES


def runs(con, name: str | None = None, run_id: int | None = None) -> list[dict]:
    """Stored runs (all, or those named ``name``, or run ``run_id``), newest first, with their headline."""
    out = []
    for r in sql.rows(con, "catalog.runs", name=name, run_id=run_id):
        head = json.loads(r.pop("headline")) if r["headline"] else None
        r["tags"] = json.loads(r["tags"]) if r["tags"] else {}
        out.append({**r, **{k: head.get(k) if head else None for k in HISTORY_FIGURES}, "headline": head})
    return out


def run(con, run_id: int) -> dict:
    """One stored run as ``runs`` lists it; a missing one is a ``UsageError``."""
    found = runs(con, run_id=run_id)
    if not found:
        raise RunNotFound(f"no run {run_id} in the catalog")
    return found[0]


def figures(con, run_id: int) -> dict:
    """The per-rank and per-step figures stored at ingest: ``analyze``'s ``ranks`` and ``steps``."""
    return {"ranks": sql.rows(con, "catalog.rank_metrics", run_id=run_id),
            "steps": sql.rows(con, "catalog.step_metrics", run_id=run_id)}


def detail(con, run_id: int) -> dict:
    """A run with its per-rank figures and its findings, as stored at ingest (pruned runs too)."""
    row = run(con, run_id)
    return {**row, "rank_figures": sql.rows(con, "catalog.rank_metrics", run_id=run_id),
            "findings": sql.rows(con, "catalog.findings", run_id=run_id)}


MAX_RUN_NAME_CHARS = 200


def check_run_name(name: str | None) -> str:
    """A run name as stored (surrounding blanks stripped), or a ``UsageError`` saying
    why not: it must be non-blank, at most ``MAX_RUN_NAME_CHARS`` printable characters
    (no control or invisible formatting characters: it is shown in terminals, tables
    and pages), and not start with ``#`` (``#N`` means run id N)."""
    stripped = (name or "").strip()
    if not stripped:
        raise UsageError("a run name cannot be blank")
    if len(stripped) > MAX_RUN_NAME_CHARS:
        raise UsageError(f"a run name has at most {MAX_RUN_NAME_CHARS} characters, this one has {len(stripped)}")
    bad = next((ch for ch in stripped if not ch.isprintable()), None)
    if bad is not None:
        raise UsageError(f"a run name must be printable text: it holds the character U+{ord(bad):04X}")
    if stripped.startswith("#"):
        raise UsageError("a run name cannot start with '#' (#N means run id N)")
    return stripped


def check_tags(tags: dict | None) -> dict:
    """Tags as stored, or a ``UsageError``: keys non-blank, keys and values printable
    and at most ``MAX_RUN_NAME_CHARS`` characters."""
    out = {}
    for key, value in (tags or {}).items():
        key, value = str(key).strip(), str(value).strip()
        if not key:
            raise UsageError("a tag needs a key (KEY=VALUE)")
        for text in (key, value):
            if len(text) > MAX_RUN_NAME_CHARS or not text.isprintable():
                raise UsageError(f"tag {key[:40]!r}: keys and values are printable text of at most "
                                 f"{MAX_RUN_NAME_CHARS} characters")
        out[key] = value
    return out


def resolve_run(con, ref: str | int) -> int:
    """A run id from ``--run``: ``#N`` (or an int) is run id N; else the newest run of
    that name; else, for digits that no run is named, the run id."""
    if isinstance(ref, int):
        return _by_id(con, ref, f"#{ref}")
    if ref.startswith("#") and ref[1:].isdigit():
        return _by_id(con, int(ref[1:]), ref)
    found = sql.one(con, "catalog.newest_of_name", name=ref)
    if found and found[0] is not None:
        return found[0]
    if ref.isdigit():
        return _by_id(con, int(ref), ref)
    raise RunNotFound(f"no run {ref!r} in the catalog")


def _by_id(con, run_id: int, ref: str) -> int:
    if not sql.one(con, "catalog.run_by_id", run_id=run_id):
        raise RunNotFound(f"no run {ref!r} in the catalog")
    return run_id


def sample_bundles(samples_dir: Path = SAMPLES_DIR) -> list[Path]:
    """The sample runs shipped as package data (one folder per bundle)."""
    if not samples_dir.is_dir():
        return []
    return sorted(p for p in samples_dir.iterdir()
                  if p.is_dir() and any(p.glob("*.json")) or p.is_dir() and any(p.glob("*.json.gz")))


def sample_name(bundle: Path) -> str:
    """A sample run's name: ``sample/<its folder>`` (stored with the tag sample=true)."""
    return f"sample/{bundle.name}"


def missing_samples(con, samples_dir: Path = SAMPLES_DIR) -> list[Path]:
    """The sample bundles to load: those not stored yet, while the catalog holds nothing but
    sample runs. A first start stopped while the samples loaded finishes on the next one; a
    catalog with a run of the user's own is left as it is."""
    stored, others = sql.one(con, "catalog.sample_runs")
    if others:
        return []
    return [b for b in sample_bundles(samples_dir) if sample_name(b) not in set(stored)]
