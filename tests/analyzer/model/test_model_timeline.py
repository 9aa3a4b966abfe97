"""Timeline replays: DDP buckets and FSDP units, against hand-computed answers.

Each test draws its timeline in a comment, one character per time unit
(seconds): ``F``/``B`` forward/backward compute, ``g``/``G`` forward/backward
all-gather, ``r`` reduce-scatter, ``a`` all-reduce; the digit row under a lane
names the unit or bucket that starts there. The expected rows are read off the
drawing, not produced by the code under test. Statements quoted from the lesson the
model is built on ("the seed"; docs/model.md, "The replays") name their section.
"""

from __future__ import annotations

import pytest

from overlapscope.analyzer.model.ring import collective_time_s
from overlapscope.analyzer.model.replay import (
    Bucket,
    FsdpOptions,
    FsdpUnit,
    replay_ddp,
    replay_fsdp,
)


def _rows(spans, *fields):
    return [tuple(getattr(s, f) for f in fields) for s in spans]


# --- DDP buckets ---------------------------------------------------------------------------


def test_ddp_only_the_last_bucket_is_exposed_when_the_network_keeps_up():
    """Seed, "What stays exposed": the bucket of the first layers is ready last;
    no compute is left to hide it. Units of 0.5 s, one character each.

    t         0123456789
    compute   BBBBBBBB         backward 0 .. 4 s
    comm        a a a a        bucket i ready at i+1 s, all-reduce 0.5 s
                0 1 2 3
    """
    buckets = [Bucket(ready_s=i + 1.0, comm_s=0.5) for i in range(4)]
    timeline = replay_ddp(buckets, backward_end_s=4.0)
    assert _rows(timeline.buckets, "start_s", "end_s", "exposed_s") == [
        (1.0, 1.5, 0.0), (2.0, 2.5, 0.0), (3.0, 3.5, 0.0), (4.0, 4.5, 0.5),
    ]
    assert timeline.exposed_s == 0.5 == timeline.buckets[-1].comm_s
    assert timeline.comm_s == 2.0
    assert timeline.end_s == 4.5
    assert timeline.overlap_pct == 75.0


def test_ddp_slow_network_queues_buckets_behind_each_other():
    """All-reduce 1.25 s per bucket: each launches when the previous ends.
    Units of 0.25 s, one character each.

    t         0         1         2
              012345678901234567890123
    compute   BBBBBBBBBBBBBBBB              backward 0 .. 4 s
    comm          aaaaaaaaaaaaaaaaaaaa      b0 1-2.25, b1 2.25-3.5,
                  0    1    2    3          b2 3.5-4.75, b3 4.75-6
    """
    buckets = [Bucket(ready_s=i + 1.0, comm_s=1.25) for i in range(4)]
    timeline = replay_ddp(buckets, backward_end_s=4.0)
    assert _rows(timeline.buckets, "start_s", "end_s", "exposed_s") == [
        (1.0, 2.25, 0.0), (2.25, 3.5, 0.0), (3.5, 4.75, 0.75), (4.75, 6.0, 1.25),
    ]
    assert timeline.exposed_s == 2.0 == timeline.end_s - timeline.backward_end_s


def test_ddp_one_huge_bucket_overlaps_nothing():
    """Seed, "Why buckets": one all-reduce at the end overlaps nothing.

    t         0123456
    compute   BBBB
    comm          aa
                  0
    """
    timeline = replay_ddp([Bucket(ready_s=4.0, comm_s=2.0)], backward_end_s=4.0)
    assert timeline.exposed_s == timeline.comm_s == 2.0
    assert timeline.overlap_pct == 0.0


def test_ddp_launches_buckets_in_the_order_given():
    """Bucket 0 is ready at 3 s, bucket 1 already at 1 s; the launch order is fixed
    (the same on every rank), so bucket 1 waits behind bucket 0.
    Units of 0.5 s.

    t         012345678
    compute   BBBBBBBB
    comm            aa        b0 3-3.5, b1 3.5-4
                    01
    """
    timeline = replay_ddp([Bucket(3.0, 0.5), Bucket(1.0, 0.5)], backward_end_s=4.0)
    assert _rows(timeline.buckets, "start_s", "end_s") == [(3.0, 3.5), (3.5, 4.0)]
    assert timeline.exposed_s == 0.0


def test_ddp_rejects_negative_times():
    with pytest.raises(ValueError):
        Bucket(ready_s=-1.0, comm_s=1.0)
    with pytest.raises(ValueError):
        replay_ddp([], backward_end_s=-1.0)


# The seed's DDP figure: 24 layers of 50M parameters, 8 GPUs, F = 400 TFLOP/s,
# 16,384 tokens per GPU, 50 GB/s, 25 MB buckets: "only the last bucket is exposed".
FIGURE_GRAD_BYTES = 24 * 50e6 * 2  # bf16 gradients: 2.4 GB
FIGURE_BACKWARD_S = 4 * 24 * 50e6 * 16384 / 400e12  # 4 Psi T / F = 0.19661 s


def uniform_ddp_buckets(total_grad_bytes, bucket_cap_bytes, backward_s, gpus, busbw_bytes_per_s, latency_s=0.0):
    """The figure's buckets: a backward pass that produces gradient bytes at a uniform rate fills
    buckets of bucket_cap_bytes in order (the last holds the rest); a bucket is ready when its
    bytes are produced; its all-reduce takes latency + 2 (N-1)/N size / W."""
    buckets, filled = [], 0.0
    while filled < total_grad_bytes:
        size = min(bucket_cap_bytes, total_grad_bytes - filled)
        filled += size
        comm = latency_s + 2 * (gpus - 1) / gpus * size / busbw_bytes_per_s
        buckets.append(Bucket(backward_s * filled / total_grad_bytes, comm))
    return buckets


def test_seed_ddp_figure_default_only_the_last_bucket_is_exposed():
    """96 buckets, one ready every 2.05 ms, each all-reduce 2 x 7/8 x 25 MB / 50 GB/s
    = 0.875 ms: the network keeps up, and the last bucket (ready at the end of the
    backward pass) is the only exposed one."""
    buckets = uniform_ddp_buckets(FIGURE_GRAD_BYTES, 25e6, FIGURE_BACKWARD_S, 8, 50e9)
    assert len(buckets) == 96
    assert buckets[-1].ready_s == pytest.approx(FIGURE_BACKWARD_S)
    timeline = replay_ddp(buckets, FIGURE_BACKWARD_S)
    exposed = [b.index for b in timeline.buckets if b.exposed_s > 0]
    assert exposed == [95]
    assert timeline.exposed_s == pytest.approx(0.875e-3)


def test_seed_ddp_figure_one_huge_bucket_is_all_exposed():
    """One 2.4 GB bucket: 2 x 7/8 x 2.4 GB / 50 GB/s = 84 ms, all after the backward."""
    buckets = uniform_ddp_buckets(FIGURE_GRAD_BYTES, 10e9, FIGURE_BACKWARD_S, 8, 50e9)
    timeline = replay_ddp(buckets, FIGURE_BACKWARD_S)
    assert len(buckets) == 1
    assert timeline.exposed_s == pytest.approx(84e-3)


def test_seed_ddp_figure_tiny_buckets_pay_latency():
    """100 kB buckets with alpha = 5 us per hop: 24,000 all-reduces of
    2 x 7 x 5 us + 3.5 us = 73.5 us each = 1.764 s of comm against 0.197 s of
    backward; the latency terms add up and most of it is exposed."""
    latency = 2 * 7 * 5e-6
    assert collective_time_s("all_reduce", 100e3, 8, 50e9, latency) == pytest.approx(73.5e-6)
    buckets = uniform_ddp_buckets(FIGURE_GRAD_BYTES, 100e3, FIGURE_BACKWARD_S, 8, 50e9, latency)
    timeline = replay_ddp(buckets, FIGURE_BACKWARD_S)
    assert len(buckets) == 24000
    assert timeline.comm_s == pytest.approx(1.764)
    assert timeline.exposed_s == pytest.approx(timeline.end_s - FIGURE_BACKWARD_S)
    assert timeline.exposed_s > 1.5


def test_seed_ddp_figure_fewer_tokens_and_slower_network_expose_more():
    """1,024 tokens (backward 12.3 ms) on 25 GB/s (168 ms of all-reduce): the
    network falls behind, so nearly all of the comm is exposed."""
    backward = FIGURE_BACKWARD_S / 16
    buckets = uniform_ddp_buckets(FIGURE_GRAD_BYTES, 25e6, backward, 8, 25e9)
    timeline = replay_ddp(buckets, backward)
    assert timeline.comm_s == pytest.approx(0.168)
    assert timeline.exposed_s == pytest.approx(0.168 + backward / 96 - backward)


# --- FSDP units ----------------------------------------------------------------------------

UNITS = [FsdpUnit(f"u{i}", forward_s=2.0, backward_s=4.0, allgather_s=1.0, reduce_scatter_s=1.0)
         for i in range(3)]
FIELDS = ("unit", "phase", "start_s", "end_s", "exposed_s")


def test_fsdp_without_prefetch_compute_waits_for_every_allgather():
    """Seed FSDP figure: "Without prefetch, compute waits for every all-gather".
    Each gather is issued when the previous compute ends; in the backward pass it
    also queues behind the previous unit's reduce-scatter.

    t         0         1         2
              0123456789012345678901234567
    compute    FF FF FF BBBB  BBBB  BBBB
               0  1  2  2     1     0
    comm      g  g  g  G    rG    rG    r
              0  1  2  2    21    10    0
    """
    timeline = replay_fsdp(UNITS, FsdpOptions(forward_prefetch=False, backward_prefetch=False))
    assert _rows(timeline.spans, *FIELDS) == [
        ("u0", "forward_allgather", 0.0, 1.0, 1.0),
        ("u0", "forward", 1.0, 3.0, 0.0),
        ("u1", "forward_allgather", 3.0, 4.0, 1.0),
        ("u1", "forward", 4.0, 6.0, 0.0),
        ("u2", "forward_allgather", 6.0, 7.0, 1.0),
        ("u2", "forward", 7.0, 9.0, 0.0),
        ("u2", "backward_allgather", 9.0, 10.0, 1.0),
        ("u2", "backward", 10.0, 14.0, 0.0),
        ("u2", "reduce_scatter", 14.0, 15.0, 1.0),
        ("u1", "backward_allgather", 15.0, 16.0, 1.0),
        ("u1", "backward", 16.0, 20.0, 0.0),
        ("u1", "reduce_scatter", 20.0, 21.0, 1.0),
        ("u0", "backward_allgather", 21.0, 22.0, 1.0),
        ("u0", "backward", 22.0, 26.0, 0.0),
        ("u0", "reduce_scatter", 26.0, 27.0, 1.0),
    ]
    assert (timeline.step_s, timeline.compute_s, timeline.comm_s, timeline.exposed_s) == (27, 18, 9, 9)


def test_fsdp_with_prefetch_hides_all_but_the_first_gather_and_last_reduce_scatter():
    """Prefetch (one unit ahead): the next gather is issued when the current
    compute starts, and in the backward pass it queues before the current
    unit's reduce-scatter (seed: "Backward prefetch issues the next unit's
    all-gather before the current unit's reduce-scatter").

    t         0         1         2
              0123456789012345678901
    compute    FFFFFF BBBBBBBBBBBB
               0 1 2  2   1   0
    comm      gg g   GG   rG  r   r
              01 2   21   20  1   0
    exposed:  g0 (0-1), G2 (7-8), r0 (20-21) = 3
    """
    timeline = replay_fsdp(UNITS, FsdpOptions(prefetch_limit=1))
    assert _rows(timeline.spans, *FIELDS) == [
        ("u0", "forward_allgather", 0.0, 1.0, 1.0),
        ("u0", "forward", 1.0, 3.0, 0.0),
        ("u1", "forward_allgather", 1.0, 2.0, 0.0),
        ("u1", "forward", 3.0, 5.0, 0.0),
        ("u2", "forward_allgather", 3.0, 4.0, 0.0),
        ("u2", "forward", 5.0, 7.0, 0.0),
        ("u2", "backward_allgather", 7.0, 8.0, 1.0),
        ("u2", "backward", 8.0, 12.0, 0.0),
        ("u1", "backward_allgather", 8.0, 9.0, 0.0),
        ("u2", "reduce_scatter", 12.0, 13.0, 0.0),
        ("u1", "backward", 12.0, 16.0, 0.0),
        ("u0", "backward_allgather", 13.0, 14.0, 0.0),
        ("u1", "reduce_scatter", 16.0, 17.0, 0.0),
        ("u0", "backward", 16.0, 20.0, 0.0),
        ("u0", "reduce_scatter", 20.0, 21.0, 1.0),
    ]
    assert (timeline.step_s, timeline.comm_s, timeline.exposed_s) == (21, 9, 3)


def test_fsdp_without_reshard_after_forward_drops_the_backward_allgathers():
    """Seed: "Without resharding, the backward all-gathers disappear" (2 Psi instead of 3 Psi).

    t         0         1         2
              012345678901234567890
    compute    FFFFFFBBBBBBBBBBBB
               0 1 2 2   1   0
    comm      gg g       r   r   r
              01 2       2   1   0
    """
    timeline = replay_fsdp(UNITS, FsdpOptions(reshard_after_forward=False))
    assert timeline.phase("backward_allgather") == []
    assert _rows(timeline.phase("backward"), "unit", "start_s", "end_s") == [
        ("u2", 7.0, 11.0), ("u1", 11.0, 15.0), ("u0", 15.0, 19.0),
    ]
    assert _rows(timeline.phase("reduce_scatter"), "start_s", "end_s", "exposed_s") == [
        (11.0, 12.0, 0.0), (15.0, 16.0, 0.0), (19.0, 20.0, 1.0),
    ]
    assert (timeline.step_s, timeline.comm_s, timeline.exposed_s) == (20, 6, 2)


SKEWED = [FsdpUnit("u0", 4.0, 1.0, 2.0, 0.0), FsdpUnit("u1", 1.0, 1.0, 2.0, 0.0),
          FsdpUnit("u2", 1.0, 1.0, 2.0, 0.0)]


def test_fsdp_prefetch_limit_one_leaves_a_gap_after_a_long_unit():
    """A long first unit, then two short ones; gathers take 2.

    t         0123456789
    compute     FFFFF F         u1 runs 6-7; u2 waits for its gather (issued at 6)
                0   1 2
    comm      gggg  gg
              0 1   2
    """
    timeline = replay_fsdp(SKEWED, FsdpOptions(prefetch_limit=1, reshard_after_forward=False))
    assert _rows(timeline.phase("forward_allgather"), "start_s", "end_s", "exposed_s") == [
        (0.0, 2.0, 2.0), (2.0, 4.0, 0.0), (6.0, 8.0, 1.0),
    ]
    assert _rows(timeline.phase("forward"), "start_s", "end_s") == [(2.0, 6.0), (6.0, 7.0), (8.0, 9.0)]


def test_fsdp_prefetch_limit_two_gathers_both_next_units_early():
    """Two in flight: u1 and u2 are gathered while u0 computes.

    t         0123456789
    compute     FFFFFF
                0   12
    comm      gggggg
              0 1 2
    """
    timeline = replay_fsdp(SKEWED, FsdpOptions(prefetch_limit=2, reshard_after_forward=False))
    assert _rows(timeline.phase("forward_allgather"), "start_s", "end_s", "exposed_s") == [
        (0.0, 2.0, 2.0), (2.0, 4.0, 0.0), (4.0, 6.0, 0.0),
    ]
    assert _rows(timeline.phase("forward"), "start_s", "end_s") == [(2.0, 6.0), (6.0, 7.0), (7.0, 8.0)]


def test_fsdp_is_deterministic_and_validates_options():
    assert replay_fsdp(UNITS) == replay_fsdp(UNITS)
    with pytest.raises(ValueError):
        FsdpOptions(prefetch_limit=0)
    with pytest.raises(ValueError):
        FsdpUnit("u", -1.0, 1.0, 1.0, 1.0)
