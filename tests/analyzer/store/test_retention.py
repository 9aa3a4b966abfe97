"""Bounding the catalog: prune drops raw events and keeps headline, figures, findings and history;
delete removes a run whole; both give the space back; an older catalog gains the kept figures."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog, retention, runstore
from overlapscope.cli import main
from conftest import SAMPLES
import old_catalogs


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "catalog.duckdb"
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(path))
    return path


def _counts(con, run_id: int) -> dict:
    tables = [r[0] for r in con.execute("SELECT DISTINCT table_name FROM duckdb_columns() "
                                        "WHERE column_name = 'run_id' AND NOT internal").fetchall()]
    return {t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [run_id]).fetchone()[0] for t in tables}


def _run_dir(con, db, run_id: int):
    return runstore.run_dir(db, con.execute("SELECT data_dir FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])


def _json(capsys, argv) -> dict:
    capsys.readouterr()
    assert main(argv) == 0, argv
    return json.loads(capsys.readouterr().out)


def test_prune_keeps_what_history_check_and_analyze_read(db, capsys):
    for bundle in ("ddp", "ddp_straggler", "ddp"):
        assert main(["ingest", str(SAMPLES / bundle), "--run", "nightly"]) == 0
    before = _json(capsys, ["analyze", "--run", "1", "--json"])
    history_before = _json(capsys, ["history", "--json"])["runs"]
    pruned = _json(capsys, ["prune", "--keep-last", "1", "--json"])
    assert pruned["pruned"] == [1, 2]
    assert pruned["bytes_after"] < pruned["bytes_before"]
    con = runs.open_catalog(db, read_only=True)
    counts = _counts(con, 1)
    kept = ("runs", "ranks", "steps", "metrics", "findings", "rank_metrics", "step_metrics", "group_metrics")
    assert all(counts[t] > 0 for t in kept), counts
    assert not runstore.has_raw(_run_dir(con, db, 1)) and runstore.has_raw(_run_dir(con, db, 3)), \
        "the pruned run's raw files are gone, the newest run stays whole"
    con.close()
    # analyze --run of a pruned run gives the same figures, from what was stored at ingest
    after = _json(capsys, ["analyze", "--run", "1", "--json"])
    assert after["run"].pop("pruned_at") is not None and before["run"].pop("pruned_at") is None
    assert after == before
    history_after = _json(capsys, ["history", "--json"])["runs"]
    for a, b in zip(history_before, history_after):
        assert {k: v for k, v in a.items() if k != "pruned_at"} == {k: v for k, v in b.items() if k != "pruned_at"}
    assert [r["pruned_at"] is not None for r in history_after] == [False, True, True]
    # the gate still compares a pruned baseline, buckets included
    capsys.readouterr()
    assert main(["check", "--run", "2", "--baseline", "1"]) == 1
    assert "bucket " in capsys.readouterr().out
    # the analyses stored at ingest outlive the events
    for command in ("buckets", "diagnose"):
        kept_after = _json(capsys, [command, "--run", "1", "--json"])
        assert main([command, str(SAMPLES / "ddp"), "--json"]) == 0
        fresh = json.loads(capsys.readouterr().out)
        assert {k: v for k, v in kept_after.items() if k != "run"} == {k: v for k, v in fresh.items() if k != "run"}
    # pruning again finds nothing; a run of another name is not touched
    assert _json(capsys, ["prune", "--keep-last", "1", "--json"])["pruned"] == []


def test_which_runs_prune_picks(db):
    con = runs.open_catalog(db)
    ids = [runs.ingest(con, [str(SAMPLES / "ddp")], name) for name in ("a", "a", "b", "a", "b")]
    assert ids == [1, 2, 3, 4, 5]
    assert retention.to_prune(con, keep_last=1) == [1, 2, 3]
    assert retention.to_prune(con, keep_last=1, name="b") == [3]
    assert retention.to_prune(con, keep_last=0, name="a") == [1, 2, 4]
    # age: run 1 was stored 40 days ago, the others now
    con.execute("UPDATE runs SET created_at = created_at - INTERVAL 40 DAY WHERE run_id = 1")
    assert retention.to_prune(con, older_than_days=30) == [1]
    assert retention.to_prune(con, keep_last=0, older_than_days=30) == [1]
    assert retention.to_prune(con, older_than_days=30, now=datetime.now() + timedelta(days=60)) == [1, 2, 3, 4, 5]
    with pytest.raises(Exception, match="--keep-last N"):
        retention.to_prune(con)
    con.close()


def test_delete_removes_every_row_of_the_run(db, capsys):
    for bundle in ("ddp", "fsdp_per_block"):
        assert main(["ingest", str(SAMPLES / bundle), "--run", "r"]) == 0
    result = _json(capsys, ["delete", "2", "--json"])
    assert result["deleted"] == 2 and result["bytes_after"] < result["bytes_before"]
    con = runs.open_catalog(db, read_only=True)
    assert set(_counts(con, 2).values()) == {0}
    assert [r["run_id"] for r in catalog.runs(con)] == [1]
    assert [p.name for p in runstore.store_dir(db).iterdir()] == [con.execute("SELECT data_dir FROM runs").fetchone()[0]]
    con.close()
    assert main(["delete", "2"]) == 2
    assert "no run 2" in capsys.readouterr().err
    assert main(["prune"]) == 2
    assert "--keep-last" in capsys.readouterr().err


def test_a_version_2_catalog_gains_the_kept_figures(db, tmp_path):
    """A catalog of schema 2 (before pushes and prune, every event in the catalog): opening
    it for writing adds pushed_by, pruned_at and the figures of every stored run, and moves
    its events to the run store."""
    old_catalogs.version_3(db, [([str(SAMPLES / "ddp")], "old", {})])
    import duckdb

    with duckdb.connect(str(db)) as con:
        run_id = 1
        expected = catalog.figures(con, run_id)
        for stmt in ("DROP TABLE rank_metrics", "DROP TABLE step_metrics", "DROP TABLE group_metrics",
                     "ALTER TABLE runs DROP COLUMN pushed_by", "ALTER TABLE runs DROP COLUMN pruned_at",
                     "UPDATE catalog_info SET value = '2' WHERE key = 'schema_version'"):
            con.execute(stmt)
    con = runs.open_catalog(db, read_only=True)  # upgrades first (briefly read-write)
    assert catalog.figures(con, run_id) == expected and expected["steps"]
    assert catalog.runs(con)[0]["pushed_by"] is None
    assert con.execute("SELECT value FROM catalog_info WHERE key = 'schema_version'").fetchone()[0] == "5"
    assert runstore.has_raw(_run_dir(con, db, run_id))
    con.close()


def test_a_version_3_catalog_keeps_its_pruned_runs(db, capsys):
    """Upgrading a schema-3 catalog moves its complete runs to the run store; a run pruned
    there keeps its headline, figures and findings, and says it was pruned where more is asked."""
    old_catalogs.version_3(db, [([str(SAMPLES / "ddp")], "a", {}), ([str(SAMPLES / "ddp_straggler")], "a", {})])
    import duckdb

    with duckdb.connect(str(db)) as con:  # prune run 1 as version 3 did: its events gone
        for table in ("events", "tracks", "collectives", "flows", "memory", "annotation_roles"):
            con.execute(f"DELETE FROM {table} WHERE run_id = 1")
        con.execute("UPDATE runs SET pruned_at = now() WHERE run_id = 1")
    head = _json(capsys, ["history", "--json"])["runs"]
    assert [r["run_id"] for r in head] == [2, 1] and head[1]["pruned_at"] is not None
    assert _json(capsys, ["analyze", "--run", "#1", "--json"])["ranks"]
    assert main(["buckets", "--run", "#1"]) == 2
    assert "was pruned on" in capsys.readouterr().err
    assert _json(capsys, ["buckets", "--run", "#2", "--json"])["collectives"]
    assert main(["check", "--run", "a", "--max-regression-pct", "5"]) == 1


def test_bytes_per_run_before_and_after_prune(tmp_path, capsys):
    """The README's figures: every sample stored once, then all pruned (printed with -s)."""
    db = tmp_path / "samples.duckdb"
    con = runs.open_catalog(db)
    empty = retention.size_bytes(db)
    ids = runs.ensure_samples(con)
    ranks = con.execute("SELECT count(*) FROM ranks").fetchone()[0]
    con.execute("CHECKPOINT")
    full = retention.size_bytes(db)
    retention.prune(con, ids)
    assert retention.rewrite(con, db)
    pruned = retention.size_bytes(db)
    assert pruned < full / 3
    per_run, per_run_pruned = (full - empty) / len(ids), (pruned - empty) / len(ids)
    print(f"\n{len(ids)} sample runs, {ranks} ranks: {full / 1e6:.1f} MB ({per_run / 1e6:.2f} MB per run, "
          f"{(full - empty) / ranks / 1e6:.2f} MB per rank); pruned {pruned / 1e6:.2f} MB "
          f"({per_run_pruned / 1e3:.0f} kB per run, {(pruned - empty) / ranks / 1e3:.0f} kB per rank); "
          f"empty catalog {empty / 1e6:.2f} MB")
