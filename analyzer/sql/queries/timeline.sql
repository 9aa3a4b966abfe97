-- The timeline of one step (measure/timeline.py; the tables come from timeline.sql).

-- name: steps
-- Steps with a device window: how many ranks have it, the longest window.
SELECT step, count(*) AS ranks, max(window_end_ns - window_start_ns) AS window_ns
FROM steps WHERE run_id = $run_id AND window_start_ns IS NOT NULL
GROUP BY step ORDER BY step;

-- name: ranks
SELECT rank FROM ranks WHERE run_id = $run_id ORDER BY rank;

-- name: raw_marks
SELECT raw_marks FROM timeline_counts;

-- name: lanes
SELECT * FROM timeline_lanes ORDER BY rank, NOT has_compute, track_id;

-- name: marks
SELECT * FROM timeline_marks;

-- name: summary
SELECT * FROM timeline_summary;
