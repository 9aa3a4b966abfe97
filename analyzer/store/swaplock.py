"""The catalog's swap lock: ``<catalog>.lock`` beside the file, taken with ``flock``.

``prune`` and ``delete`` give space back by writing a compacted copy of the catalog
and renaming it over the file (``retention.rewrite``). Between closing the old
file and renaming the copy over it, DuckDB's own lock is free: a process opening
the file then (a server's writer, an ingest) would commit into the old file, which
the rename then throws away, after it had answered 201. So every read-write open
of a catalog takes this lock for as long as the open lasts (``catalog._open``),
and compaction holds it from before it closes the old file until the copy is in
place: an open in that window waits (``CatalogBusy``, retried) and then opens the
new file. Read-only opens skip it: they never commit. The kernel releases the lock
when its holder exits, so a killed prune leaves nothing locked.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from overlapscope.analyzer.errors import CatalogBusy, CatalogWriteError


def lock_path(catalog_path: str | os.PathLike) -> Path:
    return Path(f"{catalog_path}.lock")


@contextmanager
def held(catalog_path: str | os.PathLike, wait: bool = False):
    """Hold the lock of the catalog at ``catalog_path`` for the ``with`` block. Without
    ``wait``, a lock held elsewhere (a compaction's swap, milliseconds) is a ``CatalogBusy``
    that ``catalog.open_catalog`` retries; with it, block until it is free (only
    compaction waits: other holders hold it for an open, never for long)."""
    path = lock_path(catalog_path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:  # the folder is read-only: the catalog could not be written either
        raise CatalogWriteError(f"{catalog_path}: cannot open the catalog for writing: "
                                f"{err.strerror or err} ({path.name})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            # the holder is opening the file (an upgrade can take a while) or swapping in a compacted copy
            raise CatalogBusy(f"{catalog_path}: the catalog is in use by another process (opening it, or "
                              "prune or delete putting its compacted copy in place)") from None
        yield
    finally:
        os.close(fd)  # releases the lock
