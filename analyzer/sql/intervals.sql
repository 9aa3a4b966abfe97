-- Interval algebra, written once and used by every analysis (overlap, collectives,
-- timeline, the checklist), as Perfetto's _interval_intersect!. Intervals are
-- half-open [ts_ns, end_ns), int64 ns, in groups (grp: any type; analyses pack
-- rank, step and what into one BIGINT where speed matters). Nothing here assumes
-- nesting: GPU kernels on one stream may overlap.
--
--   union         interval_union(src)            disjoint islands
--                 interval_pieces(src)           the same set as disjoint pieces that may touch (faster)
--   coverage      interval_cumulative(src)       a disjoint set ready for O(log n) coverage lookups,
--                 covered_ns(...)                with covered_ns: length covered up to t
--   intersection  interval_intersect(a, b)       the parts of a's intervals inside b (b disjoint)
--                 overlap_ns(...)                length of the intersection of two intervals
--   gaps          interval_gaps(src, bounds)     each group's bounds minus the union of src
--   subtraction   interval_intersect(a, interval_gaps(b, hull of a)): a minus b
--   sweep         interval_sweep(src)            elementary segments with how many intervals of
--                                                each layer run in them
--                 interval_weights(src)          elementary segments with the sums of the weights
--                                                of the intervals that run in them
-- Macro arguments are table or view names (strings).

-- interval_union(src): the union of each group's intervals as islands.
-- src: grp, ts_ns, end_ns. An interval starts a new island when it begins after
-- every earlier interval of its group has ended. Returns grp, ts_ns, end_ns.
CREATE OR REPLACE MACRO interval_union(src) AS TABLE
WITH ordered AS (
    SELECT grp, ts_ns, end_ns,
           max(end_ns) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM query_table(src)
    WHERE end_ns > ts_ns
), marked AS (
    SELECT grp, ts_ns, end_ns,
           sum((prev_end_ns IS NULL OR ts_ns > prev_end_ns)::INTEGER)
               OVER (PARTITION BY grp ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
)
SELECT grp, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns
FROM marked
GROUP BY grp, island;

-- interval_pieces(src): the same union as disjoint pieces that may touch: each
-- interval minus everything its group covered before it (ordered by start). One
-- window pass instead of two plus a grouping: twice as fast as interval_union on
-- 300k intervals (measured), and all that lengths and coverage lookups need.
-- grp must be an integer here: the running max runs over the whole table, not per
-- group, on (grp, end) packed into one HUGEINT, grp x 2^64 + (end + 2^63), which
-- orders as the pair does. So the max over earlier rows is the group's own when the
-- group has earlier rows, and below grp x 2^64 (another group's) when it has none.
-- A window partitioned by grp took 2.4x as long on 306k intervals of 4 ranks (measured).
CREATE OR REPLACE MACRO interval_pieces(src) AS TABLE
SELECT grp, ts_ns, end_ns
FROM (
    -- own: the packed max less this group's base, end + 2^63 when it is the group's own
    SELECT grp, end_ns,
           CASE WHEN own >= 0 THEN greatest(ts_ns, (own - 9223372036854775808)::BIGINT) ELSE ts_ns END AS ts_ns
    FROM (
        SELECT grp, ts_ns, end_ns,
               max(grp::HUGEINT * 18446744073709551616 + end_ns + 9223372036854775808)
                   OVER (ORDER BY grp, ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               - grp::HUGEINT * 18446744073709551616 AS own
        FROM query_table(src)
    )
)
WHERE end_ns > ts_ns;

-- overlap_ns(a_ts, a_end, b_ts, b_end): length of the intersection of two intervals.
-- Summed over a range join of two disjoint interval sets it gives the length of
-- the intersection of the sets, exactly.
CREATE OR REPLACE MACRO overlap_ns(a_ts, a_end, b_ts, b_end) AS
    greatest(0, least(a_end, b_end) - greatest(a_ts, b_ts));

-- interval_cumulative(src): disjoint intervals (grp, ts_ns, end_ns) with before_ns,
-- the total length of the group's intervals that end before this one starts.
-- With it, the length of the set covered up to time t is one ASOF lookup:
-- covered_ns(t) = before_ns + min(t - ts_ns, end_ns - ts_ns) of the last interval
-- starting at or before t. The part of any interval [a, b) covered by the set is
-- then covered_ns(b) - covered_ns(a): exact, and O(n log n) instead of a range join.
CREATE OR REPLACE MACRO interval_cumulative(src) AS TABLE
SELECT grp, ts_ns, end_ns,
       coalesce(sum(end_ns - ts_ns) OVER (PARTITION BY grp ORDER BY ts_ns
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_ns
FROM query_table(src);

-- covered_ns(t, ts_ns, end_ns, before_ns): covered length up to t, given the row of
-- interval_cumulative that an ASOF join found for t (0 when none).
CREATE OR REPLACE MACRO covered_ns(t, ts_ns, end_ns, before_ns) AS
    coalesce(before_ns + least(t - ts_ns, end_ns - ts_ns), 0);

-- interval_intersect(a, b): every part of an interval of a that lies inside an
-- interval of b of the same group, with a's other columns. b must be disjoint
-- (a union, gaps); a may overlap itself. A plain range join, which DuckDB plans
-- as an inequality join.
CREATE OR REPLACE MACRO interval_intersect(a, b) AS TABLE
SELECT x.* REPLACE (greatest(x.ts_ns, y.ts_ns) AS ts_ns, least(x.end_ns, y.end_ns) AS end_ns)
FROM query_table(a) x
JOIN query_table(b) y ON x.grp = y.grp AND x.ts_ns < y.end_ns AND y.ts_ns < x.end_ns;

-- interval_gaps(src, bounds): each group's bounds (one row per grp: ts_ns, end_ns)
-- minus the union of src's intervals: before the first island, between islands,
-- after the last. A group with no interval in its bounds is one gap. src's
-- intervals may reach outside the bounds (they are clipped).
CREATE OR REPLACE MACRO interval_gaps(src, bounds) AS TABLE
WITH clipped AS (
    SELECT s.grp, greatest(s.ts_ns, b.ts_ns) AS ts_ns, least(s.end_ns, b.end_ns) AS end_ns
    FROM query_table(src) s JOIN query_table(bounds) b ON s.grp = b.grp
    WHERE s.ts_ns < b.end_ns AND s.end_ns > b.ts_ns
), islands AS (
    SELECT grp, ts_ns, end_ns,
           max(end_ns) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM clipped
), inner_gaps AS (
    SELECT i.grp, coalesce(i.prev_end_ns, b.ts_ns) AS ts_ns, i.ts_ns AS end_ns
    FROM islands i JOIN query_table(bounds) b ON i.grp = b.grp
    WHERE i.ts_ns > coalesce(i.prev_end_ns, b.ts_ns)
), tail_gaps AS (
    SELECT b.grp, coalesce(max(c.end_ns), b.ts_ns) AS ts_ns, b.end_ns
    FROM query_table(bounds) b LEFT JOIN clipped c ON c.grp = b.grp
    GROUP BY b.grp, b.ts_ns, b.end_ns
)
SELECT grp, ts_ns, end_ns FROM inner_gaps
UNION ALL
SELECT grp, ts_ns, end_ns FROM tail_gaps WHERE end_ns > ts_ns;

-- interval_sweep(src): the elementary segments between every edge of a group's
-- intervals, with how many intervals of each layer run in each. src: grp, ts_ns,
-- end_ns, layer (0 or 1). Returns grp, ts_ns, end_ns, n0, n1 (segments after the
-- last edge are left out). Used to share time among concurrent intervals.
CREATE OR REPLACE MACRO interval_sweep(src) AS TABLE
WITH edges AS (
    SELECT grp, ts_ns AS t, (layer = 0)::INTEGER AS d0, (layer = 1)::INTEGER AS d1 FROM query_table(src)
    UNION ALL
    SELECT grp, end_ns, -(layer = 0)::INTEGER, -(layer = 1)::INTEGER FROM query_table(src)
), points AS (
    SELECT grp, t, sum(d0) AS d0, sum(d1) AS d1 FROM edges GROUP BY grp, t
), running AS (
    SELECT grp, t AS ts_ns, lead(t) OVER (PARTITION BY grp ORDER BY t) AS end_ns,
           sum(d0) OVER (PARTITION BY grp ORDER BY t ROWS UNBOUNDED PRECEDING) AS n0,
           sum(d1) OVER (PARTITION BY grp ORDER BY t ROWS UNBOUNDED PRECEDING) AS n1
    FROM points
)
SELECT grp, ts_ns, end_ns, n0, n1 FROM running WHERE end_ns IS NOT NULL;

-- interval_weights(src): the elementary segments between a group's first and last edge,
-- each with a and b, the sums of the weights a and b (HUGEINT) of the group's intervals
-- that run through it (zero where none does). src: grp, ts_ns, end_ns, a, b. Returns grp,
-- ts_ns, end_ns, a, b (zero-length intervals and segments are left out). One sort and a
-- running sum per weight, each sum costing about as much as the sort (measured): a caller
-- that counts several kinds of interval packs their counts into a weight's bit fields
-- (overlap.sql), as a count never goes below zero nor beyond the intervals counted.
-- Edges at one time: the last of them carries the segment after it, with every edge at
-- that time summed (the others make zero-length segments, left out).
CREATE OR REPLACE MACRO interval_weights(src) AS TABLE
WITH edge AS (
    SELECT grp, ts_ns AS t, a, b FROM query_table(src) WHERE end_ns > ts_ns
    UNION ALL
    SELECT grp, end_ns, -a, -b FROM query_table(src) WHERE end_ns > ts_ns
), swept AS (
    SELECT grp, t AS ts_ns, lead(t) OVER w AS end_ns, sum(a) OVER w AS a, sum(b) OVER w AS b
    FROM edge
    WINDOW w AS (PARTITION BY grp ORDER BY t ROWS UNBOUNDED PRECEDING)
)
SELECT grp, ts_ns, end_ns, a, b FROM swept WHERE end_ns > ts_ns;
