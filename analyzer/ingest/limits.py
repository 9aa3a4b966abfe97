"""How much one input may hold: the caps a load enforces while it reads.

Every cap is checked while the bytes stream in, before anything grows with the
input: a gzip or zip "bomb" stops at the cap with one line, it is never
decompressed into memory. The CLI's defaults are generous (real traces reach
several GB per rank); the dashboard and the HTTP API read uploads from anyone
who can reach them, so they pass tighter ones (``for_uploads``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

MB = 1 << 20

ENV_MAX_TRACE_MB = "OVERLAPSCOPE_MAX_TRACE_MB"
ENV_MAX_MEMBERS = "OVERLAPSCOPE_MAX_ARCHIVE_MEMBERS"


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

    def __post_init__(self):
        for name in ("max_trace_bytes", "max_archive_members", "max_archive_bytes", "max_value_bytes",
                     "max_depth", "max_tokens", "max_manifest_bytes", "max_world_size"):
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
    if trace_mb:
        limits = replace(limits, max_trace_bytes=trace_mb * MB)
    if members:
        limits = replace(limits, max_archive_members=members)
    return limits


def for_uploads(max_upload_bytes: int) -> Limits:
    """Caps for files received from the network: each trace decompresses to at most
    20x the upload limit (a real gzip trace inflates 8-15x) and 4 GiB."""
    cap = min(4096 * MB, 20 * max_upload_bytes)
    return Limits(max_trace_bytes=cap, max_archive_bytes=cap * 4, max_archive_members=1024,
                  max_value_bytes=min(256 * MB, cap), max_manifest_bytes=16 * MB)


def mb(value: int) -> str:
    """Bytes as MiB for messages."""
    return f"{value / MB:,.0f} MiB"
