"""measure/collectives.py builds its rows' milliseconds in Arrow: a column of integer
nanoseconds divided by 1e6 must be what ``units.ms`` gives each value (the JSON of every
command is made of them)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from overlapscope.analyzer.measure.collectives import _ms
from overlapscope.analyzer.units import ms

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
