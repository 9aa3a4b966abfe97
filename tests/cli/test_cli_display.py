"""The CLI's text output reads at a glance: it fits 100 columns unless ``--wide``, long tables
keep the rows that matter (``--top``) and say how many they left out."""

from __future__ import annotations

import re

import pytest

from overlapscope.cli import main
from builders import GpuTrace, write
from conftest import SAMPLES


def _lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("command", ["analyze", "buckets", "diagnose", "whatif"])
@pytest.mark.parametrize("sample", ["hsdp_2x2", "ddp_accum_sync"])
def test_output_fits_100_columns(command, sample, capsys):
    argv = [command, str(SAMPLES / sample)] + (["--all"] if command == "diagnose" else [])
    assert main(argv) == 0
    lines = _lines(capsys)
    assert lines and max(len(line) for line in lines) <= 100, max(lines, key=len)


def test_wide_shows_every_column(capsys):
    assert main(["buckets", str(SAMPLES / "hsdp_2x2")]) == 0
    narrow = "\n".join(_lines(capsys))
    assert "left out to fit 100 columns; --wide shows them" in narrow and "busbw_GB/s  " not in narrow
    assert main(["buckets", str(SAMPLES / "hsdp_2x2"), "--wide"]) == 0
    wide = _lines(capsys)
    assert any("busbw_GB/s" in line and "inferred" in line for line in wide)
    assert max(len(line) for line in wide) > 100


def test_top_keeps_the_most_exposed_steps(tmp_path, capsys):
    # 30 steps, step s exposing s us of comm: --top 5 keeps steps 26..30 in their order
    t = GpuTrace().step(1, 0, 100)
    for s in range(1, 31):
        start = 100 * (s - 1)
        if s > 1:
            t.step(s, start, 100)
        t.kernel(start, 50, step=s).comm(start + 50 - 10, 10 + s, step=s)
    path = write(t, tmp_path / "rank-0.json")
    assert main(["analyze", path, "--top", "5"]) == 0
    out = _lines(capsys)
    start = out.index("per step")
    rows = out[start + 3:start + 8]
    assert [int(r.split()[1]) for r in rows] == [26, 27, 28, 29, 30]
    assert out[start + 8] == "(25 more steps not shown: the 5 with the most exposed comm are; --top 0 shows all)"
    assert main(["analyze", path, "--top", "0"]) == 0
    out = _lines(capsys)
    assert not any("more steps not shown" in line for line in out)
    assert main(["analyze", path]) == 0  # the default: a screenful
    assert any(line.startswith("(10 more steps not shown") for line in _lines(capsys))


def _ingest_stderr(tmp_path, name: str, *extra: str, terminal: bool) -> str:
    """``overlapscope ingest`` of a 2-rank sample in its own process, stderr a terminal (a pty)
    or a pipe; what it wrote on stderr."""
    import os
    import pty
    import subprocess
    import sys

    argv = [sys.executable, "-m", "overlapscope.cli", "ingest", str(SAMPLES / "ddp"), "--run", name,
            "--db", str(tmp_path / "catalog.duckdb"), "--workers", "1", *extra]
    if not terminal:
        done = subprocess.run(argv, capture_output=True, timeout=240)
        assert done.returncode == 0, done.stderr
        return done.stderr.decode()
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=240) == 0
    proc.stdout.close()
    return b"".join(chunks).decode()


def test_ingest_shows_progress_on_a_terminal_only(tmp_path):
    shown = _ingest_stderr(tmp_path, "on-a-terminal", terminal=True)
    # one worker decodes both ranks as one group: the line reaches 2/2, then the run is stored
    assert 0 <= shown.index("decoding rank 2/2") < shown.index("storing run on-a-terminal")
    assert _ingest_stderr(tmp_path, "piped", terminal=False) == ""
    assert _ingest_stderr(tmp_path, "as-json", "--json", terminal=True) == ""


def test_text_left_numbers_right_and_empty_columns_left_out():
    from overlapscope.cli.tables import table

    rows = [{"name": "a", "n": 1, "hta": None}, {"name": "bbb", "n": 22, "hta": None}]
    assert table(rows, [("name", "name"), ("n", "n"), ("hta", "hta_%")]).splitlines() == [
        "name   n", "----  --", "a      1", "bbb   22", "(hta_%: no value in any row, left out)"]


def test_history_keeps_the_metrics_a_team_tracks(tmp_path, monkeypatch, capsys):
    """In 100 columns: exposed comm and overlap before the run's facts, the time to the minute,
    the commit tag."""
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "c.duckdb"))
    assert main(["ingest", str(SAMPLES / "ddp"), "--run", "a-team-job-with-a-long-ci-name", "--tag",
                 "commit=0123456789abcdef", "--json"]) == 0
    capsys.readouterr()
    assert main(["history"]) == 0
    lines = _lines(capsys)
    header, row = lines[0], lines[2]
    assert header.split()[:6] == ["id", "name", "created", "(UTC)", "exposed_ms", "overlap_%"]
    assert re.search(r" \d{4}-\d\d-\d\d \d\d:\d\d  ", row) and "0123456789ab " in row + " "
    assert max(len(line) for line in lines) <= 100
