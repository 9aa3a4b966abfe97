-- params: run_id
-- scope: rank
-- provides: overlap_rank, overlap_step, compute_union
-- stays: compute_union
--
-- Exposed communication per rank and per step (docs/definitions.md).
--
--   compute        union of compute intervals (any step: comm launched in step N
--                  is hidden just as well by compute of step N+1)
--   comm           union of comm intervals
--   exposed comm   comm minus compute
--   overlap %      100 x (comm - exposed) / comm
--   step window    steps.window_start_ns .. window_end_ns (see steps.sql)
--   idle           window time with no device work at all (any step)
--   other          window time with only memcpy/memset (no compute, no comm)
--   spill out      this step's compute and exposed comm that ran outside its window
--                  (an all-reduce still running after the next step began)
--   spill in       other steps' compute and exposed comm inside this window
-- so that, exactly, per step:
--   step = compute + exposed comm + other + idle + spill in - spill out
-- and per rank: span = compute + exposed comm + other + idle.
--
-- Tables provided (the rest, _ov_*, is private to this script):
--   overlap_rank    one row per rank: steps, median_step_ns, compute_ns, comm_ns,
--                   exposed_comm_ns, span_ns, idle_ns, other_ns, comm_hta_ns, hidden_hta_ns
--   overlap_step    one row per rank and step: step_ns, compute_ns, comm_ns, exposed_comm_ns,
--                   idle_ns, other_ns, spill_in_ns, spill_out_ns, start_ns, end_ns (the window)
--   compute_union   the union of each rank's compute (any step) as disjoint pieces that
--                   may touch: rank, ts_ns, end_ns (what hides comm; the rank scripts
--                   collectives.sql and instances.sql read it; it stays with the rank)

-- _ov_iv: the run's device work, one row per busy interval.
CREATE OR REPLACE TEMP TABLE _ov_iv AS
SELECT rank, step, kind, ts_ns, ts_ns + dur_ns AS end_ns, launch_ts_ns
FROM events
WHERE run_id = getvariable('run_id') AND dur_ns > 0
  AND kind IN ('compute', 'comm', 'memcpy', 'memset');

-- _ov_last_step: start of each rank's last ProfilerStep (HTA drops work launched after it).
CREATE OR REPLACE TEMP TABLE _ov_last_step AS
SELECT rank, max(ts_ns) AS last_step_ts_ns
FROM events
WHERE run_id = getvariable('run_id') AND kind = 'step'
GROUP BY rank;

-- Group keys: (rank, step, what) packed into one exact BIGINT, because window
-- partitions on an integer run 2.5x faster than on a STRUCT (measured). step is
-- NULL for rank-wide groups. what: 1 compute, 2 comm, 3 busy (any device work),
-- 4 compute_hta, 5 comm_hta (only work launched before the last step, as HTA).
CREATE OR REPLACE TEMP MACRO _ov_key(rank, step, what) AS
    (rank::BIGINT << 40) | ((coalesce(step, -1) + 1)::BIGINT << 4) | what;
CREATE OR REPLACE TEMP MACRO _ov_rank(key) AS (key >> 40)::INTEGER;
CREATE OR REPLACE TEMP MACRO _ov_step(key) AS nullif(((key >> 4) & ((1::BIGINT << 36) - 1)) - 1, -1);
CREATE OR REPLACE TEMP MACRO _ov_what(key) AS
    ['compute', 'comm', 'busy', 'compute_hta', 'comm_hta'][(key & 15)::INTEGER];

-- _ov_src: what to union, per rank and per step.
CREATE OR REPLACE TEMP TABLE _ov_src AS
SELECT _ov_key(rank, NULL, CASE kind WHEN 'compute' THEN 1 ELSE 2 END) AS grp, ts_ns, end_ns
FROM _ov_iv WHERE kind IN ('compute', 'comm')
UNION ALL
SELECT _ov_key(rank, NULL, 3), ts_ns, end_ns FROM _ov_iv
UNION ALL
SELECT _ov_key(rank, step, CASE kind WHEN 'compute' THEN 1 ELSE 2 END), ts_ns, end_ns
FROM _ov_iv WHERE step IS NOT NULL AND kind IN ('compute', 'comm')
UNION ALL
SELECT _ov_key(i.rank, NULL, CASE i.kind WHEN 'compute' THEN 4 ELSE 5 END), i.ts_ns, i.end_ns
FROM _ov_iv i JOIN _ov_last_step l USING (rank)
WHERE i.kind IN ('compute', 'comm') AND i.launch_ts_ns < l.last_step_ts_ns;

-- _ov_u: the unions, as disjoint pieces (interval_pieces).
CREATE OR REPLACE TEMP TABLE _ov_u AS
SELECT _ov_rank(grp) AS rank, _ov_step(grp) AS step, _ov_what(grp) AS what, ts_ns, end_ns
FROM interval_pieces('_ov_src');

-- _ov_len: total length of each union, one row per rank and step (step NULL: the
-- rank's): one wide row rather than a row per union, so that the tables below join
-- it once, not once per union (planning those joins cost more than running them).
CREATE OR REPLACE TEMP TABLE _ov_len AS
SELECT rank, step,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE what = 'compute'), 0)::BIGINT  AS compute_ns,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE what = 'comm'), 0)::BIGINT     AS comm_ns,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE what = 'busy'), 0)::BIGINT     AS busy_ns,
       sum(end_ns - ts_ns) FILTER (WHERE what = 'comm_hta')::BIGINT              AS comm_hta_ns
FROM _ov_u GROUP BY ALL;

-- compute_union: the rank-wide compute union (documented above).
CREATE OR REPLACE TEMP TABLE compute_union AS
SELECT rank, ts_ns, end_ns FROM _ov_u WHERE step IS NULL AND what = 'compute';

-- _ov_cover: the rank-wide compute unions, ready for coverage lookups.
CREATE OR REPLACE TEMP TABLE _ov_cover_src AS
SELECT _ov_key(rank, NULL, list_position(['compute', 'comm', 'busy', 'compute_hta'], what)) AS grp,
       ts_ns, end_ns
FROM _ov_u WHERE step IS NULL AND what IN ('compute', 'compute_hta');
CREATE OR REPLACE TEMP TABLE _ov_cover AS
SELECT _ov_rank(grp) AS rank, _ov_what(grp) AS what, ts_ns, end_ns, before_ns
FROM interval_cumulative('_ov_cover_src');

-- _ov_window: each step's window on the device timeline (the steps table).
CREATE OR REPLACE TEMP TABLE _ov_window AS
SELECT rank, step, window_start_ns AS start_ns, window_end_ns AS end_ns
FROM steps
WHERE run_id = getvariable('run_id') AND window_start_ns IS NOT NULL;

-- _ov_comm_win: comm pieces clipped to windows: each step's own comm in its own
-- window (comm_own_win) and the rank's comm, any step's, in each window (comm_all_win).
-- Comm pieces are few (one per collective or less): the range join is cheap.
CREATE OR REPLACE TEMP TABLE _ov_comm_win AS
SELECT w.rank, w.step, CASE WHEN u.step IS NULL THEN 'comm_all_win' ELSE 'comm_own_win' END AS what,
       greatest(u.ts_ns, w.start_ns) AS ts_ns, least(u.end_ns, w.end_ns) AS end_ns
FROM _ov_u u JOIN _ov_window w
  ON w.rank = u.rank AND (u.step IS NULL OR u.step = w.step)
 AND u.end_ns > w.start_ns AND u.ts_ns < w.end_ns
WHERE u.what = 'comm';

-- _ov_compute_own_win: each step's own compute inside its own window.
CREATE OR REPLACE TEMP TABLE _ov_compute_own_win AS
SELECT u.rank, u.step, sum(overlap_ns(u.ts_ns, u.end_ns, w.start_ns, w.end_ns))::BIGINT AS len_ns
FROM _ov_u u JOIN _ov_window w USING (rank, step)
WHERE u.what = 'compute'
GROUP BY ALL;

-- _ov_hidden: comm covered by compute, per rank (step NULL), per step, HTA-style,
-- and for the clipped comm of _ov_comm_win. Step comm is measured against the
-- rank's whole compute union. The covered part of [a, b) is covered(b) - covered(a):
-- both ends as signed points through one ASOF join (a join per end took 1.25x as long).
-- One row per rank and step (step NULL: the rank's), a column per kind of comm.
CREATE OR REPLACE TEMP TABLE _ov_hidden AS
WITH comm AS (
    SELECT rank, step, what, ts_ns, end_ns,
           CASE WHEN what = 'comm_hta' THEN 'compute_hta' ELSE 'compute' END AS cover
    FROM _ov_u WHERE what IN ('comm', 'comm_hta')
    UNION ALL
    SELECT rank, step, what, ts_ns, end_ns, 'compute' FROM _ov_comm_win
), points AS (
    SELECT rank, step, what, cover, end_ns AS t_ns, 1 AS sign FROM comm
    UNION ALL
    SELECT rank, step, what, cover, ts_ns, -1 FROM comm
)
SELECT p.rank, p.step,
       coalesce(sum(p.sign * covered_ns(p.t_ns, a.ts_ns, a.end_ns, a.before_ns)) FILTER (WHERE p.what = 'comm'), 0)
           ::BIGINT AS comm_ns,
       coalesce(sum(p.sign * covered_ns(p.t_ns, a.ts_ns, a.end_ns, a.before_ns)) FILTER (WHERE p.what = 'comm_hta'), 0)
           ::BIGINT AS comm_hta_ns,
       coalesce(sum(p.sign * covered_ns(p.t_ns, a.ts_ns, a.end_ns, a.before_ns))
                    FILTER (WHERE p.what = 'comm_own_win'), 0)::BIGINT AS own_win_ns,
       coalesce(sum(p.sign * covered_ns(p.t_ns, a.ts_ns, a.end_ns, a.before_ns))
                    FILTER (WHERE p.what = 'comm_all_win'), 0)::BIGINT AS all_win_ns
FROM points p
ASOF LEFT JOIN _ov_cover a ON a.rank = p.rank AND a.what = p.cover AND p.t_ns >= a.ts_ns
GROUP BY ALL;

-- _ov_window_cover: busy and compute time inside each window (any step's work).
-- A range join, not coverage lookups: windows are few and tile the trace, so each
-- disjoint piece meets about one window, and no sort of the whole cover is needed.
CREATE OR REPLACE TEMP TABLE _ov_window_cover AS
SELECT w.rank, w.step,
       coalesce(sum(overlap_ns(u.ts_ns, u.end_ns, w.start_ns, w.end_ns)) FILTER (WHERE u.what = 'busy'), 0)::BIGINT
           AS busy_ns,
       coalesce(sum(overlap_ns(u.ts_ns, u.end_ns, w.start_ns, w.end_ns)) FILTER (WHERE u.what = 'compute'), 0)::BIGINT
           AS compute_ns
FROM _ov_window w JOIN _ov_u u
  ON u.rank = w.rank AND u.step IS NULL AND u.what IN ('busy', 'compute')
 AND u.end_ns > w.start_ns AND u.ts_ns < w.end_ns
GROUP BY ALL;

-- _ov_comm_win_len: length of the clipped comm per window (its hidden part: _ov_hidden).
CREATE OR REPLACE TEMP TABLE _ov_comm_win_len AS
SELECT c.rank, c.step,
       coalesce(sum(c.end_ns - c.ts_ns) FILTER (WHERE c.what = 'comm_own_win'), 0)::BIGINT AS own_ns,
       coalesce(sum(c.end_ns - c.ts_ns) FILTER (WHERE c.what = 'comm_all_win'), 0)::BIGINT AS all_ns
FROM _ov_comm_win c GROUP BY ALL;

-- overlap_step: one row per rank and step. In the window: own = this step's compute
-- and exposed comm, work = any step's compute or comm.
CREATE OR REPLACE TEMP TABLE overlap_step AS
WITH s AS (
    SELECT w.rank, w.step, w.start_ns, w.end_ns,
           w.end_ns - w.start_ns                                        AS step_ns,
           coalesce(l.compute_ns, 0)                                    AS compute_ns,
           coalesce(l.comm_ns, 0)                                       AS comm_ns,
           coalesce(l.comm_ns, 0) - coalesce(h.comm_ns, 0)              AS exposed_comm_ns,
           coalesce(co.len_ns, 0) + coalesce(cw.own_ns, 0) - coalesce(h.own_win_ns, 0) AS own_in_ns,
           coalesce(wc.compute_ns, 0) + coalesce(cw.all_ns, 0) - coalesce(h.all_win_ns, 0) AS work_in_ns,
           coalesce(wc.busy_ns, 0)                                      AS busy_in_ns
    FROM _ov_window w
    LEFT JOIN _ov_window_cover wc USING (rank, step)
    LEFT JOIN _ov_compute_own_win co USING (rank, step)
    LEFT JOIN _ov_comm_win_len cw USING (rank, step)
    LEFT JOIN _ov_len l USING (rank, step)
    LEFT JOIN _ov_hidden h USING (rank, step)
)
SELECT rank, step, step_ns, compute_ns, comm_ns, exposed_comm_ns,
       step_ns - busy_in_ns                         AS idle_ns,
       busy_in_ns - work_in_ns                      AS other_ns,
       work_in_ns - own_in_ns                       AS spill_in_ns,
       compute_ns + exposed_comm_ns - own_in_ns     AS spill_out_ns,
       start_ns, end_ns
FROM s;

-- overlap_rank: one row per rank, over every profiled event (not only steps).
CREATE OR REPLACE TEMP TABLE overlap_rank AS
WITH span AS (
    SELECT rank, max(end_ns) - min(ts_ns) AS span_ns FROM _ov_iv GROUP BY rank
), steps AS (
    SELECT rank, count(*) AS steps, median(step_ns) AS median_step_ns FROM overlap_step GROUP BY rank
)
SELECT r.rank, r.device_kind,
       coalesce(st.steps, 0)                                   AS steps,
       st.median_step_ns,
       coalesce(l.compute_ns, 0)                               AS compute_ns,
       coalesce(l.comm_ns, 0)                                  AS comm_ns,
       coalesce(l.comm_ns, 0) - coalesce(h.comm_ns, 0)         AS exposed_comm_ns,
       coalesce(sp.span_ns, 0)                                 AS span_ns,
       coalesce(sp.span_ns, 0) - coalesce(l.busy_ns, 0)        AS idle_ns,
       -- busy = compute + exposed comm + memcpy/memset-only time
       coalesce(l.busy_ns, 0) - coalesce(l.compute_ns, 0)
           - (coalesce(l.comm_ns, 0) - coalesce(h.comm_ns, 0)) AS other_ns,
       l.comm_hta_ns                                           AS comm_hta_ns,
       coalesce(h.comm_hta_ns, 0)                              AS hidden_hta_ns
FROM ranks r
LEFT JOIN steps st USING (rank)
LEFT JOIN span sp USING (rank)
LEFT JOIN _ov_len l ON l.rank = r.rank AND l.step IS NULL
LEFT JOIN _ov_hidden h ON h.rank = r.rank AND h.step IS NULL
WHERE r.run_id = getvariable('run_id');
