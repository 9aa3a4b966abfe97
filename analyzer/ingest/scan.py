"""The C scanner's pass over one trace file: the kept events' columns as raw buffers.

``scan`` streams the decompressed file (``stream.py``) through ``_kineto_scan``, which
keeps only the events the detail reads (``keep_mode``, asked once per distinct phase,
category and name) and their args where they are read; ``frames.from_scan`` turns
what it returns into a Frame. This module imports neither NumPy nor Arrow, and the
scanner parses without the GIL: a one-rank analysis scans its file while another
thread imports the rest of the analyzer and opens the store (``scan_beside``).
"""

from __future__ import annotations

import json
import re
import sys
import threading
from dataclasses import dataclass
from typing import Callable

from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import classify, stream
from overlapscope.analyzer.ingest.kineto import ARGS_KEYS
from overlapscope.analyzer.ingest.limits import ENV_MAX_KEPT_MB, Limits, mb

try:
    from overlapscope.analyzer.ingest import _kineto_scan
except ImportError:  # not built (no compiler at install): msgspec does it all (frames.py)
    _kineto_scan = None

HOST_ONLY_CATEGORIES = {"cpu_op", "python_function", "cpu_instant_event"}
# The args the overlap detail reads: correlation ids of device work and runtime calls.
ARGS_AT_OVERLAP = set(classify.DEVICE_CATEGORIES) | classify.RUNTIME_CATEGORIES
KNOWN_PH = "XiIMstfBECbnePONDRcVv()"  # every Chrome-trace phase
SLICE_PH, FLOW_PH_CHARS = "XIi", "stf"

# Args values read into columns while scanning, so that most events' args need no decoding:
# (field, key, 'i' integer | 'f' float | 'p' present). An integer is a plain JSON integer
# (outside int64: none, as columns._to_int reads it); a float a number or null; any other
# value of these keys makes its row odd (decode.py decodes odd rows, with their errors).
TAKE_KEYS = (("correlation", "correlation", "i"), ("external_id", "External id", "i"), ("stream", "stream", "i"),
             ("device", "device", "i"), ("flops", "flops", "f"), ("collective", "Collective name", "p"),
             # the allocator's [memory] events (kineto.MemoryArgs: decode._memory_table)
             ("memory_device_type", "Device Type", "i"), ("memory_device_id", "Device Id", "i"),
             ("memory_bytes", "Bytes", "i"), ("total_allocated", "Total Allocated", "i"),
             ("total_reserved", "Total Reserved", "i"))
MEMORY_TAKEN = ("memory_device_type", "memory_device_id", "memory_bytes", "total_allocated", "total_reserved")
# What each detail reads of them (the overlap detail: the correlation of launches and kernels,
# and which kernels name a collective; the memory events' values at the full detail only, the
# one that keeps those events of a GPU trace); fewer keys, less memory per kept event.
TAKEN_BY_DETAIL = {"overlap": ("correlation", "collective"),
                   "attribution": tuple(t[0] for t in TAKE_KEYS if t[0] not in MEMORY_TAKEN)}


def take_keys(detail: str) -> tuple:
    wanted = TAKEN_BY_DETAIL.get(detail)
    return tuple(t for t in TAKE_KEYS if wanted is None or t[0] in wanted)


def keep_mode(detail: str, ph: str, cat: str, name: str) -> int:
    """What a load at ``detail`` keeps of events of (ph, cat, name): 0 nothing (counted),
    1 the row, 2 the row and its args; 3 and 4 as 1 and 2 on CPU-only traces only
    (their ops are the compute; on GPU traces host ops are kept only where read)."""
    if ph == "M":
        return 2
    if ph in FLOW_PH_CHARS:
        return 1 if detail == "full" else 0
    if ph not in SLICE_PH or (ph == "i" and detail == "overlap"):
        return 0
    if detail == "full":
        return 2
    args = detail != "overlap" or cat in ARGS_AT_OVERLAP
    if cat in HOST_ONLY_CATEGORIES:
        # Older PyTorch writes ProfilerStep#N as a cpu_op: always kept.
        wanted = classify.PROFILER_STEP.match(name) is not None or (
            detail == "attribution" and classify.needed_for_attribution(name))
        if not wanted:
            return 4 if args else 3
    return 2 if args else 1


def token_value(tok: bytes):
    """A scanned token as Python: a string (quotes and escapes resolved) or a number."""
    if tok[:1] == b'"':
        return json.loads(tok) if b"\\" in tok else tok[1:-1].decode("utf-8", "replace")
    try:
        return int(tok)
    except ValueError:
        return float(tok)


def scanner_keep(detail: str) -> Callable[[int, bytes | None, bytes | None], int]:
    """The scanner's keep callback for ``detail`` (``keep_mode`` of the raw tokens)."""
    def keep(ph: int, cat: bytes | None, name: bytes | None) -> int:
        if chr(ph) not in KNOWN_PH:
            return 0  # refused after the scan, with the count (frames._check_phases)
        cat_s = "" if cat is None else token_value(cat)
        name_s = "" if name is None else token_value(name)
        return keep_mode(detail, chr(ph), cat_s if isinstance(cat_s, str) else "",
                         name_s if isinstance(name_s, str) else "")
    return keep


_KEPT_FAILURE = re.compile(r"keeps more than the limit: (\d+) events so far")


def too_much_kept(events: int, limits: Limits) -> str:
    return (f"the events it keeps take more than {mb(limits.max_kept_bytes)} ({events:,} events so far), the limit "
            f"for one trace (${ENV_MAX_KEPT_MB} raises it)")


@dataclass
class Scanned:
    """What the scanner kept of one file: its columns as raw buffers (``Scanner.finish``:
    the slice rows' ph, cat, name, pid, tid, id, ts, dur, args_start, args_len, args, took,
    took_flags; the metadata and flow rows' apart, o_ph ... o_args_len and meta_args;
    tokens, top, by_ph, n, gpu) and the count of replaced invalid text (``textfix``)."""

    columns: dict
    text_replaced: int


def scan(path: str, member: str | None, where: str, detail: str, limits: Limits,
         chunk_bytes: int | None = None) -> Scanned:
    """One trace file through the C scanner, keeping what ``detail`` reads, within ``limits``
    (``chunk_bytes``: read in chunks of this size, ``stream.CHUNK_BYTES`` when None)."""
    scanner = _kineto_scan.Scanner(scanner_keep(detail), max_value_bytes=limits.max_value_bytes,
                                   max_depth=limits.max_depth, max_tokens=limits.max_tokens,
                                   args_keys=ARGS_KEYS[detail],
                                   take_keys=[(key.encode(), kind) for _, key, kind in take_keys(detail)],
                                   max_kept_bytes=limits.max_kept_bytes)
    fixed: dict = {}
    try:
        for piece in stream.chunks(path, member, where, limits, fixed, chunk_bytes):
            scanner.feed(piece)
        columns = scanner.finish()
    except ValueError as err:
        kept = _KEPT_FAILURE.match(str(err))
        raise InputError(where, too_much_kept(int(kept.group(1)), limits) if kept else str(err)) from None
    return Scanned(columns, fixed.get("text_replaced", 0))


# While a scan runs beside another thread, how often a waiting thread gets the GIL (s):
# the scan needs it between its chunks and for each keep() call (a hundred or so per
# file), and the default 5 ms would have it wait that long each time behind the imports.
SWITCH_INTERVAL_S = 2e-5
# ... and the chunks it reads: the scan takes the GIL between them (1 MiB chunks made its
# waits behind the imports 4x as many: 0.218 s against 0.168 s for a 54 MB trace).
BESIDE_CHUNK_BYTES = 4 << 20


def scan_beside(path: str, member: str | None, where: str, detail: str, limits: Limits, meanwhile: Callable,
                then: Callable):
    """``then(scan(...))`` of one file in this thread while ``meanwhile(ready)`` runs in
    another: (what ``then`` returned, what ``meanwhile`` returned). The scanner releases the
    GIL while it parses, so ``meanwhile`` (importing NumPy, Arrow, DuckDB and the analyzer:
    0.2 s of Python that holds the GIL) runs on another core instead of before the scan.
    ``meanwhile`` calls ``ready()`` once what ``then`` needs is imported; ``then`` (the
    columns, which hold the GIL) runs from there beside the rest of ``meanwhile`` (a store
    opening, which DuckDB does without it). Where other threads run already (a server),
    nothing runs beside (the switch interval is the whole process's): the scan first, so
    that a bad file costs no store. ``meanwhile``'s error is raised after the scan's."""
    out: dict = {}
    ready = threading.Event()

    def run() -> None:
        try:
            out["value"] = meanwhile(ready.set)
        except BaseException as err:  # noqa: BLE001 (raised in the caller's thread)
            out["error"] = err
        finally:
            ready.set()

    if threading.active_count() > 1:
        scanned = scan(path, member, where, detail, limits)
        run()
        if "error" in out:
            raise out["error"]
        return then(scanned), out["value"]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    helper = threading.Thread(target=run, name="overlapscope-prepare", daemon=True)
    helper.start()
    try:
        scanned = scan(path, member, where, detail, limits, BESIDE_CHUNK_BYTES)
        ready.wait()
        if "error" not in out:
            done = then(scanned)
    finally:
        helper.join()
        sys.setswitchinterval(interval)
    if "error" in out:
        raise out["error"]
    return done, out["value"]
