"""The HTTP API's contract: its routes under ``PREFIX`` and the shapes of its answers, read
by the server (server/api.py) and by the CLI's client (cli/remote.py) alike.

The structs hold the keys and types a client relies on (``push`` and ``check --server``);
an answer may carry more keys (docs/json.md), which decoding ignores. No torch, no DuckDB.
"""

from __future__ import annotations

import msgspec

from overlapscope.contract.figures import Headline

PREFIX = "/api/v1"
# The routes, after PREFIX; {run_id} is a run's id (an integer).
HEALTH = "/health"  # GET: Health
RUNS = "/runs"  # GET: RunList (?name=); POST: a run's traces as the body (?name=&tag=K=V), Pushed
RUN = "/runs/{run_id}"  # GET: a run with its per-rank figures and findings
CHECK = "/runs/{run_id}/check"  # GET: Verdict (?baseline=previous|ID&metric=&max_regression_pct=)
WHATIF = "/runs/{run_id}/whatif"  # GET: whatif --json (?the command line's flags without --)
PERFETTO = "/runs/{run_id}/perfetto"  # GET: export --perfetto's file, gzip
ROUTES = (HEALTH, RUNS, RUN, CHECK, WHATIF, PERFETTO)
IDEMPOTENCY_HEADER = "Idempotency-Key"  # a push's key: repeated, it gets the run it stored (HTTP: any case)


def path(route: str, **params) -> str:
    """A route with its parameters filled in, after PREFIX: ``path(CHECK, run_id=3)``."""
    return PREFIX + route.format(**params)


class Health(msgspec.Struct):
    version: str
    writes: bool
    max_upload_bytes: int | None = None


class Pushed(msgspec.Struct):
    run_id: int
    name: str
    headline: Headline


class Listed(msgspec.Struct):
    run_id: int


class RunList(msgspec.Struct):
    runs: list[Listed]


class Side(msgspec.Struct):
    run_id: int
    name: str


class MetricRow(msgspec.Struct):
    metric: str
    verdict: str | None
    worse_pct: float | None


class Group(msgspec.Struct):
    label: str
    exposed_ms: float | None
    baseline_exposed_ms: float | None
    change_ms: float | None


class Verdict(msgspec.Struct):
    metric: str
    regressed: bool
    higher_is_better: bool
    max_regression_pct: float
    value: float | None
    baseline_value: float | None
    worse_pct: float | None
    run: Side
    baseline: Side | None  # None: the first run of its name (status no_baseline)
    metrics: list[MetricRow]
    groups: list[Group]
    warnings: list[str]
    status: str | None = None  # pass, regression or no_baseline (None from a server before no_baseline)
