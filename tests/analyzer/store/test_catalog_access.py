"""Sharing the catalog: one writer thread in a server, bounded waits for a file another
process holds, and the API's tokens."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from overlapscope.analyzer import runs
from overlapscope.analyzer.errors import CatalogBusy, UsageError
from overlapscope.analyzer.store import access, catalog
from overlapscope.server import auth
from conftest import SAMPLES

HOLD = ("import duckdb, sys; con = duckdb.connect(sys.argv[1]); print('locked', flush=True); "
        "sys.stdin.readline()")


def _holder(path) -> subprocess.Popen:
    """Another process holding the catalog's write lock until a line arrives on its stdin (or it is killed)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _cli(*args, env_extra=None, timeout=120):
    import os

    from test_api import COMMAND

    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env_extra or {})})


@pytest.mark.slow
def test_ingest_waits_for_a_lock_held_for_seconds(tmp_path):
    """An ingest that finds the catalog held says so once and waits; released, it stores its run
    (the holder lets go only once the ingest said it waits: no race with the decode's time)."""
    from test_api import COMMAND

    db = tmp_path / "catalog.duckdb"
    runs.open_catalog(db).close()
    holder = _holder(db)
    ingest = None
    try:
        ingest = subprocess.Popen([*COMMAND, "ingest", str(SAMPLES / "ddp"), "--run", "waited", "--db", str(db)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = ingest.stderr.readline()
        assert "in use by another process" in first and "waiting up to 120 s" in first, first + ingest.stderr.read()
        assert f"process {holder.pid})" in first and "IO Error" not in first and "duckdb.org" not in first, first
        holder.stdin.write("let go\n")
        holder.stdin.flush()
        assert holder.wait(60) == 0
        _, err = ingest.communicate(timeout=120)
        assert ingest.returncode == 0, err
    finally:
        for proc in (holder, ingest):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    con = runs.open_catalog(db, read_only=True)
    assert [r["name"] for r in catalog.runs(con)] == ["waited"]
    con.close()


@pytest.mark.slow
def test_the_wait_is_bounded_and_says_so(tmp_path):
    db = tmp_path / "catalog.duckdb"
    runs.open_catalog(db).close()
    holder = _holder(db)
    try:
        done = _cli("ingest", str(SAMPLES / "ddp"), "--run", "late", "--db", str(db),
                    env_extra={"OVERLAPSCOPE_CATALOG_WAIT_S": "1"})
        assert done.returncode == 2
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("overlapscope: error: ") and "still held after waiting 1 s" in last
        history = _cli("history", "--db", str(db), env_extra={"OVERLAPSCOPE_CATALOG_WAIT_S": "0"})
        assert history.returncode == 2 and history.stderr.count("\n") == 1
    finally:
        holder.kill()
        holder.wait()


def test_one_writer_thread_stores_concurrent_writes_whole(tmp_path):
    """Eight threads store runs at once through the shared catalog: all land with distinct ids,
    and readers in between see only whole runs."""
    db = tmp_path / "catalog.duckdb"
    shared = access.SharedCatalog(str(db), keep_open_s=5.0)
    prepared = [runs.prepare(db, [str(SAMPLES / "ddp")], workers=1) for _ in range(8)]
    ids, partial = [], []

    def store(i: int) -> None:
        ids.append(shared.write(lambda con: runs.commit(con, prepared[i], f"run-{i}")))

    def read() -> None:
        for _ in range(20):
            with shared.read() as con:
                partial.extend(r for r in catalog.runs(con) if r["ranks"] != 2 or r["headline"] is None)

    threads = [threading.Thread(target=store, args=(i,)) for i in range(8)] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(ids) == list(range(1, 9)) and partial == []
    with shared.read() as con:
        assert sorted(r["name"] for r in catalog.runs(con)) == sorted(f"run-{i}" for i in range(8))
    assert shared.is_open, "kept open between uses"
    shared.stop()
    assert not shared.is_open
    with pytest.raises(CatalogBusy, match="stopping"):
        shared.submit(lambda con: None)


def test_a_write_that_fails_stores_nothing_and_the_writer_goes_on(tmp_path):
    shared = access.SharedCatalog(str(tmp_path / "catalog.duckdb"))

    def half(con):
        con.execute("BEGIN TRANSACTION")
        con.execute("INSERT INTO runs (run_id, name) VALUES (1, 'half')")
        raise ValueError("stopped half way")

    with pytest.raises(ValueError, match="half way"):
        shared.write(half)
    assert shared.write(lambda con: con.execute("SELECT count(*) FROM runs").fetchone()[0]) == 0
    assert not shared.is_open, "keep_open_s=0: closed after each use"


def test_an_idle_server_lets_another_process_in(tmp_path):
    db = tmp_path / "catalog.duckdb"
    shared = access.SharedCatalog(str(db), keep_open_s=0.3)
    shared.write(lambda con: None)
    assert shared.is_open
    time.sleep(0.8)
    assert not shared.is_open
    other = subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).close()", str(db)],
                           capture_output=True, timeout=60)
    assert other.returncode == 0, other.stderr


# A prune (the real command) that stops inside its swap window (the old file closed, the
# compacted copy not yet renamed over it) until a line arrives on its stdin.
PAUSED_PRUNE = """
import sys
from overlapscope.analyzer.store import retention
from overlapscope.cli import main

real_swap = retention.swap

def paused_swap(compacted, path):
    print("in the window", flush=True)
    sys.stdin.readline()
    return real_swap(compacted, path)

retention.swap = paused_swap
sys.exit(main(["prune", "--keep-last", "0", "--db", sys.argv[1], "--json"]))
"""


@pytest.mark.slow
def test_a_writer_never_commits_into_the_file_that_prune_replaces(tmp_path):
    """Two real processes: prune stops between closing the catalog and renaming its compacted
    copy over it (DuckDB's lock is free then); an ingest that wants the file in that window
    waits, says so, and stores its run in the new file once prune is done: nothing is lost."""
    db = tmp_path / "catalog.duckdb"
    con = runs.open_catalog(db)
    for _ in range(2):
        runs.ingest(con, [str(SAMPLES / "ddp")], "old")
    con.close()
    prune = subprocess.Popen([sys.executable, "-c", PAUSED_PRUNE, str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ingest = None
    try:
        assert prune.stdout.readline().strip() == "in the window", prune.stderr.read()
        from test_api import COMMAND

        ingest = subprocess.Popen([*COMMAND, "ingest", str(SAMPLES / "ddp_straggler"), "--run", "new", "--db", str(db)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # it decodes, then wants the file: it says it waits (or, unguarded, stores into the old file and exits)
        first = ingest.stderr.readline()
        assert "prune or delete putting its compacted copy in place" in first and "waiting up to" in first, \
            first + ingest.stderr.read()
        assert ingest.poll() is None
        prune.stdin.write("go on\n")
        prune.stdin.flush()
        out, err = prune.communicate(timeout=120)
        assert prune.returncode == 0, err
        assert json.loads(out)["pruned"] == [1, 2]
        _, err = ingest.communicate(timeout=180)
        assert ingest.returncode == 0, err
    finally:
        for proc in (prune, ingest):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    con = runs.open_catalog(db, read_only=True)
    stored = {r["run_id"]: (r["name"], r["pruned_at"] is not None) for r in catalog.runs(con)}
    con.close()
    assert stored == {1: ("old", True), 2: ("old", True), 3: ("new", False)}


# --- tokens --------------------------------------------------------------------------


def test_token_file_and_who_pushes():
    tokens = auth.parse("# the team\n\nci-0123456789abcdef ci-bot\nlaptop-0123456789abcdef alice smith\n", "t")
    assert tokens.configured
    assert tokens.who("ci-0123456789abcdef") == "ci-bot"
    assert tokens.who("laptop-0123456789abcdef") == "alice smith"
    assert tokens.who("ci-0123456789abcdeX") is None and tokens.who("") is None and tokens.who(None) is None
    assert auth.bearer("Bearer ci-0123456789abcdef") == "ci-0123456789abcdef"
    assert auth.bearer("bearer  x ") == "x" and auth.bearer("Basic abc") is None and auth.bearer(None) is None
    assert not auth.NONE.configured and auth.NONE.who("anything") is None


@pytest.mark.parametrize("text, problem", [
    ("tok-0123456789abcdef\n", "t:1: a line is 'TOKEN NAME'"),
    ("# only\nshort name\n", "t:2: the token is shorter than 16 characters"),
    ("a-0123456789abcdef x\na-0123456789abcdef y\n", "t:2: this token is already on an earlier line"),
    ("# nothing\n", "t: no tokens in the file"),
])
def test_a_bad_token_file_names_the_line_never_the_token(text, problem):
    with pytest.raises(UsageError) as err:
        auth.parse(text, "t")
    assert str(err.value).startswith(problem)
    assert "0123456789abcdef" not in str(err.value) and "short " not in str(err.value)


def test_tokens_are_read_again_when_the_file_changes(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("first-0123456789abcdef ci\n")
    assert auth.current(path).who("first-0123456789abcdef") == "ci"
    time.sleep(0.01)
    path.write_text("second-0123456789abcdef ci\n")
    assert auth.current(path).who("first-0123456789abcdef") is None
    assert auth.current(path).who("second-0123456789abcdef") == "ci"
    assert auth.current(None) is auth.NONE


def test_results_prepared_beside_the_writer_equal_those_of_one_store(tmp_path):
    """A server maps and analyses a run (each rank in its worker, then the reduce) before the
    writer commits it: the catalog ends up with the rows that the single-store route
    computes over every event at once (load, then derive.compute)."""
    from overlapscope.analyzer import sql
    from overlapscope.analyzer.engine.load import load
    from overlapscope.analyzer.runs import derive

    con = runs.open_catalog(tmp_path / "catalog.duckdb")
    paths = [str(SAMPLES / "fsdp_per_block")]
    run_id = runs.commit(con, runs.prepare(tmp_path / "catalog.duckdb", paths, workers=1), "beside")
    one = load(paths, detail="full", workers=1)
    expected = derive.compute(one.con, one.run_id)
    (row,) = catalog.runs(con)
    assert row["headline"] == expected["headline"]
    assert [{k: f[k] for k in ("id", "status", "evidence")} for f in catalog.detail(con, run_id)["findings"]] == \
        sorted(({k: f[k] for k in ("id", "status", "evidence")} for f in expected["findings"]),
               key=lambda f: [r["id"] for r in catalog.detail(con, run_id)["findings"]].index(f["id"]))
    figures = catalog.figures(con, run_id)
    assert figures["ranks"] == [{k: r.get(k) for k in figures["ranks"][0]} for r in expected["figures"]["rank_metrics"]]
    assert figures["steps"] == [{k: r.get(k) for k in figures["steps"][0]} for r in expected["figures"]["step_metrics"]]
    groups = sql.rows(con, "catalog.group_metrics", run_id=run_id)
    assert len(groups) == len(expected["figures"]["group_metrics"])
    con.close()
