"""Decode one per-rank Kineto trace into Arrow tables (runs in a worker process).

Pipeline per file: streamed gunzip (isal) -> columns (frames.py: the streaming C
scanner, or msgspec) -> checks of the header -> classification per distinct
(category, name) pair -> args decoded by event class (msgspec) -> launch, step and
compute assignment with NumPy. No Python loop runs per event.
"""

from __future__ import annotations

import functools
import json
import math
from operator import attrgetter
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa

from overlapscope.analyzer.ingest import classify, columns as col, memory
from overlapscope.analyzer.ingest.classify import KIND_CODE
from overlapscope.contract.collectives import collective_kind
from overlapscope.analyzer.ingest.dtypes import itemsize
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest.flops import FLOP_OPS, matmul_flops
from overlapscope.analyzer.ingest.inputs import TraceSource, rank_from_name
from overlapscope.analyzer.ingest.frames import Frame, frame
from overlapscope.analyzer.ingest.scan import Scanned
from overlapscope.analyzer.ingest.limits import Limits, from_env as limits_from_env
from overlapscope.analyzer.ingest.kineto import (
    COLLECTIVE_ARGS_DECODER, CORRELATION_DECODER, DEVICE_ARGS_DECODER, HOST_ARGS_DECODER, LAUNCH_DECODER,
    MEMORY_ARGS_DECODER, OP_ARGS_DECODER, META_ARGS_DECODER,
)

NULL = col.NULL_I64
# ts past this (September 2001, in ns) are on the epoch's clock; Kineto's beside a
# baseTimeNanoseconds are a machine's steady clock, which no two nodes share
EPOCH_CLOCK_NS = 10**18


@dataclass
class RankData:
    """Everything one rank's file contributes to the store, as Arrow tables."""

    meta: dict
    events: pa.Table
    tracks: pa.Table
    collectives: pa.Table
    flows: pa.Table
    memory: pa.Table
    roles: pa.Table  # range names attribution reads: name, role, arg (classify.annotation_role)
    counts: dict = field(default_factory=dict)


def _json_array(raws: list) -> bytes:
    """One JSON array of raw argument objects, to decode them in a single call."""
    return b"[" + b",".join(raws) + b"]"


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _rank_facts(trace, source: TraceSource, limits: Limits) -> dict:
    """Rank, world size and device facts of one file, range-checked before they reach int columns."""
    where = source.display
    info = trace.distributedInfo
    rank = info.rank if info is not None else None
    rank_source = "distributedInfo"
    named = rank_from_name(source.basename)
    if rank is None:
        rank, rank_source = named, "file name"
    if rank is None:
        why = "distributedInfo has no rank" if info is not None else "no distributedInfo"
        raise InputError(where, f"no rank: {why} and the file name carries none (name it rank-<N>.json)")
    world = info.world_size if info is not None else None
    if not 0 <= rank <= INT32_MAX:
        raise InputError(where, f"rank {rank} is out of range")
    if world is not None and not 1 <= world <= limits.max_world_size:
        raise InputError(where, f"world size {world} is out of range (1 to {limits.max_world_size:,})")
    base_time = trace.baseTimeNanoseconds
    if base_time is not None and not 0 <= base_time <= INT64_MAX:
        raise InputError(where, f"baseTimeNanoseconds {base_time} is out of range")
    devices = trace.deviceProperties or []
    memory = [d.totalGlobalMem for d in devices if d.totalGlobalMem and 0 < d.totalGlobalMem <= INT64_MAX]
    return {
        "rank": int(rank),
        "rank_source": rank_source,
        # a file name that says another rank than distributedInfo: reported, not fatal
        "name_rank": named if named is not None and named != rank else None,
        "world_size": world,
        "backend": info.backend if info is not None else None,
        "nccl_version": info.nccl_version if info is not None else None,
        "pg_config": bytes(info.pg_config).decode("utf-8", "replace")
        if info is not None and len(info.pg_config) else None,
        "device_names": sorted({d.name for d in devices if d.name}),
        "device_memory_bytes": max(memory, default=None),
        "base_time_ns": base_time,
        "hostname": trace.host_name or trace.hostname,
        "file": where,
    }


def _track_names(meta_evs: list) -> dict:
    """thread_name / process_name metadata, keyed by (pid, tid) and (pid, None)."""
    names: dict = {}
    if not meta_evs:
        return names
    args = META_ARGS_DECODER.decode(_json_array([e.args for e in meta_evs]))
    for e, a in zip(meta_evs, args):
        if e.name == "thread_name" and a.name:
            names[(e.pid, e.tid)] = a.name
        elif e.name == "process_name" and a.name:
            names[(e.pid, None)] = a.name
    return names


def _tensor_sizes(raw) -> tuple[int, int]:
    """``_shapes_of`` of an op's ``Input Dims`` (launches of one bucket repeat theirs: cached)."""
    return _shapes_of(bytes(raw)) if len(raw) else (NULL, NULL)


@functools.lru_cache(maxsize=4096)
def _shapes_of(raw: bytes) -> tuple[int, int]:
    """(largest, smallest) tensor of a gloo span / c10d op, in elements, from ``Input Dims``.

    The largest is the collective's full buffer (nccl-tests' size: an all-gather's
    output, a reduce-scatter's input); the smallest is an all-gather's shard, which
    is what gloo's own span reports. Shapes may be nested (tensor lists).
    """
    if not len(raw):
        return NULL, NULL
    try:
        dims = json.loads(bytes(raw))
    except (ValueError, RecursionError):
        return NULL, NULL

    def shapes(x):
        if isinstance(x, list) and x and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in x):
            yield x
        elif isinstance(x, list):
            for y in x:
                yield from shapes(y)

    try:
        sizes = [size for s in shapes(dims) if 0 <= (size := math.prod(s)) <= INT64_MAX]
    except RecursionError:
        return NULL, NULL
    return (max(sizes), min(sizes)) if sizes else (NULL, NULL)


def _first_type(raw) -> str | None:
    return _first_type_of(bytes(raw)) if len(raw) else None


@functools.lru_cache(maxsize=4096)
def _first_type_of(raw: bytes) -> str | None:
    try:
        types = json.loads(bytes(raw))
    except (ValueError, RecursionError):
        return None
    if not isinstance(types, list):
        return None
    return next((t for t in types if isinstance(t, str) and t and t not in ("TensorList", "Scalar")), None)


class _Columns:
    """Per-event columns of one file's slices and instants, filled group by group."""

    def __init__(self, n: int):
        self.correlation = np.full(n, NULL, np.int64)
        self.external_id = np.full(n, NULL, np.int64)
        self.stream = np.full(n, NULL, np.int64)
        self.device = np.full(n, NULL, np.int64)
        self.flops = np.full(n, np.nan)


# How much of a trace a load keeps (a lighter load is faster):
#   overlap      what the overlap analysis reads: on GPU traces, device work,
#                runtime launches, annotations and ProfilerStep ranges
#   attribution  overlap + collective launches (c10d, record_param_comms), matmul
#                ops (FLOP counts for F) and allocator events (memory peak)
#   full         every event with its raw args, and the flow events (the catalog)
# CPU-only traces keep all their events at every level: their ops are the compute.
DETAILS = ("overlap", "attribution", "full")
_OVERLAP_KINDS = ("compute", "comm", "memcpy", "memset", "sync", "step")


def decode_source(source: TraceSource, detail: str = "full", use_scanner: bool = True,
                  limits: Limits | None = None, scanned: Scanned | None = None) -> RankData:
    """Read, decode and classify one rank's trace file, keeping ``detail`` (see DETAILS),
    within ``limits`` (the defaults and the environment's when None); ``scanned``: the
    file's scan (``scan.scan``, same detail and limits), when it was scanned already."""
    where = source.display
    limits = limits or limits_from_env()
    fr: Frame = frame(source.path, source.member, where, detail, limits, use_scanner, scanned)
    meta = _rank_facts(fr.header, source, limits)
    try:
        data = _columns(fr, meta, detail)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:  # the args of some event
        raise InputError(where, f"an event's args do not read as Kineto writes them: {err}") from None
    except RecursionError:
        raise InputError(where, "JSON nested deeper than the limit") from None
    except StepOutOfRange as err:
        raise InputError(where, str(err)) from None
    del fr
    if scanned is None:  # the scan's buffers are gone (a caller that scanned gives them back itself)
        memory.release_freed()
    return data


def _columns(fr: Frame, meta: dict, detail: str) -> RankData:
    """Classify the frame's events and build the rank's tables."""
    full = detail == "full"
    counts, gpu_trace = fr.counts, fr.gpu_trace
    n, names, name_codes, cats, cat_codes = fr.n, fr.names, fr.name_codes, fr.cats, fr.cat_codes
    track_codes, track_keys, ts_ns, dur_ns = fr.track_codes, fr.track_keys, fr.ts_ns, fr.dur_ns

    # Classification once per distinct (category, name) pair.
    pair_keys = cat_codes.astype(np.int64) * len(names) + name_codes
    pairs, pair_of_event = col.distinct_codes(pair_keys, max(1, len(cats)) * max(1, len(names)))
    pair_kind = classify.classify_pairs([cats[p // len(names)] for p in pairs.tolist()],
                                        [names[p % len(names)] for p in pairs.tolist()], gpu_trace)
    kind = pair_kind[pair_of_event]

    cols = _Columns(n)
    is_device_cat = col.member(cat_codes, [i for i, c in enumerate(cats) if c in classify.DEVICE_CATEGORIES], len(cats))
    is_memory = kind == KIND_CODE["memory"]
    host_kinds = [KIND_CODE[k] for k in ("runtime", "comm", "comm_launch", "step") + (
        () if detail == "overlap" else ("cpu_op", "compute", "annotation", "sync", "other"))]
    host_rows = np.flatnonzero(~is_device_cat & col.member(kind, host_kinds, len(classify.KINDS)))
    device_rows = np.flatnonzero(is_device_cat)
    if detail == "overlap":
        coll = _fill_args_overlap(fr, device_rows, host_rows, cols, kind, names, name_codes)
    else:
        coll = _fill_args(fr, device_rows, host_rows, cols, kind, names, name_codes)
    named = np.array(coll["event_id"], dtype=np.int64)
    # Collective kernels named differently from every rule still carry "Collective name".
    if gpu_trace and len(named):
        has_coll = np.zeros(n, dtype=bool)
        has_coll[named] = True
        kind[(cat_codes == cats.index("kernel")) & has_coll] = KIND_CODE["comm"]

    tracks = _tracks(track_keys, track_codes, kind, is_device_cat, fr.meta_events)
    if not gpu_trace:
        _mark_cpu_compute(kind, name_codes, names, track_codes, tracks["comm_tracks"])

    launch_ts = _launch_ts(kind, cols.correlation, ts_ns, device_rows)
    step = _assign_steps(kind, name_codes, names, ts_ns, dur_ns, device_rows, launch_ts)

    # The overlap analysis reads device work and steps only: the rest stays in the worker.
    keep = (np.flatnonzero(col.member(kind, [KIND_CODE[k] for k in _OVERLAP_KINDS], len(classify.KINDS)))
            if detail == "overlap"
            else slice(None))
    events = pa.table({
        "event_id": col.int64(np.arange(n, dtype=np.int64)[keep]),
        "track_id": col.int32(track_codes[keep]),
        "ts_ns": col.int64(ts_ns[keep]),
        "dur_ns": col.int64(dur_ns[keep]),
        "name": col.dictionary(name_codes[keep], names),
        "cat": col.dictionary(cat_codes[keep], cats),
        "kind": col.dictionary(kind.astype(np.int32)[keep], list(classify.KINDS)),
        "step": col.int64(step[keep]),
        "correlation": col.int64(cols.correlation[keep]),
        "external_id": col.int64(cols.external_id[keep]),
        "stream": col.int64(cols.stream[keep]),
        "device": col.int64(cols.device[keep]),
        "launch_ts_ns": col.int64(launch_ts[keep]),
        "flops": col.float64(cols.flops[keep]),
        **({"args": fr.args_column(np.arange(n))} if full else {}),
    })
    first_ns = int(ts_ns.min()) if len(ts_ns) else None
    meta.update(device_kind="gpu" if gpu_trace else "cpu", parallelism_seen=classify.parallelism_seen(names),
                # when the trace starts, where its clock is the epoch's (consistency: ranks hours apart)
                epoch_start_ns=first_ns if first_ns is not None and first_ns > EPOCH_CLOCK_NS else None)
    return RankData(
        meta=meta,
        events=events,
        tracks=tracks["table"],
        collectives=_collectives_table(coll),
        flows=_flows_table(fr.flows),
        memory=_memory_table(fr, np.flatnonzero(is_memory), ts_ns, track_codes),
        roles=_roles_table(names, name_codes, kind, detail),
        counts=counts,
    )


_COLL_FIELDS = ("event_id", "collective", "in_elems", "out_elems", "group_size", "dtype",
                "pg_name", "pg_desc", "pg_ranks", "elements", "min_elements")


class _CollectiveRows:
    """Collective rows of one file (the ``collectives`` table), one per collective event."""

    def __init__(self):
        self.rows = {k: [] for k in _COLL_FIELDS}

    def extend(self, rows: list[int], args: list, collectives: list, dtypes: list, sizes: list) -> None:
        """Many rows at once (the comm launches of a trace: column by column, not row by row)."""
        out = self.rows
        out["event_id"] += rows
        out["collective"] += collectives
        for field_name in ("in_elems", "out_elems", "group_size", "pg_name", "pg_desc"):
            out[field_name] += list(map(attrgetter(field_name), args))
        out["dtype"] += dtypes
        out["pg_ranks"] += [bytes(a.pg_ranks).decode() if len(a.pg_ranks) else None for a in args]
        out["elements"] += [z[0] for z in sizes]
        out["min_elements"] += [z[1] for z in sizes]

    def add_kernels(self, rows, dargs, names, name_codes) -> None:
        """Collective kernels (and any kernel naming a collective), column by column; the
        collective a kernel's name says is read once per distinct name."""
        codes = name_codes[rows].tolist()
        named = {c: classify.kernel_collective(names[c]) for c in set(codes)}
        self.extend(rows.tolist(), dargs, [a.collective or named[c] for a, c in zip(dargs, codes)],
                    list(map(attrgetter("dtype"), dargs)), [(NULL, NULL)] * len(dargs))


def _take(fr: Frame, cols: _Columns, rows: np.ndarray, fields: tuple[str, ...], decoder) -> None:
    """``fields`` of ``rows`` from the values the decoder read while scanning (scan.TAKE_KEYS);
    its odd rows (a value of another type) are decoded with ``decoder``, which reads strings
    of digits and refuses the rest (one line, decode_source)."""
    if not len(rows):
        return
    for name in fields:
        getattr(cols, name)[rows] = fr.took.at(name, rows)
    odd = rows[fr.took_odd[rows]]
    if len(odd):
        decoded = decoder.decode(fr.args_json(odd))
        for name in fields:
            values = list(map(attrgetter(name), decoded))
            getattr(cols, name)[odd] = (np.array(values, dtype=np.float64) if name == "flops"
                                        else col.optional_ints(values))


def _collective_kernels(fr: Frame, device_rows, kind, coll: _CollectiveRows, names, name_codes) -> None:
    """Rows of the kernels that run a collective (comm kernels, or any naming one): decoded whole."""
    rows = device_rows[fr.took.at("collective", device_rows) | (kind[device_rows] == KIND_CODE["comm"])]
    if len(rows):
        coll.add_kernels(rows, COLLECTIVE_ARGS_DECODER.decode(fr.args_json(rows)), names, name_codes)


def _fill_args_overlap(fr: Frame, device_rows, host_rows, cols: _Columns, kind, names, name_codes) -> dict:
    """The overlap detail's args: correlation ids, and the collective kernels' rows (kind,
    group, sizes: what matches one collective across ranks for the clock and the waits)."""
    coll = _CollectiveRows()
    _take(fr, cols, device_rows, ("correlation",), DEVICE_ARGS_DECODER)
    _collective_kernels(fr, device_rows, kind, coll, names, name_codes)
    _take(fr, cols, host_rows[kind[host_rows] == KIND_CODE["runtime"]], ("correlation",), CORRELATION_DECODER)
    return coll.rows


def _fill_args(fr: Frame, device_rows, host_rows, cols: _Columns, kind, names, name_codes) -> dict:
    """The args of device and host events by class; return collective rows. Ids and FLOP
    counts come as the decoder read them; comm launches and matmuls (sizes, groups,
    shapes) and collective kernels decode whole."""
    rows = _CollectiveRows()
    coll = rows.rows
    _take(fr, cols, device_rows, ("correlation", "external_id", "stream", "device"), DEVICE_ARGS_DECODER)
    _collective_kernels(fr, device_rows, kind, rows, names, name_codes)
    _take(fr, cols, host_rows[kind[host_rows] == KIND_CODE["runtime"]], ("correlation", "external_id"),
          LAUNCH_DECODER)
    host_rows = host_rows[kind[host_rows] != KIND_CODE["runtime"]]
    matmul_names = [i for i, n in enumerate(names) if n in FLOP_OPS]
    whole = col.member(kind[host_rows], [KIND_CODE["comm"], KIND_CODE["comm_launch"]], len(classify.KINDS)) | \
        col.member(name_codes[host_rows], matmul_names, len(names))
    _take(fr, cols, host_rows[~whole], ("correlation", "external_id", "flops"), OP_ARGS_DECODER)
    host_rows = host_rows[whole]
    if len(host_rows):
        # their ids and FLOP counts as the decoder read them (the args text keeps none: kineto.ARGS_KEYS)
        _take(fr, cols, host_rows, ("correlation", "external_id", "flops"), OP_ARGS_DECODER)
        hargs = HOST_ARGS_DECODER.decode(fr.args_json(host_rows))
        # Newer profilers record shapes but no FLOP count: derive it for matmuls.
        if matmul_names:
            for j in np.flatnonzero(col.member(name_codes[host_rows], matmul_names, len(names))).tolist():
                i = int(host_rows[j])
                if math.isnan(cols.flops[i]):
                    f = matmul_flops(names[name_codes[i]], bytes(hargs[j].input_dims))
                    cols.flops[i] = math.nan if f is None else f
        picked = np.flatnonzero(col.member(kind[host_rows], [KIND_CODE["comm"], KIND_CODE["comm_launch"]],
                                           len(classify.KINDS))).tolist()
        launches = [hargs[j] for j in picked]
        event_ids = host_rows[picked].tolist()
        op_names = [names[c] for c in name_codes[event_ids].tolist()]
        rows.extend(event_ids, launches,
                    [a.collective or n.split(":")[-1].lstrip("_") or None for a, n in zip(launches, op_names)],
                    [a.dtype if a.dtype is not None else _first_type(a.input_type) for a in launches],
                    [_tensor_sizes(a.input_dims) for a in launches])
    return coll


def _tracks(track_keys, track_codes, kind, is_device_cat, meta_evs) -> dict:
    n_tracks = len(track_keys)
    # marked through the codes as they are (no np.unique: NumPy 2.4's imports numpy.ma on its
    # first call, 14-22 ms in every worker)
    device_track = np.zeros(n_tracks, dtype=bool)
    device_track[track_codes[is_device_cat]] = True
    comm_track = np.zeros(n_tracks, dtype=bool)
    comm_track[track_codes[kind == KIND_CODE["comm"]]] = True
    comm_track &= ~device_track
    names = _track_names(meta_evs)
    kinds, labels = [], []
    for t, (pid, tid) in enumerate(track_keys):
        label = names.get((pid, tid)) or ""
        if device_track[t]:
            kinds.append("gpu_stream")
            label = label or f"stream {tid}"
        elif comm_track[t]:
            kinds.append("comm_thread")
        elif isinstance(pid, int) and isinstance(tid, int):
            kinds.append("cpu_thread")
        else:
            kinds.append("other")
        labels.append(label or f"{pid}/{tid}")
    table = pa.table({
        "track_id": col.int32(np.arange(n_tracks)),
        "pid": col.strings([str(p) for p, _ in track_keys]),
        "tid": col.strings([str(t) for _, t in track_keys]),
        "kind": col.strings(kinds),
        "name": col.strings(labels),
    })
    return {"table": table, "comm_tracks": np.flatnonzero(comm_track)}


def _mark_cpu_compute(kind, name_codes, names, track_codes, comm_tracks) -> None:
    """CPU-only traces: aten ops outside the backend's comm threads are compute.

    All of them, not only leaves: on the CPU the BLAS call of ``aten::addmm``
    runs in the op itself while its children are view ops (``aten::expand``,
    ``aten::as_strided``), so leaves alone would miss most of the compute. The
    analyses take unions, so nesting never counts twice. Wait ops were already
    classified as ``sync``.
    """
    is_aten = classify.aten_mask(names)[name_codes]
    cand = is_aten & (kind == KIND_CODE["cpu_op"]) & ~np.isin(track_codes, comm_tracks)
    kind[cand] = KIND_CODE["compute"]


def _launch_ts(kind, correlation, ts_ns, device_rows) -> np.ndarray:
    """CPU launch time of each device event, through the runtime call's correlation id."""
    launch = np.full(len(kind), NULL, np.int64)
    rt = np.flatnonzero((kind == KIND_CODE["runtime"]) & (correlation != NULL))
    if not len(rt) or not len(device_rows):
        return launch
    order = np.argsort(correlation[rt], kind="stable")
    rt_corr, rt_ts = correlation[rt][order], ts_ns[rt][order]
    dev = device_rows[correlation[device_rows] != NULL]
    pos = np.searchsorted(rt_corr, correlation[dev])
    pos_ok = pos < len(rt_corr)
    hit = np.zeros(len(dev), dtype=bool)
    hit[pos_ok] = rt_corr[pos[pos_ok]] == correlation[dev][pos_ok]
    launch[dev[hit]] = rt_ts[pos[hit]]
    return launch


# The largest step number read: beyond it a JSON reader in JavaScript (the dashboard's charts,
# Perfetto) rounds it, and NumPy's int64 overflows a little further on; no job steps this often.
MAX_STEP = 2**53 - 1


class StepOutOfRange(ValueError):
    """A ProfilerStep#N whose N is past ``MAX_STEP`` (decode_source names the file)."""


def _assign_steps(kind, name_codes, names, ts_ns, dur_ns, device_rows, launch_ts) -> np.ndarray:
    """ProfilerStep number of each event: CPU events by time, device events by launch."""
    step = np.full(len(kind), NULL, np.int64)
    rows = np.flatnonzero(kind == KIND_CODE["step"])
    if not len(rows):
        return step
    codes, row_code = np.unique(name_codes[rows], return_inverse=True)
    distinct = [classify.step_number(names[c]) for c in codes.tolist()]
    if max(distinct) > MAX_STEP:
        raise StepOutOfRange(f"ProfilerStep#{max(distinct)}: a step number past {MAX_STEP:,}, the largest read")
    numbers = np.array(distinct, dtype=np.int64)[row_code]
    order = np.argsort(ts_ns[rows], kind="stable")
    starts, ends, numbers = ts_ns[rows][order], (ts_ns + dur_ns)[rows][order], numbers[order]

    def lookup(t: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(starts, t, side="right") - 1
        ok = (idx >= 0) & (t < ends[np.maximum(idx, 0)])
        return np.where(ok, numbers[np.maximum(idx, 0)], NULL)

    when = ts_ns.copy()
    has_launch = launch_ts != NULL
    when[has_launch] = launch_ts[has_launch]  # device work belongs to the step that launched it
    step[:] = lookup(when)
    return step


_ROLE_KINDS = ("annotation", "cpu_op", "comm_launch")


def _roles_table(names: list, name_codes, kind, detail: str) -> pa.Table:
    """The role of every distinct range name that attribution reads (none at the overlap detail)."""
    rows = []
    if detail != "overlap" and len(names):
        ranged = np.flatnonzero(np.bincount(name_codes[col.member(kind, [KIND_CODE[k] for k in _ROLE_KINDS],
                                                                  len(classify.KINDS))],
                                            minlength=len(names)))
        for code in ranged.tolist():
            role = classify.annotation_role(names[code])
            if role:
                rows.append((names[code], *role))
    return pa.table({
        "name": col.strings([r[0] for r in rows]),
        "role": col.strings([r[1] for r in rows]),
        "arg": col.strings([r[2] for r in rows]),
    })


def _collectives_table(coll: dict) -> pa.Table:
    elems = col.optional_ints(coll["elements"])
    in_elems = col.optional_ints(coll["in_elems"])
    out_elems = col.optional_ints(coll["out_elems"])
    # Full buffer elements (nccl-tests "size"): the larger of input and output,
    # else what the op's Input Dims give (gloo spans, c10d launches).
    size = np.maximum(in_elems, out_elems)
    size = np.where(size == NULL, elems, size)
    dtype_codes, dtype_vals = col.optional_strs(coll["dtype"])
    # bytes per element once per distinct dtype (the last entry: no dtype, code -1)
    item_of = np.array([NULL if (s := itemsize(d)) is None else s for d in dtype_vals] + [NULL], dtype=np.int64)
    item = item_of[dtype_codes]
    nbytes = np.where((size != NULL) & (item != NULL), size * np.where(item == NULL, 0, item), NULL)
    name_codes, name_vals = col.optional_strs(coll["collective"])
    # canonical kind and family, once per distinct name (-1 codes: no name)
    kinds = [collective_kind(v) for v in name_vals]
    kind_vals = sorted({k for k in kinds if k})
    kind_code = np.array([kind_vals.index(k) if k else -1 for k in kinds] + [-1], dtype=np.int32)
    families = [classify.collective_family(k) for k in kinds]
    family_vals = sorted({f for f in families if f})
    family_code = np.array([family_vals.index(f) if f else -1 for f in families] + [-1], dtype=np.int32)
    return pa.table({
        "event_id": col.int64(np.array(coll["event_id"], dtype=np.int64)),
        "collective": col.dictionary(name_codes, name_vals),
        "kind": col.dictionary(kind_code[name_codes], kind_vals),
        "family": col.dictionary(family_code[name_codes], family_vals),
        "in_elems": col.int64(in_elems),
        "out_elems": col.int64(out_elems),
        "elements": col.int64(size),
        "min_elements": col.int64(col.optional_ints(coll["min_elements"])),
        "dtype": col.dictionary(dtype_codes, dtype_vals),
        "bytes": col.int64(nbytes),
        "group_size": col.int64(col.optional_ints(coll["group_size"])),
        "pg_name": col.strings([None if v is None else str(v) for v in coll["pg_name"]]),
        "pg_desc": col.strings([None if v is None else str(v) for v in coll["pg_desc"]]),
        "pg_ranks": col.strings(coll["pg_ranks"]),
    })


def _flows_table(flows: dict) -> pa.Table:
    """Flow events (full detail only; an empty table otherwise): frames' flow columns."""
    if not flows:
        flows = {"flow_id": np.zeros(0, dtype=np.int64), "cat_codes": np.zeros(0, dtype=np.int32), "cats": [],
                 "ph_codes": np.zeros(0, dtype=np.int32), "phs": [], "ts_ns": np.zeros(0, dtype=np.int64),
                 "track_id": np.zeros(0, dtype=np.int64)}
    return pa.table({
        "flow_id": col.int64(flows["flow_id"]),
        "cat": col.dictionary(flows["cat_codes"], flows["cats"]),
        "ph": col.dictionary(flows["ph_codes"], flows["phs"]),
        "ts_ns": col.int64(flows["ts_ns"]),
        "track_id": col.int64(flows["track_id"]),
    })


# The memory table's columns: (column, the value the scanner took (Frame.took), MemoryArgs' field).
_MEMORY_COLUMNS = (("device_type", "memory_device_type", "device_type"), ("device_id", "memory_device_id", "device_id"),
                   ("bytes", "memory_bytes", "bytes"), ("total_allocated_bytes", "total_allocated", "total_allocated"),
                   ("total_reserved_bytes", "total_reserved", "total_reserved"))


def _memory_table(fr: Frame, rows, ts_ns, track_codes) -> pa.Table:
    """The allocator's events (rows): their values as read while scanning (the full detail,
    a few hundred thousand events for a long profile_memory trace), decoded from their args
    where the scan did not take them or found one of another type (odd rows)."""
    if all(took in fr.took for _, took, _ in _MEMORY_COLUMNS):
        values = {name: fr.took.at(took, rows) for name, took, _ in _MEMORY_COLUMNS}
        decode_at = np.flatnonzero(fr.took_odd[rows])
        if len(decode_at):
            margs = MEMORY_ARGS_DECODER.decode(fr.args_json(rows[decode_at]))
            for name, _, field_name in _MEMORY_COLUMNS:
                values[name][decode_at] = col.optional_ints([getattr(a, field_name) for a in margs])
    else:  # the other details read them from their args: every row decoded, one column at a time
        margs = MEMORY_ARGS_DECODER.decode(fr.args_json(rows)) if len(rows) else []
        values = {name: col.optional_ints([getattr(a, field_name) for a in margs])
                  for name, _, field_name in _MEMORY_COLUMNS}
    return pa.table({"ts_ns": col.int64(ts_ns[rows]), "track_id": col.int32(track_codes[rows]),
                     **{name: col.int64(values[name]) for name, _, _ in _MEMORY_COLUMNS}})
