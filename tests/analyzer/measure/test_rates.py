"""W and the latency term from hand-built collectives: each instance timed at its fastest rank.

Expected values are worked by hand from the ring formulas (all-reduce: 2 (n-1)/n of the
buffer on the wire, docs/definitions.md) and the rows' own times, not from the code.
"""

from __future__ import annotations

import random

import pytest

from overlapscope.analyzer.measure import rates
from overlapscope.analyzer.measure.collectives import Collective

MB = 1_000_000


def _row(rank: int, event_id: int, launch_ns: int, comm_ms: float, nbytes: int, step: int = 1) -> Collective:
    return Collective(rank=rank, step=step, kind="ddp_bucket", id=None, phase="allreduce", collective="all_reduce",
                      bytes=nbytes, dtype="float32", group_size=4, microbatch=None, offset_ms=None, comm_ms=comm_ms,
                      exposed_ms=0.0, busbw_gbps=None, inferred=True, event_id=event_id, launch_ts_ns=launch_ns)


def _run() -> list[Collective]:
    """Two ranks of a group of 4, two all-reduces a step (100 MB, then 1 MB), two steps.
    The n-th all-reduce of a step is one instance across the ranks (matched by launch order,
    not by event id: rank 1's ids run backwards). Rank 0 waits on rank 1 in step 1."""
    rows = []
    for step in (1, 2):
        t0 = step * 1_000_000
        rows += [_row(0, 10 * step + 1, t0 + 10, 9.0 if step == 1 else 4.0, 100 * MB, step),
                 _row(0, 10 * step + 2, t0 + 20, 0.5, 1 * MB, step),
                 _row(1, 100 - 10 * step - 1, t0 + 10, 6.0 if step == 1 else 5.0, 100 * MB, step),
                 _row(1, 100 - 10 * step - 2, t0 + 20, 0.2, 1 * MB, step)]
    return rows


def test_each_instance_is_timed_at_its_fastest_rank():
    """Large collectives (the top quarter by size: the two 100 MB instances) measure W:
    wire bytes 2 x 3/4 x 100 MB = 150 MB over 6 ms (step 1: rank 1's) and over 4 ms
    (step 2: rank 0's); W is their median."""
    w = rates.bandwidth(_run())
    assert w["large_collectives"] == 4  # each rank's row of the two large instances
    assert w["bus_bandwidth_bytes_per_s"] == pytest.approx((150 * MB / 6e-3 + 150 * MB / 4e-3) / 2)


def test_the_latency_term_is_what_the_small_transfers_take_beyond_w():
    """With W = 1e10 B/s, a 1 MB all-reduce puts 1.5 MB on the wire: 0.15 ms. Its instances
    took 0.2 ms at their fastest rank (rank 1, both steps): 0.05 ms of latency."""
    fit = rates.latency(_run(), 1e10)
    assert fit["small_collectives"] == 4
    assert fit["latency_s"] == pytest.approx(0.2e-3 - 0.15e-3)


def test_the_rows_order_does_not_change_w_or_the_latency():
    """Instances are matched within each rank by launch order, wherever the rank's rows lie
    in the list (a caller's filter or a shuffled list)."""
    rows = _run()
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    assert rates.bandwidth(shuffled) == rates.bandwidth(rows)
    assert rates.latency(shuffled, 1e10) == rates.latency(rows, 1e10)
    assert rates.instances(shuffled) == [rates.instances(rows)[rows.index(r)] for r in shuffled]
