"""``runs.apart.prepare``: a run prepared in a child process that exits. It hands back what
``runs.prepare`` would (the same headline and findings), raises the same errors, reports
progress here, and its staging folder is this process's: no sweep takes it before the
commit, and a child killed midway leaves nothing behind."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

from conftest import SAMPLES
from overlapscope.analyzer import runs
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.runs import apart
from overlapscope.analyzer.store import runstore


def _staging(db) -> list[str]:
    store = runstore.store_dir(db)
    return sorted(p.name for p in store.iterdir()) if store.is_dir() else []


def test_a_run_prepared_apart_is_the_run_prepared_here(tmp_path):
    db = tmp_path / "catalog.duckdb"
    reported = []
    apart_run = apart.prepare(db, [str(SAMPLES / "ddp")], on_decoded=lambda done, total: reported.append((done, total)))
    here = runs.prepare(db, [str(SAMPLES / "ddp")], workers=1)
    try:
        assert reported == [(1, 2), (2, 2)]  # each rank as the child maps it, called in this process
        assert apart_run.computed["headline"] == here.computed["headline"]
        assert apart_run.computed["findings"] == here.computed["findings"]
        assert [r.meta["rank"] for r in apart_run.results] == [0, 1]
        assert apart_run.source == here.source
    finally:
        here.discard()
    # made by the child, locked by this process: a writer's sweep leaves it, and it commits whole
    assert runstore.sweep_staging(db) == []
    con = runs.open_catalog(db)
    try:
        run_id = runs.commit(con, apart_run, "apart")
        assert con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0] > 0
    finally:
        con.close()
    assert not any(name.startswith(runstore.STAGING_PREFIX) for name in _staging(db))


def test_the_childs_errors_are_raised_here_as_they_are(tmp_path):
    db = tmp_path / "catalog.duckdb"
    with pytest.raises(InputError, match="no such file"):
        apart.prepare(db, [str(tmp_path / "missing.json")])
    bad = tmp_path / "rank-0.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": 7}]}')
    with pytest.raises(InputError) as err:
        apart.prepare(db, [str(bad)])
    assert str(err.value).startswith(str(bad)) and "\n" not in str(err.value)
    assert _staging(db) == []  # each refusal's staging folder went (and the store it made)


def test_a_child_killed_midway_leaves_nothing(tmp_path):
    db = tmp_path / "catalog.duckdb"

    def kill_the_child(done: int, total: int) -> None:
        for child in multiprocessing.active_children():
            if child.name == "overlapscope-prepare":
                os.kill(child.pid, signal.SIGKILL)

    with pytest.raises(apart.ChildFailed, match=r"ended without an answer \(exit code -9\)"):
        apart.prepare(db, [str(SAMPLES / "ddp")], on_decoded=kill_the_child)
    assert _staging(db) == []


def test_a_long_temporary_folder_does_not_stop_the_fork_server(tmp_path):
    """The fork server's socket lives under the temporary folder, and a Unix socket's path
    has at most 107 bytes: with a TMPDIR of 90 bytes its start raised "AF_UNIX path too
    long" and a server did not start. In a process of its own (the fork server is one per
    process), a run prepared apart with such a TMPDIR."""
    import os
    import subprocess
    import sys

    long_dir = tmp_path / ("t" * max(1, 90 - len(str(tmp_path)) - 1))
    long_dir.mkdir()
    assert len(str(long_dir)) >= 90
    script = ("import sys, tempfile; from overlapscope.analyzer.runs import apart; "
              "p = apart.prepare(sys.argv[1], [sys.argv[2]]); print(len(p.results)); p.discard()")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "c.duckdb"), str(SAMPLES / "ddp")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(long_dir)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "2"
