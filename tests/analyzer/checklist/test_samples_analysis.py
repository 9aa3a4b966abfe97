"""The analyses on the real sample runs (tracer bundles captured on CPU with gloo).

Expected values come from the bundles' manifests (what the tracer recorded from
the live DDP/FSDP objects) and from the seed's tables, not from the analyzer.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from overlapscope.analyzer.api import analyze, buckets, diagnose
from conftest import SAMPLES, step_parts_ms


def bundle(name: str):
    path = SAMPLES / name
    if not (path / "manifest.json").is_file():
        pytest.skip(f"sample run {name} not found")
    return path, json.loads((path / "manifest.json").read_text())


_CACHE: dict = {}


def analysis(name: str, what: str):
    key = (name, what)
    if key not in _CACHE:
        path, _ = bundle(name)
        _CACHE[key] = {"buckets": buckets, "diagnose": diagnose, "analyze": analyze}[what]([str(path)])
    return _CACHE[key]


def findings(name: str) -> dict:
    return {f["id"]: f for f in analysis(name, "diagnose")["findings"]}


# --- buckets ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ddp", "ddp_tiny_buckets", "ddp_straggler"])
def test_ddp_buckets_seen_equal_the_manifest(name):
    _, manifest = bundle(name)
    expected = {str(b["index"]): b["bytes"] for b in manifest["buckets"]}
    rows = [r for r in analysis(name, "buckets")["collectives"] if r["kind"] == "ddp_bucket"]
    per_backward = defaultdict(dict)
    for r in rows:
        assert not r["inferred"] and r["phase"] == "allreduce"
        per_backward[(r["rank"], r["step"], r["microbatch"])][r["id"]] = r["bytes"]
    assert len(per_backward) == manifest["world_size"] * len(manifest["profiled_steps"])
    for seen in per_backward.values():
        assert seen == expected


def test_fsdp_gathers_each_unit_twice_per_step():
    _, manifest = bundle("fsdp_per_block")
    rows = [r for r in analysis("fsdp_per_block", "buckets")["collectives"] if r["kind"] == "fsdp_unit"]
    steps = manifest["world_size"] * len(manifest["profiled_steps"])
    gathers = Counter(r["id"] for r in rows if r["phase"].endswith("allgather"))
    scatters = Counter(r["id"] for r in rows if r["phase"] == "reduce_scatter")
    for unit in manifest["units"]:
        # FSDP2 keeps the root gathered after forward (its reshard_after_forward is False)
        expected = 2 if unit["reshard_after_forward"] else 1
        assert gathers[unit["name"]] == expected * steps, unit["name"]
        assert scatters[unit["name"]] == steps, unit["name"]
    assert {r["id"] for r in rows} == {u["name"] for u in manifest["units"]}


def test_fsdp_without_resharding_gathers_once():
    _, manifest = bundle("fsdp_no_reshard")
    rows = [r for r in analysis("fsdp_no_reshard", "buckets")["collectives"] if r["kind"] == "fsdp_unit"]
    steps = manifest["world_size"] * len(manifest["profiled_steps"])
    assert not any(r["phase"] == "backward_allgather" for r in rows)
    gathers = Counter(r["id"] for r in rows if r["phase"] == "forward_allgather")
    assert all(gathers[u["name"]] == steps for u in manifest["units"])


def test_ddp_accumulation_follows_the_seed():
    # seed, "Gradient accumulation": DDP inside no_sync() sends 2 Psi per step whatever m;
    # without no_sync every micro-batch all-reduces: m times the bytes.
    def bytes_per_step(name):
        rows = [r for r in analysis(name, "buckets")["collectives"] if r["kind"] == "ddp_bucket"]
        per = defaultdict(int)
        for r in rows:
            per[(r["rank"], r["step"])] += r["bytes"]
        return set(per.values())

    _, nosync = bundle("ddp_accum_nosync")
    _, sync = bundle("ddp_accum_sync")
    assert nosync["accumulation_steps"] == sync["accumulation_steps"] == 2
    grad = nosync["gradient_bytes"]
    assert bytes_per_step("ddp_accum_nosync") == {grad}
    assert bytes_per_step("ddp_accum_sync") == {2 * grad}


def test_hsdp_reduce_scatters_then_all_reduces_across_replicas():
    _, manifest = bundle("hsdp_2x2")
    rows = [r for r in analysis("hsdp_2x2", "buckets")["collectives"] if r["kind"] == "fsdp_unit"]
    phases = Counter(r["phase"] for r in rows)
    steps = manifest["world_size"] * len(manifest["profiled_steps"])
    assert phases["reduce_scatter"] == len(manifest["units"]) * steps
    assert phases["allreduce"] == len(manifest["units"]) * steps
    shape = manifest["mesh"]["shape"]
    assert {r["group_size"] for r in rows if r["phase"] == "allreduce"} == {shape[0]}
    assert {r["group_size"] for r in rows if r["phase"] == "reduce_scatter"} == {shape[1]}


@pytest.mark.parametrize("name", ["ddp", "fsdp_per_block"])
def test_predictions_beside_measurements(name):
    result = analysis(name, "buckets")
    rows = [r for r in result["collectives"] if r["kind"] != "other"]
    assert rows and all(r["predicted_comm_ms"] is not None for r in rows)
    assert all(r["predicted_exposed_ms"] is not None for r in rows)
    assert all(m["flops_per_s"] and m["bus_bandwidth_bytes_per_s"] and m["verdict"] for m in result["model"])
    assert all(s["predicted_comm_ms"] is not None for s in result["steps"])


# --- diagnose ---------------------------------------------------------------------------------

def test_root_only_wrap_on_samples():
    assert findings("fsdp_root_only")["root_only_wrap"]["status"] == "fail"
    assert findings("fsdp_per_block")["root_only_wrap"]["status"] == "pass"


def test_accumulation_on_samples():
    assert findings("ddp_accum_sync")["accumulation_comm"]["status"] == "fail"
    assert findings("ddp_accum_nosync")["accumulation_comm"]["status"] == "pass"


def test_tiny_buckets_on_samples():
    tiny = findings("ddp_tiny_buckets")["ddp_bucket_size"]
    assert tiny["status"] == "fail" and "too small" in tiny["evidence"]


def test_straggler_on_samples():
    slow = findings("ddp_straggler")["straggler"]
    assert slow["status"] == "fail" and slow["details"]["late_rank"] == 1
    assert findings("ddp")["straggler"]["status"] in ("pass", "warn")


def test_fp32_reduction_on_samples():
    assert findings("fsdp_bf16_fp32_reduce")["fp32_reduction"]["status"] == "fail"


def test_hsdp_sample_is_not_an_hsdp_candidate():
    assert findings("hsdp_2x2")["hsdp_candidate"]["status"] == "pass"


@pytest.mark.parametrize("name", ["ddp", "fsdp_per_block", "hsdp_2x2", "fsdp1_per_block", "ddp_accum_sync"])
def test_every_sample_analyzes(name):
    path, manifest = bundle(name)
    result = analysis(name, "analyze")
    assert len(result["ranks"]) == manifest["world_size"]
    assert all(r["steps"] == len(manifest["profiled_steps"]) for r in result["ranks"])
    assert all(r["comm_ms"] > 0 and r["compute_ms"] > 0 for r in result["ranks"])


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.iterdir() if (p / "manifest.json").is_file())
                         if SAMPLES.is_dir() else [])
def test_step_and_rank_times_add_up(name):
    # Two routes to the same time: launch-attributed work (compute, exposed comm) and the
    # window's coverage (idle, other, spill); they must meet to the nanosecond.
    result = analysis(name, "analyze")
    for s in result["steps"]:
        assert min(s["idle_ms"], s["other_ms"], s["spill_in_ms"], s["spill_out_ms"]) >= 0
        assert step_parts_ms(s) == pytest.approx(s["step_ms"], abs=1e-5), (s["rank"], s["step"])
    for r in result["ranks"]:
        assert r["compute_ms"] + r["exposed_comm_ms"] + r["other_ms"] + r["idle_ms"] \
            == pytest.approx(r["span_ms"], abs=1e-5)


def test_small_messages_are_latency_bound_not_a_slow_network():
    """Buckets of at most 512 KB (the manifest's) measure the per-message latency, not the links:
    before, low_bus_bandwidth failed (43% of the calibrated W) and tokens_below_fw took that W."""
    _, manifest = bundle("ddp_tiny_buckets")
    largest = max(b["bytes"] for b in manifest["buckets"])
    assert largest < 1 << 20
    calibrated = [c for c in manifest["calibration"]["collectives"] if c["kind"] == "all_reduce"]
    w_cal = max(calibrated, key=lambda c: c["bytes"])["busbw_bytes_per_s"]
    f = findings("ddp_tiny_buckets")
    assert f["low_bus_bandwidth"]["status"] == "n/a"
    assert "latency-bound" in f["low_bus_bandwidth"]["evidence"]
    assert f"at most {largest / 1e3:.3g} KB" in f["low_bus_bandwidth"]["evidence"]
    assert f"W = {w_cal / 1e9:.3g} GB/s (all-reduce, calibration)" in f["tokens_below_fw"]["evidence"]
    measured = analysis("ddp_tiny_buckets", "buckets")["measured"]
    kind = measured["bus_bandwidth_by_kind"]["all_reduce"]
    assert (kind["trace_bytes_per_s"], kind["latency_bound"], kind["largest_bytes"]) == (None, True, largest)
    assert measured["bus_bandwidth_bytes_per_s"] == pytest.approx(w_cal)
    # the ddp sample's buckets reach 3.2 MB: bandwidth-bound, measured from the trace
    assert analysis("ddp", "buckets")["measured"]["bandwidth_source"] == "trace"
    assert findings("ddp")["low_bus_bandwidth"]["status"] != "n/a"
