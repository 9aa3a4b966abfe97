-- Reading the tables of overlap.sql (measure/overlap.py).

-- name: ranks
SELECT * FROM overlap_rank ORDER BY rank;

-- name: steps
SELECT * FROM overlap_step ORDER BY rank, step;
