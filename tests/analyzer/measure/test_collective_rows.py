"""measure/collectives.py builds its rows' milliseconds with NumPy: a column of integer
nanoseconds divided by 1e6 must be what ``units.ms`` gives each value (the JSON of every
command is made of them)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from overlapscope.analyzer.measure.collectives import _ms_numpy
from overlapscope.analyzer.units import ms


def _ms(column) -> list:  # the column as the rows read it: NaN is a null
    return [None if v != v else v for v in _ms_numpy(column).tolist()]

DURATIONS_NS = st.one_of(st.integers(0, 10**10), st.integers(-(2**53), 2**53))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), DURATIONS_NS), max_size=50))
def test_arrow_milliseconds_are_units_ms(values):
    got = _ms(pa.array(values, pa.int64()))
    want = [ms(v) for v in values]
    assert got == want
    assert [type(v) for v in got] == [type(v) for v in want]


def test_awkward_values_round_as_units_ms():
    # values near ties of the sixth decimal and near 2**53, where a double's step passes 1 ns
    values = [1, 5, 999_999, 1_000_001, 123_456_789_012_345, 2**53 - 1, 2**53 - 3, 9_007_199_254_740_991 // 7,
              -1, -(2**53 - 1)]
    assert _ms(pa.array(values, pa.int64())) == [ms(v) for v in values]


def test_a_column_of_doubles_is_rounded_as_units_ms():
    values = [1.5, 2_500_000.25, None, 1e12 + 0.5]
    assert _ms(pa.array(values, pa.float64())) == [ms(v) for v in values]


# --- Collectives: a run's collectives as columns, read as rows ------------------------------

import pickle  # noqa: E402

from overlapscope.analyzer.measure import collectives as cols  # noqa: E402
from overlapscope.analyzer.measure.collectives import Collective, Collectives  # noqa: E402

_TEXT = st.one_of(st.none(), st.sampled_from(["ddp_bucket", "fsdp_unit", "0", "layers.1", "", "all_reduce"]))
_INT = st.integers(-(2**62), 2**62)
_FLOAT = st.floats(allow_nan=False, allow_infinity=False)
COLLECTIVES = st.builds(
    Collective, rank=st.integers(0, 4095), step=st.one_of(st.none(), _INT), kind=st.sampled_from(["ddp_bucket", "other"]),
    id=_TEXT, phase=st.sampled_from(["allreduce", "reduce_scatter"]), collective=_TEXT,
    bytes=st.one_of(st.none(), _INT), dtype=_TEXT, group_size=st.one_of(st.none(), _INT),
    microbatch=st.one_of(st.none(), _INT), offset_ms=st.one_of(st.none(), _FLOAT), comm_ms=_FLOAT, exposed_ms=_FLOAT,
    wait_ms=st.one_of(st.none(), _FLOAT), transfer_ms=st.one_of(st.none(), _FLOAT),
    exposed_wait_ms=st.one_of(st.none(), _FLOAT), busbw_gbps=st.one_of(st.none(), _FLOAT), inferred=st.booleans(),
    event_id=_INT, predicted_comm_ms=st.one_of(st.none(), _FLOAT), predicted_exposed_ms=st.one_of(st.none(), _FLOAT),
    start_ns=_INT, launch_ts_ns=st.one_of(st.none(), _INT), ready_ns=st.one_of(st.none(), _INT),
    compute_before_ns=_INT, compute_after_ns=st.one_of(st.none(), _INT))


def _fields(row) -> list:
    return [(getattr(row, n), type(getattr(row, n))) for n in cols.FIELDS] + [row.exposed_transfer_ms]


@settings(max_examples=200, deadline=None)
@given(st.lists(COLLECTIVES, max_size=20))
def test_columns_read_back_every_field_with_its_type(rows):
    table = Collectives.of(rows)
    assert len(table) == len(rows)
    assert [_fields(r) for r in table] == [_fields(r) for r in rows]  # iterated
    assert [_fields(table[i]) for i in range(-len(rows), 0)] == [_fields(r) for r in rows]  # indexed from the end
    assert [_fields(r) for r in table[1:-1:2]] == [_fields(r) for r in rows[1:-1:2]]
    assert table.materialized() == rows
    assert cols.as_json(table) == cols.as_json(rows)
    assert cols.as_json(table, 2, 7) == cols.as_json(rows, 2, 7)
    assert pickle.loads(pickle.dumps(table)).materialized() == rows  # the dashboard's cache pickles what it keeps
    assert table[0:1] == table[0:1] and len({*table, *table}) == len(rows)  # a row is itself, by table and index


def test_a_prediction_column_is_filled_in_place():
    rows = [Collective(rank=r, step=1, kind="ddp_bucket", id="0", phase="allreduce", collective="all_reduce",
                       bytes=1 << 20, dtype="float32", group_size=2, microbatch=None, offset_ms=0.0, comm_ms=2.0,
                       exposed_ms=1.0, busbw_gbps=None, inferred=False, event_id=r) for r in range(3)]
    table = Collectives.of(rows)
    table.set("predicted_comm_ms", [1.25, None, 3.5])
    assert [r.predicted_comm_ms for r in table] == [1.25, None, 3.5]
    assert [r.predicted_exposed_ms for r in table] == [None, None, None]
    try:
        table[3]
    except IndexError:
        pass
    else:
        raise AssertionError("a row past the end was read")


def test_a_row_of_columns_is_a_fraction_of_an_object():
    """What the change is for: a run's rows held as columns take about 200 bytes each against
    about 600 as ``Collective`` objects and their numbers (1,024 ranks: 2.07 million rows)."""
    import sys

    n = 1000
    rows = [Collective(rank=r % 64, step=r, kind="ddp_bucket", id="0", phase="allreduce", collective="all_reduce",
                       bytes=(1 << 20) + r, dtype="float32", group_size=64, microbatch=None, offset_ms=r / 7,
                       comm_ms=r / 3, exposed_ms=r / 11, wait_ms=r / 13, transfer_ms=r / 17, exposed_wait_ms=r / 19,
                       busbw_gbps=r / 23, inferred=False, event_id=10**9 + r, start_ns=10**15 + r,
                       launch_ts_ns=10**15 + 2 * r, ready_ns=10**15 + 3 * r, compute_before_ns=10**6 + r,
                       compute_after_ns=10**6 + 2 * r, predicted_comm_ms=r / 29, predicted_exposed_ms=r / 31)
            for r in range(n)]
    table = Collectives.of(rows)
    column_bytes = sum(sys.getsizeof(c) for c in table.columns.values())
    object_bytes = sum(sys.getsizeof(r) for r in rows) + sum(
        sys.getsizeof(getattr(r, f)) for r in rows for f in cols.FIELDS
        if isinstance(getattr(r, f), float) or (isinstance(getattr(r, f), int) and getattr(r, f) > 256))
    assert column_bytes / n < 250, column_bytes / n
    assert object_bytes / column_bytes > 2.5, (object_bytes / n, column_bytes / n)


# --- Selection: some rows of a Collectives by index, narrowed with column masks --------------

import statistics  # noqa: E402

import numpy as np  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.lists(COLLECTIVES, max_size=30), st.sampled_from(["ddp_bucket", "other", "absent"]), st.booleans())
def test_a_selection_is_the_rows_a_filter_keeps(rows, kind, with_step):
    table = Collectives.of(rows)
    chosen = cols.selection(table)
    chosen = chosen.where(chosen.numpy("kind") == chosen.code(kind))
    if with_step:
        chosen = chosen.where(chosen.numpy("step") != cols.NULL_INT)
    want = [r for r in rows if r.kind == kind and (r.step is not None or not with_step)]
    assert len(chosen) == len(want) and bool(chosen) == bool(want)
    assert [_fields(r) for r in chosen] == [_fields(r) for r in want]
    assert [_fields(chosen[i]) for i in range(len(want))] == [_fields(r) for r in want]
    assert [_fields(r) for r in chosen[::2]] == [_fields(r) for r in want[::2]]
    assert chosen.numpy("event_id").tolist() == [r.event_id for r in want]
    assert chosen.texts is table.texts and table.code("no such text") == -1


def test_a_selection_iterates_past_its_blocks():
    # rows are read a block of 65,536 indexes at a time: every row once, in order, across blocks
    n = 65_536 * 2 + 3
    table = Collectives.of([Collective(rank=0, step=None, kind="other", id=None, phase="broadcast", collective=None,
                                       bytes=None, dtype=None, group_size=None, microbatch=None, offset_ms=None,
                                       comm_ms=1.0, exposed_ms=0.0, busbw_gbps=None, inferred=False, event_id=0)]
                           * n)
    assert sum(1 for _ in cols.selection(table)) == n
    odd = cols.selection(table).where(np.arange(n) % 2 == 1)
    assert [r.index for r in odd] == list(range(1, n, 2))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.integers(-(2**52), 2**52), min_size=1, max_size=40),
                 st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=40)))
def test_median_of_numpy_values_is_statistics_median(values):
    got = cols.median(np.array(values))
    want = statistics.median(values)
    assert got == want and type(got) is type(want)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64)), max_size=40))
def test_median_known_leaves_the_nulls_out(values):
    """NaN (a null in a float column) anywhere among the values: the median of the others, None
    where there are none."""
    known = [v for v in values if v is not None]
    got = cols.median_known(np.array([float("nan") if v is None else v for v in values], np.float64))
    assert got == (statistics.median(known) if known else None)


@settings(max_examples=200, deadline=None)
@given(st.lists(COLLECTIVES, max_size=30))
def test_steps_of_counts_what_per_step_groups(rows):
    from overlapscope.analyzer.checklist.evidence import per_step, steps_of

    assert steps_of(Collectives.of(rows)) == len(per_step(rows))
    assert steps_of(cols.selection(Collectives.of(rows))) == len({(r.rank, r.step) for r in rows if r.step is not None})
    by_rank = sorted(rows, key=lambda r: r.rank)  # as a run's columns hold them
    for rows_per_block in (1, 2, 5):  # a block of whole ranks at a time: no (rank, step) counted twice
        assert steps_of(Collectives.of(by_rank), rows_per_block) == len(per_step(rows))
        assert steps_of(Collectives.of(rows), rows_per_block) == len(per_step(rows))  # any order: one block


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.just(cols.NULL_INT), st.just(0), st.integers(-2 ** 40, 2 ** 40)), max_size=40))
def test_other_comms_known_sizes_are_the_sorted_sizes_neither_null_nor_0(values):
    from overlapscope.analyzer.checklist.comm import _known_sizes

    got = _known_sizes(np.array(values, np.int64))
    assert got.tolist() == sorted(v for v in values if v != cols.NULL_INT and v != 0)


def test_a_mask_true_everywhere_keeps_the_selection():
    rows = [Collective(rank=r, step=0, kind="other", id=None, phase="broadcast", collective=None, bytes=None,
                       dtype=None, group_size=None, microbatch=None, offset_ms=None, comm_ms=1.0, exposed_ms=0.0,
                       busbw_gbps=None, inferred=False, event_id=r) for r in range(3)]
    every = cols.selection(Collectives.of(rows))
    assert every.where(np.ones(3, bool)) is every  # no copy of the index
    assert [r.rank for r in every.where(np.array([True, False, True]))] == [0, 2]


# --- the checklist's readers of a selection, against the rows summed one by one here ----------

_SMALL = st.builds(
    Collective, rank=st.integers(0, 2), step=st.one_of(st.none(), st.integers(0, 3)), kind=st.just("other"),
    id=st.none(), phase=st.sampled_from(["broadcast", "all_to_all", "send"]),
    collective=st.one_of(st.none(), st.sampled_from(["all_reduce", "broadcast", ""])), bytes=st.none(),
    dtype=st.none(), group_size=st.none(), microbatch=st.none(), offset_ms=st.none(),
    comm_ms=st.floats(0, 1e6), exposed_ms=st.floats(0, 1e6), busbw_gbps=st.none(), inferred=st.just(False),
    event_id=st.integers(0, 100))


@settings(max_examples=300, deadline=None)
@given(st.lists(_SMALL, max_size=40), st.sampled_from([0, 1, 2]))
def test_a_headline_figure_of_a_selection_sums_the_slowest_ranks_steps(rows, slow):
    from overlapscope.analyzer.checklist.evidence import headline_figure

    # steps 0-2 of each rank (step 3 is outside them); rank ``slow`` has the longest steps
    steps = [{"rank": r, "step": s, "step_ms": 100.0 if r == slow else 10.0, "exposed_comm_ms": 1.0}
             for r in range(3) for s in range(3)]
    per_step = {s: 0.0 for s in range(3)}
    for r in rows:  # in row order: the sums are order-dependent in the last bits
        if r.rank == slow and r.step in per_step:
            per_step[r.step] += r.comm_ms
    want = statistics.median(per_step.values())
    table = Collectives.of(rows)
    for given_rows in (rows, table, cols.selection(table)):
        got = headline_figure(steps, given_rows, value=lambda r: r.comm_ms)
        assert (got.ms, got.share, got.rank) == (want, want / 100.0, slow)


@settings(max_examples=300, deadline=None)
@given(st.lists(_SMALL, min_size=1, max_size=40))
def test_other_kinds_are_named_in_the_order_first_met(rows):
    from overlapscope.analyzer.checklist.comm import _other_kinds

    want_names: list[str] = []
    for r in rows:
        name = r.collective or r.phase or "unknown"
        if name not in want_names:
            want_names.append(name)
    names, kind_of = _other_kinds(cols.selection(Collectives.of(rows)))
    assert names == want_names
    assert [names[k] for k in kind_of.tolist()] == [r.collective or r.phase or "unknown" for r in rows]
