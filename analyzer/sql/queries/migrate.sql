-- Upgrading a catalog written by an older overlapscope (store/migrate.py).

-- name: tables
SELECT table_name FROM duckdb_tables() WHERE NOT temporary;

-- name: columns
SELECT column_name FROM duckdb_columns() WHERE table_name = $table AND NOT internal;

-- name: version
SELECT value FROM catalog_info WHERE key = 'schema_version';

-- name: set_version
INSERT OR REPLACE INTO catalog_info VALUES ('schema_version', $version);

-- Version 1 -> 2: what classification derives once, at load.

-- name: add_runs_parallelism
ALTER TABLE runs ADD COLUMN parallelism VARCHAR;

-- name: fill_runs_parallelism
UPDATE runs SET parallelism = json_extract_string(manifest, '$.parallelism');

-- name: add_runs_headline
ALTER TABLE runs ADD COLUMN headline JSON;

-- name: add_ranks_dropped_events
ALTER TABLE ranks ADD COLUMN dropped_events JSON;

-- name: add_ranks_name_rank
ALTER TABLE ranks ADD COLUMN name_rank INTEGER;

-- Version 4 -> 5: text read as U+FFFD, counted.

-- name: add_ranks_text_replaced
ALTER TABLE ranks ADD COLUMN text_replaced BIGINT;

-- name: add_collectives_kind
ALTER TABLE collectives ADD COLUMN kind VARCHAR;

-- name: add_collectives_family
ALTER TABLE collectives ADD COLUMN family VARCHAR;

-- name: collective_names
SELECT DISTINCT collective FROM collectives WHERE collective IS NOT NULL;

-- name: set_collective_kind
UPDATE collectives SET kind = $kind, family = $family WHERE collective = $collective;

-- name: range_names
SELECT DISTINCT run_id, rank, name FROM events WHERE kind IN ('annotation', 'cpu_op', 'comm_launch');

-- name: insert_role
INSERT INTO annotation_roles VALUES ($run_id, $rank, $name, $role, $arg);

-- Version 2 -> 3: who pushed a run, when it was pruned.

-- name: add_runs_pushed_by
ALTER TABLE runs ADD COLUMN pushed_by VARCHAR;

-- name: add_runs_pruned_at
ALTER TABLE runs ADD COLUMN pruned_at TIMESTAMP;

-- Version 3 -> 4: each run's raw tables move to the run store (store/runstore.py).

-- name: add_runs_data_dir
ALTER TABLE runs ADD COLUMN data_dir VARCHAR;

-- name: runs_with_events
SELECT DISTINCT run_id FROM events ORDER BY run_id;

-- name: ranks_of
SELECT rank, file, rank_source, world_size, backend, nccl_version, device_kind, device_names,
       device_memory_bytes, hostname, base_time_ns, pg_config, name_rank, events, dropped_events
FROM ranks WHERE run_id = $run_id ORDER BY rank;

-- name: rank_rows
-- One rank's rows of the catalog's table $table, without the run id.
SELECT * EXCLUDE (run_id) FROM query_table($table) WHERE run_id = $run_id AND rank = $rank;

-- name: result_rows
-- One rank's rows of a rank script's table $table (it holds one run's rows).
SELECT * FROM query_table($table) WHERE rank = $rank;

-- name: set_data_dir
UPDATE runs SET data_dir = $data_dir WHERE run_id = $run_id;

-- name: set_clock_offset
UPDATE ranks SET clock_offset_ns = $offset WHERE run_id = $run_id AND rank = $rank;

-- name: drop_tracks
DROP TABLE tracks;

-- name: drop_events
DROP TABLE events;

-- name: drop_collectives
DROP TABLE collectives;

-- name: drop_flows
DROP TABLE flows;

-- name: drop_memory
DROP TABLE memory;

-- name: drop_annotation_roles
DROP TABLE annotation_roles;

-- Version 4 -> 5: the Idempotency-Key of a pushed run.

-- name: add_runs_idempotency_key
ALTER TABLE runs ADD COLUMN idempotency_key VARCHAR;
