-- F from the trace (measure/rates.py): matmul FLOPs over the time they took.

-- name: matmul
-- Over the run's ranks (rank_facts.sql's rank_rates: kernels on GPU traces, the ops on CPU ones).
SELECT sum(matmul_flops) AS flops, sum(matmul_ns) AS ns, sum(matmul_ops) AS ops FROM rank_rates;
