"""Per-collective attribution: ``sql/collectives.sql`` as typed rows.

One ``Collective`` per transfer (a GPU collective kernel or a gloo span): its
DDP bucket or FSDP unit and phase, bytes, comm and exposed time, and bus
bandwidth. The SQL attributes; this module finishes what needs the manifest:
group sizes where the trace gives none (gloo), an all-gather's shard-only size
times its group, nccl-tests bus bandwidth, and FSDP1's unnamed units named in
the manifest's order. Rows are immutable: the model's predictions come back as
new rows (``predict.exposure``).
"""

from __future__ import annotations

import operator

import msgspec

from overlapscope.analyzer import sql
from overlapscope.analyzer.store.runinfo import RunInfo
from overlapscope.analyzer.units import NS_PER_S, ms
from overlapscope.contract.collectives import bus_factor
from overlapscope.contract.manifest import Manifest


class Collective(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One collective transfer (the ``collectives`` rows of ``buckets --json``).

    ``gc=False``: it holds only numbers and strings (no cycle can pass through it), and a
    256-rank run holds half a million of them, which the cyclic collector would otherwise
    walk on every full collection."""

    rank: int
    step: int | None
    kind: str  # ddp_bucket, fsdp_unit, other
    id: str | None  # bucket index, unit FQN ("" the root), or the collective for 'other'
    phase: str  # forward_allgather, backward_allgather, reduce_scatter, allreduce, or the collective
    collective: str | None  # canonical kind: all_reduce, all_gather, reduce_scatter, ...
    bytes: int | None  # the full buffer (nccl-tests' size)
    dtype: str | None
    group_size: int | None
    microbatch: int | None
    offset_ms: float | None  # start within its step's window
    comm_ms: float
    exposed_ms: float
    busbw_gbps: float | None  # nccl-tests bus bandwidth, GB/s
    inferred: bool  # id read from the order of the collectives, not from an annotation
    event_id: int
    predicted_comm_ms: float | None = None
    predicted_exposed_ms: float | None = None
    # On the trace clock, for the model's replays; not in the JSON.
    start_ns: int = 0
    launch_ts_ns: int | None = None
    ready_ns: int | None = None  # GPU: when the compute launched before it had finished
    compute_before_ns: int = 0  # compute before its launch (collectives.sql): windows are differences
    compute_after_ns: int | None = None  # its step's compute after its launch (None: stored before it was kept)


INTERNAL_FIELDS = ("start_ns", "launch_ts_ns", "ready_ns", "compute_before_ns", "compute_after_ns")
JSON_FIELDS = tuple(f.name for f in msgspec.structs.fields(Collective) if f.name not in INTERNAL_FIELDS)
# the JSON fields' values as a tuple in one C call: as_json builds a row in half the time of a
# dict of every field filtered (the stored buckets of a 1,024-rank run list two million)
_json_values = operator.attrgetter(*JSON_FIELDS)


def as_json(rows: list[Collective]) -> list[dict]:
    """The JSON rows: every field but the internal ones."""
    return [dict(zip(JSON_FIELDS, _json_values(r))) for r in rows]


def _busbw_gbps(nbytes: int | None, comm_ns: int, collective: str | None, group: int | None) -> float | None:
    if not (nbytes and comm_ns > 0 and collective and group and group > 1):
        return None
    try:
        factor = bus_factor(collective, group)
    except ValueError:
        return None
    return round(nbytes / (comm_ns / NS_PER_S) * factor / 1e9, 4)


def _unit_orders(manifest: Manifest) -> dict[str, list[str]]:
    """FSDP1 does not name its units: the k-th collective of a phase is the k-th unit in
    the manifest's order (forward gathers), its reverse among the resharded units
    (backward gathers), or its reverse (reduce-scatters, HSDP all-reduces)."""
    units = manifest.units
    return {
        "forward_allgather": [u.name for u in units],
        "backward_allgather": [u.name for u in reversed(units) if u.reshard_after_forward],
        "reduce_scatter": [u.name for u in reversed(units)],
        "allreduce": [u.name for u in reversed(units)],
    }


def _unit_name(kind: str, id_: str | None, inferred: bool, phase: str, orders: dict) -> str | None:
    if kind != "fsdp_unit" or not inferred or not str(id_).startswith("unit#"):
        return id_
    order = orders.get(phase, [])
    k = int(id_[5:])
    return order[k] if k < len(order) else id_


def compute(con, info: RunInfo) -> list[Collective]:
    """One row per collective transfer, in (rank, start) order."""
    sql.ensure(con, "collectives", run_id=info.run_id)
    defaults = info.manifest.group_sizes()
    orders = _unit_orders(info.manifest)
    out = []
    names: dict = {}  # one str object per distinct kind, phase, dtype, id (hundreds of thousands of rows share a few)
    same = lambda v: v if v is None else names.setdefault(v, v)  # noqa: E731
    for r in sql.stream(con, "collectives.stats"):  # batches: never every row as a dict at once
        group = r["group_size"] or defaults.get(r["collective"] or "", info.world_size)
        nbytes = r["bytes"]
        if r["shard_only"] and nbytes and group:
            nbytes *= group  # nccl-tests' all-gather size is the gathered output
        out.append(Collective(
            rank=r["rank"], step=r["step"], kind=same(r["kind"]),
            id=same(_unit_name(r["kind"], r["id"], r["inferred"], r["phase"], orders)),
            phase=same(r["phase"]), collective=same(r["collective"]), bytes=nbytes, dtype=same(r["dtype"]),
            group_size=group,
            microbatch=int(r["microbatch"]) if r["microbatch"] is not None else None,
            offset_ms=ms(r["offset_ns"]), comm_ms=ms(r["comm_ns"]), exposed_ms=ms(r["exposed_ns"]),
            busbw_gbps=_busbw_gbps(nbytes, r["comm_ns"], r["collective"], group),
            inferred=bool(r["inferred"]), event_id=r["event_id"],
            start_ns=r["ts_ns"], launch_ts_ns=r["cpu_launch_ts_ns"], ready_ns=r["ready_ns"],
            compute_before_ns=r["compute_before_ns"] or 0, compute_after_ns=r.get("compute_after_ns"),
        ))
    return out
