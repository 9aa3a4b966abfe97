-- params: run_id
-- scope: run
-- requires: collectives, waits
-- provides: comm_lane
--
-- What the what-if engine (analyzer/predict/plan.py) replays of each DDP bucket and
-- FSDP unit transfer: its piece of its rank's one comm lane, the compute that hid
-- that piece, and its wait for its peers. gloo runs collectives on several threads
-- at once; the replay runs them one at a time, so each transfer holds the part of
-- its span after every earlier-starting transfer of its rank, step and family has
-- ended (the pieces add up to the union of the spans, the measured comm). The
-- compute inside a piece is measured, not shared out between concurrent transfers
-- (collective_stats' exposed_ns splits shared time equally), so the replay of an
-- unchanged step exposes exactly what the measurement did.
--
--   comm_lane   one row per DDP bucket or FSDP unit transfer in a step (kind
--               ddp_bucket or fsdp_unit, a known collective): rank, event_id,
--               lane_ts_ns (where its piece starts; its end is the transfer's end),
--               lane_ns (the piece's length, 0 when an earlier transfer covers it),
--               hidden_ns (compute of the rank inside the piece: comm_compute),
--               wait_ns (waits.sql: the first wait_ns of its span it waited for its
--               peers; 0 for a transfer seen on one rank only), last_rank (the rank
--               that arrived last; null without peers), lead_ns (how much of that
--               wait the last rank alone caused: waits.sql's last_lead_ns, 0 on itself)

CREATE OR REPLACE TEMP TABLE _ln_piece AS
SELECT rank, event_id, end_ns,
       least(end_ns, greatest(ts_ns, coalesce(max(end_ns) OVER (
           PARTITION BY rank, step, kind ORDER BY ts_ns, event_id
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), ts_ns))) AS lane_ts_ns
FROM collective_stats
WHERE kind IN ('ddp_bucket', 'fsdp_unit') AND step IS NOT NULL AND collective IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _ln_compute AS SELECT rank AS grp, ts_ns, end_ns FROM comm_compute;
CREATE OR REPLACE TEMP TABLE _ln_cover AS SELECT * FROM interval_cumulative('_ln_compute');

CREATE OR REPLACE TEMP TABLE comm_lane AS
SELECT p.rank, p.event_id, p.lane_ts_ns, p.end_ns - p.lane_ts_ns AS lane_ns,
       (covered_ns(p.end_ns, b.ts_ns, b.end_ns, b.before_ns)
        - covered_ns(p.lane_ts_ns, a.ts_ns, a.end_ns, a.before_ns))::BIGINT AS hidden_ns,
       coalesce(w.wait_ns, 0)::BIGINT AS wait_ns,
       CASE WHEN w.peers > 1 THEN w.last_rank END AS last_rank,
       CASE WHEN w.peers > 1 AND w.last_rank <> p.rank THEN w.last_lead_ns ELSE 0 END::BIGINT AS lead_ns
FROM _ln_piece p
ASOF LEFT JOIN _ln_cover a ON a.grp = p.rank AND p.lane_ts_ns >= a.ts_ns
ASOF LEFT JOIN _ln_cover b ON b.grp = p.rank AND p.end_ns >= b.ts_ns
LEFT JOIN comm_wait w ON w.rank = p.rank AND w.event_id = p.event_id;
