"""Bad input is normal input: one line that names the file and the problem, exit 2,
no traceback unless --debug, nothing stored."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zipfile

import pytest

from overlapscope.cli import main
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.engine.load import load
from overlapscope.analyzer.store import database as store
from builders import GpuTrace, write


def good(tmp_path, rank=0, name=None, world_size=4):
    return write(GpuTrace(rank=rank, world_size=world_size).step(1, 0, 100).kernel(0, 50, step=1).comm(20, 40, step=1),
                 tmp_path / (name or f"rank-{rank}.json"))


def cli_error(capsys, *args):
    code = main(["analyze", *args])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_truncated_gzip(tmp_path, capsys):
    data = gzip.compress(json.dumps(GpuTrace().step(1, 0, 1).to_json()).encode())
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(data[: len(data) // 2])
    line = cli_error(capsys, str(path))
    assert str(path) in line and "gzip" in line


def test_invalid_json(tmp_path, capsys):
    path = tmp_path / "rank-0.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1,')
    line = cli_error(capsys, str(path))
    assert str(path) in line and "invalid JSON" in line


@pytest.mark.parametrize("content", ['{"hello": 1}', "[1, 2, 3]", '{"traceEvents": 5}', '"text"',
                                     '{"traceEvents": []}', '{"traceEvents": [{"ph": "X", "ts": "soon"}]}'])
def test_json_that_is_not_a_kineto_trace(tmp_path, capsys, content):
    path = tmp_path / "rank-0.json"
    path.write_text(content)
    line = cli_error(capsys, str(path))
    assert str(path) in line and "not a Kineto trace" in line


def test_empty_file(tmp_path, capsys):
    path = tmp_path / "rank-0.json"
    path.write_bytes(b"")
    line = cli_error(capsys, str(path))
    assert str(path) in line and "empty file" in line


def test_no_rank_anywhere(tmp_path, capsys):
    t = GpuTrace().step(1, 0, 100).kernel(0, 10, step=1).to_json()
    del t["distributedInfo"]
    path = write(t, tmp_path / "trace.json")
    line = cli_error(capsys, path)
    assert path in line and "no rank" in line


def test_rank_from_the_file_name(tmp_path):
    for name, rank in [("rank-3.json", 3), ("trace_rank7.json", 7), ("worker5.pt.trace.json", 5)]:
        t = GpuTrace().step(1, 0, 100).kernel(0, 10, step=1).to_json()
        del t["distributedInfo"]
        loaded = load([write(t, tmp_path / name)], workers=1)
        assert loaded.con.execute("SELECT rank, rank_source FROM ranks").fetchall() == [(rank, "file name")]


def test_two_files_claim_one_rank(tmp_path, capsys):
    a = good(tmp_path, 1, "a.json")
    b = good(tmp_path, 1, "b.json")
    line = cli_error(capsys, a, b)
    assert "rank 1" in line and a in line and b in line


def test_missing_path(tmp_path, capsys):
    line = cli_error(capsys, str(tmp_path / "nope.json"))
    assert "no such file" in line


def test_directory_without_traces(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    line = cli_error(capsys, str(tmp_path))
    assert str(tmp_path) in line and "no trace files" in line


def test_bad_zip(tmp_path, capsys):
    path = tmp_path / "run.zip"
    path.write_bytes(b"PK\x03\x04 this is not a zip")
    line = cli_error(capsys, str(path))
    assert str(path) in line


def test_reference_files_without_a_rank(reference_dir, capsys):
    for name in ("rank_not_found.json.gz", "distributed_info_not_found.json.gz"):
        path = str(reference_dir / "malformed" / name)
        line = cli_error(capsys, path)
        assert path in line and "no rank" in line


def test_bad_file_in_a_parallel_load_stores_nothing(tmp_path):
    good(tmp_path, 0)
    good(tmp_path, 1)
    (tmp_path / "rank-2.json").write_text("{not json")
    con = store.connect()
    with pytest.raises(InputError, match="rank-2.json"):
        load([str(tmp_path)], con=con, workers=2)
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM events").fetchone() == (0,)


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "rank-0.json"
    path.write_text("{oops")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    plain = subprocess.run([sys.executable, "-m", "overlapscope.cli", "analyze", str(path)],
                           capture_output=True, text=True, env=env)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.count("\n") == 1 and str(path) in plain.stderr
    debug = subprocess.run([sys.executable, "-m", "overlapscope.cli", "--debug", "analyze", str(path)],
                           capture_output=True, text=True, env=env)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_zip_and_directory_inputs(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    paths = [good(d, r) for r in range(3)]
    z = tmp_path / "run.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for p in paths:
            zf.write(p, arcname=f"traces/{os.path.basename(p)}")
    from overlapscope.analyzer.api import analyze
    by_dir = analyze([str(d)], workers=2)
    by_zip = analyze([str(z)], workers=1)
    assert [r["rank"] for r in by_dir["ranks"]] == [0, 1, 2]
    assert by_dir["ranks"] == by_zip["ranks"]
    assert by_zip["run"]["files"][0].endswith("run.zip:traces/rank-0.json")


def test_rank_outside_the_world_size(tmp_path, capsys):
    path = good(tmp_path, 5, world_size=4)
    line = cli_error(capsys, path)
    assert "rank 5" in line and "world size 4" in line
