"""The analysis as a map over ranks and a small reduce across them.

- map (``rank.py``): each rank's trace is decoded and reduced to its per-rank tables
  by one worker, in memory bounded by the worker's budget; only those tables leave
  it. Workers are local processes (``local.py``, the default) or Ray tasks
  (``ray_engine.py``, ``--engine ray``: beyond one machine).
- reduce (``reduce.py``): the ranks' tables in one small store, where what compares
  ranks runs (clocks, waits, the straggler) and every analysis after it.

Peak memory therefore follows the number of workers, not the number of ranks: a
worker's group of ranks is sized by its budget (``rank.group_tasks``), each rank goes
into the worker's store as soon as it is decoded, and a local worker leaves its ranks'
tables in files (the run store's staging folder, or a temporary one) for the reduce to
read one table at a time, so the parent holds a few facts per rank while the workers
work. Where workers cannot be forked (DuckDB already runs in the process: a server), the
groups run in the map's own process, one after another and as few as the budget allows.
``map_and_reduce`` is the map and the reduce together (the reduce's store opened while the
workers map); ``map_run`` the whole route from paths to a reduced store.

Importing this package imports neither NumPy, Arrow nor DuckDB: the map imports what
the workers run just before they fork (they inherit it), and a run of one rank is scanned
while another thread imports the rest (``engine/one.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
from dataclasses import dataclass

from overlapscope.analyzer.engine import local
from overlapscope.analyzer.engine.inplace import map_or_collect_group
from overlapscope.analyzer.engine.rank import (  # noqa: F401 (the engine's names)
    ENV_WORKER_MEMORY_MB, RankResult, RankTask, group_tasks, tasks_for, worker_memory_bytes, reduce_memory_bytes,
)
from overlapscope.analyzer import tempdirs
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.engine import one
from overlapscope.analyzer.ingest.inputs import Inputs, resolve, source_text
from overlapscope.analyzer.ingest.limits import Limits, from_env as limits_from_env

ENGINES = ("local", "ray")
@dataclass
class Mapped:
    """A run mapped and reduced: the reduce's store, the run's id there, what came in."""

    con: object  # duckdb.DuckDBPyConnection (in memory)
    run_id: int
    inputs: Inputs
    results: list[RankResult]  # the ranks' facts (their tables are in ``con``)


def map_ranks(inputs: Inputs, detail: str, workers: int | None = None, engine: str = "local",
              ray_address: str | None = None, out_dir: str | None = None, limits: Limits | None = None,
              on_mapped=None, while_waiting=None, results_dir: str | None = None) -> list[RankResult]:
    """Every rank of ``inputs`` through ``map_rank``; checked to make one run; in rank order.

    ``out_dir``: a run store's staging folder for the ranks' Parquet files (ingest);
    ``results_dir``: without ``out_dir``, a folder where local workers leave the ranks'
    results when there are more groups than workers (else they are sent back whole).
    Results in files (``RankResult.table`` reads them) need their folder through the reduce.
    ``on_mapped(done, total)`` reports each rank as it finishes; ``while_waiting`` runs
    here once the workers run (``ReduceStore.open``: the reduce's store opened meanwhile).
    """
    from overlapscope.analyzer.ingest.consistency import check_ranks

    if engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    limits = limits or limits_from_env()
    if engine == "local":
        local.prefork_imports()  # the workers inherit DuckDB (imported first: its state is noted)
        _worker_imports()  # and what else they run
    # one worker where forking is unsafe: the groups then run here one after another
    # (local.run), as few as the budget allows, so the rank scripts' fixed cost (0.2-0.5 s
    # a group) is paid once, not per core
    n = local.workers_for(len(inputs.sources), workers)
    here = engine == "local" and n == 1  # local.run runs one worker's groups in this process
    with tempdirs.folder("spill") as spill:
        tasks = tasks_for(inputs, detail, limits, n if engine == "local" else len(inputs.sources), out_dir,
                          spill_dir=os.path.join(out_dir, ".spill") if out_dir else spill)
        if engine == "ray":
            from overlapscope.analyzer.engine import ray_engine

            if while_waiting:
                while_waiting()
            results = ray_engine.run(tasks, address=ray_address, on_done=on_mapped)
        else:
            groups = group_tasks(tasks, n)
            if results_dir and not out_dir and len(groups) > n:
                # more groups than workers: results would pile up here while later groups
                # run; in files they wait on disk (with one round they all arrive at the end)
                groups = [[dataclasses.replace(t, results_dir=results_dir) for t in g] for g in groups]
            sizes = [len(g) for g in groups]
            fn, done = map_or_collect_group, None
            if on_mapped and here:  # progress rank by rank, from inside the groups
                ranks_done = itertools.count(1)
                fn = functools.partial(map_or_collect_group, on_rank=lambda: on_mapped(next(ranks_done), len(tasks)))
            elif on_mapped:  # progress as the workers' groups finish

                def done(k: int, _total: int) -> None:
                    on_mapped(sum(sizes[:k]), len(tasks))

            results = [r for group in local.run(fn, groups, workers=n, on_done=done, while_waiting=while_waiting)
                       for r in group]
    check_ranks(results, inputs.manifest, inputs.manifest_source)
    return sorted(results, key=lambda r: r.rank)


def _worker_imports() -> None:
    """What a worker runs, imported before the workers fork (each inherits it instead of
    importing it: 0.2 s of CPU): the decoder (NumPy, Arrow, msgspec), the rank's store
    (DuckDB) and its files."""
    from overlapscope.analyzer.ingest import decode  # noqa: F401
    from overlapscope.analyzer.store import database, runstore  # noqa: F401


def map_and_reduce(inputs: Inputs, detail: str, workers: int | None = None, engine: str = "local",
                   ray_address: str | None = None, limits: Limits | None = None, on_mapped=None,
                   out_dir: str | None = None, results_dir: str | None = None, source: str = ""):
    """``map_ranks`` and the reduce: the reduce's store opens while the workers map
    (``ReduceStore``), and takes their results. Returns (connection, run id, results);
    ``source``: the run's name and source in that store (the input paths)."""
    from overlapscope.analyzer.engine.reduce import reduce_results

    # ingest's reduce spills inside its staging folder (the catalog's disk, swept after a crash)
    store = ReduceStore(os.path.join(out_dir, ".spill", "reduce") if out_dir else None, reduce_memory_bytes(detail))
    try:
        results = map_ranks(inputs, detail, workers, engine, ray_address, out_dir=out_dir, limits=limits,
                            on_mapped=on_mapped, while_waiting=store.open, results_dir=results_dir)
        con, run_id = reduce_results(results, source, source, inputs.manifest, inputs.manifest_text,
                                     con=store.take())
    finally:
        store.close()
    return con, run_id, results


def map_run(paths: list[str], detail: str, workers: int | None = None, engine: str = "local",
            ray_address: str | None = None, limits: Limits | None = None, on_mapped=None,
            keep_sources: bool = False) -> Mapped:
    """Paths in, a reduced store out (what ``analyze``, ``buckets`` and ``diagnose`` read).
    Sources split out of an export go once mapped, unless ``keep_sources`` (the caller reads
    them again, then ``mapped.inputs.release()``s them)."""
    limits = limits or limits_from_env()
    inputs = resolve(paths, limits)
    try:
        if one.applies(inputs, engine):
            # one rank is its own reduce: its store takes the run scripts too; its file is
            # scanned while the rest loads (engine/one.py)
            loaded = one.load_one(paths, inputs, detail, limits, on_decoded=on_mapped)
            return Mapped(loaded.con, loaded.run_id, inputs, [])
        with tempdirs.folder("results") as results_dir:
            con, run_id, results = map_and_reduce(inputs, detail, workers, engine, ray_address, limits, on_mapped,
                                                  results_dir=results_dir, source=source_text(paths))
    finally:
        if not keep_sources:
            inputs.release()
    for r in results:  # in the reduce's store now: not held twice through the analysis, nor files
        r.tables, r.tables_in = {}, None
    return Mapped(con, run_id, inputs, results)


class ReduceStore:
    """The reduce's store, opened while the workers map (``map_ranks``'s ``while_waiting``):
    opening it and creating the schema then overlap the map instead of following it. It
    opens once every worker has forked (``local._forked``): DuckDB's threads start then.

    It has a DuckDB budget of its own (``reduce_memory_bytes``) and spills beyond it to
    ``spill_dir`` (ingest: its staging folder), else to a temporary folder of its own
    (DuckDB removes it on close): its tables grow with the ranks (360 MiB at 256 ranks of
    the reference trace for ``ingest``), the workers' stores do not (its budget per detail:
    ``rank.DEFAULT_REDUCE_MEMORY_MB``)."""

    def __init__(self, spill_dir: str | None = None, memory_bytes: int | None = None):
        self.con = None
        self.spill_dir = spill_dir
        self.memory_bytes = memory_bytes or reduce_memory_bytes("full")

    def open(self) -> None:
        from overlapscope.analyzer.store import database

        # DuckDB removes its spill folder when the store closes, in the caller's hands: the
        # folder around it goes at exit, or with the next load's sweep after a kill
        spill = self.spill_dir or os.path.join(tempdirs.make("reduce", until_exit=True), "duckdb")
        os.makedirs(os.path.dirname(spill), exist_ok=True)  # DuckDB makes the last folder only
        self.con = database.connect(memory_limit_bytes=self.memory_bytes, spill_dir=spill)

    def take(self):
        con, self.con = self.con, None
        return con

    def close(self) -> None:
        """Close it if it was never taken (the map failed)."""
        if self.con is not None:
            self.con.close()
            self.con = None
