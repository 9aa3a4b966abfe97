"""Facts the checklist reads beyond the buckets context, each one named SQL query."""

from __future__ import annotations

from overlapscope.analyzer.ingest.classify import NORM_OPS
from overlapscope.analyzer.checklist.findings import t

# Device idle gaps per step, and the part of them spent waiting for the host: a
# gap before a device event that starts within launch_gap of its own launch.
SQL_IDLE = """
WITH d AS (
    SELECT rank, step, ts_ns, ts_ns + dur_ns AS end_ns, launch_ts_ns
    FROM events WHERE run_id = $run AND dur_ns > 0 AND kind IN ('compute', 'comm', 'memcpy', 'memset')
), g AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM d
)
SELECT rank, step,
       coalesce(sum(ts_ns - prev_end_ns) FILTER (WHERE ts_ns > prev_end_ns), 0) AS idle_ns,
       coalesce(sum(ts_ns - prev_end_ns) FILTER (WHERE ts_ns > prev_end_ns AND launch_ts_ns IS NOT NULL
                                                 AND ts_ns - launch_ts_ns < $gap_ns), 0) AS host_idle_ns
FROM g WHERE step IS NOT NULL
GROUP BY rank, step
"""

SQL_FLOPS = """
SELECT rank, step, sum(flops) AS flops
FROM events WHERE run_id = $run AND flops > 0 AND step IS NOT NULL
GROUP BY rank, step
"""

SQL_NORMS = """
SELECT rank, step, count(*) AS norms
FROM events WHERE run_id = $run AND step IS NOT NULL AND list_contains($names, name)
GROUP BY rank, step
"""

SQL_RANKS = """
SELECT rank, hostname, device_memory_bytes, device_names FROM ranks WHERE run_id = $run ORDER BY rank
"""


def _rows(con, sql: str, params: dict) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def extra(con, run_id: int, ctx: dict) -> dict:
    return {
        "idle": _rows(con, SQL_IDLE, {"run": run_id, "gap_ns": int(t("launch_gap_us") * 1000)}),
        "flops": _rows(con, SQL_FLOPS, {"run": run_id}),
        "norms": _rows(con, SQL_NORMS, {"run": run_id, "names": sorted(NORM_OPS)}),
        "ranks": _rows(con, SQL_RANKS, {"run": run_id}),
    }
