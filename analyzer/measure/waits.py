"""Ranks on one clock, and comm split into waiting for peers and transfer.

Runs ``sql/clocks.sql`` (each rank's clock offset, estimated from the ends of
the collectives it shares with the reference rank) and ``sql/waits.sql`` (per
transfer, the duration on the rank that arrived last is the transfer; the rest
is waiting). Only comparisons between ranks use the offsets: per-rank figures
are on each rank's own clock and never change with them.
"""

from __future__ import annotations

from typing import NamedTuple

from overlapscope.analyzer import sql
from overlapscope.analyzer.units import ms


def ensure(con, run_id: int) -> None:
    sql.ensure(con, "waits", run_id=run_id)


def _alone(con, run_id: int) -> int | None:
    """The one rank of a run of one loaded rank (nothing to compare it with), else None."""
    loaded = sql.tuples(con, "timeline.ranks", run_id=run_id)
    return loaded[0][0] if len(loaded) == 1 else None


def peered(con, run_id: int) -> bool:
    """Whether more than one rank is loaded: only then has a transfer peers to wait for."""
    return _alone(con, run_id) is None


def ranks(con, run_id: int) -> dict[int, dict]:
    """Per rank: clock_offset_ms and, where another loaded rank shares its collectives,
    comm_wait_ms, comm_transfer_ms (they add up to comm_ms) and exposed_wait_ms. A run of
    one loaded rank has no other to compare with: the reference clock, no peer (what the
    SQL gives it, without running it)."""
    alone = _alone(con, run_id)
    if alone is not None:
        return {alone: {"clock_offset_ms": 0.0, "comm_wait_ms": None, "comm_transfer_ms": None,
                        "exposed_wait_ms": None, "last_arrivals": 0, "peered": 0, "matched": 0}}
    ensure(con, run_id)
    out = {}
    for r in sql.rows(con, "waits.ranks"):
        peered = r["peered"] > 0
        out[r["rank"]] = {
            "clock_offset_ms": ms(r["clock_offset_ns"]),
            "comm_wait_ms": ms(r["wait_ns"]) if peered else None,
            "comm_transfer_ms": ms(r["transfer_ns"]) if peered else None,
            "exposed_wait_ms": ms(r["exposed_wait_ns"]) if peered else None,
            "last_arrivals": r["last_arrivals"], "peered": r["peered"], "matched": r["matched"],
        }
    return out


def steps(con, run_id: int) -> list[dict]:
    """Per rank and step with comm: wait_ms and exposed_wait_ms (wall clock, concurrent
    collectives counted once), with the instances it shared and arrived last at."""
    ensure(con, run_id)
    arrivals = {(a["rank"], a["step"]): a for a in sql.rows(con, "waits.arrivals")}
    out = []
    for s in sql.rows(con, "waits.steps"):
        a = arrivals.get((s["rank"], s["step"]), {"peered": 0, "last_arrivals": 0})
        out.append({"rank": s["rank"], "step": s["step"], "wait_ms": ms(s["wait_ns"]),
                    "exposed_wait_ms": ms(s["exposed_wait_ns"]), "peered": a["peered"],
                    "last_arrivals": a["last_arrivals"]})
    return out


def clock_offsets_ns(con, run_id: int) -> dict[int, int]:
    """Each rank's clock offset (ns to add to its times to put them on the common clock)."""
    sql.ensure(con, "clocks", run_id=run_id)
    return {r["rank"]: r["clock_offset_ns"] for r in sql.rows(con, "waits.clock")}


class Lane(NamedTuple):
    """A DDP bucket or FSDP unit transfer as the what-if engine replays it (sql/lanes.sql)."""

    lane_ts_ns: int  # where its piece of the rank's comm lane starts (it ends with the transfer)
    lane_ns: int  # the piece's length
    hidden_ns: int  # the rank's compute inside the piece
    wait_ns: int  # the first wait_ns of its span it waited for its peers
    last_rank: int | None = None  # the rank that arrived last (None: no peer loaded)
    lead_ns: int = 0  # of the wait, what the last rank alone caused (it arrived this long after every other)


def lanes(con, run_id: int) -> dict[tuple[int, int], Lane]:
    """Per (rank, event_id) of each DDP bucket and FSDP unit transfer in a step: its Lane."""
    sql.ensure(con, "lanes", run_id=run_id)
    return {(r, e): Lane(ts, n, h, w, last, lead) for r, e, ts, n, h, w, last, lead in sql.tuples(con, "waits.lanes")}
