"""The checklist's and the model's "why" on traces with a known cause: accumulation from every
source, sizes of older traces, W per collective kind and weights at their dtype, a comm-bound
forward, communication outside buckets and units, n/a naming what is missing, fixes that fit
the run. Each defect the issue quoted is a regression test here; expected values come from how
the trace was built (comments) or from the model's formulas in docs/model.md.
"""

from __future__ import annotations

import statistics

import gzip
import json
import math

import pytest

from overlapscope.analyzer.api import buckets, diagnose
from overlapscope.analyzer.checklist.setup import Setup, pick
from overlapscope.analyzer.ingest.dtypes import itemsize
from builders import NCCL_ALLREDUCE, GpuTrace, write_bundle
from intervals_ref import exposed_by_kernel, launches, read
from conftest import SAMPLES
from test_diagnose_synthetic import ddp, findings

MiB4 = 1 << 20  # float32 elements: 4 MiB


# --- accumulation: micro-batch marks, else repeated bucket ids, else the manifest -------------

TWO_BUCKETS = ((40, 30, 7), (130, 20, 19))


def test_accumulation_without_marks_fails_from_repeated_bucket_ids(tmp_path):
    # the quoted defect: 4 micro-batches, no no_sync, no tracer.microbatch(i): the tracer's bucket
    # ranges still name bucket 0 and 1 in each of the 4 backward passes of a step
    t = ddp(buckets=TWO_BUCKETS, microbatches=(None,) * 4)
    manifest = {"parallelism": "ddp", "accumulation_steps": 4, "no_sync": False,
                "buckets": [{"index": 0}, {"index": 1}]}
    f = findings(tmp_path, t, manifest, "with_manifest")
    assert f["accumulation_comm"]["status"] == "fail"
    assert "all-reduced in 4 of them" in f["accumulation_comm"]["evidence"]
    assert f["ddp_bucket_size"]["evidence"].startswith("2 buckets per backward")  # not 8
    # without the manifest the repeated ids alone tell it
    f = findings(tmp_path, ddp(buckets=TWO_BUCKETS, microbatches=(None,) * 4), None, "ids_only")
    assert f["accumulation_comm"]["status"] == "fail" and "bucket ids repeated" in f["accumulation_comm"]["evidence"]


def test_accumulation_with_marks_still_fails_without_no_sync(tmp_path):
    f = findings(tmp_path, ddp(buckets=TWO_BUCKETS, microbatches=(0, 1, 2, 3)),
                 {"parallelism": "ddp", "accumulation_steps": 4, "no_sync": False})
    assert f["accumulation_comm"]["status"] == "fail" and "micro-batch marks" in f["accumulation_comm"]["evidence"]
    assert f["ddp_bucket_size"]["evidence"].startswith("2 buckets per backward")


def _foreign_ddp(all_reduces: int) -> GpuTrace:
    """A foreign DDP trace (no bucket ranges): ``all_reduces`` all-reduces in one step, launched
    in order after a 100-us backward."""
    t = GpuTrace().step(1, 0, 1000).annotation("DistributedDataParallel.forward", 1, 5).kernel(0, 100, step=1)
    for k in range(all_reduces):
        t.comm(120 + 30 * k, 20, launch_us=30 + k, nelems=MiB4)
    return t


def test_accumulation_of_a_foreign_trace_from_the_manifest(tmp_path):
    # ids are inferred from order (0..7), so nothing repeats: the manifest says 4 micro-batches and
    # no no_sync, so all 8 all-reduces are 4 backward passes of 2 buckets
    f = findings(tmp_path, _foreign_ddp(8), {"parallelism": "ddp", "accumulation_steps": 4, "no_sync": False}, "a")
    assert f["accumulation_comm"]["status"] == "fail" and "the manifest" in f["accumulation_comm"]["evidence"]
    assert f["ddp_bucket_size"]["evidence"].startswith("2 buckets per backward")
    f = findings(tmp_path, _foreign_ddp(2), {"parallelism": "ddp", "accumulation_steps": 4, "no_sync": True}, "b")
    assert f["accumulation_comm"]["status"] == "pass"


# --- sizes of older traces: Input Dims and Input type of the launch range ---------------------

OLD_KERNEL = "ncclKernel_{}_RING_LL_Sum_float(ncclWorkElem)"
# (range name, kernel collective, Input Dims, Input type, elements of the full buffer, element size)
OLD_COLLECTIVES = (
    ("nccl:all_reduce", "AllReduce", [[394241]], ["float"], 394241, 4),
    ("nccl:_all_gather_base", "AllGather", [[2048], [1024]], ["c10::BFloat16", "c10::BFloat16"], 2048, 2),
    ("nccl:_reduce_scatter_base", "ReduceScatter", [[2048], [4096]], ["c10::Half", "c10::Half"], 4096, 2),
    ("nccl:all_to_all", "SendRecv", [[8, 1024]], ["long int"], 8192, 8),
    ("nccl:all_to_all", "SendRecv", [[1002496]], ["int"], 1002496, 4),
    ("nccl:broadcast", "Broadcast", [[100]], ["double"], 100, 8),
    ("nccl:all_reduce", "AllReduce", [[64, 64]], ["BFloat16"], 4096, 2),
)


def _older_trace() -> GpuTrace:
    """Kernels with no sizes in their args (only device, stream, correlation), launched inside
    nccl:* ranges that carry Input Dims and Input type, as PyTorch wrote them before kernels
    named their collectives (the reference traces of 2022)."""
    t = GpuTrace(rank=0, world_size=2).step(1, 0, 2000).kernel(0, 50, step=1)
    for k, (rng, kernel, dims, types, _, _) in enumerate(OLD_COLLECTIVES):
        launch = 10 + 10 * k
        t.cpu_op(rng, launch - 1, 3, **{"Input Dims": dims, "Input type": types})
        t.kernel(100 + 50 * k, 20, stream=20, name=OLD_KERNEL.format(kernel), launch_us=launch)
    return t


def test_sizes_from_the_launch_ranges_input_dims(tmp_path):
    result = buckets([write_bundle(tmp_path / "old", [_older_trace()])], workers=1)
    rows = sorted(result["collectives"], key=lambda r: r["offset_ms"])
    assert [r["bytes"] for r in rows] == [n * size for *_, n, size in OLD_COLLECTIVES]
    assert [r["collective"] for r in rows] == ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                              "all_to_all", "broadcast", "all_reduce"]
    assert all(r["busbw_gbps"] for r in rows)
    assert result["measured"]["bus_bandwidth_bytes_per_s"]  # W from the trace, where it had none


def test_sizes_of_the_reference_all_to_all_trace(reference_dir):
    """The 8-rank DLRM trace (rank 3): every collective's bytes are its launch range's elements times
    the element size, read here straight from the JSON."""
    path = reference_dir / "gpu_ddp_a100_rank3_of8" / "control.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    expected = sorted(math.prod(e["args"]["Input Dims"][0]) * {"float": 4, "int": 4}[e["args"]["Input type"][0]]
                      for e in events if e.get("name", "").startswith("nccl:"))
    rows = buckets([str(path)], workers=1)["collectives"]
    assert sorted(r["bytes"] for r in rows) == expected
    assert sum(r["collective"] == "all_to_all" for r in rows) == 42


@pytest.mark.parametrize("spelling,size", [
    ("float", 4), ("Float", 4), ("double", 8), ("half", 2), ("c10::Half", 2), ("bfloat16", 2), ("BFloat16", 2),
    ("c10::BFloat16", 2), ("int", 4), ("long int", 8), ("long", 8), ("Long", 8), ("long long int", 8),
    ("short int", 2), ("unsigned char", 1), ("signed char", 1), ("bool", 1), ("int64_t", 8), ("uint16_t", 2),
    ("torch.float16", 2), ("c10::Float8_e4m3fn", 1), ("c10::complex<float>", 8), ("ComplexDouble", 16),
])
def test_element_sizes_of_every_spelling(spelling, size):
    assert itemsize(spelling) == size


# --- the model's inputs per kind -----------------------------------------------------------


def test_fsdp_tokens_to_hide_use_the_weights_dtype_and_each_kinds_w(tmp_path):
    from test_diagnose_synthetic import fsdp, fsdp_manifest

    # gathers: 2000 bytes in 20 us over 2 ranks: busbw 2000 / 20e-6 x 1/2 = 5e7 B/s; reduce-scatters
    # 2000 bytes in 25 us: 4e7 B/s. fp32 weights and gradients (wb = gb = 4), F = 1e12, N = 2:
    # T_hide = F/2 x max(wb / 2 / W_ag, (wb / W_ag + gb / W_rs) / 4) = 0.5e12 x max(4e-8, 4.5e-8) = 22,500
    # (bf16 weights, the defect, gave 0.5e12 x (2/5e7 + 4/4e7) / 4 = 17,500: 22% low)
    manifest = fsdp_manifest(param_dtype="float32", reduce_dtype="float32", tokens_per_microbatch=20000,
                             calibration={"flops_per_s": 1e12})
    folder = write_bundle(tmp_path / "fsdp", [fsdp()], manifest)
    m = buckets([folder], workers=1)["model"][0]
    assert (m["weight_bytes"], m["grad_bytes"]) == (4.0, 4.0)
    assert m["bus_bandwidth_bytes_per_s"] == pytest.approx(5e7)
    assert m["reduce_bus_bandwidth_bytes_per_s"] == pytest.approx(4e7)
    assert m["tokens_to_hide"] == pytest.approx(22500, abs=0.1)
    assert m["verdict"] == "exposed"  # 22,500 / 20,000 = 1.125


def _hsdp_manifest(**extra) -> dict:
    """HSDP on a 2 x 2 mesh (R = 2 replicas x shard groups of G = 2), fp32, F and W from the calibration: all-gather
    5e7 B/s and reduce-scatter 4e7 B/s in the shard group, all-reduce 2e7 B/s across the replicas, and a decoy
    all-reduce of 9e9 B/s in the shard group that the replica all-reduce must not take."""
    def cal(kind, group, busbw):
        return {"kind": kind, "group": group, "group_size": 2, "bytes": 1 << 22, "seconds": 1e-3,
                "busbw_bytes_per_s": busbw}
    return {"world_size": 4, "parallelism": "hsdp", "mesh": {"shape": [2, 2], "dim_names": ["replicate", "shard"]},
            "param_dtype": "float32", "reduce_dtype": "float32", "tokens_per_microbatch": 30000,
            "calibration": {"flops_per_s": 1e12, "collectives": [
                cal("all_gather", "shard", 5e7), cal("reduce_scatter", "shard", 4e7),
                cal("all_reduce", "shard", 9e9), cal("all_reduce", "replicate", 2e7)]}, **extra}


def _hsdp_model(tmp_path, manifest: dict) -> dict:
    t = GpuTrace(rank=0, world_size=4).step(1, 0, 1000).kernel(0, 500)  # W from the calibration: no collectives
    return buckets([write_bundle(tmp_path / "hsdp", [t], manifest)], workers=1)["model"][0]


def test_the_hsdp_verdict_counts_the_replica_all_reduce(tmp_path):
    # docs/model.md, HSDP: per micro-batch, with base = F/W_ag (G-1)/G = 1e12 / 5e7 x 1/2 = 10,000, the
    # reduce-scatter's 1e12 / 4e7 x 1/2 = 12,500 and the replica all-reduce's F/W_ar (R-1)/R = 1e12 / 2e7 x 1/2
    # = 25,000, fp32 weights and gradients (wb = gb = 4):
    #   forward  wb / 2 x 10,000 = 20,000
    #   backward (wb x 10,000 + gb x 12,500) / 4 + gb / (2 G) x 25,000 = 22,500 + 25,000 = 47,500
    # T = 30,000: ratio 47,500 / 30,000 = 1.583, exposed (zero3's 22,500 alone gave 0.75, hidden)
    m = _hsdp_model(tmp_path, _hsdp_manifest())
    assert (m["stage"], m["gpus"], m["replicas"]) == ("zero3", 2, 2)
    assert m["replicate_bus_bandwidth_bytes_per_s"] == pytest.approx(2e7)  # the replicate group's, not 9e9
    assert m["tokens_to_hide"] == pytest.approx(47500, abs=0.1)
    assert m["comm_to_compute_ratio"] == pytest.approx(47500 / 30000, abs=1e-4)
    assert m["verdict"] == "exposed"


def test_hsdp_model_states_are_sharded_over_the_shard_group():
    # hsdp_2x2's manifest: 1,071,872 parameters, world 4, shard groups of 2: (4 + 12) x 1,071,872 / 2 bytes
    # (ZeRO-3 over all 4 ranks, the old figure, was half of it)
    memory = buckets([str(SAMPLES / "hsdp_2x2")], workers=1)["memory"]
    assert {m["model_state_bytes"] for m in memory} == {16 * 1_071_872 / 2}


def test_an_hsdp_run_without_its_mesh_gets_no_verdict(tmp_path):
    manifest = _hsdp_manifest()
    del manifest["mesh"]
    m = _hsdp_model(tmp_path, manifest)
    assert m["verdict"] is None and m["tokens_to_hide"] is None and m["gpus"] is None
    assert "the HSDP mesh" in m["reason"] and "replica group" in m["reason"]


def _ddp_with_slow_gathers() -> GpuTrace:
    """DDP buckets (4 MiB float32 all-reduces in 30, 50, 20 us) and, outside them, two 16 MiB
    all-gathers that take 1 ms each: a slower kind that must not set the all-reduces' W."""
    t = ddp()
    for k in range(2):
        t.comm(400 + 1100 * k, 1000, stream=24, collective="AllGather", nelems=4 * MiB4, out_nelems=8 * MiB4,
               launch_us=150 + k)
    return t


def test_w_is_the_all_reduces_own_on_a_ddp_run(tmp_path):
    # the all-reduces' busbw over 2 ranks (factor 1): 4 MiB / 30, 50, 20 us: median 4 MiB / 30 us
    result = buckets([write_bundle(tmp_path / "ddp", [_ddp_with_slow_gathers()], {"parallelism": "ddp"})],
                     workers=1)
    measured = result["measured"]
    assert measured["bus_bandwidth_bytes_per_s"] == pytest.approx(MiB4 * 4 / 30e-6)
    assert measured["bandwidth_kind"] == "all_reduce"
    # the gathers: 32 MiB out in 1 ms, x 1/2
    assert measured["bus_bandwidth_by_kind"]["all_gather"]["trace_bytes_per_s"] == pytest.approx(
        8 * MiB4 * 4 / 1e-3 / 2)


def test_low_bus_bandwidth_compares_each_kind_with_its_own_calibration(tmp_path):
    # the quoted defect: one W over every kind said "94%, pass" while the all-reduces reached 36%
    # of the calibrated all-reduce bandwidth. Calibrated here: all-reduce 400 GB/s (the trace's
    # 4 MiB / 30 us = 139.8 GB/s is 35% of it), all-gather 16.8 GB/s (the trace's 32 MiB / 1 ms x 1/2
    # = 16.78 GB/s is 100%), overall 149 GB/s (94% of the all-reduces: the old pass).
    w_ar = MiB4 * 4 / 30e-6
    manifest = {"parallelism": "ddp", "calibration": {"bus_bandwidth_bytes_per_s": 149e9, "collectives": [
        {"kind": "all_reduce", "group_size": 2, "bytes": 1 << 22, "seconds": 1e-5, "busbw_bytes_per_s": 400e9},
        {"kind": "all_gather", "group_size": 2, "bytes": 1 << 22, "seconds": 1e-5, "busbw_bytes_per_s": 16.8e9}]}}
    f = findings(tmp_path, _ddp_with_slow_gathers(), manifest)["low_bus_bandwidth"]
    assert f["status"] == "fail" and f["details"]["kind"] == "all_reduce"
    assert f["details"]["ratio"] == pytest.approx(w_ar / 400e9)
    assert "all_reduce: 140 GB/s, 35% of the 400 GB/s" in f["evidence"]
    assert "against the calibration of the same kind:" in f["evidence"]


def test_low_bus_bandwidth_says_when_the_calibration_has_one_w_for_every_kind(tmp_path):
    # an older calibration: one W (149 GB/s), no per-kind figures. All-reduces 4 MiB / 30 us = 139.8 GB/s (94%),
    # all-gathers 32 MiB / 1 ms x 1/2 = 16.78 GB/s (11%): the gathers fail, and the evidence must not claim a
    # calibration of their own kind
    manifest = {"parallelism": "ddp", "calibration": {"bus_bandwidth_bytes_per_s": 149e9}}
    f = findings(tmp_path, _ddp_with_slow_gathers(), manifest)["low_bus_bandwidth"]
    assert f["status"] == "fail" and f["details"]["kind"] == "all_gather"
    assert f["details"]["ratio"] == pytest.approx(8 * MiB4 * 4 / 1e-3 / 2 / 149e9)
    assert "against the calibration's one W over every kind (it has no per-kind figures)" in f["evidence"]
    assert "same kind" not in f["evidence"] and "all_reduce: 140 GB/s, 94% of the 149 GB/s" in f["evidence"]


# --- a comm-bound forward ------------------------------------------------------------------


def _comm_bound_forward() -> GpuTrace:
    """FSDP2 forward of 4 units, 60 us of compute each; every gather takes 100 us. Prefetch works:
    gather i+1 starts with unit i's compute, so 60 of its 100 us hide and 40 are exposed:
    3 x 40 = 120 us per 1000-us step (12%) after the first unit; 60% of the gathers hidden."""
    t = GpuTrace().step(1, 0, 1000)
    for i in range(4):
        u = f"layers.{i}"
        t.annotation(f"FSDP::pre_forward ({u})", 1 + 3 * i, 2).annotation(f"FSDP::all_gather ({u})", 1.2 + 3 * i, 1)
        t.comm(100 * i, 100, stream=21, collective="AllGather", nelems=1000, out_nelems=2000, dtype="BFloat16",
               launch_us=1.5 + 3 * i)
        t.kernel(100 * (i + 1), 60, launch_us=2 + 3 * i)
    t.kernel(999, 1, launch_us=20)  # the step's window reaches 1000 us
    return t


def test_a_comm_bound_forward_fails(tmp_path):
    f = findings(tmp_path, _comm_bound_forward(), {"parallelism": "fsdp"})["exposed_forward_allgather"]
    assert f["status"] == "fail"  # it passed: "over half is hidden"
    assert f["impact_ms"] == pytest.approx(0.120, abs=1e-6)
    assert "comm-bound" in f["evidence"] and "60% hidden" in f["evidence"]
    assert "F/W" in f["fix"] and "HSDP" in f["fix"]


# --- communication outside buckets and units -------------------------------------------------


def test_other_comm_names_the_all_to_alls_of_the_dlrm_trace(reference_dir):
    """The 8-rank DLRM trace (rank 3): the all-to-alls' exposed time per step, computed here in plain Python
    from the JSON (tests/intervals_ref.py: each collective kernel's interval minus the compute union, shared
    out where collectives run together; a kernel is an all-to-all when its launch sits in nccl:all_to_all,
    and belongs to the ProfilerStep that holds its launch), aggregated as the headline is (the median over
    the steps of their sum: one rank), equals the finding's."""
    path = reference_dir / "gpu_ddp_a100_rank3_of8" / "control.json.gz"
    trace = read(path)
    exposed_us, launched = exposed_by_kernel(trace), launches(trace)
    mine = [c for c in exposed_us if launched.get(c, (None, None))[1] == "nccl:all_to_all"
            and launched[c][0] is not None]
    steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    by_step = {int(e["name"].split("#")[1]): 0.0 for e in steps}
    for c in mine:
        by_step[launched[c][0]] += float(exposed_us[c]) / 1000
    per_step_ms = statistics.median(by_step.values())
    median_step_ms = statistics.median(float(e["dur"]) / 1000 for e in steps)
    assert (len(mine), len(steps)) == (42, 6) and per_step_ms / median_step_ms >= 0.10  # fail, by the reference

    f = next(f for f in diagnose([str(path)], workers=1)["findings"] if f["id"] == "other_comm")
    kind = f["details"]["kinds"][0]
    assert f["status"] == "fail" and f["evidence"].split(": ")[1] == "all_to_all"
    assert kind["collective"] == "all_to_all" and kind["per_step"] == 7
    assert kind["exposed_ms"] == pytest.approx(per_step_ms, abs=1e-6)
    assert len(f["details"]["kinds"]) == 1 and f["impact_ms"] == pytest.approx(per_step_ms, abs=1e-6)
    assert "embedding" in f["fix"]


def test_other_comm_measures_an_exposed_broadcast(tmp_path):
    # DDP's buffer broadcast: 50 us per step with no compute beside it, in a ~200-us step
    t = ddp()
    t.comm(160, 50, stream=25, collective="Broadcast", nelems=1000, launch_us=25)
    f = findings(tmp_path, t)["other_comm"]
    assert f["status"] == "fail" and f["impact_ms"] > 0
    assert "broadcast: 1 per step" in f["evidence"] and "broadcast_buffers" in f["fix"]
    assert findings(tmp_path, ddp(), None, "none")["other_comm"]["status"] == "pass"


# --- n/a names what is missing ---------------------------------------------------------------


def test_bucket_size_without_sizes_is_not_a_pass(tmp_path):
    # the quoted defect: "median ? bytes", pass. 12 buckets whose kernels carry no sizes.
    t = GpuTrace().step(1, 0, 300)
    for k in range(10):
        t.kernel(10 * k, 10, launch_us=2 + 2 * k)
    for i in range(12):
        t.annotation(f"overlapscope:ddp_bucket#{i}", 2 + i, 1.5, tid=200)
        t.kernel(110 + 10 * i, 8, stream=20, name=NCCL_ALLREDUCE, launch_us=2.5 + i, tid=200,
                 args={"Collective name": "allreduce"})
    f = findings(tmp_path, t, {"parallelism": "ddp"})["ddp_bucket_size"]
    assert f["status"] == "n/a" and "no bucket sizes" in f["evidence"]


# --- fixes that fit the run ----------------------------------------------------------------


# No FSDP advice on DDP: the APIs, and the word itself ("fewer and larger FSDP units" was host_bound's fix on
# every DDP run, the DLRM reference trace included, and no API name caught it)
FSDP_APIS = ("FSDP", "fully_shard", "FullyShardedDataParallel", "set_modules_to", "reshard_after_forward",
             "MixedPrecisionPolicy", "HYBRID_SHARD", "ZeRO-3", "set_requires_gradient_sync")


def _fixes(path) -> dict[str, str]:
    return {f["id"]: f["fix"] for f in diagnose([str(path)], workers=1)["findings"]}


def test_fixes_fit_a_gloo_ddp_run():
    fixes = _fixes(SAMPLES / "ddp")
    for rule_id, fix in fixes.items():
        assert "NCCL_" not in fix and "NVLS" not in fix, rule_id  # no NCCL settings on gloo
        for api in FSDP_APIS:  # no FSDP advice on DDP
            assert api not in fix, (rule_id, api)
    assert "no_sync" in fixes["accumulation_comm"]
    assert fixes["host_bound"].startswith("Nothing to change here: on a CPU-only run")


def test_fixes_fit_a_gpu_ddp_run(reference_dir):
    # the 8-rank DLRM trace (rank 3): DDP on NCCL, GPUs, host-bound (warn): launch advice for DDP
    fixes = _fixes(reference_dir / "gpu_ddp_a100_rank3_of8" / "control.json.gz")
    for rule_id, fix in fixes.items():
        for api in FSDP_APIS:
            assert api not in fix, (rule_id, api)
    host = fixes["host_bound"]
    assert "find_unused_parameters=False" in host and "CUDA graphs" in host and "num_workers" in host
    assert "TORCH_NCCL_HIGH_PRIORITY" in fixes["exposed_backward_comm"]  # NCCL named on NCCL


def test_fixes_fit_fsdp1_and_fsdp2():
    one, two = _fixes(SAMPLES / "fsdp1_per_block"), _fixes(SAMPLES / "fsdp_per_block")
    # each flavour's own prefetch API, never the other's; these CPU samples' FSDP collectives block
    # compute (gloo), where the fix says no prefetch hides them instead
    for fixes, mine, other in ((one, "forward_prefetch=True", "set_modules_to_forward_prefetch"),
                               (two, "set_modules_to_forward_prefetch", "forward_prefetch=True")):
        fix = fixes["exposed_forward_allgather"]
        assert other not in fix, fix
        assert mine in fix or "F/W" in fix or "FSDP waits for each collective where it issues it" in fix, fix
    assert "MixedPrecision(reduce_dtype" in one["fp32_reduction"]
    assert "MixedPrecisionPolicy" in two["fp32_reduction"]
    assert "HYBRID_SHARD" in one["hsdp_candidate"] and "init_device_mesh" in two["hsdp_candidate"]
    for fixes in (one, two):
        assert all("NCCL_" not in fix for fix in fixes.values())
        assert "bucket_cap_mb" not in fixes["accumulation_comm"]


def test_pick_prefers_the_runs_own_parallelism_whatever_the_order():
    # the quoted defect: variants fsdp= then hsdp= gave an HSDP run "shard within the node (HSDP)"
    hsdp = Setup("gloo", "hsdp", "fsdp2", "cpu")
    assert pick(hsdp, fsdp="F", hsdp="H") == "H" == pick(hsdp, hsdp="H", fsdp="F")
    assert pick(Setup("gloo", "fsdp", "fsdp2", "cpu"), fsdp="F", hsdp="H") == "F"
    assert pick(hsdp, fsdp="F", default="D") == "F"  # the family still beats no key at all
    # equally specific (the flavour and the parallelism): the order given decides
    assert pick(hsdp, fsdp2="2", hsdp="H") == "2" and pick(hsdp, hsdp="H", fsdp2="2") == "H"


def test_fixes_fit_an_hsdp_run():
    # hsdp_2x2: FSDP2 on a 2 x 2 mesh (2 replicas x shard groups of 2), all four ranks on host "vm"
    fixes = _fixes(SAMPLES / "hsdp_2x2")
    assert "(HSDP)" not in fixes["tokens_below_fw"] and "shard group size G" in fixes["tokens_below_fw"]
    tune = fixes["hsdp_candidate"]
    assert tune.startswith("Already HSDP: tune the shard group size G (now 2 replicas x G = 2)")
    assert "(nodes, gpus_per_node)" not in tune and "HYBRID_SHARD" not in tune  # HSDP is not advised to HSDP
    f = {f["id"]: f for f in diagnose([str(SAMPLES / "hsdp_2x2")], workers=1)["findings"]}["hsdp_candidate"]
    assert f["status"] == "pass" and f["evidence"] == ("already HSDP: 2 replicas x shard groups of 2, each shard "
                                                       "group on one host (vm)")


def test_an_hsdp_shard_group_across_hosts_is_flagged(tmp_path):
    from test_diagnose_synthetic import fsdp, fsdp_manifest

    # mesh [2, 2]: shard groups are ranks (0, 1) and (2, 3); hosts alternate, so both groups span two hosts
    manifest = fsdp_manifest(hosts=("node0", "node1", "node0", "node1"), parallelism="hsdp",
                             mesh={"shape": [2, 2], "dim_names": ["replicate", "shard"]})
    f = findings(tmp_path, fsdp(prefetch=False, world=4), manifest, "spread")["hsdp_candidate"]
    assert f["status"] in ("fail", "warn") and "2 of 2 shard groups span hosts" in f["evidence"]
    assert f["fix"].startswith("Already HSDP")
    manifest["hostnames"] = ["node0", "node0", "node1", "node1"]
    f = findings(tmp_path, fsdp(prefetch=False, world=4), manifest, "packed")["hsdp_candidate"]
    assert f["status"] == "pass" and "each shard group on one host (node0, node1)" in f["evidence"]


def test_fix_variants_follow_the_device(tmp_path):
    from test_diagnose_synthetic import fsdp, fsdp_manifest

    # the same FSDP2 advice on a GPU trace (hand-built, forward gathers not prefetched) and on the CPU sample
    # hsdp_2x2 (gloo): device-to-host syncs and launches on the GPU, gloo's threads and cores on the CPU
    gpu = {k: f["fix"] for k, f in findings(tmp_path, fsdp(prefetch=False), fsdp_manifest()).items()}
    cpu = _fixes(SAMPLES / "hsdp_2x2")
    assert ".item()" in gpu["exposed_forward_allgather"] and "gloo" not in gpu["exposed_forward_allgather"]
    assert "On CPU (gloo)" in cpu["exposed_forward_allgather"] and ".item()" not in cpu["exposed_forward_allgather"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" in gpu["exposed_backward_comm"]
    assert "gloo runs collectives on its own CPU threads" in cpu["exposed_backward_comm"]
    assert "CUDA" not in cpu["exposed_backward_comm"]
    assert "one fully_shard call" in gpu["host_bound"] and "find_unused_parameters" not in gpu["host_bound"]
    assert cpu["host_bound"].startswith("Nothing to change here: on a CPU-only run")


def test_fixes_on_nccl_name_nccl(tmp_path):
    f = findings(tmp_path, ddp(), {"parallelism": "ddp"})
    assert "TORCH_NCCL_HIGH_PRIORITY" in f["exposed_backward_comm"]["fix"]
    assert "FSDP" not in f["exposed_backward_comm"]["fix"]


# --- the model beside the measurement, on a real run --------------------------------------------


def test_the_straggler_sample_explains_why_the_hidden_verdict_does_not_hold():
    # the quoted defect: "Verdict at T = 512: hidden" beside ~100 ms of exposed comm per step,
    # unexplained. ddp_straggler: rank 1 sleeps 100 ms before every backward.
    result = buckets([str(SAMPLES / "ddp_straggler")], workers=1)
    rows = [m for m in result["model"] if m["rank"] == 0]
    assert all(m["verdict"] == "hidden" for m in rows)
    for m in rows:
        d = m["disagreement"]
        assert d["term"] == "late_rank" and d["late_rank"] == 1
        assert d["terms"]["late_rank"] > 50  # ms of the ~100-ms sleep
        assert d["measured_exposed_ms"] > 10 * d["predicted_exposed_ms"]


def _prefetched_forward(gather_us: float, prefetch: bool) -> GpuTrace:
    """FSDP2 forward of 4 units (60 us of compute each) then one backward unit (80 us) and its
    reduce-scatter. With prefetch, gather i+1 is issued when unit i's compute is: it runs while
    unit i computes, so 60 us of it hide whatever its length; without, it starts after unit i's
    compute and nothing hides it."""
    t = GpuTrace().step(1, 0, 3000)
    clock, lane = 0.0, 0.0
    for i in range(4):
        u = f"layers.{i}"
        t.annotation(f"FSDP::pre_forward ({u})", 1 + 3 * i, 2).annotation(f"FSDP::all_gather ({u})", 1.2 + 3 * i, 1)
        start = max(lane, clock) if prefetch or i == 0 else clock
        if prefetch and i > 0:
            start = max(lane, clock - 60)  # issued with the previous unit's compute
        t.comm(start, gather_us, stream=21, collective="AllGather", nelems=1000, out_nelems=2000, dtype="BFloat16",
               launch_us=1.5 + 3 * i)
        lane = start + gather_us
        clock = max(clock, lane)
        t.kernel(clock, 60, launch_us=2 + 3 * i)
        clock += 60
    t.annotation("FSDP::post_backward_reduce (layers.3)", 20, 1, tid=200)
    t.kernel(clock, 80, launch_us=19, tid=200)
    t.comm(clock + 80, 30, stream=22, collective="ReduceScatter", nelems=2000, out_nelems=1000, dtype="BFloat16",
           launch_us=20.5, tid=200)
    t.kernel(2999, 1, launch_us=25)  # the step's window reaches 3000 us
    return t


def test_a_strongly_comm_bound_forward_is_not_told_prefetch_is_broken(tmp_path):
    """Gathers of 200 us behind 60 us of compute: 60 of each later gather's 200 us hide (30%), all
    the compute there is. Before: "under half hidden, prefetch is not working"."""
    f = findings(tmp_path, _prefetched_forward(200, prefetch=True), {"parallelism": "fsdp"})["exposed_forward_allgather"]
    assert f["status"] == "fail"
    assert f["impact_ms"] == pytest.approx(3 * 0.140, abs=1e-6)  # 140 of each later gather's 200 us exposed
    assert "comm-bound" in f["evidence"] and "prefetch is not working" not in f["evidence"], f["evidence"]
    assert "F/W" in f["fix"]
    late = findings(tmp_path, _prefetched_forward(200, prefetch=False), {"parallelism": "fsdp"}, "late")
    f = late["exposed_forward_allgather"]
    assert f["status"] == "fail" and "prefetch is not working" in f["evidence"], f["evidence"]
    assert "set_modules_to_forward_prefetch" in f["fix"]
