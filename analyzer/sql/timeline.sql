-- params: run_id, step, ranks, max_marks, aligned
-- scope: run
-- requires: clocks
-- inputs: timeline_attribution
-- provides: timeline_window, timeline_lanes, timeline_marks, timeline_summary, timeline_counts
--
-- The timeline of one step: per lane (rank x track) the compute, comm and memcpy
-- marks of the step's window, the exposed parts of comm, and few enough marks
-- to draw (busy blocks where a lane holds too many). ranks: the ranks to show.
-- timeline_attribution (registered by measure/timeline.py): the collectives
-- analysis of each comm event (rank, event_id, coll_kind, coll_id, phase,
-- collective, bytes, coll_comm_ns, coll_exposed_ns).
-- Times: int64 ns on each rank's trace clock, and *_rel_ns from the chart's zero:
-- with aligned, the ranks on one clock (clocks.sql: each rank's offset added) and
-- zero at the earliest window start of the shown ranks, so a late rank shows late;
-- without it, each rank from its own window start.
--
--   timeline_window   rank, start_ns, end_ns: the step's window on each shown rank (its
--                     own clock), offset_ns (its clock offset; 0 unless aligned), zero_ns
--                     (the chart's zero on the rank's own clock)
--   timeline_lanes    rank, track_id, track_kind, track (its name), pid, tid (Kineto's), has_compute, has_comm
--   timeline_marks    what to draw: rank, track_id, kind (compute, comm, memcpy, memset,
--                     exposed), name, event_id, marks (1, or how many a busy block
--                     merged), start_rel_ns, end_rel_ns, busy_ns, and for comm the
--                     collective's attribution
--   timeline_summary  per rank: window (with its start and end from the chart's zero),
--                     compute, comm and exposed comm in it
--   timeline_counts   raw_marks: the marks before any merging

-- timeline_window: the step's window on each selected rank (steps.sql).
CREATE OR REPLACE TEMP TABLE timeline_window AS
WITH w AS (
    SELECT s.rank, s.window_start_ns AS start_ns, s.window_end_ns AS end_ns,
           CASE WHEN getvariable('aligned') THEN coalesce(k.clock_offset_ns, 0) ELSE 0 END::BIGINT AS offset_ns
    FROM steps s
    LEFT JOIN rank_clock k USING (rank)
    WHERE s.run_id = getvariable('run_id') AND s.step = getvariable('step')
      AND list_contains(getvariable('ranks'), s.rank)
      AND s.window_start_ns IS NOT NULL AND s.window_end_ns > s.window_start_ns
)
SELECT rank, start_ns, end_ns, offset_ns,
       CASE WHEN getvariable('aligned') THEN (SELECT min(start_ns + offset_ns) FROM w) - offset_ns
            ELSE start_ns END::BIGINT AS zero_ns
FROM w;

-- _tl_iv: device work that runs in the window (of any step: work launched in
-- step N-1 still occupies the device), clipped to the window.
CREATE OR REPLACE TEMP TABLE _tl_iv AS
SELECT e.rank, e.event_id, e.track_id, e.kind, e.name,
       greatest(e.ts_ns, w.start_ns) AS ts_ns, least(e.ts_ns + e.dur_ns, w.end_ns) AS end_ns
FROM events e JOIN timeline_window w ON e.rank = w.rank
WHERE e.run_id = getvariable('run_id') AND e.dur_ns > 0
  AND e.kind IN ('compute', 'comm', 'memcpy', 'memset')
  AND e.ts_ns < w.end_ns AND e.ts_ns + e.dur_ns > w.start_ns;

-- _tl_compute: the union of the rank's compute in the window (every track):
-- what can hide comm (docs/definitions.md, "exposed comm").
CREATE OR REPLACE TEMP TABLE _tl_compute_src AS
SELECT rank AS grp, ts_ns, end_ns FROM _tl_iv WHERE kind = 'compute';
CREATE OR REPLACE TEMP TABLE _tl_compute AS
SELECT grp AS rank, ts_ns, end_ns FROM interval_union('_tl_compute_src');

-- _tl_gaps: the window minus the compute union (interval_gaps).
CREATE OR REPLACE TEMP TABLE _tl_bounds AS SELECT rank AS grp, start_ns AS ts_ns, end_ns FROM timeline_window;
CREATE OR REPLACE TEMP TABLE _tl_gaps AS SELECT * FROM interval_gaps('_tl_compute_src', '_tl_bounds');

-- _tl_exposed: the exposed pieces of each comm event: its parts in a gap of the
-- compute union (interval_intersect).
CREATE OR REPLACE TEMP TABLE _tl_comm AS
SELECT rank AS grp, rank, event_id, track_id, 'exposed' AS kind, name, ts_ns, end_ns FROM _tl_iv WHERE kind = 'comm';
CREATE OR REPLACE TEMP TABLE _tl_exposed AS
SELECT rank, event_id, track_id, kind, name, ts_ns, end_ns FROM interval_intersect('_tl_comm', '_tl_gaps');

-- _tl_pieces: everything one could draw, with its group (rank, track, kind).
-- Marks inside an earlier mark of their group are dropped: CPU traces nest
-- aten ops (aten::linear holds aten::addmm), and the outer one is what a lane shows.
CREATE OR REPLACE TEMP TABLE _tl_pieces AS
WITH all_pieces AS (
    SELECT rank, event_id, track_id, kind, name, ts_ns, end_ns FROM _tl_iv
    UNION ALL
    SELECT rank, event_id, track_id, kind, name, ts_ns, end_ns FROM _tl_exposed
), ordered AS (
    SELECT *,
           max(end_ns) OVER (PARTITION BY rank, track_id, kind ORDER BY ts_ns, end_ns DESC, event_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS outer_end_ns
    FROM all_pieces
)
SELECT dense_rank() OVER (ORDER BY rank, track_id, kind) AS gid,
       rank, event_id, track_id, kind, name, ts_ns, end_ns
FROM ordered
WHERE outer_end_ns IS NULL OR end_ns > outer_end_ns;

-- _tl_budget: how many marks each group may draw. Max-min fair: groups are
-- taken smallest first, each gets an equal share of what is left of max_marks;
-- a group that fits its share is drawn whole, the first that does not fit and
-- every larger one get that share and are merged into busy blocks.
CREATE OR REPLACE TEMP TABLE _tl_budget AS
WITH counts AS (
    SELECT gid, any_value(rank) AS rank, count(*) AS n FROM _tl_pieces GROUP BY gid
), ranked AS (
    SELECT gid, rank, n,
           coalesce(sum(n) OVER (ORDER BY n, gid ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before_n,
           row_number() OVER (ORDER BY n, gid) AS i,
           count(*) OVER () AS groups
    FROM counts
), shares AS (
    SELECT *, greatest(1, (getvariable('max_marks') - before_n) // (groups - i + 1)) AS share FROM ranked
), first_capped AS (
    SELECT min(i) AS i FROM shares WHERE n > share
)
SELECT s.gid, s.n,
       CASE WHEN f.i IS NULL OR s.i < f.i THEN NULL
            ELSE (SELECT share FROM shares WHERE i = f.i) END AS cap
FROM shares s, first_capped f;

-- _tl_islands: the union of each capped group's marks (what its blocks cover).
CREATE OR REPLACE TEMP TABLE _tl_capped_src AS
SELECT p.gid AS grp, p.ts_ns, p.end_ns
FROM _tl_pieces p JOIN _tl_budget b USING (gid)
WHERE b.cap IS NOT NULL;
CREATE OR REPLACE TEMP TABLE _tl_islands AS
SELECT grp AS gid, ts_ns, end_ns FROM interval_union('_tl_capped_src');

-- _tl_blocks: the busy blocks of capped groups. The group's islands are split
-- at its cap - 1 longest gaps (ties: the earlier gap) and merged everywhere
-- else, so a group draws exactly min(cap, islands) blocks, and what merges is
-- what lies closest together. busy_ns: the time the block's own marks cover
-- (a block also spans the short gaps it merged).
CREATE OR REPLACE TEMP TABLE _tl_blocks AS
WITH gaps AS (
    SELECT gid, ts_ns, end_ns,
           lead(ts_ns) OVER (PARTITION BY gid ORDER BY ts_ns) - end_ns AS gap_after_ns
    FROM _tl_islands
), ranked AS (
    SELECT g.*, b.cap,
           row_number() OVER (PARTITION BY g.gid ORDER BY g.gap_after_ns DESC NULLS LAST, g.ts_ns) AS k
    FROM gaps g JOIN _tl_budget b USING (gid)
), split AS (
    SELECT gid, ts_ns, end_ns,
           (gap_after_ns IS NOT NULL AND k <= cap - 1)::INTEGER AS split_after
    FROM ranked
), numbered AS (
    SELECT gid, ts_ns, end_ns,
           coalesce(sum(split_after) OVER (PARTITION BY gid ORDER BY ts_ns
                                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS block
    FROM split
)
SELECT gid, block, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns, sum(end_ns - ts_ns)::BIGINT AS busy_ns
FROM numbered
GROUP BY gid, block;

-- _tl_block_marks: one row per block: how many marks it merged, the longest one's name.
CREATE OR REPLACE TEMP TABLE _tl_block_marks AS
SELECT b.gid, b.ts_ns, b.end_ns, any_value(b.busy_ns) AS busy_ns, count(*) AS marks,
       arg_max(p.name, struct_pack(d := p.end_ns - p.ts_ns, e := -p.event_id)) AS name,
       arg_max(p.event_id, struct_pack(d := p.end_ns - p.ts_ns, e := -p.event_id)) AS event_id
FROM _tl_pieces p JOIN _tl_budget USING (gid)
ASOF JOIN _tl_blocks b ON b.gid = p.gid AND p.ts_ns >= b.ts_ns
WHERE _tl_budget.cap IS NOT NULL
GROUP BY b.gid, b.ts_ns, b.end_ns;

-- timeline_lanes: one lane per rank and track that has marks; compute lanes
-- first (compute on top, comm below, as docs/model.md draws the replays).
-- has_comm: the lane runs collectives (a GPU stream with NCCL kernels, gloo's thread).
CREATE OR REPLACE TEMP TABLE timeline_lanes AS
SELECT p.rank, p.track_id, any_value(t.kind) AS track_kind,
       coalesce(any_value(t.name), 'track ' || p.track_id) AS track, any_value(t.pid) AS pid, any_value(t.tid) AS tid,
       bool_or(p.kind = 'compute') AS has_compute,
       bool_or(p.kind = 'comm') AS has_comm
FROM _tl_pieces p
LEFT JOIN tracks t ON t.run_id = getvariable('run_id') AND t.rank = p.rank AND t.track_id = p.track_id
GROUP BY p.rank, p.track_id;

-- timeline_marks: what to draw. Raw marks of uncapped groups (marks = 1) and the
-- blocks of capped groups (marks = n merged; busy_ns = time they cover), with
-- the collective's attribution for comm and exposed marks.
CREATE OR REPLACE TEMP TABLE timeline_marks AS
WITH drawn AS (
    SELECT p.gid, p.rank, p.track_id, p.kind, p.name, p.event_id, p.ts_ns, p.end_ns,
           1 AS marks, p.end_ns - p.ts_ns AS busy_ns
    FROM _tl_pieces p JOIN _tl_budget b USING (gid)
    WHERE b.cap IS NULL
    UNION ALL
    SELECT m.gid, g.rank, g.track_id, g.kind, m.name, m.event_id, m.ts_ns, m.end_ns, m.marks, m.busy_ns
    FROM _tl_block_marks m
    JOIN (SELECT DISTINCT gid, rank, track_id, kind FROM _tl_pieces) g USING (gid)
)
SELECT d.rank, d.track_id, d.kind, d.name, d.event_id, d.marks,
       d.ts_ns - w.zero_ns AS start_rel_ns, d.end_ns - w.zero_ns AS end_rel_ns, d.busy_ns,
       a.coll_kind, a.coll_id, a.phase, a.collective, a.bytes, a.coll_comm_ns, a.coll_exposed_ns
FROM drawn d
JOIN timeline_window w USING (rank)
LEFT JOIN timeline_attribution a ON d.kind IN ('comm', 'exposed') AND d.marks = 1
                    AND a.rank = d.rank AND a.event_id = d.event_id
ORDER BY d.rank, d.track_id, d.kind, d.ts_ns;

-- timeline_summary: per rank, what the window holds: compute, comm and exposed
-- comm as unions over every track (exposed comm here is the window's; the
-- overview's per-step figure counts the comm the step launched instead).
CREATE OR REPLACE TEMP TABLE _tl_sum_src AS
SELECT rank::BIGINT * 2 AS grp, ts_ns, end_ns FROM _tl_iv WHERE kind = 'comm'
UNION ALL
SELECT rank::BIGINT * 2 + 1, ts_ns, end_ns FROM _tl_exposed;
CREATE OR REPLACE TEMP TABLE timeline_summary AS
WITH lens AS (
    SELECT grp, sum(end_ns - ts_ns)::BIGINT AS len_ns FROM interval_union('_tl_sum_src') GROUP BY grp
), compute AS (
    SELECT rank, sum(end_ns - ts_ns)::BIGINT AS compute_ns FROM _tl_compute GROUP BY rank
)
SELECT w.rank, w.start_ns, w.end_ns, w.end_ns - w.start_ns AS window_ns, w.offset_ns,
       w.start_ns - w.zero_ns AS start_rel_ns, w.end_ns - w.zero_ns AS end_rel_ns,
       coalesce(c.compute_ns, 0) AS compute_ns,
       coalesce(cm.len_ns, 0) AS comm_ns,
       coalesce(ex.len_ns, 0) AS exposed_ns
FROM timeline_window w
LEFT JOIN compute c USING (rank)
LEFT JOIN lens cm ON cm.grp = w.rank::BIGINT * 2
LEFT JOIN lens ex ON ex.grp = w.rank::BIGINT * 2 + 1
ORDER BY w.rank;

-- timeline_counts: how many marks the window holds before merging.
CREATE OR REPLACE TEMP TABLE timeline_counts AS SELECT count(*) AS raw_marks FROM _tl_pieces;
