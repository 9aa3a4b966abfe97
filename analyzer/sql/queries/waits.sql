-- Waiting for peers and transfer (measure/waits.py; the tables come from clocks.sql and waits.sql).

-- name: ranks
SELECT * FROM wait_rank ORDER BY rank;

-- name: steps
SELECT * FROM wait_step ORDER BY rank, step;

-- name: clock
SELECT rank, clock_offset_ns, matched, via, basis FROM rank_clock ORDER BY rank;

-- name: arrivals
-- Per step and rank: the instances shared with another rank, and how many of them it arrived last at.
SELECT rank, step, count(*) AS peered, count(*) FILTER (WHERE last_rank = rank) AS last_arrivals
FROM comm_wait WHERE peers > 1 AND step IS NOT NULL
GROUP BY ALL ORDER BY rank, step;

-- name: transfer_waits
-- Per transfer of ranks first_rank to last_rank (a block of the collectives' rows): its waiting
-- for peers, by key (rank << $event_id_bits | event_id), in key order.
SELECT (rank::BIGINT << $event_id_bits) | event_id AS key, wait_ns FROM comm_wait
WHERE rank BETWEEN $first_rank AND $last_rank ORDER BY key;

-- name: lanes
-- Per DDP bucket or FSDP unit transfer, by key (rank << $event_id_bits | event_id), in key order: its
-- piece of the comm lane, the compute inside it, its wait and the rank it waited for (lanes.sql; -1:
-- no peer loaded).
SELECT (rank::BIGINT << $event_id_bits) | event_id AS key, lane_ts_ns, lane_ns, hidden_ns, wait_ns,
       coalesce(last_rank, -1)::BIGINT AS last_rank, lead_ns
FROM comm_lane ORDER BY key;
