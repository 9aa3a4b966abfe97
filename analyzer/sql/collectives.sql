-- params: run_id
-- scope: rank
-- requires: overlap
-- provides: collective_stats, step_forwards, step_reducer, step_grads
--
-- Per-collective attribution: which bucket or unit each transfer belongs to, in
-- which phase, its bytes, comm time, exposed time and bus bandwidth inputs.
-- Reads the stored classification (collectives.kind and family, annotation_roles,
-- runs.parallelism: ingest/classify.py holds every name pattern) and overlap.sql's
-- compute_union.
--
-- collective_stats: one row per transfer (GPU collective kernel or gloo span):
--   rank, step, event_id, kind ('ddp_bucket', 'fsdp_unit', 'other'), id (bucket
--   index, unit FQN, or the collective for 'other'), phase, inferred (id read from
--   the order of the collectives, not from an annotation), microbatch (the tracer's
--   mark, else where a step runs several DDP forwards the one it follows), collective
--   (canonical kind), bytes (full buffer), shard_only (bytes are an all-gather's
--   shard: multiply by the group size), dtype, group_size, pg_name, ts_ns, end_ns,
--   comm_ns, cpu_launch_ts_ns, offset_ns (start within its step's window),
--   exposed_ns (its share of the rank's exposed comm: time shared by concurrent
--   transfers is split equally, so the rank's rows add up to its exposed comm),
--   and what the model's replays read of the compute around it (predict/exposure.py):
--   ready_ns (GPU: when the compute launched before its launch had finished, i.e. when
--   its gradients were ready), compute_before_ns (compute before at_ns, its launch, or
--   its start without one: on GPUs the kernel time launched before it, on CPU-only
--   traces the length of the compute union before it; the compute of a window between
--   two collectives is the difference of theirs), compute_after_ns (the same measure
--   from its launch to the end of its step: GPU kernel time launched up to the end of
--   the ProfilerStep range, CPU compute union up to the window's end; what the
--   what-if engine reads to tell the optimizer's compute from the passes').
--
-- step_forwards: per rank and step that runs DDP's forward, how many times (forwards):
--   the micro-batches of a step where no mark or manifest says (a raw profiler trace).
--
-- step_grads: per rank and step of a DDP rank, the start of each parameter's AccumulateGrad (ts_ns,
--   role grad_ready): when its gradient is ready, in the order DDP's buckets fill (what the bucket
--   what-if replays new buckets from, where the trace has them).
--
-- step_reducer: per rank and step, the time of DDP's reducer ops (reducer_ns: role ddp_reducer,
--   the gradients divided by the world and each bucket copied back into them, outermost ranges
--   only): compute a pass spends because it reduces, which a pass inside no_sync does not.

-- _co_transfer: every comm transfer (GPU collective kernel or gloo span).
CREATE OR REPLACE TEMP TABLE _co_transfer AS
SELECT e.rank, e.event_id, e.step, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns, e.dur_ns, e.name,
       e.correlation, e.launch_ts_ns, r.device_kind,
       c.kind AS coll_kind, c.family, c.elements, c.min_elements, c.bytes, c.dtype, c.group_size, c.pg_name
FROM events e
JOIN ranks r USING (run_id, rank)
LEFT JOIN collectives c USING (run_id, rank, event_id)
WHERE e.run_id = getvariable('run_id') AND e.kind = 'comm' AND e.dur_ns > 0;

-- _co_launch_gpu: GPU transfers -> the runtime call that launched them (correlation).
CREATE OR REPLACE TEMP TABLE _co_launch_gpu AS
SELECT t.rank, t.event_id, l.event_id AS launch_id, l.track_id AS launch_track, l.ts_ns AS launch_ts_ns,
       l.ts_ns + l.dur_ns AS launch_end_ns
FROM _co_transfer t
JOIN events l ON l.run_id = getvariable('run_id') AND l.rank = t.rank
             AND l.correlation = t.correlation AND l.kind = 'runtime'
WHERE t.device_kind = 'gpu';

-- _co_launch_size: older GPU traces carry no sizes on their kernels; the CPU range
-- around the launch does (nccl:all_reduce, c10d::allreduce_, record_param_comms
-- with Input Dims and Input type: decode.py stores them in collectives). The
-- runtime launch sits inside that range on the same thread; the innermost sized
-- range gives the kernel's bytes and dtype. shard_only: an all-gather range that
-- lists only its input (the output is the shard times the group).
CREATE OR REPLACE TEMP TABLE _co_launch_size AS
SELECT l.rank, l.event_id,
       arg_max(c.bytes, struct_pack(t := e.ts_ns, d := -e.dur_ns, i := e.event_id)) AS range_bytes,
       arg_max(c.dtype, struct_pack(t := e.ts_ns, d := -e.dur_ns, i := e.event_id)) AS range_dtype,
       arg_max(c.kind = 'all_gather' AND c.elements = c.min_elements AND c.in_elems IS NULL,
               struct_pack(t := e.ts_ns, d := -e.dur_ns, i := e.event_id))
           AS range_shard_only
FROM _co_launch_gpu l
JOIN _co_transfer t USING (rank, event_id)
JOIN events e ON e.run_id = getvariable('run_id') AND e.rank = l.rank AND e.track_id = l.launch_track
             AND e.kind = 'comm_launch' AND e.ts_ns <= l.launch_ts_ns AND l.launch_end_ns <= e.ts_ns + e.dur_ns
JOIN collectives c ON c.run_id = e.run_id AND c.rank = e.rank AND c.event_id = e.event_id
WHERE t.bytes IS NULL AND c.bytes IS NOT NULL
GROUP BY ALL;

-- _co_launch_cpu: gloo spans -> their c10d launch on the training thread. gloo
-- writes no link, so the k-th launch of a family and size meets the k-th span of
-- the same family and size (an all-gather span reports its shard, a launch its
-- output and shard; gloo runs a reduce-scatter as an all_reduce span).
CREATE OR REPLACE TEMP TABLE _co_launch_cpu AS
WITH spans AS (
    SELECT t.rank, t.event_id, t.family, t.min_elements AS elements,
           row_number() OVER (PARTITION BY t.rank, t.family, t.min_elements ORDER BY t.ts_ns, t.event_id) AS k
    FROM _co_transfer t
    WHERE t.device_kind = 'cpu' AND t.family IS NOT NULL
), launches AS (
    SELECT e.rank, e.event_id AS launch_id, e.track_id AS launch_track, e.ts_ns AS launch_ts_ns,
           e.ts_ns + e.dur_ns AS launch_end_ns, c.family, c.kind,
           c.elements AS full_elements, c.bytes AS full_bytes, c.dtype, c.min_elements AS launch_min_elements,
           CASE WHEN c.family = 'gather' THEN c.min_elements ELSE c.elements END AS elements,
           row_number() OVER (PARTITION BY e.rank, c.family,
                              CASE WHEN c.family = 'gather' THEN c.min_elements ELSE c.elements END
                              ORDER BY e.ts_ns, e.event_id) AS k
    FROM events e
    JOIN collectives c USING (run_id, rank, event_id)
    WHERE e.run_id = getvariable('run_id') AND e.kind = 'comm_launch' AND e.name LIKE 'c10d::%'
      AND c.family IS NOT NULL
)
SELECT s.rank, s.event_id, l.launch_id, l.launch_track, l.launch_ts_ns, l.launch_end_ns,
       l.kind AS launch_kind, l.full_elements, l.full_bytes,
       -- an all-gather launch that lists only its input (FSDP1's allgather_) records the shard
       l.kind = 'all_gather' AND l.full_elements = l.launch_min_elements AS shard_only
FROM spans s JOIN launches l USING (rank, family, elements, k);

-- _co_launch: one launch per transfer (GPU or CPU); full_bytes and launch_dtype
-- are the launch's size where the transfer has none (GPU) or another (gloo).
CREATE OR REPLACE TEMP TABLE _co_launch AS
SELECT g.rank, g.event_id, g.launch_id, g.launch_track, g.launch_ts_ns, g.launch_end_ns,
       NULL::VARCHAR AS launch_kind, NULL::BIGINT AS full_elements, z.range_bytes AS full_bytes,
       coalesce(z.range_shard_only, false) AS shard_only, z.range_dtype AS launch_dtype
FROM _co_launch_gpu g
LEFT JOIN _co_launch_size z USING (rank, event_id)
UNION ALL
SELECT *, NULL::VARCHAR AS launch_dtype FROM _co_launch_cpu;

-- _co_ranges: the ranges that attribution reads, with their stored role.
CREATE OR REPLACE TEMP TABLE _co_ranges AS
SELECT e.rank, e.track_id, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns, r.role, r.arg
FROM events e JOIN annotation_roles r USING (run_id, rank, name)
WHERE e.run_id = getvariable('run_id') AND e.kind IN ('annotation', 'cpu_op', 'comm_launch');

-- _co_ddp: is this a DDP run? The manifest says so, else the rank's trace shows DDP's
-- forward range (each rank on its own: the files of one run agree on it, load.check_ranks).
CREATE OR REPLACE TEMP TABLE _co_ddp AS
SELECT r.rank,
       coalesce((SELECT parallelism = 'ddp' FROM runs WHERE run_id = getvariable('run_id')),
                EXISTS (SELECT 1 FROM annotation_roles a
                        WHERE a.run_id = r.run_id AND a.rank = r.rank AND a.role = 'ddp_forward')) AS ddp
FROM ranks r WHERE r.run_id = getvariable('run_id');

-- _co_fwd: the whole model's forward ranges of each step (DDP's forward, FSDP2's root pre-forward),
-- numbered: where a step runs more than one (gradient accumulation in a raw profiler trace, no
-- micro-batch marks), the k-th forward starts micro-batch k.
CREATE OR REPLACE TEMP TABLE _co_fwd AS
SELECT e.rank, e.step, e.ts_ns,
       (row_number() OVER (PARTITION BY e.rank, e.step ORDER BY e.ts_ns, e.event_id) - 1)::VARCHAR AS k,
       count(*) OVER (PARTITION BY e.rank, e.step) AS n
FROM events e JOIN annotation_roles r USING (run_id, rank, name)
WHERE e.run_id = getvariable('run_id') AND r.role IN ('ddp_forward', 'fsdp_root_forward') AND e.step IS NOT NULL;

-- step_forwards: per rank and step with whole-model forward ranges, how many (the micro-batches of a raw trace).
CREATE OR REPLACE TEMP TABLE step_forwards AS
SELECT rank, step, max(n) AS forwards FROM _co_fwd GROUP BY ALL;

-- step_reducer: per rank and step with DDP reducer ops, their time (ranges of the role nested in
-- another of the role are not counted twice).
CREATE OR REPLACE TEMP TABLE step_reducer AS
WITH ops AS (
    SELECT e.rank, e.step, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns,
           max(e.ts_ns + e.dur_ns) OVER (PARTITION BY e.rank, e.track_id ORDER BY e.ts_ns, e.event_id
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_end
    FROM events e JOIN annotation_roles r USING (run_id, rank, name)
    WHERE e.run_id = getvariable('run_id') AND r.role = 'ddp_reducer' AND e.step IS NOT NULL
)
SELECT rank, step, sum(end_ns - ts_ns)::BIGINT AS reducer_ns
FROM ops WHERE before_end IS NULL OR before_end <= ts_ns GROUP BY ALL;

-- step_grads: AccumulateGrad starts of the DDP ranks (see the header).
CREATE OR REPLACE TEMP TABLE step_grads AS
SELECT e.rank, e.step, e.ts_ns
FROM events e JOIN annotation_roles r USING (run_id, rank, name)
WHERE e.run_id = getvariable('run_id') AND r.role = 'grad_ready' AND e.step IS NOT NULL
  AND (SELECT ddp FROM _co_ddp d WHERE d.rank = e.rank);

-- _co_context: per transfer, what its launch sits inside (innermost wins: the latest start, then
-- the earliest end).
CREATE OR REPLACE TEMP TABLE _co_context AS
SELECT l.rank, l.event_id,
       arg_max(g.arg, struct_pack(t := g.ts_ns, e := -g.end_ns)) FILTER (WHERE g.role = 'ddp_bucket')       AS bucket,
       arg_max(g.arg, struct_pack(t := g.ts_ns, e := -g.end_ns)) FILTER (WHERE g.role = 'microbatch')       AS microbatch,
       arg_max(g.arg, struct_pack(t := g.ts_ns, e := -g.end_ns)) FILTER (WHERE g.role = 'fsdp_all_gather')  AS gather_unit,
       arg_max(g.arg, struct_pack(t := g.ts_ns, e := -g.end_ns)) FILTER (WHERE g.role = 'fsdp_reduce')      AS reduce_unit,
       arg_max(g.arg, struct_pack(t := g.ts_ns, e := -g.end_ns)) FILTER (WHERE g.role = 'launch')           AS launch_collective,
       bool_or(g.role = 'fsdp_backward')                                  AS in_backward,
       bool_or(g.role = 'fsdp_forward')                                   AS in_forward,
       bool_or(g.role LIKE 'fsdp_%')                                      AS in_fsdp
FROM _co_launch l
JOIN _co_ranges g ON g.rank = l.rank AND g.track_id = l.launch_track
                 AND g.ts_ns <= l.launch_ts_ns AND l.launch_end_ns <= g.end_ns
GROUP BY ALL;

-- _co_attr: kind, id and phase of each transfer.
CREATE OR REPLACE TEMP TABLE _co_attr AS
WITH base AS (
    SELECT t.* REPLACE (coalesce(l.launch_kind, x.launch_collective, t.coll_kind) AS coll_kind,
                        coalesce(t.dtype, l.launch_dtype) AS dtype),
           l.launch_id, l.launch_ts_ns AS cpu_launch_ts_ns,
           coalesce(l.full_bytes, t.bytes) AS nbytes, coalesce(l.shard_only, false) AS shard_only,
           x.bucket, coalesce(x.microbatch, CASE WHEN f.n > 1 THEN f.k END) AS microbatch,
           x.gather_unit, x.reduce_unit,
           coalesce(x.in_backward, false) AS in_backward, coalesce(x.in_fsdp, false) AS in_fsdp
    FROM _co_transfer t
    LEFT JOIN _co_launch l USING (rank, event_id)
    LEFT JOIN _co_context x USING (rank, event_id)
    ASOF LEFT JOIN _co_fwd f ON f.rank = t.rank AND f.step = t.step
                             AND coalesce(l.launch_ts_ns, t.ts_ns) >= f.ts_ns
), tagged AS (
    SELECT *,
        CASE WHEN bucket IS NOT NULL THEN 'ddp_bucket'
             WHEN gather_unit IS NOT NULL OR reduce_unit IS NOT NULL THEN 'fsdp_unit'
             WHEN in_fsdp AND coll_kind IN ('all_gather', 'reduce_scatter') THEN 'fsdp_unit'
             WHEN (SELECT ddp FROM _co_ddp d WHERE d.rank = base.rank) AND coll_kind = 'all_reduce' THEN 'ddp_bucket'
             ELSE 'other' END AS kind,
        CASE WHEN coll_kind = 'all_gather' THEN
                  CASE WHEN in_backward THEN 'backward_allgather' ELSE 'forward_allgather' END
             WHEN coll_kind = 'reduce_scatter' THEN 'reduce_scatter'
             WHEN coll_kind = 'all_reduce' THEN 'allreduce'
             ELSE coalesce(coll_kind, 'unknown') END AS phase
    FROM base
)
SELECT *,
    -- attribution read from annotations, or inferred from order (foreign DDP traces, FSDP1)
    CASE WHEN kind = 'ddp_bucket' THEN bucket IS NULL
         WHEN kind = 'fsdp_unit' THEN coalesce(gather_unit, reduce_unit) IS NULL
         ELSE false END AS inferred,
    CASE WHEN kind = 'ddp_bucket' THEN coalesce(bucket, (row_number() OVER (
             PARTITION BY rank, step, kind, bucket IS NULL, microbatch ORDER BY cpu_launch_ts_ns, ts_ns) - 1)::VARCHAR)
         WHEN kind = 'fsdp_unit' THEN coalesce(gather_unit, reduce_unit, 'unit#' || (row_number() OVER (
             PARTITION BY rank, step, kind, phase, microbatch ORDER BY cpu_launch_ts_ns, ts_ns) - 1)::VARCHAR)
         ELSE coalesce(coll_kind, name) END AS id
FROM tagged;

-- _co_g: exposed time shared out over concurrent transfers (interval_sweep):
-- in an elementary segment with c transfers running (layer 0) and no compute
-- (layer 1: compute_union), each transfer gets 1/c of its length. G(t), the
-- share accumulated up to t, makes each transfer's exposed time G(end) - G(start):
-- the per-collective figures add up to the rank's exposed comm exactly.
CREATE OR REPLACE TEMP TABLE _co_sweep_src AS
SELECT rank AS grp, ts_ns, end_ns, 0 AS layer FROM _co_transfer
UNION ALL
SELECT rank, ts_ns, end_ns, 1 FROM compute_union;
CREATE OR REPLACE TEMP TABLE _co_g AS
WITH rated AS (
    SELECT grp AS rank, ts_ns, end_ns, CASE WHEN n0 > 0 AND n1 = 0 THEN 1.0 / n0 ELSE 0.0 END AS rate
    FROM interval_sweep('_co_sweep_src')
)
SELECT rank, ts_ns, end_ns, rate,
       coalesce(sum(rate * (end_ns - ts_ns)) OVER (PARTITION BY rank ORDER BY ts_ns
                                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
FROM rated;

-- _co_launched (GPU): per rank and launch time of compute kernels, the latest end and
-- the kernel time of everything launched up to then (ties of one launch time together).
CREATE OR REPLACE TEMP TABLE _co_launched AS
WITH k AS (
    SELECT rank, launch_ts_ns, max(ts_ns + dur_ns) AS end_ns, sum(dur_ns) AS dur_ns
    FROM events
    WHERE run_id = getvariable('run_id') AND kind = 'compute' AND launch_ts_ns IS NOT NULL
    GROUP BY ALL
)
SELECT rank, launch_ts_ns,
       max(end_ns) OVER (PARTITION BY rank ORDER BY launch_ts_ns ROWS UNBOUNDED PRECEDING) AS done_ns,
       sum(dur_ns) OVER (PARTITION BY rank ORDER BY launch_ts_ns ROWS UNBOUNDED PRECEDING) AS launched_ns
FROM k;

-- _co_compute_cover (CPU-only traces): the compute union ready for coverage lookups.
CREATE OR REPLACE TEMP TABLE _co_compute_src AS SELECT rank AS grp, ts_ns, end_ns FROM compute_union;
CREATE OR REPLACE TEMP TABLE _co_compute_cover AS SELECT * FROM interval_cumulative('_co_compute_src');

-- collective_stats: one row per transfer.
CREATE OR REPLACE TEMP TABLE collective_stats AS
WITH a AS (
    SELECT *, coalesce(nullif(cpu_launch_ts_ns, 0), ts_ns) AS at_ns FROM _co_attr
)
SELECT a.rank, a.step, a.event_id, a.kind, a.id, a.phase, a.inferred, a.microbatch,
       a.coll_kind AS collective, a.nbytes AS bytes, a.shard_only, a.dtype, a.group_size, a.pg_name,
       a.ts_ns, a.end_ns, a.dur_ns AS comm_ns, a.cpu_launch_ts_ns,
       a.ts_ns - st.window_start_ns AS offset_ns,  -- start within its step's window
       (gb.before + gb.rate * (least(a.end_ns, gb.end_ns) - gb.ts_ns))
         - (ga.before + ga.rate * (least(a.ts_ns, ga.end_ns) - ga.ts_ns)) AS exposed_ns,
       CASE WHEN a.device_kind = 'gpu' THEN rd.done_ns END::BIGINT AS ready_ns,
       CASE WHEN a.device_kind = 'gpu' THEN coalesce(lb.launched_ns, 0)
            ELSE covered_ns(a.at_ns, cc.ts_ns, cc.end_ns, cc.before_ns) END::BIGINT AS compute_before_ns,
       greatest(0, CASE WHEN a.device_kind = 'gpu' THEN coalesce(le.launched_ns, 0) - coalesce(lb.launched_ns, 0)
            ELSE covered_ns(st.window_end_ns, ce.ts_ns, ce.end_ns, ce.before_ns)
                 - covered_ns(a.at_ns, cc.ts_ns, cc.end_ns, cc.before_ns) END)::BIGINT AS compute_after_ns
FROM a
LEFT JOIN steps st ON st.run_id = getvariable('run_id') AND st.rank = a.rank AND st.step = a.step
ASOF LEFT JOIN _co_g ga ON ga.rank = a.rank AND a.ts_ns >= ga.ts_ns
ASOF LEFT JOIN _co_g gb ON gb.rank = a.rank AND a.end_ns >= gb.ts_ns
ASOF LEFT JOIN _co_launched rd ON rd.rank = a.rank AND a.cpu_launch_ts_ns >= rd.launch_ts_ns
ASOF LEFT JOIN _co_launched lb ON lb.rank = a.rank AND a.at_ns > lb.launch_ts_ns
ASOF LEFT JOIN _co_compute_cover cc ON cc.grp = a.rank AND a.at_ns >= cc.ts_ns
ASOF LEFT JOIN _co_launched le ON le.rank = a.rank AND st.cpu_ts_ns + st.cpu_dur_ns > le.launch_ts_ns
ASOF LEFT JOIN _co_compute_cover ce ON ce.grp = a.rank AND st.window_end_ns >= ce.ts_ns;
