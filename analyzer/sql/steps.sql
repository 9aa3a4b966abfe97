-- params: run_id
-- scope: rank
-- provides: steps
--
-- (steps is a stored table: this fills the run's rows, once, at load.)
-- Fill the steps table for one run (getvariable('run_id')), from its events.
-- A step's device work is what it launched (events.step). Its window on the
-- device timeline runs from its first start on the rank's main stream (the
-- stream with the most compute time) to the next step's, so that step times add
-- up to the profiled wall time, the idle time between steps belongs to the step
-- that left the device idle, and work a running-ahead CPU queues early on a side
-- stream (a prefetching H2D copy, input preprocessing) does not cut the previous
-- step short. A step with no work on the main stream starts at its first device
-- start. On CPU-only traces the CPU is the device: the window is the ProfilerStep
-- range, stretched over any comm span of the last step that outlives it.
INSERT INTO steps
WITH cpu AS (
    SELECT e.rank, e.step, min(e.ts_ns) AS cpu_ts_ns, max(e.ts_ns + e.dur_ns) - min(e.ts_ns) AS cpu_dur_ns,
           any_value(r.device_kind) AS device_kind
    FROM events e JOIN ranks r USING (run_id, rank)
    WHERE e.run_id = getvariable('run_id') AND e.kind = 'step' AND e.step IS NOT NULL
    GROUP BY ALL
), main AS (
    -- tracks, not the stream argument: every load keeps them (one per GPU stream)
    SELECT rank, arg_max(track_id, struct_pack(c := compute_ns, t := -track_id)) AS track_id
    FROM (SELECT rank, track_id, sum(dur_ns) AS compute_ns
          FROM events
          WHERE run_id = getvariable('run_id') AND kind = 'compute' AND dur_ns > 0
          GROUP BY ALL)
    GROUP BY rank
), device AS (
    SELECT e.rank, e.step, min(e.ts_ns) AS first_ns, max(e.ts_ns + e.dur_ns) AS last_ns,
           min(e.ts_ns) FILTER (WHERE e.track_id = m.track_id) AS main_first_ns
    FROM events e LEFT JOIN main m USING (rank)
    WHERE e.run_id = getvariable('run_id') AND e.step IS NOT NULL AND e.dur_ns > 0
      AND e.kind IN ('compute', 'comm', 'memcpy', 'memset')
    GROUP BY ALL
), starts AS (
    SELECT c.rank, c.step, c.cpu_ts_ns, c.cpu_dur_ns, d.first_ns, d.last_ns,
           CASE WHEN c.device_kind = 'cpu' THEN c.cpu_ts_ns ELSE coalesce(d.main_first_ns, d.first_ns) END
               AS start_ns,
           CASE WHEN c.device_kind = 'cpu' THEN greatest(c.cpu_ts_ns + c.cpu_dur_ns, d.last_ns)
                ELSE d.last_ns END AS own_end_ns
    FROM cpu c LEFT JOIN device d USING (rank, step)
)
SELECT getvariable('run_id'), rank, step, cpu_ts_ns, cpu_dur_ns, first_ns, last_ns, start_ns,
       CASE WHEN start_ns IS NULL THEN NULL
            ELSE coalesce(lead(start_ns) OVER (PARTITION BY rank ORDER BY start_ns NULLS LAST), own_end_ns) END
FROM starts;
