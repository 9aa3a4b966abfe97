"""Run names are printable text, and --run tells ids from names.

A name is what a user types and every table shows: blank names, control
characters (newlines break the history table, ANSI escapes recolour a terminal),
invisible characters and a leading '#' (which means a run id) are refused in
one line, with nothing stored. ``--run NAME`` finds a run of that name first,
``--run #N`` and ``--run-id N`` a run id.
"""

from __future__ import annotations

import json

import pytest

from builders import GpuTrace, write
from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog
from overlapscope.cli import main


@pytest.fixture
def bundle(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for r in range(2):
        write(GpuTrace(rank=r).step(1, 0, 100).kernel(0, 50, step=1).comm(40, 30, step=1), folder / f"rank-{r}.json")
    return str(folder)


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "catalog.duckdb"
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(path))
    return path


BAD_NAMES = [
    ("", "blank"),
    ("   ", "blank"),
    ("two\nlines", "U+000A"),
    ("\x1b[31mred", "U+001B"),
    ("zero\u200bwidth", "U+200B"),
    ("bell\x07", "U+0007"),
    ("#3", "'#'"),
    ("x" * 201, "at most 200"),
]


@pytest.mark.parametrize("name, says", BAD_NAMES, ids=[repr(n[:12]) for n, _ in BAD_NAMES])
def test_a_bad_run_name_is_one_line_and_nothing_is_stored(bundle, db, capsys, name, says):
    assert main(["ingest", bundle, "--run", name]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err
    assert not db.exists() or catalog.runs(runs.open_catalog(db, read_only=True)) == []


@pytest.mark.parametrize("tag", ["=v", "k=a\nb", "k\x1b=v"])
def test_a_bad_tag_is_one_line(bundle, db, capsys, tag):
    assert main(["ingest", bundle, "--run", "ok", "--tag", tag]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_good_names_are_kept_as_given_without_surrounding_blanks(bundle, db, capsys):
    for name in ("  nightly  ", "2", "名前/ベンチ", "llama-8b fsdp bs=4"):
        assert main(["ingest", bundle, "--run", name]) == 0
    capsys.readouterr()
    assert main(["history", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)["runs"]]
    assert names == ["llama-8b fsdp bs=4", "名前/ベンチ", "2", "nightly"]


def _analyzed_run(capsys, *args) -> int:
    capsys.readouterr()
    assert main(["analyze", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["run"]["run_id"]


def test_run_finds_a_name_first_and_ids_with_a_hash_or_run_id(bundle, db, capsys):
    for name in ("first", "second", "1"):  # runs 1, 2, 3; run 3 is named "1"
        assert main(["ingest", bundle, "--run", name]) == 0
    assert _analyzed_run(capsys, "--run", "1") == 3  # the name wins over the id
    assert _analyzed_run(capsys, "--run", "#1") == 1
    assert _analyzed_run(capsys, "--run-id", "1") == 1
    assert _analyzed_run(capsys, "--run", "2") == 2  # digits no run is named: the id
    assert _analyzed_run(capsys, "--run", "second") == 2
    capsys.readouterr()
    assert main(["analyze", "--run", "#9", "--json"]) == 2
    assert "no run '#9'" in capsys.readouterr().err
    assert main(["analyze", "--run", "first", "--run-id", "1"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["check", "--run", "#2", "--baseline", "1", "--json"]) in (0, 1)  # the gate takes the same forms
    assert json.loads(capsys.readouterr().out)["run"]["run_id"] == 2
