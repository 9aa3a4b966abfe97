"""Reading back an ``overlapscope export --perfetto`` file: one JSON, every rank in it.

An export starts with ``{"overlapscope_export":`` (export/perfetto.py). Its events are
split by pid (one per rank) into per-rank Kineto files with the rank's own
``distributedInfo`` and ``deviceProperties``, plus the manifest, in a private temporary
folder that the loader then reads as any run bundle; the folder goes when the process
ends. The added ``overlapscope`` tracks travel with their rank (classified ``other``:
they change no figure).
"""

from __future__ import annotations

import atexit
import gzip
import os
import shutil
import tempfile
import zlib
from collections import defaultdict

import msgspec

from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import files
from overlapscope.contract.names import MANIFEST_FILE

MAGIC = b'{"overlapscope_export":'
FORMAT_PREFIX = "overlapscope-perfetto/"


class _Header(msgspec.Struct):
    format: str
    ranks: list[dict]
    manifest: dict | None = None


class _Export(msgspec.Struct):
    overlapscope_export: _Header
    traceEvents: list[msgspec.Raw] = []


class _Pid(msgspec.Struct):
    pid: int | str | None = None


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


_folders: list[str] = []


@atexit.register
def _cleanup() -> None:
    for folder in _folders:
        shutil.rmtree(folder, ignore_errors=True)


def _read(path: str, max_bytes: int) -> bytes:
    """The file's (decompressed) bytes, at most ``max_bytes`` of them."""
    too_big = InputError(path, f"export larger than the limit of {max_bytes // 2**20:,} MiB")
    if files.size(path) > max_bytes:
        raise too_big
    with files.open_binary(path) as raw:
        data = raw.read()
    if data[:2] != b"\x1f\x8b":
        return data
    d = zlib.decompressobj(wbits=47)  # gzip
    try:
        out = d.decompress(data, max_bytes + 1)
    except zlib.error as err:
        raise InputError(path, f"not a valid gzip file: {err}") from None
    if len(out) > max_bytes or d.unconsumed_tail:
        raise too_big
    return out


def split(path: str, max_bytes: int) -> str:
    """The export at ``path`` as a run bundle folder (per-rank files and the manifest)."""
    data = _read(path, max_bytes)
    try:
        doc = msgspec.json.decode(data, type=_Export)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise InputError(path, f"not a readable overlapscope export: {err}") from None
    header = doc.overlapscope_export
    if not header.format.startswith(FORMAT_PREFIX):
        raise InputError(path, f"an export of another format: {header.format!r}")
    pid_of = msgspec.json.Decoder(_Pid)
    by_pid: dict = defaultdict(list)
    for ev in doc.traceEvents:
        by_pid[pid_of.decode(ev).pid].append(ev)
    folder = tempfile.mkdtemp(prefix="overlapscope-export-")
    _folders.append(folder)
    bundle = os.path.join(folder, os.path.basename(path).removesuffix(".gz").removesuffix(".json"))
    os.mkdir(bundle)
    for r in header.ranks:
        rank = r["rank"]
        events = by_pid.get(rank, [])
        head = {"schemaVersion": 1, "distributedInfo": r.get("distributedInfo") or {"rank": rank},
                "deviceProperties": r.get("deviceProperties") or [], "hostname": r.get("hostname"),
                "traceEvents": []}
        text = msgspec.json.encode(head)[:-3]  # ... "traceEvents":[ and the events after it
        with open(os.path.join(bundle, f"rank-{rank}.json"), "wb") as out:
            out.write(text + b"[")
            out.write(b",".join(bytes(e) for e in events))
            out.write(b"]}")
    if header.manifest is not None:
        with open(os.path.join(bundle, MANIFEST_FILE), "wb") as out:
            out.write(msgspec.json.encode(header.manifest))
    return bundle
