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
from overlapscope.analyzer.measure.blocks import EVENT_ID_BITS, key_index
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


_LANE_COLUMNS = ("lane_ts_ns", "lane_ns", "hidden_ns", "wait_ns", "last_rank", "lead_ns")


class Lanes:
    """The run's ``Lane`` per DDP bucket and FSDP unit transfer, as NumPy columns in key order,
    with each row of the run's collectives' table (a ``measure.collectives.Collectives``)
    pointing at its lane (int32, -1: none). ``of(row)`` reads one. A dict of (rank, event_id)
    to a ``Lane`` took about 360 bytes a transfer (26 MiB for a 64-rank DDP run of 73 thousand
    bucket all-reduces, measured); this takes 56, and 4 a row of the table."""

    def __init__(self, columns: dict, table, row_lane):
        self.columns, self.table, self.row_lane = columns, table, row_lane

    def __len__(self) -> int:
        return len(self.columns["key"])

    def of(self, row) -> Lane | None:
        """The lane of one collective: a row of the table, or any object with ``rank`` and
        ``event_id`` (found by its key); None where it has none."""
        if getattr(row, "table", None) is self.table and self.row_lane is not None:
            k = int(self.row_lane[row.index])
        else:
            k = self._find((row.rank << EVENT_ID_BITS) | row.event_id)
        if k < 0:
            return None
        ts, n, hidden, wait, last, lead = (int(self.columns[c][k]) for c in _LANE_COLUMNS)
        return Lane(ts, n, hidden, wait, None if last < 0 else last, lead)

    def _find(self, key: int) -> int:
        import numpy as np

        keys = self.columns["key"]
        k = int(np.searchsorted(keys, key))
        return k if k < len(keys) and keys[k] == key else -1


def lanes(con, run_id: int, table) -> Lanes:
    """Each DDP bucket and FSDP unit transfer's ``Lane`` (sql/lanes.sql), found for the rows of
    ``table`` (the run's ``Collectives``) by their (rank, event_id), a block of whole ranks at a time."""
    import numpy as np

    sql.ensure(con, "lanes", run_id=run_id)
    found = con.execute(sql.query("waits.lanes"), {"event_id_bits": EVENT_ID_BITS}).fetchnumpy()
    columns = {name: np.asarray(found[name], dtype=np.int64) for name in ("key", *_LANE_COLUMNS)}
    if not len(columns["key"]):
        return Lanes(columns, table, None)  # no bucket or unit transfer: no row has a lane
    return Lanes(columns, table, key_index(columns["key"], table.numpy("rank"), table.numpy("event_id")))
