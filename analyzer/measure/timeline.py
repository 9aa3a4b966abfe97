"""The timeline of one step for a set of ranks: lanes, marks and exposed comm.

Runs ``sql/timeline.sql``. A lane is one rank's track (a GPU stream, or a CPU
thread on gloo traces); its marks are the compute, comm, memcpy and memset
intervals in the step's window, and ``exposed`` holds the parts of comm that no
compute of the rank covers. Lanes with too many marks to draw are merged into
busy blocks so that the result never holds much more than ``max_marks`` marks,
whatever the trace size (``aggregated`` says when).

Times in the result are milliseconds from the chart's zero. By default the ranks
are on one clock (``measure.waits``: each rank's clock offset, estimated from the
collectives they share) and the zero is the earliest window start of the shown
ranks, so a rank that starts its step late, or arrives late at a collective,
shows late. With ``aligned=False`` each rank starts at its own window start.
Lanes that run collectives say so: a GPU stream with NCCL kernels is labelled
``(NCCL)``.
"""

from __future__ import annotations

import msgspec
import pyarrow as pa

from overlapscope.analyzer import sql
from overlapscope.analyzer.measure import collectives
from overlapscope.analyzer.measure.collectives import Collective
from overlapscope.analyzer.units import NS_PER_MS, ms as _ms

MAX_MARKS = 2000  # about what a browser chart draws without lag

_ATTR_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("event_id", pa.int64()), ("coll_kind", pa.string()), ("coll_id", pa.string()),
    ("phase", pa.string()), ("collective", pa.string()), ("bytes", pa.int64()),
    ("coll_comm_ns", pa.int64()), ("coll_exposed_ns", pa.int64()),
])
_MARK_KINDS = ("compute", "comm", "memcpy", "memset")


def steps(con, run_id: int) -> list[dict]:
    """The run's steps that have a device window: step, ranks, longest window (ms)."""
    return [{"step": r["step"], "ranks": r["ranks"], "window_ms": _ms(r["window_ns"])}
            for r in sql.rows(con, "timeline.steps", run_id=run_id)]


def attribution_table(rows: list[Collective]) -> pa.Table:
    """Collectives as timeline.sql's input ``timeline_attribution`` (their order kept)."""
    def ns(value_ms):
        return None if value_ms is None else round(value_ms * NS_PER_MS)

    return pa.Table.from_pydict({
        "rank": [r.rank for r in rows],
        "event_id": [r.event_id for r in rows],
        "coll_kind": [r.kind for r in rows],
        "coll_id": [None if r.id is None else str(r.id) for r in rows],
        "phase": [r.phase for r in rows],
        "collective": [r.collective for r in rows],
        "bytes": [r.bytes for r in rows],
        "coll_comm_ns": [ns(r.comm_ms) for r in rows],
        "coll_exposed_ns": [ns(r.exposed_ms) for r in rows],
    }, schema=_ATTR_SCHEMA)


ATTRIBUTION_ROWS_PER_GROUP = 5_000  # rows of one Parquet row group: a few ranks' collectives, skipped by rank


def attribution_chunks(rows: list[Collective]):
    """``attribution_table`` of ``rows`` a row group at a time (ingest streams it into the run
    store: a 1,024-rank run's 2.07 million rows never as one table)."""
    for i in range(0, max(1, len(rows)), ATTRIBUTION_ROWS_PER_GROUP):  # no collective: an empty table
        yield attribution_table(rows[i:i + ATTRIBUTION_ROWS_PER_GROUP])
        collectives.release(rows)  # a group's pages of mapped columns (measure.mapped)


def _attribution_table(attribution: list[Collective], ranks: set[int]) -> pa.Table:
    """The collectives of the shown ranks, as timeline.sql's input ``timeline_attribution``."""
    return attribution_table([r for r in attribution if r.rank in ranks])


def stored_attribution_table(info, ranks: list[int]) -> pa.Table | None:
    """A stored run's attribution of ``ranks`` as ingest wrote it (columns, the rows of these
    ranks only: 4 ranks of a 256-rank run in milliseconds, where decoding the run's 517,120
    collectives took 0.6 s and held them in memory); None for a run stored before it was kept."""
    from overlapscope.analyzer.store import runstore

    table = runstore.read_attribution(info.run_dir, ranks)
    return None if table is None else table.select(_ATTR_SCHEMA.names).cast(_ATTR_SCHEMA)


class _StoredCollectives(msgspec.Struct):
    """The part of a stored ``buckets`` document the timeline reads (the rest is skipped)."""

    collectives: list[Collective]


def stored_attribution(info) -> list[Collective] | None:
    """A stored run's collectives as ingest attributed them (its ``buckets`` analysis),
    decoded straight into ``Collective`` rows: 0.9 s for a 256-rank run's 517,120 rows
    against 2.3 s decoded into dicts and converted (the Timeline's first visit)."""
    from overlapscope.analyzer.store import runstore

    data = runstore.read_document_bytes(info.run_dir, "buckets")
    if data is None:
        return None
    return msgspec.json.decode(data, type=_StoredCollectives).collectives


def _attribution_of(con, info, shown: list[int], attribution: list[Collective] | None) -> pa.Table:
    """timeline.sql's ``timeline_attribution`` for the ``shown`` ranks: the caller's rows; else a
    stored run's columns of those ranks (a run stored before they were kept: its buckets
    document's rows); else the collectives computed here."""
    if attribution is None and info.stored:
        table = stored_attribution_table(info, shown)
        if table is not None:
            return table
        attribution = stored_attribution(info)
    if attribution is None:
        from overlapscope.analyzer.measure import collectives

        attribution = collectives.compute(con, info)
    return _attribution_table(attribution, set(shown))


def _read_stored(con, info, step: int, ranks: list[int]) -> None:
    """A stored run's rows for this timeline, from its run store: the shown ranks' events in
    the step's window and their tracks (Parquet, read in place), and the clock offsets
    ingest estimated; the timeline then reads them as it reads a store of every event."""
    from overlapscope.analyzer.store import runstore

    start, end = sql.one(con, "store.window_of_step", run_id=info.run_id, step=step, ranks=ranks) or (None, None)
    events = runstore.raw_files(info.run_dir, "events", ranks)
    tracks = runstore.raw_files(info.run_dir, "tracks", ranks)
    if start is None or not events:
        start, end, events = 0, 0, events or runstore.raw_files(info.run_dir, "events")[:1]
    con.execute(sql.query("store.stored_events"), {"run_id": info.run_id, "files": events, "from_ns": start,
                                                   "to_ns": end})
    con.execute(sql.query("store.stored_tracks"), {"run_id": info.run_id, "files": tracks or events[:0] or
                                                   runstore.raw_files(info.run_dir, "tracks")[:1]})
    con.execute(sql.query("store.stored_clock"), {"run_id": info.run_id})
    sql.mark_done(con, "instances", run_id=info.run_id)
    sql.mark_done(con, "clocks", run_id=info.run_id)


def _mark(row: dict, lane: str) -> dict:
    return {
        "rank": row["rank"], "track_id": row["track_id"], "lane": lane, "kind": row["kind"],
        "name": row["name"], "event_id": row["event_id"], "marks": row["marks"],
        "start_ms": _ms(row["start_rel_ns"]), "end_ms": _ms(row["end_rel_ns"]),
        "dur_ms": _ms(row["end_rel_ns"] - row["start_rel_ns"]), "busy_ms": _ms(row["busy_ns"]),
        # the collectives analysis (comm and exposed marks that were not merged)
        "coll_kind": row["coll_kind"], "coll_id": row["coll_id"], "phase": row["phase"],
        "collective": row["collective"], "bytes": row["bytes"],
        "coll_comm_ms": _ms(row["coll_comm_ns"]), "coll_exposed_ms": _ms(row["coll_exposed_ns"]),
    }


def lane_label(rank: int, track: str, nccl: bool = False) -> str:
    """How a lane is named in the result and on charts (a GPU stream running NCCL kernels says so)."""
    return f"r{rank} · {track}" + (" (NCCL)" if nccl else "")


def thread_name(lane: dict) -> str:
    """A CPU lane named for what its thread does, not by its id: the process's main thread
    (tid = pid), PyTorch's autograd threads, the comm backend's threads (gloo's runloops);
    other threads keep the profiler's name. GPU streams keep theirs ("stream 7")."""
    name = lane["track"] or ""
    if lane["track_kind"] == "comm_thread":  # the threads the comm backend runs its transfers on
        return "comm thread"
    if lane["track_kind"] != "cpu_thread":
        return name
    if lane.get("tid") is not None and lane.get("tid") == lane.get("pid"):
        return "main thread"
    if "pt_autograd" in name:
        return "autograd thread"
    return name


def _lane_labels(lanes: list[dict]) -> dict:
    """Each lane's label, unique within its rank (two threads of one role get their tid)."""
    names = {(r["rank"], r["track_id"]): thread_name(r) for r in lanes}
    seen: dict[tuple, int] = {}
    for (rank, _), name in names.items():
        seen[(rank, name)] = seen.get((rank, name), 0) + 1
    out = {}
    for r in lanes:
        key = (r["rank"], r["track_id"])
        name = names[key]
        if seen[(r["rank"], name)] > 1 and r["track_kind"] != "gpu_stream":
            name = f"{name} (tid {r.get('tid')})"
        out[key] = lane_label(r["rank"], name, _is_nccl(r))
    return out


def _is_nccl(lane: dict) -> bool:
    return lane["track_kind"] == "gpu_stream" and bool(lane.get("has_comm"))


def timeline(con, run_id: int, step: int, ranks: list[int] | None = None,
             attribution: list[Collective] | None = None, max_marks: int = MAX_MARKS,
             aligned: bool = True) -> dict:
    """Lanes, marks and exposed comm of ``step`` on ``ranks`` (all ranks when None).

    ``attribution``: the rows of ``collectives.compute`` when the caller has them;
    otherwise a stored run's are read for ``ranks`` from its run store, and any other
    run's computed here. Returns ``windows`` (per
    rank: window, compute, comm and exposed comm in it, ms), ``lanes``, ``marks``
    (kind compute/comm/memcpy/memset) and ``exposed`` (pieces of comm no compute
    covers), each mark with ``start_ms``/``end_ms`` from the chart's zero (the earliest
    window start on the common clock; with ``aligned=False``, its rank's window start),
    ``marks`` (1, or how many a busy block merged), ``busy_ms`` and, for comm, the
    bucket or unit (``coll_kind``, ``coll_id``, ``phase``), ``bytes`` and the
    collective's comm and exposed ms.
    """
    from overlapscope.analyzer.store.runinfo import run_info

    if max_marks < 1:
        raise ValueError(f"max_marks must be >= 1, got {max_marks}")
    info = run_info(con, run_id)
    if ranks is None:
        ranks = [r[0] for r in sql.tuples(con, "timeline.ranks", run_id=run_id)]
    shown = sorted({int(r) for r in ranks})
    if info.stored:
        info.require_events()
        _read_stored(con, info, int(step), shown)
    con.register("timeline_attribution", _attribution_of(con, info, shown, attribution))  # the script's input
    try:
        sql.ensure(con, "timeline", run_id=run_id, step=int(step), ranks=shown, max_marks=int(max_marks),
                   aligned=bool(aligned))
    finally:
        con.unregister("timeline_attribution")
    raw = sql.one(con, "timeline.raw_marks")[0]
    lanes = sql.rows(con, "timeline.lanes")
    labels = _lane_labels(lanes)
    drawn = sql.rows(con, "timeline.marks")
    marks = [_mark(r, labels[(r["rank"], r["track_id"])]) for r in drawn]
    windows = [{"rank": w["rank"], "start_ns": w["start_ns"], "end_ns": w["end_ns"],
                "clock_offset_ms": _ms(w["offset_ns"]), "start_ms": _ms(w["start_rel_ns"]),
                "end_ms": _ms(w["end_rel_ns"]),
                "window_ms": _ms(w["window_ns"]), "compute_ms": _ms(w["compute_ns"]),
                "comm_ms": _ms(w["comm_ns"]), "exposed_ms": _ms(w["exposed_ns"])}
               for w in sql.rows(con, "timeline.summary")]
    return {
        "run_id": run_id, "step": int(step), "ranks": shown, "aligned": bool(aligned),
        "windows": windows,
        "lanes": [{**r, "lane": labels[(r["rank"], r["track_id"])]} for r in lanes],
        "marks": [m for m in marks if m["kind"] in _MARK_KINDS],
        "exposed": [m for m in marks if m["kind"] == "exposed"],
        "raw_marks": raw, "drawn_marks": len(marks), "max_marks": max_marks,
        "aggregated": any(m["marks"] > 1 for m in marks) or len(marks) < raw,
    }
