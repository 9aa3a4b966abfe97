"""A real 2-rank DDP run on CPU (gloo), captured with plain torch.profiler, analyzed."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from overlapscope.analyzer.api import analyze
from conftest import TESTS, step_parts_ms
from intervals_ref import gloo_overlap, gloo_steps, read

pytest.importorskip("torch")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_gloo")
    subprocess.run([sys.executable, str(TESTS / "capture_ddp.py"), str(out), str(free_port())],
                   check=True, timeout=300, capture_output=True)
    return out


def test_both_ranks_and_both_steps(ddp_run):
    result = analyze([str(ddp_run)])
    assert result["run"]["world_size"] == 2
    assert result["run"]["backend"] == "gloo"
    assert result["run"]["device_kind"] == "cpu"
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert all(r["steps"] == 2 for r in result["ranks"])
    assert len(result["steps"]) == 4


def test_matches_an_independent_recomputation(ddp_run):
    result = analyze([str(ddp_run)], workers=1)
    for r in result["ranks"]:
        ref = gloo_overlap(read(ddp_run / f"rank-{r['rank']}.pt.trace.json"))
        assert r["comm_ms"] == pytest.approx(ref["comm_ms"], rel=1e-9)
        assert r["compute_ms"] == pytest.approx(ref["compute_ms"], rel=1e-9)
        assert r["exposed_comm_ms"] == pytest.approx(ref["exposed_comm_ms"], rel=1e-9, abs=1e-9)
        assert r["comm_ms"] > 0 and r["compute_ms"] > 0


def test_steps_are_consistent(ddp_run):
    result = analyze([str(ddp_run)])
    for s in result["steps"]:
        assert s["comm_ms"] > 0, "every synchronizing step all-reduces"
        assert 0 <= s["exposed_comm_ms"] <= s["comm_ms"]
        assert s["compute_ms"] < s["step_ms"]
        # step time splits exactly into compute, exposed comm, memcpy-only time and idle,
        # corrected by work that crossed the step boundary (a gloo span outliving its step)
        assert min(s["idle_ms"], s["other_ms"], s["spill_in_ms"], s["spill_out_ms"]) >= 0
        assert step_parts_ms(s) == pytest.approx(s["step_ms"], abs=1e-5)
    # the last step's window covers its own work
    for rank in (0, 1):
        assert [s["spill_out_ms"] for s in result["steps"] if s["rank"] == rank][-1] == 0


def test_steps_match_an_independent_recomputation(ddp_run):
    """Every step's figures, spill in and out included, against plain interval code.

    What the first step spills out is not always what the last takes in: time where the
    first step's late work runs beside the last step's own is the last step's own
    (docs/definitions.md). In 2 of 60 captures, step 2's last all-reduce (0.763 and 1.146 ms
    exposed past its window) ran beside step 3's first (0.055 and 0.185 ms of it), so step 3
    took in 0.707 and 0.962 ms: the check this test replaces compared the two and failed."""
    result = analyze([str(ddp_run)])
    for rank in (0, 1):
        got = [s for s in result["steps"] if s["rank"] == rank]
        ref = gloo_steps(read(ddp_run / f"rank-{rank}.pt.trace.json"))
        assert [s["step"] for s in got] == [s["step"] for s in ref]
        for g, r in zip(got, ref):
            for key in ("compute_ms", "comm_ms", "exposed_comm_ms", "step_ms", "idle_ms",
                        "spill_in_ms", "spill_out_ms"):
                assert g[key] == pytest.approx(r[key], abs=1e-6), (rank, r["step"], key)
            assert g["other_ms"] == 0  # the reference assumes no memcpy/memset


def test_parallel_and_serial_loads_agree(ddp_run):
    assert analyze([str(ddp_run)], workers=2)["ranks"] == analyze([str(ddp_run)], workers=1)["ranks"]
