"""The catalog: ingest (all or nothing), history, --run for the analysis commands."""

from __future__ import annotations

import json

import pytest

from overlapscope.analyzer.store import catalog
from overlapscope.cli import main
from overlapscope.analyzer.errors import InputError
from builders import GpuTrace, write


def bundle(folder, exposed_us=30):
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(2):
        t = GpuTrace(rank=r).step(1, 0, 100).kernel(0, 50, step=1).comm(50 - 20 + exposed_us - 30, 20 + 30, step=1)
        write(t, folder / f"rank-{r}.json")
    return str(folder)


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "catalog.duckdb"
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(path))
    return path


def test_ingest_stores_a_run_with_metrics(tmp_path, db):
    con = catalog.open_catalog()
    run_id = catalog.ingest(con, [bundle(tmp_path / "a")], "nightly", {"commit": "abc"})
    (row,) = catalog.runs(con)
    assert row["run_id"] == run_id and row["name"] == "nightly" and row["ranks"] == 2
    assert json.loads(row["tags"]) == {"commit": "abc"}
    # comm 30..80 against compute 0..50: 30 us exposed
    assert row["exposed_comm_ms"] == pytest.approx(0.030)
    # the full detail keeps every argument
    assert con.execute("SELECT count(*) FROM events WHERE args IS NOT NULL").fetchone()[0] > 0


def test_failed_ingest_leaves_nothing(tmp_path, db):
    con = catalog.open_catalog()
    folder = tmp_path / "bad"
    bundle(folder)
    (folder / "rank-1.json").write_text('{"traceEvents": [')
    with pytest.raises(InputError):
        catalog.ingest(con, [str(folder)], "broken")
    for table in ("runs", "ranks", "events", "tracks", "collectives", "steps", "metrics"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table


def test_cli_ingest_history_and_run(tmp_path, db, capsys):
    assert main(["ingest", bundle(tmp_path / "a"), "--run", "nightly", "--tag", "gpu=h100"]) == 0
    assert main(["ingest", bundle(tmp_path / "b"), "--run", "nightly"]) == 0
    capsys.readouterr()
    assert main(["history", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in runs] == [2, 1]
    # --run NAME picks the newest run of that name; --run ID a given one
    assert main(["analyze", "--run", "nightly", "--json"]) == 0
    latest = json.loads(capsys.readouterr().out)
    assert latest["run"]["run_id"] == 2 and len(latest["ranks"]) == 2
    assert main(["diagnose", "--run", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["run_id"] == 1


def test_unknown_run_and_bad_tag(tmp_path, db, capsys):
    assert main(["analyze", "--run", "nope"]) == 2
    assert "no catalog here yet" in capsys.readouterr().err
    assert main(["ingest", bundle(tmp_path / "a"), "--run", "x"]) == 0
    assert main(["analyze", "--run", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    assert main(["ingest", bundle(tmp_path / "a"), "--run", "x", "--tag", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_ingest_reports_each_decoded_file(tmp_path, db):
    seen = []
    con = catalog.open_catalog()
    catalog.ingest(con, [bundle(tmp_path / "a")], "progress", on_decoded=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]
