-- Reading collectives.sql's table (measure/collectives.py).

-- name: stats
SELECT * FROM collective_stats ORDER BY rank, ts_ns, event_id;
