"""The local engine: the map over ranks in worker processes of this machine.

One process per rank at a time (msgspec and the scanner hold the GIL, so threads
would not help), forked from this one. Each worker dies with its parent (a killed
load leaves no worker behind), and the first failure stops the map with its error.
Where forking is unsafe (DuckDB or other threads already run here: the dashboard,
a test runner that imported DuckDB) the ranks run one after the other in this
process: each is still bounded by its own budget, only slower.
"""

from __future__ import annotations

import os
import sys
import threading


def cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def workers_for(n_items: int, workers: int | None) -> int:
    """How many workers a map of ``n_items`` gets: 1 where forking is unsafe (``run`` then
    works in this process, and the map's groups are planned for one worker)."""
    return max(1, min(n_items, workers or cpus())) if fork_is_safe() else 1


# The native threads this process ran just after prefork_imports imported DuckDB (None:
# it did not): a connection opened since (through database.connect or DuckDB's own API)
# shows as more threads.
_PREFORK_THREADS: int | None = None


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def prefork_imports() -> None:
    """Import DuckDB before forking workers, where nothing has imported it yet, so that they
    inherit it instead of each importing it (0.1 s of CPU a worker, taken from the cores
    that decode). Importing starts no thread; a connection does: ``fork_is_safe`` then says
    no (``database.connections_opened``, and the process's native threads)."""
    global _PREFORK_THREADS
    if "duckdb" in sys.modules or not fork_is_safe():
        return
    import duckdb  # noqa: F401 (nothing had imported it: no connection can be open)

    _PREFORK_THREADS = _native_threads()


def fork_is_safe() -> bool:
    """Whether worker processes may be forked from this one.

    Forking a process that runs other threads can deadlock the child (a lock
    held by a thread that does not exist there). DuckDB starts native threads
    when a connection opens, and the dashboard serves from threads; a fork
    server or spawn would re-import the caller's main module, which Streamlit
    and test runners do not allow. So: fork before DuckDB starts (imported by
    ``prefork_imports``, with no connection opened since, is before), else work in
    this process (the CLI opens its stores once every worker is forked: ``_forked``).
    """
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return False
    if "duckdb" not in sys.modules:
        return True
    from overlapscope.analyzer.store import database

    return (_PREFORK_THREADS is not None and database.connections_opened == 0
            and _native_threads() <= _PREFORK_THREADS)


def die_with_parent() -> None:
    """Worker initializer: the kernel kills this worker when the parent dies (Linux),
    so a kill -9 of a load leaves no worker blocked on its pipe."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)
    except (OSError, AttributeError):  # not Linux: workers end when their pipe closes
        pass


def run(fn, items: list, workers: int | None = None, on_done=None, while_waiting=None) -> list:
    """``[fn(item) for item in items]`` over worker processes (in order); the first error stops it.

    ``on_done(done, total)`` is called as each item finishes (a progress bar);
    ``while_waiting`` runs in this process while the workers work (with one worker: the
    items run here, then it). A run of one rank overlaps its store's opening with its
    decode in threads instead (engine/one.py).
    """
    total = len(items)
    report = on_done or (lambda done, total: None)
    n = workers_for(total, workers)
    if n == 1:
        out = []
        for item in items:
            out.append(fn(item))
            report(len(out), total)
        if while_waiting:
            while_waiting()
        return out
    return _forked(fn, items, n, report, while_waiting)


def _forked(fn, items: list, n: int, report, while_waiting) -> list:
    """Each item in a worker process of its own, forked from this one, ``n`` at a time.

    A fresh worker per item (a group of ranks), not a pool's worker taking item after
    item: what an item's work left in a worker's allocators (Arrow's, DuckDB's, Python's)
    never adds to the next item's peak. A pool's worker peaked 15-25 MiB higher at its
    later groups of 29 ranks than at its first (so 256 ranks peaked above 64); a fork of
    this lean process costs about a millisecond.
    """
    import multiprocessing.connection  # here, not at the top: a run of one rank forks nothing (10 ms)

    ctx = multiprocessing.get_context("fork")
    results: list = [None] * len(items)
    waiting = list(reversed(range(len(items))))  # the next item is the last
    running: dict = {}  # the pipe of a running worker -> (item index, process)
    done, waited = 0, False
    try:
        while waiting or running:
            while waiting and len(running) < n:
                i = waiting.pop()
                receive, send = ctx.Pipe(duplex=False)
                worker = ctx.Process(target=_worker, args=(fn, items[i], send), daemon=True)
                worker.start()
                send.close()
                running[receive] = (i, worker)
            if while_waiting and not waited and not waiting:
                # once every worker is forked: while_waiting opens a store, and no
                # worker may be forked from a process where DuckDB's threads run
                waited = True
                while_waiting()
            for pipe in multiprocessing.connection.wait(list(running)):
                i, worker = running.pop(pipe)
                try:
                    ok, value = pipe.recv()
                except EOFError:
                    worker.join()
                    raise RuntimeError(f"a worker process ended without its result (exit status {worker.exitcode}; "
                                       "a negative status is the signal that killed it, as the kernel's OOM "
                                       "killer does)") from None
                finally:
                    pipe.close()
                worker.join()
                if not ok:
                    raise value
                results[i] = value
                done += 1
                report(done, len(items))
    finally:  # the first failure stops the map: the other workers with it
        for pipe, (_, worker) in running.items():
            worker.kill()
            worker.join()
            pipe.close()
    return results


def _worker(fn, item, send) -> None:
    """In a forked worker: ``fn(item)`` sent back (or the error it raised), then exit at once
    (no exit handlers or buffers inherited from the parent run twice)."""
    die_with_parent()
    try:
        out = (True, fn(item))
    except BaseException as err:  # noqa: BLE001 (sent to the parent, which raises it)
        out = (False, err)
    try:
        send.send(out)
    except Exception as err:  # noqa: BLE001 (a result or an error that does not pickle)
        send.send((False, RuntimeError(f"a worker's result could not be sent back: {err}")))
    finally:
        send.close()
        os._exit(0)
