-- Reading checklist.sql's tables (checklist/context.py).

-- name: idle
SELECT * FROM check_idle ORDER BY rank, step;

-- name: flops
SELECT * FROM check_flops ORDER BY rank, step;

-- name: norms
SELECT * FROM check_norms ORDER BY rank, step;
