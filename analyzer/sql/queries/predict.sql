-- What the model's replays read from the measured run (predict/buckets.py).

-- name: memory_peaks
-- Measured peak allocated and reserved bytes per rank (profile_memory events: rank_facts.sql).
SELECT rank, peak_allocated_bytes, peak_reserved_bytes FROM rank_memory ORDER BY rank;
