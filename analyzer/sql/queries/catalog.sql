-- The catalog's index of runs (store/catalog.py).

-- name: runs
-- Stored runs, newest first (all, or those named $name), with their headline.
SELECT r.run_id, r.name, r.created_at, r.world_size, r.backend, r.device_kind, r.parallelism, r.tags,
       (SELECT count(*) FROM ranks k WHERE k.run_id = r.run_id) AS ranks, r.headline
FROM runs r
WHERE $name IS NULL OR r.name = $name
ORDER BY r.run_id DESC;

-- name: run_by_id
SELECT run_id FROM runs WHERE run_id = $run_id;

-- name: newest_of_name
SELECT max(run_id) FROM runs WHERE name = $name;

-- name: count
SELECT count(*) FROM runs;

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
