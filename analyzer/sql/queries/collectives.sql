-- Reading collectives.sql's table (measure/collectives.py).

-- name: stats
SELECT *, NULL::BIGINT AS wait_ns FROM collective_stats ORDER BY rank, ts_ns, event_id;

-- With each transfer's wait for its peers (waits.sql's comm_wait; null where no peer ran it).
-- name: stats_waited
SELECT s.*, CASE WHEN w.peers > 1 THEN w.wait_ns END AS wait_ns
FROM collective_stats s LEFT JOIN comm_wait w ON w.rank = s.rank AND w.event_id = s.event_id
ORDER BY s.rank, s.ts_ns, s.event_id;
