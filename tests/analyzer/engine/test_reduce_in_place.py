"""Reduce in place: each rank of a real 2-rank gloo run writes its per-rank tables next to
its trace at the end of profiling (the tracer's reduce_in_place), and ingest collects
them instead of decoding the traces: proven by traces swapped for garbage of the same
size and modification time, which ingest still stores, with the analyses of the
original traces. A trace that changed after its reduction is decoded again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import example_runner
from overlapscope.cli import main

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reduced_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("inplace") / "run"
    example_runner.check(["--parallel", "ddp", "--nproc", "2", "--steps", "4", "--wait-steps", "1",
                          "--warmup-steps", "1", "--active-steps", "2", "--model-size", "tiny", "--backend", "gloo",
                          "--no-calibrate", "--reduce-in-place", "--out", str(out)], Path(f"{out}.stderr.txt"))
    return out


def _json(capsys, argv) -> dict:
    capsys.readouterr()
    assert main(argv) == 0, argv
    return json.loads(capsys.readouterr().out)


def _garble(path) -> None:
    """Replace a file's bytes by garbage of the same size, keeping its modification time."""
    info = os.stat(path)
    path.write_bytes(b"\0" * info.st_size)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_each_rank_reduced_itself_and_ingest_only_collects(reduced_run, tmp_path, capsys):
    traces = sorted(reduced_run.glob("rank-*.pt.trace.json.gz"))
    assert len(traces) == 2 and all((t.parent / (t.name + ".overlapscope") / "stamp.json").is_file() for t in traces)
    pristine = tmp_path / "pristine"
    shutil.copytree(reduced_run, pristine, ignore=shutil.ignore_patterns("*.overlapscope"))
    db = str(tmp_path / "catalog.duckdb")
    expected = {c: _json(capsys, [c, str(pristine), "--json"]) for c in ("analyze", "buckets", "diagnose")}
    for t in traces:
        _garble(t)
    _json(capsys, ["ingest", str(reduced_run), "--run", "collected", "--db", db, "--json"])
    for command, fresh in expected.items():
        stored = _json(capsys, [command, "--run", "collected", "--db", db, "--json"])
        assert {k: v for k, v in stored.items() if k != "run"} == {k: v for k, v in fresh.items() if k != "run"}


def test_a_trace_changed_after_its_reduction_is_decoded_again(reduced_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(reduced_run, copy)  # copies keep the reduced tables but not the traces' times
    trace = copy / "rank-0.pt.trace.json.gz"
    os.utime(trace, ns=(0, 0))
    trace.write_bytes(b"garbage")  # another size and time: the stamp no longer matches
    assert main(["ingest", str(copy), "--run", "changed", "--db", str(tmp_path / "c.duckdb")]) == 2
    assert str(trace) in capsys.readouterr().err
