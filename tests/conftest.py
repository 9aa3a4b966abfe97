"""Shared fixtures: paths to the reference traces and the sample runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path(os.environ.get("OVERLAPSCOPE_REFERENCE_TRACES", ROOT.parent / "shared" / "reference_traces"))
SAMPLES = ROOT / "sample_traces"


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """../shared/reference_traces; tests that need it skip when it is absent."""
    if not REFERENCE.is_dir():
        pytest.skip(f"reference traces not found at {REFERENCE}")
    return REFERENCE


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES
