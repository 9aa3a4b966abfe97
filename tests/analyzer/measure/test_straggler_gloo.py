"""Real 4- and 8-rank gloo DDP runs with a straggler: the tracer's example trainer, rank 2 sleeping
150 ms before every backward (``--slow-rank 2 --slow-ms 150``).

By construction the other ranks wait for rank 2 in the bucket all-reduces; the
sleep bounds what they can lose (they may compute during part of it on a loaded
machine). One capture per module: about 25 s on 2 cores (4 processes, the tiny
model, no calibration, 2 profiled steps).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

import example_runner
from machine import quiet
from overlapscope.analyzer.api import analyze, diagnose


pytest.importorskip("torch")
# 150 ms, not 60: with 60 the others lost 34 ms in a CI suite (2 profiled steps), within twice what
# 4 processes on 2 busy cores vary by, and the rule rightly passed; 150 ms stands well clear of that
SLOW_RANK, SLOW_MS = 2, 150.0


def _capture(out, nproc: int, slow_rank: int, slow_ms: float = SLOW_MS) -> None:
    # small buckets (--bucket-cap-mb 0.01): more collectives to estimate clocks on; the machine
    # to itself (tests/machine.py): under the other worker's load the late rank was late in
    # fewer than 3 of 4 steps once ("consistent": false, the rule passed)
    with quiet():
        _run(out, nproc, slow_rank, slow_ms)


def _run(out, nproc: int, slow_rank: int, slow_ms: float) -> None:
    example_runner.check(["--parallel", "ddp", "--nproc", str(nproc), "--steps", "4", "--wait-steps", "1",
                          "--warmup-steps", "1", "--active-steps", "2", "--model-size", "tiny", "--backend", "gloo",
                          "--no-calibrate", "--bucket-cap-mb", "0.01", "--slow-rank", str(slow_rank),
                          "--slow-ms", str(slow_ms), "--out", str(out)], Path(f"{out}.stderr.txt"))


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("straggler4") / "run"
    _capture(out, 4, SLOW_RANK)
    return out


def test_eight_real_ranks_name_the_late_one_and_fail(tmp_path):
    """8 gloo ranks on 2 cores (about 15 s), rank 5 sleeping 150 ms before every backward (8
    processes on 2 cores run the others' compute during part of any shorter sleep): the rule
    names rank 5 and fails, the others waiting well over 10 % of the step."""
    _capture(tmp_path / "run", 8, 5, slow_ms=150)
    result = diagnose([str(tmp_path / "run")], workers=2)
    found = [f for f in result["findings"] if f["id"] == "straggler"]
    assert len(found) == 1, [f["id"] for f in result["findings"]]
    f = found[0]
    # every figure in the message: a failure on a loaded machine says which bound it broke
    seen = json.dumps({"step_ms": result["headline"]["step_ms"], **{k: f[k] for k in ("status", "impact_ms", "details", "evidence")}})
    assert f["details"]["late_rank"] == 5 and f["status"] == "fail", seen
    assert f["impact_ms"] > 0.10 * result["headline"]["step_ms"], seen
    assert f["impact_ms"] <= 1.5 * 150, seen  # the sleep, and the late rank's work slowed by the shared cores


def test_the_late_rank_is_named_and_the_rule_fails(straggler_run):
    f = next(f for f in diagnose([str(straggler_run)], workers=2)["findings"] if f["id"] == "straggler")
    # a string: pytest shortens a tuple's repr, and a failure must show every step's loss and the jitter
    seen = json.dumps({k: f[k] for k in ("status", "impact_ms", "details", "evidence")})
    assert f["details"]["late_rank"] == SLOW_RANK, seen
    assert f["status"] == "fail", seen  # the others wait far over 10% of the step
    # what the others lose per step: most of the sleep, and not much more (the late rank's
    # own work also slows when 4 ranks share 2 busy cores: 72.2 ms measured once in a suite)
    assert 0.4 * SLOW_MS <= f["impact_ms"] <= 1.5 * SLOW_MS, seen
    assert f["details"]["cause"] == "idle" and f"rank {SLOW_RANK}" in f["fix"], seen


def _move_rank(src, dst, rank: int, shift_us: str, host: str) -> None:
    """Copy the bundle as if ``rank`` ran on ``host`` whose clock reads ``shift_us`` later: every
    timestamp moved exactly (decimal text: the traces' microsecond floats carry nanoseconds that a
    float round trip would lose), the host renamed."""
    shutil.copytree(src, dst)
    path = dst / f"rank-{rank}.pt.trace.json.gz"
    text = gzip.decompress(path.read_bytes()).decode()
    moved = re.sub(r'("ts": )(-?[0-9.]+)', lambda m: m.group(1) + str(Decimal(m.group(2)) + Decimal(shift_us)), text)
    moved, renamed = re.subn(r'"host_name": "[^"]*"', f'"host_name": "{host}"', moved)
    assert renamed == 1
    path.write_bytes(gzip.compress(moved.encode()))


def _per_rank(result: dict) -> list[dict]:
    """The per-rank figures: everything but what compares ranks."""
    drop = ("clock_offset_ms", "comm_wait_ms", "comm_transfer_ms", "exposed_wait_ms")
    return [{k: v for k, v in r.items() if k not in drop} for r in result["ranks"]]


def test_ranks_of_one_host_share_its_clock(straggler_run):
    result = analyze([str(straggler_run)], workers=2)
    assert {r["clock_offset_ms"] for r in result["ranks"]} == {0.0}
    for r in result["ranks"]:
        assert r["comm_wait_ms"] + r["comm_transfer_ms"] == pytest.approx(r["comm_ms"], abs=1e-6)


def test_a_clock_shift_of_a_few_ms_moves_the_estimate_by_it(straggler_run, tmp_path):
    # rank 1 on another host, once with the same clock and once with one 3.7 ms ahead: the
    # estimate moves by the shift to within 50 us (gloo's threads leave a collective up to ms
    # apart on 2 loaded cores, so the estimate itself is only as good as those ends; the shift
    # must not add to that), and no per-rank figure changes
    same, ahead = tmp_path / "same", tmp_path / "ahead"
    _move_rank(straggler_run, same, 1, "0", "elsewhere")
    _move_rank(straggler_run, ahead, 1, "3700", "elsewhere")
    base, a, b = (analyze([str(p)], workers=2) for p in (straggler_run, same, ahead))
    offset = {name: {r["rank"]: r["clock_offset_ms"] for r in res["ranks"]} for name, res in (("a", a), ("b", b))}
    assert offset["b"][1] - offset["a"][1] == pytest.approx(-3.7, abs=0.050)
    assert offset["a"][0] == offset["a"][2] == offset["a"][3] == 0.0  # still one host
    assert _per_rank(base) == _per_rank(a) == _per_rank(b)
    assert base["steps"] == a["steps"] == b["steps"]
    f = next(f for f in diagnose([str(ahead)], workers=2)["findings"] if f["id"] == "straggler")
    assert f["details"]["late_rank"] == SLOW_RANK
