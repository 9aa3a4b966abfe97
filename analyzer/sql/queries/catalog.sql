-- The catalog's index of runs (store/catalog.py).

-- name: runs
-- Stored runs, newest first (all, or those named $name), with their headline.
SELECT r.run_id, r.name, r.created_at, r.world_size, r.backend, r.device_kind, r.parallelism, r.tags,
       (SELECT count(*) FROM ranks k WHERE k.run_id = r.run_id) AS ranks, r.pushed_by, r.pruned_at, r.headline
FROM runs r
WHERE ($name IS NULL OR r.name = $name) AND ($run_id IS NULL OR r.run_id = $run_id)
ORDER BY r.run_id DESC;

-- name: run_by_id
SELECT run_id FROM runs WHERE run_id = $run_id;

-- name: newest_of_name
SELECT max(run_id) FROM runs WHERE name = $name;

-- name: count
SELECT count(*) FROM runs;

-- name: sample_runs
-- The names of the stored sample runs (named sample/<bundle>, tagged sample=true) and how
-- many runs are not samples (store/catalog.py: missing_samples).
SELECT coalesce(list(name) FILTER (WHERE is_sample), []) AS samples, count(*) FILTER (WHERE NOT is_sample) AS others
FROM (SELECT name, coalesce(name LIKE 'sample/%' AND json_extract_string(tags, '$.sample') = 'true', false)
                   AS is_sample
      FROM runs);

-- name: run_of_key
-- The run a push with this Idempotency-Key stored, for the same token's name (NULL: stored locally).
SELECT run_id FROM runs WHERE idempotency_key = $key AND pushed_by IS NOT DISTINCT FROM $pushed_by;

-- What ingest stores beside a run's rows (store/results.py).

-- name: set_headline
UPDATE runs SET headline = $headline WHERE run_id = $run_id;

-- name: delete_metrics
DELETE FROM metrics WHERE run_id = $run_id;

-- name: delete_findings
DELETE FROM findings WHERE run_id = $run_id;

-- name: insert_metric
INSERT INTO metrics (run_id, name, value) VALUES ($run_id, $name, $value);

-- name: insert_finding
INSERT INTO findings (run_id, id, status, severity, impact_ms, title, evidence, fix)
VALUES ($run_id, $id, $status, $severity, $impact_ms, $title, $evidence, $fix);

-- The figures per rank, step and bucket or unit (store/results.py); inserted from the
-- registered Arrow table _figures, matched by column name.

-- name: delete_rank_metrics
DELETE FROM rank_metrics WHERE run_id = $run_id;

-- name: insert_rank_metrics
INSERT INTO rank_metrics BY NAME SELECT $run_id AS run_id, * FROM _figures;

-- name: delete_step_metrics
DELETE FROM step_metrics WHERE run_id = $run_id;

-- name: insert_step_metrics
INSERT INTO step_metrics BY NAME SELECT $run_id AS run_id, * FROM _figures;

-- name: delete_group_metrics
DELETE FROM group_metrics WHERE run_id = $run_id;

-- name: insert_group_metrics
INSERT INTO group_metrics BY NAME SELECT $run_id AS run_id, * FROM _figures;

-- What a run keeps after a prune (store/catalog.py, analyzer/gate.py).

-- name: rank_metrics
SELECT rank, device_kind, steps, step_ms, compute_ms, comm_ms, exposed_comm_ms, overlap_pct, idle_ms, other_ms,
       span_ms, hta_overlap_pct, clock_offset_ms, comm_wait_ms, comm_transfer_ms, exposed_wait_ms
FROM rank_metrics WHERE run_id = $run_id ORDER BY rank;

-- name: step_metrics
SELECT rank, step, step_ms, compute_ms, comm_ms, exposed_comm_ms, overlap_pct, idle_ms, other_ms, spill_in_ms,
       spill_out_ms
FROM step_metrics WHERE run_id = $run_id ORDER BY rank, step;

-- name: group_metrics
SELECT kind, id, phase, count, bytes, comm_ms, exposed_ms, busbw_gbps, predicted_comm_ms, predicted_exposed_ms,
       inferred
FROM group_metrics WHERE run_id = $run_id ORDER BY exposed_ms DESC NULLS LAST, kind, id, phase;

-- name: findings
-- The checklist as stored at ingest: failed first, then by impact.
SELECT id, title, status, severity, impact_ms, evidence, fix
FROM findings WHERE run_id = $run_id
ORDER BY CASE status WHEN 'fail' THEN 0 WHEN 'warn' THEN 1 WHEN 'pass' THEN 2 ELSE 3 END,
         impact_ms DESC NULLS LAST, id;

-- name: pruned_at
SELECT pruned_at FROM runs WHERE run_id = $run_id;

-- name: previous_of
-- The run of the same name stored just before $run_id (the gate's default baseline).
SELECT max(p.run_id) FROM runs p JOIN runs r ON p.name = r.name AND p.run_id < r.run_id
WHERE r.run_id = $run_id;

-- name: data_dirs
-- The run store folders that committed runs name (store/runstore.py sweeps the rest).
SELECT data_dir, pruned_at IS NOT NULL AS pruned FROM runs WHERE data_dir IS NOT NULL;

-- name: data_dir
SELECT data_dir FROM runs WHERE run_id = $run_id;
