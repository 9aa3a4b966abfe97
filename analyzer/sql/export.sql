-- params: run_id
-- scope: rank
-- provides: export_exposed
--
-- What `overlapscope export --perfetto` draws on each rank's "exposed comm" track:
-- the rank's comm that no compute of the rank covers (docs/definitions.md, "exposed
-- comm"; overlap.sql's exposed comm, as intervals), merged into islands.
--
--   export_exposed   rank, ts_ns, end_ns (the rank's own trace clock)

CREATE OR REPLACE TEMP TABLE _ex_src AS
SELECT rank AS grp, ts_ns, ts_ns + dur_ns AS end_ns, CASE WHEN kind = 'comm' THEN 0 ELSE 1 END AS layer
FROM events
WHERE run_id = getvariable('run_id') AND kind IN ('comm', 'compute') AND dur_ns > 0;

CREATE OR REPLACE TEMP TABLE _ex_pieces AS
SELECT grp, ts_ns, end_ns FROM interval_sweep('_ex_src') WHERE n0 > 0 AND n1 = 0;

CREATE OR REPLACE TEMP TABLE export_exposed AS
SELECT grp AS rank, ts_ns, end_ns FROM interval_union('_ex_pieces');

-- us_text(ns): ns as exact decimal microseconds, the Chrome trace format's unit.
CREATE OR REPLACE TEMP MACRO us_text(ns) AS
    CASE WHEN ns < 0 THEN '-' ELSE '' END || (abs(ns) // 1000)::VARCHAR || '.'
    || lpad((abs(ns) % 1000)::VARCHAR, 3, '0');
