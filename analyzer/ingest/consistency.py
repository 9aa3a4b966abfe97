"""The files given as one run make one run: one file per rank, the same job.

Checked on each rank's facts (``meta``), whether the ranks were decoded into one
store (``load``) or mapped by workers (``engine``): files that disagree on world
size, device kind, backend, parallelism or a process group's members, or a manifest
of another job, or whose clocks put them hours apart, are refused naming both files.
"""

from __future__ import annotations

import json

from overlapscope.analyzer.errors import InputError
from overlapscope.contract.manifest import Manifest
from overlapscope.contract.names import MANIFEST_FILE


def _differ(ranks: list, key: str, what: str) -> None:
    """Refuse files that disagree on ``key`` as different runs, naming two of them."""
    seen = [r.meta for r in ranks if r.meta.get(key) is not None]
    if not seen:
        return
    first = seen[0]
    other = next((m for m in seen if m[key] != first[key]), None)
    if other is not None:
        raise InputError(other["file"], f"a different run: {what} {other[key]} here, {first[key]} in {first['file']}")


# The ranks of one run start profiling within seconds of each other (one schedule, one step
# count); traces whose clocks say more than this apart are of different runs.
APART_NS = 3600 * 10**9


def _apart(ranks: list) -> None:
    """Refuse files whose wall clocks put them hours apart: the profiler's base time where
    Kineto writes one, else the first event where the ts are on the epoch's clock."""
    for key, what in (("base_time_ns", "baseTimeNanoseconds"), ("epoch_start_ns", "first event")):
        seen = sorted((r.meta[key], r.meta["file"]) for r in ranks if r.meta.get(key) is not None)
        if len(seen) > 1 and seen[-1][0] - seen[0][0] > APART_NS:
            hours = (seen[-1][0] - seen[0][0]) / 3.6e12
            raise InputError(seen[-1][1], f"a different run: its {what} is {hours:,.1f} h after {seen[0][1]}'s "
                                          f"(the ranks of one run start within {APART_NS // 3_600_000_000_000} h "
                                          "of each other)")


def _process_groups(meta: dict) -> dict:
    """The process groups a file's ``distributedInfo.pg_config`` lists: name -> (description,
    members); nothing for a pg_config of another shape (it is not required)."""
    try:
        groups = json.loads(meta.get("pg_config") or "[]")
    except ValueError:
        return {}
    if not isinstance(groups, list):
        return {}
    out = {}
    for g in groups:
        if isinstance(g, dict) and isinstance(g.get("pg_name"), str) and isinstance(g.get("ranks"), list):
            out[g["pg_name"]] = (g.get("pg_desc"), sorted(r for r in g["ranks"] if isinstance(r, int)))
    return out


def _groups_differ(ranks: list) -> None:
    """A process group is the job's: each rank lists the groups it is in (pg_config), and a
    group named alike in two files must have the same members there."""
    seen: dict[str, tuple] = {}
    for r in ranks:
        for name, group in _process_groups(r.meta).items():
            first = seen.setdefault(name, (group, r.meta["file"]))
            if first[0] != group:
                (desc, members), ((first_desc, first_members), first_file) = group, first
                raise InputError(r.meta["file"], f"a different run: process group {name} is {desc} of ranks "
                                                 f"{members} here, {first_desc} of ranks {first_members} in "
                                                 f"{first_file}")


def claim(claims: dict[int, str], meta: dict) -> None:
    """Record that ``meta``'s file holds its rank in ``claims`` (rank -> file); a second
    file of one rank is an error (a worker's store, which holds its group's ranks by rank,
    checks each rank as it comes, before the whole run is checked)."""
    rank, file = meta["rank"], meta["file"]
    if rank in claims:
        raise InputError(file, f"rank {rank} is also claimed by {claims[rank]}")
    claims[rank] = file


def check_ranks(ranks: list, manifest: Manifest | None = None, manifest_source: str | None = None) -> None:
    """The files make one run: one file per rank, the same world size, backend,
    device kind, parallelism and process groups, and ranks inside the world size; a
    manifest that came with them describes the same job."""
    claims: dict[int, str] = {}
    for r in ranks:
        claim(claims, r.meta)
    _differ(ranks, "world_size", "world size")
    _differ(ranks, "device_kind", "device kind (cpu or gpu)")
    _differ(ranks, "backend", "backend")
    _differ(ranks, "parallelism_seen", "parallelism")
    _groups_differ(ranks)
    _apart(ranks)
    for r in ranks:
        ws = r.meta["world_size"]
        if ws and not 0 <= r.meta["rank"] < ws:
            raise InputError(r.meta["file"], f"rank {r.meta['rank']} is outside the world size {ws}")
    if manifest is None:
        return
    first = ranks[0].meta
    where = manifest_source or MANIFEST_FILE
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


