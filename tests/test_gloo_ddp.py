"""A real 2-rank DDP run on CPU (gloo), captured with plain torch.profiler, analyzed."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from overlapscope.analyzer.api import analyze
from conftest import step_parts_ms
from intervals_ref import gloo_overlap, read

pytest.importorskip("torch")
HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_gloo")
    subprocess.run([sys.executable, str(HERE / "capture_ddp.py"), str(out), str(free_port())],
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
    # what the first step spills out, the last takes in; the last step's window covers its own work
    for rank in (0, 1):
        first, last = [s for s in result["steps"] if s["rank"] == rank]
        assert last["spill_out_ms"] == 0
        assert last["spill_in_ms"] >= first["spill_out_ms"] - 1e-6


def test_parallel_and_serial_loads_agree(ddp_run):
    assert analyze([str(ddp_run)], workers=2)["ranks"] == analyze([str(ddp_run)], workers=1)["ranks"]
