"""The replay's and the plans' fast paths give what the plain ones gave, to the bit:
``replay._hidden_ms`` skipping the cover's pieces that end before a bucket (``_reach``),
``plan.replace`` against ``dataclasses.replace``, ``CommModel.terms`` kept per collective.

Oracles: the loop over every piece as it was written before the skip; the standard
library's ``dataclasses.replace``; the model's terms computed on a fresh model."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings, strategies as st

from overlapscope.analyzer.predict import comm, replay
from overlapscope.analyzer.predict.plan import DdpPass, StepPlan, Unit, FsdpPass, Xfer, replace

TIMES = st.floats(-5, 200, allow_nan=False, width=32).map(float)


def _hidden_every_piece(p, start, end, backward_end):  # the loop before the skip: every piece looked at
    hidden, open_at = 0.0, start
    for t0, t1, frac in p.cover:
        if t1 <= start or t0 >= end:
            continue
        a, b = max(start, t0), min(end, t1)
        hidden += frac * (b - a)
        if a > open_at:
            hidden += p.hidden_before_end * max(0.0, min(a, backward_end) - open_at)
        open_at = max(open_at, b)
    if open_at < end:
        hidden += p.hidden_before_end * max(0.0, min(end, backward_end) - open_at)
    return min(hidden, end - start)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(TIMES, st.floats(0, 50, allow_nan=False), st.sampled_from([0.0, 1.0, 0.5])), max_size=12),
       TIMES, st.floats(0, 80, allow_nan=False), TIMES, st.floats(0, 1))
def test_skipping_the_pieces_before_a_bucket_changes_no_bit(pieces, start, length, backward_end, before_end):
    # pieces as plan._cover makes them (sorted), overlapping or not, some of no length
    cover = sorted((t0, t0 + d, frac) for t0, d, frac in pieces)
    p = DdpPass(None, [], 10.0, [], cover=cover, hidden_before_end=before_end)
    end = start + length
    assert replay._hidden_ms(p, start, end, backward_end, replay._reach(cover)) == \
        _hidden_every_piece(p, start, end, backward_end)
    assert replay._hidden_ms(p, start, end, backward_end) == _hidden_every_piece(p, start, end, backward_end)


def _xfer(**kw):
    return Xfer(**{"phase": "allreduce", "id": "3", "collective": "all_reduce", "bytes": 1e6, "group_size": 4,
                   "dur_ms": 1.5, "model_ms": 1.2, "key": (1, 7), **kw})


@given(st.dictionaries(st.sampled_from(["dur_ms", "ready_ms", "wait_ms", "peer_ms", "bytes", "id", "terms"]),
                       st.one_of(st.none(), st.floats(allow_nan=False), st.text(max_size=3)), max_size=4))
def test_replace_is_the_standard_librarys(changes):
    x = _xfer(wait_ms=0.25)
    got, want = replace(x, **changes), dataclasses.replace(x, **changes)
    assert got == want and got is not x and x == _xfer(wait_ms=0.25)
    unit = Unit("blocks.0", 2e6, 1.0, 2.0, x, None, [x])
    for obj in (DdpPass(0, [x], 3.0, [(0.0, 0.0)]), unit, FsdpPass(1, [unit], True, True),
                StepPlan(0, 2, 10.0, 8.0, 3.0, 1.0, 0.5, [])):
        assert replace(obj) == dataclasses.replace(obj) and replace(obj) is not obj
    try:
        replace(x, not_a_field=1)
    except TypeError:
        pass
    else:
        raise AssertionError("an unknown field was set")


@given(st.lists(st.tuples(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast"]),
                          st.one_of(st.integers(0, 2 ** 40), st.floats(0, 1e12)), st.integers(0, 64),
                          st.sampled_from([1.0, 0.5, 2.0]), st.sampled_from([None, 1e9])), max_size=20))
def test_the_models_terms_are_the_same_kept_or_not(calls):
    fits = {"all_reduce": comm.Fit(2e-5, 5e9, "trace"), "all_gather": comm.Fit(0.0, 3e9, "run")}
    kept = comm.CommModel.of_fits(fits)
    for call in calls * 2:  # each asked twice: the second answer is the one kept
        fresh = comm.CommModel.of_fits(fits).terms(*call)
        assert kept.terms(*call) == fresh
