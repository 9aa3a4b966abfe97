"""The map over ranks: one rank's trace in, its per-rank tables out.

``map_rank`` runs in a worker (a local process, a Ray task, or the tracer's own
rank at the end of profiling). It decodes the rank's file, loads it into a
private in-memory DuckDB store of that rank alone (bounded by ``memory_limit``:
DuckDB spills beyond it to ``spill_dir``), runs the rank scripts (``sql``
headers ``-- scope: rank``: steps, overlap, instances and, beyond the overlap
detail, collectives, checklist and rank_facts) and returns what they ship: a few
rows per step and per collective, never the events. With ``out_dir`` it also
writes the rank's raw tables and its results as Parquet files there (a run
store's staging folder, ``store/runstore.py``): the workers write in parallel.

What a rank's results depend on is the rank's file and the run's parallelism
from the manifest (``collectives.sql`` reads it): nothing of the other ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from overlapscope.analyzer.ingest.consistency import claim
from overlapscope.analyzer.ingest.inputs import Inputs, TraceSource
from overlapscope.analyzer.engine.local import cpus
from overlapscope.analyzer.sql.params import RANK_SCRIPTS, script_params
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.ingest.limits import Limits

if TYPE_CHECKING:  # imported where used: importing the engine loads neither NumPy, Arrow nor DuckDB
    import pyarrow as pa

    from overlapscope.analyzer.ingest.decode import RankData

RUN_ID = 1  # the run's id inside a rank's private store (the reduce gives the real one)
# The raw tables a rank's store holds: what the rank scripts read. Flows (a third of a full
# trace's events) are read by none: a staging folder keeps them (RAW_TABLES), the store not.
STORE_TABLES = ("tracks", "events", "collectives", "memory", "roles")  # of store.database.RANK_TABLES
# DuckDB compresses an in-memory store's tables when it checkpoints, and checkpoints by
# itself only after a large insert: a group of small ranks (analyze's detail, 8 MB of Arrow
# a rank) stayed uncompressed, 253 MB for 32 ranks of the reference trace against 11 MB
# once compressed. A checkpoint every 64 MiB inserted held such a group's worker at 411
# MiB against 575 MiB, for 0.13 s more on 6.3 s (measured); groups of a few ranks never
# reach it.
CHECKPOINT_BYTES = 64 * 2**20
# Stored per-rank tables of a rank's load, beside the rank scripts' results.
RAW_TABLES = ("tracks", "events", "collectives", "flows", "memory", "annotation_roles")
_DATA_FIELD = {"annotation_roles": "roles"}  # RankData's field of each raw table


@dataclass(frozen=True)
class RankTask:
    """One rank's work: its file, how much to keep of it, and where its files go."""

    source: TraceSource
    detail: str  # decode.DETAILS
    limits: Limits
    parallelism: str | None = None  # the run's, from the manifest
    out_dir: str | None = None  # write the rank's Parquet files under this folder (a run store's staging)
    memory_limit_bytes: int | None = None  # the rank store's DuckDB budget (None: DuckDB's default)
    spill_dir: str | None = None  # where DuckDB spills beyond the budget
    threads: int = 1  # DuckDB threads (a process per rank: 1)
    # Without a staging folder, where a local worker leaves the rank's results for the
    # map's parent (a temporary folder): the parent holds a few facts per rank while the
    # workers work, so its memory does not grow with the ranks mapped (None: sent back).
    results_dir: str | None = None


@dataclass
class RankResult:
    """What one rank hands to the reduce: its facts and its rank scripts' tables."""

    meta: dict  # decode.RankData.meta: rank, file, world size, backend, device facts
    counts: dict  # events read, dropped by reason
    tables: dict[str, pa.Table] = field(default_factory=dict)  # steps, annotation_roles, shipped tables
    scripts: tuple[str, ...] = ()  # the rank scripts that ran
    # With a run store's staging folder: the tables are in its files, not here (``on_disk``),
    # so that the map's parent holds a few facts per rank while the workers work.
    tables_in: str | None = None
    table_names: tuple[str, ...] = ()

    def on_disk(self, folder: str) -> "RankResult":
        """This result without its tables, which ``write_results`` wrote into ``folder``."""
        return RankResult(self.meta, self.counts, {}, self.scripts, folder, tuple(self.tables))

    def table(self, name: str) -> pa.Table:
        """One of its tables: in memory, or read from its folder (the reduce reads one table
        of every rank at a time, never every table of every rank at once)."""
        if name in self.tables or self.tables_in is None:
            return self.tables[name]
        from overlapscope.analyzer.store import runstore

        if name not in self.table_names:
            raise KeyError(name)
        return runstore.read_result_tables(self.tables_in, self.rank, [name])[name]

    @property
    def rank(self) -> int:
        return self.meta["rank"]


ENV_WORKER_MEMORY_MB = "OVERLAPSCOPE_WORKER_MEMORY_MB"
DEFAULT_WORKER_MEMORY_MB = 512  # a rank store's DuckDB budget; it spills beyond


ENV_REDUCE_MEMORY_MB = "OVERLAPSCOPE_REDUCE_MEMORY_MB"
# The reduce's DuckDB budget (engine.ReduceStore; it spills beyond), by the map's detail. Its
# tables grow with the ranks. `analyze` (overlap) keeps a few rows per step and collective
# instance: 1,024 ranks of the 47 MB reference trace peaked at 700 MB in its process with
# 512 MiB (the tree 700 MB, 511 MB at 64 ranks), 381 MB with 192, 313 MB with 128 and
# 280 MB with 96 (the tree 523-526 MB: its workers'), in 152-176 s against 187 s; on
# 2026-12-07 311 MB with 128 and 246 MB with 64 (140.3 and 141.6 s; 64 ranks 221-223 MB
# and 9.8-10.5 s either way: its peak is a worker's). 64 is the least the setting takes.
# `ingest` (full) runs its analyses' SQL over every collective. Once the run's collectives
# were columns (not 1.2 GB of objects) the store was most of what grew: on 2026-12-07 256
# ranks peaked at 476 MB with 128 MiB against 589-592 MB with 512 (in 140-144 against
# 134-147 s), 1,024 ranks at 1,036 against 1,318 MB. 64 MiB is too little for it: the
# collectives' query (collectives.stats_waited: two joins and a sort) ran out of memory at
# 256 ranks.
# What ingest derives after the reduce (``derive``: the run's collectives as NumPy columns
# beside the store, its SQL a few ranks at a time) runs with less: 64 MiB took 1,024 ranks'
# derive from 728 to 675 MiB (its store's blocks spilled, in as long: 26.8 against 26.5 s;
# 48 MiB ran out of memory in the waits' SQL). Where a run's SQL needs more, ``runs`` derives
# it again with the reduce's budget.
DEFAULT_REDUCE_MEMORY_MB = {"overlap": 64, "full": 128, "derive": 64}


def _mb_setting(name: str, default: float) -> int:
    raw = os.environ.get(name)
    try:
        mb = float(raw) if raw else default
    except ValueError:
        raise UsageError(f"${name} must be a number of MB, got {raw!r}") from None
    if not mb >= 64:  # nan too
        raise UsageError(f"${name} must be at least 64 MB, got {raw}")
    return int(mb * 2**20)


def worker_memory_bytes() -> int:
    return _mb_setting(ENV_WORKER_MEMORY_MB, DEFAULT_WORKER_MEMORY_MB)


def reduce_memory_bytes(detail: str) -> int:
    return _mb_setting(ENV_REDUCE_MEMORY_MB, DEFAULT_REDUCE_MEMORY_MB.get(detail, DEFAULT_WORKER_MEMORY_MB))


def tasks_for(inputs: Inputs, detail: str, limits: Limits, workers: int, out_dir: str | None = None,
              spill_dir: str | None = None) -> list[RankTask]:
    """One task per rank file; each worker's DuckDB gets its share of the cores."""
    threads = max(1, cpus() // max(1, min(workers, len(inputs.sources))))
    parallelism = inputs.manifest.parallelism if inputs.manifest is not None else None
    budget = worker_memory_bytes()
    return [RankTask(s, detail, limits, parallelism=parallelism, out_dir=out_dir, memory_limit_bytes=budget,
                     spill_dir=spill_dir, threads=threads) for s in inputs.sources]


def map_rank(task: RankTask) -> RankResult:
    """Decode ``task.source`` and reduce it to its per-rank tables (see the module)."""
    return map_group([task])[0]


def map_group(tasks: list[RankTask], on_decoded=None) -> list[RankResult]:
    """Several ranks through one private store, the rank scripts run once over them (their
    SQL is rank by rank: the same rows as one store per rank, for the fixed cost of one):
    what a local worker runs, a group whose kept events fit its budget (``group_tasks``).
    ``map_rank`` is a group of one.

    Each rank goes into the store as soon as it is decoded, and its tables leave this
    process's memory then (DuckDB holds them, within its budget, spilling beyond): a
    worker holds one decoded rank beside its store, whatever the group's size.
    ``on_decoded()`` is called as each rank is in the store."""
    import pyarrow as pa

    from overlapscope.analyzer import sql
    from overlapscope.analyzer.ingest.decode import decode_source
    from overlapscope.analyzer.store import database, runstore

    task = tasks[0]
    # Arrow's allocator (mimalloc) keeps the pages that a worker's earlier groups freed and
    # reuses them unevenly: a worker's peak crept by about 2 MiB a group without this
    pa.default_memory_pool().release_unused()
    kept: list[RankData] = []  # each rank's facts and roles; its tables are in the store
    unchecked = 0  # bytes inserted since the store last compressed them
    claims: dict[int, str] = {}
    con = None
    try:
        for t in tasks:
            data = decode_source(t.source, t.detail, use_scanner=True, limits=t.limits)
            claim(claims, data.meta)  # the store holds the group's ranks by rank: one file each
            if t.out_dir:
                runstore.write_raw(t.out_dir, data.meta["rank"],
                                   {name: getattr(data, _DATA_FIELD.get(name, name)) for name in RAW_TABLES})
                data.events = data.events.drop_columns([c for c in ("args",) if c in data.events.column_names])
            if con is None:
                con = database.connect(threads=task.threads, memory_limit_bytes=task.memory_limit_bytes,
                                       spill_dir=task.spill_dir)
                database.insert_ranks_run(con, RUN_ID, data.meta.get("device_kind"), task.parallelism)
            unchecked += database.insert_rank(con, RUN_ID, data, STORE_TABLES)
            data.events = data.tracks = data.collectives = data.flows = data.memory = None  # in the store now
            kept.append(data)
            if unchecked >= CHECKPOINT_BYTES:
                database.compress(con)  # see CHECKPOINT_BYTES
                unchecked = 0
            if on_decoded:
                on_decoded()
        sql.ensure(con, "steps", run_id=RUN_ID)
        scripts = RANK_SCRIPTS[task.detail]
        for name in scripts:
            sql.ensure(con, name, **script_params(name, RUN_ID))
        names = [t for name in scripts for t in sql.script(name).shipped if t != "steps"]
        shipped = {data.meta["rank"]: _shipped(con, names, data.meta["rank"]) for data in kept}
    finally:
        if con is not None:
            con.close()
    results = []
    for data, t in zip(kept, tasks):
        rank = data.meta["rank"]
        tables = shipped[rank]
        tables["annotation_roles"] = runstore.with_rank(data.roles, rank)
        result = RankResult(data.meta, data.counts, tables, scripts)
        if t.out_dir:
            runstore.write_results(t.out_dir, result)
        results.append(result)
    return results


def _shipped(con, names: list[str], rank: int) -> dict[str, pa.Table]:
    """One rank's rows of the store's steps and of the shipped tables ``names``."""
    from overlapscope.analyzer import sql

    out = {"steps": con.sql(sql.query("store.rank_steps"), params={"rank": rank}).to_arrow_table()}
    for name in names:
        out[name] = con.sql(sql.query("store.rank_rows"), params={"table": name, "rank": rank}).to_arrow_table()
    return out


# How many bytes of memory a worker takes above its start, per byte of compressed trace
# in its group, about: what a group's budget is measured against. Measured on copies of
# the 54 MB reference trace (3.0 MB compressed): at overlap, 32 ranks a worker, 5.4; at
# full, 6 ranks a worker, 21 (benchmarks/bench_scale.py); rounded up.
KEPT_PER_COMPRESSED_BYTE = {"overlap": 6, "attribution": 8, "full": 25}
# What a group's kept events may take, about (its store spills beyond the worker's DuckDB
# budget, 512 MiB). Groups grew with the ranks up to that budget, and the workers' peak
# with them: an ingest of copies of the 54 MB reference trace peaked at 337 MB (largest
# process) at 4 ranks and 476-481 MB at 16 (8 ranks a group), of the 35 MB control trace
# at 228 and 328 MB. Groups of this size hold it flat: 272-273 MB and 228-242 MB; the
# tree's peak at 64 ranks 625-628 MB against 970-1,037 MB, for 41-43 s becoming 45-50 s
# (a process forked per group of one rank at ingest's detail; alternating runs).
GROUP_BUDGET_BYTES = 128 * 2**20


def group_tasks(tasks: list[RankTask], workers: int) -> list[list[RankTask]]:
    """The ranks in groups for the workers: consecutive ranks whose kept events fit a
    group's budget together (``GROUP_BUDGET_BYTES``, estimated from their compressed sizes), and at least as
    many groups as workers, so that every worker has work. Once a run has more ranks
    than the workers' groups of the budget's size take, its groups are of that size
    whatever the count (the last takes what remains): a worker's peak is the same for
    64 ranks of 54 MB as for 1,024."""
    from overlapscope.analyzer.ingest import files

    if not tasks:
        return []
    budget = min(GROUP_BUDGET_BYTES, tasks[0].memory_limit_bytes or DEFAULT_WORKER_MEMORY_MB * 2**20) // \
        KEPT_PER_COMPRESSED_BYTE[tasks[0].detail]
    sizes = [files.size(t.source.path) if t.source.member is None else 0 for t in tasks]
    per_group = max(1, min(len(tasks) // max(1, workers), max(1, budget // max(1, max(sizes)))))
    groups, current, held = [], [], 0
    for task, size in zip(tasks, sizes):
        if current and (len(current) >= per_group or held + size > budget):
            groups.append(current)
            current, held = [], 0
        current.append(task)
        held += size
    groups.append(current)
    return groups


def stored_results(run_dir) -> list[RankResult]:
    """The results a run store kept of every rank of a run (``runstore.write_results``)."""
    from overlapscope.analyzer.store import runstore

    out = []
    for facts, tables in runstore.read_results(run_dir):
        meta = {**facts["meta"], "device_names": list(facts["meta"].get("device_names") or [])}
        out.append(RankResult(meta, facts["counts"], tables, tuple(facts["scripts"])))
    return out
