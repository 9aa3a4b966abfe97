-- params: run_id
-- scope: run
-- requires: clocks, instances
-- provides: comm_wait, comm_wait_hidden, wait_step, wait_rank
--
-- Comm split into waiting for peers and transfer (the TensorBoard profiler's
-- synchronizing vs data-transfer time). A collective cannot move data before its
-- last rank arrives: an instance's transfer time is its duration on the rank that
-- arrived last (on the common clock, clocks.sql), and each rank's first
-- dur_ns - transfer_ns of it is waiting for peers. An instance seen on one rank
-- only (the others not loaded) is all transfer.
--
-- Wall-clock figures count concurrent collectives once (interval unions): per
-- rank, transfer = the union of the transfer parts; wait = the union of the
-- waiting parts minus the transfer union (while one collective transfers, the
-- rank is not idle-waiting), so wait + transfer = comm, exactly. Exposed wait
-- is wait that no compute of the rank covers either: what the rank loses (the
-- compute inside its transfers, instances.sql's comm_compute, is all that can cover it).
--
--   comm_wait   one row per transfer: rank, event_id, step, ts_ns, end_ns, dur_ns,
--               common_ts_ns (start on the common clock), peers (loaded ranks that
--               ran the instance), last_rank (the one that arrived last),
--               transfer_ns, wait_ns (dur_ns = transfer_ns + wait_ns), last_lead_ns (how
--               much later than every other rank the last one arrived: the part of the
--               others' wait that it alone caused; the what-if's late rank on time)
--   comm_wait_hidden  one row per transfer with a wait: rank, event_id, wait_hidden_ns
--               (the rank's compute inside its waiting part), hidden_ns (inside all of it);
--               what splits its exposed time into waiting and transfer (queries/collectives.sql)
--   wait_step   one row per rank and step with comm: wait_ns, exposed_wait_ns
--   wait_rank   one row per loaded rank, over every transfer: clock_offset_ns,
--               matched, peered (instances shared with another loaded rank),
--               last_arrivals (of those, how many it arrived last at),
--               transfer_ns, wait_ns, exposed_wait_ns

CREATE OR REPLACE TEMP TABLE comm_wait AS
WITH a AS (
    SELECT i.*, i.ts_ns + k.clock_offset_ns AS common_ts_ns
    FROM comm_instance i JOIN rank_clock k USING (rank)
), last AS (
    -- the last to arrive; ranks that arrive at the same instant: the highest (a fixed choice)
    SELECT ikey, count(*) AS peers, arg_max(rank, struct_pack(t := common_ts_ns, r := rank)) AS last_rank,
           arg_max(dur_ns, struct_pack(t := common_ts_ns, r := rank)) AS last_dur_ns,
           max(common_ts_ns) AS last_ts_ns
    FROM a GROUP BY ikey
), lead AS (
    -- how much later than every other rank the last one arrived
    SELECT a.ikey, l.last_ts_ns - max(a.common_ts_ns) AS last_lead_ns
    FROM a JOIN last l USING (ikey) WHERE a.rank <> l.last_rank GROUP BY a.ikey, l.last_ts_ns
)
SELECT a.rank, a.event_id, a.step, a.ts_ns, a.end_ns, a.dur_ns, a.common_ts_ns, l.peers, l.last_rank,
       CASE WHEN l.peers > 1 THEN least(a.dur_ns, l.last_dur_ns) ELSE a.dur_ns END AS transfer_ns,
       a.dur_ns - CASE WHEN l.peers > 1 THEN least(a.dur_ns, l.last_dur_ns) ELSE a.dur_ns END AS wait_ns,
       coalesce(d.last_lead_ns, 0)::BIGINT AS last_lead_ns
FROM a JOIN last l USING (ikey) LEFT JOIN lead d USING (ikey);

-- Group keys (rank, step, what) packed into one BIGINT as in overlap.sql:
-- what 1: a step's waiting parts, 2: the rank's (every transfer).
CREATE OR REPLACE TEMP MACRO _cw_key(rank, step, what) AS
    (rank::BIGINT << 40) | ((coalesce(step, -1) + 1)::BIGINT << 4) | what;

-- _cw_w: the waiting parts' unions, per step and per rank (disjoint pieces).
CREATE OR REPLACE TEMP TABLE _cw_wsrc AS
SELECT _cw_key(rank, step, 1) AS grp, ts_ns, end_ns - transfer_ns AS end_ns
FROM comm_wait WHERE wait_ns > 0 AND step IS NOT NULL
UNION ALL
SELECT _cw_key(rank, NULL, 2), ts_ns, end_ns - transfer_ns FROM comm_wait WHERE wait_ns > 0;
CREATE OR REPLACE TEMP TABLE _cw_w AS
SELECT (grp >> 40)::INTEGER AS rank, nullif(((grp >> 4) & ((1::BIGINT << 36) - 1)) - 1, -1) AS step,
       (grp & 15)::INTEGER AS what, ts_ns, end_ns
FROM interval_pieces('_cw_wsrc');

-- _cw_cover: per rank, the transfer union (grp 2 rank) and the union of transfers and
-- compute (grp 2 rank + 1), ready for coverage lookups.
CREATE OR REPLACE TEMP TABLE _cw_bsrc AS
SELECT rank::BIGINT * 2 AS grp, end_ns - transfer_ns AS ts_ns, end_ns FROM comm_wait
UNION ALL
SELECT rank::BIGINT * 2 + 1, end_ns - transfer_ns, end_ns FROM comm_wait
UNION ALL
SELECT rank::BIGINT * 2 + 1, ts_ns, end_ns FROM comm_compute;
CREATE OR REPLACE TEMP TABLE _cw_pieces AS SELECT * FROM interval_pieces('_cw_bsrc');
CREATE OR REPLACE TEMP TABLE _cw_cover AS SELECT * FROM interval_cumulative('_cw_pieces');

-- _cw_len: per group, the waiting union, its part inside transfers and inside
-- transfers or compute.
CREATE OR REPLACE TEMP TABLE _cw_len AS
SELECT w.rank, w.step, w.what,
       sum(w.end_ns - w.ts_ns)::BIGINT AS all_ns,
       sum(covered_ns(w.end_ns, tb.ts_ns, tb.end_ns, tb.before_ns)
           - covered_ns(w.ts_ns, ta.ts_ns, ta.end_ns, ta.before_ns))::BIGINT AS in_transfer_ns,
       sum(covered_ns(w.end_ns, cb.ts_ns, cb.end_ns, cb.before_ns)
           - covered_ns(w.ts_ns, ca.ts_ns, ca.end_ns, ca.before_ns))::BIGINT AS hidden_ns
FROM _cw_w w
ASOF LEFT JOIN _cw_cover ta ON ta.grp = w.rank::BIGINT * 2 AND w.ts_ns >= ta.ts_ns
ASOF LEFT JOIN _cw_cover tb ON tb.grp = w.rank::BIGINT * 2 AND w.end_ns >= tb.ts_ns
ASOF LEFT JOIN _cw_cover ca ON ca.grp = w.rank::BIGINT * 2 + 1 AND w.ts_ns >= ca.ts_ns
ASOF LEFT JOIN _cw_cover cb ON cb.grp = w.rank::BIGINT * 2 + 1 AND w.end_ns >= cb.ts_ns
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE wait_step AS
SELECT s.rank, s.step,
       coalesce(l.all_ns - l.in_transfer_ns, 0)::BIGINT AS wait_ns,
       coalesce(l.all_ns - l.hidden_ns, 0)::BIGINT AS exposed_wait_ns
FROM (SELECT DISTINCT rank, step FROM comm_wait WHERE step IS NOT NULL) s
LEFT JOIN _cw_len l ON l.rank = s.rank AND l.step = s.step AND l.what = 1;

CREATE OR REPLACE TEMP TABLE wait_rank AS
WITH per AS (
    SELECT rank, count(*) FILTER (WHERE peers > 1) AS peered,
           count(*) FILTER (WHERE peers > 1 AND last_rank = rank) AS last_arrivals
    FROM comm_wait GROUP BY rank
), transfer AS (
    SELECT (grp // 2)::INTEGER AS rank, sum(end_ns - ts_ns)::BIGINT AS transfer_ns
    FROM _cw_pieces WHERE grp % 2 = 0 GROUP BY ALL
)
SELECT k.rank, k.clock_offset_ns, k.matched, coalesce(p.peered, 0) AS peered,
       coalesce(p.last_arrivals, 0) AS last_arrivals,
       t.transfer_ns,
       CASE WHEN t.transfer_ns IS NULL THEN NULL ELSE coalesce(l.all_ns - l.in_transfer_ns, 0) END::BIGINT AS wait_ns,
       CASE WHEN t.transfer_ns IS NULL THEN NULL ELSE coalesce(l.all_ns - l.hidden_ns, 0) END::BIGINT
           AS exposed_wait_ns
FROM rank_clock k
LEFT JOIN per p USING (rank)
LEFT JOIN transfer t USING (rank)
LEFT JOIN _cw_len l ON l.rank = k.rank AND l.step IS NULL AND l.what = 2;

CREATE OR REPLACE TEMP TABLE _cw_csrc AS SELECT rank AS grp, ts_ns, end_ns FROM comm_compute;
CREATE OR REPLACE TEMP TABLE _cw_ccover AS SELECT * FROM interval_cumulative('_cw_csrc');
CREATE OR REPLACE TEMP TABLE comm_wait_hidden AS
SELECT w.rank, w.event_id,
       (covered_ns(w.ts_ns + w.wait_ns, m.ts_ns, m.end_ns, m.before_ns)
        - covered_ns(w.ts_ns, a.ts_ns, a.end_ns, a.before_ns))::BIGINT AS wait_hidden_ns,
       (covered_ns(w.end_ns, b.ts_ns, b.end_ns, b.before_ns)
        - covered_ns(w.ts_ns, a.ts_ns, a.end_ns, a.before_ns))::BIGINT AS hidden_ns
FROM comm_wait w
ASOF LEFT JOIN _cw_ccover a ON a.grp = w.rank AND w.ts_ns >= a.ts_ns
ASOF LEFT JOIN _cw_ccover m ON m.grp = w.rank AND w.ts_ns + w.wait_ns >= m.ts_ns
ASOF LEFT JOIN _cw_ccover b ON b.grp = w.rank AND w.end_ns >= b.ts_ns
WHERE w.peers > 1 AND w.wait_ns > 0;
