"""What bounds the catalog's growth: prune old runs' raw events, delete runs, give the space back.

A run's raw events (every slice, track, collective, flow, allocation and
annotation range: the ``raw/`` Parquet files of its folder in the run store) are
nearly all of its bytes. ``prune`` drops them and keeps what history, the CI gate
and every page but the Timeline read: the ``runs`` row with its headline, the
per-rank, per-step and per-bucket/unit figures, the findings, the step windows,
its ranks' results and its stored analyses (buckets, checklist). ``delete``
removes a run whole. The catalog's rows change in one transaction each; the files
go once it committed (a crash in between leaves files that the next prune or
writer removes). DuckDB reuses freed blocks but never shrinks its file, so
``rewrite`` copies it without them and renames the copy over it, under the swap
lock (``swaplock.py``) so that no writer opens the old file in between.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from overlapscope.analyzer import sql
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.store import runstore, swaplock

# The catalog's rows of a run besides its ``runs`` row: what delete drops.
KEPT_TABLES = ("steps", "ranks", "metrics", "findings", "rank_metrics", "step_metrics", "group_metrics")


def to_prune(con, keep_last: int | None = None, name: str | None = None, older_than_days: float | None = None,
             now: datetime | None = None) -> list[int]:
    """The complete runs that prune would strip: of ``name`` (or all), beyond the newest
    ``keep_last`` of each name, created more than ``older_than_days`` ago; oldest first."""
    if keep_last is None and older_than_days is None:
        raise UsageError("say which runs to prune: --keep-last N (per name) and/or --older-than DAYS")
    if keep_last is not None and keep_last < 0:
        raise UsageError(f"--keep-last must be 0 or more, got {keep_last}")
    if older_than_days is not None and older_than_days < 0:
        raise UsageError(f"--older-than must be 0 or more days, got {older_than_days}")
    now = now or datetime.now(timezone.utc).replace(tzinfo=None)
    before = now - timedelta(days=older_than_days) if older_than_days is not None else None
    return [r[0] for r in sql.tuples(con, "retention.candidates", name=name, keep_last=keep_last, before=before)]


def _folders(con, run_ids: list[int]) -> list[Path]:
    path = runstore.path_of(con)
    return [folder for run_id in run_ids
            if (folder := runstore.run_dir(path, (sql.one(con, "catalog.data_dir", run_id=run_id) or [None])[0]))]


def prune(con, run_ids: list[int]) -> list[int]:
    """Mark ``run_ids`` pruned in one transaction, then drop their raw files; the ids pruned."""
    if not run_ids:
        return []
    folders = _folders(con, run_ids)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(sql.query("retention.mark_pruned"),
                    {"run_ids": run_ids, "now": datetime.now(timezone.utc).replace(tzinfo=None)})
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    for folder in folders:
        runstore.drop_raw(folder)
    return list(run_ids)


def delete(con, run_id: int) -> None:
    """Remove run ``run_id``, every row it owns (one transaction) and its files."""
    if sql.one(con, "catalog.run_by_id", run_id=run_id) is None:
        raise UsageError(f"no run {run_id} in the catalog")
    folders = _folders(con, [run_id])
    con.execute("BEGIN TRANSACTION")
    try:
        for table in KEPT_TABLES:
            con.execute(sql.query(f"retention.drop_{table}"), {"run_ids": [run_id]})
        con.execute(sql.query("retention.drop_runs"), {"run_ids": [run_id]})
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    for folder in folders:
        runstore.remove(folder)


def compact(con, path: str | os.PathLike) -> Path:
    """Copy the catalog behind ``con`` (open read-write on ``path``) into a new file beside it,
    without the freed blocks; the caller closes ``con`` and calls ``swap`` to put it in place."""
    target = Path(f"{path}.compact")
    target.unlink(missing_ok=True)
    name = con.execute("SELECT current_database()").fetchone()[0].replace('"', '""')
    con.execute("CHECKPOINT")
    con.execute("ATTACH ? AS _compact", [str(target)])
    try:
        con.execute(f'COPY FROM DATABASE "{name}" TO _compact')
    finally:
        con.execute("DETACH _compact")
    return target


def rewrite(con, path: str | os.PathLike) -> bool:
    """Compact the catalog behind ``con`` (open read-write on ``path``) and put the copy in
    place; ``con`` is closed. From before the old file is closed until the copy is in place,
    the swap lock keeps every read-write open out (it waits, then opens the copy), so no
    commit lands in the file being replaced. False when the copy was not used (``swap``)."""
    compacted = compact(con, path)
    with swaplock.held(path, wait=True):
        con.close()
        return swap(compacted, path)


def swap(compacted: Path, path: str | os.PathLike) -> bool:
    """Put the compacted copy in place of ``path`` once its connection closed; False (and the
    copy removed) when a write-ahead log shows that someone wrote after the copy."""
    wal = Path(f"{path}.wal")
    if wal.exists() and wal.stat().st_size:
        compacted.unlink(missing_ok=True)
        return False
    os.replace(compacted, path)
    return True


def size_bytes(path: str | os.PathLike) -> int:
    """The catalog's size on disk: its file, its write-ahead log and its run store."""
    path = Path(path)
    wal = Path(f"{path}.wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0) + runstore.size_bytes(path)
