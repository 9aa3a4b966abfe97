-- Storing runs (store/database.py).

-- name: next_run_id
SELECT coalesce(max(run_id), 0) + 1 FROM runs;

-- name: database_path
-- The file behind the connection (NULL or '' for an in-memory store).
SELECT path FROM duckdb_databases() WHERE database_name = current_database();

-- A stored run's raw rows for one step's timeline (measure/timeline.py): the shown ranks'
-- Parquet files ($files, store/runstore.py) read in place, only what the window touches.

-- name: window_of_step
-- The span of step $step's windows on $ranks.
SELECT min(window_start_ns), max(window_end_ns) FROM steps
WHERE run_id = $run_id AND step = $step AND list_contains($ranks, rank);

-- name: stored_events
CREATE OR REPLACE TEMP TABLE events AS
SELECT $run_id::INTEGER AS run_id, * FROM read_parquet($files)
WHERE ts_ns < $to_ns AND ts_ns + dur_ns > $from_ns AND dur_ns > 0;

-- name: stored_tracks
CREATE OR REPLACE TEMP TABLE tracks AS
SELECT $run_id::INTEGER AS run_id, * FROM read_parquet($files);

-- name: stored_clock
-- Each rank's clock offset as ingest estimated it (clocks.sql's rank_clock).
CREATE OR REPLACE TEMP TABLE rank_clock AS
SELECT rank, clock_offset_ns FROM ranks WHERE run_id = $run_id;

-- name: has_macros
SELECT count(*) > 0 FROM duckdb_functions() WHERE function_name = 'interval_pieces';

-- What a worker of the map over ranks ships of each rank (engine/rank.py).

-- name: rank_steps
SELECT * EXCLUDE (run_id) FROM steps WHERE rank = $rank ORDER BY step;

-- name: rank_rows
SELECT * FROM query_table($table) WHERE rank = $rank;
