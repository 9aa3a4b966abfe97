"""A collective's wait for its last peer kept apart from its transfer in every figure of it:
its row (``wait_ms``, ``transfer_ms``), its bus bandwidth, the latency-bound verdicts read
from it, and the comm model's fit (issue 33, first part).

Hand-built 2-rank GPU traces whose answers are known by construction (test_ranks_clock's
runs): rank 1 computes 120 us longer per step, bucket i of rank 0 starts when its
gradients are ready at 400 x share and ends with rank 1's at 520 x share + 20 us. So
rank 0's bucket i waits 120 x share us and transfers 20 us; rank 1's waits 0 and
transfers 20 us. An all-reduce of 2^20 float32 over 2 ranks (bus factor 2(n-1)/n = 1)
moves 4 MiB in 20 us: 209.7152 GB/s on both ranks."""

from __future__ import annotations

import pytest

from conftest import SAMPLES
from overlapscope.analyzer.api import buckets, diagnose
from test_ranks_clock import READY, _bundle, _rank

BUCKET_BYTES = 4 * (1 << 20)
TRANSFER_US = 20.0
BUSBW_GBPS = BUCKET_BYTES / (TRANSFER_US * 1e-6) / 1e9


def _run(tmp_path) -> str:
    return _bundle(tmp_path, "run", [_rank(r, 2, late=1, c_us=400, x_us=120, d_us=TRANSFER_US) for r in range(2)])


def test_each_collective_shows_its_wait_and_its_transfer(tmp_path):
    rows = buckets([_run(tmp_path)], workers=1)["collectives"]
    assert len(rows) == 2 * 3 * len(READY)
    for r in rows:
        share = READY[int(r["id"])]
        wait_us = 120.0 * share if r["rank"] == 0 else 0.0
        assert r["wait_ms"] == pytest.approx(wait_us / 1e3, abs=1e-6), r
        assert r["transfer_ms"] == pytest.approx(TRANSFER_US / 1e3, abs=1e-6), r
        assert r["wait_ms"] + r["transfer_ms"] == pytest.approx(r["comm_ms"], abs=2e-6)
        # the bus bandwidth of the transfer: the same on the waiting rank as on the late one
        assert r["busbw_gbps"] == pytest.approx(BUSBW_GBPS, rel=1e-3), r


def test_a_late_peer_makes_no_collective_latency_bound(tmp_path):
    """Every bucket has one size and one transfer time: none is slow against the run's W,
    however long rank 0 waits at it (with the wait counted, rank 0's buckets of 56, 92 and
    140 us read 2.8, 4.6 and 7 times slower than their 20 us transfer: 6 of 18 below 25 %)."""
    found = {f["id"]: f for f in diagnose([_run(tmp_path)], workers=1)["findings"]}
    assert "0 of 18 all-reduces below" in found["ddp_bucket_size"]["evidence"]


def test_the_straggler_sample_reads_one_bandwidth_on_both_ranks():
    """ddp_straggler: rank 1 sleeps 100 ms before every backward, so rank 0 waits about
    75-100 ms at each all-reduce. The same bucket moves at the same bus bandwidth on both
    ranks (within gloo's jitter), and rank 1, the late one, waits at none."""
    rows = buckets([str(SAMPLES / "ddp_straggler")], workers=1)["collectives"]
    late = [r for r in rows if r["rank"] == 1]
    waiting = [r for r in rows if r["rank"] == 0]
    assert all(r["wait_ms"] == 0.0 for r in late)
    assert all(r["wait_ms"] > 30.0 for r in waiting)
    by_instance = {(r["step"], r["id"]): r for r in late}
    for r in waiting:
        other = by_instance[(r["step"], r["id"])]
        assert r["busbw_gbps"] == pytest.approx(other["busbw_gbps"], rel=0.05), (r, other)
