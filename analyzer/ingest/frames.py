"""One trace file's events as columns (a Frame) for decode.py, from either decoder.

- scan (``scan.py``): the C extension ``_kineto_scan`` streams the decompressed file
  through a scanner chunk by chunk; it keeps only the events the detail reads
  (``keep_mode``, asked once per distinct phase, category and name) and their args
  where they are read, so memory follows what is kept, not the file's size;
  ``from_scan`` turns its buffers into columns.
- msgspec: a typed decode of the whole text into small structs, then the same
  selection; the fallback when the extension is not built (memory then follows
  the file's size, within the load's cap).

Both apply one set of checks (``_check``): known phases, field types, timestamps
and durations (missing, negative, non-finite or out-of-range ones drop the event,
counted by reason), and give the same Frame: tests/analyzer/ingest/test_decoders_agree.py compares
them on every trace and hostile input they take.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Callable

import msgspec
import numpy as np

from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import classify, columns as col, scan, stream
from overlapscope.analyzer.ingest.kineto import (
    FLOW_TYPES, HEADER_DECODER, TAKEN_ARGS_DECODER, TRACE_DECODER, FlowEnd, FlowStart, FlowStep, Instant, InstantUpper, Meta, Slice,
)
from overlapscope.analyzer.ingest.limits import Limits
from overlapscope.analyzer.ingest.scan import (
    FLOW_PH_CHARS, KNOWN_PH, SLICE_PH, Scanned, _kineto_scan, keep_mode, take_keys, token_value, too_much_kept,
)

_SLICE_TYPES = (Slice, Instant, InstantUpper)
_FLOW_PH = {FlowStart: "s", FlowStep: "t", FlowEnd: "f"}
_EMPTY_ARGS = b"{}"
# Timestamps: int64 ns holds 9.2e15 us (292 years from the epoch); a duration over
# 1e12 us (11.6 days) is no profiled event.
MAX_TS_US = 9.0e15
MAX_DUR_US = 1.0e12


@dataclass
class MetaEvent:
    """A metadata event (thread_name, process_name): what the track names need."""

    name: str
    pid: int | str
    tid: int | str
    args: bytes


@dataclass
class Frame:
    """One file's events as columns: the slices (ph X/i/I) that the detail keeps,
    the flows and the metadata events, and the trace's header."""

    header: object  # kineto.TraceHeader: distributedInfo, deviceProperties, ...
    n: int  # slices kept
    name_codes: np.ndarray
    names: list
    cat_codes: np.ndarray
    cats: list
    track_codes: np.ndarray
    track_keys: list  # (pid, tid) per track code
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    args: Callable[[np.ndarray], list]  # raw JSON args of the given slice rows
    args_json: Callable[[np.ndarray], bytes]  # the same, as one JSON array (for one msgspec decode)
    args_column: Callable[[np.ndarray], object]  # the same, as an Arrow string column (the stored args)
    took: "Taken"  # TAKE_KEYS' values per slice row (int64 NULL_I64 / float64 NaN / bool), read while scanning
    took_odd: np.ndarray  # per slice row: a taken value of another type (decode the row to read or refuse it)
    gpu_trace: bool
    flows: dict = field(default_factory=dict)  # _flow_columns: flow_id, cat, ph, ts_ns, track_id
    meta_events: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # events, slices, flows, ignored, dropped {reason: n}, text_replaced


_PLAIN_INT = re.compile(rb"-?(?:0|[1-9][0-9]*)")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


class Taken:
    """The values of the taken args keys (scan.TAKE_KEYS) per slice row: ``took[field]`` the
    whole column, ``took.at(field, rows)`` those rows' values. The scanner gives a column per
    key; each is gathered for the slice rows at once, and the scanner's copy goes, except
    the keys read for a few rows only (``lazy``: the allocator's values, read for its
    events), which stay as the scanner gave them and are gathered for those rows."""

    def __init__(self, columns: dict, lazy: dict | None = None, rows: np.ndarray | None = None, n: int = 0):
        self._columns = columns  # field -> its values per slice row
        self._lazy = lazy or {}  # field -> (its values per scanned row, 'i' | 'f')
        self._rows = rows  # slice row -> scanned row, for the lazy ones (None: the same row)
        self._n = n  # slice rows

    @classmethod
    def of_scan(cls, columns: list, bits: np.ndarray, rows: np.ndarray | None, keys: tuple, lazy=()) -> "Taken":
        """The scanner's columns (one per key of ``keys``) and flags, for the slice ``rows``
        (None: every scanned row, read as they are)."""
        pick = _picker(rows)
        gathered, kept = {}, {}
        for k, (field_name, _, kind) in enumerate(keys):
            if kind == "p":
                gathered[field_name] = (pick(bits) & (1 << (1 + k))) != 0
            elif field_name in lazy:
                kept[field_name] = (columns[k], kind)
            else:
                gathered[field_name] = pick(columns[k]).view(np.float64) if kind == "f" else pick(columns[k])
        return cls(gathered, kept, rows, len(bits) if rows is None else len(rows))

    def __contains__(self, field_name: str) -> bool:
        return field_name in self._columns or field_name in self._lazy

    def __getitem__(self, field_name: str) -> np.ndarray:
        if field_name in self._lazy:
            return self.at(field_name, np.arange(self._n))
        return self._columns[field_name]

    def at(self, field_name: str, rows) -> np.ndarray:
        if field_name not in self._lazy:
            return self._columns[field_name][rows]
        values, kind = self._lazy[field_name]
        values = values[rows if self._rows is None else self._rows[rows]]
        return values.view(np.float64) if kind == "f" else values


def _picker(rows: np.ndarray | None) -> Callable[[np.ndarray], np.ndarray]:
    """A column's values at ``rows``: gathered, or (None: every row) the column as it is."""
    return (lambda column: column) if rows is None else (lambda column: column[rows])


def _taken(scanned_took: list, flags: bytes, rows: np.ndarray | None, keys: tuple) -> tuple[Taken, np.ndarray]:
    """The scanner's taken values (``keys``: a column of each) of ``rows`` (None: all), and which
    rows are odd."""
    bits = np.frombuffer(flags, dtype=np.uint32)
    columns = [np.frombuffer(column, dtype=np.int64) for column in scanned_took]
    return Taken.of_scan(columns, bits, rows, keys, lazy=scan.MEMORY_TAKEN), (_picker(rows)(bits) & 1) != 0


def taken_of(raws: list, keys: tuple) -> tuple[dict, np.ndarray]:
    """``_taken`` for the msgspec decoder: the same keys of each row's raw args, read as the
    scanner reads them (one decode call; a Python step per row: this is the fallback)."""
    decoded = TAKEN_ARGS_DECODER.decode(b"[" + b",".join(raws) + b"]") if raws else []
    n = len(decoded)
    took = {f: (np.full(n, col.NULL_I64, np.int64) if k == "i" else np.full(n, np.nan) if k == "f"
                else np.zeros(n, dtype=bool)) for f, _, k in keys}
    odd = np.zeros(n, dtype=bool)
    for i, a in enumerate(decoded):
        for field_name, _, kind in keys:
            raw = bytes(getattr(a, field_name))
            if not raw:
                continue
            if kind == "p":
                took[field_name][i] = True
            elif kind == "i":
                if _PLAIN_INT.fullmatch(raw):
                    v = int(raw)
                    took[field_name][i] = v if col.NULL_I64 < v <= 2**63 - 1 else col.NULL_I64
                else:
                    odd[i] = True
            elif raw == b"null":
                took[field_name][i] = np.nan
            elif _NUMBER.fullmatch(raw):
                took[field_name][i] = float(raw)
            else:
                odd[i] = True
    return Taken(took), odd


def ts_ns(ts_us: np.ndarray) -> np.ndarray:
    """Microseconds with fractional nanoseconds -> int64 ns, exact to the nanosecond.

    Multiplying 1.6e15 us by 1000 in float64 would lose up to 128 ns; split the
    whole microseconds from the fraction first.
    """
    whole = np.floor(ts_us)
    return whole.astype(np.int64) * 1000 + np.rint((ts_us - whole) * 1000).astype(np.int64)


def dur_ns(dur_us: np.ndarray) -> np.ndarray:
    return np.rint(dur_us * 1000).astype(np.int64)


def _tracks(pid_codes, pids, tid_codes, tids) -> tuple[np.ndarray, list]:
    """Track code per row and the distinct (pid, tid) pairs, numbered in order of first
    appearance (so both front-ends number tracks alike; pid and tid interned apart)."""
    width = max(len(tids), 1)
    combined = pid_codes.astype(np.int64) * width + tid_codes
    if max(len(pids), 1) * width <= 4 * len(combined) + 4096:
        # first appearance without sorting the rows: a small table
        first = np.full(max(len(pids), 1) * width, len(combined), dtype=np.int64)
        np.minimum.at(first, combined, np.arange(len(combined), dtype=np.int64))
        distinct = np.flatnonzero(first < len(combined))
        order = distinct[np.argsort(first[distinct], kind="stable")]
        rank = np.full(len(first), -1, dtype=np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        codes = rank[combined]
    else:  # many distinct pids and tids: sort instead of a pids x tids table
        distinct, first_at, inverse = np.unique(combined, return_index=True, return_inverse=True)
        by_first = np.argsort(first_at, kind="stable")
        rank = np.empty(len(distinct), dtype=np.int32)
        rank[by_first] = np.arange(len(distinct), dtype=np.int32)
        order = distinct[by_first]
        codes = rank[inverse]
    keys = [(pids[c // width], tids[c % width]) for c in order.tolist()]
    return codes, keys


def _check_ids(values: list, where: str, what: str) -> None:
    """pid, tid and flow ids are integers or strings (as the msgspec decoder types them)."""
    if {type(v) for v in values} <= {int, str}:  # one pass in C; bool and float are other types
        return
    for v in values:
        if not isinstance(v, (int, str)) or isinstance(v, bool):
            raise InputError(where, f"not a Kineto trace: an event's {what} is {v!r}, not an integer or a string")


def _durations(ph: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The usable rows' durations (us): a complete event's (X, checked by ``_check_times``),
    0 for an instant, whatever its dur says (a huge one would overflow int64 ns)."""
    return np.where(ph == ord("X"), np.nan_to_num(dur, nan=0.0), 0.0)


_DROP_REASONS = ("missing or invalid ts", "negative ts", "missing dur", "negative dur", "dur over 1e12 us")


def _check_times(ph: np.ndarray, ts: np.ndarray, dur: np.ndarray, relative: bool = False) -> tuple[np.ndarray, dict]:
    """Rows whose ts and dur the analyses can use, and the count of the others by reason.

    ph: the rows' phases (uint8). Complete events (X) need a duration >= 0; instants
    and flows have none (0). ``relative``: ts from an instant inside the run (an export's
    rank file: ``TraceHeader.overlapscope_zero_ns``), where a negative one is fine."""
    # the common case, every row usable, in five passes (NaN compares false). Kineto's ts are
    # from the epoch, an export's from the run's first event: a negative one is a broken clock
    # whose events would sort before every step (it moved overlap from 27.9 to 20.9 %)
    fine = (ts >= (-MAX_TS_US if relative else 0)) & (ts <= MAX_TS_US)
    fine &= (ph != ord("X")) | ((dur >= 0) & (dur <= MAX_DUR_US))
    if fine.all():
        return fine, {}
    dropped = {}
    bad_ts = ~np.isfinite(ts) | (np.abs(np.nan_to_num(ts)) > MAX_TS_US)
    negative_ts = (ts < 0) & ~bad_ts & (not relative)
    bad_ts_any = bad_ts | negative_ts
    complete = ph == ord("X")
    missing_dur = complete & np.isnan(dur) & ~bad_ts_any
    negative = complete & (dur < 0) & ~bad_ts_any
    huge = complete & (~np.isfinite(dur) | (dur > MAX_DUR_US)) & ~np.isnan(dur) & ~bad_ts_any & ~negative
    for reason, mask in zip(_DROP_REASONS, (bad_ts, negative_ts, missing_dur, negative, huge)):
        n = int(np.count_nonzero(mask))
        if n:
            dropped[reason] = n
    return ~(bad_ts_any | missing_dur | negative | huge), dropped


# --- the C scanner -------------------------------------------------------------------------

def _token_values(tokens: list, ids: list[int]) -> list:
    """``token_value`` of many tokens in one msgspec call (flow ids are one token each);
    token by token where one does not decode as JSON text (invalid UTF-8 is replaced)."""
    if len(ids) < 64:
        return [token_value(tokens[t]) for t in ids]
    try:
        return msgspec.json.decode(b"[" + b",".join([tokens[t] for t in ids]) + b"]")
    except msgspec.DecodeError:
        return [token_value(tokens[t]) for t in ids]


def _dense(token_ids: np.ndarray, tokens: list, missing) -> tuple[np.ndarray, list]:
    """Dense codes of token ids and their values (-1: ``missing``), without a sort:
    token ids are small integers, so a presence table numbers them in O(n)."""
    distinct, codes = col.distinct_codes(token_ids.astype(np.int64) + 1, len(tokens) + 1)  # -1 (absent) is 0
    ids = (distinct[distinct > 0] - 1).tolist()
    values = ([missing] if len(distinct) and distinct[0] == 0 else []) + _token_values(tokens, ids)
    return codes.astype(np.int32), values


ROW_BYTES = 53  # a kept row's column bytes in the scanner, without the taken values (_kineto_scan.c)


def _check_kept(rows: int, args_bytes: int, detail: str, where: str, limits: Limits) -> None:
    """The scanner's cap on kept memory, for the msgspec decoder: the same rows at the same
    size, and the kept args (whole: the msgspec decoder does not trim them)."""
    keys = take_keys(detail)
    if rows * (ROW_BYTES + (8 * len(keys) + 4 if keys else 0)) + args_bytes > limits.max_kept_bytes:
        raise InputError(where, too_much_kept(rows, limits))


def _check_phases(by_ph: np.ndarray, where: str) -> None:
    """Refuse events without a phase or of an unknown one (counted by the scanner: 0 no ph,
    1 a ph of several characters)."""
    found = np.flatnonzero(by_ph).tolist()
    if 0 in found:
        raise InputError(where, "not a Kineto trace: an event without ph")
    unknown = ["of several characters" if i == 1 else chr(i) if 32 < i < 127 else f"\\x{i:02x}" for i in found
               if chr(i) not in KNOWN_PH]
    if unknown:
        raise InputError(where, f"not a Kineto trace: events of unknown phase {', '.join(unknown)}")


def from_scan(path: str, member: str | None, where: str, detail: str, limits: Limits,
              scanned: Scanned | None = None) -> Frame:
    """A Frame from the streaming C scanner (``scan.scan``; ``scanned``: its result, when the
    file was scanned already)."""
    scanned = scanned or scan.scan(path, member, where, detail, limits)
    fixed = {"text_replaced": scanned.text_replaced}
    scanned = scanned.columns
    tokens = scanned["tokens"]
    by_ph = np.frombuffer(scanned["by_ph"], dtype=np.int64)
    _check_phases(by_ph, where)
    # the slice rows (X, i, I) and, apart, the other kept rows (M, and flows: s, t, f)
    ph = np.frombuffer(scanned["ph"], dtype=np.uint8)
    cat = np.frombuffer(scanned["cat"], dtype=np.int32)
    name = np.frombuffer(scanned["name"], dtype=np.int32)
    pid = np.frombuffer(scanned["pid"], dtype=np.int32)
    tid = np.frombuffer(scanned["tid"], dtype=np.int32)
    ts = np.frombuffer(scanned["ts"], dtype=np.float64)
    dur = np.frombuffer(scanned["dur"], dtype=np.float64)
    o_ph = np.frombuffer(scanned["o_ph"], dtype=np.uint8)
    o_ts = np.frombuffer(scanned["o_ts"], dtype=np.float64)
    n_slices = int(sum(by_ph[ord(c)] for c in SLICE_PH))
    n_flows = int(sum(by_ph[ord(c)] for c in FLOW_PH_CHARS))
    counts = {"events": scanned["n"], "slices": n_slices, "flows": n_flows,
              "ignored": int(scanned["n"] - n_slices - n_flows - by_ph[ord("M")]),
              "text_replaced": fixed.get("text_replaced", 0)}

    try:
        header = HEADER_DECODER.decode(
            b"{" + b",".join(json.dumps(k.decode("utf-8", "replace")).encode() + b":" + v
                             for k, v in scanned["top"]) + b"}")
    except msgspec.ValidationError as err:
        raise InputError(where, f"not a Kineto trace: {err}") from None
    except msgspec.DecodeError as err:
        raise InputError(where, f"invalid JSON in the trace's header: {err}") from None
    relative = header.overlapscope_zero_ns is not None
    ok, dropped = _check_times(ph, ts, dur, relative)
    # every slice row usable (the rule): the columns are read as they are, not gathered
    slice_rows = None if ok.all() else np.flatnonzero(ok)
    pick = _picker(slice_rows)
    meta_rows = np.flatnonzero(o_ph == ord("M"))
    flow_at = np.flatnonzero(o_ph != ord("M"))
    flows_ok, flows_dropped = _check_times(o_ph[flow_at], o_ts[flow_at], np.zeros(len(flow_at)), relative)
    flow_rows = flow_at[flows_ok]
    counts["dropped"] = _dropped_sum(dropped, flows_dropped)
    if not n_slices:
        raise InputError(where, "not a Kineto trace: no complete (ph X) events")
    n = len(ph) if slice_rows is None else len(slice_rows)
    if not n:
        raise InputError(where, f"no usable events: {_dropped_text(counts['dropped'])}")

    cat_codes, cats = _dense(pick(cat), tokens, "")
    name_codes, names = _dense(pick(name), tokens, "")
    pid_codes, pids = _dense(pick(pid), tokens, 0)
    tid_codes, tids = _dense(pick(tid), tokens, 0)
    _check_ids(pids + tids, where, "pid or tid")
    track_codes, track_keys = _tracks(pid_codes, pids, tid_codes, tids)
    dur_us = _durations(pick(ph), pick(dur))
    starts = np.frombuffer(scanned["args_start"], dtype=np.int64)
    lengths = np.frombuffer(scanned["args_len"], dtype=np.int64)
    arena = scanned["args"]
    view = memoryview(arena)

    def scanned_rows(rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        return rows if slice_rows is None else slice_rows[rows]

    def args(rows) -> list:
        picked = scanned_rows(rows)
        return [view[s:s + n] if n else _EMPTY_ARGS for s, n in zip(starts[picked].tolist(), lengths[picked].tolist())]

    def args_json(rows) -> bytes:
        picked = scanned_rows(rows)
        return _kineto_scan.gather(arena, np.ascontiguousarray(starts[picked]), np.ascontiguousarray(lengths[picked]))

    def args_column(rows):
        picked = scanned_rows(rows)
        run_lengths = np.ascontiguousarray(lengths[picked])
        # rows whose args lie back to back in the scanner's arena, in order, from its start
        # (every slice of a full load that dropped none: the scanner keeps the metadata
        # events' args apart): the arena is the column's data as it is, not a copy (15 MB
        # for the reference trace, 10 % of its decode)
        ends = np.cumsum(run_lengths)
        has = run_lengths > 0
        if len(ends) and ends[-1] <= len(arena) and np.array_equal(starts[picked][has], (ends - run_lengths)[has]):
            return col.json_column(run_lengths, arena)
        return col.json_column(run_lengths, _kineto_scan.concat(arena, np.ascontiguousarray(starts[picked]),
                                                                run_lengths))

    o_name = np.frombuffer(scanned["o_name"], dtype=np.int32)
    o_pid = np.frombuffer(scanned["o_pid"], dtype=np.int32)
    o_tid = np.frombuffer(scanned["o_tid"], dtype=np.int32)
    flows = {}
    if detail == "full":
        o_cat = np.frombuffer(scanned["o_cat"], dtype=np.int32)
        ids = np.frombuffer(scanned["o_id"], dtype=np.int32)[flow_rows]
        flows = _flow_columns(where, tokens, np.frombuffer(scanned["token_ints"], dtype=np.int64),
                              np.frombuffer(scanned["token_is_int"], dtype=np.uint8), ids, o_cat[flow_rows],
                              o_ph[flow_rows], o_pid[flow_rows], o_tid[flow_rows], ts_ns(o_ts[flow_rows]), track_keys)
    meta_view = memoryview(scanned["meta_args"])
    meta_starts = np.frombuffer(scanned["o_args_start"], dtype=np.int64)
    meta_lengths = np.frombuffer(scanned["o_args_len"], dtype=np.int64)
    meta_events = [
        MetaEvent(token_value(tokens[o_name[r]]) if o_name[r] >= 0 else "",
                  token_value(tokens[o_pid[r]]) if o_pid[r] >= 0 else 0,
                  token_value(tokens[o_tid[r]]) if o_tid[r] >= 0 else 0,
                  bytes(meta_view[meta_starts[r]:meta_starts[r] + meta_lengths[r]]) if meta_lengths[r] else _EMPTY_ARGS)
        for r in meta_rows.tolist()
    ]
    return Frame(
        header=header, n=n, name_codes=name_codes, names=names, cat_codes=cat_codes, cats=cats,
        track_codes=track_codes, track_keys=track_keys, ts_ns=ts_ns(pick(ts)), dur_ns=dur_ns(dur_us),
        args=args, args_json=args_json, args_column=args_column,
        **dict(zip(("took", "took_odd"), _taken(scanned["took"], scanned["took_flags"], slice_rows,
                                                take_keys(detail)))),
        gpu_trace=bool(scanned["gpu"]), flows=flows, meta_events=meta_events,
        counts=counts,
    )


def _flow_columns(where: str, tokens: list, token_ints: np.ndarray, token_is_int: np.ndarray, ids, cats, phs,
                  pids, tids, ts, track_keys: list) -> dict:
    """The flow events' columns from the scanner's token ids, one lookup per distinct token
    (flows are as many as launches: no Python step per flow). Token ids are below the
    number of tokens, so they are numbered without a sort (``columns.distinct_codes``);
    ids that are plain integers come as the scanner read them (``token_ints``)."""
    bound = len(tokens) + 1
    flow_id = np.full(len(ids), col.NULL_I64, dtype=np.int64)
    known = ids >= 0
    plain = known.copy()
    plain[known] = token_is_int[ids[known]] != 0
    flow_id[plain] = token_ints[ids[plain]]
    others = known & ~plain  # ids given as strings (or other numbers): read as before
    if others.any():
        id_of, id_values = _dense(ids[others], tokens, None)
        _check_ids([v for v in id_values if v is not None], where, "flow id")
        flow_id[others] = col.optional_ints(id_values)[id_of]
    cat_of, cat_values = _dense(cats, tokens, "")
    ph_values, ph_of = col.distinct_codes(phs.astype(np.int64), 256)
    pid_codes, tid_codes = pids.astype(np.int64) + 1, tids.astype(np.int64) + 1
    pairs = pid_codes * bound + tid_codes
    distinct_pairs, pair_of = col.distinct_codes(pairs, bound * bound)
    wanted = (col.distinct_codes(np.concatenate([pid_codes, tid_codes]), bound)[0] - 1).tolist()
    wanted = [t for t in wanted if t >= 0]
    track_index = {k: i for i, k in enumerate(track_keys)}
    value_of = dict(zip(wanted, _token_values(tokens, wanted)))
    track_of_pair = [track_index.get((value_of.get(p // bound - 1, 0), value_of.get(p % bound - 1, 0)), col.NULL_I64)
                     for p in distinct_pairs.tolist()]
    return {
        "flow_id": flow_id,
        "cat_codes": np.asarray(cat_of, dtype=np.int32), "cats": [str(v) for v in cat_values],
        "ph_codes": np.asarray(ph_of, dtype=np.int32), "phs": [chr(c) for c in ph_values.tolist()],
        "ts_ns": ts,
        "track_id": np.array(track_of_pair, dtype=np.int64)[pair_of] if len(ids) else np.zeros(0, dtype=np.int64),
    }


def _dropped_sum(*counts: dict) -> dict:
    """Dropped rows by reason, summed over ``counts`` (slice rows and flow rows), in the
    reasons' order (``_check_times``)."""
    total = {}
    for reason in _DROP_REASONS:
        n = sum(c.get(reason, 0) for c in counts)
        if n:
            total[reason] = n
    return total


def _dropped_text(dropped: dict) -> str:
    return ", ".join(f"{n:,} with {reason}" for reason, n in dropped.items()) or "none"


# --- msgspec ---------------------------------------------------------------------------------

# msgspec's complaints about an event's field, in the words the scanner uses for them
# (_kineto_scan.c, field_problem): the one vocabulary of both decoders.
_FIELD_PROBLEMS = {
    "cat": "an event's cat or name is not a string", "name": "an event's cat or name is not a string",
    "pid": "an event's pid, tid or id is not an integer or a string",
    "tid": "an event's pid, tid or id is not an integer or a string",
    "id": "an event's pid, tid or id is not an integer or a string",
    "ts": "a timestamp or duration that is not a number", "dur": "a timestamp or duration that is not a number",
}
_EVENT_FIELD = re.compile(r"- at `\$\.traceEvents\[\d+\]\.(\w+)`$")
_INVALID_PH = re.compile(r"^Invalid value '(.*)' - at `\$\.traceEvents\[\d+\]\.ph`$")


def _validation_problem(msg: str) -> str:
    """The one-line problem of msgspec's ValidationError ``msg`` on a whole trace."""
    if "missing required field `traceEvents`" in msg:
        return "not a Kineto trace: no traceEvents list"
    if msg.endswith("`$`"):
        return "not a Kineto trace: the top level is not an object with traceEvents"
    if "missing required field `ph`" in msg:
        return "not a Kineto trace: an event without ph"
    invalid_ph = _INVALID_PH.match(msg)
    if invalid_ph:  # the first ph is the event's type: a known second one differs from it
        value = invalid_ph.group(1)
        if len(value) == 1 and value in KNOWN_PH:
            return "not a Kineto trace: an event's ph given twice, differently"
        return f"not a Kineto trace: events of unknown phase {value}"
    field_name = _EVENT_FIELD.search(msg)
    if field_name and field_name.group(1) == "ph":
        return "not a Kineto trace: an event's ph is not a string"
    if field_name and field_name.group(1) in ("ts", "dur") and msg.startswith("Number out of range"):
        return "not a Kineto trace: a timestamp or duration out of range"
    if field_name and field_name.group(1) in _FIELD_PROBLEMS:
        return f"not a Kineto trace: {_FIELD_PROBLEMS[field_name.group(1)]}"
    return f"not a Kineto trace: {msg}"


def parse(data: bytes, where: str, limits: Limits):
    """msgspec-decode the whole trace; every failure becomes one line naming the file."""
    if not data.strip():
        raise InputError(where, "empty file")
    if _kineto_scan is not None and not _kineto_scan.depth_ok(data, limits.max_depth):
        raise InputError(where, "JSON nested deeper than the limit")
    try:
        trace = TRACE_DECODER.decode(data)
    except RecursionError:
        raise InputError(where, "JSON nested deeper than the limit") from None
    except msgspec.ValidationError as err:
        raise InputError(where, _validation_problem(str(err))) from None
    except msgspec.DecodeError as err:
        raise InputError(where, f"invalid JSON: {err}") from None
    # msgspec keeps the last of a repeated member; the scanner refuses a second traceEvents
    if _kineto_scan is not None and data.count(b'"traceEvents"') > 1 and \
            _kineto_scan.top_key_count(data, b"traceEvents") > 1:
        raise InputError(where, "not a Kineto trace: traceEvents given twice")
    return trace


def _check_args(events: list, where: str) -> None:
    """The args of slices and metadata events: an object, or null (the scanner's check)."""
    heads = {bytes(memoryview(e.args)[:1]) for e in events}
    if not heads <= {b"{", b"n"}:
        raise InputError(where, "not a Kineto trace: an event's args is not an object")


def _none_as_nan(values) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def from_msgspec(data: bytes, where: str, detail: str, limits: Limits, text_replaced: int = 0) -> Frame:
    trace = parse(data, where, limits)
    evs = trace.traceEvents
    trace.traceEvents = []
    kind = np.fromiter(map({**{t: 1 for t in _SLICE_TYPES}, **{t: 2 for t in FLOW_TYPES}, Meta: 3}.get,
                           map(type, evs), repeat(0)), dtype=np.int8, count=len(evs))
    slices = [evs[i] for i in np.flatnonzero(kind == 1).tolist()]
    flow_evs = [evs[i] for i in np.flatnonzero(kind == 2).tolist()]
    meta_evs = [evs[i] for i in np.flatnonzero(kind == 3).tolist()]
    counts = {"events": len(evs), "slices": len(slices), "flows": len(flow_evs),
              "ignored": int(np.count_nonzero(kind == 0)), "text_replaced": text_replaced}
    if not slices:
        raise InputError(where, "not a Kineto trace: no complete (ph X) events")
    # the same selection as the scanner's, per distinct (ph, cat, name)
    slice_ph = [e.__struct_config__.tag for e in slices]
    gpu_trace = any(e.cat == "kernel" for e in slices)
    modes: dict = {}

    def kept(ph, e) -> bool:
        key = (ph, e.cat or "", e.name or "")
        mode = modes.get(key)
        if mode is None:
            mode = modes[key] = keep_mode(detail, *key)
        return mode in (1, 2) or (mode in (3, 4) and not gpu_trace)

    _check_args(slices + meta_evs, where)
    slices = [e for ph, e in zip(slice_ph, slices) if kept(ph, e)]
    for e in slices:  # null args are none, as the scanner reads them
        if bytes(memoryview(e.args)[:1]) == b"n":
            e.args = msgspec.Raw(_EMPTY_ARGS)
    slice_ph = np.frombuffer("".join(e.__struct_config__.tag for e in slices).encode(), dtype=np.uint8)
    flow_evs = [e for e in flow_evs if keep_mode(detail, _FLOW_PH[type(e)], "", "")]
    _check_kept(len(slices) + len(flow_evs) + len(meta_evs), sum(map(len, (e.args for e in slices))), detail, where,
                limits)
    ts = _none_as_nan(map(attrgetter("ts"), slices))
    dur = _none_as_nan(map(attrgetter("dur"), slices))
    relative = trace.overlapscope_zero_ns is not None
    ok, dropped = _check_times(slice_ph, ts, dur, relative)
    flow_ts = _none_as_nan(e.ts for e in flow_evs)
    flow_ok, flow_dropped = _check_times(np.full(len(flow_evs), ord("s"), dtype=np.uint8), flow_ts,
                                         np.zeros(len(flow_evs)), relative)
    dropped = counts["dropped"] = _dropped_sum(dropped, flow_dropped)
    rows = np.flatnonzero(ok).tolist()
    slices = [slices[i] for i in rows]
    ts, dur = ts[rows], _durations(slice_ph[rows], dur[rows])
    flow_evs = [flow_evs[i] for i in np.flatnonzero(flow_ok).tolist()]
    flow_ts = flow_ts[flow_ok]
    if not slices:
        raise InputError(where, f"no usable events: {_dropped_text(dropped)}")
    n = len(slices)
    name_codes, names = col.intern([e.name or "" for e in slices])
    cat_codes, cats = col.intern([e.cat or "" for e in slices])
    pid_codes, pids = col.intern([0 if e.pid is None else e.pid for e in slices])
    tid_codes, tids = col.intern([0 if e.tid is None else e.tid for e in slices])
    track_codes, track_keys = _tracks(pid_codes, pids, tid_codes, tids)
    flows = {}
    if detail == "full":
        track_index = {k: i for i, k in enumerate(track_keys)}
        cat_of, flow_cats = col.intern([e.cat or "" for e in flow_evs])
        ph_of, flow_phs = col.intern([_FLOW_PH[type(e)] for e in flow_evs])
        flows = {
            "flow_id": col.optional_ints([e.id for e in flow_evs]), "cat_codes": cat_of, "cats": flow_cats,
            "ph_codes": ph_of, "phs": flow_phs, "ts_ns": ts_ns(flow_ts),
            "track_id": np.array([track_index.get((0 if e.pid is None else e.pid, 0 if e.tid is None else e.tid),
                                                  col.NULL_I64) for e in flow_evs], dtype=np.int64),
        }
    header = msgspec.structs.replace(trace)  # the header fields; the events are gone
    took, took_odd = taken_of([e.args for e in slices], take_keys(detail))
    for e in slices:  # a row kept without its args (keep_mode 1, 3) has none, as the scanner keeps it
        if modes[(e.__struct_config__.tag, e.cat or "", e.name or "")] in (1, 3):
            e.args = msgspec.Raw(_EMPTY_ARGS)
    return Frame(
        header=header, n=n, name_codes=name_codes, names=names, cat_codes=cat_codes, cats=cats,
        track_codes=track_codes, track_keys=track_keys, ts_ns=ts_ns(ts), dur_ns=dur_ns(dur),
        args=lambda rows: [slices[i].args for i in np.asarray(rows).tolist()],
        args_json=lambda rows: b"[" + b",".join([slices[i].args for i in np.asarray(rows).tolist()]) + b"]",
        args_column=lambda rows: col.raw_json([slices[i].args for i in np.asarray(rows).tolist()]),
        took=took, took_odd=took_odd, gpu_trace=gpu_trace, flows=flows,
        meta_events=[MetaEvent(e.name or "", 0 if e.pid is None else e.pid, 0 if e.tid is None else e.tid,
                               _EMPTY_ARGS if bytes(memoryview(e.args)[:1]) == b"n" else bytes(e.args))
                     for e in meta_evs],
        counts=counts,
    )


def frame(path: str, member: str | None, where: str, detail: str, limits: Limits,
          use_scanner: bool = True, scanned: Scanned | None = None) -> Frame:
    """The columns of one trace file, read within ``limits`` (``scanned``: its scan, done already)."""
    if scanned is not None or (use_scanner and _kineto_scan is not None):
        return from_scan(path, member, where, detail, limits, scanned)
    fixed: dict = {}
    data = stream.read_all(path, member, where, limits, fixed)
    return from_msgspec(data, where, detail, limits, fixed.get("text_replaced", 0))
