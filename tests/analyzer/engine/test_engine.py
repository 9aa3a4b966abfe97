"""The map over ranks and the reduce give what one store of every event gives.

Two routes to every figure: the engine (each rank decoded and reduced to its tables
by its own worker, the tables of all ranks reduced together: what the commands
run) and the single store (every rank's events in one DuckDB store, the same SQL
over all of them at once: ``engine.load``). On every sample run and every
reference trace, the per-rank tables each worker ships equal that rank's rows of
the single store's tables, and analyze, buckets and diagnose answer the same.
"""

from __future__ import annotations

import math

import pytest

from conftest import REFERENCE, SAMPLES
from overlapscope.analyzer import api, sql
from overlapscope.analyzer.engine import map_run
from overlapscope.analyzer.sql.params import RANK_SCRIPTS, script_params
from overlapscope.analyzer.engine.load import load
from overlapscope.analyzer.errors import UsageError

BUNDLES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob("rank-*")))
REFERENCES = sorted(str(p) for p in REFERENCE.glob("gpu_*/*.json.gz")) if REFERENCE.is_dir() else []


def _same(a, b, where=""):
    """Equal JSON-ready values (floats to 1e-9 relative: sums over ranks may add in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        for k in a:
            if k not in ("name", "files", "run_id"):
                _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(1.0, abs(a)), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _rows(table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _inputs() -> list[list[str]]:
    return [[str(SAMPLES / b)] for b in BUNDLES] + [[r] for r in REFERENCES]


@pytest.mark.parametrize("paths", _inputs(), ids=[p[0].split("/")[-1] for p in _inputs()])
def test_each_rank_ships_its_rows_of_the_single_store(paths):
    mapped = map_run(paths, "full", workers=2)
    one = load(paths, detail="full", workers=2)
    for script in RANK_SCRIPTS["full"]:
        if script != "steps":
            sql.ensure(one.con, script, **script_params(script, one.run_id))
    for result in mapped.results:
        for table, data in result.tables.items():
            if table in ("steps", "annotation_roles"):
                query = f"SELECT * EXCLUDE (run_id) FROM {table} WHERE run_id = ? AND rank = ?"
                expected = one.con.sql(query, params=[one.run_id, result.rank]).to_arrow_table()
            else:
                expected = one.con.sql(f"SELECT * FROM {table} WHERE rank = ?", params=[result.rank]).to_arrow_table()
            got = data.select(expected.column_names)
            assert _rows(got) == _rows(expected), (table, result.rank)


@pytest.mark.parametrize("paths", _inputs(), ids=[p[0].split("/")[-1] for p in _inputs()])
def test_every_command_answers_as_the_single_store(paths):
    overlap = load(paths, detail="overlap", workers=2)
    _same(api.analyze(paths, workers=2), api.analyze_run(overlap.con, overlap.run_id))
    one = load(paths, detail="attribution", workers=2)
    # buckets and diagnose map the run alike (api.buckets, api.diagnose): one map serves both
    mapped = map_run(paths, "attribution", workers=2)
    _same(api.buckets_run(mapped.con, mapped.run_id), api.buckets_run(one.con, one.run_id))
    _same(api.diagnose_run(mapped.con, mapped.run_id), api.diagnose_run(one.con, one.run_id))


def test_one_rank_alone_skips_the_comparison_with_what_it_would_give(tmp_path):
    """A run of one loaded rank answers its clock and waits without the SQL that compares
    ranks: the same figures that SQL gives it."""
    from overlapscope.analyzer.measure import waits

    one = load([str(SAMPLES / "ddp" / "rank-0.pt.trace.json.gz")], detail="overlap", workers=1)
    shortcut = waits.ranks(one.con, one.run_id)
    waits.ensure(one.con, one.run_id)
    (row,) = sql.rows(one.con, "waits.ranks")
    (rank, figures), = shortcut.items()
    assert rank == row["rank"] and figures["peered"] == row["peered"] == 0
    assert figures["clock_offset_ms"] == row["clock_offset_ns"] / 1e6 == 0.0
    assert figures["last_arrivals"] == row["last_arrivals"] and figures["matched"] == row["matched"]


FORK_PROBE = """
import os, sys
from overlapscope.analyzer.engine import local
from overlapscope.cli import main

pids = set()
real_run = local.run

def run(fn, items, workers=None, on_done=None, while_waiting=None, **kw):
    out = real_run(_Probe(fn), items, workers, on_done, while_waiting, **kw)
    pids.update(p for p, _ in out)
    return [r for _, r in out]

class _Probe:  # picklable under fork: the function and the pid of the process that ran it
    def __init__(self, fn):
        self.fn = fn
    def __call__(self, item):
        return os.getpid(), self.fn(item)

local.run = run
status = main(sys.argv[1:])
print("PIDS", len(pids - {os.getpid()}), status)
"""


@pytest.mark.parametrize("command", ["analyze", "ingest"])
def test_the_ranks_are_mapped_in_worker_processes(tmp_path, command):
    """``analyze`` and ``ingest`` fork their workers before any catalog or store opens
    (ingest once imported DuckDB first, and every rank ran in the parent, one at a time)."""
    import subprocess
    import sys

    extra = ["--run", "probe", "--db", str(tmp_path / "c.duckdb")] if command == "ingest" else []
    out = subprocess.run([sys.executable, "-c", FORK_PROBE, command, str(SAMPLES / "hsdp_2x2"), "--workers", "2",
                          *extra], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "PIDS 2 0"


PREFORK_PROBE = """
import os, sys, time
from overlapscope.analyzer.engine import local

assert "duckdb" not in sys.modules and local.fork_is_safe()
local.prefork_imports()
assert "duckdb" in sys.modules and local.fork_is_safe()  # imported, no connection: no thread yet
from overlapscope.analyzer.store import database
if sys.argv[1:] == ["raw"]:  # a connection not made by database.connect: its threads count
    import duckdb
    other = duckdb.connect()
    assert database.connections_opened == 0 and not local.fork_is_safe()
    print("OK")
    sys.exit(0)
forks, opened, real_fork = [], [], os.fork

def fork():  # what multiprocessing's fork context calls, here in the parent
    forks.append(time.monotonic())
    return real_fork()

os.fork = fork
local.run(lambda _: os.getpid(), [0, 1, 2, 3], workers=2,
          while_waiting=lambda: opened.append((time.monotonic(), database.connect())))
# the store opened (DuckDB's threads started) only once the last worker had forked
assert len(forks) == 4 and max(forks) <= opened[0][0], (forks, opened)
assert not local.fork_is_safe() and local.workers_for(4, 2) == 1
print("OK")
"""


def test_workers_inherit_duckdb_and_none_forks_once_a_store_is_open():
    """DuckDB imported before the workers fork (each inherits it instead of importing it:
    0.1 s of CPU a worker), and no worker is forked once a connection (its threads) is open
    in the parent, even with more groups than workers."""
    import subprocess
    import sys

    for mode in ([], ["raw"]):
        out = subprocess.run([sys.executable, "-c", PREFORK_PROBE, *mode], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip() == "OK"


ONE_RANK_PROBE = """
import os, sys
from overlapscope.analyzer.ingest import scan

heavy = []
real = scan.scan_beside

def beside(*args, **kwargs):
    heavy.append(sorted(m for m in ("numpy", "pyarrow", "duckdb") if m in sys.modules))
    return real(*args, **kwargs)

scan.scan_beside = beside
forks = []
os.register_at_fork(before=lambda: forks.append(1))
from overlapscope.cli import main
status = main(sys.argv[1:])
print("PROBE", heavy, len(forks), status)
"""


def test_one_rank_is_scanned_while_the_analyzer_loads(tmp_path):
    """A run of one rank is scanned in the command's own process from the start: nothing
    of NumPy, Arrow or DuckDB is imported when the scan begins (another thread imports
    them and opens the store meanwhile: engine/one.py), no worker is forked, and the
    figures are those of the single store."""
    import json
    import subprocess
    import sys

    trace = sorted((SAMPLES / "ddp").glob("rank-*.json*"))[0]
    out = subprocess.run([sys.executable, "-c", ONE_RANK_PROBE, "analyze", "--json", str(trace)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "PROBE [[]] 0 0"
    probed = json.loads("\n".join(lines[:-1]))
    single = load([str(trace)], detail="overlap", workers=1)
    here = api.analyze_run(single.con, single.run_id)
    assert probed["ranks"] == here["ranks"] and probed["steps"] == here["steps"]


BESIDE_PROBE = """
import sys, threading
from overlapscope.analyzer.ingest import limits, scan

opened, seen = threading.Event(), {}

def meanwhile(ready):
    ready()  # what ``then`` needs is here
    seen["then ran beside"] = opened.wait(20)  # the rest (a store opening) waits for ``then``
    return "store"

def then(scanned):
    opened.set()
    return "columns" if scanned.columns["n"] else "no rows"

print(scan.scan_beside(sys.argv[1], None, sys.argv[1], "overlap", limits.from_env(), meanwhile, then), seen)
"""


def test_the_columns_are_built_beside_the_rest_of_the_preparation():
    """``scan_beside`` runs ``then`` (a one-rank run's columns) as soon as ``meanwhile`` says
    it may, beside the rest of ``meanwhile`` (the store opening), not after it: here the
    rest waits for ``then`` to start, and would wait in vain if ``then`` waited for it. In a
    fresh process (one thread: a test runner's threads make scan_beside run things in turn)."""
    import subprocess
    import sys

    trace = sorted((SAMPLES / "ddp").glob("rank-*.json*"))[0]
    out = subprocess.run([sys.executable, "-c", BESIDE_PROBE, str(trace)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "('columns', 'store') {'then ran beside': True}"


def test_a_worker_hands_its_results_over_in_files_and_they_read_back_the_same(tmp_path):
    """With a results folder, a worker sends its parent the ranks' facts only (the map's
    parent holds no tables while the workers work); read back, the tables are the ones
    the worker computed."""
    import dataclasses

    from overlapscope.analyzer.engine import inplace
    from overlapscope.analyzer.engine.rank import RankResult, map_group, tasks_for
    from overlapscope.analyzer.ingest.inputs import resolve
    from overlapscope.analyzer.ingest.limits import from_env

    inputs = resolve([str(SAMPLES / "fsdp_per_block")], from_env())
    direct = map_group(tasks_for(inputs, "attribution", from_env(), 1))
    handed = inplace.map_or_collect_group([dataclasses.replace(t, results_dir=str(tmp_path / "results"))
                                           for t in tasks_for(inputs, "attribution", from_env(), 1)])
    assert [h.tables for h in handed] == [{} for _ in handed] and all(h.tables_in for h in handed)
    for d, h in zip(direct, handed):
        back = RankResult(h.meta, h.counts, {name: h.table(name) for name in h.table_names}, h.scripts)
        assert back.meta == d.meta and back.counts == d.counts and back.scripts == d.scripts
        assert set(back.tables) == set(d.tables)
        for name, table in d.tables.items():
            from overlapscope.analyzer.store.runstore import with_rank

            def rows(t):  # in any order (DuckDB's threads may order a table's rows differently per run)
                return sorted(t.to_pylist(), key=lambda r: [str(v) for v in r.values()])

            assert rows(back.tables[name]) == rows(with_rank(table, d.rank)), name


def test_groups_take_the_budget_s_size_whatever_the_number_of_ranks(tmp_path):
    """A worker's group is sized by its budget and the files, so a run of 256 ranks has the
    groups of a run of 64 (equal files): the same worker peak; fewer ranks than the
    workers' budget takes are spread over every worker."""
    from overlapscope.analyzer.engine.rank import GROUP_BUDGET_BYTES, KEPT_PER_COMPRESSED_BYTE, RankTask, group_tasks
    from overlapscope.analyzer.ingest.inputs import TraceSource
    from overlapscope.analyzer.ingest.limits import from_env

    size = 3_000_000  # the reference trace's compressed size
    budget = 512 * 2**20  # the worker's DuckDB budget: its store spills beyond it
    assert GROUP_BUDGET_BYTES == 128 * 2**20  # a group's: well under the store's, so groups stop growing early
    cap = GROUP_BUDGET_BYTES // KEPT_PER_COMPRESSED_BYTE["overlap"] // size  # ranks of this size a group holds
    for r in range(300):
        (tmp_path / f"rank-{r}.json.gz").write_bytes(b"\0" * size)

    def groups(ranks: int, workers: int = 2) -> list[int]:
        tasks = [RankTask(TraceSource(str(tmp_path / f"rank-{r}.json.gz"), None, f"rank-{r}"), "overlap", from_env(),
                          memory_limit_bytes=budget) for r in range(ranks)]
        out = group_tasks(tasks, workers)
        assert [t for g in out for t in g] == tasks  # every rank once, in order
        return [len(g) for g in out]

    assert cap < 32  # 64 ranks on 2 workers would otherwise take 32 a group
    assert max(groups(16)) == max(groups(64)) == max(groups(256)) == max(groups(300)) == cap == 7
    assert groups(4) == [2, 2] and groups(8) == [4, 4]


def test_ranks_mapped_in_this_process_go_in_one_group_and_report_each_rank(monkeypatch):
    """Where the map cannot fork (DuckDB runs in this process already: a server, or this
    test), its groups run here one after another: the ranks go in as few groups as the
    budget allows, so a small run's rank scripts run once, not once per core, and the
    progress still comes rank by rank."""
    from overlapscope.analyzer.engine import local, map_ranks, rank
    from overlapscope.analyzer.ingest.inputs import resolve
    from overlapscope.analyzer.ingest.limits import from_env

    import duckdb  # noqa: F401 (as in a server: DuckDB runs in this process)

    assert not local.fork_is_safe()
    seen, real = {}, rank.group_tasks

    def spy(tasks, workers):
        seen["groups"] = real(tasks, workers)
        return seen["groups"]

    monkeypatch.setattr("overlapscope.analyzer.engine.group_tasks", spy)
    progress = []
    results = map_ranks(resolve([str(SAMPLES / "hsdp_2x2")], from_env()), "overlap", workers=4,
                        on_mapped=lambda done, total: progress.append((done, total)))
    assert [len(g) for g in seen["groups"]] == [4]
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [r.rank for r in results] == [0, 1, 2, 3]


def test_more_groups_than_workers_answer_as_one_group(monkeypatch):
    """A run of more groups than workers (its results handed over in files, read back one
    table at a time by the reduce) answers as the same run mapped in one group."""
    from overlapscope.analyzer.engine import rank

    paths = [str(SAMPLES / "hsdp_2x2")]
    one_group = api.buckets(paths, workers=1)
    monkeypatch.setitem(rank.KEPT_PER_COMPRESSED_BYTE, "attribution", 10**9)  # a budget of one rank a group
    seen = {}
    real = rank.group_tasks

    def spy(tasks, workers):
        seen["groups"] = real(tasks, workers)
        return seen["groups"]

    monkeypatch.setattr("overlapscope.analyzer.engine.group_tasks", spy)
    per_rank = api.buckets(paths, workers=1)
    assert len(seen["groups"]) == 4
    for key in ("summary", "collectives"):
        assert per_rank[key] == one_group[key], key


PROGRESS_PROBE = """
import sys
import duckdb
from overlapscope.analyzer.store import database

# DuckDB's own default in a process whose stdout is a real stream: the bar is on
assert duckdb.connect().sql("SELECT current_setting('enable_progress_bar')").fetchall() == [(True,)]
for args in ((sys.argv[1],), (sys.argv[1], True), ()):  # a catalog, read-only, a one-shot store
    con = database.connect(*args)
    assert con.sql("SELECT current_setting('enable_progress_bar')").fetchall() == [(False,)], args
    con.close()
"""


def test_a_store_never_draws_a_progress_bar_on_stdout(tmp_path):
    """DuckDB draws a progress bar on stdout for a query past 2 s (where stdout is a real
    stream: a subprocess here, not pytest's capture); in a store of ours it would corrupt
    ``--json`` output (a worker shares the command's stdout), so every connection turns it off."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PROGRESS_PROBE, str(tmp_path / "c.duckdb")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == ""


def test_the_reduce_store_has_its_own_budget_and_answers_the_same(monkeypatch):
    """The reduce's store grows with the ranks: it gets a DuckDB budget of its own
    (OVERLAPSCOPE_REDUCE_MEMORY_MB, not the workers') and spills beyond it, with the same
    figures as with a large budget."""
    import os

    from overlapscope.analyzer.engine import ENV_WORKER_MEMORY_MB
    from overlapscope.analyzer.engine.rank import DEFAULT_REDUCE_MEMORY_MB, ENV_REDUCE_MEMORY_MB

    path = str(SAMPLES / "hsdp_2x2")
    monkeypatch.setenv(ENV_REDUCE_MEMORY_MB, "4096")
    free = api.analyze_run(*_con_and_id(map_run([path], "overlap")))
    monkeypatch.delenv(ENV_REDUCE_MEMORY_MB)
    monkeypatch.setenv(ENV_WORKER_MEMORY_MB, "100")  # the workers' budget is not the reduce's
    mapped = map_run([path], "overlap")
    limit, = mapped.con.sql("SELECT current_setting('memory_limit')").fetchall()[0]
    assert limit == f"{DEFAULT_REDUCE_MEMORY_MB['overlap']:.1f} MiB"
    mapped.con.close()
    monkeypatch.setenv(ENV_REDUCE_MEMORY_MB, "100")
    mapped = map_run([path], "overlap")
    (limit, spill), = mapped.con.sql("SELECT current_setting('memory_limit'), current_setting('temp_directory')"
                                     ).fetchall()
    assert limit == "100.0 MiB" and "overlapscope-reduce-" in spill
    assert api.analyze_run(*_con_and_id(mapped)) == free
    mapped.con.close()
    assert not os.path.exists(spill)  # DuckDB removes the folder it made


@pytest.mark.parametrize("value", ["abc", "10", "nan"])
def test_a_bad_reduce_budget_is_one_line(monkeypatch, value):
    from overlapscope.analyzer.engine.rank import ENV_REDUCE_MEMORY_MB

    monkeypatch.setenv(ENV_REDUCE_MEMORY_MB, value)
    with pytest.raises(UsageError, match="OVERLAPSCOPE_REDUCE_MEMORY_MB must be"):
        map_run([str(SAMPLES / "ddp")], "overlap")


def _con_and_id(mapped):
    return mapped.con, mapped.run_id


def test_ingests_reduce_spills_inside_its_staging_folder(tmp_path, monkeypatch):
    """Ingest's reduce spills on the catalog's disk, inside the run's staging folder (which
    goes at commit, or with a sweep after a crash), not in the temporary folder (often a
    tmpfs: memory again)."""
    from overlapscope.analyzer import engine
    from overlapscope.analyzer import runs

    seen = []
    real = engine.ReduceStore.open

    def spy(store):
        real(store)
        seen.append(store.con.sql("SELECT current_setting('temp_directory')").fetchall()[0][0])

    monkeypatch.setattr(engine.ReduceStore, "open", spy)
    prepared = runs.prepare(tmp_path / "c.duckdb", [str(SAMPLES / "hsdp_2x2")])
    try:
        assert seen and seen[0] == str(prepared.staging.path / ".spill" / "reduce")
        assert (prepared.staging.path / ".spill").is_dir()  # DuckDB creates only the last folder
    finally:
        prepared.discard()


def test_rank_rows_of_a_large_run_go_in_by_the_statement_not_by_the_row():
    # 600 ranks: three INSERTs of up to ROWS_PER_INSERT rows; every field lands on its rank,
    # a NULL beside a value in one column included
    from types import SimpleNamespace

    from overlapscope.analyzer.store import database

    def rank(r):
        meta = {"rank": r, "file": f"rank-{r}.json", "rank_source": "distributedInfo", "world_size": 600,
                "backend": "nccl", "nccl_version": None if r % 2 else "2.18", "device_kind": "gpu",
                "device_names": ["A100"] * (r % 3) or None, "device_memory_bytes": 80 << 30, "hostname": f"node{r // 8}",
                "base_time_ns": 1_669_783_687_384_669_000 + r, "pg_config": None}
        return SimpleNamespace(meta=meta, counts={"events": 1000 + r, "dropped": {"no ts": r} if r == 7 else {}})

    con = database.connect()
    database.insert_run_rows(con, 1, [rank(r) for r in range(600)], "big", "paths",
                             clock_offsets_ns={5: -42})
    got = con.sql("SELECT rank, file, nccl_version, device_names, hostname, base_time_ns, events, clock_offset_ns, "
                  "dropped_events FROM ranks ORDER BY rank").fetchall()
    assert len(got) == 600 and database.ROWS_PER_INSERT < 600
    for r, row in enumerate(got):
        assert row[:7] == (r, f"rank-{r}.json", None if r % 2 else "2.18", ["A100"] * (r % 3) or None, f"node{r // 8}",
                           1_669_783_687_384_669_000 + r, 1000 + r)
        assert row[7] == (-42 if r == 5 else 0)
    assert got[7][8] == '{"no ts": 7}'


def test_small_stores_run_their_sql_on_one_thread_and_large_ones_on_every_core(monkeypatch):
    """A reduce whose tables all fit in one DuckDB row group, and a one-rank store whose rank
    keeps fewer events, give a second thread nothing to do: they run on one. Past the size,
    DuckDB keeps its thread per core, and the figures are the same either way."""
    import duckdb

    from overlapscope.analyzer.store import database

    cores = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    runs = {"reduce": [str(SAMPLES / "hsdp_2x2")], "one rank": [str(SAMPLES / "ddp" / "rank-0.pt.trace.json.gz")]}
    for what, paths in runs.items():
        small = map_run(paths, "overlap")
        assert small.con.execute("SELECT current_setting('threads')").fetchone()[0] == 1, what
        monkeypatch.setattr(database, "ONE_THREAD_MAX_ROWS", 0)
        large = map_run(paths, "overlap")
        assert large.con.execute("SELECT current_setting('threads')").fetchone()[0] == cores, what
        assert api.analyze_run(*_con_and_id(large)) == api.analyze_run(*_con_and_id(small)), what
        monkeypatch.undo()
        small.con.close()
        large.con.close()


def test_a_rank_store_compressed_after_each_rank_ships_the_same_tables(monkeypatch, tmp_path):
    """A worker's store is compressed (database.compress) each time CHECKPOINT_BYTES more are
    in: compressed after every rank, it ships the same tables as never compressed. The store
    holds no flows (no rank script reads them); the staging folder keeps them whole."""
    import pyarrow.parquet as pq

    from overlapscope.analyzer.engine import rank
    from overlapscope.analyzer.ingest.decode import decode_source
    from overlapscope.analyzer.ingest.inputs import resolve
    from overlapscope.analyzer.ingest.limits import from_env
    from overlapscope.analyzer.store import database, runstore

    inputs, limits = resolve([str(SAMPLES / "hsdp_2x2")]), from_env()
    flows_in_store = []
    real = database.compress

    def spy(con):
        flows_in_store.append(con.execute("SELECT count(*) FROM flows").fetchone()[0])
        real(con)

    monkeypatch.setattr(database, "compress", spy)
    tables = {}
    for limit in (2**62, 1):
        monkeypatch.setattr(rank, "CHECKPOINT_BYTES", limit)
        out = tmp_path / str(limit)
        tasks = [rank.RankTask(s, "full", limits, out_dir=str(out)) for s in inputs.sources]
        tables[limit] = [{name: _rows(t) for name, t in r.tables.items()} for r in rank.map_group(tasks)]
    assert flows_in_store == [0, 0, 0, 0]  # compressed after each of the 4 ranks, with the small limit only
    assert tables[1] == tables[2**62] and tables[1][0]["collective_stats"]
    for source in inputs.sources:  # the flows in the staging folder, as decoded
        decoded = decode_source(source, "full", limits=limits)
        staged = pq.read_table(runstore.rank_file(out, "raw", "flows", decoded.meta["rank"]))
        assert decoded.flows.num_rows > 0 and staged.num_rows == decoded.flows.num_rows


def test_a_large_reduce_keeps_the_ranks_tables_compressed_and_answers_the_same(monkeypatch):
    """The reduce stores the ranks' tables as tables of its store, not temporary ones, so a
    checkpoint compresses them (DuckDB cannot compress temporary tables); a large reduce is
    compressed once they are in, a small one is not, and every command answers the same."""
    from overlapscope.analyzer.store import database

    paths = [str(SAMPLES / "fsdp_per_block")]
    compressed = []
    real = database.compress
    monkeypatch.setattr(database, "compress", lambda con: (compressed.append(con), real(con)))
    small = map_run(paths, "attribution")
    assert compressed == []
    monkeypatch.setattr(database, "ONE_THREAD_MAX_ROWS", 0)
    large = map_run(paths, "attribution")
    assert compressed == [large.con]
    stored = large.con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()
    assert ("collective_stats",) in stored and ("overlap_step",) in stored
    for command in (api.analyze_run, api.buckets_run, api.diagnose_run):
        assert command(*_con_and_id(large)) == command(*_con_and_id(small)), command.__name__


def test_the_reduce_reads_the_ranks_tables_a_batch_of_ranks_at_a_time(monkeypatch):
    """``reduce.batches`` through ``sql.provide``: the ranks' tables, read as a batch needs
    them, reach the store as the rows of all of them in rank order; ranks without rows
    (whose columns may have no type) neither type the table nor stop it."""
    import duckdb
    import pyarrow as pa

    from overlapscope.analyzer.engine import reduce

    def rank(r: int, rows: int) -> pa.Table:
        if not rows:  # as an empty rank's table can come back: columns of no type
            return pa.table({"rank": pa.nulls(0), "ts_ns": pa.nulls(0)})
        return pa.table({"rank": pa.array([r] * rows, pa.int32()), "ts_ns": pa.array(range(rows), pa.int64())})

    sizes = [0, 0, 3, 0, 5, 1, 0, 2, 4]
    pulled, inserted = [], []

    def tables():
        for r, n in enumerate(sizes):
            pulled.append(r)
            yield rank(r, n)

    def table_of(name):  # every table the script ships gets the same rows
        pulled.clear()
        for batch in reduce.batches(tables()):
            inserted.append(len(pulled))  # ranks read when a batch goes in
            yield batch

    # ranks read when each batch goes in: its own and those before (rank 2 has the first rows)
    for per_batch, reads in ((1, [3, 5, 6, 8, 9]), (2, [4, 6, 8, 9]), (4, [4, 8, 9]), (100, [9])):
        inserted.clear()
        monkeypatch.setattr(reduce, "RANKS_PER_BATCH", per_batch)
        con = duckdb.connect()
        sql.provide(con, "instances", table_of, run_id=1)
        for name in sql.script("instances").shipped:
            got = con.execute(f"SELECT rank, ts_ns FROM {name}").fetchall()
            assert got == [(r, i) for r, n in enumerate(sizes) for i in range(n)], (per_batch, name)
        assert con.execute("SELECT typeof(rank) FROM comm_instance LIMIT 1").fetchall() == [("INTEGER",)]
        assert inserted == reads * len(sql.script("instances").shipped), per_batch
    # no rank with rows: one empty batch makes the table
    assert [b.num_rows for b in reduce.batches(rank(r, 0) for r in range(3))] == [0]


def test_a_reduce_that_takes_one_rank_at_a_time_answers_the_same(monkeypatch):
    from overlapscope.analyzer.engine import reduce

    paths = [str(SAMPLES / "hsdp_2x2")]
    whole = map_run(paths, "attribution", workers=2)
    monkeypatch.setattr(reduce, "RANKS_PER_BATCH", 1)
    one_by_one = map_run(paths, "attribution", workers=2)
    for name in ("comm_instance", "collective_stats", "overlap_step", "steps"):
        query = f"SELECT * FROM {name}"  # a rank's rows come in no fixed order (its worker's threads)
        assert sorted(whole.con.sql(query).fetchall()) == sorted(one_by_one.con.sql(query).fetchall()), name
        assert whole.con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0] > 0, name
    for command in (api.analyze_run, api.buckets_run, api.diagnose_run):
        assert command(*_con_and_id(one_by_one)) == command(*_con_and_id(whole)), command.__name__


def test_a_reduce_reading_the_ranks_files_a_few_at_a_time_holds_what_one_from_memory_holds(monkeypatch, tmp_path):
    """Ranks whose tables are files (ingest's staging folder) go into the reduce's store by
    DuckDB's own reads, a few ranks an insert with the store compressed between inserts; it
    holds the same rows and column types as a reduce of the same tables in memory."""
    import dataclasses

    from overlapscope.analyzer.engine import map_ranks, reduce
    from overlapscope.analyzer.ingest.inputs import resolve
    from overlapscope.analyzer.store import database

    inputs = resolve([str(SAMPLES / "hsdp_2x2")])
    results = map_ranks(inputs, "full", workers=2, out_dir=str(tmp_path))
    assert all(r.tables_in for r in results)
    in_memory = [dataclasses.replace(r, tables={n: r.table(n) for n in r.table_names}, tables_in=None)
                 for r in results]
    compressed = []
    real = database.compress
    monkeypatch.setattr(database, "compress", lambda con: (compressed.append(con), real(con)))
    monkeypatch.setattr(database, "ONE_THREAD_MAX_ROWS", 0)
    monkeypatch.setattr(reduce, "RANKS_PER_FILE_INSERT", 1)
    from_files, _ = reduce.reduce_results(results, "run", "run", inputs.manifest, inputs.manifest_text)
    assert compressed.count(from_files) > len(results)  # between the inserts of each large table
    from_memory, _ = reduce.reduce_results(in_memory, "run", "run", inputs.manifest, inputs.manifest_text)
    shipped = [t for s in results[0].scripts if s != "steps" for t in sql.script(s).shipped]
    empty = 0
    for name in shipped + ["steps", "annotation_roles"]:
        types = [con.execute(f"DESCRIBE {name}").fetchall() for con in (from_files, from_memory)]
        assert types[0] == types[1], name
        rows = [sorted(con.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for con in (from_files, from_memory)]
        assert rows[0] == rows[1], name
        empty += any(r.table(name).num_rows == 0 for r in results) if name in results[0].table_names else 0
    assert len(shipped) >= 8 and empty >= 1  # some table where a rank has no rows
