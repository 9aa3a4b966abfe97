-- params: run_id
-- scope: rank
-- requires: overlap
-- provides: comm_instance, comm_compute
--
-- What comparisons between ranks need of each rank (clocks.sql, waits.sql): its comm
-- transfers, and the part of its compute that runs during them. Computed rank by rank
-- (by the worker that decoded the rank, analyzer/engine), so the comparison reads a few
-- rows per collective instead of every event of every rank.
--
--   comm_instance  one row per comm transfer (GPU collective kernel, gloo span):
--                  rank, event_id, step, ts_ns, end_ns, dur_ns (the rank's own clock),
--                  cls (the collective and its group), ikey (its collective instance:
--                  the n-th transfer of one step, collective and process group on the
--                  rank; every rank of a group runs the same collectives in the same
--                  order). The group comes from the kernel's Process Group Ranks (or
--                  Name); gloo spans name none, so there the transfer's size stands in
--                  for the group (an HSDP reduce-scatter and replica all-reduce differ).
--   comm_compute   the rank's compute union (overlap.sql) inside its comm transfers:
--                  rank, ts_ns, end_ns, disjoint pieces. Waiting for peers happens inside a
--                  transfer's interval, so this is all the compute that can cover it.

CREATE OR REPLACE TEMP TABLE comm_instance AS
WITH t AS (
    SELECT e.rank, e.event_id, e.step, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns, e.dur_ns,
           coalesce(c.kind, e.name) AS what,
           coalesce(c.pg_ranks, c.pg_name, 'elements ' || coalesce(c.elements, -1)) AS pg
    FROM events e
    LEFT JOIN collectives c USING (run_id, rank, event_id)
    WHERE e.run_id = getvariable('run_id') AND e.kind = 'comm' AND e.dur_ns > 0
)
SELECT rank, event_id, step, ts_ns, end_ns, dur_ns, hash(what, pg) AS cls,
       hash(coalesce(step, -1), what, pg,
            row_number() OVER (PARTITION BY rank, step, what, pg ORDER BY ts_ns, event_id)) AS ikey
FROM t;

-- comm_compute: compute_union inside the rank's transfers. Its pieces are split wherever a
-- transfer starts or ends (overlap.sql's sweep), so a piece is inside one or outside all.
CREATE OR REPLACE TEMP TABLE comm_compute AS
SELECT rank, ts_ns, end_ns FROM compute_union WHERE in_comm;
