"""The sample runs loaded into an empty catalog while the dashboard already serves.

``overlapscope dashboard`` starts the server at once and stores the samples one run
at a time on the catalog's single writer (analyzer/store/access.py), printing a
progress line; the pages see each run as soon as it is committed, and while the
catalog is still empty they say that the samples are loading (``PROGRESS``).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from overlapscope.analyzer.store import access, catalog


@dataclass
class Progress:
    total: int = 0
    done: int = 0
    running: bool = False
    error: str | None = None


PROGRESS = Progress()  # this process's loading, read by the pages (context.require_run)
_LOADER: list[threading.Thread] = []


def wait(timeout_s: float | None = None) -> bool:
    """Wait for the loading this process started; whether it has ended."""
    for thread in _LOADER:
        thread.join(timeout_s)
    return not any(t.is_alive() for t in _LOADER)


def _load(db: str, bundles: list[Path], quiet: bool) -> None:
    shared = access.shared(db)
    try:
        for bundle in bundles:
            shared.write(lambda con, b=bundle: catalog.ingest(con, [str(b)], name=f"sample/{b.name}",
                                                              tags={"sample": "true"}), 600.0)
            PROGRESS.done += 1
            if not quiet:
                print(f"\rloading the sample runs: {PROGRESS.done}/{PROGRESS.total} ({bundle.name})"
                      + " " * 12, end="" if PROGRESS.done < PROGRESS.total else "\n", file=sys.stderr, flush=True)
    except Exception as err:  # the dashboard keeps serving what is there
        PROGRESS.error = f"{type(err).__name__}: {err}"
        print(f"\noverlapscope: warning: loading the sample runs stopped: {err}", file=sys.stderr, flush=True)
    finally:
        PROGRESS.running = False


def start(db: str, samples_dir: Path, quiet: bool = False) -> threading.Thread | None:
    """Begin loading the samples into ``db`` when it holds no run; None when there is nothing to load."""
    bundles = catalog.sample_bundles(samples_dir)
    if not bundles:
        return None
    from overlapscope.analyzer import sql

    count = access.shared(db).write(lambda con: sql.one(con, "catalog.count")[0], 600.0)
    if count:
        return None
    PROGRESS.total, PROGRESS.done, PROGRESS.running, PROGRESS.error = len(bundles), 0, True, None
    thread = threading.Thread(target=_load, args=(db, bundles, quiet), name="overlapscope-samples", daemon=True)
    thread.start()
    _LOADER.append(thread)
    return thread
