"""contract/figures.py: one overlap %, one metrics table, the typed rows of analyze and the headline.

Expected values are hand-computed from the definition (docs/definitions.md: overlap % =
100 x (comm - exposed) / comm, null without comm)."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import pytest

from conftest import SAMPLES
from overlapscope.analyzer import gate
from overlapscope.analyzer.headline import headline
from overlapscope.analyzer.model.replay import Bucket, replay_ddp
from overlapscope.analyzer.predict.whatif import _figures
from overlapscope.contract import figures
from overlapscope.contract.figures import Headline, RankFigures, StepFigures, overlap_pct


def test_overlap_pct_is_null_without_comm_and_exact_with_it():
    assert overlap_pct(10.0, 2.5) == 75.0
    assert overlap_pct(3, 3) == 0.0
    assert overlap_pct(3.0, 1.0) == 66.67  # 200/3, two decimals
    for comm, exposed in ((0, 0), (0.0, 0.0), (None, 1.0), (5.0, None)):
        assert overlap_pct(comm, exposed) is None


def test_every_place_agrees_at_zero_comm():
    """The headline, the what-if's figures and the model's replay: null, not 100 or 0."""
    step = {"rank": 0, "step": 1, "step_ms": 5.0, "compute_ms": 5.0, "comm_ms": 0.0, "exposed_comm_ms": 0.0,
            "idle_ms": 0.0}
    assert headline({"ranks": [{"rank": 0}], "steps": [step]})["overlap_pct"] is None
    assert _figures(5.0, 5.0, 0.0, 0.0)["overlap_pct"] is None
    assert replay_ddp([], backward_end_s=1.0).overlap_pct is None
    # and the same value where there is comm: 1 ms of 4 exposed is 75 %
    assert _figures(5.0, 4.0, 4.0, 1.0)["overlap_pct"] == 75.0
    timeline = replay_ddp([Bucket(ready_s=0.0, comm_s=0.004)], backward_end_s=0.003)  # 1 ms after the backward
    assert timeline.overlap_pct == 75.0


def test_the_gate_takes_its_metrics_and_directions_from_the_table():
    assert gate.METRICS == tuple(m.name for m in figures.METRICS if m.higher_is_better is not None)
    assert gate.HIGHER_IS_BETTER["overlap_pct"] is True
    assert all(gate.HIGHER_IS_BETTER[m] is False for m in ("step_ms", "exposed_comm_ms", "comm_ms", "idle_ms"))
    assert "slowest_rank" not in gate.METRICS  # a rank is no quality
    assert gate.DEFAULT_METRIC in gate.METRICS
    for m in figures.METRICS:  # names carry their unit
        assert m.name.endswith({"ms": "_ms", "%": "_pct", "rank": "_rank"}[m.unit]), m
        assert m.unit in m.label or m.unit == "rank"


def test_the_headline_is_the_struct_and_check_takes_the_tables_metrics():
    step = {"rank": 1, "step": 3, "step_ms": 10.0, "compute_ms": 6.0, "comm_ms": 4.0, "exposed_comm_ms": 1.0,
            "idle_ms": 0.0}
    head = headline({"ranks": [{"rank": 1}], "steps": [step]}, ["straggler"])
    assert list(head) == list(Headline.__struct_fields__)
    assert head["overlap_pct"] == 75.0 and head["exposed_pct"] == 10.0 and head["slowest_rank"] == 1
    assert head["slowest_step"] == {"rank": 1, "step": 3, "step_ms": 10.0, "exposed_comm_ms": 1.0}
    assert msgspec.json.decode(json.dumps(head), type=Headline).as_json() == head
    out = subprocess.run([sys.executable, "-m", "overlapscope.cli", "check", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for name in gate.METRICS:
        assert name in out


@pytest.fixture(scope="module")
def analyzed() -> dict:
    out = subprocess.run([sys.executable, "-m", "overlapscope.cli", "analyze", str(SAMPLES / "ddp"), "--json",
                          "--workers", "1"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_analyze_prints_the_typed_rows(analyzed):
    """Every rank and step row of a real run decodes strictly as its struct, keys in order,
    and the overlap % of each is the definition applied to its own comm and exposed comm."""
    for row in analyzed["ranks"]:
        assert list(row) == list(RankFigures.__struct_fields__)
        msgspec.convert(row, RankFigures)
    for row in analyzed["steps"]:
        assert list(row) == list(StepFigures.__struct_fields__)
        msgspec.convert(row, StepFigures)
        expected = round(100.0 * (row["comm_ms"] - row["exposed_comm_ms"]) / row["comm_ms"], 2)
        assert abs(row["overlap_pct"] - expected) <= 0.01  # ms rounding of comm and exposed
    assert list(analyzed["headline"]) == list(Headline.__struct_fields__)
