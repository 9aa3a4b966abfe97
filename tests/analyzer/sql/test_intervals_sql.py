"""The interval algebra (analyzer/sql/intervals.sql) against plain Python (intervals_ref).

Every analysis unions, covers and intersects through these macros; here they meet
hand-built and generated interval sets directly: overlapping, nested, touching, equal
starts, zero-length, negative times and groups, several groups at once.
"""

from __future__ import annotations

from decimal import Decimal

import duckdb
import pytest
from hypothesis import given, settings, strategies as st

from overlapscope.analyzer import sql
from intervals_ref import intersection, length, union

T = st.integers(min_value=-(2**62), max_value=2**62)


@pytest.fixture(scope="module")
def con():
    con = duckdb.connect()
    sql.setup(con, "intervals")
    return con


def load(con, rows, name="src"):
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} (grp BIGINT, ts_ns BIGINT, end_ns BIGINT)")
    if rows:
        con.executemany(f"INSERT INTO {name} VALUES (?, ?, ?)", rows)


def by_group(rows):
    out = {}
    for g, s, e in rows:
        if e > s:
            out.setdefault(g, []).append((s, e))
    return out


def check_pieces(con, rows):
    load(con, rows)
    pieces = con.sql("SELECT grp, ts_ns, end_ns FROM interval_pieces('src') ORDER BY grp, ts_ns").fetchall()
    got = by_group(pieces)
    want = by_group(rows)
    assert set(got) == set(want)
    for g, ivs in want.items():
        mine = got[g]
        assert all(e > s for s, e in mine)
        # disjoint (touching allowed), and the same set as the union
        assert all(b[0] >= a[1] for a, b in zip(mine, mine[1:])), mine
        assert [list(i) for i in union(mine)] == union(ivs)
        assert length(mine) == length(union(ivs))


def test_pieces_by_hand(con):
    rows = [
        (1, 0, 10), (1, 5, 15), (1, 2, 3), (1, 15, 20), (1, 30, 31),  # overlap, nested, touching, apart
        (2, -50, -10), (2, -50, -20), (2, -60, 0),  # equal starts, negative times
        (-3, 7, 7), (-3, 100, 200), (-3, 150, 160),  # zero length, a negative group
        (2**40 + 5, 1, 2),  # a packed key
    ]
    check_pieces(con, rows)
    load(con, rows)
    lengths = dict(con.sql("SELECT grp, sum(end_ns - ts_ns) FROM interval_pieces('src') GROUP BY grp").fetchall())
    assert lengths == {1: 20 + 1, 2: 60, -3: 100, 2**40 + 5: 1}


def test_a_later_group_never_sees_an_earlier_groups_end(con):
    # group 1 ends late; group 2's intervals start before that end and must stay whole
    check_pieces(con, [(1, 0, 1_000), (2, 10, 20), (2, 15, 30)])
    load(con, [(1, 0, 1_000), (2, 10, 20), (2, 15, 30)])
    assert con.sql("SELECT sum(end_ns - ts_ns) FROM interval_pieces('src') WHERE grp = 2").fetchall()[0][0] == 20


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(-3, 3), T, st.integers(0, 2**40)), max_size=60))
def test_pieces_are_the_union(con, raw):
    check_pieces(con, [(g, s, s + d) for g, s, d in raw])


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-1000, 1000), st.integers(0, 300)), max_size=40),
       st.lists(st.tuples(st.integers(0, 2), st.integers(-1000, 1000), st.integers(0, 300)), max_size=20))
def test_covered_part_through_cumulative_lookups(con, cover_raw, probe_raw):
    """covered_ns(b) - covered_ns(a) over interval_cumulative of a union is the length of
    [a, b) inside it (what overlap.sql's hidden comm is)."""
    load(con, [(g, s, s + d) for g, s, d in cover_raw], "cover_src")
    con.execute("CREATE OR REPLACE TEMP TABLE cover_pieces AS SELECT * FROM interval_pieces('cover_src')")
    con.execute("CREATE OR REPLACE TEMP TABLE cover AS SELECT * FROM interval_cumulative('cover_pieces')")
    load(con, [(g, s, s + d) for g, s, d in probe_raw], "probe")
    got = dict(con.sql("""
        SELECT p.rowid, covered_ns(p.end_ns, b.ts_ns, b.end_ns, b.before_ns)
                        - covered_ns(p.ts_ns, a.ts_ns, a.end_ns, a.before_ns)
        FROM probe p
        ASOF LEFT JOIN cover a ON a.grp = p.grp AND p.ts_ns >= a.ts_ns
        ASOF LEFT JOIN cover b ON b.grp = p.grp AND p.end_ns >= b.ts_ns""").fetchall())
    cover = by_group((g, s, s + d) for g, s, d in cover_raw)
    for i, (g, s, d) in enumerate(probe_raw):
        want = intersection([[Decimal(s), Decimal(s + d)]], [[Decimal(a), Decimal(b)] for a, b in
                                                                 union(cover.get(g, []))])
        assert got[i] == want, (g, s, d)


def weights_ref(rows):
    """interval_weights in plain Python: per group, every elementary segment between the
    group's first and last edge with the summed weights of the intervals running through it."""
    out = {}
    for g in {r[0] for r in rows if r[2] > r[1]}:
        ivs = [r for r in rows if r[0] == g and r[2] > r[1]]
        edges = sorted({t for _, s, e, _, _ in ivs for t in (s, e)})
        out[g] = [(s, e, sum(a for _, x, y, a, _ in ivs if x <= s and e <= y), sum(b for _, x, y, _, b in ivs
                                                                                  if x <= s and e <= y))
                  for s, e in zip(edges, edges[1:])]
    return out


def check_weights(con, rows):
    con.execute("CREATE OR REPLACE TEMP TABLE wsrc (grp BIGINT, ts_ns BIGINT, end_ns BIGINT, a HUGEINT, b HUGEINT)")
    if rows:
        con.executemany("INSERT INTO wsrc VALUES (?, ?, ?, ?, ?)", rows)
    got = {}
    for g, s, e, a, b in con.sql("SELECT * FROM interval_weights('wsrc') ORDER BY grp, ts_ns").fetchall():
        got.setdefault(g, []).append((s, e, a, b))
    assert got == weights_ref(rows)


def test_weights_by_hand(con):
    big = 2**84  # a weight's top field, as overlap.sql packs counts
    check_weights(con, [
        (1, 0, 10, 1, 0), (1, 5, 15, 1, big), (1, 10, 12, 2**42, 0),  # overlap; touching at 10
        (1, 20, 30, 1, 0), (1, 20, 20, 7, 7),  # a gap (a segment of zero weight), a zero-length interval
        (2, -5, 5, big, 1), (2, -5, 5, big, 1),  # equal intervals, negative times
    ])
    con.execute("CREATE OR REPLACE TEMP TABLE wsrc (grp BIGINT, ts_ns BIGINT, end_ns BIGINT, a HUGEINT, b HUGEINT)")
    con.executemany("INSERT INTO wsrc VALUES (?, ?, ?, ?, ?)", [(1, 0, 10, 1, 0), (1, 5, 15, 1, 2**84),
                                                               (1, 10, 12, 2**42, 0)])
    assert con.sql("SELECT ts_ns, end_ns, a, b FROM interval_weights('wsrc') ORDER BY ts_ns").fetchall() == [
        (0, 5, 1, 0), (5, 10, 2, 2**84), (10, 12, 1 + 2**42, 2**84), (12, 15, 1, 2**84)]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.integers(-100, 100), st.integers(0, 60), st.integers(0, 3),
                          st.integers(0, 3)), max_size=40))
def test_weights_sum_what_runs_in_each_segment(con, raw):
    check_weights(con, [(g, s, s + d, a, b) for g, s, d, a, b in raw])
