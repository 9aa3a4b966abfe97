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
import zipfile
from dataclasses import dataclass, field

from overlapscope.analyzer import tempdirs
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import exported, files
from overlapscope.analyzer.ingest.manifests import parse_manifest
from overlapscope.analyzer.ingest.limits import ENV_MAX_MEMBERS, Limits, from_env as limits_from_env, mb
from overlapscope.contract.manifest import Manifest
from overlapscope.contract.names import MANIFEST_FILE as MANIFEST_NAME
TRACE_SUFFIXES = (".json", ".json.gz")

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
    for path in paths:
        if not files.exists(path):
            raise InputError(path, "no such file or directory")
        _refuse_special(path)
        if files.isdir(path):
            found = _from_dir(path, limits)
        elif path.lower().endswith(".zip") or (not files.is_uri(path) and zipfile.is_zipfile(path)):
            found = _from_zip(path, limits)
        elif files.basename(path) == MANIFEST_NAME:
            with files.open_binary(path) as f:
                manifest_one, text = _read_manifest(f.read, files.size(path), path, limits)
            found = Inputs([], manifest_one, path, text)
        elif not files.is_uri(path) and exported.is_export(path):  # every rank in one file: split back
            split = exported.split(path, limits)
            temporary.append(split.folder)
            found = Inputs([TraceSource(files.join(split.bundle, n), label=f"{path}#{n}")
                            for n in sorted(os.listdir(split.bundle)) if _is_trace_name(n)],
                           split.manifest, f"{path}#manifest" if split.manifest else None, split.manifest_text)
        else:
            found = Inputs([TraceSource(path)])
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
