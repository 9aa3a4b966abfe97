"""What ingest derives runs with the derive's DuckDB budget (``runs._derive``; 64 MiB, where
the reduce has 128), and once more with the reduce's where a run's SQL needs more."""

from __future__ import annotations

import duckdb
import pytest

from conftest import SAMPLES
from overlapscope.analyzer import engine, runs
from overlapscope.analyzer.runs import derive


def _limit_mib(con) -> float:
    text = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]  # e.g. '64.0 MiB'
    number, unit = text.split()
    return float(number) * {"KiB": 2 ** -10, "MiB": 1, "GiB": 2 ** 10}[unit]


def _mapped():
    mapped = engine.map_run([str(SAMPLES / "ddp_tiny_buckets")], "full", workers=1)
    return mapped.con, mapped.run_id


def test_the_derive_runs_with_its_own_budget():
    con, run_id = _mapped()
    assert _limit_mib(con) == engine.reduce_memory_bytes("full") / 2 ** 20
    got = runs._derive(con, run_id)
    assert _limit_mib(con) == engine.reduce_memory_bytes("derive") / 2 ** 20 < engine.reduce_memory_bytes("full") / 2 ** 20
    assert got["documents"]["diagnose"]["findings"] and got["figures"]["group_metrics"]


def test_a_derive_out_of_memory_runs_again_with_the_reduces_budget(monkeypatch):
    """DuckDB's own error, raised by the store at the derive's budget (the first call of two)."""
    con, run_id = _mapped()
    real, limits = derive.compute, []

    def compute(con, run_id):
        limits.append(_limit_mib(con))
        if len(limits) == 1:
            con.execute("SET memory_limit = '1MiB'")  # the store's own limit, too small for the next query
            con.execute("SELECT list(range) FROM range(2000000)").fetchall()
        return real(con, run_id)

    monkeypatch.setattr(derive, "compute", compute)
    got = runs._derive(con, run_id)
    assert limits == [engine.reduce_memory_bytes("derive") / 2 ** 20, engine.reduce_memory_bytes("full") / 2 ** 20]
    assert got["documents"]["diagnose"]["findings"]


def test_the_reduces_own_budget_is_not_tried_twice(monkeypatch):
    """Where $OVERLAPSCOPE_REDUCE_MEMORY_MB gives both the same budget, the error stands."""
    monkeypatch.setenv(engine.rank.ENV_REDUCE_MEMORY_MB, "64")
    con, run_id = _mapped()
    calls = []

    def compute(con, run_id):
        calls.append(1)
        raise duckdb.OutOfMemoryException("out of memory")

    monkeypatch.setattr(derive, "compute", compute)
    with pytest.raises(duckdb.OutOfMemoryException):
        runs._derive(con, run_id)
    assert calls == [1]
