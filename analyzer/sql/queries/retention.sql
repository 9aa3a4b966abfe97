-- What bounds the catalog's growth (store/retention.py): prune marks runs whose raw files
-- go, delete removes a run's rows. $run_ids is a list of run ids.

-- name: candidates
-- Complete runs of $name (NULL: all) beyond the newest $keep_last of their name (NULL: any)
-- and created before $before (NULL: any), oldest first.
SELECT run_id FROM (
    SELECT run_id, name, created_at, pruned_at,
           row_number() OVER (PARTITION BY name ORDER BY run_id DESC) AS newest
    FROM runs)
WHERE pruned_at IS NULL
  AND ($name IS NULL OR name = $name)
  AND ($keep_last IS NULL OR newest > $keep_last)
  AND ($before IS NULL OR created_at < $before)
ORDER BY run_id;

-- name: mark_pruned
UPDATE runs SET pruned_at = $now WHERE list_contains($run_ids, run_id);

-- name: drop_steps
DELETE FROM steps WHERE list_contains($run_ids, run_id);

-- name: drop_ranks
DELETE FROM ranks WHERE list_contains($run_ids, run_id);

-- name: drop_metrics
DELETE FROM metrics WHERE list_contains($run_ids, run_id);

-- name: drop_findings
DELETE FROM findings WHERE list_contains($run_ids, run_id);

-- name: drop_rank_metrics
DELETE FROM rank_metrics WHERE list_contains($run_ids, run_id);

-- name: drop_step_metrics
DELETE FROM step_metrics WHERE list_contains($run_ids, run_id);

-- name: drop_group_metrics
DELETE FROM group_metrics WHERE list_contains($run_ids, run_id);

-- name: drop_runs
DELETE FROM runs WHERE list_contains($run_ids, run_id);
