"""Uploaded files -> a stored run: size limit, temp files, one error line per bad file.

No Streamlit here: the upload page passes the files (anything with ``name``
and ``getbuffer()``, as Streamlit's UploadedFile) and a progress callback.
Storing is ``runs.ingest``, atomic: on a bad file nothing is stored.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path

from overlapscope.contract.names import MANIFEST_FILE
from overlapscope.analyzer import api
from overlapscope.analyzer.ingest import inputs
from overlapscope.analyzer.ingest.limits import Limits
from overlapscope.server import spool
from overlapscope.analyzer.errors import InputError, UsageError

ACCEPTED = (".json", ".json.gz", ".gz", ".zip")
# Rough parse rate of one decode worker on uncompressed JSON, for the progress
# estimate only; gzip inflates traces about 8x.
PARSE_BYTES_PER_S = 60e6
GZIP_RATIO = 8
TICK_S = 0.25


@dataclass
class Outcome:
    """What an upload came to: a run id, or the errors (one line per bad file)."""

    run_id: int | None = None
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _spooled(f, session_id: str | None) -> Path | None:
    """The file's bytes on disk, where the server spooled them (``spool.py``)."""
    return spool.path(session_id, getattr(f, "file_id", "")) if session_id else None


def total_bytes(files, session_id: str | None = None) -> int:
    return sum(p.stat().st_size if (p := _spooled(f, session_id)) else len(f.getbuffer()) for f in files)


def size_error(files, limit_bytes: int, session_id: str | None = None) -> str | None:
    """Why the upload is too large, or None."""
    size = total_bytes(files, session_id)
    if size > limit_bytes:
        return (f"the upload holds {size / 2**20:,.1f} MiB, more than the limit of {limit_bytes / 2**20:,.0f} MiB "
                "(set $OVERLAPSCOPE_MAX_UPLOAD_MB to change it)")
    return None


def parse_tags(text: str) -> dict:
    """``key=value`` pairs separated by commas or new lines."""
    tags = {}
    for pair in re.split(r"[,\n]", text or ""):
        pair = pair.strip()
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"a tag is key=value, got {pair!r}")
        tags[key.strip()] = value.strip()
    return tags


def check_form(name: str, tag_text: str) -> tuple[str, dict]:
    """The run name and tags as they will be stored, or a ``UsageError`` (the catalog's rules)."""
    return api.check_run_name(name), api.check_tags(parse_tags(tag_text))


def default_run_name(names: list[str]) -> str:
    """A run name from the uploaded file names: their common stem (a zip's name, or the traces'
    prefix such as ``llama`` of ``llama-rank-<r>.json.gz``), else the first one's, and for files
    named only by their rank ``upload-<UTC date>-<time>`` (made a valid run name: printable, no
    leading '#', not too long)."""
    names = [n for n in names if os.path.basename(n) != MANIFEST_FILE] or names  # the manifest names no run
    stems = [re.sub(r"(\.pt)?\.trace|\.json|\.gz|\.zip", "", os.path.basename(n)) for n in names]
    common = os.path.commonprefix(stems).rstrip("-_.") if stems else ""
    common = re.sub(r"[-_.]?(rank|worker)$", "", common, flags=re.IGNORECASE)
    if not common and all(re.fullmatch(r"(rank|worker)?[-_.]?\d+", st, flags=re.IGNORECASE) for st in stems):
        # files that say nothing but their rank (rank-0.pt.trace.json.gz, ...): a name by the time
        return time.strftime("upload-%Y%m%d-%H%M", time.gmtime())
    name = "".join(ch if ch.isprintable() else "_" for ch in (common or (stems[0] if stems else ""))).lstrip("# ")
    return name[:api.max_run_name_chars()].strip() or "upload"


MAX_FILE_NAME_BYTES = 160  # well under the 255 bytes of common file systems, with room for a "N-" prefix


def safe_name(name: str) -> str:
    """A file name for an upload: its base name with only word characters, '.', '+'
    and '-'; a long one keeps its start, its end (where a rank number usually is)
    and its suffix, with a short hash between so that two long names stay distinct."""
    base = re.sub(r"[^\w.+-]", "_", os.path.basename(name.replace("\\", "/"))) or "upload.json"
    if len(base.encode()) <= MAX_FILE_NAME_BYTES:
        return base
    suffix = next((s for s in sorted(ACCEPTED, key=len, reverse=True) if base.lower().endswith(s)), "")
    stem = base[:len(base) - len(suffix)]
    digest = hashlib.sha1(base.encode()).hexdigest()[:8]
    keep = 40  # characters of each end, fewer where they take several bytes each
    while True:
        short = f"{stem[:keep]}-{digest}-{stem[-keep:]}{suffix}"
        if len(short.encode()) <= MAX_FILE_NAME_BYTES or keep <= 1:
            return short
        keep -= 1


def save(files, folder: Path, session_id: str | None = None) -> list[Path]:
    """Put the uploads into ``folder`` under their own (sanitized, unique) names: the
    spooled ones are moved (no copy in memory), others written from their buffer."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in files:
        path = folder / safe_name(f.name)
        n = 1
        while path.exists():  # two uploads of one name keep both
            path = folder / f"{n}-{safe_name(f.name)}"
            n += 1
        spooled = _spooled(f, session_id)
        if spooled is not None:
            shutil.move(spooled, path)
        else:
            path.write_bytes(f.getbuffer())
        paths.append(path)
    return paths


def display_error(err: Exception, folder: Path) -> str:
    """The error's line without the temporary folder the uploads were saved in."""
    return str(err).replace(f"{folder}{os.sep}", "")


def check_each(paths: list[Path], folder: Path, limits: Limits | None = None) -> list[str]:
    """Cheap checks of every file on its own (name, zip archive, manifest) within ``limits``
    (the upload's caps): one line per bad file."""
    errors = []
    for path in paths:
        if path.name == inputs.MANIFEST_NAME:  # read with the traces it describes (ingest names it if bad)
            continue
        if not path.name.lower().endswith(ACCEPTED):
            errors.append(f"{path.name}: not a trace (.json, .json.gz) or a .zip of traces")
            continue
        try:
            inputs.resolve([str(path)], limits).release()
        except InputError as err:
            errors.append(display_error(err, folder))
    return errors


def find_bad_files(paths: list[Path], folder: Path, known: str, limits: Limits | None = None) -> list[str]:
    """After a failed ingest: decode the other trace files one by one, within ``limits`` (the
    upload's caps, as the ingest had them), to name every bad one."""
    errors = [known]
    for path in paths:
        if path.name == inputs.MANIFEST_NAME or path.name in known:
            continue
        try:
            api.analyze([str(path)], workers=1, limits=limits)
        except (InputError, UsageError) as err:
            errors.append(display_error(err, folder))
    return errors


def expected_seconds(paths: list[Path]) -> float:
    """A rough parse time for the progress bar (workers decode ranks in parallel)."""
    size = sum(p.stat().st_size * (GZIP_RATIO if p.suffix in (".gz", ".zip") else 1) for p in paths)
    workers = max(1, min(len(paths), os.cpu_count() or 1))
    return 0.5 + size / PARSE_BYTES_PER_S / workers


def run_with_progress(work, on_progress, expected_s: float, decoded: dict | None = None):
    """Run ``work()`` in a thread; call ``on_progress(fraction, elapsed_s)`` until it ends.

    ``decoded`` ({"done": n, "total": m}, updated by the loader as each rank's file
    is decoded) drives the bar up to 0.9; storing takes the rest. Before the first
    file is done the bar creeps on an estimate: 1 - exp(-elapsed / expected).
    """
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(work)
        while True:
            try:
                return future.result(timeout=TICK_S)
            except FutureTimeout:
                elapsed = time.monotonic() - start
                estimate = 1 - math.exp(-elapsed / max(expected_s, 0.1))
                if decoded and decoded.get("total"):
                    fraction = 0.05 + 0.85 * max(decoded["done"] / decoded["total"], 0.5 * estimate / decoded["total"])
                else:
                    fraction = estimate
                on_progress(min(0.95, fraction), elapsed)


def store(ingest, files, folder: Path, name: str, tags: dict, on_progress, session_id: str | None = None,
          limits: Limits | None = None) -> Outcome:
    """Save ``files`` under ``folder``, check them, and ``ingest(paths, name, tags)`` them.

    ``ingest`` stores a run and returns its id (``data.ingest`` bound to the catalog and
    to ``limits``); it reports each decoded file through its ``on_decoded`` argument.
    ``session_id``: the browser session whose spooled uploads these are (they move into
    ``folder``). ``limits``: the upload's caps, for every other read of the files too.
    """
    start = time.monotonic()
    on_progress(0.02, 0.0)
    paths = save(files, folder, session_id)
    errors = check_each(paths, folder, limits)
    if errors:
        return Outcome(errors=errors, seconds=time.monotonic() - start)
    on_progress(0.05, time.monotonic() - start)
    decoded = {"done": 0, "total": 0}

    def on_decoded(done: int, total: int) -> None:  # called in the ingest thread
        decoded.update(done=done, total=total)

    try:
        run_id = run_with_progress(lambda: ingest([str(p) for p in paths], name, tags, on_decoded=on_decoded),
                                   on_progress, expected_seconds(paths), decoded)
    except InputError as err:
        return Outcome(errors=find_bad_files(paths, folder, display_error(err, folder), limits),
                       seconds=time.monotonic() - start)
    on_progress(1.0, time.monotonic() - start)
    return Outcome(run_id=run_id, seconds=time.monotonic() - start)
