"""How much one input may hold: the caps a load enforces while it reads.

Every cap is checked while the bytes stream in, before anything grows with the
input: a gzip or zip "bomb" stops at the cap with one line, it is never
decompressed into memory. The CLI's defaults are generous (real traces reach
several GB per rank); the dashboard and the HTTP API read uploads from anyone
who can reach them, so they pass tighter ones (``for_uploads``).

Memory follows the events a load keeps, not the file's size, so the cap that bounds
it is on what is kept (``max_kept_bytes``: the kept events' columns and args, counted
exactly as the scanner holds them); the analysis after the read takes a few times
that. A compressed file that inflates far beyond what traces do (``max_ratio``) is a
bomb, refused once it passes that ratio: long before it costs memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

MB = 1 << 20

ENV_MAX_TRACE_MB = "OVERLAPSCOPE_MAX_TRACE_MB"
ENV_MAX_MEMBERS = "OVERLAPSCOPE_MAX_ARCHIVE_MEMBERS"
ENV_MAX_KEPT_MB = "OVERLAPSCOPE_MAX_KEPT_MB"
ENV_MAX_RATIO = "OVERLAPSCOPE_MAX_RATIO"
# The ratio cap starts past this much (a small file may compress very well: nothing to fear).
RATIO_FLOOR_BYTES = 64 * MB


@dataclass(frozen=True)
class Limits:
    max_trace_bytes: int = 64 * 1024 * MB
    """Decompressed bytes of one trace file (``$OVERLAPSCOPE_MAX_TRACE_MB``; 64 GiB)."""
    max_archive_members: int = 4096
    """Files in one .zip (``$OVERLAPSCOPE_MAX_ARCHIVE_MEMBERS``): one per rank, and a manifest."""
    max_archive_bytes: int = 256 * 1024 * MB
    """Decompressed bytes of all the members of one .zip together."""
    max_value_bytes: int = 256 * MB
    """One event, or one top-level member of a trace (the header)."""
    max_depth: int = 256
    """Nesting of any JSON value: no real trace goes past ten levels."""
    max_tokens: int = 20_000_000
    """Distinct names, categories and thread ids in one trace."""
    max_manifest_bytes: int = 64 * MB
    """A manifest.json."""
    max_world_size: int = 1 << 20
    """Ranks in one job (about a million: more than any data-parallel job)."""
    max_kept_bytes: int = 4096 * MB
    """Memory the events kept of one trace take while it is read (``$OVERLAPSCOPE_MAX_KEPT_MB``;
    4 GiB): their columns and args, as much as the detail keeps (the 1 GB benchmark trace
    keeps about 100 MB for analyze, 850 MB for ingest)."""
    max_ratio: int = 64
    """Decompressed bytes per compressed byte of a gzip trace or a zip member, past its first
    64 MiB (``$OVERLAPSCOPE_MAX_RATIO``): traces compress 15-25x; a bomb, hundreds of times."""

    def __post_init__(self):
        for name in ("max_trace_bytes", "max_archive_members", "max_archive_bytes", "max_value_bytes",
                     "max_depth", "max_tokens", "max_manifest_bytes", "max_world_size", "max_kept_bytes",
                     "max_ratio"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


def _int_env(environ, name: str) -> int | None:
    raw = environ.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"${name} must be positive, got {raw!r}")
    return value


def from_env(environ=None, base: Limits | None = None) -> Limits:
    """``base`` (the defaults) with what the environment sets."""
    environ = os.environ if environ is None else environ
    limits = base or Limits()
    trace_mb = _int_env(environ, ENV_MAX_TRACE_MB)
    members = _int_env(environ, ENV_MAX_MEMBERS)
    kept_mb = _int_env(environ, ENV_MAX_KEPT_MB)
    ratio = _int_env(environ, ENV_MAX_RATIO)
    if trace_mb:
        limits = replace(limits, max_trace_bytes=trace_mb * MB)
    if members:
        limits = replace(limits, max_archive_members=members)
    if kept_mb:
        limits = replace(limits, max_kept_bytes=kept_mb * MB)
    if ratio:
        limits = replace(limits, max_ratio=ratio)
    return limits


UPLOAD_TRACE_BYTES = 1024 * MB
UPLOAD_KEPT_BYTES = 384 * MB
UPLOAD_MEMBERS = 256


def for_uploads(max_upload_bytes: int, environ=None) -> Limits:
    """Caps for files received from the network, so that a hostile upload stays under
    1 GB in the server: each trace decompresses to at most 10x the upload limit and 1 GiB
    (a real gzip trace inflates 15-25x: bigger ones go through the CLI), keeps at most
    384 MiB of events (a trace of about 450 MB at ingest's detail), and an archive holds
    at most 256 files (one per rank: each costs a decode). The server's environment may
    raise any of them (``from_env``)."""
    cap = min(UPLOAD_TRACE_BYTES, 10 * max_upload_bytes)
    return from_env(environ, Limits(max_trace_bytes=cap, max_archive_bytes=cap * 4, max_archive_members=UPLOAD_MEMBERS,
                                    max_value_bytes=min(256 * MB, cap), max_manifest_bytes=16 * MB,
                                    max_kept_bytes=UPLOAD_KEPT_BYTES))


def mb(value: int) -> str:
    """Bytes as MiB for messages."""
    return f"{value / MB:,.0f} MiB"
