-- Reading collectives.sql's table (measure/collectives.py).

-- name: per_rank
-- Collective transfers per rank (the rows of stats and stats_waited: their joins find one row or none).
SELECT rank, count(*) AS n FROM collective_stats GROUP BY rank ORDER BY rank;

-- The transfers of ranks first_rank to last_rank (a few ranks at a time: the sort then holds
-- theirs, not the run's).
-- name: stats
SELECT *, NULL::BIGINT AS wait_ns, NULL::BIGINT AS exposed_wait_ns FROM collective_stats
WHERE rank BETWEEN $first_rank AND $last_rank ORDER BY rank, ts_ns, event_id;

-- With each transfer's wait for its peers (waits.sql's comm_wait; null where no peer ran it)
-- and the part of its exposed time spent in that wait. The wait comes first (nothing moves
-- before the last peer arrives); its exposed time is split between the wait and the transfer
-- as their lengths that no compute covers (comm_wait_hidden). Exact while the transfers it
-- shares time with do not change during its span (collectives.sql shares exposed time
-- equally between concurrent transfers), and never more than its exposed time.
-- name: stats_waited
SELECT s.*, CASE WHEN w.peers > 1 THEN w.wait_ns END AS wait_ns,
       CASE WHEN w.peers > 1 THEN
           CASE WHEN h.rank IS NULL OR s.comm_ns - h.hidden_ns <= 0 THEN 0
                ELSE round(s.exposed_ns * greatest(0, w.wait_ns - h.wait_hidden_ns) / (s.comm_ns - h.hidden_ns))
           END
       END::BIGINT AS exposed_wait_ns
FROM collective_stats s LEFT JOIN comm_wait w ON w.rank = s.rank AND w.event_id = s.event_id
LEFT JOIN comm_wait_hidden h ON h.rank = s.rank AND h.event_id = s.event_id
WHERE s.rank BETWEEN $first_rank AND $last_rank
ORDER BY s.rank, s.ts_ns, s.event_id;

-- name: forwards
-- Per rank and step, the model's forward ranges (DistributedDataParallel.forward, FSDP::root_pre_forward): one per micro-batch.
SELECT rank, step, forwards FROM step_forwards ORDER BY ALL;

-- name: reducer
-- Per rank and step, the time of DDP's reducer ops (ns): compute spent because the passes reduce.
SELECT rank, step, reducer_ns FROM step_reducer ORDER BY ALL;

-- name: grads
-- Per rank and step of a DDP rank, when each parameter's gradient was ready (AccumulateGrad starts, ns).
SELECT rank, step, list(ts_ns ORDER BY ts_ns) AS ts_ns FROM step_grads GROUP BY ALL ORDER BY ALL;
