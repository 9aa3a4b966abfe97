-- Reading checklist.sql's tables (checklist/context.py).

-- name: idle
SELECT * FROM check_idle ORDER BY rank, step;

-- name: flops
SELECT * FROM check_flops ORDER BY rank, step;

-- name: norms
SELECT * FROM check_norms ORDER BY rank, step;

-- name: fsdp_flavour
-- Which FSDP wrote the ranges: FSDP1 (FullyShardedDataParallel.*) or FSDP2 (FSDP::*).
SELECT coalesce(bool_or(name LIKE 'FullyShardedDataParallel.%'), false) AS fsdp1,
       coalesce(bool_or(name LIKE 'FSDP::%'), false) AS fsdp2
FROM annotation_roles WHERE run_id = $run_id;
