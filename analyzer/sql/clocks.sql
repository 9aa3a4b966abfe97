-- params: run_id
-- provides: comm_instance, rank_clock
--
-- Ranks on one clock. Every rank's trace has its own clock (hosts differ by micro-
-- to milliseconds). The ranks of a collective leave it at nearly the same moment
-- (the last one to arrive releases all of them), so the end of one collective
-- instance is a common instant: a rank's offset from the reference rank (the lowest
-- loaded rank) is the typical difference of end times over their shared instances
-- (the median of the tightest half, _cl_shorth: it ignores instances matched wrongly
-- or left late).
-- Per-rank figures never read these tables: only comparisons between ranks do
-- (waits.sql, the timeline).
--
--   comm_instance  one row per comm transfer (GPU collective kernel, gloo span):
--                  rank, event_id, step, ts_ns, end_ns, dur_ns (the rank's own clock),
--                  ikey (its collective instance: the n-th transfer of one step,
--                  collective and process group on the rank; every rank of a group
--                  runs the same collectives in the same order). The group comes from
--                  the kernel's Process Group Ranks (or Name); gloo spans name none,
--                  so there the transfer's size stands in for the group (an HSDP
--                  reduce-scatter and replica all-reduce differ in size).
--   rank_clock     one row per loaded rank: clock_offset_ns (add it to the rank's
--                  times to put them on the reference rank's clock; 0 for the
--                  reference and for ranks that share no collective with anyone
--                  placed), matched (instances the estimate rests on), via (the rank
--                  it was matched against: the reference, or, for a rank that shares
--                  no collective with it (the other replica group of a 2-D mesh),
--                  the placed rank it shares the most with). Two ranks are compared
--                  only when they share a process group: when the traces'
--                  distributedInfo.pg_config lists groups smaller than the world
--                  (a 2-D mesh), ranks in no common smaller group run no collective
--                  together, whatever their transfers' names say.

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

-- _cl_shorth(src): per pair of ranks (rank, via) and class of collective (cls: the
-- collective and its group), the location of the end differences d: the median of
-- the shortest window holding half of them and one more (the "shorth"). gloo's
-- threads share the cores with compute, so a rank sometimes leaves a collective
-- milliseconds late; the shortest half leaves those out where a plain median would
-- not. spread_ns, the window's width, says how tight the class is: where the group
-- is unknown (gloo), a class of another group's collectives matches by order alone
-- and its differences scatter; the tightest class (of those with 3 instances or
-- more) holds true matches.
CREATE OR REPLACE TEMP MACRO _cl_shorth(src) AS TABLE
WITH s AS (
    SELECT rank, via, cls, d, row_number() OVER (PARTITION BY rank, via, cls ORDER BY d) AS k,
           count(*) OVER (PARTITION BY rank, via, cls) AS n
    FROM query_table(src)
), w AS (
    SELECT a.rank, a.via, a.cls, a.n, a.k, b.d - a.d AS width
    FROM s a JOIN s b ON b.rank = a.rank AND b.via = a.via AND b.cls = a.cls AND b.k = a.k + a.n // 2
), best AS (
    SELECT rank, via, cls, any_value(n) AS n, arg_min(k, width) AS k0, min(width) AS spread_ns
    FROM w GROUP BY rank, via, cls
)
SELECT b.rank, b.via, b.cls, b.n, b.spread_ns, median(s.d) AS diff_ns
FROM best b JOIN s ON s.rank = b.rank AND s.via = b.via AND s.cls = b.cls AND s.k BETWEEN b.k0 AND b.k0 + b.n // 2
GROUP BY b.rank, b.via, b.cls, b.n, b.spread_ns;

-- _cl_best: of a pair's classes, the tightest with 3 instances or more (else the tightest).
CREATE OR REPLACE TEMP MACRO _cl_best(value, spread_ns, n) AS
    coalesce(arg_min(value, spread_ns) FILTER (WHERE n >= 3), arg_min(value, spread_ns));

CREATE OR REPLACE TEMP TABLE _cl_ref AS
SELECT min(rank) AS rank FROM ranks WHERE run_id = getvariable('run_id');

-- _cl_pairs: (a, b) ranks that may share collectives: both in some process group
-- smaller than the world, when any rank lists one (pg_config); else every pair.
CREATE OR REPLACE TEMP TABLE _cl_groups AS
SELECT rank, unnest(from_json(json_extract(pg_config, '$[*].ranks'), '["INTEGER[]"]')) AS members
FROM ranks WHERE run_id = getvariable('run_id') AND pg_config IS NOT NULL;
CREATE OR REPLACE TEMP TABLE _cl_small AS
SELECT * FROM _cl_groups
WHERE len(members) < (SELECT max(len(members)) FROM _cl_groups);
CREATE OR REPLACE TEMP TABLE _cl_pairs AS
SELECT a.rank AS a, b.rank AS b
FROM ranks a JOIN ranks b ON b.run_id = a.run_id AND b.rank <> a.rank
WHERE a.run_id = getvariable('run_id')
  AND (NOT EXISTS (SELECT 1 FROM _cl_small)
       OR a.pg_config IS NULL OR b.pg_config IS NULL
       OR EXISTS (SELECT 1 FROM _cl_small s WHERE s.rank = a.rank AND list_contains(s.members, b.rank)));

-- _cl_direct: ranks sharing instances with the reference: the median end difference
-- of the tightest class.
CREATE OR REPLACE TEMP TABLE _cl_direct_src AS
SELECT r.rank, f.rank AS via, r.cls, r.end_ns - f.end_ns AS d
FROM comm_instance r
JOIN comm_instance f ON f.ikey = r.ikey AND f.rank = (SELECT rank FROM _cl_ref)
JOIN _cl_pairs p ON p.a = r.rank AND p.b = f.rank;
CREATE OR REPLACE TEMP TABLE _cl_direct AS
SELECT rank, _cl_best(diff_ns, spread_ns, n) AS diff_ns, _cl_best(n, spread_ns, n) AS matched
FROM _cl_shorth('_cl_direct_src') GROUP BY rank;

-- _cl_hop: the other ranks, through the placed rank they share the most instances with.
CREATE OR REPLACE TEMP TABLE _cl_hop_src AS
SELECT r.rank, x.rank AS via, r.cls, r.end_ns - x.end_ns AS d
FROM comm_instance r
JOIN comm_instance x ON x.ikey = r.ikey AND x.rank IN (SELECT rank FROM _cl_direct)
JOIN _cl_pairs q ON q.a = r.rank AND q.b = x.rank
WHERE r.rank NOT IN (SELECT rank FROM _cl_direct) AND r.rank <> (SELECT rank FROM _cl_ref);
CREATE OR REPLACE TEMP TABLE _cl_hop AS
WITH pairs AS (
    SELECT rank, via, _cl_best(diff_ns, spread_ns, n) AS diff_ns, _cl_best(n, spread_ns, n) AS matched
    FROM _cl_shorth('_cl_hop_src') GROUP BY rank, via
)
SELECT p.rank, arg_max(p.diff_ns + d.diff_ns, p.matched) AS diff_ns, max(p.matched) AS matched,
       arg_max(p.via, p.matched) AS via
FROM pairs p JOIN _cl_direct d ON d.rank = p.via
GROUP BY p.rank;

CREATE OR REPLACE TEMP TABLE rank_clock AS
SELECT k.rank,
       CASE WHEN d.rank IS NOT NULL THEN -round(d.diff_ns)::BIGINT
            WHEN h.rank IS NOT NULL THEN -round(h.diff_ns)::BIGINT
            ELSE 0::BIGINT END AS clock_offset_ns,
       coalesce(d.matched, h.matched, 0) AS matched,
       CASE WHEN d.rank IS NOT NULL THEN (SELECT rank FROM _cl_ref) ELSE h.via END AS via
FROM ranks k
LEFT JOIN _cl_direct d USING (rank)
LEFT JOIN _cl_hop h USING (rank)
WHERE k.run_id = getvariable('run_id');
