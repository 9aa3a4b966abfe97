"""Checklist rules on hand-built GPU traces: each rule fires on one trace and not on another.

Times are microseconds from the trace start; every trace is one or two ranks of
a run whose facts (F, W, tokens, hosts) come from a tracer-style manifest when a
rule needs them.
"""

from __future__ import annotations

import pytest


from overlapscope.analyzer.api import diagnose
from builders import GpuTrace, write_bundle

MB = 1_000_000


def findings(tmp_path, traces, manifest=None, name="run"):
    folder = write_bundle(tmp_path / name, traces if isinstance(traces, list) else [traces], manifest)
    return {f["id"]: f for f in diagnose([folder], workers=1)["findings"]}


def ddp(rank=0, world=2, buckets=((40, 30, 7), (80, 50, 15), (130, 20, 19)), nelems=1 << 20,
        dtype="Float", compute_kernels=10, kernel_us=10, microbatches=(None,), bucket_start_offset=0):
    """A DDP step: a backward of ``compute_kernels`` kernels and annotated bucket all-reduces.

    With several micro-batches each repeats the pattern 200 us later, inside
    overlapscope:microbatch#i; ``None`` means no micro-batch annotation.
    """
    t = GpuTrace(rank=rank, world_size=world).step(1, 0, 200 * len(microbatches))
    t.annotation("DistributedDataParallel.forward", 0.5, 0.2)
    for m, mb in enumerate(microbatches):
        base = 200 * m
        if mb is not None:
            t.annotation(f"overlapscope:microbatch#{mb}", base + 1, 60, tid=200)
        for k in range(compute_kernels):
            t.kernel(base + kernel_us * k, kernel_us, launch_us=base + 2 + 2 * k)
        for i, (start, dur, launch) in enumerate(buckets):
            t.annotation(f"overlapscope:ddp_bucket#{i}", base + launch - 0.5, 1.5, tid=200)
            t.comm(base + start + bucket_start_offset, dur, launch_us=base + launch, tid=200, nelems=nelems,
                   dtype=dtype)
    return t


# --- last_bucket_exposed, exposed_backward_comm -------------------------------------------

def test_last_bucket_exposed_fires_on_a_long_tail(tmp_path):
    # backward ends at 100; the last bucket runs 130..150: 20 of a 150 us step = 13%
    f = findings(tmp_path, ddp())
    assert f["last_bucket_exposed"]["status"] == "fail"
    assert "bucket" in f["last_bucket_exposed"]["evidence"] and "13.3%" in f["last_bucket_exposed"]["evidence"]


def test_last_bucket_exposed_passes_on_a_short_tail(tmp_path):
    # the last bucket is 1 us past the end of a 300 us backward
    f = findings(tmp_path, ddp(buckets=((40, 30, 7), (150, 30, 15), (295, 6, 55)), compute_kernels=30))
    assert f["last_bucket_exposed"]["status"] == "pass"


def test_exposed_backward_comm(tmp_path):
    # bucket 1 (80..130) is exposed 100..130 beyond the last one: 30 of 150 us = 20% -> fail
    assert findings(tmp_path, ddp(), name="a")["exposed_backward_comm"]["status"] == "fail"
    hidden = ddp(buckets=((40, 30, 7), (75, 20, 15), (100, 20, 19)))
    assert findings(tmp_path, hidden, name="b")["exposed_backward_comm"]["status"] == "pass"


# --- ddp_bucket_size -------------------------------------------------------------------------

def test_tiny_ddp_buckets_fail(tmp_path):
    # 12 buckets of 100 KB (25,000 float32) each
    buckets = tuple((10 + 8 * i, 6, 2 + i) for i in range(12))
    f = findings(tmp_path, ddp(buckets=buckets, nelems=25_000))
    assert f["ddp_bucket_size"]["status"] == "fail"
    assert "12 buckets" in f["ddp_bucket_size"]["evidence"]


def test_one_big_bucket_at_the_end_is_flagged(tmp_path):
    # one 100 MB bucket launched after the whole backward: nothing overlaps
    f = findings(tmp_path, ddp(buckets=((100, 100, 21),), nelems=25 * MB))
    assert f["ddp_bucket_size"]["status"] in ("fail", "warn")
    assert "too few buckets" in f["ddp_bucket_size"]["evidence"]


def test_reasonable_buckets_pass(tmp_path):
    f = findings(tmp_path, ddp(nelems=25 * MB // 4))
    assert f["ddp_bucket_size"]["status"] == "pass"


# --- accumulation_comm -----------------------------------------------------------------------

def test_accumulation_without_no_sync_fails(tmp_path):
    f = findings(tmp_path, ddp(microbatches=(0, 1)), manifest={"parallelism": "ddp", "accumulation_steps": 2})
    assert f["accumulation_comm"]["status"] == "fail"
    assert "2 of them" in f["accumulation_comm"]["evidence"]


def test_accumulation_with_no_sync_passes(tmp_path):
    t = ddp(microbatches=(1,))  # the all-reduces only in the last micro-batch
    t.annotation("overlapscope:microbatch#0", -150, 60, tid=200)
    f = findings(tmp_path, t, manifest={"parallelism": "ddp", "accumulation_steps": 2})
    assert f["accumulation_comm"]["status"] == "pass"


def test_no_accumulation_is_not_applicable(tmp_path):
    assert findings(tmp_path, ddp())["accumulation_comm"]["status"] == "n/a"


# --- fp32_reduction --------------------------------------------------------------------------

def test_fp32_reduction_with_bf16_parameters_fails(tmp_path):
    f = findings(tmp_path, ddp(dtype="Float"), manifest={"parallelism": "ddp", "param_dtype": "bfloat16",
                                                          "reduce_dtype": "float32"})
    assert f["fp32_reduction"]["status"] == "fail"


def test_bf16_reduction_passes(tmp_path):
    f = findings(tmp_path, ddp(dtype="BFloat16"), manifest={"parallelism": "ddp", "param_dtype": "bfloat16",
                                                             "reduce_dtype": "bfloat16"})
    assert f["fp32_reduction"]["status"] == "pass"


# --- straggler -------------------------------------------------------------------------------

def test_straggler_names_the_late_rank(tmp_path):
    # rank 1 computes 60 us longer; rank 0's first all-reduce waits for it: 40..130 on rank 0,
    # 100..130 on rank 1 (the transfer). Rank 0's compute ends at 40, so all 60 us of its wait
    # (40..100) are lost; the later buckets start together.
    fast = ddp(rank=0, buckets=((40, 90, 7), (140, 50, 15), (190, 20, 19)), compute_kernels=4)
    slow = ddp(rank=1, buckets=((100, 30, 7), (140, 50, 15), (190, 20, 19)), compute_kernels=10)
    f = findings(tmp_path, [fast, slow])
    assert f["straggler"]["status"] == "fail"
    assert f["straggler"]["details"]["late_rank"] == 1
    assert f["straggler"]["impact_ms"] == pytest.approx(0.060, abs=1e-6)


def test_a_wait_hidden_behind_compute_is_not_lost(tmp_path):
    # the same late rank, but rank 0 computes until 100: its 40..100 wait runs beside its own
    # compute and its step loses nothing (the old figure charged it 60 us)
    fast = ddp(rank=0, buckets=((40, 90, 7), (140, 50, 15), (190, 20, 19)))
    slow = ddp(rank=1, buckets=((100, 30, 7), (140, 50, 15), (190, 20, 19)), compute_kernels=10)
    f = findings(tmp_path, [fast, slow])
    assert f["straggler"]["status"] == "pass"
    assert f["straggler"]["impact_ms"] == pytest.approx(0.0, abs=1e-9)


def test_no_straggler_when_ranks_match(tmp_path):
    f = findings(tmp_path, [ddp(rank=0), ddp(rank=1)])
    assert f["straggler"]["status"] == "pass"


def test_straggler_needs_two_ranks(tmp_path):
    assert findings(tmp_path, ddp())["straggler"]["status"] == "n/a"


# --- host_bound ------------------------------------------------------------------------------

def host_trace(launch_bound: bool) -> GpuTrace:
    # 20 kernels of 5 us. Launch-bound: each launched 15 us after the previous one and
    # started at once (10 us idle before each). Queued: all launched up front, back to back.
    t = GpuTrace().step(1, 0, 400)
    for k in range(20):
        if launch_bound:
            t.kernel(15 * k + 2, 5, launch_us=15 * k)
        else:
            t.kernel(100 + 5 * k, 5, launch_us=1 + 0.5 * k)
    return t


def test_host_bound_fires_when_kernels_wait_for_launches(tmp_path):
    f = findings(tmp_path, host_trace(True))
    assert f["host_bound"]["status"] == "fail"


def test_host_bound_passes_when_the_queue_is_full(tmp_path):
    assert findings(tmp_path, host_trace(False))["host_bound"]["status"] == "pass"


# --- tokens_below_fw, low_bus_bandwidth (need the tracer's calibration) ----------------------

def calibrated(tokens, w_bytes_per_s, f_flops=400e12):
    return {"parallelism": "ddp", "tokens_per_microbatch": tokens, "reduce_dtype": "bfloat16",
            "calibration": {"flops_per_s": f_flops, "bus_bandwidth_bytes_per_s": w_bytes_per_s}}


def test_tokens_below_fw(tmp_path):
    # F/W = 400e12 / 50e9 = 8,000 tokens (x (N-1)/N = 1/2 for 2 GPUs: 4,000)
    assert findings(tmp_path, ddp(dtype="BFloat16"), calibrated(1024, 50e9), "a")["tokens_below_fw"]["status"] == "fail"
    assert findings(tmp_path, ddp(dtype="BFloat16"), calibrated(65536, 50e9), "b")["tokens_below_fw"]["status"] == "pass"
    assert findings(tmp_path, ddp(dtype="BFloat16"), None, "c")["tokens_below_fw"]["status"] == "n/a"


def test_low_bus_bandwidth(tmp_path):
    # the buckets move 4 MiB in 20-50 us: about 105-210 GB/s bus bandwidth
    slow = findings(tmp_path, ddp(), calibrated(4096, 2000e9), "a")["low_bus_bandwidth"]
    assert slow["status"] == "fail" and "GB/s" in slow["evidence"]
    fine = findings(tmp_path, ddp(), calibrated(4096, 140e9), "b")["low_bus_bandwidth"]
    assert fine["status"] == "pass"
    assert findings(tmp_path, ddp(), None, "c")["low_bus_bandwidth"]["status"] == "n/a"


# --- FSDP rules ------------------------------------------------------------------------------

def fsdp(units=("layers.0", "layers.1", "layers.2"), prefetch=True, reshard=True, rank=0, world=2,
         gather_us=20, unit_bytes=2000, small_extra=0, norms=False, global_norm=False):
    """An FSDP step: forward gathers and compute per unit, backward gathers, reduce-scatters.

    Forward: unit i computes 60 us; its gather (20 us) runs before its compute,
    or, with prefetch, during the previous unit's compute. Backward in reverse,
    80 us per unit; gathers (when resharded) and reduce-scatters likewise.
    """
    t = GpuTrace(rank=rank, world_size=world).step(1, 0, 2000)
    clock, launch = 0.0, 1.0
    half = unit_bytes // 2 // 2  # bf16 elements of a shard
    for i, u in enumerate(units):
        start = clock if (not prefetch or i == 0) else clock - gather_us
        t.annotation(f"FSDP::pre_forward ({u})", launch, 2).annotation(f"FSDP::all_gather ({u})", launch + 0.2, 1)
        t.comm(max(start, 0), gather_us, stream=21, collective="AllGather", nelems=half, out_nelems=2 * half,
               dtype="BFloat16", launch_us=launch + 0.5)
        clock = max(start, 0) + gather_us if (not prefetch or i == 0) else clock
        t.kernel(clock, 60, launch_us=launch + 1)
        clock += 60
        launch += 3
    for i, u in enumerate(reversed(units)):
        if reshard:
            t.annotation(f"FSDP::pre_backward ({u})", launch, 2, tid=200)
            t.annotation(f"FSDP::all_gather ({u})", launch + 0.2, 1, tid=200)
            start = clock if (not prefetch or i == 0) else clock - gather_us
            t.comm(start, gather_us, stream=21, collective="AllGather", nelems=half, out_nelems=2 * half,
                   dtype="BFloat16", launch_us=launch + 0.5, tid=200)
            clock = start + gather_us if (not prefetch or i == 0) else clock
        t.kernel(clock, 80, launch_us=launch + 1, tid=200)
        clock += 80
        t.annotation(f"FSDP::post_backward_reduce ({u})", launch + 1.5, 1, tid=200)
        t.comm(clock - 30, 25, stream=22, collective="ReduceScatter", nelems=2 * half, out_nelems=half,
               dtype="BFloat16", launch_us=launch + 1.7, tid=200)
        launch += 3
    for k in range(small_extra):  # tiny latency-bound collectives, exposed
        t.annotation(f"FSDP::all_gather (tiny.{k})", launch, 1)
        t.comm(clock + 10 * k, 8, stream=21, collective="AllGather", nelems=4, out_nelems=8, dtype="BFloat16",
               launch_us=launch + 0.3)
        launch += 2
    if norms:
        t.cpu_op("aten::_foreach_norm", launch + 2, 5)
        if global_norm:
            t.comm(clock + 400, 5, stream=23, collective="allreduce", nelems=1, dtype="Float", launch_us=launch + 8)
    return t


def fsdp_manifest(units=("layers.0", "layers.1", "layers.2"), hosts=("node0", "node0"), reshard=True, **extra):
    return {"parallelism": "fsdp", "hostnames": list(hosts),
            "units": [{"name": u, "params": 1000, "bytes": 2000, "reshard_after_forward": reshard} for u in units],
            **extra}


def test_root_only_wrap(tmp_path):
    one = findings(tmp_path, fsdp(units=("",)), fsdp_manifest(units=("",)), "a")["root_only_wrap"]
    assert one["status"] == "fail" and "one unit" in one["evidence"]
    assert findings(tmp_path, fsdp(), fsdp_manifest(), "b")["root_only_wrap"]["status"] == "pass"
    assert findings(tmp_path, ddp(), None, "c")["root_only_wrap"]["status"] == "n/a"


def test_exposed_forward_allgather(tmp_path):
    late = findings(tmp_path, fsdp(prefetch=False), fsdp_manifest(), "a")["exposed_forward_allgather"]
    assert late["status"] in ("fail", "warn") and "layers." in late["evidence"]
    assert findings(tmp_path, fsdp(prefetch=True), fsdp_manifest(), "b")["exposed_forward_allgather"]["status"] == "pass"


def test_hsdp_candidate(tmp_path):
    flat = findings(tmp_path, fsdp(prefetch=False), fsdp_manifest(hosts=("node0", "node1")), "a")["hsdp_candidate"]
    assert flat["status"] in ("fail", "warn") and "2 hosts" in flat["evidence"]
    assert findings(tmp_path, fsdp(), fsdp_manifest(), "b")["hsdp_candidate"]["status"] == "pass"


def test_unit_size_flags_latency_bound_units(tmp_path):
    small = findings(tmp_path, fsdp(small_extra=10), fsdp_manifest(), "a")["unit_size"]
    assert small["status"] in ("fail", "warn") and "latency-bound" in small["evidence"]
    assert findings(tmp_path, fsdp(), fsdp_manifest(), "b")["unit_size"]["status"] == "pass"


def test_reshard_after_forward_against_memory(tmp_path):
    roomy = fsdp(prefetch=False).memory(5, 10 * MB)
    f = findings(tmp_path, roomy, fsdp_manifest(), "a")["reshard_after_forward"]
    assert f["status"] in ("fail", "warn") and "headroom allows" in f["evidence"]
    tight = fsdp(prefetch=False).memory(5, 84_000_000_000)  # 84 of 85 GB in use
    assert findings(tmp_path, tight, fsdp_manifest(), "b")["reshard_after_forward"]["status"] == "pass"
    assert findings(tmp_path, fsdp(), fsdp_manifest(), "c")["reshard_after_forward"]["status"] == "n/a"


def test_local_grad_clipping(tmp_path):
    local = findings(tmp_path, fsdp(norms=True), fsdp_manifest(), "a")["local_grad_clipping"]
    assert local["status"] == "warn"
    glob = findings(tmp_path, fsdp(norms=True, global_norm=True), fsdp_manifest(), "b")["local_grad_clipping"]
    assert glob["status"] == "pass"


def test_uneven_tokens(tmp_path):
    def with_flops(rank, flops):
        t = ddp(rank=rank)
        t.cpu_op("aten::mm", 3, 1, **{"External id": 5000 + rank, "flops": flops})
        t.kernel(95, 1, launch_us=3.5, args={"External id": 5000 + rank})
        return t
    uneven = findings(tmp_path, [with_flops(0, 1e9), with_flops(1, 1.5e9)], None, "a")["uneven_tokens"]
    assert uneven["status"] == "warn" and "rank 1" in uneven["evidence"]
    even = findings(tmp_path, [with_flops(0, 1e9), with_flops(1, 1e9)], None, "b")["uneven_tokens"]
    assert even["status"] == "pass"


def test_every_rule_is_reported_failed_first(tmp_path):
    result = diagnose([write_bundle(tmp_path / "x", [ddp()])], workers=1)
    ids = [f["id"] for f in result["findings"]]
    assert set(ids) == {
        "tokens_below_fw", "exposed_forward_allgather", "exposed_backward_comm", "root_only_wrap", "unit_size",
        "low_bus_bandwidth", "reshard_after_forward", "hsdp_candidate", "ddp_bucket_size", "last_bucket_exposed",
        "accumulation_comm", "straggler", "fp32_reduction", "host_bound", "local_grad_clipping", "uneven_tokens",
        "other_comm"}
    order = {"fail": 0, "warn": 1, "pass": 2, "n/a": 3}
    assert [order[f["status"]] for f in result["findings"]] == sorted(order[f["status"]] for f in result["findings"])
    for f in result["findings"]:
        assert f["title"] and f["evidence"] and f["fix"] and isinstance(f["severity"], int)
    assert all(v["reason"] for v in result["thresholds"].values())
