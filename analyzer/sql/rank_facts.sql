-- params: run_id
-- scope: rank
-- provides: rank_rates, rank_memory
--
-- Per-rank sums that the model reads (measure/rates.py, predict/buckets.py); the run's
-- figures are sums or maxima of these over the ranks.
--
--   rank_rates   one row per rank: matmul_flops, matmul_ns, matmul_ops: the FLOPs of
--                the rank's matmul ops over the time they took. GPU traces: the op's FLOPs
--                over the kernels it launched (linked by External id); CPU-only traces:
--                the ops themselves are the compute.
--   rank_memory  one row per rank with allocator events: peak_allocated_bytes,
--                peak_reserved_bytes (profile_memory=True).

CREATE OR REPLACE TEMP TABLE rank_rates AS
WITH kernels AS (
    SELECT rank, external_id, sum(dur_ns) AS dur_ns
    FROM events
    WHERE run_id = getvariable('run_id') AND kind = 'compute' AND external_id IS NOT NULL
    GROUP BY ALL
), gpu AS (
    SELECT o.rank, sum(o.flops) AS flops, sum(k.dur_ns) AS ns, count(*) AS ops
    FROM events o JOIN kernels k ON k.rank = o.rank AND k.external_id = o.external_id
    WHERE o.run_id = getvariable('run_id') AND o.flops > 0 AND o.cat = 'cpu_op'
    GROUP BY o.rank
), cpu AS (
    SELECT rank, sum(flops) AS flops, sum(dur_ns) AS ns, count(*) AS ops
    FROM events
    WHERE run_id = getvariable('run_id') AND flops > 0 AND kind = 'compute'
    GROUP BY rank
)
SELECT r.rank,
       CASE WHEN r.device_kind = 'gpu' THEN g.flops ELSE c.flops END AS matmul_flops,
       CASE WHEN r.device_kind = 'gpu' THEN g.ns ELSE c.ns END::BIGINT AS matmul_ns,
       coalesce(CASE WHEN r.device_kind = 'gpu' THEN g.ops ELSE c.ops END, 0)::BIGINT AS matmul_ops
FROM ranks r
LEFT JOIN gpu g USING (rank)
LEFT JOIN cpu c USING (rank)
WHERE r.run_id = getvariable('run_id');

CREATE OR REPLACE TEMP TABLE rank_memory AS
SELECT rank, max(total_allocated_bytes) AS peak_allocated_bytes, max(total_reserved_bytes) AS peak_reserved_bytes
FROM memory WHERE run_id = getvariable('run_id') GROUP BY rank;
