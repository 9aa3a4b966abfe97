"""Columns held in a mapped file instead of the process's heap: a run's collectives.

A run's collectives' columns grow with its ranks (171 bytes a collective: 337 MiB for the
2.07 million of 1,024 reference ranks), and each phase of an analysis reads a few of them.
Held in the heap, all of them stay resident from the reduce to the end of the derive.
Mapped from one file, a phase's pages are resident only while it reads them, and
``release`` hands them back to the kernel. The next reader faults them in again from the
page cache, which costs a few ms per phase. Under memory pressure the kernel writes those
pages back to the file and drops them: they are never swapped and never count against the
process.

The file sits under the temporary folder and is unlinked as soon as it is mapped, so it goes
with the mapping, however the process ends. Its blocks are reserved up front
(``posix_fallocate``): with no room there, the caller keeps its columns in the heap, and a
full disk never shows up later as a SIGBUS on a write into the map. The mapping is shared
(``MAP_SHARED``): a private mapping's written pages are anonymous memory, and dropping
them would drop the data.
"""

from __future__ import annotations

import mmap
import os
import tempfile

PAGE_BYTES = mmap.PAGESIZE
_ITEM_BYTES = {"q": 8, "d": 8, "I": 4, "H": 2, "b": 1}


class Mapped:
    """One file mapped shared, carved into typed columns (``memoryview`` casts, one page-aligned
    stretch each): read and written like ``array.array`` columns, viewed by NumPy without a
    copy (``numpy.frombuffer``)."""

    __slots__ = ("_map", "columns")

    def __init__(self, mapping: mmap.mmap, columns: dict):
        self._map = mapping
        self.columns = columns

    def release(self) -> None:
        """Drop the mapping's resident pages from this process (what was written stays in the
        file and the page cache; the next read faults it back in)."""
        if hasattr(self._map, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)


def columns(typecodes: dict[str, str], rows: int) -> Mapped | None:
    """Columns of ``rows`` values each (by name, ``array`` typecodes q, d, I, H, b), zeroed, in one
    new mapped file under the temporary folder; None where that file cannot be made (no room,
    no temporary folder, no ``mmap`` of files): the caller then holds them in its heap."""
    offsets, size = {}, 0
    for name, code in typecodes.items():
        offsets[name] = size
        size += -(-rows * _ITEM_BYTES[code] // PAGE_BYTES) * PAGE_BYTES
    if size == 0:
        return None
    try:
        with tempfile.TemporaryFile(prefix="overlapscope-columns-") as f:  # unlinked at once (Linux)
            os.posix_fallocate(f.fileno(), 0, size)
            mapping = mmap.mmap(f.fileno(), size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, AttributeError, ValueError):
        return None
    whole = memoryview(mapping)
    made = {name: whole[offsets[name]:offsets[name] + rows * _ITEM_BYTES[code]].cast(code)
            for name, code in typecodes.items()}
    whole.release()
    return Mapped(mapping, made)
