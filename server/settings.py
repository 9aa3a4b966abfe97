"""The dashboard's settings, read from the environment (``overlapscope dashboard`` sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from overlapscope.analyzer import api

ENV_DB = "OVERLAPSCOPE_DB"
ENV_MAX_UPLOAD_MB = "OVERLAPSCOPE_MAX_UPLOAD_MB"
ENV_NO_SAMPLES = "OVERLAPSCOPE_NO_SAMPLES"
ENV_TIMELINE_MARKS = "OVERLAPSCOPE_TIMELINE_MARKS"
ENV_SAMPLES_DIR = "OVERLAPSCOPE_SAMPLES_DIR"
ENV_API_TOKENS = "OVERLAPSCOPE_API_TOKENS"
DEFAULT_MAX_UPLOAD_MB = 2048
DEFAULT_TIMELINE_MARKS = 2000
BYTES_PER_MB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """What the dashboard serves and its limits."""

    db_path: Path
    """The catalog file: ``$OVERLAPSCOPE_DB``, else the user data directory (``api.catalog_path``)."""
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_MB * BYTES_PER_MB
    """Largest total size of one upload (``$OVERLAPSCOPE_MAX_UPLOAD_MB``, in MiB)."""
    load_samples: bool = True
    """Load the runs of ``sample_traces/`` into an empty catalog (``$OVERLAPSCOPE_NO_SAMPLES=1`` turns it off)."""
    timeline_marks: int = DEFAULT_TIMELINE_MARKS
    """Most marks one timeline chart draws before lanes merge into busy blocks (``$OVERLAPSCOPE_TIMELINE_MARKS``)."""
    samples_dir: Path = api.samples_dir()
    """Where the sample runs are (one folder per run): ``$OVERLAPSCOPE_SAMPLES_DIR``, else ``sample_traces/``."""
    api_tokens: Path | None = None
    """The token file (``token name`` lines) that lets clients write: ``$OVERLAPSCOPE_API_TOKENS``;
    None: the API refuses writes."""

    def __post_init__(self):
        if self.max_upload_bytes <= 0:
            raise ValueError(f"the upload limit must be positive, got {self.max_upload_bytes} bytes")
        if self.timeline_marks < 10:
            raise ValueError(f"a timeline needs at least 10 marks, got {self.timeline_marks}")

    @property
    def db(self) -> str:
        """The catalog path as a string (the cache key of every analysis)."""
        return str(self.db_path)

    @property
    def max_upload_mb(self) -> int:
        return max(1, self.max_upload_bytes // BYTES_PER_MB)


def _int(environ, name: str, default: int) -> int:
    raw = environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"${name} must be an integer, got {raw!r}") from None


def from_env(environ=None) -> Settings:
    """Settings from ``environ`` (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    db = environ.get(ENV_DB) or str(api.catalog_path())
    return Settings(
        db_path=Path(db).expanduser().resolve(),
        max_upload_bytes=_int(environ, ENV_MAX_UPLOAD_MB, DEFAULT_MAX_UPLOAD_MB) * BYTES_PER_MB,
        load_samples=environ.get(ENV_NO_SAMPLES, "") not in ("1", "true", "yes"),
        timeline_marks=_int(environ, ENV_TIMELINE_MARKS, DEFAULT_TIMELINE_MARKS),
        samples_dir=Path(environ.get(ENV_SAMPLES_DIR) or api.samples_dir()),
        api_tokens=Path(environ[ENV_API_TOKENS]).expanduser().resolve() if environ.get(ENV_API_TOKENS) else None,
    )
