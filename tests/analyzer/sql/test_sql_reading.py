"""Reading a named query's rows as Arrow record batches (``sql.arrow_batches``), against
hand-built rows."""

from __future__ import annotations

import duckdb
import pytest

from overlapscope.analyzer import sql

# collectives.stats reads collective_stats ordered by (rank, ts_ns, event_id), with a null
# wait_ns (no peer loaded: collectives.stats_waited joins the waits): hand-built rows of
# every type the table has, nulls among them, written out of that order
ROWS = [
    (1, 7, 30, "ddp_bucket", "0", "allreduce", True, None, "all_reduce", 4_194_304, False, "bf16", 8, None,
     2_000, 2_500, 500, None, 100, 0.5, None, 0, None),
    (0, 7, 12, "other", None, "broadcast", False, "2", None, None, None, None, None, "pg",
     1_700_000_000_000_000_000, 1_700_000_000_000_000_900, 900, 1_699_999_999_999_999_000, -5, 250.25, 3, 40, 7),
    (0, None, 11, "fsdp_unit", "layers.0", "reduce_scatter", True, None, "reduce_scatter", 2**40, True, "fp32", 4,
     "pg", 1_000, 1_400, 400, 900, None, None, 950, 10, 20),
    (0, 7, 10, "fsdp_unit", "", "forward_allgather", False, "0", "all_gather", 1, True, "fp32", 2, None,
     1_000, 1_100, 100, 990, 0, 0.0, None, 0, None),
]


@pytest.fixture()
def con():
    con = duckdb.connect()
    con.execute("""CREATE TEMP TABLE collective_stats (rank INTEGER, step BIGINT, event_id BIGINT, kind VARCHAR,
        id VARCHAR, phase VARCHAR, inferred BOOLEAN, microbatch VARCHAR, collective VARCHAR, bytes BIGINT,
        shard_only BOOLEAN, dtype VARCHAR, group_size BIGINT, pg_name VARCHAR, ts_ns BIGINT, end_ns BIGINT,
        comm_ns BIGINT, cpu_launch_ts_ns BIGINT, offset_ns BIGINT, exposed_ns DOUBLE, ready_ns BIGINT,
        compute_before_ns BIGINT, compute_after_ns BIGINT)""")
    con.executemany(f"INSERT INTO collective_stats VALUES ({', '.join('?' * len(ROWS[0]))})", ROWS)
    return con


def _names(con) -> list[str]:
    cur = con.execute("SELECT * FROM collective_stats LIMIT 0")
    names = [d[0] for d in cur.description]
    cur.fetchall()  # a result left unfinished refuses the next query
    return names


def _in_order():
    return [r + (None, None) for r in sorted(ROWS, key=lambda r: (r[0], r[14], r[2]))]


@pytest.mark.parametrize("batch", [1, 3, 4, 1000])
def test_arrow_batches_are_the_rows_in_order(con, batch):
    names = _names(con) + ["wait_ns", "exposed_wait_ns"]
    parts = [{n: c.to_pylist() for n, c in zip(b.schema.names, b.columns)}
             for b in sql.arrow_batches(con, "collectives.stats", batch=batch, first_rank=0, last_rank=1)]
    assert [len(p["rank"]) for p in parts] == [min(batch, 4 - i) for i in range(0, 4, batch)]
    assert all(list(p) == names for p in parts)  # every column, in the query's order
    rows = [row for p in parts for row in zip(*p.values())]
    assert rows == _in_order()
    # Python's own types, as fetchall gives them (a row is built from these values)
    assert [tuple(map(type, r)) for r in rows] == [tuple(map(type, r)) for r in _in_order()]


def test_an_empty_result_gives_no_batch(con):
    con.execute("DELETE FROM collective_stats")
    assert list(sql.arrow_batches(con, "collectives.stats", first_rank=0, last_rank=1)) == []


@pytest.mark.parametrize("first, last", [(0, 0), (1, 1), (1, 5), (2, 9)])
def test_a_range_of_ranks_reads_theirs_only(con, first, last):
    # measure.collectives reads a few ranks a query (each query sorts its own rows only)
    rows = [row for b in sql.arrow_batches(con, "collectives.stats", first_rank=first, last_rank=last)
            for row in zip(*(c.to_pylist() for c in b.columns))]
    assert rows == [r for r in _in_order() if first <= r[0] <= last]
    assert sql.tuples(con, "collectives.per_rank") == [(0, 3), (1, 1)]
