-- F from the trace (measure/rates.py): matmul FLOPs over the time they took.

-- name: matmul_gpu
-- GPU traces: the FLOPs of matmul ops over the time of the kernels they launched
-- (linked by External id).
SELECT sum(o.flops) AS flops, sum(k.dur_ns) AS ns, count(*) AS ops
FROM events o
JOIN (SELECT rank, external_id, sum(dur_ns) AS dur_ns FROM events
      WHERE run_id = $run_id AND kind = 'compute' AND external_id IS NOT NULL GROUP BY ALL) k
  ON k.rank = o.rank AND k.external_id = o.external_id
WHERE o.run_id = $run_id AND o.flops > 0 AND o.cat = 'cpu_op';

-- name: matmul_cpu
-- CPU-only traces: the ops themselves are the compute.
SELECT sum(flops) AS flops, sum(dur_ns) AS ns, count(*) AS ops
FROM events WHERE run_id = $run_id AND flops > 0 AND kind = 'compute';
