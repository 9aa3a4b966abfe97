"""Freed memory given back to the system once a trace's scan is gone, before its store fills
(``decode.decode_source`` after its own scan; ``engine/one.py`` after the scan it was handed).

The scanner's buffers and the decode's columns come from the C library's allocator;
DuckDB's store and Arrow's columns from allocators of their own, which cannot reuse what
glibc keeps. glibc keeps a freed block resident when it lies inside its heap rather than
at its top, and whether the scan's blocks landed there depends on the order of the
process's allocations (glibc maps a large block only until a mapped one is freed: then
its threshold rises to that size). A one-rank analyze of a 189 MB trace peaked 181 MiB
above its imports in about one run of four, 132 MiB in the others (measured); with the
heap trimmed after the decode, 131-134 MiB in every run, for 4-6 ms. Holding glibc's
threshold fixed instead made the same run 20-24 % slower: each large array then came
from freshly mapped pages, zeroed on first touch.
"""

from __future__ import annotations

import ctypes

try:
    _malloc_trim = ctypes.CDLL(None).malloc_trim  # glibc's
except (AttributeError, OSError):  # another C library: nothing to do
    _malloc_trim = None


def release_freed() -> None:
    """Return the heap's free pages to the system (glibc's ``malloc_trim``; elsewhere nothing).
    It costs a pass over the free lists: 0.1 ms after a 47 MB trace, 5 ms after 189 MB."""
    if _malloc_trim is not None:
        _malloc_trim(0)
