-- What a stored run is (store/runinfo.py).

-- name: run
-- The run's row: $run_id.
SELECT run_id, name, source, world_size, backend, device_kind, manifest, parallelism, tags, created_at, pruned_at,
       data_dir
FROM runs WHERE run_id = $run_id;

-- name: ranks
-- Its loaded ranks, in order.
SELECT rank, file, device_names, hostname, device_memory_bytes, world_size, backend, dropped_events,
       name_rank, text_replaced
FROM ranks WHERE run_id = $run_id ORDER BY rank;
