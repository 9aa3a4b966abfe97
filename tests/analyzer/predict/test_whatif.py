"""``overlapscope whatif`` (analyzer/predict/whatif.py): a measured run replayed under another configuration.

Three routes of expected values, none from the code under test:
- hand-built GPU traces whose timelines are worked out by hand in the comments;
- every sample replayed without a change must reproduce its measurement (5 % of the step);
- pairs of real runs (sample_traces/): predict run B from run A's trace and compare with
  B's measurement. The errors measured when the engine was built are held here, so they
  cannot silently grow (README "What if" gives them with the reasons for the misses).
"""

from __future__ import annotations

import functools
import json

import pytest

from overlapscope.analyzer.api import analyze, whatif_run
from overlapscope.analyzer.engine import map_run
from overlapscope.analyzer.predict.changes import Changes, Scale
from overlapscope.cli import main
from builders import GpuTrace, write, write_bundle
from conftest import SAMPLES
from test_buckets_synthetic import MiB4, ddp_annotated

US_MS = 1e-3


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    return write(ddp_annotated(), tmp_path_factory.mktemp("whatif") / "rank-0.json")


def _predict(paths, **changes) -> dict:
    """``whatif`` of ``paths`` under ``changes``: a run is mapped once for all the changes
    asked of it (``api.whatif`` is ``map_run`` then ``whatif_run``; the CLI tests below take
    the whole route)."""
    mapped = _mapped(tuple(str(p) for p in paths))
    return whatif_run(mapped.con, mapped.run_id, Changes(**changes))


@functools.cache
def _mapped(paths: tuple[str, ...]):
    return map_run(list(paths), "attribution", workers=1)


# --- hand-built GPU timelines -----------------------------------------------------------
# ddp_annotated (test_buckets_synthetic): compute 0..100 us, the backward its last 2/3
# (33.3..100); buckets of 4 MiB each, ready at 40, 80 and 100 us, measured [40,70) hidden,
# [80,130) 30 exposed, [130,150) exposed: step 150 us, comm 100, exposed 50.


def test_no_change_replays_the_measurement_exactly(annotated):
    p = _predict([annotated])
    for key in ("measured", "replayed", "predicted"):
        assert p[key]["step_ms"] == pytest.approx(150 * US_MS, abs=1e-6)
        assert p[key]["exposed_comm_ms"] == pytest.approx(50 * US_MS, abs=1e-6)
        assert p[key]["comm_ms"] == pytest.approx(100 * US_MS, abs=1e-6)
    assert p["replayed"]["error_pct_of_step"] == 0.0 and p["predicted"]["gain_ms"] == 0.0


def test_twice_the_bandwidth_halves_each_bucket_and_keeps_the_compute(annotated):
    # Buckets of 15, 25 and 10 us: [40,55) hidden; [80,105) hidden until 100, 5 exposed;
    # bucket 2 ready at 100, the lane free at 105: [105,115) exposed. Exposed 15, step 115.
    p = _predict([annotated], bandwidth=Scale(2.0, True))
    assert p["predicted"]["comm_ms"] == pytest.approx(50 * US_MS, abs=1e-6)
    assert p["predicted"]["exposed_comm_ms"] == pytest.approx(15 * US_MS, abs=1e-6)
    assert p["predicted"]["step_ms"] == pytest.approx(115 * US_MS, abs=1e-6)
    assert p["predicted"]["gain_ms"] == pytest.approx(35 * US_MS, abs=1e-6)
    assert [c["predicted_ms"] for c in p["collectives"]] == pytest.approx([0.015, 0.025, 0.010], abs=1e-6)


def test_twice_the_tokens_doubles_the_compute_and_hides_more(annotated):
    # Compute 0..200, backward from 66.7 to 200; ready at 80, 160, 200 (twice as far into
    # the backward). Buckets as measured (30, 50, 20): [80,110) hidden; [160,210) hidden
    # until 200, 10 exposed; [210,230) exposed. Exposed 30, step 150 + 100 - 20 = 230.
    p = _predict([annotated], tokens=Scale(2.0, True))
    assert p["predicted"]["compute_ms"] == pytest.approx(200 * US_MS, abs=1e-6)
    assert p["predicted"]["exposed_comm_ms"] == pytest.approx(30 * US_MS, abs=1e-6)
    assert p["predicted"]["step_ms"] == pytest.approx(230 * US_MS, abs=1e-6)
    assert p["warnings"] == []  # 2x needs no count of the run's tokens


def test_one_big_bucket_waits_for_the_whole_backward(annotated):
    # No manifest: the measured buckets are the parameters. 100 MiB holds all 12 MiB:
    # one bucket, ready at 100 us, as long as the three (same bytes and W): [100,200) exposed.
    p = _predict([annotated], bucket_mb=100.0)
    (bucket,) = p["collectives"]
    assert bucket["bytes"] == 3 * 4 * (1 << 20)
    assert p["predicted"]["exposed_comm_ms"] == pytest.approx(100 * US_MS, abs=1e-6)
    assert p["predicted"]["step_ms"] == pytest.approx(200 * US_MS, abs=1e-6)
    assert any("no manifest" in w for w in p["warnings"])


def test_a_bandwidth_given_in_bytes_per_s_is_the_model_at_that_w(annotated):
    # The three 4 MiB buckets were measured at 30, 50 and 20 us. At --bandwidth 50G each
    # takes the model's time at that W, whatever the run measured: no latency term is
    # fitted here (one size), and the all-reduce over 2 ranks puts 2(2-1)/2 = 1 x its
    # bytes on the wire: 4194304 B / 50e9 B/s = 83.886 us each (scaled from the measured
    # times, as a W given as a multiple is, they would keep their 3:5:2 ratio).
    p = _predict([annotated], bandwidth=Scale(50e9, False))
    wire_us = 4 * MiB4 / 50e9 * 1e6
    assert [c["model_ms"] for c in p["collectives"]] == pytest.approx([wire_us * US_MS] * 3, abs=1e-6)
    assert [c["predicted_ms"] for c in p["collectives"]] == pytest.approx([wire_us * US_MS] * 3, abs=5e-5)  # 4 digits
    assert all(c["wire_bytes"] == 4 * MiB4 and c["busbw_bytes_per_s"] == 50e9 for c in p["collectives"])


# --- a hand-built FSDP step (GPU format) -------------------------------------------------
# One rank of two; units layers.0 and layers.1, each gathering 4,000,000 bf16 bytes (20 us)
# and reduce-scattering 4,000,000 fp32 bytes (25 us), computing 60 us forward and 80 us
# backward, laid out as FSDP2 runs them with forward and backward prefetch and resharding:
#   gathers    fwd L0 [0,20)  fwd L1 [20,40)  bwd L1 [140,160)  bwd L0 [160,180)
#   compute    fwd L0 [20,80) fwd L1 [80,140) bwd L1 [160,240)  bwd L0 [240,320)
#   reduce     L1 [240,265)   L0 [320,345)
# Exposed: fwd L0 20 + bwd L1 20 + reduce L0 25 = 65 us of 130 us comm. The step's window
# opens with its first compute kernel (steps.sql): 20..345, a 325 us step. The replay of
# this layout (model.replay_fsdp) is the trace itself, so each change below moves the step
# by what it moves in the replay, worked out here by hand. One size per collective kind:
# no latency term, W = wire / time (gathers 2e6 B / 20 us = 100 GB/s, reduce-scatters
# 2e6 B / 25 us = 80 GB/s: a group of 2 puts half the buffer on the wire).

UNIT_BYTES = 4_000_000


def fsdp_step(memory_bytes: int | None = None) -> GpuTrace:
    t = GpuTrace().step(1, 0, 400)

    def gather(unit: str, start: float, launch: float, range_name: str, tid: int = 100) -> None:
        t.annotation(range_name, launch - 0.5, 2, tid=tid).annotation(f"FSDP::all_gather ({unit})", launch - 0.3, 1,
                                                                       tid=tid)
        t.comm(start, 20, stream=21, collective="AllGather", nelems=UNIT_BYTES // 4, out_nelems=UNIT_BYTES // 2,
               dtype="BFloat16", launch_us=launch, tid=tid)

    def reduce(unit: str, start: float, launch: float) -> None:
        t.annotation(f"FSDP::post_backward_reduce ({unit})", launch - 0.5, 2, tid=200)
        t.comm(start, 25, stream=22, collective="ReduceScatter", nelems=UNIT_BYTES // 4,
               out_nelems=UNIT_BYTES // 8, dtype="Float", launch_us=launch, tid=200)

    gather("layers.0", 0, 1.5, "FSDP::pre_forward (layers.0)")
    t.kernel(20, 60, launch_us=2)
    gather("layers.1", 20, 3.5, "FSDP::pre_forward (layers.1)")
    t.kernel(80, 60, launch_us=4)
    gather("layers.1", 140, 6.5, "FSDP::pre_backward (layers.1)", tid=200)
    gather("layers.0", 160, 7.5, "FSDP::backward_prefetch for layers.0", tid=200)
    t.kernel(160, 80, launch_us=8, tid=200)
    reduce("layers.1", 240, 9.5)
    t.kernel(240, 80, launch_us=10, tid=200)
    reduce("layers.0", 320, 11.5)
    if memory_bytes:
        t.memory(5, memory_bytes)
    return t


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    return write(fsdp_step(memory_bytes=20_000_000_000), tmp_path_factory.mktemp("whatif_fsdp") / "rank-0.json")


def _cli(path, *flags) -> dict:
    assert main(["whatif", str(path), *flags, "--json"]) == 0
    return json.loads(_cli.capsys.readouterr().out)


# (flags, predicted step us, comm us, exposed us), each worked out on the layout above:
FSDP_CASES = [
    # as measured: the replay is the trace
    ((), 325, 130, 65),
    # no forward prefetch: L1's gather waits for L0's compute to end: [80,100), its compute
    # [100,160); backward 20 us later throughout, its reduce L0 [340,365): exposed +20
    (("--forward-prefetch", "off"), 345, 130, 85),
    # no backward prefetch: L0's gather queues behind L1's reduce [240,265): [265,285), its
    # compute [285,365), reduce [365,390); exposed 20 + 20 + 25 + 20 + 25 = 110
    (("--backward-prefetch", "off"), 370, 130, 110),
    # no resharding: no backward gathers; L1's backward [140,220), reduce [220,245) hidden
    # by L0's [220,300), reduce L0 [300,325): exposed 20 + 25 = 45, comm 130 - 40
    (("--reshard-after-forward", "off"), 305, 90, 45),
    # bf16 reduction: half the reduce-scatter bytes, half its time (no latency): 12.5 us
    (("--reduce-dtype", "bf16"), 312.5, 105, 52.5),
    # 4 GPUs: (4-1)/4 of each buffer on the wire instead of 1/2: every collective x 1.5
    # (gathers 30, reduces 37.5); fwd L0 [0,30), its compute [30,90), L1 [90,150); bwd L1
    # gather [150,180), compute [180,260), L0 prefetched [180,210), compute [260,340),
    # reduce L0 [340,377.5): exposed 30 + 30 + 37.5 = 97.5
    (("--gpus", "4"), 357.5, 195, 97.5),
    # HSDP, shard groups of 2 on 4 GPUs: at 200 GB/s inside a group gathers and reduce-scatters
    # take 2e6 / 200e9 = 10 us; the new all-reduce of each unit's 2e6 B shard across the 2
    # groups puts 2(2-1)/2 x 2e6 on the wire at 50 GB/s: 40 us (no latency known). The
    # unit's reduce is then 10 + 40 = 50 us: fwd L0 [0,10), compute [10,70), L1 [70,130);
    # bwd L1 gather [130,140), compute [140,220), reduce [220,270) hidden by L0 [220,300),
    # reduce L0 [300,350): exposed 10 + 10 + 50 = 70, comm 4 x 10 + 2 x 50 = 140
    (("--hsdp", "2", "--gpus", "4", "--intra-bandwidth", "200G", "--inter-bandwidth", "50G"), 330, 140, 70),
]


@pytest.mark.parametrize(("flags", "step_us", "comm_us", "exposed_us"), FSDP_CASES,
                         ids=[" ".join(f) or "as measured" for f, *_ in FSDP_CASES])
def test_fsdp_changes_on_a_hand_built_step(fsdp_run, capsys, flags, step_us, comm_us, exposed_us):
    _cli.capsys = capsys
    p = _cli(fsdp_run, *flags)
    assert p["measured"]["step_ms"] == pytest.approx(325 * US_MS, abs=1e-6)
    assert p["predicted"]["step_ms"] == pytest.approx(step_us * US_MS, abs=1e-6)
    assert p["predicted"]["comm_ms"] == pytest.approx(comm_us * US_MS, abs=1e-6)
    assert p["predicted"]["exposed_comm_ms"] == pytest.approx(exposed_us * US_MS, abs=1e-6)
    assert p["predicted"]["compute_ms"] == pytest.approx(280 * US_MS, abs=1e-6)


def test_hsdp_all_reduce_is_latency_plus_wire_over_the_given_w(fsdp_run):
    p = _predict([fsdp_run], hsdp=2, gpus=4, intra_bandwidth=200e9, inter_bandwidth=50e9)
    (ar, *_) = [c for c in p["collectives"] if c["phase"] == "allreduce"]
    assert (ar["link"], ar["group_size"], ar["bytes"], ar["measured_ms"]) == ("inter", 2, UNIT_BYTES // 2, None)
    assert ar["wire_bytes"] == UNIT_BYTES // 2 and ar["predicted_ms"] == pytest.approx(40 * US_MS, abs=1e-6)
    assert p["memory"]["predicted_stage"] == "hsdp" and p["memory"]["predicted_group"] == 2


def test_hsdp_on_a_sample_never_borrows_the_intra_group_level():
    # fsdp_per_block, 2 ranks; --hsdp 2 --gpus 8: 4 replica groups. Each unit's all-reduce
    # across them carries its reduce-scatter's shard (half the gradient buffer) over a
    # ring of 4: 2(4-1)/4 of it on the wire, at the 1 GB/s given, plus the calibration's
    # latency: predicted = latency + wire / W, not scaled by the run's level.
    p = _predict([SAMPLES / "fsdp_per_block"], hsdp=2, gpus=8, inter_bandwidth=1e9)
    rs = {c["id"]: c for c in p["collectives"] if c["phase"] == "reduce_scatter"}
    for ar in (c for c in p["collectives"] if c["phase"] == "allreduce"):
        wire = 2 * 3 / 4 * rs[ar["id"]]["bytes"] / 2
        assert ar["wire_bytes"] == pytest.approx(wire, abs=1)
        assert ar["busbw_bytes_per_s"] == 1e9
        assert ar["predicted_ms"] == pytest.approx(ar["latency_ms"] + wire / 1e9 * 1e3, abs=1e-4)
        assert ar["predicted_ms"] >= wire / 1e9 * 1e3


def test_a_prediction_that_does_not_fit_is_flagged(fsdp_run):
    # The measured peak, 20e9 B, less the weights gathered at once (two units of 4e6 B, a
    # rank holding half: 4e6) leaves 19.996e9 of activations, x 5 for five times the
    # tokens: 99.98e9 + 4e6 > the device's 85e9. Twice the tokens: 39.996e9 fits.
    five = _predict([fsdp_run], tokens=Scale(5.0, True))["memory"]
    assert five["activation_bytes"] == 20_000_000_000 - UNIT_BYTES
    assert five["predicted_peak_bytes"] == 5 * (20_000_000_000 - UNIT_BYTES) + UNIT_BYTES
    assert five["device_memory_bytes"] == 85_000_000_000 and five["fits"] is False
    assert _predict([fsdp_run], tokens=Scale(2.0, True))["memory"]["fits"] is True


# --- the run figures are the headline's ---------------------------------------------------
# Two ranks, one 4 MiB bucket each, ending together at 160 us (one collective):
#   rank 0   compute [0,150)  bucket [140,160): step 160, comm 20, exposed 10
#   rank 1   compute [40,100) bucket [100,160) (waits 40 us for rank 0, moves data in the
#            last 20): step 120 (its window opens with its first kernel), comm 60, exposed 60.
# Rank 0 has the longest step, rank 1 the most comm and exposed comm: the headline is
# rank 0's figures, overlap 50 %; the largest figure of each rank would say 160, 60, 60, 0 %.


def split_ranks(tmp_path) -> str:
    r0 = GpuTrace(rank=0).step(1, 0, 200).kernel(0, 140, launch_us=1).kernel(140, 10, launch_us=3)
    r0.annotation("overlapscope:ddp_bucket#0", 1.5, 1, tid=200).comm(140, 20, launch_us=2, tid=200, nelems=MiB4)
    r1 = GpuTrace(rank=1).step(1, 0, 200).kernel(40, 60, launch_us=1)
    r1.annotation("overlapscope:ddp_bucket#0", 1.5, 1, tid=200).comm(100, 60, launch_us=2, tid=200, nelems=MiB4)
    return write_bundle(tmp_path / "split", [r0, r1])


def test_run_figures_are_the_headline_when_figures_peak_on_different_ranks(tmp_path):
    run = split_ranks(tmp_path)
    head = analyze([run], workers=1)["headline"]
    p = _predict([run])
    expected = {"slowest_rank": 0, "step_ms": 160 * US_MS, "comm_ms": 20 * US_MS, "exposed_comm_ms": 10 * US_MS,
                "overlap_pct": 50.0}
    for key in ("measured", "replayed", "predicted", "model"):
        assert p[key] == pytest.approx(p[key] | expected, abs=1e-6), key
    for k in ("step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct"):
        assert p["measured"][k] == head[k]


def test_whatif_measured_is_analyze_headline_on_the_ddp_sample():
    # on this sample too the figures peak on different ranks (rank 1 steps longest,
    # rank 0 exposes more), so taking each figure's largest rank would differ
    p = _predict([SAMPLES / "ddp"])
    head = analyze([str(SAMPLES / "ddp")], workers=1)["headline"]
    assert p["measured"]["slowest_rank"] == head["slowest_rank"]
    for k in ("step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct"):
        assert p["measured"][k] == head[k], k
    per_rank = {}
    for s in p["steps"]:
        per_rank.setdefault(s["rank"], []).append(s["measured"]["exposed_comm_ms"])
    most_exposed = max(per_rank, key=lambda r: sorted(per_rank[r])[len(per_rank[r]) // 2])
    assert most_exposed != head["slowest_rank"]


# --- waits for peers are carried as measured -------------------------------------------------
# Rank 1 is late: its buckets (4 MiB, 20 us each) are ready at 60 and 100 us, rank 0's at 20
# and 40. Rank 0's bucket 0 spans [20,80): it waits 40 us for rank 1, then moves data for
# 20; its bucket 1 [80,120) waits 20 and moves data for 20. Rank 0: step 120, comm 100,
# exposed 80 (compute [0,40) hides [20,40)); rank 1: step 120, comm 40, exposed 20.


def straggler(tmp_path) -> str:
    r0 = GpuTrace(rank=0).step(1, 0, 200).kernel(0, 20, launch_us=1).kernel(20, 20, launch_us=3)
    r1 = GpuTrace(rank=1).step(1, 0, 200).kernel(0, 60, launch_us=1).kernel(60, 40, launch_us=3)
    for t, buckets in ((r0, [(20, 60), (80, 40)]), (r1, [(60, 20), (100, 20)])):
        for i, (start, dur) in enumerate(buckets):
            t.annotation(f"overlapscope:ddp_bucket#{i}", 1.5 + 2 * i, 1, tid=200)
            t.comm(start, dur, launch_us=2 + 2 * i, tid=200, nelems=MiB4)
    return write_bundle(tmp_path / "straggler", [r0, r1])


def test_a_late_peer_is_waited_for_under_a_change(tmp_path):
    run = straggler(tmp_path)
    same = _predict([run])
    assert same["replayed"] == pytest.approx(same["measured"] | {"error_pct_of_step": 0.0}, abs=1e-6)
    # Twice the bandwidth halves the transfers (20 -> 10 us), not the waits: rank 0's
    # bucket 0 still waits for rank 1 until 60, ends at 70; bucket 1 starts at 70, waits
    # until 100, ends at 110. Rank 0: comm 90, exposed 70, step 110. Rank 1's buckets
    # [60,70) hidden and [100,110) exposed: step 110, exposed 10; the headline: rank 0.
    p = _predict([run], bandwidth=Scale(2.0, True))
    assert p["predicted"]["slowest_rank"] == 0
    assert p["predicted"]["step_ms"] == pytest.approx(110 * US_MS, abs=1e-6)
    assert p["predicted"]["comm_ms"] == pytest.approx(90 * US_MS, abs=1e-6)
    assert p["predicted"]["exposed_comm_ms"] == pytest.approx(70 * US_MS, abs=1e-6)
    assert [c["wait_ms"] for c in p["collectives"]] == pytest.approx([40 * US_MS, 30 * US_MS], abs=1e-6)


# --- every sample: no change reproduces the measurement ----------------------------------

SAMPLE_RUNS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and not p.name.startswith("_"))


@pytest.mark.parametrize("name", SAMPLE_RUNS)
def test_no_change_reproduces_every_rank_and_step_of_every_sample(name):
    p = _predict([SAMPLES / name])
    assert p["steps"], name
    # every figure of every rank's step within 5 % of that step (they replay exactly today)
    for s in p["steps"]:
        m, r = s["measured"], s["replayed"]
        for k in ("step_ms", "comm_ms", "exposed_comm_ms"):
            assert abs(r[k] - m[k]) <= 0.05 * m["step_ms"], (s["rank"], s["step"], k, m[k], r[k])
    assert abs(p["replayed"]["error_pct_of_step"]) <= 5.0, p["replayed"]
    # the prediction of no change is the measurement itself
    assert p["predicted"]["step_ms"] == pytest.approx(p["measured"]["step_ms"], abs=1e-3)
    assert p["predicted"]["exposed_comm_ms"] == pytest.approx(p["measured"]["exposed_comm_ms"], abs=1e-3)


# --- pairs of real runs ----------------------------------------------------------------
# (run A, change, run B, step error % measured, exposed comm error ms measured), from the
# committed sample traces (deterministic: both sides are recordings). README "What if".

PAIRS = [
    ("ddp", {"bucket_mb": 0.01}, "ddp_tiny_buckets", -20.4, -15.8),
    ("ddp_tiny_buckets", {"bucket_mb": "default"}, "ddp", 11.0, 0.6),  # ddp ran with the cap unset
    # 12.1 % before the reducer's ops, 7.4 % before a share per reducing pass (the last pass's hidden comm)
    ("ddp_accum_sync", {"sync": False}, "ddp_accum_nosync", 8.2, 1.5),
    ("ddp_accum_nosync", {"sync": True}, "ddp_accum_sync", -6.6, -7.1),  # -10.2 % before: the new passes paid no share
    ("fsdp_per_block", {"reshard_after_forward": False}, "fsdp_no_reshard", 8.7, -1.2),
    ("fsdp_no_reshard", {"reshard_after_forward": True}, "fsdp_per_block", -10.4, -4.6),
    ("fsdp_per_block", {"wrap": "root-only"}, "fsdp_root_only", 26.9, 4.1),
    ("fsdp_root_only", {"wrap": "per-block"}, "fsdp_per_block", -9.5, 14.1),
    ("ddp", {"tokens": Scale(2.0, True)}, "ddp_tokens_x2", -6.9, -4.9),
]


@pytest.mark.parametrize(("a", "changes", "b", "step_err_pct", "exposed_err_ms"), PAIRS,
                         ids=[f"{a}->{b}" for a, _, b, _, _ in PAIRS])
def test_pair_predictions_hold_their_measured_errors(a, changes, b, step_err_pct, exposed_err_ms):
    predicted = _predict([SAMPLES / a], **changes)["predicted"]
    measured = _predict([SAMPLES / b])["measured"]
    err_pct = 100.0 * (predicted["step_ms"] - measured["step_ms"]) / measured["step_ms"]
    exposed_err = predicted["exposed_comm_ms"] - measured["exposed_comm_ms"]
    print(f"{a} {changes} -> {b}: step {predicted['step_ms']:.2f} vs {measured['step_ms']:.2f} ({err_pct:+.1f} %), "
          f"exposed {predicted['exposed_comm_ms']:.2f} vs {measured['exposed_comm_ms']:.2f}")
    assert abs(err_pct) <= abs(step_err_pct) + 1.0
    assert abs(exposed_err) <= abs(exposed_err_ms) + 0.5
    # and the direction of the change is right where the measurement moved by more than the error
    base = _predict([SAMPLES / a])["measured"]["step_ms"]
    if abs(measured["step_ms"] - base) > abs(predicted["step_ms"] - measured["step_ms"]):
        assert (predicted["step_ms"] - base) * (measured["step_ms"] - base) > 0


# --- memory and terms ------------------------------------------------------------------


def test_memory_follows_the_zero_model():
    # fsdp_per_block: fp32 parameters, Adam, 2 ranks. ZeRO-3 model states 16 bytes per
    # parameter over 2 ranks; without resharding every unit stays gathered: the other
    # rank's half of the fp32 weights, 4 x params x (2-1)/2, more than reshard keeps.
    params = json.loads((SAMPLES / "fsdp_per_block" / "manifest.json").read_text())["params"]
    on = _predict([SAMPLES / "fsdp_per_block"])["memory"]
    off = _predict([SAMPLES / "fsdp_per_block"], reshard_after_forward=False)["memory"]
    assert on["model_state_bytes"] == off["predicted_model_state_bytes"] == 16 * params // 2
    assert off["predicted_gathered_weight_bytes"] == 4 * params // 2
    assert off["predicted_peak_bytes"] > on["predicted_peak_bytes"] and off["fits"] is True
    ddp = _predict([SAMPLES / "ddp"])["memory"]
    assert ddp["stage"] == "ddp" and ddp["model_state_bytes"] == 16 * params


def test_each_predicted_collective_carries_its_terms():
    p = _predict([SAMPLES / "ddp"], bucket_mb=5.0)
    assert p["collectives"] and all(c["collective"] == "all_reduce" for c in p["collectives"])
    for c in p["collectives"]:
        assert c["bytes"] > 0 and c["predicted_ms"] > 0 and c["model_ms"] > 0
    assert p["assumptions"] and p["label"] == "--bucket-mb 5"


# --- the CLI ---------------------------------------------------------------------------


def test_cli_json_has_the_four_figures(capsys):
    assert main(["whatif", str(SAMPLES / "ddp"), "--bucket-mb", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("measured", "replayed", "predicted", "model"):
        assert set(out[key]) >= {"step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct"}
    assert out["changes"]["bucket_mb"] == 5.0 and "gain_ms" in out["predicted"]


@pytest.mark.parametrize(("cap_default", "own"), [(True, "default"), (False, "25"), (None, "25")])
def test_the_sweep_finds_the_runs_own_cap_whether_set_or_left_unset(tmp_path, capsys, cap_default, own):
    """A cap left unset is not the same setting as 25 set (torch 2.13 makes the 1 MiB first bucket
    only when unset): the manifest's bucket_cap_default says which row is the run's own; older
    manifests without it read as the cap they record."""
    import shutil

    run = tmp_path / "ddp"
    shutil.copytree(SAMPLES / "ddp", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.pop("bucket_cap_default", None)
    if cap_default is not None:
        manifest["bucket_cap_default"] = cap_default
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main(["whatif", str(run), "--sweep", "bucket-mb=default,25", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sweep"]["measured_value"] == own

def test_cli_sweep_prints_one_row_per_value(capsys):
    assert main(["whatif", str(SAMPLES / "ddp"), "--sweep", "bucket-mb=1,5,default,25,100"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("sweep over --bucket-mb"):].splitlines()
    assert [line.split()[0] for line in table[3:8]] == ["1", "5", "default", "25", "100"]
    # the run left the cap unset (its manifest's first bucket is 1.05 MB, then 3.24 MB): the default
    # row is the measured step; a cap of 25 set makes one bucket of both (torch 2.13), another step
    measured = float(out.split("measured step ")[1].split(" ms")[0])
    assert float(table[5].split()[1]) == pytest.approx(measured, abs=0.01)
    assert float(table[6].split()[1]) != pytest.approx(measured, abs=0.01)
    assert main(["whatif", str(SAMPLES / "ddp"), "--sweep", "tokens=0.5x,2x", "--json"]) == 0
    sweep = json.loads(capsys.readouterr().out)["sweep"]
    assert [p["value"] for p in sweep["points"]] == ["0.5x", "2x"]
    half, double = (p["predicted"]["compute_ms"] for p in sweep["points"])
    assert half < sweep["measured"]["compute_ms"] < double


@pytest.mark.parametrize("argv", [["--bucket-mb", "abc"], ["--wrap", "sideways"], ["--sweep", "colour=1,2"],
                                  ["--tokens=-2x"], ["--reshard-after-forward", "maybe"]])
def test_cli_bad_change_is_one_line(argv, capsys):
    assert main(["whatif", str(SAMPLES / "ddp"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err and err.count("\n") == 0 and "Traceback" not in err


def test_stored_run_predicts_what_its_files_predict(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "catalog.duckdb"))
    assert main(["ingest", str(SAMPLES / "ddp_accum_sync"), "--run", "w"]) == 0
    capsys.readouterr()
    assert main(["whatif", "--run", "w", "--no-sync", "--json"]) == 0
    stored = json.loads(capsys.readouterr().out)
    files = _predict([SAMPLES / "ddp_accum_sync"], sync=False)
    for key in ("measured", "predicted", "model"):
        assert stored[key] == pytest.approx(files[key], abs=1e-3)


@pytest.mark.parametrize("sample", ["ddp", "fsdp_per_block"])
def test_the_stored_replay_is_the_computed_one(tmp_path, sample):
    """Ingest stores the run replayed as measured with its first sweep (what the Model page
    shows first); read back, it equals the replay computed from the ranks' stored results,
    for the command line (no sweep) and for the page (its default sweep); another sweep is
    computed."""
    from overlapscope.analyzer import api
    from overlapscope.analyzer import runs
    from overlapscope.analyzer.predict.changes import default_sweep, sweep as read_sweep

    con = runs.open_catalog(tmp_path / "catalog.duckdb")
    try:
        run_id = runs.ingest(con, [str(SAMPLES / sample)], "stored", workers=2)
        a, info = api.whatif_analysis(con, run_id)
        spec = default_sweep(info.describe().get("parallelism"))
        assert spec.startswith("bucket-mb=" if sample == "ddp" else "tokens=")
        computed = json.loads(json.dumps(api.whatif_of(a, info, Changes(), read_sweep(spec, Changes()))))
        stored = api.whatif_stored(con, run_id, spec)
        assert stored == computed
        assert api.whatif_run(con, run_id) == {k: v for k, v in computed.items() if k != "sweep"}
        assert api.whatif_stored(con, run_id, "gpus=2,4") is None
    finally:
        con.close()


@pytest.mark.parametrize("name", ["gpu_ddp_a100_rank0_of2", "gpu_ddp_a100_rank3_of8", "gpu_ddp_v100_rank1_of2"])
def test_no_change_reproduces_the_gpu_reference_traces(reference_dir, name):
    p = _predict([reference_dir / name])
    assert abs(p["replayed"]["error_pct_of_step"]) <= 5.0, p["replayed"]
    # twice the bandwidth never slows a run down; a bucket's time t = latency + bytes/W
    # shrinks to between t/2 (all bandwidth) and t (all latency)
    faster = _predict([reference_dir / name], bandwidth=Scale(2.0, True))
    assert faster["predicted"]["step_ms"] <= p["measured"]["step_ms"] + 1e-6
    for c in faster["collectives"]:
        assert c["measured_ms"] / 2 - 1e-3 <= c["predicted_ms"] <= c["measured_ms"] + 1e-3


# --- the checklist links to the what-if --------------------------------------------------


def test_findings_carry_the_gain_of_their_fix():
    from overlapscope.analyzer.api import diagnose

    findings = {f["id"]: f for f in diagnose([str(SAMPLES / "ddp_accum_sync")], workers=1)["findings"]}
    f = findings["accumulation_comm"]
    assert f["status"] == "fail" and f["whatif"] == "--no-sync"
    assert f["predicted_gain_ms"] == pytest.approx(_predict([SAMPLES / "ddp_accum_sync"], sync=False)
                                                   ["predicted"]["gain_ms"], abs=1e-3)
    assert f["predicted_gain_ms"] > 0  # the measured pair: no_sync is 27 ms faster
    # rules whose fix no change expresses carry none; within a status, ranked by the gain
    assert findings["host_bound"]["predicted_gain_ms"] is None
    ranked = [f for f in findings.values() if f["status"] == "fail"]
    worth = [f["predicted_gain_ms"] if f["predicted_gain_ms"] is not None else (f["impact_ms"] or 0) for f in ranked]
    assert worth == sorted(worth, reverse=True)


def test_the_reducers_compute_is_what_no_sync_skips(tmp_path):
    """DDP's reducer ops (the gradients divided by the world, each bucket copied back) are compute
    that only a pass that reduces does: the analysis reads them per rank and step as a second
    parser of the raw trace does, by name inside each ProfilerStep range."""
    import gzip
    import re
    from collections import defaultdict

    from overlapscope.analyzer import api, runs

    path = SAMPLES / "ddp_accum_sync"
    expected: dict = {}
    for rank in (0, 1):
        with gzip.open(path / f"rank-{rank}.pt.trace.json.gz", "rt") as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        steps = [(int(re.search(r"#(\d+)", e["name"]).group(1)), e["ts"], e["ts"] + e["dur"])
                 for e in events if e["name"].startswith("ProfilerStep#")]
        per_step = defaultdict(float)
        for e in events:
            if e["name"] in ("torch::distributed::reducer::mul_out", "torch.distributed.ddp.reducer::copy_bucket_to_grad"):
                step = next((n for n, a, b in steps if a <= e["ts"] < b), None)
                if step is not None:
                    per_step[step] += e["dur"] / 1e3  # us -> ms
        expected.update({(rank, s): ms for s, ms in per_step.items()})
    assert expected and all(ms > 0 for ms in expected.values())
    con = runs.open_catalog(tmp_path / "catalog.duckdb")
    try:
        a, _ = api.whatif_analysis(con, runs.ingest(con, [str(path)], "accum", workers=2))
    finally:
        con.close()
    assert a.reducer.keys() == expected.keys()
    for key, ms in expected.items():
        assert a.reducer[key] == pytest.approx(ms, abs=0.002), key  # the trace's us, to the ns
    # a pass inside no_sync skips its share: the predicted compute drops by at least that
    plan = next(p for p in a.plans if p.reducer_ms > 0)
    reducing = len(plan.passes)
    assert reducing == plan.microbatches > 1
    p = _predict([path], sync=False)
    step = next(s for s in p["steps"] if (s["rank"], s["step"]) == (plan.rank, plan.step))
    skipped = (reducing - 1) * plan.reducer_ms / reducing
    assert plan.compute_ms - step["predicted"]["compute_ms"] >= skipped - 1e-6
