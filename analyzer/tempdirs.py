"""Temporary folders that a killed process does not leave behind.

A load, a push or an export read back writes into folders under the system's temporary
folder (``overlapscope-<kind>-*``: an export split into ranks, the ranks' results, the
reduce's spill, a push's body). ``make`` creates one and holds an advisory lock on a file
inside it for as long as the process (or a worker it forked) lives: the kernel releases
it when the last holder dies, whatever killed it. ``sweep`` removes the folders whose
lock nobody holds; every load and the server's start run it, so a ``kill -9`` leaves a
folder only until the next one. The run store's staging folders have the same lock
(``store/runstore.py``).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

PREFIX = "overlapscope-"
OWNER_FILE = ".owner"
# An unlocked lock file this young may be one whose flock is about to come (make's mkdtemp,
# open and flock are three steps).
LOCK_GRACE_S = 2.0

_held: dict[str, int] = {}  # folder -> the descriptor that holds its lock
_at_exit: list[str] = []  # folders of ``make(until_exit=True)``
_owner_pid = os.getpid()  # a forked worker inherits the lists, not the folders


def make(kind: str, until_exit: bool = False) -> str:
    """A new folder ``<tmp>/overlapscope-<kind>-XXXX``, locked until ``remove`` or the process
    ends (``until_exit``: removed then, by this process, unless ``remove`` came first)."""
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-")
    fd = os.open(os.path.join(folder, OWNER_FILE), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _held[folder] = fd
    if until_exit:
        _at_exit.append(folder)
    return folder


@atexit.register
def _remove_at_exit() -> None:
    if os.getpid() != _owner_pid:  # a forked worker's exit: its parent still uses them
        return
    for folder in _at_exit:
        remove(folder)


def held() -> list[str]:
    """The folders this process made and has not removed."""
    return sorted(_held)


def remove(folder: str) -> None:
    """Release and delete a folder of ``make``."""
    fd = _held.pop(folder, None)
    if fd is not None:
        os.close(fd)
    shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def folder(kind: str) -> Iterator[str]:
    """``make`` for the block's length."""
    path = make(kind)
    try:
        yield path
    finally:
        remove(path)


def _owned(path: str) -> bool:
    """Whether a live process holds the folder's lock; a folder without one (not made by
    ``make``: someone else's, or an older version's) is never judged ownerless."""
    try:
        fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDWR)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return time.time() - os.fstat(fd).st_mtime < LOCK_GRACE_S
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def sweep(root: str | None = None) -> list[str]:
    """Remove the ``overlapscope-*`` folders under ``root`` (the temporary folder) that no live
    process owns; the names removed. Cheap: one listing of the folder."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(PREFIX) or entry.path in _held:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not _owned(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
    return removed
