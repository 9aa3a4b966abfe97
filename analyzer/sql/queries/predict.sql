-- What the model's replays read from the measured run (predict/exposure.py, predict/buckets.py).

-- name: ready_gpu
-- When each transfer's gradients were ready on a GPU: the end of the last compute
-- launched before the transfer's own launch (collective_stats: collectives.sql).
WITH done AS (
    SELECT rank, launch_ts_ns,
           max(ts_ns + dur_ns) OVER (PARTITION BY rank ORDER BY launch_ts_ns ROWS UNBOUNDED PRECEDING) AS done_ns
    FROM events WHERE run_id = $run_id AND kind = 'compute' AND launch_ts_ns IS NOT NULL
)
SELECT s.rank, s.event_id, d.done_ns
FROM collective_stats s
ASOF LEFT JOIN done d ON d.rank = s.rank AND s.cpu_launch_ts_ns >= d.launch_ts_ns;

-- name: window_compute_gpu
-- Compute time launched in [from_ns, to_ns) of each window ($windows: a list of
-- {rank, key, from_ns, to_ns}).
WITH w AS (SELECT unnest($windows, recursive := true))
SELECT w.rank, w.key, coalesce(sum(e.dur_ns), 0) AS ns
FROM w
LEFT JOIN events e ON e.run_id = $run_id AND e.rank = w.rank AND e.kind = 'compute'
                  AND e.launch_ts_ns >= w.from_ns AND e.launch_ts_ns < w.to_ns
GROUP BY ALL;

-- name: window_compute_cpu
-- CPU-only traces: the rank's compute union (overlap.sql's compute_union) inside each window.
WITH w AS (SELECT unnest($windows, recursive := true))
SELECT w.rank, w.key, coalesce(sum(overlap_ns(w.from_ns, w.to_ns, u.ts_ns, u.end_ns)), 0) AS ns
FROM w
LEFT JOIN compute_union u ON u.rank = w.rank AND u.ts_ns < w.to_ns AND w.from_ns < u.end_ns
GROUP BY ALL;

-- name: memory_peaks
-- Measured peak allocated and reserved bytes per rank (profile_memory events).
SELECT rank, max(total_allocated_bytes) AS peak_allocated_bytes, max(total_reserved_bytes) AS peak_reserved_bytes
FROM memory WHERE run_id = $run_id GROUP BY rank ORDER BY rank;
