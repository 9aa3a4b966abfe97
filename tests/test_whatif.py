"""``overlapscope whatif`` (analyzer/whatif): a measured run replayed under another configuration.

Three routes of expected values, none from the code under test:
- hand-built GPU traces whose timelines are worked out by hand in the comments;
- every sample replayed without a change must reproduce its measurement (5 % of the step);
- pairs of real runs (sample_traces/): predict run B from run A's trace and compare with
  B's measurement. The errors measured when the engine was built are held here, so they
  cannot silently grow (README "What if" gives them with the reasons for the misses).
"""

from __future__ import annotations

import json

import pytest

from overlapscope.analyzer.api import whatif
from overlapscope.analyzer.whatif.changes import Changes, Scale
from overlapscope.cli import main
from builders import write
from conftest import SAMPLES
from test_buckets_synthetic import ddp_annotated

US_MS = 1e-3


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    return write(ddp_annotated(), tmp_path_factory.mktemp("whatif") / "rank-0.json")


def _predict(paths, **changes) -> dict:
    return whatif([str(p) for p in paths], Changes(**changes), workers=1)


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


# --- every sample: no change reproduces the measurement ----------------------------------

SAMPLE_RUNS = sorted(p.name for p in SAMPLES.iterdir() if (p / "manifest.json").exists())


@pytest.mark.parametrize("name", SAMPLE_RUNS)
def test_no_change_reproduces_every_sample_within_5_pct_of_the_step(name):
    p = _predict([SAMPLES / name])
    assert abs(p["replayed"]["error_pct_of_step"]) <= 5.0, p["replayed"]
    # the prediction of no change is the measurement itself
    assert p["predicted"]["step_ms"] == pytest.approx(p["measured"]["step_ms"], abs=1e-3)
    assert p["predicted"]["exposed_comm_ms"] == pytest.approx(p["measured"]["exposed_comm_ms"], abs=1e-3)


# --- pairs of real runs ----------------------------------------------------------------
# (run A, change, run B, step error % measured, exposed comm error ms measured), from the
# committed sample traces (deterministic: both sides are recordings). README "What if".

PAIRS = [
    ("ddp", {"bucket_mb": 0.01}, "ddp_tiny_buckets", -14.7, -7.8),
    ("ddp_tiny_buckets", {"bucket_mb": 25.0}, "ddp", 12.7, 4.0),
    ("ddp_accum_sync", {"sync": False}, "ddp_accum_nosync", 12.1, 1.5),
    ("ddp_accum_nosync", {"sync": True}, "ddp_accum_sync", -10.2, -7.1),
    ("fsdp_per_block", {"reshard_after_forward": False}, "fsdp_no_reshard", 8.7, -1.2),
    ("fsdp_no_reshard", {"reshard_after_forward": True}, "fsdp_per_block", -8.7, -0.9),
    ("fsdp_per_block", {"wrap": "root-only"}, "fsdp_root_only", 32.0, 6.3),
    ("fsdp_root_only", {"wrap": "per-block"}, "fsdp_per_block", -22.0, -5.5),
    ("ddp", {"tokens": Scale(2.0, True)}, "ddp_tokens_x2", -6.9, -4.3),
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


def test_cli_sweep_prints_one_row_per_value(capsys):
    assert main(["whatif", str(SAMPLES / "ddp"), "--sweep", "bucket-mb=1,5,25,100"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("sweep over --bucket-mb"):].splitlines()
    assert [line.split()[0] for line in table[3:7]] == ["1", "5", "25", "100"]
    # 25 MiB is the run's own cap: its row is the measured step
    measured = float(out.split("measured step ")[1].split(" ms")[0])
    assert float(table[5].split()[1]) == pytest.approx(measured, abs=0.01)
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
