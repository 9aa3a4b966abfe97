"""Load per-rank traces into a store: resolve inputs, decode ranks in parallel, insert.

Ranks are decoded in worker processes (msgspec holds the GIL, so threads would
not help); each worker reads its own file and sends back Arrow tables, and dies
with its parent (a killed load leaves no worker behind). Nothing is stored unless
every file decodes and the files make one run.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from overlapscope.analyzer.ingest.decode import DETAILS, RankData, decode_source
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest.inputs import Inputs, TraceSource, resolve
from overlapscope.analyzer.ingest.limits import Limits, from_env as limits_from_env
from overlapscope.contract.manifest import Manifest


@dataclass
class Loaded:
    """A run in a store: the connection, its id, and the manifest if one came with it."""

    con: object  # duckdb.DuckDBPyConnection
    run_id: int
    manifest: Manifest | None


def _workers(n_files: int, workers: int | None) -> int:
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(n_files, workers or available))


def _fork_is_safe() -> bool:
    """Whether worker processes may be forked from this one.

    Forking a process that runs other threads can deadlock the child (a lock
    held by a thread that does not exist there). DuckDB starts native threads
    when a connection opens, and the dashboard serves from threads; a fork
    server or spawn would re-import the caller's main module, which Streamlit
    and test runners do not allow. So: fork before DuckDB starts, else decode
    in this process (the CLI opens its store after forking, see load()).
    """
    return sys.platform.startswith("linux") and "duckdb" not in sys.modules and threading.active_count() == 1


def _die_with_parent() -> None:
    """Worker initializer: the kernel kills this worker when the parent dies (Linux),
    so a kill -9 of a load leaves no worker blocked on its pipe."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)
    except (OSError, AttributeError):  # not Linux: workers end when their pipe closes
        pass


def decode_all(sources: list[TraceSource], detail: str = "full", workers: int | None = None,
               while_waiting=None, on_decoded=None, limits: Limits | None = None) -> list[RankData]:
    """Decode every source; the first bad file stops the load with its error.

    ``while_waiting`` runs in this process while the workers decode (opening
    the store overlaps with parsing instead of following it); ``on_decoded(done,
    total)`` is called as each file is decoded (a progress bar).
    """
    total = len(sources)
    report = on_decoded or (lambda done, total: None)
    limits = limits or limits_from_env()
    n = _workers(total, workers) if _fork_is_safe() else 1
    if n == 1:
        ranks = []
        for s in sources:
            ranks.append(decode_source(s, detail, limits=limits))
            report(len(ranks), total)
        if while_waiting:
            while_waiting()
        return ranks
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"),
                             initializer=_die_with_parent) as pool:
        futures = [pool.submit(decode_source, s, detail, True, limits) for s in sources]
        if while_waiting:
            while_waiting()
        for done, f in enumerate(as_completed(futures), start=1):
            if f.exception() is not None:
                for p in futures:
                    p.cancel()
                raise f.exception()
            report(done, total)
        return [f.result() for f in futures]


def _differ(ranks: list[RankData], key: str, what: str) -> None:
    """Refuse files that disagree on ``key`` as different runs, naming two of them."""
    seen = [r.meta for r in ranks if r.meta.get(key) is not None]
    if not seen:
        return
    first = seen[0]
    other = next((m for m in seen if m[key] != first[key]), None)
    if other is not None:
        raise InputError(other["file"], f"a different run: {what} {other[key]} here, {first[key]} in {first['file']}")


def check_ranks(ranks: list[RankData], manifest: Manifest | None = None, manifest_source: str | None = None) -> None:
    """The files make one run: one file per rank, the same world size, backend,
    device kind and parallelism, and ranks inside the world size; a manifest that
    came with them describes the same job."""
    seen: dict[int, str] = {}
    for r in ranks:
        rank, file = r.meta["rank"], r.meta["file"]
        if rank in seen:
            raise InputError(file, f"rank {rank} is also claimed by {seen[rank]}")
        seen[rank] = file
    _differ(ranks, "world_size", "world size")
    _differ(ranks, "device_kind", "device kind (cpu or gpu)")
    _differ(ranks, "backend", "backend")
    _differ(ranks, "parallelism_seen", "parallelism")
    for r in ranks:
        ws = r.meta["world_size"]
        if ws and not 0 <= r.meta["rank"] < ws:
            raise InputError(r.meta["file"], f"rank {r.meta['rank']} is outside the world size {ws}")
    if manifest is None:
        return
    first = ranks[0].meta
    where = manifest_source or "manifest.json"
    if manifest.world_size and first["world_size"] and manifest.world_size != first["world_size"]:
        raise InputError(where, f"a different run: the manifest says world size {manifest.world_size}, "
                                f"{first['file']} says {first['world_size']}")
    if manifest.backend and first["backend"] and manifest.backend != first["backend"]:
        raise InputError(where, f"a different run: the manifest says backend {manifest.backend}, "
                                f"{first['file']} says {first['backend']}")
    seen_par = next((r.meta for r in ranks if r.meta.get("parallelism_seen")), None)
    if manifest.parallelism and seen_par and \
            (manifest.parallelism == "ddp") != (seen_par["parallelism_seen"] == "ddp"):
        raise InputError(where, f"a different run: the manifest says {manifest.parallelism}, "
                                f"{seen_par['file']} shows {seen_par['parallelism_seen']}")


@dataclass
class Decoded:
    """A run decoded and checked, not stored yet: what ``store`` inserts in one transaction."""

    inputs: Inputs
    ranks: list[RankData]
    source: str  # the input paths, space separated


def decode(paths: list[str], detail: str = "full", workers: int | None = None, on_decoded=None,
           while_waiting=None, limits: Limits | None = None) -> Decoded:
    """Resolve, decode and check the traces at ``paths`` (no store involved).

    A server decodes a pushed run here, outside its single writer, and hands the
    result to ``store``; ``while_waiting`` runs while worker processes decode.
    """
    if detail not in DETAILS:
        raise ValueError(f"detail must be one of {DETAILS}")
    limits = limits or limits_from_env()
    inputs: Inputs = resolve(paths, limits)
    ranks = decode_all(inputs.sources, detail=detail, workers=workers, while_waiting=while_waiting,
                       on_decoded=on_decoded, limits=limits)
    check_ranks(ranks, inputs.manifest, inputs.manifest_source)
    ranks.sort(key=lambda r: r.meta["rank"])
    return Decoded(inputs, ranks, " ".join(paths))


def store(con, decoded: Decoded, name: str | None = None, tags: dict | None = None, after=None,
          pushed_by: str | None = None) -> int:
    """Insert a decoded run into ``con`` in one transaction (store.database.insert_run); its id."""
    from overlapscope.analyzer.store import database

    return database.insert_run(con, decoded.ranks, name or decoded.source, decoded.source, decoded.inputs.manifest,
                               tags, after=after, manifest_text=decoded.inputs.manifest_text, pushed_by=pushed_by)


def load(paths: list[str], con=None, name: str | None = None, tags: dict | None = None,
         detail: str = "full", workers: int | None = None, on_decoded=None, open_con=None, after=None,
         limits: Limits | None = None) -> Loaded:
    """Load traces into ``con`` (a new in-memory store when None) as one run.

    ``detail`` (decode.DETAILS) chooses how much of each trace is kept: the
    catalog keeps everything; one-shot commands keep what their analysis reads.
    ``open_con`` opens the store instead (a catalog file) once the workers run:
    an open DuckDB connection makes forking them unsafe. ``after(con, run_id)``
    runs inside the insert's transaction (store.database.insert_run).
    """
    opened = {"con": con}

    def open_store():  # duckdb is imported here, after the workers have forked
        from overlapscope.analyzer.store import database

        if opened["con"] is None:
            opened["con"] = open_con() if open_con else database.connect()

    decoded = decode(paths, detail=detail, workers=workers, on_decoded=on_decoded, while_waiting=open_store,
                     limits=limits)
    run_id = store(opened["con"], decoded, name, tags, after=after)
    return Loaded(opened["con"], run_id, decoded.inputs.manifest)
