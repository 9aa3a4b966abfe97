"""One process's access to a catalog file: readers share one DuckDB instance, one thread writes.

DuckDB lets one process open a file for writing, or several processes for
reading, never both. A server (the dashboard with its HTTP API) therefore holds
one read-write instance of the file and shares it:

- each reader gets its own cursor (a connection of that instance, with its own
  transaction), so it sees committed runs only, never a half-stored one;
- every write (a push, an upload, a prune) runs on the single writer thread, one
  after the other: concurrent pushes queue and all land, and two writers never
  race for the next run id.

The instance is closed once nothing has used it for ``keep_open_s`` seconds (0:
as soon as the last user is done), so another process (``overlapscope ingest``,
``history``) can take the file between bursts; while another process holds it,
opening waits up to a bound and then raises ``CatalogBusy``.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

from overlapscope.analyzer.errors import CatalogBusy

READ_WAIT_S = 10.0  # a page or an API read waits this long for a file another process holds
WRITE_WAIT_S = 120.0  # a queued write waits longer: a push should not fail over a lock held for seconds


class SharedCatalog:
    """The catalog at ``path`` as this process shares it (see the module's docstring)."""

    def __init__(self, path: str, keep_open_s: float = 0.0, derive=None):
        self.path = path
        self.keep_open_s = keep_open_s
        self.derive = derive  # what an upgrade of an old catalog computes (catalog.open_catalog)
        self._cond = threading.Condition()
        self._con = None
        self._leases = 0
        self._last_used = 0.0
        self._closer: threading.Timer | None = None
        self._jobs: queue.Queue = queue.Queue()
        self._writer: threading.Thread | None = None
        self._stopped = False

    # --- the instance: opened on first use, closed when idle -------------------------------

    def _acquire(self, wait_s: float):
        from overlapscope.analyzer.store import catalog

        with self._cond:
            if self._con is None:
                self._con = catalog.open_catalog(self.path, wait_s=wait_s, derive=self.derive)
            self._leases += 1
            return self._con.cursor()

    def _release(self, cursor) -> None:
        cursor.close()
        with self._cond:
            self._leases -= 1
            self._last_used = time.monotonic()
            if self._leases == 0:
                if self.keep_open_s <= 0:
                    self._close()
                elif self._closer is None:
                    self._schedule(self.keep_open_s)

    def _schedule(self, delay_s: float) -> None:
        self._closer = threading.Timer(delay_s, self._close_if_idle)
        self._closer.daemon = True
        self._closer.start()

    def _close_if_idle(self) -> None:
        with self._cond:
            self._closer = None
            if self._leases or self._con is None:
                return
            idle_s = time.monotonic() - self._last_used
            if idle_s + 1e-3 >= self.keep_open_s:
                self._close()
            else:
                self._schedule(self.keep_open_s - idle_s)

    def _close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    @property
    def is_open(self) -> bool:
        """Whether this process holds the file now."""
        with self._cond:
            return self._con is not None

    @contextmanager
    def read(self, wait_s: float | None = None):
        """A cursor for one read (its own transaction: committed runs only), closed afterwards."""
        cursor = self._acquire(READ_WAIT_S if wait_s is None else wait_s)
        try:
            yield cursor
        finally:
            self._release(cursor)

    # --- the single writer ----------------------------------------------------------------

    def submit(self, work, wait_s: float | None = None) -> Future:
        """Queue ``work(cursor)`` for the writer thread; the future holds its result or its error."""
        future: Future = Future()
        with self._cond:
            if self._stopped:
                raise CatalogBusy(f"{self.path}: the catalog is closing (the server is stopping)")
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="overlapscope-catalog-writer",
                                                daemon=True)
                self._writer.start()
        self._jobs.put((work, WRITE_WAIT_S if wait_s is None else wait_s, future))
        return future

    def write(self, work, wait_s: float | None = None):
        """Run ``work(cursor)`` on the writer thread, after the writes queued before it; its result."""
        return self.submit(work, wait_s).result()

    def queued(self) -> int:
        """Writes waiting for the writer thread."""
        return self._jobs.qsize()

    def _write_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            work, wait_s, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                with self.read(wait_s) as cursor:
                    result = work(cursor)
            except BaseException as err:  # the caller gets it; the writer goes on with the next job
                future.set_exception(err)
            else:
                future.set_result(result)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Refuse new writes, let the current one finish (up to ``timeout_s``), fail the queued
        ones, and close the file. A write cut short by process exit is rolled back by DuckDB."""
        with self._cond:
            self._stopped = True
        pending = []
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                pending.append(job[2])
        for future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(CatalogBusy(f"{self.path}: not stored: the server stopped first"))
        if self._writer is not None:
            self._jobs.put(None)
            self._writer.join(timeout_s)
        with self._cond:
            if self._closer is not None:
                self._closer.cancel()
                self._closer = None
            if self._leases == 0:
                self._close()


_SHARED: dict[str, SharedCatalog] = {}
_GUARD = threading.Lock()


def shared(path: str | Path, keep_open_s: float | None = None, derive=None) -> SharedCatalog:
    """This process's ``SharedCatalog`` of ``path`` (one per file); ``keep_open_s`` and
    ``derive`` update it."""
    key = str(Path(path).expanduser().resolve())
    with _GUARD:
        found = _SHARED.get(key)
        if found is None or found._stopped:
            found = _SHARED[key] = SharedCatalog(key)
        if keep_open_s is not None:
            found.keep_open_s = keep_open_s
        if derive is not None:
            found.derive = derive
        return found
