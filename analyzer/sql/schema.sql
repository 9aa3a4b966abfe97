-- overlapscope storage: plain tables, int64 nanosecond times, one catalog holds
-- many runs. Raw events are kept, everything else is derived by the named SQL
-- analyses next to this file. Every table and column is documented here.
-- Applied to every read-write connection (store/database.py); a catalog written
-- by an older version is brought up to date by store/migrate.py.

-- The catalog's own facts: schema_version (store/migrate.py).
CREATE TABLE IF NOT EXISTS catalog_info (
    key    VARCHAR PRIMARY KEY,
    value  VARCHAR
);

-- A set of per-rank traces loaded together (one training run).
CREATE TABLE IF NOT EXISTS runs (
    run_id       INTEGER PRIMARY KEY,  -- catalog-wide id
    name         VARCHAR NOT NULL,     -- user-given name, or the input path
    created_at   TIMESTAMP,            -- when the run was loaded
    source       VARCHAR,              -- the input paths, space separated
    world_size   INTEGER,              -- ranks in the job (distributedInfo), may exceed the ranks loaded
    backend      VARCHAR,              -- nccl, gloo, ... (distributedInfo)
    device_kind  VARCHAR,              -- 'gpu' when any rank has GPU kernels, else 'cpu'
    manifest     JSON,                 -- the tracer's manifest.json, NULL for foreign traces
    tags         JSON,                 -- user tags {key: value}
    parallelism  VARCHAR,              -- ddp, fsdp, hsdp from the manifest; NULL when it has none
    headline     JSON,                 -- analyzer/headline.py at ingest (history, the dashboard, CI)
    pushed_by    VARCHAR,              -- the name of the API token that pushed it; NULL: stored locally
    pruned_at    TIMESTAMP             -- when prune dropped its raw events (events, tracks, collectives,
                                       -- flows, memory, annotation_roles); NULL: complete
);

-- One row per loaded rank (one trace file).
CREATE TABLE IF NOT EXISTS ranks (
    run_id              INTEGER NOT NULL,
    rank                INTEGER NOT NULL,  -- global rank
    file                VARCHAR,           -- the trace file (archive:member for zips)
    rank_source         VARCHAR,           -- 'distributedInfo' or 'file name'
    world_size          INTEGER,           -- as this file states it
    backend             VARCHAR,
    nccl_version        VARCHAR,
    device_kind         VARCHAR,           -- 'gpu' or 'cpu' (this file)
    device_names        VARCHAR[],         -- deviceProperties names
    device_memory_bytes BIGINT,            -- largest deviceProperties totalGlobalMem
    hostname            VARCHAR,
    base_time_ns        BIGINT,            -- baseTimeNanoseconds (epoch offset of the trace clock)
    clock_offset_ns     BIGINT DEFAULT 0,  -- added to ts_ns to align ranks (0 = trust the trace)
    pg_config           JSON,              -- distributedInfo.pg_config (process groups and members)
    events              BIGINT,            -- traceEvents entries in the file
    dropped_events      JSON,              -- {reason: count}: events left out for a missing, negative or
                                           -- out-of-range ts or dur (ingest/frames.py)
    name_rank           INTEGER,           -- the rank the file name says, when it differs from distributedInfo's
    PRIMARY KEY (run_id, rank)
);

-- Timelines: a CPU thread, a GPU stream, or a backend's comm thread.
CREATE TABLE IF NOT EXISTS tracks (
    run_id    INTEGER NOT NULL,
    rank      INTEGER NOT NULL,
    track_id  INTEGER NOT NULL,  -- per-rank id, referenced by events.track_id
    pid       VARCHAR,           -- Kineto pid (the GPU index for GPU streams)
    tid       VARCHAR,           -- Kineto tid (the stream id for GPU streams)
    kind      VARCHAR,           -- 'cpu_thread', 'gpu_stream', 'comm_thread' (gloo runloop), 'other'
    name      VARCHAR            -- thread_name metadata, or 'stream N'
);

-- Every complete (ph X) and instant (ph i) event of every rank.
CREATE TABLE IF NOT EXISTS events (
    run_id        INTEGER NOT NULL,
    rank          INTEGER NOT NULL,
    event_id      BIGINT NOT NULL,  -- per-rank id, in file order
    track_id      INTEGER,          -- tracks.track_id
    ts_ns         BIGINT,           -- start, ns on the trace clock
    dur_ns        BIGINT,           -- duration, ns (0 for instants)
    name          VARCHAR,
    cat           VARCHAR,          -- Kineto category: kernel, cpu_op, cuda_runtime, ...
    kind          VARCHAR,          -- classification (analyzer/classify.py): compute, comm, memcpy,
                                    -- memset, sync, gpu_annotation, step, comm_launch, runtime,
                                    -- cpu_op, annotation, python, memory, other
    step          BIGINT,           -- ProfilerStep number: by time for CPU events, by the
                                    -- launching CPU call for device events; NULL outside steps
    correlation   BIGINT,           -- CUPTI correlation id (kernels and runtime launches)
    external_id   BIGINT,           -- 'External id': links device work to the CPU op
    stream        BIGINT,           -- GPU stream of device events
    device        BIGINT,           -- GPU index of device events
    launch_ts_ns  BIGINT,           -- device events: start of the runtime call that launched them
    flops         DOUBLE,           -- profiler FLOP estimate of the op (with_flops=True)
    args          JSON              -- all Kineto args as written (NULL when not kept)
);

-- Collective calls and transfers: comm kernels/spans and their CPU launches.
CREATE TABLE IF NOT EXISTS collectives (
    run_id      INTEGER NOT NULL,
    rank        INTEGER NOT NULL,
    event_id    BIGINT NOT NULL,  -- events.event_id (kind comm or comm_launch)
    collective  VARCHAR,          -- 'Collective name' (allreduce, _allgather_base, ...) or from the span name
    kind        VARCHAR,          -- canonical kind of collective (contract.collectives): all_reduce,
                                  -- all_gather, reduce_scatter, all_to_all, broadcast, ...; NULL: none
    family      VARCHAR,          -- what a launch and its transfer share (ingest/classify.py):
                                  -- reduce (all-reduce and reduce-scatter: gloo runs both as
                                  -- all_reduce spans), gather, or the kind
    in_elems    BIGINT,           -- 'In msg nelems'
    out_elems   BIGINT,           -- 'Out msg nelems'
    elements    BIGINT,           -- full buffer elements (nccl-tests size): max(in, out), or the
                                  -- largest tensor of 'Input Dims' (gloo spans, c10d launches)
    min_elements BIGINT,          -- smallest tensor of 'Input Dims' (an all-gather's shard)
    dtype       VARCHAR,          -- element type as written (Float, BFloat16, float, ...)
    bytes       BIGINT,           -- elements x dtype size (NULL when the dtype is unknown)
    group_size  BIGINT,           -- 'Group size'
    pg_name     VARCHAR,          -- 'Process Group Name'
    pg_desc     VARCHAR,          -- 'Process Group Description'
    pg_ranks    VARCHAR           -- 'Process Group Ranks' as written
);

-- One row per rank and ProfilerStep: the CPU range and the step's window on the
-- device timeline (filled at load by sql/steps.sql, from events).
CREATE TABLE IF NOT EXISTS steps (
    run_id           INTEGER NOT NULL,
    rank             INTEGER NOT NULL,
    step             BIGINT NOT NULL,  -- N of ProfilerStep#N
    cpu_ts_ns        BIGINT,           -- the ProfilerStep range on the CPU
    cpu_dur_ns       BIGINT,
    device_first_ns  BIGINT,           -- first start of the device work launched in the step
    device_last_ns   BIGINT,           -- last end of that work
    window_start_ns  BIGINT,           -- the step on the device timeline: from its first start
    window_end_ns    BIGINT,           -- on the rank's main stream to the next step's (the last
                                       -- step: its own last end); CPU-only traces use the
                                       -- ProfilerStep range (see sql/steps.sql)
    PRIMARY KEY (run_id, rank, step)
);

-- The CPU ranges that say what the collectives launched inside them belong to:
-- every distinct range name of a rank with its role (ingest/classify.py,
-- annotation_role): ddp_bucket, microbatch, fsdp_all_gather, fsdp_reduce,
-- fsdp_backward, fsdp_forward, ddp_forward, launch. Empty at the overlap detail.
CREATE TABLE IF NOT EXISTS annotation_roles (
    run_id  INTEGER NOT NULL,
    rank    INTEGER NOT NULL,
    name    VARCHAR NOT NULL,  -- events.name of the range
    role    VARCHAR NOT NULL,
    arg     VARCHAR            -- bucket or micro-batch index, unit FQN ('' the root), launched kind
);

-- Flow events (ph s/f/t): CPU->GPU launches (ac2g) and forward->backward links (fwdbwd).
CREATE TABLE IF NOT EXISTS flows (
    run_id    INTEGER NOT NULL,
    rank      INTEGER NOT NULL,
    flow_id   BIGINT,
    cat       VARCHAR,  -- ac2g, fwdbwd, ...
    ph        VARCHAR,  -- s (start), t (step), f (finish)
    ts_ns     BIGINT,
    track_id  BIGINT
);

-- Allocator events (profile_memory=True): one row per allocation or free.
CREATE TABLE IF NOT EXISTS memory (
    run_id                 INTEGER NOT NULL,
    rank                   INTEGER NOT NULL,
    ts_ns                  BIGINT,
    track_id               INTEGER,
    device_type            BIGINT,  -- 0 CPU, 1 CUDA (c10 DeviceType)
    device_id              BIGINT,
    bytes                  BIGINT,  -- + allocation, - free
    total_allocated_bytes  BIGINT,  -- allocator's allocated bytes after the event
    total_reserved_bytes   BIGINT   -- allocator's reserved bytes after the event
);

-- Headline figures of each run, written at ingest, for history and CI gates: the
-- numbers of analyzer/headline.py (one definition: the median step of the slowest rank).
CREATE TABLE IF NOT EXISTS metrics (
    run_id  INTEGER NOT NULL,
    name    VARCHAR NOT NULL,  -- step_ms, comm_ms, exposed_comm_ms, compute_ms, idle_ms, overlap_pct,
                               -- exposed_pct, slowest_rank
    value   DOUBLE,
    PRIMARY KEY (run_id, name)
);

-- The checklist's findings of each run, evaluated at ingest (analyzer/checklist).
CREATE TABLE IF NOT EXISTS findings (
    run_id     INTEGER NOT NULL,
    id         VARCHAR NOT NULL,  -- the rule id (a contract)
    status     VARCHAR NOT NULL,  -- fail, warn, pass, n/a
    severity   INTEGER,
    impact_ms  DOUBLE,            -- time per step the finding accounts for
    title      VARCHAR,
    evidence   VARCHAR,
    fix        VARCHAR,
    PRIMARY KEY (run_id, id)
);

-- What a run's analysis said at ingest, kept when prune drops its events: history,
-- the CI gate and the dashboard read them for pruned runs (store/results.py).

-- Per rank: analyze's `ranks` rows (times in ms).
CREATE TABLE IF NOT EXISTS rank_metrics (
    run_id           INTEGER NOT NULL,
    rank             INTEGER NOT NULL,
    device_kind      VARCHAR,
    steps            BIGINT,   -- profiled steps with a window
    step_ms          DOUBLE,   -- median step
    compute_ms       DOUBLE,   -- over the whole trace, like the figures below
    comm_ms          DOUBLE,
    exposed_comm_ms  DOUBLE,
    overlap_pct      DOUBLE,
    idle_ms          DOUBLE,
    other_ms         DOUBLE,
    span_ms          DOUBLE,
    hta_overlap_pct  DOUBLE,
    clock_offset_ms  DOUBLE,   -- this rank's clock offset from the reference rank's (measure/waits.py)
    comm_wait_ms     DOUBLE,   -- comm spent waiting for the last peer to arrive; NULL without a peer loaded
    comm_transfer_ms DOUBLE,   -- comm after the last arrival (comm_wait_ms + comm_transfer_ms = comm_ms)
    exposed_wait_ms  DOUBLE,   -- the part of the exposed comm spent waiting
    PRIMARY KEY (run_id, rank)
);

-- Per rank and profiled step: analyze's `steps` rows (times in ms).
CREATE TABLE IF NOT EXISTS step_metrics (
    run_id           INTEGER NOT NULL,
    rank             INTEGER NOT NULL,
    step             BIGINT NOT NULL,
    step_ms          DOUBLE,
    compute_ms       DOUBLE,
    comm_ms          DOUBLE,
    exposed_comm_ms  DOUBLE,
    overlap_pct      DOUBLE,
    idle_ms          DOUBLE,
    other_ms         DOUBLE,
    spill_in_ms      DOUBLE,
    spill_out_ms     DOUBLE,
    PRIMARY KEY (run_id, rank, step)
);

-- Per DDP bucket, FSDP unit or other collective, and phase: the `buckets` summary
-- (means per collective over ranks and steps, times in ms).
CREATE TABLE IF NOT EXISTS group_metrics (
    run_id                INTEGER NOT NULL,
    kind                  VARCHAR,  -- ddp_bucket, fsdp_unit, other
    id                    VARCHAR,  -- bucket index, unit FQN ('' the root), or the collective's name
    phase                 VARCHAR,  -- forward_allgather, backward_allgather, reduce_scatter, allreduce, ...
    count                 BIGINT,   -- collectives in the group
    bytes                 BIGINT,
    comm_ms               DOUBLE,
    exposed_ms            DOUBLE,
    busbw_gbps            DOUBLE,   -- median bus bandwidth, GB/s
    predicted_comm_ms     DOUBLE,
    predicted_exposed_ms  DOUBLE,
    inferred              BOOLEAN   -- the bucket or unit was inferred, not annotated
);
