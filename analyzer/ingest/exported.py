"""Reading back an ``overlapscope export --perfetto`` file: one JSON, every rank in it.

An export starts with ``{"overlapscope_export":`` (export/perfetto.py): a header (format,
the ranks with their ``distributedInfo`` and ``deviceProperties``, the manifest), then
``traceEvents``. It is split into per-rank Kineto files and the manifest while it streams
through the same capped reader as any trace (``stream.chunks``: size, ratio and the
caller's limits), in a temporary folder of its own (``tempdirs``) that the loader reads as
a run bundle and removes when the analysis ends. Nothing here holds more than a window
of events and what waits to be written (``FLUSH_BYTES``), whatever the export's size.

The header is validated as a trace's header is: ranks are distinct integers within the
world-size cap, at most the archive's member count, and every event's pid is one of
them; rank files are named from those integers alone. The added ``overlapscope`` tracks
travel with their rank (classified ``other``: they change no figure).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import zlib

import msgspec

from overlapscope.analyzer import tempdirs
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import files, stream
from overlapscope.analyzer.ingest.limits import Limits, mb
from overlapscope.analyzer.ingest.manifests import parse_manifest
from overlapscope.contract import manifest as contract
from overlapscope.contract.names import MANIFEST_FILE

MAGIC = b'{"overlapscope_export":'
FORMAT_PREFIX = "overlapscope-perfetto/"
WINDOW_BYTES = 8 << 20  # events decoded at a time
CHUNK_BYTES = 4 << 20  # read at a time (the buffer is copied once per chunk)
FLUSH_BYTES = 32 << 20  # events held for their rank files before they are written
HEADER_BYTES_PER_RANK = 64 << 10  # a rank's distributedInfo (its process groups) and devices
_WS = b" \t\r\n"


class _Rank(msgspec.Struct):
    rank: int
    distributedInfo: dict | None = None
    deviceProperties: list | None = None
    hostname: str | None = None


class _Header(msgspec.Struct):
    format: str
    ranks: list[_Rank]
    zero_ns: int | None = None  # the instant the events' ts count from (negative: before the first step)
    manifest: msgspec.Raw = msgspec.Raw(b"null")


class _Pid(msgspec.Struct):
    pid: int | str | None = None  # anything else fails the window, then the event, in one line


def _head(path: str) -> bytes:
    with files.open_binary(path) as raw:
        start = raw.read(len(MAGIC) + 2)
        if start[:2] == b"\x1f\x8b":
            with files.open_binary(path) as again, gzip.GzipFile(fileobj=again) as gz:
                return gz.read(len(MAGIC))
        return start[:len(MAGIC)]


def is_export(path: str) -> bool:
    """Whether the file at ``path`` is an overlapscope export (its first bytes say so)."""
    try:
        return _head(path) == MAGIC
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return False  # not readable as an export: the trace loader says what is wrong with it


@dataclasses.dataclass
class Split:
    """An export split into a run bundle: ``bundle`` holds the rank files and the manifest
    (already validated: ``manifest`` and its ``manifest_text``); ``folder`` is the temporary
    folder to remove once the analysis is done (``tempdirs.remove``)."""

    folder: str
    bundle: str
    manifest: contract.Manifest | None
    manifest_text: str | None


# A JSON string (closed: group 1 is its closing quote, empty where the buffer cut it) or a bracket.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*("?)|[\[\]{}]')
_SCALAR_END = re.compile(rb"[,}\]\s]")


class _Reader:
    """The decompressed export as a buffer that refills from the stream on demand."""

    def __init__(self, chunks, where: str):
        self.chunks, self.where = chunks, where
        self.buf, self.pos, self.eof = b"", 0, False

    def more(self) -> bool:
        """Read one more chunk; False at the end of the file."""
        if self.eof:
            return False
        piece = next(self.chunks, None)
        if piece is None:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + piece  # the consumed part goes
        self.pos = 0
        return True

    def peek(self) -> int | None:
        """The next byte that is no white space (not consumed), or None at the end."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return None

    def expect(self, byte: bytes, what: str) -> None:
        if self.peek() != byte[0]:
            raise self.malformed(f"expected {what}")
        self.pos += 1

    def malformed(self, what: str) -> InputError:
        return InputError(self.where, f"not a readable overlapscope export: {what}")

    def value(self, max_bytes: int, what: str) -> bytes:
        """The next JSON value's text (found by its strings and brackets; decoded by the caller),
        at most ``max_bytes`` long."""
        first = self.peek()
        if first is None:
            raise self.malformed(f"the file ends before {what}")
        start = self.pos
        if first not in b'{["':  # a number, true, false or null
            while (m := _SCALAR_END.search(self.buf, self.pos)) is None and self.more():
                start = 0
            end = m.start() if m else len(self.buf)
            self.pos = end
            return self.buf[start:end]
        depth, at = 0, start
        while True:
            for m in _TOKEN.finditer(self.buf, at):
                if m.group(0)[:1] == b'"':
                    if not m.group(1) or m.end() > len(self.buf):
                        break  # cut by the buffer's end: read on from the string's start
                    at = m.end()
                    if depth == 0:
                        self.pos = at
                        return self.buf[start:at]
                    continue
                at = m.end()
                depth += 1 if m.group(0) in b"[{" else -1
                if depth == 0:
                    self.pos = at
                    return self.buf[start:at]
                if depth < 0:
                    raise self.malformed(f"unbalanced brackets in {what}")
            else:
                at = len(self.buf)
            if at - start > max_bytes:
                raise InputError(self.where, f"{what} is larger than {mb(max_bytes)}")
            offset = self.pos
            if not self.more():
                raise self.malformed(f"the file ends inside {what}")
            start, at = start - offset, at - offset


def _key(reader: _Reader) -> str:
    text = reader.value(1 << 16, "a key")
    try:
        key = msgspec.json.decode(text)
    except msgspec.DecodeError:
        key = None
    if not isinstance(key, str):
        raise reader.malformed("a key that is no string")
    return key


def _header(reader: _Reader, limits: Limits, where: str) -> _Header:
    cap = min(limits.max_value_bytes, limits.max_manifest_bytes + HEADER_BYTES_PER_RANK * limits.max_archive_members)
    text = reader.value(cap, "the export's header")
    try:
        header = msgspec.json.decode(text, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise InputError(where, f"not a readable overlapscope export: header: {err}") from None
    except RecursionError:
        raise InputError(where, "the export's header is nested deeper than the limit") from None
    if not header.format.startswith(FORMAT_PREFIX):
        raise InputError(where, f"an export of another format: {header.format[:80]!r}")
    if not header.ranks:
        raise InputError(where, "the export's header lists no rank")
    if len(header.ranks) > limits.max_archive_members:
        raise InputError(where, f"the export lists {len(header.ranks):,} ranks, more than the limit of "
                                f"{limits.max_archive_members:,}")
    seen: set[int] = set()
    for r in header.ranks:
        if not 0 <= r.rank < limits.max_world_size:
            raise InputError(where, f"the export's header lists rank {r.rank}, out of range (0 to "
                                    f"{limits.max_world_size - 1:,})")
        if r.rank in seen:
            raise InputError(where, f"the export's header lists rank {r.rank} twice")
        seen.add(r.rank)
    return header


class _RankFiles:
    """Each rank's Kineto file, written as its events arrive (held until ``FLUSH_BYTES``)."""

    def __init__(self, bundle: str, header: _Header):
        self.paths, self.started = {}, set()
        self.pending: dict[int, list[bytes]] = {}
        self.pending_bytes = 0
        for r in header.ranks:
            info = r.distributedInfo if r.distributedInfo is not None else {"rank": r.rank}
            head = {"schemaVersion": 1, "distributedInfo": info, "deviceProperties": r.deviceProperties or [],
                    "hostname": r.hostname, "overlapscope_zero_ns": header.zero_ns, "traceEvents": []}
            path = os.path.join(bundle, f"rank-{r.rank}.json")  # the validated integer only
            with open(path, "wb") as out:
                out.write(msgspec.json.encode(head)[:-2])  # ... "traceEvents":[ and the events after it
            self.paths[r.rank] = path

    def add(self, pid: int, events: bytes) -> None:
        self.pending.setdefault(pid, []).append(events)
        self.pending_bytes += len(events)
        if self.pending_bytes > FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        for pid, parts in self.pending.items():
            with open(self.paths[pid], "ab") as out:
                if pid in self.started:
                    out.write(b",")
                out.write(b",".join(parts))
            self.started.add(pid)
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> None:
        self.flush()
        for path in self.paths.values():
            with open(path, "ab") as out:
                out.write(b"]}")


_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_PIDS = msgspec.json.Decoder(list[_Pid])


EVENT_BYTES = 64 << 20  # the largest event read (an export's are a few hundred bytes)


def _events(reader: _Reader, out: _RankFiles, limits: Limits) -> int:
    """The ``traceEvents`` array (its ``[`` read), window by window, into the rank files; the count."""
    count, window, cap = 0, WINDOW_BYTES, min(limits.max_value_bytes, EVENT_BYTES)
    while True:
        first = reader.peek()
        if first == ord("]"):
            reader.pos += 1
            return count
        if first is None:
            raise reader.malformed("the file ends inside traceEvents")
        while len(reader.buf) - reader.pos < window and reader.more():
            pass
        taken = _take(reader, window)
        if taken is None:  # no whole event in the window: a larger one, or a broken one
            if window < cap and not (reader.eof and len(reader.buf) - reader.pos < window):
                window *= 2
                continue
            _refuse_event(reader, cap, count + 1)
        raws, pids = taken
        unknown = set(pids) - out.paths.keys()
        if unknown:
            bad = sorted(unknown, key=repr)[0]
            raise InputError(reader.where, f"event {count + pids.index(bad) + 1:,} has pid {_short(bad)}, which is "
                                           "no rank in the export's header")
        start = 0
        for i in range(1, len(pids) + 1):  # a rank's events come together: one join per run of them
            if i == len(pids) or pids[i] != pids[start]:
                out.add(pids[start], b",".join(raws[start:i]))
                start = i
        count += len(raws)
        window = WINDOW_BYTES


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _refuse_event(reader: _Reader, cap: int, number: int):
    """Why event ``number`` (at the reader's position) cannot be read: one line."""
    text = reader.value(cap, f"event {number:,}")
    try:
        msgspec.json.decode(text, type=_Pid)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise reader.malformed(f"event {number:,}: {err}") from None
    except RecursionError:
        raise reader.malformed(f"event {number:,} is nested deeper than the limit") from None
    raise reader.malformed(f"what follows event {number:,} is no ',' or ']'")


_TRIES = 8  # cuts decoded in a window before it grows
_SKIPS = 4096  # '}' that end no event (inside an event), looked past in a window before it grows
_WS_RUN = re.compile(rb"[ \t\r\n]*")


def _cuts(buf: bytes, pos: int, end: int):
    """Where whole events may end in ``buf[pos:end]``, from the right: a '}' followed by a comma
    (between events) or by white space and ']' (the last event); with the byte after the
    separator's white space."""
    skipped, c = 0, end
    while skipped < _SKIPS:
        c = buf.rfind(b"}", pos, c)
        if c < 0:
            return
        after = _WS_RUN.match(buf, c + 1).end()
        if after < len(buf) and buf[after] in b",]":
            yield c, after
        else:
            skipped += 1


def _take(reader: _Reader, window: int):
    """The whole events at the start of the buffer's next ``window`` bytes, consumed with the
    comma after them: (raw events, their pids), or None where no cut in the window parses."""
    buf, pos = reader.buf, reader.pos
    for tries, (cut, after) in enumerate(_cuts(buf, pos, min(len(buf), pos + window))):
        if tries == _TRIES:
            return None
        text = b"[" + buf[pos:cut + 1] + b"]"
        try:
            raws, pids = _RAWS.decode(text), [p.pid for p in _PIDS.decode(text)]
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            continue  # the cut was inside an event
        reader.pos = after + 1 if buf[after] == ord(",") else after
        return raws, pids
    return None


def split(path: str, limits: Limits) -> Split:
    """The export at ``path`` as a run bundle in a temporary folder, read within ``limits``
    (its decompressed size within the archive cap: an export is every rank's trace)."""
    where = path
    chunks = stream.chunks(path, None, where, dataclasses.replace(limits, max_trace_bytes=limits.max_archive_bytes),
                           chunk_bytes=CHUNK_BYTES)
    reader = _Reader(iter(chunks), where)
    folder = tempdirs.make("export", until_exit=True)
    try:
        while len(reader.buf) < len(MAGIC) and reader.more():
            pass
        if not reader.buf.startswith(MAGIC):
            raise reader.malformed("it does not start with the export's header")
        reader.pos = len(MAGIC)
        header = _header(reader, limits, where)
        manifest = text = None
        if bytes(header.manifest) != b"null":
            manifest, text = _manifest(bytes(header.manifest), f"{where}#manifest", limits)
        bundle = os.path.join(folder, "run")
        os.mkdir(bundle)
        out = _RankFiles(bundle, header)
        events = _document(reader, out, limits)
        if events is None:
            raise reader.malformed("no traceEvents")
        out.close()
        if text is not None:
            with open(os.path.join(bundle, MANIFEST_FILE), "w", encoding="utf-8") as f:
                f.write(text)
        return Split(folder, bundle, manifest, text)
    except BaseException:
        tempdirs.remove(folder)
        raise
    finally:
        chunks.close()


def _document(reader: _Reader, out: _RankFiles, limits: Limits) -> int | None:
    """The members after the header (``traceEvents`` into the rank files, others skipped) to
    the document's end; the events' count (None without ``traceEvents``)."""
    events = None
    while True:
        nxt = reader.peek()
        if nxt == ord("}"):
            reader.pos += 1
            if reader.peek() is not None:
                raise reader.malformed("data after the export's end")
            return events
        reader.expect(b",", "',' or '}' after a member")
        key = _key(reader)
        reader.expect(b":", "':' after a key")
        if key != "traceEvents":
            reader.value(limits.max_value_bytes, f"the member {key[:40]!r}")
            continue
        if events is not None:
            raise reader.malformed("traceEvents given twice")
        reader.expect(b"[", "traceEvents as a list")
        events = _events(reader, out, limits)


def _manifest(data: bytes, where: str, limits: Limits):
    if len(data) > limits.max_manifest_bytes:
        raise InputError(where, f"manifest is larger than {mb(limits.max_manifest_bytes)}")
    return parse_manifest(data, where)
