"""The test machine shared by the suite's workers, and a quiet turn on it.

Tests that time real multi-process runs (an induced straggler, a no_sync pair) compare
steps measured minutes apart; on 2 cores the other xdist worker's test moves them by
tens of percent (a no_sync pair predicted 170 against 112 ms measured in a loaded suite,
72 against 70 alone). Every test holds a shared lock while it runs, its fixtures' set-up
included (conftest's ``pytest_runtest_protocol``), and ``quiet()`` turns it into an
exclusive one: the capture inside waits for the other worker's current test to end, and
that worker starts no new one until it is done. A quiet() inside another is the outer one's
(a fixture that times many runs takes the machine once, not once per run: each turn waited
for the other worker's current test). The lock file (empty) stays in the temporary folder: a
worker cannot know that the other one is done with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

_held: dict = {}  # "fd": the file held shared for the running test (hold())


def lock_path() -> Path | None:
    """The lock file of this test run's xdist workers (one per run: xdist's run id); None
    without workers."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run or not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return Path(tempfile.gettempdir()) / f"overlapscope-tests-{run}.lock"


@contextlib.contextmanager
def hold(path: Path) -> Iterator[None]:
    """The running test's shared turn on the machine."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _held["fd"], _held["path"] = fd, path
    try:
        yield
    finally:
        _held.pop("fd", None)
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The machine to this worker alone (other workers finish their current test first).
    Outside a test's turn (a module fixture's set-up) it takes a turn of its own; without
    xdist's workers it does nothing."""
    if _held.get("quiet"):  # inside another quiet(): the machine is this worker's already
        yield
        return
    fd = _held.get("fd")
    path = _held.get("path") or lock_path()
    if fd is None and not path:
        yield
        return
    own = fd is None
    if own:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # from shared: converted (flock drops it, then waits)
    _held["quiet"] = True
    try:
        yield
    finally:
        _held["quiet"] = False
        if own:
            os.close(fd)
        else:
            fcntl.flock(fd, fcntl.LOCK_SH)
