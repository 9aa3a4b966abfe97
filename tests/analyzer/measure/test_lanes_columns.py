"""Each bucket or unit transfer's lane piece, found for the rows of the run's collectives
(``measure.waits.Lanes``, ``blocks.key_index``): checked against a dict of (rank, event_id), as the
plans read it before."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from overlapscope.analyzer.measure import waits
from overlapscope.analyzer.measure.blocks import EVENT_ID_BITS, key_index
from overlapscope.analyzer.measure.waits import Lane, Lanes

# a rank's transfers: (event_id, whether it has a lane piece)
RANK = st.lists(st.tuples(st.integers(0, 2 ** 39), st.booleans()), max_size=8, unique_by=lambda t: t[0])


class _Row:  # a collective read some other way than as a row of the table (by its key)
    def __init__(self, rank: int, event_id: int):
        self.rank, self.event_id = rank, event_id


class _Table:  # the table's two columns the lanes read, and its rows as views (table, index)
    def __init__(self, rank, event_id):
        self.columns = {"rank": rank, "event_id": event_id}

    def numpy(self, name):
        return self.columns[name]


class _View:
    def __init__(self, table, index):
        self.table, self.index = table, index
        self.rank, self.event_id = int(table.columns["rank"][index]), int(table.columns["event_id"][index])


@settings(max_examples=300, deadline=None)
@given(st.lists(RANK, max_size=6), st.integers(1, 10), st.booleans(), st.randoms(use_true_random=False))
def test_each_row_finds_its_own_lane_and_no_other(ranks, block, shuffled, rnd):
    rows = [(r, e, has) for r, transfers in enumerate(ranks) for e, has in transfers]
    if shuffled:  # rows in another order than by rank: one block of every row
        rnd.shuffle(rows)
    expected = {}
    for r, e, has in rows:
        if has:
            last = rnd.choice([None, rnd.randrange(len(ranks))])
            expected[(r, e)] = Lane(rnd.randrange(2 ** 50), rnd.randrange(10 ** 9), rnd.randrange(10 ** 9),
                                    rnd.randrange(10 ** 9), last, rnd.randrange(10 ** 6))
    order = sorted(expected, key=lambda k: (k[0] << EVENT_ID_BITS) | k[1])
    columns = {"key": np.array([(r << EVENT_ID_BITS) | e for r, e in order], np.int64)}
    for i, name in enumerate(("lane_ts_ns", "lane_ns", "hidden_ns", "wait_ns", "last_rank", "lead_ns")):
        columns[name] = np.array([-1 if expected[k][i] is None else expected[k][i] for k in order], np.int64)
    rank = np.array([r for r, _, _ in rows], np.int64)
    event_id = np.array([e for _, e, _ in rows], np.int64)
    found = key_index(columns["key"], rank, event_id, block)
    assert found.dtype == np.int32
    assert [int(k) for k in found] == [order.index((r, e)) if (r, e) in expected else -1 for r, e, _ in rows]
    table = _Table(rank, event_id)
    lanes = Lanes(columns, table, found)
    for i, (r, e, _) in enumerate(rows):
        want = expected.get((r, e))
        got = lanes.of(_View(table, i))
        assert got == want and (got is None or all(type(v) is int for v in got if v is not None))
        assert lanes.of(_Row(r, e)) == want  # not a row of the table: found by its key
    assert lanes.of(_Row(len(ranks), 0)) is None


def test_a_run_without_bucket_or_unit_transfers_holds_no_index_per_row():
    table = _Table(np.arange(5, dtype=np.int64), np.arange(5, dtype=np.int64))
    empty = {name: np.zeros(0, np.int64) for name in ("key", *waits._LANE_COLUMNS)}
    assert key_index(empty["key"], table.numpy("rank"), table.numpy("event_id")).tolist() == [-1] * 5
    assert Lanes(empty, table, None).of(_View(table, 2)) is None
