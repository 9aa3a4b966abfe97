"""Find the per-rank trace files behind the paths a user gives.

A path may be a trace file (``.json``, ``.json.gz``, ``*.pt.trace.json(.gz)``), a
directory of such files, or a ``.zip`` of them; on this machine's disk, or a URI of
a file system pyarrow reads (``s3://``, ``gs://``, ``file://``: ``files.py``). A tracer bundle also holds a
``manifest.json``; it is returned beside the traces, never parsed as one.

Only names are resolved here; the bytes are read by the worker that decodes them
(``stream.chunks``), so a parallel load ships paths, not megabytes. Archives are
checked here against the load's limits (members, sizes, encryption, nesting);
member names are never used as paths on disk.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import zipfile
from dataclasses import dataclass, field

from overlapscope.analyzer import tempdirs
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import exported, files
from overlapscope.analyzer.ingest.manifests import parse_manifest
from overlapscope.analyzer.ingest.limits import ENV_MAX_MEMBERS, ENV_MAX_TRACE_MB, Limits, from_env as limits_from_env, mb
from overlapscope.contract.manifest import Manifest
from overlapscope.contract.names import MANIFEST_FILE as MANIFEST_NAME
TRACE_SUFFIXES = (".json", ".json.gz")
STDIN = "-"  # the path that reads standard input
STDIN_LABEL = "(stdin)"  # how errors and tables name it
STDIN_CHUNK_BYTES = 1 << 20

# The rank a file name carries: rank-3, rank_3, rank3, worker3 (docs/architecture.md, inputs).
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class TraceSource:
    """One per-rank trace file, on disk or inside a zip archive."""

    path: str  # the file on disk (the archive for a zip member)
    member: str | None = None  # the member name inside the archive
    label: str | None = None  # how to name it when its path is not the user's (a rank split out of an export)

    @property
    def display(self) -> str:
        """How errors and tables name this file."""
        if self.label:
            return self.label
        return f"{self.path}:{self.member}" if self.member else self.path

    @property
    def basename(self) -> str:
        return os.path.basename(self.member) if self.member else files.basename(self.path)


@dataclass
class Inputs:
    """What a set of paths resolves to: trace sources and an optional manifest."""

    sources: list[TraceSource]
    manifest: Manifest | None = None
    manifest_source: str | None = None
    manifest_text: str | None = None  # as written (kept in the catalog with any newer keys)
    temporary: list[str] = field(default_factory=list)  # folders made for the load (an export split): ``release``

    def release(self) -> None:
        """Remove the temporary folders the sources are in (once the load has read them)."""
        for folder in self.temporary:
            tempdirs.remove(folder)
        self.temporary = []


def rank_from_name(name: str) -> int | None:
    """The rank in a file name (``rank-3``, ``rank3``, ``worker3``), or None (also for
    digits too long to be a rank)."""
    matches = _RANK_IN_NAME.findall(os.path.basename(name))
    return int(matches[-1]) if matches and len(matches[-1]) <= 9 else None


def _is_trace_name(name: str) -> bool:
    base = os.path.basename(name)
    return base != MANIFEST_NAME and base.lower().endswith(TRACE_SUFFIXES) and not base.startswith(".")


def _read_manifest(read, size: int, where: str, limits: Limits) -> tuple[Manifest, str]:
    if size > limits.max_manifest_bytes:
        raise InputError(where, f"manifest is larger than {mb(limits.max_manifest_bytes)}")
    return parse_manifest(read(), where)


def _from_zip(path: str, limits: Limits) -> Inputs:
    try:
        with files.open_binary(path) as raw, zipfile.ZipFile(raw) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir()]
            if len(infos) > limits.max_archive_members:
                raise InputError(path, f"zip archive holds {len(infos):,} files, more than the limit of "
                                       f"{limits.max_archive_members:,} (one per rank; ${ENV_MAX_MEMBERS} raises it)")
            declared = sum(i.file_size for i in infos)
            if declared > limits.max_archive_bytes:
                raise InputError(path, f"zip archive declares {mb(declared)} of files, more than the limit of "
                                       f"{mb(limits.max_archive_bytes)}")
            for i in infos:
                if i.flag_bits & 0x1:
                    raise InputError(f"{path}:{_printable(i.filename)}", "encrypted zip member: store traces unencrypted")
                if i.filename.lower().endswith((".zip", ".tar", ".tgz", ".tar.gz")):
                    raise InputError(f"{path}:{_printable(i.filename)}", "an archive inside the archive: give the "
                                                                         "per-rank traces in one .zip")
            manifests = [i for i in infos if os.path.basename(i.filename) == MANIFEST_NAME]
            manifest = text = None
            if manifests:
                where = f"{path}:{manifests[0].filename}"
                manifest, text = _read_manifest(lambda: zf.read(manifests[0]), manifests[0].file_size, where, limits)
    except zipfile.BadZipFile:
        raise InputError(path, "not a valid zip archive") from None
    except OSError as err:
        raise InputError(path, f"cannot read: {err.strerror or err}") from None
    names = [i.filename for i in infos]
    sources = [TraceSource(path, n) for n in sorted(names) if _is_trace_name(n) and "__MACOSX" not in n]
    if not sources:
        raise InputError(path, "zip archive holds no trace files (*.json, *.json.gz)")
    return Inputs(sources, manifest, f"{path}:{manifests[0].filename}" if manifest else None, text)


def _printable(name: str) -> str:
    """A member name as errors show it: control characters escaped."""
    return name.encode("unicode_escape").decode("ascii") if not name.isprintable() else name


def _from_dir(path: str, limits: Limits) -> Inputs:
    names = sorted(files.listdir(path))
    sources = [TraceSource(files.join(path, n)) for n in names if _is_trace_name(n)]
    sources = [s for s in sources if files.isfile(s.path)]
    if not sources:
        raise InputError(path, "directory holds no trace files (*.json, *.json.gz)")
    manifest = text = None
    manifest_path = files.join(path, MANIFEST_NAME)
    if files.isfile(manifest_path):
        with files.open_binary(manifest_path) as f:
            manifest, text = _read_manifest(f.read, files.size(manifest_path), manifest_path, limits)
    return Inputs(sources, manifest, manifest_path if manifest else None, text)


_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
            (stat.S_ISSOCK, "a socket"))


def _refuse_special(path: str) -> None:
    """Only regular files and folders are read: a device never ends (``/dev/zero``) and a
    FIFO blocks its reader, so they are refused from their mode, before any read (a link
    is judged by what it points to)."""
    if files.is_uri(path):
        return
    mode = os.stat(path).st_mode
    for test, what in _SPECIAL:
        if test(mode):
            raise InputError(path, f"{what}, not a file: give a trace file, a folder of them or a .zip")


def _one(path: str, limits: Limits, temporary: list[str]) -> Inputs:
    """What one path the user gave holds."""
    if not files.exists(path):
        raise InputError(path, "no such file or directory")
    _refuse_special(path)
    if files.isdir(path):
        return _from_dir(path, limits)
    if path.lower().endswith(".zip") or (not files.is_uri(path) and zipfile.is_zipfile(path)):
        return _from_zip(path, limits)
    if files.basename(path) == MANIFEST_NAME:
        with files.open_binary(path) as f:
            manifest_one, text = _read_manifest(f.read, files.size(path), path, limits)
        return Inputs([], manifest_one, path, text)
    if not files.is_uri(path) and exported.is_export(path):  # every rank in one file: split back
        split = exported.split(path, limits)
        temporary.append(split.folder)
        return Inputs([TraceSource(files.join(split.bundle, n), label=f"{path}#{n}")
                       for n in sorted(os.listdir(split.bundle)) if _is_trace_name(n)],
                      split.manifest, f"{path}#manifest" if split.manifest else None, split.manifest_text)
    return Inputs([TraceSource(path)])


def source_text(paths: list[str]) -> str:
    """The paths as a run's ``source`` names them (standard input as ``(stdin)``)."""
    return " ".join(STDIN_LABEL if p == STDIN else p for p in paths)


def spool_stdin(folder: str, limits: Limits, stream=None) -> str:
    """Standard input's bytes in a file of ``folder`` named for what they are (.zip, .json.gz,
    .json), under the cap of one trace file's bytes (a pipe has no size to check first)."""
    stream = stream if stream is not None else sys.stdin.buffer
    if getattr(stream, "isatty", lambda: False)():
        raise InputError(STDIN_LABEL, "a terminal, not a trace: pipe one in (overlapscope analyze - < trace.json)")
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no descriptor (a stream made in memory)
        mode = None
    for test, what in _SPECIAL if mode is not None else ():
        if test(mode) and what not in ("a FIFO", "a socket"):  # a pipe is a FIFO: what ``-`` is for
            raise InputError(STDIN_LABEL, f"{what}, not a file: pipe a trace in or redirect one from a file")
    head = stream.read(STDIN_CHUNK_BYTES)
    spooled = os.path.join(folder, _sniffed_name(head))
    if spooled.endswith(".json") and head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b""):
        # refused from its first bytes: a pipe of anything else (``yes |``) would spool up to the cap
        raise InputError(STDIN_LABEL, "not a Kineto trace: neither a JSON object nor a gzip or zip file")
    read_bytes = 0
    with open(spooled, "wb") as out:
        while head:
            read_bytes += len(head)
            if read_bytes > limits.max_trace_bytes:
                raise InputError(STDIN_LABEL, f"more than the limit of {mb(limits.max_trace_bytes)} "
                                              f"(${ENV_MAX_TRACE_MB} raises it)")
            out.write(head)
            head = stream.read(STDIN_CHUNK_BYTES)
    if read_bytes == 0:
        raise InputError(STDIN_LABEL, "empty: nothing was piped in")
    return spooled


def _sniffed_name(head: bytes) -> str:
    """A name for standard input's bytes that the resolver reads as what they are."""
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "stdin.zip"
    return "stdin.json.gz" if head.startswith(b"\x1f\x8b") else "stdin.json"


def _from_stdin(limits: Limits, temporary: list[str], stream=None) -> Inputs:
    """``-``: standard input, a trace (plain or gzip), a .zip of them or an export, spooled to a
    temporary folder (``spool_stdin``), then read through the same door as a file; errors
    name ``(stdin)``."""
    folder = tempdirs.make("stdin")
    temporary.append(folder)
    spooled = spool_stdin(folder, limits, stream)
    try:
        found = _one(spooled, limits, temporary)
    except InputError as err:
        raise InputError(err.path.replace(spooled, STDIN_LABEL), err.problem.replace(spooled, STDIN_LABEL)) from None
    found.sources = [TraceSource(s.path, s.member, label=s.display.replace(spooled, STDIN_LABEL))
                     for s in found.sources]
    if found.manifest_source:
        found.manifest_source = found.manifest_source.replace(spooled, STDIN_LABEL)
    return found


def resolve(paths: list[str], limits: Limits | None = None) -> Inputs:
    """Expand files, directories and zips into trace sources (one per rank). An export is
    split into a temporary folder: the caller ``release``s the Inputs once loaded (they go
    at exit otherwise, or with a later load's sweep after a kill)."""
    limits = limits or limits_from_env()
    if not paths:
        raise InputError("(no input)", "give at least one trace file, directory or .zip")
    tempdirs.sweep()  # what killed loads left behind
    temporary: list[str] = []
    try:
        return _resolve(paths, limits, temporary)
    except BaseException:
        for folder in temporary:
            tempdirs.remove(folder)
        raise


def _resolve(paths: list[str], limits: Limits, temporary: list[str]) -> Inputs:
    sources: list[TraceSource] = []
    manifest, manifest_source, manifest_text = None, None, None
    if paths.count(STDIN) > 1:
        raise InputError(STDIN_LABEL, "given twice: standard input can be read once")
    for path in paths:
        found = _from_stdin(limits, temporary) if path == STDIN else _one(path, limits, temporary)
        sources.extend(found.sources)
        if found.manifest is not None:
            if manifest is not None and found.manifest != manifest:
                raise InputError(found.manifest_source or path, f"a second, different manifest (first: {manifest_source})")
            manifest, manifest_source, manifest_text = found.manifest, found.manifest_source, found.manifest_text
    if not sources:
        raise InputError(paths[0], "no trace files given (only a manifest)")
    seen: dict[str, TraceSource] = {}
    for s in sources:
        key = files.realpath(s.path) + "::" + (s.member or "")
        if key in seen:
            raise InputError(s.display, "given twice")
        seen[key] = s
    return Inputs(sources, manifest, manifest_source, manifest_text, temporary)
