"""The catalog: one embedded DuckDB file holding many runs, for the dashboard and CI.

By default it lives in the user's data directory; ``$OVERLAPSCOPE_DB`` or
``--db`` choose another file. Runs are stored whole (every event, every
argument) in one transaction, so a failed ingest leaves nothing behind.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from overlapscope.analyzer.errors import CatalogBusy, UsageError
from overlapscope.analyzer.ingest.load import load

# store (and with it duckdb) is imported inside the functions: a command that
# decodes traces forks its workers before duckdb starts any thread.

# The sample runs ship as package data (overlapscope.sample_traces): found the same way
# in a checkout, an editable install and a wheel installed anywhere.
SAMPLES_DIR = Path(str(resources.files("overlapscope.sample_traces")))


def default_path() -> Path:
    """``$OVERLAPSCOPE_DB``, else ``$XDG_DATA_HOME/overlapscope/catalog.duckdb`` (~/.local/share)."""
    if os.environ.get("OVERLAPSCOPE_DB"):
        return Path(os.environ["OVERLAPSCOPE_DB"])
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "overlapscope" / "catalog.duckdb"


def open_catalog(path: str | os.PathLike | None = None, read_only: bool = False):
    """Open (creating it if needed) the catalog file and return a DuckDB connection."""
    import duckdb

    from overlapscope.analyzer.store import database as store

    path = Path(path) if path else default_path()
    if read_only and not path.exists():
        raise UsageError(f"{path}: no catalog here yet (store a run with: overlapscope ingest PATH --run NAME)")
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return store.connect(str(path), read_only=read_only)
    except duckdb.IOException as err:  # another process holds the file (a running dashboard)
        raise CatalogBusy(f"{path}: cannot open the catalog: {str(err).splitlines()[0]}") from None


def ingest(con, paths: list[str], name: str, tags: dict | None = None, workers: int | None = None,
           on_decoded=None, open_con=None) -> int:
    """Store the traces at ``paths`` as run ``name`` with its headline metrics; return its run id.

    Pass ``con=None`` and ``open_con`` (a function returning the catalog's
    connection) to decode the ranks in parallel first: workers are forked only
    while no DuckDB connection is open. ``on_decoded(done, total)`` reports each
    decoded file (from the calling thread).
    """
    if not name:
        raise UsageError("a run needs a name (--run NAME)")
    loaded = load(paths, con=con, name=name, tags=tags, detail="full", workers=workers,
                  on_decoded=on_decoded, open_con=open_con)
    write_metrics(loaded.con, loaded.run_id)
    return loaded.run_id


def write_metrics(con, run_id: int) -> dict:
    """Compute and store the run's headline figures (the metrics table).

    Per step, like the step time beside them: the median over a rank's steps,
    then the worst rank (exposed comm, step time) or the mean of the ranks. A
    trace without ProfilerStep windows falls back to its whole-trace figures.
    """
    from overlapscope.analyzer.measure import overlap

    result = overlap.compute(con, run_id)
    by_rank: dict[int, list[dict]] = {}
    for s in result["steps"]:
        by_rank.setdefault(s["rank"], []).append(s)
    rows = [{k: _median([s[k] for s in steps if s[k] is not None])
             for k in ("step_ms", "exposed_comm_ms", "comm_ms", "compute_ms", "overlap_pct", "idle_ms")}
            for steps in by_rank.values()] or result["ranks"]

    def values(key):
        return [r[key] for r in rows if r[key] is not None]

    figures = {
        "exposed_comm_ms": max(values("exposed_comm_ms"), default=None),
        "step_ms": max(values("step_ms"), default=None),
        "comm_ms": _mean(values("comm_ms")),
        "compute_ms": _mean(values("compute_ms")),
        "overlap_pct": _mean(values("overlap_pct")),
        "idle_ms": _mean(values("idle_ms")),
    }
    con.execute("DELETE FROM metrics WHERE run_id = ?", [run_id])
    con.executemany("INSERT INTO metrics VALUES (?, ?, ?)", [(run_id, k, v) for k, v in figures.items()])
    return figures


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def runs(con, name: str | None = None) -> list[dict]:
    """Stored runs (all, or those named ``name``), newest first, with their headline metrics."""
    cur = con.execute("""
        SELECT r.run_id, r.name, r.created_at, r.world_size, r.backend, r.device_kind,
               json_extract_string(r.manifest, '$.parallelism') AS parallelism, r.tags,
               (SELECT count(*) FROM ranks k WHERE k.run_id = r.run_id) AS ranks,
               m.step_ms, m.exposed_comm_ms, m.comm_ms, m.overlap_pct
        FROM runs r
        LEFT JOIN (SELECT run_id,
                          any_value(value) FILTER (WHERE name = 'step_ms') AS step_ms,
                          any_value(value) FILTER (WHERE name = 'exposed_comm_ms') AS exposed_comm_ms,
                          any_value(value) FILTER (WHERE name = 'comm_ms') AS comm_ms,
                          any_value(value) FILTER (WHERE name = 'overlap_pct') AS overlap_pct
                   FROM metrics GROUP BY run_id) m USING (run_id)
        WHERE ? IS NULL OR r.name = ?
        ORDER BY r.run_id DESC""", [name, name])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def resolve_run(con, ref: str) -> int:
    """A run id from ``--run NAME|ID`` (the newest run of that name)."""
    if ref.isdigit():
        found = con.execute("SELECT run_id FROM runs WHERE run_id = ?", [int(ref)]).fetchone()
    else:
        found = con.execute("SELECT max(run_id) FROM runs WHERE name = ?", [ref]).fetchone()
        found = found if found and found[0] is not None else None
    if not found:
        raise UsageError(f"no run {ref!r} in the catalog")
    return found[0]


def sample_bundles(samples_dir: Path = SAMPLES_DIR) -> list[Path]:
    """The sample runs shipped in sample_traces/ (one folder per bundle)."""
    if not samples_dir.is_dir():
        return []
    return sorted(p for p in samples_dir.iterdir()
                  if p.is_dir() and any(p.glob("*.json")) or p.is_dir() and any(p.glob("*.json.gz")))


def ensure_samples(con, samples_dir: Path = SAMPLES_DIR) -> list[int]:
    """Load the sample runs into an empty catalog (a new user sees a real analysis)."""
    if con.execute("SELECT count(*) FROM runs").fetchone()[0]:
        return []
    ids = []
    for bundle in sample_bundles(samples_dir):
        ids.append(ingest(con, [str(bundle)], name=f"sample/{bundle.name}", tags={"sample": "true"}))
    return ids
