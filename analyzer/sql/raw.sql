-- overlapscope's raw per-rank tables: every event of a rank as the analyses read it
-- (int64 nanosecond times). In-memory stores (one-shot analyses, the per-rank workers
-- of analyzer/engine) hold them as DuckDB tables; a catalog keeps each stored run's
-- rows as Parquet files in its run store instead (store/runstore.py: one file per
-- table and rank, with these columns). Every table and column is documented here.

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

