-- params: run_id, launch_gap_ns, norm_ops
-- scope: rank
-- provides: check_idle, check_flops, check_norms
--
-- What the checklist reads beyond the buckets analysis (analyzer/checklist/context.py).
--
--   check_idle   per rank and step: idle_ns, the device's idle gaps between busy
--                intervals (interval_gaps of the rank's device work), attributed to
--                the step of the work that ends the gap; host_idle_ns, the part of it
--                ended by work that started within launch_gap_ns of its own launch:
--                the device waited for the host, not for other work.
--   check_flops  per rank and step: matmul FLOPs (uneven token counts between ranks).
--   check_norms  per rank and step: gradient-norm ops (norm_ops: their names).

CREATE OR REPLACE TEMP TABLE _ck_work AS
SELECT rank AS grp, step, ts_ns, ts_ns + dur_ns AS end_ns, launch_ts_ns
FROM events
WHERE run_id = getvariable('run_id') AND dur_ns > 0 AND kind IN ('compute', 'comm', 'memcpy', 'memset');

CREATE OR REPLACE TEMP TABLE _ck_bounds AS
SELECT grp, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns FROM _ck_work GROUP BY grp;

-- the work that ends each gap: the first to start at its end (by start, then end)
CREATE OR REPLACE TEMP TABLE check_idle AS
WITH gaps AS (
    SELECT grp, ts_ns, end_ns FROM interval_gaps('_ck_work', '_ck_bounds')
), next_work AS (
    SELECT g.grp, g.ts_ns, g.end_ns,
           arg_min(w.step, struct_pack(e := w.end_ns, s := w.step)) AS step,
           arg_min(w.launch_ts_ns, struct_pack(e := w.end_ns, s := w.step)) AS launch_ts_ns
    FROM gaps g JOIN _ck_work w ON w.grp = g.grp AND w.ts_ns = g.end_ns
    GROUP BY ALL
)
SELECT s.grp AS rank, s.step,
       coalesce(sum(n.end_ns - n.ts_ns), 0)::BIGINT AS idle_ns,
       coalesce(sum(n.end_ns - n.ts_ns) FILTER (WHERE n.launch_ts_ns IS NOT NULL
                                                AND n.end_ns - n.launch_ts_ns < getvariable('launch_gap_ns')),
                0)::BIGINT AS host_idle_ns
FROM (SELECT DISTINCT grp, step FROM _ck_work WHERE step IS NOT NULL) s
LEFT JOIN next_work n ON n.grp = s.grp AND n.step = s.step
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE check_flops AS
SELECT rank, step, sum(flops) AS flops
FROM events WHERE run_id = getvariable('run_id') AND flops > 0 AND step IS NOT NULL
GROUP BY rank, step;

CREATE OR REPLACE TEMP TABLE check_norms AS
SELECT rank, step, count(*) AS norms
FROM events WHERE run_id = getvariable('run_id') AND step IS NOT NULL
  AND list_contains(getvariable('norm_ops'), name)
GROUP BY rank, step;
