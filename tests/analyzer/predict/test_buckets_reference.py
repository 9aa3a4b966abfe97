"""Attribution on the real GPU reference traces (DDP, foreign: buckets are inferred)."""

from __future__ import annotations

from collections import Counter

import pytest

from overlapscope.analyzer.api import analyze, buckets


@pytest.fixture(scope="module")
def nccl_data(reference_dir):
    return buckets([str(reference_dir / "gpu_ddp_a100_rank0_of2/nccl_data.json.gz")], workers=1)


@pytest.fixture(scope="module")
def control(reference_dir):
    return buckets([str(reference_dir / "gpu_ddp_a100_rank3_of8/control.json.gz")], workers=1)


def test_ddp_buckets_inferred_from_order(nccl_data):
    # README: 15 AllReduce and 6 Broadcast kernels over 3 steps
    rows = nccl_data["collectives"]
    kinds = Counter((r["kind"], r["phase"]) for r in rows)
    assert kinds == {("ddp_bucket", "allreduce"): 15, ("other", "broadcast"): 6}
    per_step = Counter(r["step"] for r in rows if r["kind"] == "ddp_bucket")
    assert sorted(per_step.values()) == [5, 5, 5]
    assert all(r["inferred"] for r in rows if r["kind"] == "ddp_bucket")
    # the same bucket carries the same bytes in every step (NCCL's "In msg nelems" x 4)
    sizes = {}
    for r in rows:
        if r["kind"] == "ddp_bucket":
            sizes.setdefault(r["id"], set()).add(r["bytes"])
    assert all(len(v) == 1 for v in sizes.values()) and len(sizes) == 5


def test_collectives_add_up_to_the_rank(nccl_data, reference_dir):
    (rank,) = analyze([str(reference_dir / "gpu_ddp_a100_rank0_of2/nccl_data.json.gz")], workers=1)["ranks"]
    rows = nccl_data["collectives"]
    assert sum(r["exposed_ms"] for r in rows) == pytest.approx(rank["exposed_comm_ms"], abs=1e-5)
    assert sum(r["comm_ms"] for r in rows) >= rank["comm_ms"] - 1e-9  # comm kernels never overlap here


def test_all_to_all_is_other(control):
    # README: 18 AllReduce and 42 SendRecv (all_to_all) kernels over 6 steps
    kinds = Counter((r["kind"], r["id"]) for r in control["collectives"])
    assert kinds[("other", "all_to_all")] == 42
    assert sum(v for (k, _), v in kinds.items() if k == "ddp_bucket") == 18


def test_bus_bandwidth_and_predictions(nccl_data):
    m = nccl_data["measured"]
    assert m["bandwidth_source"] == "trace"
    # A100 pair over NVLink: the large buckets reach 10-13 GB/s bus bandwidth in this trace
    assert 5e9 < m["bus_bandwidth_bytes_per_s"] < 20e9
    buckets_ = [r for r in nccl_data["collectives"] if r["kind"] == "ddp_bucket"]
    assert all(r["predicted_comm_ms"] is not None and r["predicted_exposed_ms"] is not None for r in buckets_)
    assert all(r["busbw_gbps"] > 0 for r in buckets_)
