-- overlapscope storage: plain tables, int64 nanosecond times, one catalog holds
-- many runs. The raw per-rank tables (events, tracks, collectives, ...) are in
-- raw.sql; a catalog keeps them as Parquet files beside it (store/runstore.py), and
-- these tables hold the run index and what the analyses derived at ingest. Every
-- table and column is documented here.
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
    pruned_at    TIMESTAMP,            -- when prune dropped its raw events (events, tracks, collectives,
                                       -- flows, memory, annotation_roles); NULL: complete
    data_dir     VARCHAR,              -- the run's folder in the catalog's run store (store/runstore.py):
                                       -- its per-rank Parquet files and analyses; NULL in an in-memory store
    idempotency_key VARCHAR            -- the Idempotency-Key header of the push that stored it (a UUID that
                                       -- overlapscope push makes per invocation): a push repeating the key
                                       -- with the same token is answered with this run, not stored again;
                                       -- NULL: stored without one (ingest, the Upload page)
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
    clock_offset_ns     BIGINT DEFAULT 0,  -- added to ts_ns to put the rank on the common clock (clocks.sql,
                                           -- stored at ingest; 0 in a one-shot store, which estimates it)
    pg_config           JSON,              -- distributedInfo.pg_config (process groups and members)
    events              BIGINT,            -- traceEvents entries in the file
    dropped_events      JSON,              -- {reason: count}: events left out for a missing, negative or
                                           -- out-of-range ts or dur (ingest/frames.py)
    name_rank           INTEGER,           -- the rank the file name says, when it differs from distributedInfo's
    text_replaced       BIGINT,            -- invalid UTF-8 sequences and lone surrogate escapes in the file,
                                           -- read as U+FFFD (ingest/textfix.py)
    PRIMARY KEY (run_id, rank)
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
