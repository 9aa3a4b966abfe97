"""``prepare`` in a process of its own that exits when the run is prepared: a long-lived
server (its pushes, its Upload page) keeps none of what a decode took.

Trimming the heap after each decode was not enough: eight gzip bombs pushed at once took
a server from 227 MiB to 1,307 MiB, and a minute later it still held 679 MiB (Python's
and Arrow's allocators keep blocks that glibc's trim cannot reach). A process that ends
gives all of it back. The child is forked from a fork server that imported the analyzer
once (``start``), so a push pays about 20 ms for it, not the imports' second.

The staging folder is made and locked here, in the long-lived process, before the child
starts: no writer's sweep can take it while the child fills it or after the child has
exited and before the commit. The child gets an unlocked view of it
(``runstore.Staging.at``); what it sends back (the ranks' facts and steps, the inputs'
manifest, the derived results) is small, the tables are in the folder.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback

from overlapscope.analyzer.store import runstore

# what the fork server imports once, so that each child starts with it
# (every module a prepare imports: each one left out costs every push its import)
PRELOAD = ["overlapscope.analyzer.runs", "overlapscope.analyzer.runs.derive", "overlapscope.analyzer.engine",
           "overlapscope.analyzer.engine.reduce", "overlapscope.analyzer.engine.one",
           "overlapscope.analyzer.ingest.decode", "overlapscope.analyzer.ingest.exported",
           "overlapscope.analyzer.store.database", "overlapscope.analyzer.store.results",
           "overlapscope.analyzer.checklist", "overlapscope.analyzer.predict.whatif", "pandas"]

_context = None
_context_lock = threading.Lock()


def _ctx():
    global _context
    with _context_lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _short_socket_folder()
            _context = ctx
        return _context


# The fork server listens on a Unix socket in multiprocessing's temporary folder
# (``<TMPDIR>/pymp-*/listener-*``, 32 bytes more), and a socket's path has at most 107 bytes:
# a TMPDIR of 76 bytes or more stopped the server's start with "AF_UNIX path too long" (a
# test's TMPDIR under pytest's numbered folders did)
_SOCKET_PATH_MAX = 107
_SOCKET_SUFFIX = len("/pymp-12345678/listener-12345678")


def _short_socket_folder() -> None:
    """Where TMPDIR is too long for the socket, multiprocessing's folder (made once per
    process, and kept) goes under /tmp: only the socket and that folder, every file a decode
    writes stays under TMPDIR. Done once, before the fork server starts."""
    import os
    import tempfile
    from multiprocessing import util

    if len(tempfile.gettempdir()) + _SOCKET_SUFFIX <= _SOCKET_PATH_MAX or not os.access("/tmp", os.W_OK):
        return
    saved = tempfile.tempdir
    tempfile.tempdir = "/tmp"
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def start() -> None:
    """Start the fork server now (a server's start) rather than at the first push."""
    from multiprocessing import forkserver

    _ctx()
    forkserver.ensure_running()


class ChildFailed(RuntimeError):
    """The child ended without an answer (killed, out of memory) or raised what cannot be
    sent back; the traceback it printed, when there was one, is the cause."""


class _RemoteTraceback(Exception):
    def __init__(self, text: str):
        super().__init__(text)

    def __str__(self):
        return self.args[0]


def prepare(catalog_path, paths: list[str], on_decoded=None, limits=None, shown_from: str | None = None):
    """``runs.prepare`` (one worker) in a child process; the same ``Prepared``, the same
    errors (``InputError``, ``UsageError``, ...) raised here. ``on_decoded(done, total)``
    is called in this thread as the child reports each rank."""
    from overlapscope.analyzer.runs import Prepared, _write_error

    ctx = _ctx()
    try:
        staging = runstore.stage(catalog_path)
    except OSError as err:
        raise _write_error(catalog_path, err) from None
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, str(catalog_path), list(paths), limits, shown_from,
                                             str(staging.path)), name="overlapscope-prepare", daemon=True)
    try:
        child.start()
        send.close()  # this end is the child's: recv sees EOF once the child is gone
        while True:
            try:
                kind, *payload = receive.recv()
            except EOFError:
                child.join()
                raise ChildFailed(f"the process that prepared {' '.join(paths)} ended without an answer "
                                  f"(exit code {child.exitcode})") from None
            if kind == "decoded":
                if on_decoded is not None:
                    on_decoded(*payload)
            elif kind == "done":
                results, inputs, source, computed = payload
                return Prepared(staging, results, inputs, source, computed)
            else:  # "error": the child's exception, and its traceback for the log
                err, text = payload
                raise err from _RemoteTraceback(text)
    except BaseException:
        staging.discard()
        raise
    finally:
        receive.close()
        if child.is_alive():
            child.join(timeout=5)
            if child.is_alive():  # an answer sent, an exit that hangs: it holds nothing we need
                child.kill()
                child.join()


def _child(send, catalog_path: str, paths: list[str], limits, shown_from, staging_path: str) -> None:
    from overlapscope.analyzer import runs

    def decoded(done: int, total: int) -> None:
        send.send(("decoded", done, total))

    try:
        prepared = runs.prepare(catalog_path, paths, workers=1, on_decoded=decoded, limits=limits,
                                shown_from=shown_from, staging=runstore.Staging.at(staging_path))
        send.send(("done", prepared.results, prepared.inputs, prepared.source, prepared.computed))
    except BaseException as err:  # noqa: BLE001 (every error goes back to the parent, which raises it)
        text = traceback.format_exc()
        try:
            send.send(("error", err, text))
        except Exception:  # an exception that does not pickle: its words and type
            send.send(("error", ChildFailed(f"{type(err).__name__}: {err}"), text))
    finally:
        send.close()
