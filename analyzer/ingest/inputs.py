"""Find the per-rank trace files behind the paths a user gives.

A path may be a trace file (``.json``, ``.json.gz``, ``*.pt.trace.json(.gz)``), a
directory of such files, or a ``.zip`` of them. A tracer bundle also holds a
``manifest.json``; it is returned beside the traces, never parsed as one.

Only names are resolved here; the bytes are read by the worker that decodes them
(``TraceSource.read_bytes``), so a parallel load ships paths, not megabytes.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass

from overlapscope.analyzer.errors import InputError
from overlapscope.contract import manifest as contract
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

    @property
    def display(self) -> str:
        """How errors and tables name this file."""
        return f"{self.path}:{self.member}" if self.member else self.path

    @property
    def basename(self) -> str:
        return os.path.basename(self.member or self.path)

    def read_bytes(self) -> bytes:
        try:
            if self.member is None:
                with open(self.path, "rb") as f:
                    return f.read()
            with zipfile.ZipFile(self.path) as zf:
                return zf.read(self.member)
        except (OSError, zipfile.BadZipFile, KeyError) as err:
            raise InputError(self.display, f"cannot read: {err}") from None


@dataclass
class Inputs:
    """What a set of paths resolves to: trace sources and an optional manifest."""

    sources: list[TraceSource]
    manifest: Manifest | None = None
    manifest_source: str | None = None
    manifest_text: str | None = None  # as written (kept in the catalog with any newer keys)


def rank_from_name(name: str) -> int | None:
    """The rank in a file name (``rank-3``, ``rank3``, ``worker3``), or None."""
    matches = _RANK_IN_NAME.findall(os.path.basename(name))
    return int(matches[-1]) if matches else None


def _is_trace_name(name: str) -> bool:
    base = os.path.basename(name)
    return base != MANIFEST_NAME and base.lower().endswith(TRACE_SUFFIXES) and not base.startswith(".")


def _parse_manifest(data: bytes, where: str) -> tuple[Manifest, str]:
    """The manifest (the contract's struct) and its text; a bad one is one line naming the file."""
    try:
        return contract.decode(data), data.decode()
    except contract.ManifestError as err:
        raise InputError(where, str(err)) from None
    except UnicodeDecodeError:
        raise InputError(where, "manifest is not UTF-8 text") from None


def _from_zip(path: str) -> Inputs:
    try:
        with zipfile.ZipFile(path) as zf:
            names = [i.filename for i in zf.infolist() if not i.is_dir()]
            manifest_names = [n for n in names if os.path.basename(n) == MANIFEST_NAME]
            manifest = text = None
            if manifest_names:
                manifest, text = _parse_manifest(zf.read(manifest_names[0]), f"{path}:{manifest_names[0]}")
    except zipfile.BadZipFile:
        raise InputError(path, "not a valid zip archive") from None
    except OSError as err:
        raise InputError(path, f"cannot read: {err.strerror or err}") from None
    sources = [TraceSource(path, n) for n in sorted(names) if _is_trace_name(n) and "__MACOSX" not in n]
    if not sources:
        raise InputError(path, "zip archive holds no trace files (*.json, *.json.gz)")
    return Inputs(sources, manifest, f"{path}:{manifest_names[0]}" if manifest else None, text)


def _from_dir(path: str) -> Inputs:
    names = sorted(os.listdir(path))
    sources = [TraceSource(os.path.join(path, n)) for n in names if _is_trace_name(n)]
    sources = [s for s in sources if os.path.isfile(s.path)]
    if not sources:
        raise InputError(path, "directory holds no trace files (*.json, *.json.gz)")
    manifest = text = None
    manifest_path = os.path.join(path, MANIFEST_NAME)
    if os.path.isfile(manifest_path):
        with open(manifest_path, "rb") as f:
            manifest, text = _parse_manifest(f.read(), manifest_path)
    return Inputs(sources, manifest, manifest_path if manifest else None, text)


def resolve(paths: list[str]) -> Inputs:
    """Expand files, directories and zips into trace sources (one per rank)."""
    if not paths:
        raise InputError("(no input)", "give at least one trace file, directory or .zip")
    sources: list[TraceSource] = []
    manifest, manifest_source, manifest_text = None, None, None
    for path in paths:
        if not os.path.exists(path):
            raise InputError(path, "no such file or directory")
        if os.path.isdir(path):
            found = _from_dir(path)
        elif zipfile.is_zipfile(path) or path.lower().endswith(".zip"):
            found = _from_zip(path)
        elif os.path.basename(path) == MANIFEST_NAME:
            with open(path, "rb") as f:
                manifest_one, text = _parse_manifest(f.read(), path)
            found = Inputs([], manifest_one, path, text)
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
        key = os.path.realpath(s.path) + "::" + (s.member or "")
        if key in seen:
            raise InputError(s.display, "given twice")
        seen[key] = s
    return Inputs(sources, manifest, manifest_source, manifest_text)
