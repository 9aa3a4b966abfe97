"""Shared fixtures: paths to the reference traces and the sample runs.

The tests mirror the packages: ``tests/<package>/test_*.py`` (``tests/analyzer/predict/``
for ``analyzer.predict``; ``tests/analyzer/test_gate.py`` for the one-module
``analyzer.gate``), and the tests of the whole product (architecture, docs, packaging)
stay here. Helpers (``builders.py``, ``intervals_ref.py``, ...) live here too, and test
modules import helpers from each other (a running server, a browser, a hand-built
trace): every test folder is on the import path, put there before any test module loads.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# No Hypothesis deadline in any test: a loaded 2-core CI machine took past its 200 ms default on
# one example of a fast test (test_replace_is_the_standard_librarys), a failure that says
# nothing about the code. max_examples bounds each test's time.
settings.register_profile("overlapscope", deadline=None)
settings.load_profile("overlapscope")

# No test writes into the user's data directory: the default catalog
# (XDG_DATA_HOME/overlapscope/catalog.duckdb) lives in a temporary folder.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="overlapscope-test-data-")
os.environ.pop("OVERLAPSCOPE_DB", None)

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
for _folder in sorted(p.parent for p in TESTS.rglob("test_*.py")):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
REFERENCE = Path(os.environ.get("OVERLAPSCOPE_REFERENCE_TRACES", ROOT.parent / "shared" / "reference_traces"))
SAMPLES = ROOT / "sample_traces"


def step_parts_ms(step: dict) -> float:
    """What a step's time must equal: compute + exposed comm + other + idle + spill in - spill out."""
    return (step["compute_ms"] + step["exposed_comm_ms"] + step["other_ms"] + step["idle_ms"]
            + step["spill_in_ms"] - step["spill_out_ms"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test's shared turn on the machine, from its fixtures' set-up (a module fixture's
    runs too) to its teardown; ``machine.quiet()`` makes it exclusive for timed multi-process
    runs (tests/machine.py). Only between xdist workers."""
    import machine

    path = machine.lock_path()
    if path is None:
        yield
        return
    with machine.hold(path):
        yield


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """../shared/reference_traces; tests that need it skip when it is absent."""
    if not REFERENCE.is_dir():
        pytest.skip(f"reference traces not found at {REFERENCE}")
    return REFERENCE


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES


# --- the dashboard's runs (tests/dashboard/test_dashboard_*.py, tests/analyzer/measure/test_timeline.py) ---

# Sample bundles the dashboard tests prefer: an FSDP run with a manifest (the model
# page has its parameters and tokens) and a DDP run (for compare).
DASHBOARD_SAMPLES = ("fsdp_per_block", "ddp")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _captured_ddp(tmp_path_factory, worker_id: str) -> Path:
    """A real 2-rank gloo DDP bundle from tests/capture_ddp.py, made once per test session
    (one xdist worker captures, the others wait on a lock and reuse it)."""
    import fcntl
    import subprocess
    import sys

    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    out = shared / "dashboard_ddp_capture"
    with open(shared / "dashboard_ddp_capture.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "rank-1.pt.trace.json").exists():
            subprocess.run([sys.executable, str(ROOT / "tests" / "capture_ddp.py"), str(out), str(_free_port())],
                           check=True, timeout=300, capture_output=True)
    return out


@pytest.fixture(scope="session")
def dashboard_bundles(tmp_path_factory, worker_id) -> list[Path]:
    """Two real run bundles: the preferred samples (or any two) from sample_traces/,
    else a captured gloo DDP run (used twice)."""
    present = [SAMPLES / n for n in DASHBOARD_SAMPLES if (SAMPLES / n).is_dir()]
    others = sorted((p for p in SAMPLES.iterdir() if p.is_dir() and p not in present and any(p.glob("*.json*"))),
                    key=lambda p: sum(f.stat().st_size for f in p.iterdir())) if SAMPLES.is_dir() else []
    bundles = (present + others)[:2]
    if len(bundles) == 2:
        return bundles
    pytest.importorskip("torch")
    captured = _captured_ddp(tmp_path_factory, worker_id)
    return (bundles + [captured, captured])[:2]


@pytest.fixture(scope="session")
def dashboard_db(tmp_path_factory, dashboard_bundles) -> Path:
    """A catalog holding the two bundles as runs 'sample-a' (run 1) and 'sample-b' (run 2)."""
    from overlapscope.analyzer import runs

    db = tmp_path_factory.mktemp("dashboard") / "catalog.duckdb"
    con = runs.open_catalog(db)
    for name, bundle in zip(("sample-a", "sample-b"), dashboard_bundles):
        runs.ingest(con, [str(bundle)], name=name, tags={"test": "dashboard"})
    con.close()
    return db
