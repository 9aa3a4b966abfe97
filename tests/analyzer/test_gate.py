"""The regression gate (``overlapscope check``, analyzer/gate.py): the sign of "worse" per metric,
exit 0 against an identical baseline, exit 1 when exposed comm grows past the bound."""

from __future__ import annotations

import json

import pytest

from overlapscope.analyzer import gate
from overlapscope.analyzer.api import analyze
from overlapscope.cli import main
from conftest import SAMPLES


def test_worse_is_up_for_times_and_down_for_overlap():
    assert gate.worse_pct("exposed_comm_ms", 11.0, 10.0) == pytest.approx(10.0)
    assert gate.worse_pct("step_ms", 9.0, 10.0) == pytest.approx(-10.0)
    assert gate.worse_pct("overlap_pct", 45.0, 50.0) == pytest.approx(10.0)
    assert gate.worse_pct("overlap_pct", 55.0, 50.0) == pytest.approx(-10.0)
    # the bound is strict: exactly X % worse passes
    assert not gate.regressed("exposed_comm_ms", 11.0, 10.0, 10.0)
    assert gate.regressed("exposed_comm_ms", 11.5, 10.0, 10.0)
    assert gate.regressed("overlap_pct", 40.0, 50.0, 10.0) and not gate.regressed("overlap_pct", 90.0, 50.0, 10.0)
    # from a zero baseline there is no percentage; any change for the worse counts
    assert gate.worse_pct("exposed_comm_ms", 0.5, 0.0) is None
    assert gate.regressed("exposed_comm_ms", 0.5, 0.0, 1000.0)
    assert not gate.regressed("exposed_comm_ms", 0.0, 0.0, 0.0)
    assert [gate.verdict("overlap_pct", v, 50.0) for v in (40.0, 50.0, 60.0)] == ["worse", "same", "better"]
    with pytest.raises(Exception, match="unknown metric"):
        gate.check_metric("speed")


def test_regressions_compare_each_run_with_the_previous_of_its_name():
    def run(run_id, name, exposed):
        return {"run_id": run_id, "name": name, "headline": {"exposed_comm_ms": exposed}}

    runs = [run(1, "a", 10.0), run(2, "b", 100.0), run(3, "a", 10.5), run(4, "a", 20.0), run(5, "b", 90.0),
            run(6, "a", 19.0)]
    # 3 is 5 % worse than 1; 4 is 90.5 % worse than 3; 5 and 6 are better
    assert gate.regressions(runs, "exposed_comm_ms", 10.0) == {4: pytest.approx(100 * 9.5 / 10.5)}
    assert set(gate.regressions(runs, "exposed_comm_ms", 1.0)) == {3, 4}


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "catalog.duckdb"
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(path))
    return path


def test_check_passes_an_identical_run_and_fails_the_straggler(db, capsys):
    for bundle in ("ddp", "ddp"):
        assert main(["ingest", str(SAMPLES / bundle), "--run", "ci"]) == 0
    capsys.readouterr()
    assert main(["check", "--run", "ci"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASS: exposed_comm_ms of run 2 (ci)") and "baseline run 1" in out

    assert main(["ingest", str(SAMPLES / "ddp_straggler"), "--run", "ci"]) == 0
    capsys.readouterr()
    assert main(["check", "--run", "ci", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    # the expected change from a second route: analyze on the two samples' files
    before = analyze([str(SAMPLES / "ddp")])["headline"]["exposed_comm_ms"]
    after = analyze([str(SAMPLES / "ddp_straggler")])["headline"]["exposed_comm_ms"]
    assert verdict["status"] == "regression" and verdict["regressed"] is True
    assert verdict["run"]["run_id"] == 3 and verdict["baseline"]["run_id"] == 2
    assert verdict["value"] == pytest.approx(after) and verdict["baseline_value"] == pytest.approx(before)
    assert verdict["worse_pct"] == pytest.approx(100 * (after - before) / before, rel=1e-4)
    assert verdict["groups"] and verdict["groups"][0]["kind"] == "ddp_bucket"
    assert abs(verdict["groups"][0]["change_ms"]) >= abs(verdict["groups"][-1]["change_ms"])
    assert verdict["warnings"] == []
    # the text names what regressed, by how much, and the buckets that changed most
    assert main(["check", "--run", "ci"]) == 1
    text = capsys.readouterr().out
    assert text.startswith("REGRESSION: exposed_comm_ms") and "changed most" in text and "bucket " in text
    # a generous bound lets it pass; against run 1 by id it fails the same way
    assert main(["check", "--run", "ci", "--max-regression-pct", "100000"]) == 0
    assert main(["check", "--run", "3", "--baseline", "1"]) == 1
    # overlap % regresses downwards: the straggler overlaps less
    capsys.readouterr()
    assert main(["check", "--run", "ci", "--metric", "overlap_pct", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["higher_is_better"] is True and verdict["value"] < verdict["baseline_value"]


def test_check_errors_exit_2_in_one_line(db, capsys):
    assert main(["ingest", str(SAMPLES / "ddp"), "--run", "first"]) == 0
    capsys.readouterr()
    for argv, words in ((["check", "--run", "first", "--strict"], "nothing to compare"),
                        (["check", "--run", "nope"], "no run 'nope'"),
                        (["check", "--run", "first", "--baseline", "latest"], "'previous' or a run id"),
                        (["check", "--run", "first", "--baseline", "42"], "no run 42")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    assert main(["ingest", str(SAMPLES / "ddp_straggler"), "--run", "first"]) == 0
    capsys.readouterr()
    for bound in ("nan", "inf", "-inf", "-1"):  # NaN compares false: a NaN bound would pass any regression
        for where in ([], ["--server", "http://localhost:1"]):  # refused before any server is asked
            assert main(["check", "--run", "first", f"--max-regression-pct={bound}", *where]) == 2, (bound, where)
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "finite number of 0 % or more" in err, err
    assert main(["check", "--run", "first", "--max-regression-pct", "0"]) == 1  # the straggler is worse
    with pytest.raises(SystemExit) as exit_:
        main(["check", "--run", "first", "--db", str(db), "--server", "http://localhost:1"])
    assert exit_.value.code == 2


def test_compare_warns_when_runs_differ_in_world_size_or_parallelism(db):
    from overlapscope.analyzer import runs

    con = runs.open_catalog(db)
    a = runs.ingest(con, [str(SAMPLES / "ddp")], "x")
    b = runs.ingest(con, [str(SAMPLES / "hsdp_2x2")], "x")
    result = gate.compare(con, b, a)
    assert any("world sizes differ" in w for w in result["warnings"])
    assert any("parallelism differs" in w for w in result["warnings"])
    same = gate.compare(con, a, a, top=None)
    assert same["warnings"] == [] and all(g["change_ms"] == 0 for g in same["groups"])
    assert all(m["verdict"] == "same" for m in same["metrics"] if m["value"] is not None)
    con.close()


def test_a_new_pipelines_first_job_passes_and_the_verdict_reads_for_ci(db, capsys, tmp_path):
    """push-then-check on day one: the first run of a name passes with no baseline (exit 0),
    the second identical run passes, a regression exits 1; the words never say '-X % worse';
    Markdown for a job summary and JUnit XML for test-report collectors."""
    import xml.etree.ElementTree as ET

    assert main(["ingest", str(SAMPLES / "ddp_straggler"), "--run", "ci"]) == 0
    capsys.readouterr()
    report = tmp_path / "first.xml"
    assert main(["check", "--run", "ci", "--junit", str(report)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("PASS (no baseline yet): exposed_comm_ms of run 1 (ci)") and "first run named 'ci'" in text
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"
    assert main(["check", "--run", "ci", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["status"] == "no_baseline" and verdict["baseline"] is None and verdict["regressed"] is False
    assert main(["check", "--run", "ci", "--strict"]) == 2

    # the straggler, then the healthy run: exposed comm falls, a change for the better
    assert main(["ingest", str(SAMPLES / "ddp"), "--run", "ci"]) == 0
    capsys.readouterr()
    assert main(["check", "--run", "ci"]) == 0
    text = capsys.readouterr().out
    assert "% better" in text and "-" not in text.split(":")[2].split("(")[0], text
    assert "% worse (" not in text.split("\n")[0].split("baseline run 1: ")[1].split("(bound")[0]
    assert main(["check", "--run", "ci", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("### ") and "PASS" in md and "| **exposed_comm_ms** |" in md and "% better" in md

    assert main(["ingest", str(SAMPLES / "ddp_straggler"), "--run", "ci"]) == 0
    capsys.readouterr()
    report = tmp_path / "third.xml"
    assert main(["check", "--run", "ci", "--junit", str(report), "--format", "markdown"]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite.get("failures") == "1"
    failure = suite.find("testcase").find("failure")
    assert failure is not None and "% worse" in failure.get("message")
