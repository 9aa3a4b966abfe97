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
from collections.abc import Callable

import msgspec

from overlapscope.analyzer import sql
from overlapscope.analyzer.measure import waits
from overlapscope.analyzer.store.runinfo import RunInfo
from overlapscope.analyzer.units import MS_DIGITS, NS_PER_MS, NS_PER_S
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
    # comm_ms split: the time it waited for its last peer to arrive, then its transfer
    # (waits.sql: the duration on the rank that arrived last); null where no peer is loaded
    wait_ms: float | None = None
    transfer_ms: float | None = None
    # exposed_ms split the same way: the part of it inside the wait (null where no peer is
    # loaded). What the late peer costs belongs to the straggler; rules about buckets,
    # units and bandwidth read exposed_transfer_ms.
    exposed_wait_ms: float | None = None
    busbw_gbps: float | None  # nccl-tests bus bandwidth of the transfer (its wait left out), GB/s
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

    @property
    def exposed_transfer_ms(self) -> float:
        """Its exposed time after its last peer arrived: what its bucket, unit or bandwidth costs."""
        return self.exposed_ms - self.exposed_wait_ms if self.exposed_wait_ms else self.exposed_ms


INTERNAL_FIELDS = ("start_ns", "launch_ts_ns", "ready_ns", "compute_before_ns", "compute_after_ns")
JSON_FIELDS = tuple(f.name for f in msgspec.structs.fields(Collective) if f.name not in INTERNAL_FIELDS)
# the JSON fields' values as a tuple in one C call: as_json builds a row in half the time of a
# dict of every field filtered (the stored buckets of a 1,024-rank run list two million)
_json_values = operator.attrgetter(*JSON_FIELDS)


def as_json(rows: list[Collective]) -> list[dict]:
    """The JSON rows: every field but the internal ones."""
    return [dict(zip(JSON_FIELDS, _json_values(r))) for r in rows]


def _bus_factors() -> Callable[[str, int], float | None]:
    """nccl-tests' bus factor of a (collective, group), None where it has none: computed
    once per pair (a run's rows share a few)."""
    factors: dict = {}

    def factor(collective: str, group: int) -> float | None:
        key = (collective, group)
        if key not in factors:
            try:
                factors[key] = bus_factor(collective, group)
            except ValueError:
                factors[key] = None
        return factors[key]
    return factor


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


# collectives.stats' columns that a row is built from, in the order of the loop below
_STATS_COLUMNS = ("rank", "step", "kind", "id", "phase", "collective", "bytes", "shard_only", "dtype", "group_size",
                  "microbatch", "offset_ns", "comm_ns", "exposed_ns", "inferred", "event_id", "ts_ns",
                  "cpu_launch_ts_ns", "ready_ns", "compute_before_ns", "compute_after_ns", "wait_ns", "exposed_wait_ns")
# (offset_ns, comm_ns, exposed_ns, wait_ns and exposed_wait_ns arrive in milliseconds: _ms)


# durations that become milliseconds (``<name>_ms``): integer nanoseconds from the SQL
_MS_COLUMNS = ("offset_ns", "comm_ns", "exposed_ns", "wait_ns", "exposed_wait_ns")


def _ms(column) -> list:
    """A column of nanoseconds as milliseconds to the nanosecond (``units.ms`` of each value),
    in one Arrow kernel for integer columns: ``n / 1e6`` is already ``round(n / 1e6, 6)`` for
    an integer n below 2**53 (the division is correctly rounded, and the nearest double to a
    number of 6 decimals rounds back to itself), so the 6 million ``round`` calls of a
    1,024-rank run are left out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_integer(column.type):
        return pc.divide(pc.cast(column, pa.float64()), float(NS_PER_MS)).to_pylist()
    return [None if v is None else round(v / NS_PER_MS, MS_DIGITS) for v in column.to_pylist()]


def compute(con, info: RunInfo) -> list[Collective]:
    """One row per collective transfer, in (rank, start) order.

    Read a batch of columns at a time through Arrow and built in one loop: 2.07 million rows
    of a 1,024-rank run took 13.0-15.9 s through a dict per row, 8.2-8.9 s with a loop over
    column lists; the milliseconds are now divided in Arrow before the loop."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sql.ensure(con, "collectives", run_id=info.run_id)
    query = "collectives.stats"
    if waits.peered(con, info.run_id):  # each transfer apart from its wait for the last peer
        waits.ensure(con, info.run_id)
        query = "collectives.stats_waited"
    defaults, world = info.manifest.group_sizes(), info.world_size
    orders = _unit_orders(info.manifest)
    factor = _bus_factors()
    out = []
    # one object per distinct value where rows share a few: kind, phase, dtype, id, and the
    # ints above 256 that Python does not share itself (rank, step, bytes: a bucket's size
    # repeats every step on every rank). 1,024 ranks: 2.07 million rows, about 600 bytes each
    names: dict = {}
    numbers: dict = {}  # apart from names: True == 1 and hash alike
    for part in sql.arrow_batches(con, query):  # never every row at once
        columns = dict(zip(part.schema.names, part.columns))
        batch = {name: (_ms(col) if name in _MS_COLUMNS else col.to_pylist()) for name, col in columns.items()}
        for column, shared in (("kind", names), ("id", names), ("phase", names), ("collective", names),
                               ("dtype", names), ("rank", numbers), ("step", numbers), ("bytes", numbers),
                               ("group_size", numbers)):
            batch[column] = list(map(shared.setdefault, batch[column], batch[column]))
        rows = len(batch["rank"])
        batch.setdefault("compute_after_ns", [None] * rows)  # a reduce stored before it was kept
        # the transfer: comm less the wait for the last peer (null where no peer was loaded),
        # in ns for the bus bandwidth and in ms for the row, as _ms makes them
        comm = columns["comm_ns"]
        transfer = pc.subtract(comm, pc.coalesce(columns["wait_ns"], pa.scalar(0, comm.type)))
        transfer_ns = transfer.to_pylist()
        transfer_ms = _ms(pc.if_else(pc.is_null(columns["wait_ns"]), pa.nulls(rows, transfer.type), transfer))
        for (rank, step, kind, id_, phase, collective, nbytes, shard_only, dtype, group, microbatch, offset_ms,
             comm_ms, exposed_ms, inferred, event_id, ts_ns, launch_ns, ready_ns, before_ns,
             after_ns, wait_ms, exposed_wait_ms, t_ns, t_ms) in zip(*(batch[c] for c in _STATS_COLUMNS),
                                                                    transfer_ns, transfer_ms):
            group = group or defaults.get(collective or "", world)
            if shard_only and nbytes and group:  # nccl-tests' all-gather size is the gathered output
                nbytes = numbers.setdefault(nbytes * group, nbytes * group)
            busbw = None
            if nbytes and t_ns > 0 and collective and group and group > 1:
                f = factor(collective, group)
                if f is not None:  # nccl-tests bus bandwidth of the transfer, GB/s
                    busbw = round(nbytes / (t_ns / NS_PER_S) * f / 1e9, 4)
            out.append(Collective(
                rank=rank, step=step, kind=kind, id=_unit_name(kind, id_, inferred, phase, orders),
                phase=phase, collective=collective, bytes=nbytes, dtype=dtype, group_size=group,
                microbatch=int(microbatch) if microbatch is not None else None,
                offset_ms=offset_ms, comm_ms=comm_ms, exposed_ms=exposed_ms, wait_ms=wait_ms, transfer_ms=t_ms,
                exposed_wait_ms=exposed_wait_ms, busbw_gbps=busbw,
                inferred=bool(inferred), event_id=event_id,
                start_ns=ts_ns, launch_ts_ns=launch_ns, ready_ns=ready_ns,
                compute_before_ns=before_ns or 0, compute_after_ns=after_ns,
            ))
    return out
