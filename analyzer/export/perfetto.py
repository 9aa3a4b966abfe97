"""``overlapscope export --perfetto``: a run as one Chrome-trace JSON for Perfetto and chrome://tracing.

One process per rank (pid = the rank), every event of every rank on the run's common
clock (each rank's clock offset added, measure.waits), and tracks the raw traces lack,
in each rank's process (category ``overlapscope``):

- ``overlapscope: exposed comm``: the rank's comm that no compute covers, as slices;
- ``overlapscope: collectives``: each collective with its DDP bucket or FSDP unit and
  phase, bytes, comm and exposed time;
- ``overlapscope: steps``: each step's window with its figures;
- ``overlapscope: findings``: the checklist's failed and warned findings as instant
  events at the steps they cite (the first step when they cite none).

The file starts with an ``overlapscope_export`` object (format, ranks with their
Kineto facts, the manifest) so that overlapscope's loader reads it back as the
ranks it came from (ingest/exported.py). Each rank's events are written by DuckDB
from the rank's raw tables (one rank in memory at a time); times are exact decimal
microseconds from the earliest window start.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import msgspec

from overlapscope.analyzer import sql, version
from overlapscope.analyzer.errors import UsageError

FORMAT = "overlapscope-perfetto/1"
CATEGORY = "overlapscope"
# tids of the added tracks, above any track id of a rank (track ids count from 0)
TRACKS = {"exposed": 1_000_001, "collectives": 1_000_002, "steps": 1_000_003, "findings": 1_000_004}
TRACK_NAMES = {"exposed": "overlapscope: exposed comm", "collectives": "overlapscope: collectives",
               "steps": "overlapscope: steps", "findings": "overlapscope: findings"}


def _us(ns: int) -> str:
    """Exact decimal microseconds (the events' unit)."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _slice(pid: int, track: str, ts_ns: int, dur_ns: int, name: str, args: dict | None = None) -> str:
    line = (f'{{"ph":"X","pid":{pid},"tid":{TRACKS[track]},"ts":{_us(ts_ns)},"dur":{_us(max(0, dur_ns))},'
            f'"name":{msgspec.json.encode(name).decode()},"cat":"{CATEGORY}"')
    if args:
        line += ',"args":' + msgspec.json.encode(args).decode()
    return line + "}"


def _instant(pid: int, track: str, ts_ns: int, name: str, args: dict) -> str:
    return (f'{{"ph":"i","s":"t","pid":{pid},"tid":{TRACKS[track]},"ts":{_us(ts_ns)},'
            f'"name":{msgspec.json.encode(name).decode()},"cat":"{CATEGORY}","args":'
            + msgspec.json.encode(args).decode() + "}")


def _metadata(pid: int, rank: int, hostname: str | None) -> list[str]:
    name = f"rank {rank}" + (f" ({hostname})" if hostname else "")
    out = [f'{{"ph":"M","pid":{pid},"name":"process_name","args":{{"name":{msgspec.json.encode(name).decode()}}}}}',
           f'{{"ph":"M","pid":{pid},"name":"process_sort_index","args":{{"sort_index":{rank}}}}}']
    for key, tid in TRACKS.items():
        out.append(f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_name","args":{{"name":'
                   f'"{TRACK_NAMES[key]}"}}}}')
    return out


def _cited_steps(finding: dict, steps: list[int]) -> list[int]:
    """The steps a finding's details name (``steps``, ``step``, ``worst_step``), else the first."""
    d = finding.get("details") or {}
    cited = []
    for key in ("steps", "step", "worst_step", "slowest_step"):
        v = d.get(key)
        values = v if isinstance(v, list) else [v]
        cited += [int(x) for x in values if isinstance(x, int) and not isinstance(x, bool) and x in steps]
    return sorted(set(cited)) or steps[:1]


def write(out_path: str, ranks: list, meta: dict, offsets: dict[int, int], windows: dict,
          collectives, findings: list[dict], on_rank=None) -> dict:
    """Write the export; returns counts (ranks, events, exposed slices, collectives, findings).

    ``ranks``: one callable per rank returning (connection, run id, rank) of a store that
    holds the rank's raw ``events`` and ``tracks`` (one rank in memory at a time);
    ``meta``: the run's ``describe()`` and the ranks' Kineto facts; ``offsets``: clock
    offset ns per rank; ``windows``: {rank: [(step, start_ns, end_ns, figures)]} on the
    rank's clock; ``collectives``: measure.collectives rows; ``findings``: diagnose's.
    """
    path = Path(out_path)
    if path.exists() and path.is_dir():
        raise UsageError(f"{out_path}: is a directory (give a file name ending in .json or .json.gz)")
    if not (path.name.endswith(".json") or path.name.endswith(".json.gz")):
        raise UsageError(f"{out_path}: the export is a .json or .json.gz file")
    starts = [w[1] + offsets.get(r, 0) for r, ws in windows.items() for w in ws]
    zero_ns = min(starts) if starts else 0
    tmp = path.with_name(path.name + f".part-{os.getpid()}")
    counts = {"ranks": 0, "events": 0, "flows": 0, "exposed_slices": 0, "collectives": 0, "findings": 0}
    header = {"format": FORMAT, "version": version(), "zero_ns": zero_ns, "run": meta["run"],
              "ranks": meta["ranks"], "manifest": meta.get("manifest")}
    opener = gzip.open if path.name.endswith(".gz") else open
    by_rank: dict[int, list] = {}
    for c in collectives:
        if c.step is not None:
            by_rank.setdefault(c.rank, []).append(c)
    cited_findings = [f for f in findings if f.get("status") in ("fail", "warn")]
    try:
        with opener(tmp, "wt", encoding="utf-8") as out:
            out.write('{"overlapscope_export":' + msgspec.json.encode(header).decode()
                      + ',"displayTimeUnit":"ms","traceEvents":[\n')
            first = True

            def emit(lines) -> None:
                nonlocal first
                for line in lines:
                    out.write(line if first else ",\n" + line)
                    first = False

            for open_store in ranks:
                con, run_id, rank = open_store()
                pid, offset = rank, offsets.get(rank, 0)
                emit(_metadata(pid, rank, next((x.get("hostname") for x in meta["ranks"] if x["rank"] == rank),
                                               None)))
                try:
                    params = {"pid": pid, "offset_ns": offset, "zero_ns": zero_ns}
                    sql.ensure(con, "export", run_id=run_id)
                    emit(row[0] for row in con.execute(sql.query("export.track_lines"), {"pid": pid}).fetchall())
                    cur = con.execute(sql.query("export.event_lines"), params)
                    while batch := cur.fetchmany(50_000):
                        counts["events"] += len(batch)
                        emit(row[0] for row in batch)
                    cur = con.execute(sql.query("export.flow_lines"), params)
                    while batch := cur.fetchmany(50_000):
                        counts["flows"] += len(batch)
                        emit(row[0] for row in batch)
                    exposed = con.execute(sql.query("export.exposed")).fetchall()
                finally:
                    con.close()
                emit(_slice(pid, "exposed", ts + offset - zero_ns, end - ts, "exposed comm",
                            {"exposed_ms": round((end - ts) / 1e6, 6)}) for ts, end in exposed)
                counts["exposed_slices"] += len(exposed)
                for c in by_rank.get(rank, []):
                    label = f"{'bucket ' + str(c.id) if c.kind == 'ddp_bucket' else (c.id or '<root>')} {c.phase}" \
                        if c.kind != "other" else f"{c.phase}"
                    emit([_slice(pid, "collectives", c.start_ns + offset - zero_ns, round(c.comm_ms * 1e6), label,
                                 {"kind": c.kind, "id": c.id, "phase": c.phase, "collective": c.collective,
                                  "bytes": c.bytes, "step": c.step, "microbatch": c.microbatch,
                                  "comm_ms": c.comm_ms, "exposed_ms": c.exposed_ms,
                                  "predicted_comm_ms": c.predicted_comm_ms,
                                  "predicted_exposed_ms": c.predicted_exposed_ms})])
                    counts["collectives"] += 1
                mine = windows.get(rank, [])
                emit(_slice(pid, "steps", s + offset - zero_ns, e - s, f"step {step}", {"step": step, **figures})
                     for step, s, e, figures in mine)
                start_of = {step: s for step, s, _, _ in mine}
                for f in cited_findings:
                    for step in _cited_steps(f, sorted(start_of)):
                        emit([_instant(pid, "findings", start_of[step] + offset - zero_ns,
                                       f"{f['status']}: {f['id']}",
                                       {"title": f["title"], "evidence": f["evidence"], "fix": f["fix"],
                                        "impact_ms": f.get("impact_ms"),
                                        "predicted_gain_ms": f.get("predicted_gain_ms"), "step": step})])
                        counts["findings"] += 1
                counts["ranks"] += 1
                if on_rank:
                    on_rank(counts["ranks"], len(ranks))
            out.write("\n]}\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return counts
