"""A run's collectives' columns in a mapped file (``measure.mapped``): what is written reads
back after the pages are released, the released pages leave the process's resident memory,
and a run analysed with its columns mapped stores the same documents, to the byte, as with
its columns in the heap (the samples hold too few collectives to be mapped by default:
``MAPPED_ROWS`` is lowered to 0 here)."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from conftest import SAMPLES
from overlapscope.analyzer import api, runs
from overlapscope.analyzer.measure import collectives, mapped
from overlapscope.analyzer.predict import changes
from overlapscope.analyzer.store import runstore
from overlapscope.analyzer.store.runinfo import run_info

PAGE = os.sysconf("SC_PAGE_SIZE")


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def test_written_columns_read_back_after_release_and_leave_resident_memory():
    rows = 4 * 2 ** 20  # 32 MiB a column of 8 bytes
    made = mapped.columns({"a": "q", "b": "d", "t": "H", "f": "b"}, rows)
    assert made is not None
    a = np.frombuffer(made.columns["a"], np.int64)
    b = np.frombuffer(made.columns["b"], np.float64)
    assert len(a) == rows and not a.any()  # zeroed
    made.release()  # reading the zeros made a's pages resident
    before = _resident_bytes()
    a[:] = np.arange(rows) * 7 - 3
    b[:] = 0.5
    made.columns["t"][rows - 1] = 65_535
    made.columns["f"][0] = -1
    touched = _resident_bytes()
    assert touched - before >= 60 * 2 ** 20  # both columns' pages are the process's now
    made.release()
    released = _resident_bytes()
    assert touched - released >= 60 * 2 ** 20, (before, touched, released)
    # the data stayed in the file: read back through the same views and through the memoryviews
    assert int(a[12345]) == 12345 * 7 - 3 and made.columns["a"][rows - 1] == (rows - 1) * 7 - 3
    assert float(b.sum()) == rows * 0.5
    assert made.columns["t"][rows - 1] == 65_535 and made.columns["f"][0] == -1
    assert type(made.columns["a"][0]) is int and type(made.columns["b"][0]) is float  # as array.array reads


def test_no_room_for_the_file_means_columns_in_the_heap(monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mapped.os, "posix_fallocate", full)
    assert mapped.columns({"a": "q"}, 1000) is None


SAMPLES_MAPPED = ("ddp_tiny_buckets", "fsdp_per_block", "ddp_straggler")  # buckets, units, waits
DOCUMENTS = ("buckets", "diagnose", "whatif")


def _ingest_all(db, monkeypatch, mapped_rows: int) -> tuple[dict, int]:
    """Each sample ingested into catalog ``db`` with ``MAPPED_ROWS`` at ``mapped_rows``: its
    stored documents and figures, its what-if with a change; and how many column files were mapped."""
    made = []
    real = mapped.columns

    def counted(typecodes, rows):
        got = real(typecodes, rows)
        made.append(got)
        return got

    monkeypatch.setattr(collectives, "MAPPED_ROWS", mapped_rows)
    monkeypatch.setattr(collectives.mapped, "columns", counted)
    out = {}
    con = runs.open_catalog(db)
    try:
        for name in SAMPLES_MAPPED:
            run_id = runs.ingest(con, [str(SAMPLES / name)], f"m/{name}", workers=1)
            info = run_info(con, run_id)
            for doc in DOCUMENTS:
                out[name, doc] = b"".join(runstore.document_chunks(info.run_dir, doc))
            out[name, "figures"] = api.stored_figures(con, run_id)
            out[name, "findings"] = api.stored_findings(con, run_id)
            out[name, "bandwidth 2x"] = api.whatif_run(con, run_id, changes.read({"bandwidth": "2x"}))
    finally:
        con.close()
    monkeypatch.undo()
    return out, sum(m is not None for m in made)


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="sample_traces/ absent")
def test_mapped_columns_store_the_same_documents_as_columns_in_the_heap(tmp_path, monkeypatch):
    heap, mapped_heap = _ingest_all(tmp_path / "heap.duckdb", monkeypatch, collectives.MAPPED_ROWS)
    in_file, mapped_file = _ingest_all(tmp_path / "mapped.duckdb", monkeypatch, 0)
    assert mapped_heap == 0 and mapped_file == len(SAMPLES_MAPPED)
    assert heap.keys() == in_file.keys()
    for key in heap:
        assert heap[key] == in_file[key], key
