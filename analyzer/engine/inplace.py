"""Reduce in place: a rank's per-rank tables written next to its trace, by the job itself.

A 1,024-rank job can reduce itself: at the end of profiling each rank runs the map
on its own trace (the tracer's ``TraceConfig(reduce_in_place=True)``, or
``overlapscope reduce-rank TRACE`` on its node), in parallel on the job's own
nodes, and writes ``<trace>.overlapscope/``: the rank's raw tables and results as
the run store keeps them (``store/runstore.py``, one rank), with a stamp of what
they were made from. ``ingest`` then collects these (copies the files, reads the
results) instead of decoding the trace again, when the stamp matches: the trace's
size and modification time, this overlapscope's version, and the run's parallelism.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec

from overlapscope.analyzer import version
from overlapscope.analyzer.engine.rank import RankResult, RankTask, map_group, map_rank, stored_results, tasks_for
from overlapscope.analyzer.ingest.inputs import TraceSource

SUFFIX = ".overlapscope"
STAMP = "stamp.json"
FORMAT = 1


def folder_of(source: TraceSource) -> Path | None:
    """Where a trace's reduced tables go (None for a zip member or a URI: read-only places)."""
    if source.member is not None or "://" in source.path:
        return None
    return Path(source.path + SUFFIX)


def _stamp(source: TraceSource, parallelism: str | None) -> dict:
    info = os.stat(source.path)
    return {"format": FORMAT, "overlapscope": version(), "trace": os.path.basename(source.path),
            "size": info.st_size, "mtime_ns": info.st_mtime_ns, "parallelism": parallelism}


def reduce_in_place(task: RankTask) -> Path:
    """Map one rank (the full detail) and write its tables next to its trace; the folder."""
    folder = folder_of(task.source)
    if folder is None:
        raise ValueError(f"{task.source.display}: a trace in an archive or behind a URI cannot be reduced in place")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        map_rank(RankTask(task.source, "full", task.limits, task.parallelism, out_dir=str(partial),
                          memory_limit_bytes=task.memory_limit_bytes, spill_dir=str(partial / ".spill"),
                          threads=task.threads))
        shutil.rmtree(partial / ".spill", ignore_errors=True)
        (partial / STAMP).write_bytes(msgspec.json.encode(_stamp(task.source, task.parallelism)))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)  # whole or not there
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder


def _stamped(folder: Path) -> bool:
    try:
        return (folder / STAMP).is_file()
    except OSError:  # the trace's own name is near the limit: a folder beside it cannot be named
        return False


def collect(task: RankTask) -> RankResult | None:
    """The rank's tables reduced in place, when they were made from this very trace by this
    overlapscope for this run (else None: the rank is mapped as usual). With ``task.out_dir``
    (a run store's staging folder) its files are copied there."""
    folder = folder_of(task.source)
    if task.detail != "full" or folder is None or not _stamped(folder):
        return None  # the lighter loads of analyze, buckets and diagnose map the trace itself
    try:
        stamp = msgspec.json.decode((folder / STAMP).read_bytes())
        if stamp != _stamp(task.source, task.parallelism):
            return None
        (result,) = stored_results(folder)
    except (OSError, ValueError, msgspec.DecodeError):
        return None
    if task.out_dir:
        for part in ("raw", "rank"):
            shutil.copytree(folder / part, Path(task.out_dir) / part, dirs_exist_ok=True)
    return result


def map_or_collect(task: RankTask) -> RankResult:
    """What the Ray engine runs per rank: the tables reduced in place when they are there, else the map."""
    return _handed_over(collect(task) or map_rank(task), task)


def map_or_collect_group(tasks: list[RankTask], on_rank=None) -> list[RankResult]:
    """What a local worker runs per group: each rank's tables reduced in place where they
    are there, the others mapped together (rank.map_group); in the group's order.
    ``on_rank()``: called as each rank is collected or decoded (a group run in the map's
    own process reports its progress rank by rank)."""
    collected = [collect(t) for t in tasks]
    if on_rank:
        for _ in range(len(tasks) - collected.count(None)):
            on_rank()
    mapped = iter(map_group([t for t, c in zip(tasks, collected) if c is None], on_rank)
                  if None in collected else [])
    return [_handed_over(c if c is not None else next(mapped), t) for c, t in zip(collected, tasks)]


def _handed_over(result: RankResult, task: RankTask) -> RankResult:
    """What goes back to the map's parent: with a staging folder (written by the map or
    copied by ``collect``) or a results folder, the facts only; the tables are in the
    folder's files, and the reduce reads them back once the workers end."""
    if task.out_dir:
        return result.on_disk(task.out_dir)
    if task.results_dir:
        from overlapscope.analyzer.store import runstore

        runstore.write_results(task.results_dir, result)
        return result.on_disk(task.results_dir)
    return result


def reduce_paths(paths: list[str], parallelism: str | None = None, limits=None) -> list[Path]:
    """Reduce in place every trace file at ``paths`` (one after another, each in this
    process: on a node of the job, each rank reduces its own); the folders written.
    The run's parallelism: ``parallelism``, else the manifest beside the traces."""
    from overlapscope.analyzer.errors import InputError
    from overlapscope.analyzer.ingest.inputs import resolve
    from overlapscope.analyzer.ingest.limits import from_env

    limits = limits or from_env()
    inputs = resolve(paths, limits)
    if any(folder_of(s) is None for s in inputs.sources):
        bad = next(s for s in inputs.sources if folder_of(s) is None)
        raise InputError(bad.display, "only a trace file on this machine's disk can be reduced in place")
    if parallelism is None and inputs.manifest is not None:
        parallelism = inputs.manifest.parallelism
    tasks = tasks_for(inputs, "full", limits, workers=1)
    try:
        return [reduce_in_place(RankTask(t.source, t.detail, t.limits, parallelism,
                                         memory_limit_bytes=t.memory_limit_bytes, threads=t.threads)) for t in tasks]
    finally:
        inputs.release()
