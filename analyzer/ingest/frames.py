"""Two front-ends that turn a trace's JSON into columns (a Frame) for decode.py.

- scan: the C extension ``analyzer._kineto_scan`` reads the traceEvents in one
  pass into arrays (no Python object per event) and interns cat, name, pid and
  tid tokens; about 60 ms for the 47 MB reference trace.
- msgspec: a typed decode into small structs, then one attribute pass per
  column; the fallback when the extension is not built, and the source of the
  precise one-line error for input the scanner does not take.

Both give the same Frame: the tests compare them on every trace they load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Callable

import msgspec
import numpy as np

from overlapscope.analyzer.ingest import classify, columns as col
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest.kineto import (
    BARE_FLOW_TYPES, FLOW_TYPES, HEADER_DECODER, OVERLAP_TRACE_DECODER, TRACE_DECODER, BareInstant, FlowEnd,
    FlowStart, FlowStep, Instant, InstantUpper, Meta, Slice,
)

try:
    from overlapscope.analyzer.ingest import _kineto_scan
except ImportError:  # not built (no compiler at install): msgspec does it all
    _kineto_scan = None

_SLICE_TYPES = (Slice, Instant, InstantUpper)
_FLOW_PH = {FlowStart: "s", FlowStep: "t", FlowEnd: "f"}
# 1 slice or instant, 2 flow, 3 metadata, 0 other phases; the overlap decoder's
# field-less instants (4) and flows (5) are only counted
_TYPE_CODE = {**{t: 1 for t in _SLICE_TYPES}, **{t: 2 for t in FLOW_TYPES}, Meta: 3,
              BareInstant: 4, **{t: 5 for t in BARE_FLOW_TYPES}}
HOST_ONLY_CATEGORIES = {"cpu_op", "python_function", "cpu_instant_event"}
_EMPTY_ARGS = b"{}"
# Every Chrome-trace phase the msgspec decoder knows (kineto.AnyEvent).
_KNOWN_PH = np.frombuffer(b"XiIMstfBECbnePONDRcVv()", dtype=np.uint8)


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
    gpu_trace: bool
    flows: dict = field(default_factory=dict)  # flow_id, cat, ph, ts_ns, pid/tid keys
    meta_events: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)


def ts_ns(ts_us: np.ndarray) -> np.ndarray:
    """Microseconds with fractional nanoseconds -> int64 ns, exact to the nanosecond.

    Multiplying 1.6e15 us by 1000 in float64 would lose up to 128 ns; split the
    whole microseconds from the fraction first.
    """
    whole = np.floor(ts_us)
    return whole.astype(np.int64) * 1000 + np.rint((ts_us - whole) * 1000).astype(np.int64)


def dur_ns(dur_us: np.ndarray) -> np.ndarray:
    return np.rint(dur_us * 1000).astype(np.int64)


def _keep_rows(cats: list, cat_codes: np.ndarray, names: list, name_codes: np.ndarray, detail: str) -> np.ndarray:
    """GPU traces: the rows a detail keeps (host-only events only where it reads them)."""
    host_only = np.isin(cat_codes, [i for i, c in enumerate(cats) if c in HOST_ONLY_CATEGORIES])
    # Older PyTorch writes ProfilerStep#N as a cpu_op: always kept.
    wanted = np.array([classify.PROFILER_STEP.match(n) is not None or
                       (detail == "attribution" and classify.needed_for_attribution(n)) for n in names], dtype=bool)
    return ~host_only | (wanted[name_codes] if len(names) else False)


def _tracks(pid_codes, pids, tid_codes, tids) -> tuple[np.ndarray, list]:
    """Track code per row and the distinct (pid, tid) pairs, numbered in order of first
    appearance (so both front-ends number tracks alike; pid and tid interned apart)."""
    width = max(len(tids), 1)
    combined = pid_codes.astype(np.int64) * width + tid_codes
    # first appearance of each (pid, tid) without sorting the rows: a small table
    first = np.full(max(len(pids), 1) * width, len(combined), dtype=np.int64)
    np.minimum.at(first, combined, np.arange(len(combined), dtype=np.int64))
    distinct = np.flatnonzero(first < len(combined))
    order = distinct[np.argsort(first[distinct], kind="stable")]
    rank = np.full(len(first), -1, dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    keys = [(pids[c // width], tids[c % width]) for c in order.tolist()]
    return rank[combined], keys


# --- msgspec ---------------------------------------------------------------------------------

def parse(data: bytes, where: str, decoder=TRACE_DECODER):
    """msgspec-decode the trace; every failure becomes one line naming the file."""
    if not data.strip():
        raise InputError(where, "empty file")
    try:
        trace = decoder.decode(data)
    except msgspec.ValidationError as err:
        msg = str(err)
        if "missing required field `traceEvents`" in msg:
            raise InputError(where, "not a Kineto trace: no traceEvents list") from None
        if msg.endswith("`$`"):
            raise InputError(where, "not a Kineto trace: the top level is not an object with traceEvents") from None
        raise InputError(where, f"not a Kineto trace: {msg}") from None
    except msgspec.DecodeError as err:
        raise InputError(where, f"invalid JSON: {err}") from None
    if not trace.traceEvents:
        raise InputError(where, "not a Kineto trace: traceEvents is empty")
    return trace


def _split(evs: list) -> tuple[list, list, list, dict]:
    """Slices and instants, flows, metadata, and the counts of each phase group."""
    codes = np.fromiter(map(_TYPE_CODE.get, map(type, evs), repeat(0)), dtype=np.int8, count=len(evs))
    take = evs.__getitem__
    slices = list(map(take, np.flatnonzero(codes == 1).tolist()))
    flows = list(map(take, np.flatnonzero(codes == 2).tolist()))
    meta = list(map(take, np.flatnonzero(codes == 3).tolist()))
    counts = {"events": len(evs), "slices": len(slices) + int(np.count_nonzero(codes == 4)),
              "flows": len(flows) + int(np.count_nonzero(codes == 5)), "ignored": int(np.count_nonzero(codes == 0))}
    return slices, flows, meta, counts


def from_msgspec(data: bytes, where: str, detail: str) -> Frame:
    trace = parse(data, where, OVERLAP_TRACE_DECODER if detail == "overlap" else TRACE_DECODER)
    slices, flow_evs, meta_evs, counts = _split(trace.traceEvents)
    trace.traceEvents = []
    if not slices:
        raise InputError(where, "not a Kineto trace: no complete (ph X) events")
    gpu_trace = any(e.cat == "kernel" for e in slices)
    if gpu_trace and detail != "full":
        cat_codes, cats = col.intern(list(map(attrgetter("cat"), slices)))
        name_codes, names = col.intern(list(map(attrgetter("name"), slices)))
        rows = np.flatnonzero(_keep_rows(cats, cat_codes, names, name_codes, detail)).tolist()
        slices = list(map(slices.__getitem__, rows))
    n = len(slices)
    name_codes, names = col.intern(list(map(attrgetter("name"), slices)))
    cat_codes, cats = col.intern(list(map(attrgetter("cat"), slices)))
    pid_codes, pids = col.intern(list(map(attrgetter("pid"), slices)))
    tid_codes, tids = col.intern(list(map(attrgetter("tid"), slices)))
    track_codes, track_keys = _tracks(pid_codes, pids, tid_codes, tids)
    flows = {
        "flow_id": [e.id for e in flow_evs], "cat": [e.cat for e in flow_evs],
        "ph": [_FLOW_PH[type(e)] for e in flow_evs],
        "ts_ns": ts_ns(np.array([e.ts for e in flow_evs], dtype=np.float64)),
        "keys": [(e.pid, e.tid) for e in flow_evs],
    } if detail == "full" else {}
    return Frame(
        header=trace, n=n, name_codes=name_codes, names=names, cat_codes=cat_codes, cats=cats,
        track_codes=track_codes, track_keys=track_keys,
        ts_ns=ts_ns(np.fromiter(map(attrgetter("ts"), slices), dtype=np.float64, count=n)),
        dur_ns=dur_ns(np.fromiter(map(attrgetter("dur"), slices), dtype=np.float64, count=n)),
        args=lambda rows: [slices[i].args for i in np.asarray(rows).tolist()],
        args_json=lambda rows: b"[" + b",".join([slices[i].args for i in np.asarray(rows).tolist()]) + b"]",
        gpu_trace=gpu_trace, flows=flows,
        meta_events=[MetaEvent(e.name, e.pid, e.tid, bytes(e.args)) for e in meta_evs], counts=counts,
    )


# --- the C scanner ---------------------------------------------------------------------------

def _token_value(tok: bytes):
    """A scanned token as Python: a string (quotes and escapes resolved) or a number."""
    if tok[:1] == b'"':
        return json.loads(tok) if b"\\" in tok else tok[1:-1].decode("utf-8", "replace")
    try:
        return int(tok)
    except ValueError:
        return float(tok)


def _dense(token_ids: np.ndarray, tokens: list, missing) -> tuple[np.ndarray, list]:
    """Dense codes of token ids and their values (-1: ``missing``), without a sort:
    token ids are small integers, so a presence table numbers them in O(n)."""
    shifted = token_ids.astype(np.int64) + 1  # -1 (absent) becomes 0
    present = np.zeros(len(tokens) + 1, dtype=bool)
    present[shifted] = True
    distinct = np.flatnonzero(present)
    remap = np.cumsum(present, dtype=np.int64) - 1
    values = [missing if t == 0 else _token_value(tokens[t - 1]) for t in distinct.tolist()]
    return remap[shifted].astype(np.int32), values


def from_scan(data: bytes, detail: str):
    """A Frame from the C scanner, or None when it did not take the input."""
    if _kineto_scan is None:
        return None
    scanned = _kineto_scan.scan(data)
    if scanned is None or scanned["n"] == 0:
        return None
    tokens = scanned["tokens"]
    ph = np.frombuffer(scanned["ph"], dtype=np.uint8)
    cat = np.frombuffer(scanned["cat"], dtype=np.int32)
    name = np.frombuffer(scanned["name"], dtype=np.int32)
    if not np.isin(ph, _KNOWN_PH).all():
        return None  # an event without a phase, or an unknown one: msgspec says which
    # The overlap detail reads no instants but the legacy "I" ones (as its msgspec decoder).
    slice_ph = [ord("X"), ord("I")] + ([] if detail == "overlap" else [ord("i")])
    slice_rows = np.flatnonzero(np.isin(ph, slice_ph))
    flow_rows = np.flatnonzero(np.isin(ph, [ord("s"), ord("t"), ord("f")]))
    meta_rows = np.flatnonzero(ph == ord("M"))
    instants = int(np.count_nonzero(ph == ord("i"))) if detail == "overlap" else 0
    counts = {"events": scanned["n"], "slices": len(slice_rows) + instants, "flows": len(flow_rows),
              "ignored": int(scanned["n"] - len(slice_rows) - instants - len(flow_rows) - len(meta_rows))}
    if not len(slice_rows):
        return None  # msgspec says what is wrong

    cat_codes, cats = _dense(cat[slice_rows], tokens, "")
    gpu_trace = "kernel" in cats
    if gpu_trace and detail != "full":
        name_codes, names = _dense(name[slice_rows], tokens, "")
        slice_rows = slice_rows[_keep_rows(cats, cat_codes, names, name_codes, detail)]
        cat_codes, cats = _dense(cat[slice_rows], tokens, "")
    name_codes, names = _dense(name[slice_rows], tokens, "")
    pid = np.frombuffer(scanned["pid"], dtype=np.int32)
    tid = np.frombuffer(scanned["tid"], dtype=np.int32)
    pid_codes, pids = _dense(pid[slice_rows], tokens, 0)
    tid_codes, tids = _dense(tid[slice_rows], tokens, 0)
    track_codes, track_keys = _tracks(pid_codes, pids, tid_codes, tids)
    ts = np.nan_to_num(np.frombuffer(scanned["ts"], dtype=np.float64), nan=0.0)
    dur = np.nan_to_num(np.frombuffer(scanned["dur"], dtype=np.float64), nan=0.0)
    starts = np.frombuffer(scanned["args_start"], dtype=np.int64)
    lengths = np.frombuffer(scanned["args_len"], dtype=np.int64)
    view = memoryview(data)

    def args(rows) -> list:
        picked = slice_rows[np.asarray(rows, dtype=np.int64)]
        return [view[s:s + n] if n else _EMPTY_ARGS for s, n in zip(starts[picked].tolist(), lengths[picked].tolist())]

    def args_json(rows) -> bytes:
        picked = slice_rows[np.asarray(rows, dtype=np.int64)]
        return _kineto_scan.gather(data, np.ascontiguousarray(starts[picked]), np.ascontiguousarray(lengths[picked]))

    flows = {}
    if detail == "full":
        ids = np.frombuffer(scanned["id"], dtype=np.int32)[flow_rows]
        value = {t: _token_value(tokens[t]) for t in np.unique(ids[ids >= 0]).tolist()}
        fpid, ftid = pid[flow_rows], tid[flow_rows]
        fvalue = {t: _token_value(tokens[t]) for t in np.unique(np.concatenate([fpid, ftid, cat[flow_rows]])).tolist()
                  if t >= 0}
        flows = {
            "flow_id": [value.get(t) for t in ids.tolist()],
            "cat": [fvalue.get(t, "") for t in cat[flow_rows].tolist()],
            "ph": [chr(c) for c in ph[flow_rows].tolist()],
            "ts_ns": ts_ns(ts[flow_rows]),
            "keys": [(fvalue.get(p, 0), fvalue.get(t, 0)) for p, t in zip(fpid.tolist(), ftid.tolist())],
        }
    meta_events = [
        MetaEvent(_token_value(tokens[name[r]]) if name[r] >= 0 else "",
                  _token_value(tokens[pid[r]]) if pid[r] >= 0 else 0,
                  _token_value(tokens[tid[r]]) if tid[r] >= 0 else 0,
                  bytes(view[starts[r]:starts[r] + lengths[r]]) if lengths[r] else _EMPTY_ARGS)
        for r in meta_rows.tolist()
    ]
    try:
        header = HEADER_DECODER.decode(
            b"{" + b",".join(b"%s:%s" % (json.dumps(k.decode()).encode(), bytes(view[s:e]))
                             for k, s, e in scanned["top"]) + b"}")
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    return Frame(
        header=header, n=len(slice_rows), name_codes=name_codes, names=names, cat_codes=cat_codes, cats=cats,
        track_codes=track_codes, track_keys=track_keys, ts_ns=ts_ns(ts[slice_rows]), dur_ns=dur_ns(dur[slice_rows]),
        args=args, args_json=args_json, gpu_trace=gpu_trace, flows=flows, meta_events=meta_events, counts=counts,
    )


def frame(data: bytes, where: str, detail: str, use_scanner: bool = True) -> Frame:
    """The columns of one decompressed trace file."""
    if not data.strip():
        raise InputError(where, "empty file")
    found = from_scan(data, detail) if use_scanner else None
    return found if found is not None else from_msgspec(data, where, detail)
