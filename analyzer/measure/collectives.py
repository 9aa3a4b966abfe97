"""Per-collective attribution: ``sql/collectives.sql`` as typed rows.

One row per transfer (a GPU collective kernel or a gloo span): its DDP bucket or
FSDP unit and phase, bytes, comm and exposed time, and bus bandwidth; the fields
are ``Collective``'s. The SQL attributes; this module finishes what needs the
manifest: group sizes where the trace gives none (gloo), an all-gather's
shard-only size times its group, nccl-tests bus bandwidth, and FSDP1's unnamed
units named in the manifest's order.

``compute`` returns a run's rows as columns (``Collectives``: about 200 bytes a
row, where a ``Collective`` object and its numbers took about 600), read row by
row through short-lived views; the rows are read only but for the model's two
prediction columns, which ``predict.exposure`` fills in place.
"""

from __future__ import annotations

import array
import itertools
import operator
from collections.abc import Callable, Sequence

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


def as_json(rows, start: int = 0, stop: int | None = None) -> list[dict]:
    """The JSON rows of ``rows[start:stop]`` (a ``Collectives``, read column by column, or a
    list of rows): every field but the internal ones."""
    if isinstance(rows, Collectives):
        return [dict(zip(JSON_FIELDS, values)) for values in zip(*(rows.values(n, start, stop) for n in JSON_FIELDS))]
    return [dict(zip(JSON_FIELDS, _json_values(r))) for r in rows[start:stop]]


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


# Columns of ``Collectives``, by how a value is held: integers (array 'q', a null as NULL_INT),
# numbers (array 'd', a null as NaN: every figure here is a quotient of integers, never NaN),
# texts (lists of shared strings), flags (array 'b').
NULL_INT = -(2 ** 63)
_INTS = ("rank", "event_id", "start_ns", "compute_before_ns")
_NULLABLE_INTS = ("step", "bytes", "group_size", "microbatch", "launch_ts_ns", "ready_ns", "compute_after_ns")
_FLOATS = ("offset_ms", "comm_ms", "exposed_ms", "wait_ms", "transfer_ms", "exposed_wait_ms", "busbw_gbps",
           "predicted_comm_ms", "predicted_exposed_ms")
_TEXTS = ("kind", "id", "phase", "collective", "dtype")
_FLAGS = ("inferred",)
FIELDS = tuple(f.name for f in msgspec.structs.fields(Collective))
assert set(FIELDS) == set(_INTS + _NULLABLE_INTS + _FLOATS + _TEXTS + _FLAGS), "a Collective field without a column"


def _plain(name: str):  # a column whose values are the fields' (no null to translate)
    def get(self):
        return self.table.columns[name][self.index]
    return property(get)


def _nullable_int(name: str):
    def get(self):
        v = self.table.columns[name][self.index]
        return None if v == NULL_INT else v
    return property(get)


def _float(name: str):
    def get(self):
        v = self.table.columns[name][self.index]
        return None if v != v else v
    return property(get)


def _flag(name: str):
    def get(self):
        return bool(self.table.columns[name][self.index])
    return property(get)


_GETTERS = {**{n: _plain(n) for n in _INTS}, **{n: _nullable_int(n) for n in _NULLABLE_INTS},
            **{n: _float(n) for n in _FLOATS}, **{n: _plain(n) for n in _TEXTS}, **{n: _flag(n) for n in _FLAGS}}

# One collective of a ``Collectives``: its index there, read field by field from the columns
# (the fields of ``Collective``, read only). Made as a row is asked for and gone after: 32
# bytes and its index (an int, 28 more) while a caller holds it, against about 600 for a
# ``Collective`` and its numbers.
# gc=False: it refers only to its table, which refers to none of its rows.
CollectiveRow = msgspec.defstruct(
    "CollectiveRow", [("table", object), ("index", int)], frozen=True, gc=False,
    module=__name__, namespace={**_GETTERS, "exposed_transfer_ms": Collective.exposed_transfer_ms,
                                "__doc__": "One collective of a ``Collectives`` (the fields of ``Collective``)."})


class Collectives(Sequence):
    """A run's collective transfers as columns, one per field of ``Collective``, in (rank,
    start) order; its items are ``CollectiveRow`` views (read as a list of ``Collective``).

    The run's two million collectives of 1,024 ranks take about 200 bytes each here, against
    about 600 as ``Collective`` objects with their numbers. The model's predictions are
    filled in place (``set``)."""

    __slots__ = ("columns", "size")

    def __init__(self, columns: dict, size: int):
        self.columns = columns
        self.size = size

    @classmethod
    def of(cls, rows) -> "Collectives":
        """``rows`` (``Collective`` objects or rows alike) as columns."""
        rows = list(rows)
        columns: dict = {}
        for n in FIELDS:
            values = [getattr(r, n) for r in rows]
            if n in _TEXTS:
                columns[n] = values
            elif n in _FLOATS:
                columns[n] = _float_column(values)
            elif n in _FLAGS:
                columns[n] = array.array("b", [bool(v) for v in values])
            else:
                columns[n] = array.array("q", [NULL_INT if v is None else v for v in values])
        return cls(columns, len(rows))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [CollectiveRow(self, k) for k in range(*i.indices(self.size))]
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(i)
        return CollectiveRow(self, i)

    def __iter__(self):
        return map(CollectiveRow, itertools.repeat(self, self.size), range(self.size))

    # equal and hashed as itself (object's): a row (CollectiveRow) is equal to another, and
    # hashes alike, where both are the same row of the same table; ``materialized`` compares contents

    def set(self, name: str, values: list) -> None:
        """Column ``name`` (a number: None kept as NaN) to ``values``, one per row."""
        assert name in _FLOATS and len(values) == self.size, name
        self.columns[name] = array.array("d", [_NAN if v is None else v for v in values])

    def values(self, name: str, start: int = 0, stop: int | None = None) -> list:
        """Column ``name`` of rows ``start:stop`` as Python values (None for a null)."""
        col = self.columns[name][start:stop]
        if name in _TEXTS:
            return col
        values = col.tolist()
        if name in _NULLABLE_INTS:
            return [None if v == NULL_INT else v for v in values]
        if name in _FLOATS:
            return [None if v != v else v for v in values]
        if name in _FLAGS:
            return [bool(v) for v in values]
        return values

    def materialized(self, start: int = 0, stop: int | None = None) -> list[Collective]:
        """Rows ``start:stop`` as ``Collective`` objects."""
        columns = [self.values(n, start, stop) for n in FIELDS]
        return [Collective(**dict(zip(FIELDS, vals))) for vals in zip(*columns)]


_NAN = float("nan")


def table_of(rows) -> Collectives:
    """``rows`` as columns: a ``Collectives`` as it is, a list of rows copied into one."""
    return rows if isinstance(rows, Collectives) else Collectives.of(rows)


def _int_column(column, null: int = NULL_INT) -> array.array:
    """An Arrow integer column as array 'q', a null as ``null``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_integer(column.type):  # a column of nulls typed as text by the SQL; a number
        column = pc.cast(column, pa.int64())
    if column.null_count:
        column = pc.fill_null(column, pa.scalar(null, column.type))
    return array.array("q", column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False).tobytes())


def _float_column(values: list) -> array.array:
    return array.array("d", [_NAN if v is None else v for v in values])


def compute(con, info: RunInfo) -> Collectives:
    """One row per collective transfer, in (rank, start) order, as columns (``Collectives``).

    Read a batch of columns at a time through Arrow; the columns the manifest finishes (the
    group, the bytes, the bus bandwidth, FSDP1's unit names) in one loop, the rest copied as
    they come. 2.07 million rows of a 1,024-rank run took 13.0-15.9 s through a dict per
    row, 8.2-8.9 s with a loop over column lists."""
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
    columns: dict = {n: array.array("q") for n in _INTS + _NULLABLE_INTS}
    columns.update({n: array.array("d") for n in _FLOATS})
    columns.update({n: [] for n in _TEXTS})
    columns["inferred"] = array.array("b")
    names: dict = {}  # one object per distinct text: rows share a few
    size = 0
    for part in sql.arrow_batches(con, query):  # never every row at once
        got = dict(zip(part.schema.names, part.columns))
        rows = part.num_rows
        texts = {n: list(map(names.setdefault, col, col)) for n, col in
                 ((n, got[n].to_pylist()) for n in ("kind", "id", "phase", "collective", "dtype"))}
        # the transfer: comm less the wait for the last peer (null where no peer was loaded),
        # in ns for the bus bandwidth and in ms for the row, as _ms makes them
        comm = got["comm_ns"]
        transfer = pc.subtract(comm, pc.coalesce(got["wait_ns"], pa.scalar(0, comm.type)))
        transfer_ns = transfer.to_pylist()
        # what the manifest finishes, row by row
        groups, nbytes_out, busbws, ids = [], [], [], []
        for kind, id_, phase, collective, nbytes, shard_only, group, inferred, t_ns in zip(
                texts["kind"], texts["id"], texts["phase"], texts["collective"], got["bytes"].to_pylist(),
                got["shard_only"].to_pylist(), got["group_size"].to_pylist(), got["inferred"].to_pylist(),
                transfer_ns):
            group = group or defaults.get(collective or "", world)
            if shard_only and nbytes and group:  # nccl-tests' all-gather size is the gathered output
                nbytes = nbytes * group
            busbw = None
            if nbytes and t_ns > 0 and collective and group and group > 1:
                f = factor(collective, group)
                if f is not None:  # nccl-tests bus bandwidth of the transfer, GB/s
                    busbw = round(nbytes / (t_ns / NS_PER_S) * f / 1e9, 4)
            groups.append(NULL_INT if group is None else group)
            nbytes_out.append(NULL_INT if nbytes is None else nbytes)
            busbws.append(_NAN if busbw is None else busbw)
            named = _unit_name(kind, id_, inferred, phase, orders)
            ids.append(names.setdefault(named, named))
        for n in ("kind", "phase", "collective", "dtype"):
            columns[n].extend(texts[n])
        columns["id"].extend(ids)
        columns["group_size"].extend(groups)
        columns["bytes"].extend(nbytes_out)
        columns["busbw_gbps"].extend(busbws)
        for n, src in (("rank", "rank"), ("event_id", "event_id"), ("start_ns", "ts_ns"),
                       ("step", "step"), ("microbatch", "microbatch"),
                       ("launch_ts_ns", "cpu_launch_ts_ns"), ("ready_ns", "ready_ns")):
            columns[n].extend(_int_column(got[src]))
        columns["compute_before_ns"].extend(_int_column(got["compute_before_ns"], 0))  # none before its launch: 0
        after = got.get("compute_after_ns")  # a reduce stored before it was kept: none
        columns["compute_after_ns"].extend(_int_column(after) if after is not None else
                                           array.array("q", [NULL_INT]) * rows)
        columns["inferred"].extend(array.array("b", [bool(v) for v in got["inferred"].to_pylist()]))
        for n in _MS_COLUMNS:
            columns[n.replace("_ns", "_ms")].extend(_float_column(_ms(got[n])))
        columns["transfer_ms"].extend(_float_column(
            _ms(pc.if_else(pc.is_null(got["wait_ns"]), pa.nulls(rows, transfer.type), transfer))))
        size += rows
    for n in ("predicted_comm_ms", "predicted_exposed_ms"):
        columns[n] = array.array("d", [_NAN]) * size
    return Collectives(columns, size)
