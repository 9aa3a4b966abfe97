"""Ranks on one clock and the straggler's wall-clock loss, on hand-built GPU traces whose
answers are known by construction.

Every rank runs the same steps (1000 us apart): compute kernels on stream 7 until
C (the late rank: C + X), and bucket all-reduces launched when their gradients are
ready (at 30%, 60% and 100% of the rank's compute). A collective ends on every rank
when the last one has arrived and transferred (d us), so an early rank's last bucket
starts at C and ends at C + X + d: it loses X per step, and nothing else (its earlier
waits run beside its own compute). Clocks: a rank's whole trace may be shifted by a
constant, which the analysis must find and undo only where ranks are compared.
"""

from __future__ import annotations

import json

import pytest

from overlapscope.analyzer.api import analyze, buckets, diagnose
from builders import GpuTrace

STEP_US = 1000.0
READY = (0.3, 0.6, 1.0)  # bucket i is ready at this share of the rank's compute


def _rank(rank: int, world: int, late: int, c_us: float, x_us: float, d_us: float = 20.0, steps: int = 3,
          concurrent: bool = False, host_gaps: bool = False, flops: float | None = None) -> GpuTrace:
    t = GpuTrace(rank=rank, world_size=world)
    mine = c_us + (x_us if rank == late else 0.0)
    last = c_us + x_us
    for s in range(steps):
        base = s * STEP_US
        t.step(s + 1, base, STEP_US)
        t.annotation("DistributedDataParallel.forward", base + 0.1, 0.05)  # a DDP run: the all-reduces are buckets
        kernels, at = 10, base
        gap = x_us / kernels if (host_gaps and rank == late) else 0.0
        work = (mine - gap * kernels) / kernels
        for k in range(kernels):
            at += gap
            # a kernel that starts 2 us after its launch, after an idle gap: the device waited for the host;
            # else launched 30 us ahead of its start, as a host running ahead does (so a bucket's gradients
            # are ready when the kernels launched before it end, as in the backward it models)
            t.kernel(at, work, launch_us=(at - 2.0) if gap else max(base + 0.5 + 0.1 * k, at - 30.0))
            at += work
        if flops:
            t.cpu_op("aten::mm", base + 0.2, 0.1, flops=flops * (1.3 if rank == late else 1.0))
        for i, share in enumerate(READY):
            if concurrent:  # every bucket launched at the end of the compute, each on its own stream
                start, end, stream = base + mine, base + last + d_us, 20 + i
            else:
                start, end, stream = base + mine * share, base + last * share + d_us, 20
            t.comm(start, end - start, stream=stream, launch_us=start - 1.0)
    return t


def _shift(trace: GpuTrace, shift_us: float) -> dict:
    """The trace with every timestamp moved by ``shift_us`` (another host's clock)."""
    data = trace.to_json()
    for e in data["traceEvents"]:
        if "ts" in e:
            e["ts"] += shift_us
    return data


def _bundle(tmp_path, name, traces, shifts=None) -> str:
    folder = tmp_path / name
    folder.mkdir()
    for t in traces:
        data = _shift(t, (shifts or {}).get(t.rank, 0.0))
        (folder / f"rank-{t.rank}.json").write_text(json.dumps(data))
    return str(folder)


def _straggler(path) -> dict:
    return next(f for f in diagnose([path], workers=1)["findings"] if f["id"] == "straggler")


def test_the_loss_is_what_the_late_rank_costs_the_others_per_step(tmp_path):
    # 4 ranks; rank 3 computes 1.3x longer (400 -> 520 us): the others lose 120 us per step
    traces = [_rank(r, 4, late=3, c_us=400, x_us=120) for r in range(4)]
    f = _straggler(_bundle(tmp_path, "run", traces))
    assert f["details"]["late_rank"] == 3
    assert f["impact_ms"] == pytest.approx(0.120, rel=0.25)
    assert f["details"]["lost_ms"] == pytest.approx(0.120, abs=1e-6)  # exact here: ends align to the ns
    # per step, not per rank-step, as the headline aggregates: 120 us of the slowest rank's median
    # step (steps of 1000, 1000 and 540 us: the last one ends with its last bucket) is 12.0%, over
    # straggler_fail (10%); and the what-if with rank 3 on time is linked, saving those 120 us
    assert f["status"] == "fail" and "12.0% of the step" in f["evidence"]
    assert f["predicted_gain_ms"] == pytest.approx(0.120, rel=0.05) and f["whatif"] == "--on-time 3"
    assert f["details"]["cause"] == "slow_compute" and "Rank 3 computes 0.52 ms per step against 0.4 ms" in f["evidence"]


def test_concurrent_waits_count_once(tmp_path):
    # three buckets on three streams all wait the same 120 us: summing them would say 360 us
    traces = [_rank(r, 4, late=3, c_us=400, x_us=120, concurrent=True) for r in range(4)]
    f = _straggler(_bundle(tmp_path, "run", traces))
    assert f["impact_ms"] == pytest.approx(0.120, abs=1e-6)
    assert f["details"]["late_rank"] == 3


def test_a_small_lateness_only_warns(tmp_path):
    traces = [_rank(r, 2, late=0, c_us=400, x_us=50) for r in range(2)]  # 50 us of 1000: 5%
    f = _straggler(_bundle(tmp_path, "run", traces))
    assert (f["status"], f["details"]["late_rank"]) == ("warn", 0)
    assert f["impact_ms"] == pytest.approx(0.050, abs=1e-6)


def test_the_late_ranks_own_cause_is_named(tmp_path):
    host = [_rank(r, 2, late=1, c_us=400, x_us=150, host_gaps=True) for r in range(2)]
    f = _straggler(_bundle(tmp_path, "host", host))
    assert f["details"]["cause"] == "host_bound" and "see host_bound" in f["evidence"]
    assert "host" in f["fix"]
    uneven = [_rank(r, 2, late=1, c_us=400, x_us=120, flops=1e9) for r in range(2)]
    f = _straggler(_bundle(tmp_path, "uneven", uneven))
    assert f["details"]["cause"] == "uneven_tokens" and "30% more matmul FLOPs" in f["evidence"]
    assert "tokens" in f["fix"]


def test_a_shifted_clock_is_found_and_changes_no_per_rank_figure(tmp_path):
    traces = [_rank(r, 4, late=3, c_us=400, x_us=120) for r in range(4)]
    plain = _bundle(tmp_path, "plain", traces)
    shifted = _bundle(tmp_path, "shifted", traces, shifts={2: 3_700.0, 3: -1_250.0})  # us
    a, b = analyze([plain], workers=1), analyze([shifted], workers=1)
    offsets = {r["rank"]: r["clock_offset_ms"] for r in b["ranks"]}
    assert offsets[0] == 0.0
    assert offsets[2] == pytest.approx(-3.7, abs=0.050)  # within 50 us (exact on these traces)
    assert offsets[3] == pytest.approx(1.25, abs=0.050)
    assert offsets[1] == pytest.approx(0.0, abs=0.050)
    drop = ("clock_offset_ms",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a["ranks"]] == \
           [{k: v for k, v in r.items() if k not in drop} for r in b["ranks"]]
    assert a["steps"] == b["steps"] and a["headline"] == b["headline"]
    # comparisons between ranks see through the shift
    assert _straggler(plain)["details"] == _straggler(shifted)["details"]


def test_the_wait_and_transfer_split_adds_up_to_comm(tmp_path):
    traces = [_rank(r, 2, late=1, c_us=400, x_us=120) for r in range(2)]
    ranks = {r["rank"]: r for r in analyze([_bundle(tmp_path, "run", traces)], workers=1)["ranks"]}
    for r in ranks.values():
        assert r["comm_wait_ms"] + r["comm_transfer_ms"] == pytest.approx(r["comm_ms"], abs=1e-6)
    # the late rank never waits; the early one waits 120 us + the hidden waits of buckets 0 and 1
    # (ready at 30%/60% of 400 vs of 520 us: 36 and 72 us) per step, 3 steps
    assert ranks[1]["comm_wait_ms"] == 0
    assert ranks[0]["comm_wait_ms"] == pytest.approx(3 * (0.120 + 0.036 + 0.072), abs=1e-6)
    assert ranks[0]["exposed_wait_ms"] == pytest.approx(3 * 0.120, abs=1e-6)
    assert ranks[0]["comm_transfer_ms"] == pytest.approx(3 * 3 * 0.020, abs=1e-6)


def test_one_rank_has_no_split(tmp_path):
    (r,) = analyze([_bundle(tmp_path, "one", [_rank(0, 2, late=1, c_us=400, x_us=0)])], workers=1)["ranks"]
    assert r["clock_offset_ms"] == 0.0 and r["comm_wait_ms"] is None and r["comm_transfer_ms"] is None


def test_the_timeline_draws_ranks_on_one_clock(tmp_path):
    from overlapscope.analyzer.engine.load import load
    from overlapscope.analyzer.measure import timeline

    traces = [_rank(r, 2, late=1, c_us=400, x_us=120) for r in range(2)]
    loaded = load([_bundle(tmp_path, "run", traces, shifts={1: 2_000.0})], detail="full", workers=1)
    tl = timeline.timeline(loaded.con, loaded.run_id, step=2)
    windows = {w["rank"]: w for w in tl["windows"]}
    assert windows[1]["clock_offset_ms"] == pytest.approx(-2.0, abs=1e-6)
    assert windows[0]["start_ms"] == 0 and windows[1]["start_ms"] == pytest.approx(0.0, abs=1e-6)
    last = {m["rank"]: m for m in tl["marks"] if m["kind"] == "comm" and m["coll_id"] == "2"}
    # the last bucket: rank 0 starts it at 400 us, rank 1 (late) at 520 us; both end at 540
    assert last[0]["start_ms"] == pytest.approx(0.400, abs=1e-6)
    assert last[1]["start_ms"] == pytest.approx(0.520, abs=1e-6)
    assert last[0]["end_ms"] == pytest.approx(last[1]["end_ms"], abs=1e-6)
    own = timeline.timeline(loaded.con, loaded.run_id, step=2, aligned=False)
    assert {m["rank"]: m["start_ms"] for m in own["marks"] if m["kind"] == "comm" and m["coll_id"] == "2"} == \
           {0: pytest.approx(0.400, abs=1e-6), 1: pytest.approx(0.520, abs=1e-6)}
    assert any(lane["lane"].endswith("(NCCL)") for lane in tl["lanes"])


def test_buckets_reconcile_the_late_rank(tmp_path):
    # the model (no tokens: no verdict) replays the buckets at W and expects little exposed;
    # the early rank exposes the 120 us wait: its disagreement is explained by the late rank
    traces = [_rank(r, 2, late=1, c_us=400, x_us=120) for r in range(2)]
    result = buckets([_bundle(tmp_path, "run", traces)], workers=1)
    rows = [m for m in result["model"] if m["rank"] == 0 and m["disagreement"]]
    assert rows
    for m in rows:
        d = m["disagreement"]
        assert d["term"] == "late_rank" and d["late_rank"] == 1
        assert d["terms"]["late_rank"] == pytest.approx(0.120, abs=1e-6)
        assert "rank 1" in d["explanation"]


def _mesh_rank(rank: int, steps: int = 4) -> GpuTrace:
    """Rank ``rank`` of a 2 x 2 mesh, each rank on a host of its own: per step, an all-gather
    in its shard group ({0, 1} or {2, 3}) and an all-reduce in its replica group ({0, 2} or
    {1, 3}). Each collective ends at one instant on every rank of its group; rank 3 shares
    no group with rank 0 (the reference), so its clock can only be placed through a rank it
    shares one with (1 or 2)."""
    shard, replica = ([0, 1], [2, 3])[rank // 2], ([0, 2], [1, 3])[rank % 2]
    t = GpuTrace(rank=rank, world_size=4)
    for s in range(steps):
        base = s * STEP_US
        t.step(s + 1, base, STEP_US)
        t.kernel(base + 10, 300, launch_us=base + 5)
        for group, collective, end in ((shard, "allgather", 400.0 + 7 * s), (replica, "allreduce", 700.0 + 11 * s)):
            start = end - 30 - 5 * rank  # arrivals differ; the end is common to the group
            t.kernel(base + start, end - start, stream=20, launch_us=base + start - 1,
                     name=f"ncclDevKernel_{collective}_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                     args={"Collective name": collective, "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                           "dtype": "Float", "Group size": 2, "Process Group Name": str(group),
                           "Process Group Ranks": str(group)})
    return t


def test_a_clock_that_shares_no_group_with_the_reference_is_placed_through_another(tmp_path):
    folder = tmp_path / "mesh"
    folder.mkdir()
    shifts_us = {0: 0.0, 1: 2_000.0, 2: -700.0, 3: -1_500.0}
    for r in range(4):
        data = _shift(_mesh_rank(r), shifts_us[r])
        groups = [[0, 1], [2, 3], [0, 2], [1, 3]]
        data["distributedInfo"]["pg_config"] = [{"pg_name": str(g), "ranks": g} for g in groups if r in g] + \
            [{"pg_name": "0", "ranks": [0, 1, 2, 3]}]
        (folder / f"rank-{r}.json").write_text(json.dumps(data))
    offsets = {r["rank"]: r["clock_offset_ms"] for r in analyze([str(folder)], workers=1)["ranks"]}
    # an offset undoes the shift (exact on these traces): rank 3 through rank 1 or 2
    assert offsets == {0: 0.0, 1: pytest.approx(-2.0, abs=1e-6), 2: pytest.approx(0.7, abs=1e-6),
                       3: pytest.approx(1.5, abs=1e-6)}
