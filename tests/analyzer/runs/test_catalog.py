"""The catalog: ingest (all or nothing), history, --run for the analysis commands."""

from __future__ import annotations

import json

import pytest

from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog
from overlapscope.cli import main
from overlapscope.analyzer.errors import InputError
from builders import GpuTrace, write
import old_catalogs
from overlapscope.analyzer.store import runstore


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
    con = runs.open_catalog()
    run_id = runs.ingest(con, [bundle(tmp_path / "a")], "nightly", {"commit": "abc"})
    (row,) = catalog.runs(con)
    assert row["run_id"] == run_id and row["name"] == "nightly" and row["ranks"] == 2
    assert row["tags"] == {"commit": "abc"}
    # comm 30..80 against compute 0..50: 30 us exposed
    assert row["exposed_comm_ms"] == pytest.approx(0.030)
    # the full detail keeps every argument: each rank's events are a Parquet file of the run store
    files = runstore.raw_files(runstore.run_dir(db, _data_dir(con, run_id)), "events")
    assert len(files) == 2
    assert con.execute("SELECT count(*) FROM read_parquet($f) WHERE args IS NOT NULL", {"f": files}).fetchone()[0] > 0


def _data_dir(con, run_id: int) -> str:
    return con.execute("SELECT data_dir FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]


def test_failed_ingest_leaves_nothing(tmp_path, db):
    con = runs.open_catalog()
    folder = tmp_path / "bad"
    bundle(folder)
    (folder / "rank-1.json").write_text('{"traceEvents": [')
    with pytest.raises(InputError):
        runs.ingest(con, [str(folder)], "broken")
    for table in ("runs", "ranks", "steps", "metrics", "findings", "rank_metrics", "step_metrics", "group_metrics"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    store = runstore.store_dir(db)
    assert not store.exists() or list(store.iterdir()) == [], "no file of the run is left in the run store"


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
    con = runs.open_catalog()
    runs.ingest(con, [bundle(tmp_path / "a")], "progress", on_decoded=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]


def test_history_shows_the_same_headline_as_analyze(tmp_path, db, capsys):
    """One definition: analyze --json's headline equals what history shows after ingest,
    on a trace with an even number of steps (the median is the mean of the middle two)."""
    folder = tmp_path / "four"
    folder.mkdir()
    for r in range(2):
        t = GpuTrace(rank=r)
        for s, exposed_us in enumerate((10, 20, 40, 80)):  # rank-local step lengths differ
            start = s * 200
            t.step(s + 1, start, 150).kernel(start, 50, step=s + 1).comm(start + 50 - 10, 10 + exposed_us,
                                                                            step=s + 1)
        write(t, folder / f"rank-{r}.json")
    assert main(["analyze", str(folder), "--json"]) == 0
    analyzed = json.loads(capsys.readouterr().out)["headline"]
    assert analyzed["steps"] == 4
    assert main(["ingest", str(folder), "--run", "even", "--json"]) == 0
    capsys.readouterr()
    assert main(["history", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    stored = row["headline"]
    # analyze does not run the checklist; the catalog does, at ingest
    assert analyzed.pop("failed_findings") is None and isinstance(stored.pop("failed_findings"), list)
    assert stored == analyzed
    for key in catalog.HISTORY_FIGURES:
        assert row[key] == analyzed[key]
    # exposed per step: 10, 20, 40, 80 us -> median (20 + 40) / 2 = 30 us
    assert analyzed["exposed_comm_ms"] == pytest.approx(0.030)


def test_ingest_stores_the_checklist(tmp_path, db):
    con = runs.open_catalog()
    run_id = runs.ingest(con, [bundle(tmp_path / "a")], "checked")
    stored = con.execute("SELECT count(*), count(*) FILTER (WHERE status = 'fail') FROM findings WHERE run_id = ?",
                         [run_id]).fetchone()
    head = catalog.runs(con)[0]["headline"]
    assert stored[0] == 17 and stored[1] == len(head["failed_findings"])


def test_a_catalog_of_the_first_schema_is_upgraded(tmp_path, db, capsys):
    """A catalog written before catalog_info existed: no parallelism, headline, kind or family
    columns, no annotation_roles or findings, every event in the catalog. Opening it moves
    its run to the run store with all of them back, and its analyses answer as a run
    ingested today does."""
    old_catalogs.version_3(db, [([bundle(tmp_path / "a")], "old", {"k": "v"})])
    con = runs.open_catalog()  # upgrades to today's schema
    before = catalog.runs(con)[0]
    con.close()
    old_catalogs.version_3(tmp_path / "v1.duckdb", [([bundle(tmp_path / "a")], "old", {"k": "v"})])
    import duckdb

    with duckdb.connect(str(tmp_path / "v1.duckdb")) as old:
        for stmt in ("DROP TABLE catalog_info", "DROP TABLE annotation_roles", "DROP TABLE findings",
                     "ALTER TABLE runs DROP COLUMN parallelism", "ALTER TABLE runs DROP COLUMN headline",
                     "ALTER TABLE collectives DROP COLUMN kind", "ALTER TABLE collectives DROP COLUMN family"):
            old.execute(stmt)
    from overlapscope.analyzer.store import database
    from overlapscope.analyzer.store.migrate import CatalogOutdated

    with pytest.raises(CatalogOutdated):  # a read-only connection cannot upgrade on its own ...
        database.connect(str(tmp_path / "v1.duckdb"), read_only=True)
    # the store alone cannot either: the upgrade computes analyses that live above it
    # (analyzer.runs hands them in), and it refuses in one line, leaving the file as it was
    with pytest.raises(CatalogOutdated, match="schema version 3 or older"):
        catalog.open_catalog(tmp_path / "v1.duckdb")
    con = runs.open_catalog(tmp_path / "v1.duckdb", read_only=True)  # ... so open_catalog upgrades first
    after = catalog.runs(con)[0]
    assert {k: v for k, v in after.items() if k != "created_at"} == {k: v for k, v in before.items()
                                                                    if k != "created_at"}
    assert con.execute("SELECT value FROM catalog_info WHERE key = 'schema_version'").fetchone()[0] == "5"
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert not tables & {"events", "tracks", "collectives", "annotation_roles"}, "the events left the catalog"
    run_dir = runstore.run_dir(tmp_path / "v1.duckdb", _data_dir(con, after["run_id"]))
    roles = con.execute("SELECT count(*) FROM read_parquet($f)",
                        {"f": runstore.raw_files(run_dir, "annotation_roles")}).fetchone()[0]
    kinds = con.execute("SELECT count(*) FROM read_parquet($f) WHERE kind = 'all_reduce' AND family = 'reduce'",
                        {"f": runstore.raw_files(run_dir, "collectives")}).fetchone()[0]
    assert roles >= 0 and kinds > 0
    con.close()
    # its stored analyses are those of the traces analysed today
    for command in ("analyze", "buckets", "diagnose"):
        assert main([command, "--run", "old", "--db", str(tmp_path / "v1.duckdb"), "--json"]) == 0
        stored = json.loads(capsys.readouterr().out)
        assert main([command, bundle(tmp_path / "a"), "--json"]) == 0
        fresh = json.loads(capsys.readouterr().out)
        for key in fresh:
            if key != "run":
                assert stored[key] == fresh[key], (command, key)


def test_an_upgrade_leaves_the_catalogs_memory_setting(tmp_path, db):
    """Upgrading an old catalog derives its runs on the catalog's own connection: the
    ingest's DuckDB budget for the derive (64 MiB) is not left on it for what follows."""
    old_catalogs.version_3(db, [([bundle(tmp_path / "a")], "old", {})])
    con = runs.open_catalog()  # upgrades, deriving the run
    upgraded = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    con.close()
    con = runs.open_catalog(tmp_path / "new.duckdb")
    fresh = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    con.close()
    assert upgraded == fresh


def test_a_version_4_catalog_gains_the_idempotency_key(tmp_path, db):
    """A catalog of schema 4 (before pushes carried a key): opening it adds runs.idempotency_key,
    its runs keep theirs empty, and a run committed with a key is found by it, for its pusher only."""
    con = runs.open_catalog(db)
    runs.ingest(con, [bundle(tmp_path / "a")], "old")
    con.execute("ALTER TABLE runs DROP COLUMN idempotency_key")
    con.execute("UPDATE catalog_info SET value = '4' WHERE key = 'schema_version'")
    con.close()
    con = runs.open_catalog(db, read_only=True)  # upgrades first (briefly read-write)
    assert con.execute("SELECT value FROM catalog_info WHERE key = 'schema_version'").fetchone()[0] == "5"
    assert con.execute("SELECT idempotency_key FROM runs").fetchall() == [(None,)]
    con.close()
    con = runs.open_catalog(db)
    prepared = runs.prepare(db, [bundle(tmp_path / "b")], workers=1)
    run_id = runs.commit(con, prepared, "pushed", pushed_by="ci", idempotency_key="key-1")
    assert catalog.run_of_key(con, "key-1", "ci") == run_id == 2
    assert catalog.run_of_key(con, "key-1", "alice") is None and catalog.run_of_key(con, "key-2", "ci") is None
    con.close()
