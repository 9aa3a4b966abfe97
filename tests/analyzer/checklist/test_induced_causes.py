"""Prescriptions on real gloo runs with one cause induced (issue 33), captured by
``tests/induced.py``: a training script that never imports overlapscope, profiled with
plain torch.profiler, timing its own steps with the wall clock.

Expected values come from how each run was made and from the script's clock, never
from the analyzer:

- a straggler (one of 4 ranks sleeping 30 or 150 ms before each step) is named, fails,
  and what fixing it buys (the median over its runs: 3 of 30 ms, 1 of 150 ms) is within
  20 % of the step it costs: the sleep runs' median step against the median step of 5
  runs without the sleep, captured interleaved with them (the script's wall clock);
- its wait is not counted again by the bucket rules: ``last_bucket_exposed`` and
  ``exposed_backward_comm`` stay within 50 % (plus 2 ms) of the largest figure of the
  runs without the sleep (the healthy runs themselves read 5.4-13.2 ms in a loaded
  suite; the wait would add the sleep, 30 or 150 ms). They may read lower: on 2 cores the late rank's transfers run
  while the others idle in their wait, faster than when all four compute (150 ms of
  sleep: 2.9 ms against 5.3-7.7 ms);
- healthy runs (no cause), 2 and 4 ranks, 5 repeats each (2 ranks: 8 profiled steps): no
  ``straggler`` fail;
- gradient accumulation over 4 micro-batches without ``no_sync``, a raw trace with no
  marks and no manifest: ``accumulation_comm`` fails, and ``whatif --no-sync``
  predicts a gain of at least 15 % within the sync run's own trace, and the step of the
  same script run with ``no_sync`` within 1.5x (the median of three interleaved pairs).

The model is small (4 Linear(128, 128), 16 rows) so that the straggler's sleep, not
CPU contention, sets its cost: 4 ranks share 2 cores, and a sleeping rank gives the
others its core (with a 30 ms compute the step grows by 22 ms for a 30 ms sleep).
About 110 s of captures on 2 cores (22 runs), in one module; the runs are sent to one
``induced.py --serve`` process that imported torch once (the straggler fixture's 14 runs
took 64.9 s alone with a process each, 42.2 s so).
"""

from __future__ import annotations

import json
import select
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import induced
from machine import quiet
from conftest import TESTS
from overlapscope.analyzer.api import diagnose, whatif
from overlapscope.analyzer.predict.changes import Changes
from overlapscope.cli import main

pytest.importorskip("torch")

SMALL = ["--width", "128", "--layers", "4", "--batch", "16"]
SLEEP_RANK = 3
REPEATS = 5


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Runner:
    """``tests/induced.py --serve``: one process that imported torch once, running each
    capture it is sent (the runs are what they were: forked ranks of a plain script)."""

    def __init__(self, log: Path):
        self.log = log
        self.proc = None

    def start(self) -> None:
        """Start it (it imports torch while the first capture waits for its turn)."""
        if self.proc is None or self.proc.poll() is not None:
            with open(self.log, "a") as log:
                self.proc = subprocess.Popen([sys.executable, str(TESTS / "induced.py"), "--serve"], text=True,
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)

    def run(self, argv: list[str]) -> None:
        self.start()
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 300
        while True:  # the ranks may print too: the reply is the line that starts with DONE
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = self.proc.stdout.readline() if ready else ""
            if not line:
                self.close()
                raise AssertionError(f"induced run {argv} ended or timed out: {self.log.read_text()[-2000:]}")
            if line.startswith(induced.DONE):
                assert line.split()[1] == "0", self.log.read_text()[-2000:]
                return

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


_RUNNER: list = []  # the module's runner (the fixture below closes it)


@pytest.fixture(scope="module", autouse=True)
def _runner(tmp_path_factory):
    _RUNNER.append(_Runner(tmp_path_factory.mktemp("runner") / "stderr.log"))
    _RUNNER[0].start()
    yield
    _RUNNER.pop().close()


def _capture(out: Path, *args: str) -> Path:
    """A run of tests/induced.py, timed with the machine to itself (tests/machine.py)."""
    with quiet():
        _RUNNER[0].run([str(out), "--port", str(_port()), *args])
    return out


def _findings(run: Path) -> dict:
    return {f["id"]: f for f in diagnose([str(run)], workers=2)["findings"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("induced")
    out: dict = {"healthy4": [], "sleep30": [], "sleep150": []}
    # interleaved, so that the healthy runs and the sleep runs see the same load (a loaded suite
    # moves a 4-rank step on 2 cores by +-5 ms between runs): the 30 ms sleep three times. Each run
    # takes the machine on its own: the 14 runs back to back in one turn read a healthy 2-rank run
    # as a straggler once in two suites (the other worker's tests between runs are the load these
    # figures were measured under)
    for i, sleep in enumerate((30, 150, 30, None, 30)):
        out["healthy4"].append(_capture(root / f"healthy4-{i}", "--nproc", "4", *SMALL))
        if sleep:
            n = len(out[f"sleep{sleep}"])
            out[f"sleep{sleep}"].append(_capture(root / f"sleep{sleep}-{n}", "--nproc", "4", "--sleep-rank",
                                                 str(SLEEP_RANK), "--sleep-ms", str(sleep), *SMALL))
    # 8 profiled steps: with 4, noise alone makes the same one of 2 ranks last in all of them in 1 run
    # of 8 (2 x 1/2^4), leaving the rule only its jitter bound (a CI suite failed one of the 5 runs so);
    # with 8, in 1 run of 128
    out["healthy2"] = [_capture(root / f"healthy2-{i}", "--nproc", "2", "--active", "8", *SMALL)
                       for i in range(REPEATS)]
    return out


@pytest.fixture(scope="module")
def healthy_findings(runs) -> dict:
    return {name: [_findings(r) for r in runs[name]] for name in ("healthy4", "healthy2")}


@pytest.mark.parametrize("sleep_ms", [30, 150])
def test_the_straggler_costs_the_step_it_adds(runs, sleep_ms):
    found = [_findings(run)["straggler"] for run in runs[f"sleep{sleep_ms}"]]
    base_ms = statistics.median(induced.step_ms(str(r)) for r in runs["healthy4"])
    added_ms = statistics.median(induced.step_ms(str(run)) for run in runs[f"sleep{sleep_ms}"]) - base_ms
    seen = json.dumps([{"status": f["status"], "impact_ms": f["impact_ms"], "added_ms": added_ms,
                        **{k: f["details"][k] for k in ("late_rank", "consistent", "late_steps", "steps", "jitter_ms",
                                                         "step_losses_ms")}} for f in found])
    assert all(f["details"]["late_rank"] == SLEEP_RANK for f in found), seen
    # each run names the sleeping rank; most fail: in a loaded suite one 30 ms run of three read
    # its loss as within the machine's jitter (a pass naming rank 3 with 28.0 ms lost for 30.3 ms
    # added, CI 2026-12-06), which is the rule doing what it says under that noise
    failed = [f for f in found if f["status"] == "fail"]
    assert 2 * len(failed) > len(found), seen
    for f in failed:  # what fixing it buys is the what-if of the late rank on time, linked to the finding
        assert f["whatif"] == f"--on-time {SLEEP_RANK}" and f["predicted_gain_ms"] == pytest.approx(f["impact_ms"])
    # the cost is the sleep, known, within 20 %; and the step time it adds between the runs, within
    # 35 %: that difference of separate captures is noisier than a run's own figure (a loaded CI
    # suite measured 23.5 ms added for a 30 ms sleep, whose runs each lost 29.3-30.7 ms a step)
    impact_ms = statistics.median(f["impact_ms"] for f in found)
    assert impact_ms == pytest.approx(sleep_ms, rel=0.20), seen
    assert impact_ms == pytest.approx(added_ms, rel=0.35), seen


@pytest.mark.parametrize("sleep_ms", [30, 150])
@pytest.mark.parametrize("rule", ["last_bucket_exposed", "exposed_backward_comm"])
def test_the_wait_is_not_counted_again_by_the_bucket_rules(runs, healthy_findings, sleep_ms, rule):
    """Before: with 150 ms of sleep, last_bucket_exposed read 131-135 ms per step (the wait).
    The median over the sleep runs: a 264 KB gloo all-reduce of 4 ranks on 2 cores took 1.4 to
    11 ms exposed from run to run, healthy or not (measured)."""
    figures = [h[rule]["impact_ms"] for h in healthy_findings["healthy4"]]
    mine = statistics.median(_findings(run)[rule]["impact_ms"] for run in runs[f"sleep{sleep_ms}"])
    assert 0.0 <= mine <= 1.5 * max(figures) + 2.0, (mine, figures)


@pytest.mark.parametrize("ranks", [2, 4])
def test_healthy_runs_have_no_straggler(healthy_findings, ranks):
    found = [h["straggler"] for h in healthy_findings[f"healthy{ranks}"]]
    failed = [{k: f[k] for k in ("status", "impact_ms", "details", "evidence")} for f in found if f["status"] == "fail"]
    assert not failed, json.dumps(failed)


def test_raw_accumulation_is_seen_and_no_sync_is_predicted(tmp_path):
    """4 micro-batches per step, every backward all-reducing (no no_sync), no tracer: each step
    shows 4 DistributedDataParallel.forward ranges and 4 rounds of the buckets. Before: n/a
    ("one micro-batch per step"), and --no-sync predicted a 0.00 ms gain."""
    # three pairs, interleaved: the runs of a loaded suite slow down unevenly; medians of them
    with quiet():  # one turn for the six runs
        pairs = [(_capture(tmp_path / f"sync{i}", "--nproc", "2", "--accum", "4"),
                  _capture(tmp_path / f"nosync{i}", "--nproc", "2", "--accum", "4", "--no-sync")) for i in range(3)]
    sync, no_sync = pairs[0]
    found = _findings(sync)
    f = found["accumulation_comm"]
    assert f["status"] == "fail" and "4 micro-batches" in f["evidence"], f
    assert f["whatif"] == "--no-sync"
    assert _findings(no_sync)["accumulation_comm"]["status"] == "pass"
    # each pair's prediction against its own measured no_sync run (captured next to it, so under the
    # same load), and the median of those ratios: a loaded CI machine moved one pair's runs apart by 25 %
    _assert_no_sync_predicted(pairs, least_gain=0.15)


def _assert_no_sync_predicted(pairs, least_gain: float) -> None:
    """The what-if on each sync run against the no_sync run captured next to it. Two bounds, because
    a loaded CI machine moves the two runs of a pair apart (measured there, predicted against
    no_sync: DDP 54.9/77.1, 58.4/87.4, 111.5/106.0 ms; FSDP2 386.7/231.5, 272.7/244.5 ms, each
    sync run 1.3-1.9x its no_sync one):
    - the gain, read within one trace (the sync run's traced step against the prediction from it),
      at least ``least_gain``: what a prediction that kept every micro-batch's collectives (0 ms,
      the bug this guards against) fails, whatever the load;
    - the median ratio of predicted to measured no_sync step within 1.5x: what the 4x prediction
      (384.6 vs 93.9 ms) fails."""
    seen = []
    for s, n in pairs:
        p = whatif([str(s)], Changes(sync=False), workers=2)
        seen.append({"traced_sync_ms": p["measured"]["step_ms"], "predicted_ms": p["predicted"]["step_ms"],
                     "measured_no_sync_ms": induced.step_ms(str(n)), "measured_sync_ms": induced.step_ms(str(s))})
    why = json.dumps(seen)
    gain = statistics.median(1 - r["predicted_ms"] / r["traced_sync_ms"] for r in seen)
    assert gain >= least_gain, why
    ratio = statistics.median(r["predicted_ms"] / r["measured_no_sync_ms"] for r in seen)
    assert 1 / 1.5 <= ratio <= 1.5, why


def test_raw_fsdp_accumulation_is_seen_from_the_root_forwards_and_no_sync_is_predicted(tmp_path):
    """FSDP2 (8 Linear(512, 512) units, 2 ranks), 4 micro-batches reduce-scattering in each, a raw
    trace: each step has 4 FSDP::root_pre_forward ranges. Before, the what-if said "one
    micro-batch per step, nothing to accumulate" (only DDP's forward was counted). Measured here
    alone: predicted 364.3 and 347.6 ms against 359.1 and 339.9 ms for the runs with
    set_requires_gradient_sync(False) (the sync runs: 421.0 and 417.9 ms)."""
    fsdp = ["--nproc", "2", "--fsdp", "--accum", "4", "--active", "3", "--after", "2"]
    # three pairs, interleaved: the median of two is their mean, and one pair slowed by a loaded
    # suite's neighbour decided it (a median ratio of 2.2, predicted to measured, twice in full runs)
    with quiet():  # one turn for the six runs
        pairs = [(_capture(tmp_path / f"sync{i}", *fsdp), _capture(tmp_path / f"nosync{i}", *fsdp, "--no-sync"))
                 for i in range(3)]
    found = [_findings(s)["accumulation_comm"] for s, _ in pairs]
    for f in found:  # what each sync run's trace shows does not depend on the load
        assert "4 micro-batches per step" in f["evidence"] and "reduce-scatters in 4 micro-batches" in f["evidence"], f
        assert "root pre-forward" in f["evidence"], f
    # the link needs the predicted gain above the floor (13-17 % alone): two of the three runs, as
    # the ratios below take the median (under a loaded suite one sync run's gain fell below it)
    linked = [f["whatif"] == "--no-sync" for f in found]
    assert sum(linked) >= 2, [(f["whatif"], f.get("no_change")) for f in found]
    assert "reduce-scatters in 1 micro-batch per step" in _findings(pairs[0][1])["accumulation_comm"]["evidence"]
    _assert_no_sync_predicted(pairs, least_gain=0.05)  # FSDP2 here: 13-17 % measured alone


def test_a_raw_one_bucket_run_is_rebucketed_from_its_gradients(tmp_path, capsys):
    """8 x Linear(512, 512) with bucket_cap_mb=25: one 8.4 MB bucket per step, no manifest. Before,
    the bucket what-if could only keep that bucket (the same step at every size) and read its
    end-of-backward exposure as "collectives block compute". Now the trace's AccumulateGrad ranges
    give the 16 gradients (8 weights, 8 biases: how the script builds the model) and when each
    was ready, and smaller caps split the bucket where its gradients were ready."""
    run = _capture(tmp_path / "one", "--nproc", "2", "--bucket-mb", "25", "--active", "3", "--after", "1")
    grad_bytes = 8 * (512 * 512 + 512) * 4  # float32 weights and biases
    p = whatif([str(run)], Changes(bucket_mb=0.25), workers=2)
    step = p["steps"][0] if p["steps"] else None
    assert step is not None
    assert any("16 gradients read from the trace's AccumulateGrad ranges" in w for w in p["warnings"]), p["warnings"]
    assert not any("block compute" in a for a in p["assumptions"]), p["assumptions"]
    buckets = [c for c in p["collectives"] if c["phase"] == "allreduce"]
    assert sum(c["bytes"] for c in buckets) == pytest.approx(grad_bytes, rel=0.01)
    assert len(buckets) == 16  # each gradient (0.53 MB on average) over a 0.25 MB cap: one bucket each
    # ready one after another through the backward, not all at its end
    ready = [c["ready_ms"] for c in buckets]
    assert ready == sorted(ready) and ready[0] < 0.5 * ready[-1]
    same = whatif([str(run)], Changes(bucket_mb=25.0), workers=2)
    assert p["predicted"]["step_ms"] != pytest.approx(same["predicted"]["step_ms"], rel=0.01)
    # one bucket of one size per step and no calibration: no latency can be fitted, and the 16 new
    # buckets are timed by their bytes alone, which the what-if says (the run's own cap makes none)
    assert any("more buckets per pass than the run's 1, each timed with no per-collective latency" in w
               for w in p["warnings"]), p["warnings"]
    assert not any("per-collective latency" in w for w in same["warnings"]), same["warnings"]
    # so the checklist links no smaller cap on the strength of it (a 1 MB cap was linked before,
    # "+12 %", on such a run: measured within its noise, and 0.05 MB 1.7-3.4x slower) and says why
    for f in _findings(run).values():
        assert not (f.get("whatif") or "").startswith("--bucket-mb"), f
        if f["id"] in ("ddp_bucket_size", "last_bucket_exposed") and f["status"] in ("fail", "warn"):
            assert "smaller buckets cannot be priced" in f["no_change"], f
    # and the sweep's table carries the note, once, with the caps it holds for
    assert main(["whatif", str(run), "--sweep", "bucket-mb=0.25,1,25"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the terminal's wrapping undone
    assert out.count("more buckets per pass") == 1 and "note (0.25, 1): --bucket-mb: more buckets" in out, out


def test_fsdp_gathers_that_block_are_not_a_broken_prefetch(tmp_path):
    """FSDP2 over gloo (8 Linear units, 2 ranks), with and without explicit prefetch
    (set_modules_to_forward_prefetch), interleaved. On CPU FSDP2 waits for each all-gather where
    it issues it (its FSDP::all_gather range holds the whole gloo transfer), so prefetch hides
    nothing: the rule says the collectives block, not "prefetch is not working" with a prefetch
    fix; the what-if predicts no gain from prefetch, and turning it on measures no faster beyond
    the noise of the pairs."""
    import json

    with quiet():  # one turn for the four runs
        pairs = [(_capture(tmp_path / f"plain{i}", "--nproc", "2", "--fsdp", "--active", "3", "--after", "2"),
                  _capture(tmp_path / f"prefetch{i}", "--nproc", "2", "--fsdp", "--prefetch", "--active", "3",
                           "--after", "2")) for i in range(2)]
    plain, prefetched = pairs[0]
    names = {e.get("name", "").split(" for ")[0]
             for e in json.loads((prefetched / "rank-0.pt.trace.json").read_text())["traceEvents"]}
    assert "FSDP::forward_prefetch" in names  # the script's prefetch is in its own trace
    for run in (plain, prefetched):
        f = _findings(run)["exposed_forward_allgather"]
        if f["status"] != "pass":
            assert "block compute" in f["evidence"] and "prefetch is not working" not in f["evidence"], f
            assert "set_modules_to_forward_prefetch" not in f["fix"], f["fix"]
    p = whatif([str(plain)], Changes(forward_prefetch=True), workers=2)
    assert p["predicted"]["gain_ms"] == pytest.approx(0.0, abs=1e-6), p["predicted"]
    assert any("cannot hide" in w for w in p["warnings"]), p["warnings"]
    # the fastest run of each (load only adds time: once a run without prefetch read
    # 210 ms against 144 with it, and the medians of two pairs are their means)
    off = min(induced.step_ms(str(a)) for a, _ in pairs)
    on = min(induced.step_ms(str(b)) for _, b in pairs)
    # measured, 3 pairs each: alone 104-133 ms with prefetch against 97-120 without, in a loaded
    # suite 162-178 against 138-144; once (alone) 100 against 118; once in a CI suite (both runs
    # without prefetch slow) 98.8 with against 131.4 without: the pairs' noise reaches 25 %
    assert on >= 0.7 * off, (on, off)
