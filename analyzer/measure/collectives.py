"""Per-collective attribution: ``sql/collectives.sql`` as typed rows.

One row per transfer (a GPU collective kernel or a gloo span): its DDP bucket or
FSDP unit and phase, bytes, comm and exposed time, and bus bandwidth; the fields
are ``Collective``'s. The SQL attributes; this module finishes what needs the
manifest: group sizes where the trace gives none (gloo), an all-gather's
shard-only size times its group, nccl-tests bus bandwidth, and FSDP1's unnamed
units named in the manifest's order.

``compute`` returns a run's rows as columns (``Collectives``: about 170 bytes a
row, where a ``Collective`` object and its numbers took about 600), built with NumPy
a batch at a time and read row by row through short-lived views; the rows are read
only but for the model's two prediction columns, which ``predict.exposure`` fills in
place.
"""

from __future__ import annotations

import array
import itertools
import operator
from collections.abc import Callable, Sequence

import msgspec

from overlapscope.analyzer import sql
from overlapscope.analyzer.measure import mapped, waits
from overlapscope.analyzer.measure.blocks import ROWS_PER_BLOCK
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


# Columns of ``Collectives``, by how a value is held: integers (array 'q', a null as NULL_INT),
# numbers (array 'd', a null as NaN: every figure here is a quotient of integers, never NaN),
# texts (codes into the table's ``texts``, array 'H', or 'I' past 65,536 distinct texts: 2
# bytes a row where a list's pointer took 8), flags (array 'b').
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


def _text(name: str):
    def get(self):
        table = self.table
        return table.texts[table.columns[name][self.index]]
    return property(get)


_GETTERS = {**{n: _plain(n) for n in _INTS}, **{n: _nullable_int(n) for n in _NULLABLE_INTS},
            **{n: _float(n) for n in _FLOATS}, **{n: _text(n) for n in _TEXTS}, **{n: _flag(n) for n in _FLAGS}}

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

    The run's two million collectives of 1,024 ranks take about 170 bytes each here, against
    about 600 as ``Collective`` objects with their numbers. Text columns hold codes into
    ``texts`` (the run's distinct texts, None among them). The model's predictions are
    filled in place (``set``).

    A run of ``MAPPED_ROWS`` collectives or more holds its columns in a mapped file
    (``mapped``; ``compute``): a reader's pages stay resident until ``release``."""

    __slots__ = ("columns", "size", "texts", "mapped")

    def __init__(self, columns: dict, size: int, texts: list, mapped: "mapped.Mapped | None" = None):
        self.columns = columns
        self.size = size
        self.texts = texts
        self.mapped = mapped

    def release(self) -> None:
        """Hand the pages its readers made resident back to the kernel, where its columns
        are mapped (``measure.mapped``); nothing for columns in the heap. Called between the
        phases of an analysis: each phase reads a few columns of every row."""
        if self.mapped is not None:
            self.mapped.release()

    @classmethod
    def of(cls, rows) -> "Collectives":
        """``rows`` (``Collective`` objects or rows alike) as columns."""
        rows = list(rows)
        columns: dict = {}
        codes = _Codes()
        for n in FIELDS:
            values = [getattr(r, n) for r in rows]
            if n in _TEXTS:
                columns[n] = array.array("I", map(codes.of, values))
            elif n in _FLOATS:
                columns[n] = _float_column(values)
            elif n in _FLAGS:
                columns[n] = array.array("b", [bool(v) for v in values])
            else:
                columns[n] = array.array("q", [NULL_INT if v is None else v for v in values])
        columns, texts = codes.narrowed(columns)
        return cls(columns, len(rows), texts)

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
        column = array.array("d", [_NAN if v is None else v for v in values])
        if isinstance(self.columns[name], memoryview):  # written into its mapped column
            _numpy_of(self.columns[name])[:] = _numpy_of(column)
        else:
            self.columns[name] = column

    def numpy(self, name: str):
        """Column ``name`` as it is held, viewed by NumPy without a copy (integers int64 with
        nulls as NULL_INT, numbers float64 with nulls as NaN, texts their codes into
        ``texts``, flags int8)."""
        return _numpy_of(self.columns[name])

    def code(self, text) -> int:
        """The code of ``text`` in the text columns, -1 where no row has it."""
        try:
            return self.texts.index(text)
        except ValueError:
            return -1

    def values(self, name: str, start: int = 0, stop: int | None = None) -> list:
        """Column ``name`` of rows ``start:stop`` as Python values (None for a null)."""
        col = self.columns[name][start:stop]
        if name in _TEXTS:
            return list(map(self.texts.__getitem__, col))
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




def text_test(texts: list, test, codes):
    """Per row, whether ``test`` holds for its text (``codes`` into ``texts``), NumPy booleans;
    ``test`` runs once per distinct text, not once per row. Looked up ``ROWS_PER_BLOCK`` rows
    at a time: NumPy indexes with an int64 copy of the codes (16.5 MB for a 1,024-rank run's
    column at once)."""
    import numpy as np

    holds = np.array([bool(test(t)) for t in texts], bool)
    out = np.empty(len(codes), bool)
    for start in range(0, len(codes), ROWS_PER_BLOCK):
        out[start:start + ROWS_PER_BLOCK] = holds[codes[start:start + ROWS_PER_BLOCK]]
    return out


def rank_steps(rank, step):
    """The distinct (rank, step) pairs of rows, sorted, and each row's index into them (an int64
    array), from two NumPy columns of known steps: one int64 key per row where rank x steps
    fits in it (a sort of one column, not of pairs), pairs sorted as pairs otherwise."""
    import numpy as np

    if not len(step):
        return [], np.zeros(0, np.int64)
    low, span = int(step.min()), int(step.max()) - int(step.min()) + 1
    if int(rank.max()) * span + span < 2 ** 62:
        packed, slot = np.unique(rank * span + (step - low), return_inverse=True)
        return list(zip((packed // span).tolist(), (packed % span + low).tolist())), slot.reshape(-1)
    pairs, slot = np.unique(np.stack([rank, step]), axis=1, return_inverse=True)
    return list(map(tuple, pairs.T.tolist())), slot.reshape(-1)


def first_met_groups(columns: list, rows_per_block: int = ROWS_PER_BLOCK):
    """Rows grouped by their values in ``columns`` (NumPy integer columns of one length, e.g.
    text codes): the first row of each group, groups numbered in the order first met, and each
    row's group number (int32). Found ``rows_per_block`` rows at a time, so that what it holds
    beyond its answer is a block's (grouping a 1,024-rank run's 2.07 million rows at once took
    140 MiB: int64 copies of the codes, a key, np.unique's sort and inverse)."""
    import numpy as np

    rows = len(columns[0]) if columns else 0
    group = np.empty(rows, np.int32)
    number: dict[tuple, int] = {}
    firsts: list[int] = []
    for start in range(0, rows, rows_per_block):
        block = [c[start:start + rows_per_block].astype(np.int64) for c in columns]
        widths = [int(b.max()) + 1 for b in block]
        if float(np.prod(widths, dtype=float)) < 2 ** 62:  # one int64 key per row
            key = block[0]
            for b, w in zip(block[1:], widths[1:]):
                key = key * w + b
            _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        else:
            _, first, inverse = np.unique(np.stack(block), axis=1, return_index=True, return_inverse=True)
        local = np.empty(len(first), np.int32)
        for j in np.argsort(first, kind="stable").tolist():  # the block's groups as first met
            row = int(first[j])
            values = tuple(int(b[row]) for b in block)
            if values not in number:
                number[values] = len(firsts)
                firsts.append(start + row)
            local[j] = number[values]
        group[start:start + len(block[0])] = local[inverse.reshape(-1)]
    return firsts, group


class Selection(Sequence):
    """Some rows of a ``Collectives`` by their indexes, in its order, read as rows like it: 8
    bytes a row, where a list of the rows' views took about 68 (a checklist rule held one of
    every collective of a 1,024-rank run, 2.07 million); every row without an index."""

    __slots__ = ("table", "index")

    def __init__(self, table: Collectives, index=None):
        self.table = table
        self.index = index  # NumPy int64, ascending; None: every row of the table

    def __len__(self) -> int:
        return len(self.table) if self.index is None else len(self.index)

    def _indexes(self):
        import numpy as np

        return np.arange(len(self.table), dtype=np.int64) if self.index is None else self.index

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Selection(self.table, self._indexes()[i])
        return CollectiveRow(self.table, range(len(self.table))[i] if self.index is None else int(self.index[i]))

    def __iter__(self):
        if self.index is None:
            return map(CollectiveRow, itertools.repeat(self.table), range(len(self.table)))
        # the indexes as Python ints a block at a time (a list of them all is 36 bytes a row)
        blocks = (self.index[k:k + ROWS_PER_BLOCK].tolist() for k in range(0, len(self.index), ROWS_PER_BLOCK))
        return map(CollectiveRow, itertools.repeat(self.table), itertools.chain.from_iterable(blocks))

    @property
    def texts(self) -> list:
        return self.table.texts

    def code(self, text) -> int:
        return self.table.code(text)

    def numpy(self, name: str):
        """Column ``name`` of these rows, held as ``Collectives.numpy``'s: of every row the
        column itself, read-only (a 1,024-rank run's column is 16.5 MB), else a copy."""
        if self.index is None:
            view = self.table.numpy(name).view()
            view.flags.writeable = False
            return view
        return self.table.numpy(name)[self.index]

    def where(self, mask) -> "Selection":
        """These rows where ``mask`` (one per row of this selection) is true (this selection
        itself where it is true everywhere: no copy of the index)."""
        import numpy as np

        if mask.all():
            return self
        return Selection(self.table, np.flatnonzero(mask) if self.index is None else self.index[mask])


def release(rows) -> None:
    """``Collectives.release`` of the table under ``rows`` (a ``Collectives`` or a ``Selection``;
    nothing for a list of rows)."""
    table = rows.table if isinstance(rows, Selection) else rows
    if isinstance(table, Collectives):
        table.release()


def selection(rows) -> Selection:
    """Every row of ``rows`` (a ``Collectives``, a ``Selection`` or a list of rows) as a
    ``Selection``: what a rule narrows down with column masks."""
    if isinstance(rows, Selection):
        return rows
    return Selection(table_of(rows))


def median(values):
    """``statistics.median`` of NumPy values, read as Python numbers (the middle one, or the mean
    of the two middle ones), without listing them (36 bytes a value)."""
    found = median_known(values)
    if found is None:
        raise ValueError("no median of no values")
    return found


def known(values):
    """The values that are not NaN (a null): ``values`` itself where none is, else a copy."""
    import numpy as np

    missing = np.isnan(values)
    return values[~missing] if missing.any() else values


def median_known(values):
    """``median`` of the values that are not NaN (a null), None where none is: one copy of the
    known values, sorted in place (none where no value is known), where a copy of the known
    values and then their sorted copy took two (16.5 MB each for a 1,024-rank run's column)."""
    found = known(values)
    n = len(found)
    if not n:
        return None
    ordered = found.copy() if found is values else found
    del found
    ordered.sort()
    mid = n // 2
    return ordered[mid].item() if n % 2 else (ordered[mid - 1].item() + ordered[mid].item()) / 2


_NAN = float("nan")
_NUMPY_TYPE = {"q": "int64", "d": "float64", "b": "int8", "H": "uint16", "I": "uint32"}


class _Codes:
    """Texts numbered as they are first met (None among them): a text column's codes."""

    def __init__(self):
        self.texts: list = []
        self.code: dict = {}

    def of(self, text) -> int:
        code = self.code.get(text)
        if code is None:
            code = self.code[text] = len(self.texts)
            self.texts.append(text)
        return code

    def narrowed(self, columns: dict) -> tuple[dict, list]:
        """``columns`` with their text columns' codes as array 'H' where the texts allow; and the texts."""
        if len(self.texts) <= 2 ** 16:
            for n in _TEXTS:
                columns[n] = array.array("H", _numpy_of(columns[n]).astype("uint16").tobytes())
        return columns, self.texts


def _typecode(col) -> str:
    """A column's typecode: an ``array.array``'s, or a mapped column's (``memoryview`` format)."""
    return col.format if isinstance(col, memoryview) else col.typecode


def _numpy_of(col):
    import numpy as np

    dtype = _NUMPY_TYPE[_typecode(col)]
    return np.frombuffer(col, dtype) if len(col) else np.empty(0, dtype)


def table_of(rows) -> Collectives:
    """``rows`` as columns: a ``Collectives`` as it is, a list of rows copied into one."""
    return rows if isinstance(rows, Collectives) else Collectives.of(rows)


def _float_column(values: list) -> array.array:
    return array.array("d", [_NAN if v is None else v for v in values])


def compute(con, info: RunInfo) -> Collectives:
    """One row per collective transfer, in (rank, start) order, as columns (``Collectives``).

    Read a batch of rows at a time through Arrow and finished with NumPy: the manifest's
    group sizes, an all-gather's gathered bytes, the bus bandwidth and FSDP1's unit names
    per distinct value, never per row; each batch written into columns of the run's size.
    Rows were built through a dict per row (13.0-15.9 s for a 1,024-rank run's 2.07 million
    rows), then a loop over column lists (8.2-8.9 s)."""
    sql.ensure(con, "collectives", run_id=info.run_id)
    query = "collectives.stats"
    if waits.peered(con, info.run_id):  # each transfer apart from its wait for the last peer
        waits.ensure(con, info.run_id)
        query = "collectives.stats_waited"
    per_rank = sql.tuples(con, "collectives.per_rank")
    build = _Build(info.manifest, info.world_size, sum(n for _, n in per_rank))
    for first, last in _rank_ranges(per_rank):
        for part in sql.arrow_batches(con, query, first_rank=first, last_rank=last):  # never every row at once
            build.add(dict(zip(part.schema.names, part.columns)))
    return build.finished()


# Rows that one query sorts (``_rank_ranges``): the query of every rank at once held its
# sorted rows beside the columns being built (about 60 MiB at 256 ranks; measured).
ROWS_PER_QUERY = 2 ** 16


def _rank_ranges(per_rank: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Consecutive ranks (first, last) with at most ``ROWS_PER_QUERY`` transfers together, or
    one rank with more."""
    ranges, first, held = [], None, 0
    for rank, n in per_rank:
        if first is not None and held + n > ROWS_PER_QUERY:
            ranges.append((first, last))
            first, held = None, 0
        if first is None:
            first = rank
        last, held = rank, held + n
    if first is not None:
        ranges.append((first, last))
    return ranges


_TYPECODE = {**{n: "q" for n in _INTS + _NULLABLE_INTS}, **{n: "d" for n in _FLOATS},
             **{n: "H" for n in _TEXTS}, **{n: "b" for n in _FLAGS}}
# SQL columns copied as integer columns (collectives.sql's names)
_COPIED_INTS = (("rank", "rank"), ("event_id", "event_id"), ("start_ns", "ts_ns"), ("step", "step"),
                ("microbatch", "microbatch"), ("launch_ts_ns", "cpu_launch_ts_ns"), ("ready_ns", "ready_ns"))


# A run of this many collectives or more holds its columns in a mapped file (``measure.mapped``):
# 11 MiB of columns in the heap at most. 64 reference ranks have 128 thousand.
MAPPED_ROWS = 2 ** 16


class _Build:
    """``compute``'s columns, a batch of SQL rows at a time, written into columns of the
    run's size made at the start: columns grown batch by batch left the freed copies
    between other allocations, about 70 MiB held by the allocator at 256 ranks beside
    84 MiB of columns (it went back to the system on ``malloc_trim``; measured). From
    ``MAPPED_ROWS`` rows they are a mapped file's, whose written pages are released after
    each batch."""

    def __init__(self, manifest: Manifest, world_size: int | None, rows: int):
        self.defaults, self.world = manifest.group_sizes(), world_size
        self.orders = _unit_orders(manifest)
        self.factor = _bus_factors()
        self.codes = _Codes()
        self.mapped = mapped.columns({n: _TYPECODE[n] for n in FIELDS}, rows) if rows >= MAPPED_ROWS else None
        if self.mapped is not None:
            self.columns = dict(self.mapped.columns)
        else:
            self.columns = {n: array.array(_TYPECODE[n], [0]) * rows for n in FIELDS}
        self.size = 0
        self.named: dict = {}  # (id code, phase code) -> the code of the unit's name (FSDP1)

    def add(self, got: dict) -> None:
        """A batch of SQL rows (Arrow columns by name) onto the columns."""
        import numpy as np

        rows = len(got["rank"])
        code = {n: self._codes(got[n]) for n in _TEXTS}
        texts = self.codes.texts
        transfer = _ints(got["comm_ns"], 0) - _ints(got["wait_ns"], 0)  # comm less the wait for the last peer
        inferred = _flags(got["inferred"])
        # the group: the trace's, else the manifest's for the collective, else the world
        # (``group or default``: a group of 0 is none)
        group = _ints(got["group_size"], 0)
        default = np.array([self._default_group(t) for t in texts], np.int64)
        group = np.where(group != 0, group, default[code["collective"]])
        has_group = (group != NULL_INT) & (group != 0)
        # nccl-tests' all-gather size is the gathered output
        nbytes = _ints(got["bytes"])
        has_bytes = (nbytes != NULL_INT) & (nbytes != 0)
        nbytes = np.where(_flags(got["shard_only"]).astype(bool) & has_bytes & has_group, nbytes * group, nbytes)
        # nccl-tests bus bandwidth of the transfer, GB/s, where its kind has a bus factor
        named_kind = text_test(texts, bool, code["collective"])
        sized = has_bytes & (transfer > 0) & named_kind & has_group & (group > 1)
        busbw = np.full(rows, _NAN)
        if sized.any():
            pairs, inverse = np.unique(np.stack([code["collective"][sized].astype(np.int64), group[sized]]),
                                       axis=1, return_inverse=True)
            factors = np.array([_NAN if (f := self.factor(texts[c], g)) is None else f for c, g in pairs.T.tolist()],
                               np.float64)
            raw = nbytes[sized] / (transfer[sized] / NS_PER_S) * factors[inverse.reshape(-1)] / 1e9
            # Python's round to 4 places, value by value: NumPy's differs in the last bits
            busbw[sized] = [v if v != v else round(v, 4) for v in raw.tolist()]
        # FSDP1's unnamed units: the k-th of a phase is the manifest's k-th (_unit_orders)
        ids = code["id"]
        unnamed = (code["kind"] == self.codes.of("fsdp_unit")) & inferred.astype(bool)
        if unnamed.any():
            ids = ids.copy()
            ids[unnamed] = [self._unit(i, p) for i, p in zip(ids[unnamed].tolist(), code["phase"][unnamed].tolist())]
        out = {"kind": code["kind"], "id": ids, "phase": code["phase"], "collective": code["collective"],
               "dtype": code["dtype"], "group_size": group, "bytes": nbytes, "busbw_gbps": busbw,
               "inferred": inferred,
               "compute_before_ns": _ints(got["compute_before_ns"], 0)}  # none before its launch: 0
        for n, src in _COPIED_INTS:
            out[n] = _ints(got[src])
        after = got.get("compute_after_ns")  # a reduce stored before it was kept: none
        out["compute_after_ns"] = _ints(after) if after is not None else np.full(rows, NULL_INT, np.int64)
        for n in _MS_COLUMNS:
            out[n.replace("_ns", "_ms")] = _ms_numpy(got[n])
        transfer_ms = transfer / NS_PER_MS
        transfer_ms[_nulls(got["wait_ns"])] = _NAN  # no peer loaded: no split
        out["transfer_ms"] = transfer_ms
        if self.size + rows > len(self.columns["rank"]):  # more rows than counted: never, but room is made
            if self.mapped is not None:  # back to the heap
                self.columns = {n: array.array(_typecode(c), c) for n, c in self.columns.items()}
                self.mapped = None
            for column in self.columns.values():
                column.extend(array.array(column.typecode, [0]) * rows)
        if len(self.codes.texts) > 2 ** 16 and _typecode(self.columns["kind"]) == "H":  # codes past 16 bits
            for n in _TEXTS:
                self.columns[n] = array.array("I", _numpy_of(self.columns[n]).astype("uint32").tobytes())
        for n, values in out.items():
            _numpy_of(self.columns[n])[self.size:self.size + rows] = values
        self.size += rows
        if self.mapped is not None:
            self.mapped.release()

    def finished(self) -> Collectives:
        """The columns built (no prediction yet)."""
        for n, column in self.columns.items():
            if len(column) > self.size:
                if isinstance(column, memoryview):
                    self.columns[n] = column[:self.size]
                else:
                    del column[self.size:]
        for n in ("predicted_comm_ms", "predicted_exposed_ms"):  # none yet (predict.exposure)
            _numpy_of(self.columns[n])[:] = _NAN
        if self.mapped is not None:
            self.mapped.release()
        return Collectives(self.columns, self.size, self.codes.texts, self.mapped)

    def _codes(self, column):
        """A text column's codes (``_Codes``), looked up per distinct text of the batch."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            column = pc.cast(column, pa.string())  # a column of nulls typed otherwise by the SQL
        encoded = pc.dictionary_encode(column)
        texts = encoded.dictionary.to_pylist() + [None]
        remap = np.array([self.codes.of(t) for t in texts], np.uint32)
        return remap[pc.fill_null(encoded.indices, len(texts) - 1).to_numpy(zero_copy_only=False)]

    def _default_group(self, collective) -> int:
        group = self.defaults.get(collective or "", self.world)
        return NULL_INT if group is None else group

    def _unit(self, id_code: int, phase_code: int) -> int:
        key = (id_code, phase_code)
        if key not in self.named:
            texts = self.codes.texts
            self.named[key] = self.codes.of(_unit_name("fsdp_unit", texts[id_code], True, texts[phase_code],
                                                       self.orders))
        return self.named[key]


def _ints(column, null: int = NULL_INT):
    """An Arrow integer column as NumPy int64, a null as ``null``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_integer(column.type):  # a column of nulls typed as text by the SQL; a number
        column = pc.cast(column, pa.int64())
    if column.null_count:
        column = pc.fill_null(column, pa.scalar(null, column.type))
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _flags(column):
    """An Arrow flag column as NumPy int8 (a null as false)."""
    import numpy as np
    import pyarrow.compute as pc

    if column.null_count:
        column = pc.fill_null(column, False)
    return column.to_numpy(zero_copy_only=False).astype(np.int8)


def _nulls(column):
    """Where an Arrow column is null, as a NumPy mask."""
    import numpy as np

    if not column.null_count:
        return np.zeros(len(column), bool)
    return column.is_null().to_numpy(zero_copy_only=False)


def _ms_numpy(column):
    """A column of nanoseconds as milliseconds to the nanosecond (``units.ms`` of each value),
    NumPy float64, a null as NaN. For integers one division: ``n / 1e6`` is already
    ``round(n / 1e6, 6)`` for an integer n below 2**53 (the division is correctly rounded,
    and the nearest double to a number of 6 decimals rounds back to itself), so the 6
    million ``round`` calls of a 1,024-rank run are left out."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_integer(column.type):  # a null comes as NaN
        return column.to_numpy(zero_copy_only=False).astype(np.float64) / NS_PER_MS
    return np.array([_NAN if v is None else round(v / NS_PER_MS, MS_DIGITS) for v in column.to_pylist()], np.float64)
