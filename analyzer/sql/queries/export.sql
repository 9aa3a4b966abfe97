-- The Chrome-trace JSON of one rank's events (export/perfetto.py): one JSON object per
-- event, built by DuckDB (no Python step per event). Times are written as exact decimal
-- microseconds (ns / 1000 with three decimals: a double would round epoch times), on the
-- run's common clock (each rank's clock offset added) from $zero_ns. pid is the rank;
-- tid the rank's track (its thread_name metadata says which Kineto pid/tid it was).

-- name: event_lines
SELECT '{"ph":"' || CASE WHEN dur_ns > 0 OR kind = 'step' THEN 'X' ELSE 'i' END || '"'
       || ',"pid":' || $pid || ',"tid":' || coalesce(track_id, 0)
       || ',"ts":' || us_text(ts_ns + $offset_ns - $zero_ns)
       || CASE WHEN dur_ns > 0 OR kind = 'step' THEN ',"dur":' || us_text(dur_ns) ELSE ',"s":"t"' END
       || ',"name":' || to_json(coalesce(name, ''))
       || ',"cat":' || to_json(coalesce(cat, ''))
       || CASE WHEN args IS NOT NULL THEN ',"args":' || args::VARCHAR ELSE '' END
       || '}' AS line
FROM events
WHERE ts_ns IS NOT NULL
ORDER BY ts_ns, event_id;

-- name: flow_lines
-- The trace's flow events (flows: a CPU launch to its kernel, ac2g; forward to backward, fwdbwd)
-- as Kineto writes them: s at the start, t, and f bound to its enclosing slice ("bp":"e").
SELECT '{"ph":"' || ph || '","id":' || flow_id || ',"pid":' || $pid || ',"tid":' || coalesce(track_id, 0)
       || ',"ts":' || us_text(ts_ns + $offset_ns - $zero_ns)
       || ',"cat":' || to_json(coalesce(cat, '')) || ',"name":' || to_json(coalesce(cat, ''))
       || CASE WHEN ph = 'f' THEN ',"bp":"e"' ELSE '' END || '}' AS line
FROM flows
WHERE ts_ns IS NOT NULL AND flow_id IS NOT NULL
ORDER BY ts_ns, flow_id, ph;

-- name: track_lines
SELECT '{"ph":"M","pid":' || $pid || ',"tid":' || track_id || ',"name":"thread_name","args":{"name":'
       || to_json(coalesce(name, kind, 'track') || ' (pid ' || coalesce(pid, '?') || ', tid '
                  || coalesce(tid, '?') || ')') || '}}' AS line
FROM tracks
ORDER BY track_id;

-- name: exposed
SELECT ts_ns, end_ns FROM export_exposed ORDER BY ts_ns;

-- name: windows
-- Each rank's step windows (steps.sql), on its own clock.
SELECT rank, step, window_start_ns, window_end_ns FROM steps
WHERE run_id = $run_id AND window_start_ns IS NOT NULL AND window_end_ns > window_start_ns
ORDER BY rank, step;

-- name: stored_offsets
SELECT rank, coalesce(clock_offset_ns, 0) FROM ranks WHERE run_id = $run_id;

-- name: computed_offsets
-- Each rank's clock offset as clocks.sql estimated it (a run read from its traces).
SELECT rank, coalesce(clock_offset_ns, 0) FROM rank_clock;

-- One rank's raw tables in the export's private store: decoded again (_ev, _tr: Arrow)
-- or read from the run store's Parquet ($files).

-- name: load_events
CREATE TABLE events AS SELECT $run_id::INTEGER AS run_id, $rank::INTEGER AS rank, * FROM _ev;

-- name: load_tracks
CREATE TABLE tracks AS SELECT $run_id::INTEGER AS run_id, $rank::INTEGER AS rank, * FROM _tr;

-- name: load_flows
CREATE TABLE flows AS SELECT $run_id::INTEGER AS run_id, $rank::INTEGER AS rank, * FROM _fl;

-- name: stored_events
CREATE TABLE events AS SELECT $run_id::INTEGER AS run_id, * FROM read_parquet($files);

-- name: stored_tracks
CREATE TABLE tracks AS SELECT $run_id::INTEGER AS run_id, * FROM read_parquet($files);

-- name: stored_flows
CREATE TABLE flows AS SELECT $run_id::INTEGER AS run_id, * FROM read_parquet($files);

-- name: no_flows
-- A run stored before its flows were kept: none to export.
CREATE TABLE flows (run_id INTEGER, rank INTEGER, flow_id BIGINT, cat VARCHAR, ph VARCHAR, ts_ns BIGINT,
                    track_id BIGINT);
