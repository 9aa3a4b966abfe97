"""The sample runs loaded into an empty catalog while the dashboard already serves.

A catalog that holds only some of the samples (the first start was stopped while they
loaded) gets the rest on the next start; one with a run of the user's own gets none.

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

from overlapscope.analyzer import api, runs


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
    shared = runs.shared(db)
    try:
        for bundle in bundles:
            shared.write(lambda con, b=bundle: runs.ingest(con, [str(b)], name=api.sample_name(b),
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
    """Begin loading the samples ``db`` lacks (``api.missing_samples``: all of them into an
    empty catalog, the rest of them after a first start stopped while loading, none once the
    user has stored a run); None when there is nothing to load."""
    bundles = runs.shared(db).write(lambda con: api.missing_samples(con, samples_dir), 600.0)
    if not bundles:
        return None
    PROGRESS.total, PROGRESS.done, PROGRESS.running, PROGRESS.error = len(bundles), 0, True, None
    thread = threading.Thread(target=_load, args=(db, bundles, quiet), name="overlapscope-samples", daemon=True)
    thread.start()
    _LOADER.append(thread)
    return thread
