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
--                   may touch: rank, ts_ns, end_ns, in_comm (a comm transfer runs
--                   through the whole piece; pieces are split where transfers start and
--                   end, so one runs through all of it or none). What hides comm: the
--                   rank scripts collectives.sql and instances.sql read it; it stays
--                   with the rank.
--
-- How: one sweep per rank over the edges of all device work and of the step windows
-- (_ov_seg) gives every figure of the rank and of each window; only a step's own work
-- (compute and comm it launched, wherever it ran) needs its own unions (_ov_sp).
-- Replacing a union per rank, step and kind with the sweep took the script from 143 to
-- 91-100 ms on 2 ranks of the reference trace at one thread (measured), and instances.sql
-- from 36 to 9 ms (compute_union's in_comm).

-- _ov_iv: the run's device work, one row per busy interval; hta: launched before the
-- start of the rank's last ProfilerStep (HTA drops work launched after it).
CREATE OR REPLACE TEMP TABLE _ov_iv AS
WITH last_step AS (
    SELECT rank, max(ts_ns) AS last_step_ts_ns
    FROM events
    WHERE run_id = getvariable('run_id') AND kind = 'step'
    GROUP BY rank
)
SELECT e.rank, e.step, e.kind, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns,
       coalesce(e.launch_ts_ns < l.last_step_ts_ns, false) AS hta
FROM events e LEFT JOIN last_step l USING (rank)
WHERE e.run_id = getvariable('run_id') AND e.dur_ns > 0
  AND e.kind IN ('compute', 'comm', 'memcpy', 'memset');

-- _ov_window: each step's window on the device timeline (the steps table), numbered in
-- time order (wi, from 1). steps.sql makes them tile the timeline without overlapping:
-- the sweep below relies on it, and stops on a store where they overlap.
CREATE OR REPLACE TEMP TABLE _ov_window AS
SELECT rank, step, start_ns, end_ns, wi,
       CASE WHEN start_ns < prev_end_ns
            THEN error('overlapscope: step windows overlap on rank ' || rank || ' (steps ' || step || ')') END AS _checked
FROM (
    SELECT rank, step, window_start_ns AS start_ns, window_end_ns AS end_ns,
           row_number() OVER (PARTITION BY rank ORDER BY window_start_ns, window_end_ns, step) AS wi,
           max(window_end_ns) OVER (PARTITION BY rank ORDER BY window_start_ns, window_end_ns, step
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM steps
    WHERE run_id = getvariable('run_id') AND window_start_ns IS NOT NULL
);

-- _ov_seg: the sweep (interval_weights) over every edge of device work and of step
-- windows, per rank: the elementary segments, each with nc (compute), nm (comm), nb (any
-- device work), nch, nmh (compute, comm launched before the last step: HTA's), the
-- intervals of each running through it, and wi (the window it lies in, 0: none). The
-- counts travel packed, three 42-bit fields to a weight, so that two running sums do
-- the work of six; no count can outgrow its field (2^42 intervals).
CREATE OR REPLACE TEMP TABLE _ov_wsrc AS
SELECT rank AS grp, ts_ns, end_ns,
       (kind = 'compute')::HUGEINT + (kind = 'comm')::HUGEINT * 4398046511104
           + 19342813113834066795298816::HUGEINT AS a,
       (hta AND kind = 'compute')::HUGEINT + (hta AND kind = 'comm')::HUGEINT * 4398046511104 AS b
FROM _ov_iv
UNION ALL
SELECT rank, start_ns, end_ns, 0::HUGEINT, wi::HUGEINT * 19342813113834066795298816 FROM _ov_window;
CREATE OR REPLACE TEMP TABLE _ov_seg AS
SELECT grp AS rank, ts_ns, end_ns,
       (a & 4398046511103)::BIGINT AS nc, ((a >> 42) & 4398046511103)::BIGINT AS nm, (a >> 84)::BIGINT AS nb,
       (b & 4398046511103)::BIGINT AS nch, ((b >> 42) & 4398046511103)::BIGINT AS nmh, (b >> 84)::BIGINT AS wi
FROM interval_weights('_ov_wsrc');
DROP TABLE _ov_wsrc;  -- the large inputs go once read for the last time, making room for what
                      -- follows (sql.ensure drops the rest after the script)

-- _ov_len: what the segments add up to per rank (wi NULL) and per window.
CREATE OR REPLACE TEMP TABLE _ov_len AS
SELECT rank, CASE WHEN GROUPING(wi) = 0 THEN wi END AS wi,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE nc > 0), 0)::BIGINT               AS compute_ns,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE nm > 0), 0)::BIGINT               AS comm_ns,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE nm > 0 AND nc = 0), 0)::BIGINT    AS exposed_comm_ns,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE nb > 0), 0)::BIGINT               AS busy_ns,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE nc > 0 OR nm > 0), 0)::BIGINT     AS work_ns,
       sum(end_ns - ts_ns) FILTER (WHERE nmh > 0)::BIGINT                           AS comm_hta_ns,
       coalesce(sum(end_ns - ts_ns) FILTER (WHERE nmh > 0 AND nch > 0), 0)::BIGINT  AS hidden_hta_ns
FROM _ov_seg
GROUP BY GROUPING SETS ((rank), (rank, wi));

-- compute_union: the rank-wide compute union (documented above), as the sweep's segments.
-- Touching segments merge into one piece, those inside transfers apart from the others
-- (nested CPU ops split the compute of CPU-only traces into five times as many segments
-- as pieces). In a run of touching segments, start minus the length of the segments
-- before it is the same for each, and a gap makes it grow: it names the run (one sort).
CREATE OR REPLACE TEMP TABLE compute_union AS
SELECT rank, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns, in_comm
FROM (
    SELECT rank, ts_ns, end_ns, nm > 0 AS in_comm,
           ts_ns - coalesce(sum(end_ns - ts_ns) OVER (PARTITION BY rank, nm > 0 ORDER BY ts_ns
                                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS run
    FROM _ov_seg WHERE nc > 0
)
GROUP BY rank, in_comm, run;

-- _ov_sp: each step's own compute (1) and comm (2) as a union of disjoint pieces.
CREATE OR REPLACE TEMP MACRO _ov_key(rank, step, what) AS
    (rank::BIGINT << 40) | ((step + 1)::BIGINT << 4) | what;
CREATE OR REPLACE TEMP TABLE _ov_sp_src AS
SELECT _ov_key(rank, step, CASE kind WHEN 'compute' THEN 1 ELSE 2 END) AS grp, ts_ns, end_ns
FROM _ov_iv WHERE step IS NOT NULL AND kind IN ('compute', 'comm');
CREATE OR REPLACE TEMP TABLE _ov_sp AS
SELECT (grp >> 40)::INTEGER AS rank, ((grp >> 4) & ((1::BIGINT << 36) - 1)) - 1 AS step,
       (grp & 15)::INTEGER AS what, ts_ns, end_ns
FROM interval_pieces('_ov_sp_src');
DROP TABLE _ov_sp_src;

-- _ov_exposed: the sweep's segments of comm without compute, ready for coverage lookups.
CREATE OR REPLACE TEMP TABLE _ov_x AS SELECT rank AS grp, ts_ns, end_ns FROM _ov_seg WHERE nm > 0 AND nc = 0;
DROP TABLE _ov_seg;
CREATE OR REPLACE TEMP TABLE _ov_exposed AS SELECT grp AS rank, ts_ns, end_ns, before_ns FROM interval_cumulative('_ov_x');
DROP TABLE _ov_x;

-- _ov_own: per step, its own compute and comm (whole trace), its exposed comm (its comm
-- pieces' part in _ov_exposed: both ends of a piece as signed points through one ASOF
-- join), and what of its compute and exposed comm lies in its window (own_in_ns).
CREATE OR REPLACE TEMP TABLE _ov_own AS
WITH p AS (
    SELECT p.rank, p.step, p.what, p.ts_ns, p.end_ns,
           greatest(p.ts_ns, w.start_ns) AS in_ts_ns, least(p.end_ns, w.end_ns) AS in_end_ns
    FROM _ov_sp p LEFT JOIN _ov_window w ON w.rank = p.rank AND w.step = p.step
), points AS (
    SELECT rank, step, false AS clipped, end_ns AS t_ns, 1 AS sign FROM p WHERE what = 2
    UNION ALL
    SELECT rank, step, false, ts_ns, -1 FROM p WHERE what = 2
    UNION ALL
    SELECT rank, step, true, in_end_ns, 1 FROM p WHERE what = 2 AND in_end_ns > in_ts_ns
    UNION ALL
    SELECT rank, step, true, in_ts_ns, -1 FROM p WHERE what = 2 AND in_end_ns > in_ts_ns
), exposed AS (
    SELECT pt.rank, pt.step,
           coalesce(sum(pt.sign * covered_ns(pt.t_ns, x.ts_ns, x.end_ns, x.before_ns)) FILTER (WHERE NOT pt.clipped), 0)
               ::BIGINT AS exposed_ns,
           coalesce(sum(pt.sign * covered_ns(pt.t_ns, x.ts_ns, x.end_ns, x.before_ns)) FILTER (WHERE pt.clipped), 0)
               ::BIGINT AS exposed_in_ns
    FROM points pt
    ASOF LEFT JOIN _ov_exposed x ON x.rank = pt.rank AND pt.t_ns >= x.ts_ns
    GROUP BY ALL
), own AS (
    SELECT rank, step,
           coalesce(sum(end_ns - ts_ns) FILTER (WHERE what = 1), 0)::BIGINT AS compute_ns,
           coalesce(sum(end_ns - ts_ns) FILTER (WHERE what = 2), 0)::BIGINT AS comm_ns,
           coalesce(sum(greatest(0, in_end_ns - in_ts_ns)) FILTER (WHERE what = 1), 0)::BIGINT AS compute_in_ns
    FROM p
    GROUP BY ALL
)
SELECT o.rank, o.step, o.compute_ns, o.comm_ns, coalesce(x.exposed_ns, 0) AS exposed_comm_ns,
       o.compute_in_ns + coalesce(x.exposed_in_ns, 0) AS own_in_ns
FROM own o LEFT JOIN exposed x USING (rank, step);

-- overlap_step: one row per rank and step. In the window: own = this step's compute
-- and exposed comm, work = any step's compute or comm.
CREATE OR REPLACE TEMP TABLE overlap_step AS
WITH s AS (
    SELECT w.rank, w.step, w.start_ns, w.end_ns,
           w.end_ns - w.start_ns                  AS step_ns,
           coalesce(o.compute_ns, 0)              AS compute_ns,
           coalesce(o.comm_ns, 0)                 AS comm_ns,
           coalesce(o.exposed_comm_ns, 0)         AS exposed_comm_ns,
           coalesce(o.own_in_ns, 0)               AS own_in_ns,
           coalesce(l.work_ns, 0)                 AS work_in_ns,
           coalesce(l.busy_ns, 0)                 AS busy_in_ns
    FROM _ov_window w
    LEFT JOIN _ov_len l ON l.rank = w.rank AND l.wi = w.wi
    LEFT JOIN _ov_own o ON o.rank = w.rank AND o.step = w.step
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
       coalesce(l.exposed_comm_ns, 0)                          AS exposed_comm_ns,
       coalesce(sp.span_ns, 0)                                 AS span_ns,
       coalesce(sp.span_ns, 0) - coalesce(l.busy_ns, 0)        AS idle_ns,
       -- busy = compute + exposed comm + memcpy/memset-only time
       coalesce(l.busy_ns, 0) - coalesce(l.compute_ns, 0) - coalesce(l.exposed_comm_ns, 0) AS other_ns,
       l.comm_hta_ns                                           AS comm_hta_ns,
       coalesce(l.hidden_hta_ns, 0)                            AS hidden_hta_ns
FROM ranks r
LEFT JOIN steps st USING (rank)
LEFT JOIN span sp USING (rank)
LEFT JOIN _ov_len l ON l.rank = r.rank AND l.wi IS NULL
WHERE r.run_id = getvariable('run_id');
