"""The test machine shared by the suite's workers, and a quiet turn on it.

Tests that time real multi-process runs (an induced straggler, a no_sync pair) compare
steps measured minutes apart; on 2 cores the other xdist worker's test moves them by
tens of percent (a no_sync pair predicted 170 against 112 ms measured in a loaded suite,
72 against 70 alone). Every test holds a shared lock while it runs (conftest's autouse
fixture), and ``quiet()`` turns it into an exclusive one: the capture inside waits for
the other worker's current test to end and starts no new one until it is done.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

_held: dict = {}  # "fd": the file held shared for the running test (hold())


def lock_path(base: Path) -> Path:
    """The suite's lock file: beside every worker's temporary folder."""
    return base / "machine.lock"


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
    fd = _held.get("fd")
    path = _held.get("path") or os.environ.get("OVERLAPSCOPE_TEST_LOCK")
    if fd is None and not path:
        yield
        return
    own = fd is None
    if own:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # from shared: converted (flock drops it, then waits)
    try:
        yield
    finally:
        if own:
            os.close(fd)
        else:
            fcntl.flock(fd, fcntl.LOCK_SH)
