"""Faults while storing: a kill -9 at any moment of an ingest, a full disk, a read-only
disk. The catalog always opens and holds either the whole run or nothing; no decode
worker outlives a killed ingest; the error is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from builders import GpuTrace, write
from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog, runstore

pytestmark = pytest.mark.slow

RANKS = 8


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory):
    """An 8-rank run big enough to take a second or two to ingest on 2 cores."""
    folder = tmp_path_factory.mktemp("eight")
    for r in range(RANKS):
        t = GpuTrace(rank=r, world_size=RANKS)
        for s in range(1, 6):
            base = s * 20_000
            t.step(s, base, 19_000)
            for k in range(600):
                t.kernel(base + 30 * k, 20, step=s)
            t.comm(base + 18_000, 500, step=s)
        write(t, folder / f"rank-{r}.json", gz=True)
    return folder


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (from /proc)."""
    out, stack = set(), [pid]
    while stack:
        p = stack.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = {int(x) for x in f.read().split()}
                stack.extend(kids - out)
                out |= kids
        except OSError:
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ingest_cmd(db, folder, name):
    return [sys.executable, "-m", "overlapscope.cli", "ingest", str(folder), "--run", name, "--db", str(db),
            "--workers", "2"]


def _check_whole_or_nothing(db, name: str) -> int:
    """The catalog opens; a run named ``name`` is there whole (every rank, its headline,
    its findings) or not at all. Returns how many such runs it holds."""
    con = runs.open_catalog(db, read_only=True)
    try:
        named = [r for r in catalog.runs(con) if r["name"] == name]
        for r in named:
            assert r["ranks"] == RANKS and r["headline"] is not None
            from overlapscope.analyzer.checklist import RULES

            stored = con.execute("SELECT count(*) FROM findings WHERE run_id = ?", [r["run_id"]]).fetchone()[0]
            assert stored == len(RULES)
            assert con.execute("SELECT count(DISTINCT rank) FROM steps WHERE run_id = ?",
                               [r["run_id"]]).fetchone()[0] == RANKS
        return len(named)
    finally:
        con.close()


POINTS = 8  # kills spread over a whole ingest (20 of them took 37 s of a 13-minute suite)


def test_kill_at_eight_points_of_an_ingest(tmp_path, eight_ranks):
    db = tmp_path / "catalog.duckdb"
    # how long a whole ingest takes here
    start = time.perf_counter()
    subprocess.run(_ingest_cmd(db, eight_ranks, "whole"), check=True, capture_output=True, timeout=300)
    whole = time.perf_counter() - start
    assert _check_whole_or_nothing(db, "whole") == 1
    stored = 0
    for i in range(POINTS):
        name = f"killed-{i}"
        proc = subprocess.Popen(_ingest_cmd(db, eight_ranks, name), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(whole * (i + 0.5) / POINTS)
        workers = _children(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 1.0
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = [w for w in workers if _alive(w)]
        assert left == [], f"kill {i}: workers {left} outlived the ingest by a second"
        stored += _check_whole_or_nothing(db, name)
    # the early kills store nothing; the very last ones may have committed
    assert stored < POINTS
    assert _check_whole_or_nothing(db, "whole") == 1
    # the next ingest sweeps what the killed ones left in the run store: only committed runs' folders stay
    subprocess.run(_ingest_cmd(db, eight_ranks, "after"), check=True, capture_output=True, timeout=300)
    con = runs.open_catalog(db, read_only=True)
    named = {r[0] for r in con.execute("SELECT data_dir FROM runs").fetchall()}
    con.close()
    assert {p.name for p in runstore.store_dir(db).iterdir()} == named


def _mount_tmpfs(path, size: str, read_only: bool = False) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir(exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True).returncode == 0


def _umount(path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True)


def test_a_full_disk_is_one_line_and_stores_nothing(tmp_path, eight_ranks):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1m"):  # the run's files take about 1.5 MB
        pytest.skip("needs root to mount a small tmpfs")
    try:
        db = disk / "catalog.duckdb"
        out = subprocess.run(_ingest_cmd(db, eight_ranks, "too-big"), capture_output=True, text=True, timeout=300)
        assert out.returncode == 2, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
        assert str(db) in out.stderr and "nothing was stored" in out.stderr
        if db.exists():
            assert _check_whole_or_nothing(db, "too-big") == 0
    finally:
        _umount(disk)


def test_a_read_only_disk_is_one_line_and_reads_still_work(tmp_path, eight_ranks):
    disk = tmp_path / "ro"
    if not _mount_tmpfs(disk, "64m"):
        pytest.skip("needs root to mount a tmpfs")
    try:
        db = disk / "catalog.duckdb"
        subprocess.run(_ingest_cmd(db, eight_ranks, "first"), check=True, capture_output=True, timeout=300)
        assert subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True).returncode == 0
        out = subprocess.run(_ingest_cmd(db, eight_ranks, "second"), capture_output=True, text=True, timeout=300)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "Traceback" not in out.stderr and str(db) in out.stderr
        history = subprocess.run([sys.executable, "-m", "overlapscope.cli", "history", "--db", str(db)],
                                 capture_output=True, text=True, timeout=60)
        assert history.returncode == 0 and "first" in history.stdout, history.stderr
    finally:
        _umount(disk)
