"""``overlapscope export --perfetto`` (analyzer/export): the run as one Chrome-trace JSON that
reopens through our own loader with the same figures and carries the added tracks."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from overlapscope.analyzer.api import analyze
from overlapscope.analyzer.export.perfetto import TRACKS
from overlapscope.cli import main
from conftest import SAMPLES

FIGURES = ("steps", "step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct", "idle_ms")


def _load(path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module", params=["ddp", "fsdp_per_block"])
def exported(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / f"{request.param}.json.gz"
    assert main(["export", str(SAMPLES / request.param), "--perfetto", str(out)]) == 0
    return request.param, out


def test_the_export_reopens_with_the_same_figures(exported):
    name, out = exported
    before, after = analyze([str(SAMPLES / name)]), analyze([str(out)])
    assert after["run"]["world_size"] == before["run"]["world_size"]
    for a, b in zip(before["ranks"], after["ranks"], strict=True):
        assert {k: b[k] for k in ("rank",) + FIGURES} == pytest.approx({k: a[k] for k in ("rank",) + FIGURES},
                                                                         abs=1e-6)
    assert [(s["rank"], s["step"]) for s in after["steps"]] == [(s["rank"], s["step"]) for s in before["steps"]]
    assert [s["exposed_comm_ms"] for s in after["steps"]] == pytest.approx(
        [s["exposed_comm_ms"] for s in before["steps"]], abs=1e-6)
    assert after["headline"]["exposed_comm_ms"] == pytest.approx(before["headline"]["exposed_comm_ms"], abs=1e-6)


def test_one_exposed_track_per_rank_that_adds_up_to_the_rank_figure(exported):
    name, out = exported
    trace = _load(out)
    assert next(iter(trace)) == "overlapscope_export"  # the header first: the loader finds it at once
    events = trace["traceEvents"]
    ranks = analyze([str(SAMPLES / name)])
    named = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    for r in ranks["ranks"]:
        for track, tid in TRACKS.items():
            assert named[(r["rank"], tid)].startswith("overlapscope: ")
    # the step windows of the steps track bound what a rank's exposed comm counts
    windows = defaultdict(list)
    exposed = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e["tid"] == TRACKS["steps"]:
            windows[e["pid"]].append((e["ts"], e["ts"] + e["dur"]))
        elif e.get("ph") == "X" and e["tid"] == TRACKS["exposed"]:
            exposed[e["pid"]].append((e["ts"], e["ts"] + e["dur"]))
    for r in ranks["ranks"]:
        assert len(windows[r["rank"]]) == r["steps"]
        inside_us = sum(max(0.0, min(b, w1) - max(a, w0)) for a, b in exposed[r["rank"]]
                        for w0, w1 in windows[r["rank"]])
        assert inside_us / 1e3 == pytest.approx(r["exposed_comm_ms"], abs=2e-3)


def test_collectives_carry_their_bucket_or_unit_and_phase(exported):
    name, out = exported
    events = _load(out)["traceEvents"]
    rows = [e for e in events if e.get("ph") == "X" and e["tid"] == TRACKS["collectives"]]
    assert rows
    kinds = {e["args"]["kind"] for e in rows}
    phases = {e["args"]["phase"] for e in rows}
    if name == "ddp":
        assert kinds == {"ddp_bucket"} and phases == {"allreduce"}
    else:
        assert kinds == {"fsdp_unit"} and {"forward_allgather", "reduce_scatter"} <= phases
    for e in rows:
        assert e["args"]["id"] is not None and e["dur"] > 0


def test_findings_are_instants_at_the_steps_they_cite(exported):
    name, out = exported
    events = _load(out)["traceEvents"]
    steps = {(e["pid"], e["args"]["step"]): e["ts"] for e in events
             if e.get("ph") == "X" and e["tid"] == TRACKS["steps"]}
    found = [e for e in events if e.get("ph") == "i" and e["tid"] == TRACKS["findings"]]
    assert found
    for e in found:
        status, _, rule = e["name"].partition(": ")
        assert status in ("fail", "warn") and rule
        assert e["ts"] == steps[(e["pid"], e["args"]["step"])]


def test_export_of_a_catalog_run_matches_the_export_of_its_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "catalog.duckdb"))
    assert main(["ingest", str(SAMPLES / "ddp"), "--run", "exp"]) == 0
    from_run, from_files = tmp_path / "run.json", tmp_path / "files.json"
    assert main(["export", "--run", "exp", "--perfetto", str(from_run)]) == 0
    assert main(["export", str(SAMPLES / "ddp"), "--perfetto", str(from_files)]) == 0
    a, b = _load(from_run)["traceEvents"], _load(from_files)["traceEvents"]
    assert len(a) == len(b)
    key = lambda e: (e.get("pid"), e.get("tid"), e.get("ts"), e.get("name"))  # noqa: E731
    assert sorted(map(key, a), key=str) == sorted(map(key, b), key=str)


def test_export_needs_an_output(capsys):
    assert main(["export", str(SAMPLES / "ddp")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--perfetto" in err


def test_the_traces_flow_events_are_kept(exported):
    """Kineto's flow events (launch -> kernel, forward -> backward arrows) as the traces had them:
    per rank, every (id, ph, cat) of the source file, each f bound to its enclosing slice. Before:
    none (the DLRM export lost 6,397)."""
    name, out = exported
    want = defaultdict(list)
    for path in sorted((SAMPLES / name).glob("rank-*.json.gz")):
        trace = _load(path)
        rank = trace["distributedInfo"]["rank"]
        want[rank] = sorted((e["id"], e["ph"], e["cat"]) for e in trace["traceEvents"] if e.get("ph") in ("s", "t", "f"))
    got = defaultdict(list)
    flows = [e for e in _load(out)["traceEvents"] if e.get("ph") in ("s", "t", "f")]
    for e in flows:
        got[e["pid"]].append((e["id"], e["ph"], e["cat"]))
        assert e["name"] == e["cat"] and (e.get("bp") == "e") == (e["ph"] == "f")
    assert sum(len(v) for v in want.values()) > 100, "the samples have flows to keep"
    assert {r: sorted(v) for r, v in got.items()} == dict(want)
