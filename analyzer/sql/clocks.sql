-- params: run_id
-- scope: run
-- requires: instances
-- provides: rank_clock
--
-- Ranks on one clock. Every host has its own clock (hosts differ by micro- to
-- milliseconds); the ranks of one host read the same one. The ranks of a collective
-- leave it at nearly the same moment (the last one to arrive releases all of them),
-- so the end of one collective instance is a common instant: a host's offset from
-- the reference rank's host is the typical difference of end times over the
-- instances its ranks share with the reference host's ranks (the median of the
-- tightest half, _cl_shorth: it ignores instances matched wrongly or left late). A
-- trace that names no host is a clock of its own. Per-rank figures never read these
-- tables: only comparisons between ranks do (waits.sql, the timeline). It reads
-- instances.sql's comm_instance: the one table of every rank's transfers this needs.
--
--   rank_clock     one row per loaded rank: clock_offset_ns (add it to the rank's times
--                  to put them on the reference rank's clock), matched (instances the
--                  estimate rests on), via (the clock it was matched against: the
--                  reference's, or, for a host that shares no collective with it (the
--                  other replica group of a 2-D mesh), the placed host it shares the most
--                  with), basis ('reference', 'same host': offset 0 by construction,
--                  'collectives': estimated, 'none': nothing shared, offset 0). Two
--                  ranks are compared only when they share a process group: when the
--                  traces' distributedInfo.pg_config lists groups smaller than the world
--                  (a 2-D mesh), ranks in no common smaller group run no collective
--                  together, whatever their transfers' names say.

-- _cl_shorth(src): per pair of clocks (unit, via) and class of collective (cls: the
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
    SELECT unit, via, cls, d, row_number() OVER (PARTITION BY unit, via, cls ORDER BY d) AS k,
           count(*) OVER (PARTITION BY unit, via, cls) AS n
    FROM query_table(src)
), w AS (
    SELECT a.unit, a.via, a.cls, a.n, a.k, b.d - a.d AS width
    FROM s a JOIN s b ON b.unit = a.unit AND b.via = a.via AND b.cls = a.cls AND b.k = a.k + a.n // 2
), best AS (
    SELECT unit, via, cls, any_value(n) AS n, arg_min(k, struct_pack(w := width, k := k)) AS k0,
           min(width) AS spread_ns
    FROM w GROUP BY unit, via, cls
)
SELECT b.unit, b.via, b.cls, b.n, b.spread_ns, median(s.d) AS diff_ns
FROM best b JOIN s ON s.unit = b.unit AND s.via = b.via AND s.cls = b.cls AND s.k BETWEEN b.k0 AND b.k0 + b.n // 2
GROUP BY b.unit, b.via, b.cls, b.n, b.spread_ns;

-- _cl_best: of a pair's classes, the tightest with 3 instances or more (else the tightest);
-- classes as tight as each other: the one of the smallest class hash (a fixed choice).
CREATE OR REPLACE TEMP MACRO _cl_best(value, spread_ns, n, cls) AS
    coalesce(arg_min(value, struct_pack(s := spread_ns, c := cls)) FILTER (WHERE n >= 3),
             arg_min(value, struct_pack(s := spread_ns, c := cls)));

-- _cl_clock: each rank's clock: its host's (the ranks of one host read one system
-- clock), or its own where the trace names no host. Offsets are estimated per clock,
-- from every instance its ranks share with the reference clock's ranks.
CREATE OR REPLACE TEMP TABLE _cl_clock AS
SELECT rank, coalesce('host ' || hostname, 'rank ' || rank) AS clock
FROM ranks WHERE run_id = getvariable('run_id');

-- the reference: the lowest loaded rank and its clock (variables, not a table: a scalar
-- subquery in each statement below cost more to plan than the statement took to run)
SET VARIABLE _cl_ref_rank = (SELECT min(rank) FROM _cl_clock);
SET VARIABLE _cl_ref_clock = (SELECT clock FROM _cl_clock WHERE rank = getvariable('_cl_ref_rank'));

CREATE OR REPLACE TEMP TABLE _cl_inst AS
SELECT i.rank, i.ikey, i.cls, i.end_ns, c.clock FROM comm_instance i JOIN _cl_clock c USING (rank);

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

-- _cl_direct: clocks sharing instances with the reference clock: the median end
-- difference of the tightest class.
CREATE OR REPLACE TEMP TABLE _cl_direct_src AS
SELECT r.clock AS unit, f.clock AS via, r.cls, r.end_ns - f.end_ns AS d
FROM _cl_inst r
JOIN _cl_inst f ON f.ikey = r.ikey AND f.clock = getvariable('_cl_ref_clock')
JOIN _cl_pairs p ON p.a = r.rank AND p.b = f.rank
WHERE r.clock <> getvariable('_cl_ref_clock');
CREATE OR REPLACE TEMP TABLE _cl_direct AS
SELECT unit AS clock, _cl_best(diff_ns, spread_ns, n, cls) AS diff_ns, _cl_best(n, spread_ns, n, cls) AS matched
FROM _cl_shorth('_cl_direct_src') GROUP BY unit;

-- _cl_hop: the other clocks, through the placed clock they share the most instances with.
-- Their instances are picked first (_cl_unplaced: none, where every clock is placed
-- directly): DuckDB filtered them only after joining every rank of an instance with every
-- other, a join quadratic in the ranks (256 ranks of the reference trace: 3.7 s for an
-- empty result, 1,024 ranks: 40 s; measured).
CREATE OR REPLACE TEMP TABLE _cl_unplaced AS
SELECT * FROM _cl_inst
WHERE clock <> getvariable('_cl_ref_clock') AND clock NOT IN (SELECT clock FROM _cl_direct);
CREATE OR REPLACE TEMP TABLE _cl_hop_src AS
SELECT r.clock AS unit, x.clock AS via, r.cls, r.end_ns - x.end_ns AS d
FROM _cl_unplaced r
JOIN _cl_inst x ON x.ikey = r.ikey AND x.clock IN (SELECT clock FROM _cl_direct)
JOIN _cl_pairs q ON q.a = r.rank AND q.b = x.rank;
CREATE OR REPLACE TEMP TABLE _cl_hop AS
WITH pairs AS (
    SELECT unit, via, _cl_best(diff_ns, spread_ns, n, cls) AS diff_ns, _cl_best(n, spread_ns, n, cls) AS matched
    FROM _cl_shorth('_cl_hop_src') GROUP BY unit, via
)
SELECT p.unit AS clock, arg_max(p.diff_ns + d.diff_ns, struct_pack(m := p.matched, v := p.via)) AS diff_ns,
       max(p.matched) AS matched, arg_max(p.via, struct_pack(m := p.matched, v := p.via)) AS via
FROM pairs p JOIN _cl_direct d ON d.clock = p.via
GROUP BY p.unit;

CREATE OR REPLACE TEMP TABLE rank_clock AS
SELECT c.rank,
       CASE WHEN d.clock IS NOT NULL THEN -round(d.diff_ns)::BIGINT
            WHEN h.clock IS NOT NULL THEN -round(h.diff_ns)::BIGINT
            ELSE 0::BIGINT END AS clock_offset_ns,
       coalesce(d.matched, h.matched, 0) AS matched,
       CASE WHEN c.clock = getvariable('_cl_ref_clock') THEN getvariable('_cl_ref_clock')
            WHEN d.clock IS NOT NULL THEN getvariable('_cl_ref_clock') ELSE h.via END AS via,
       CASE WHEN c.rank = getvariable('_cl_ref_rank') THEN 'reference'
            WHEN c.clock = getvariable('_cl_ref_clock') THEN 'same host'
            WHEN d.clock IS NOT NULL OR h.clock IS NOT NULL THEN 'collectives'
            ELSE 'none' END AS basis
FROM _cl_clock c
LEFT JOIN _cl_direct d USING (clock)
LEFT JOIN _cl_hop h USING (clock);
