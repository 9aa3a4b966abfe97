"""The regression gate: is a run worse than its baseline, by how much, and where?

A run is held against a baseline (by default the previous run of the same
name) on one headline metric (``analyzer/headline.py``: the median step of the
slowest rank). The change is measured in percent of the baseline, signed so
that positive is worse: a metric where lower is better (step, exposed comm)
regresses upwards, overlap % regresses downwards. The verdict also names the
DDP buckets or FSDP units whose exposed time changed most (from the figures
stored at ingest, so pruned runs can be compared too) and warns when the two
runs differ in world size or parallelism.

``overlapscope check``, ``GET /api/v1/runs/{id}/check``, the History page's
regression marks and the Compare page all use these functions.
"""

from __future__ import annotations

import math

from overlapscope.analyzer import sql
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.store import catalog
from overlapscope.contract import figures
from overlapscope.contract.figures import group_label

# Headline metrics the gate can hold (those with a better direction), and whether higher is better.
HIGHER_IS_BETTER = {m.name: m.higher_is_better for m in figures.METRICS if m.name in figures.GATED}
METRICS = figures.GATED
DEFAULT_METRIC = "exposed_comm_ms"
# A run of an unchanged configuration still varies by a few percent (other jobs, clocks,
# the network); the default lets that pass, and a CI job sets its own bound.
DEFAULT_MAX_REGRESSION_PCT = 10.0
TOP_GROUPS = 5
RUN_KEYS = ("run_id", "name", "created_at", "tags", "pushed_by", "world_size", "parallelism", "pruned_at")


def check_metric(metric: str) -> str:
    if metric not in HIGHER_IS_BETTER:
        raise UsageError(f"unknown metric {metric!r}: one of {', '.join(METRICS)}")
    return metric


def worse_pct(metric: str, value: float | None, baseline: float | None) -> float | None:
    """How much worse ``value`` is than ``baseline``, in % of the baseline (negative: better).

    None when either is unknown, or when the baseline is 0 and the value is not
    (no percentage of nothing: ``regressed`` then judges by the sign alone).
    """
    if value is None or baseline is None:
        return None
    change = (baseline - value) if HIGHER_IS_BETTER[metric] else (value - baseline)
    if baseline == 0:
        return 0.0 if change == 0 else None
    return round(100.0 * change / abs(baseline), 4)


def verdict(metric: str, value: float | None, baseline: float | None) -> str | None:
    """``better``, ``worse`` or ``same`` for ``value`` against ``baseline`` (None when either is unknown)."""
    if value is None or baseline is None:
        return None
    if value == baseline:
        return "same"
    return "better" if (value > baseline) == HIGHER_IS_BETTER[metric] else "worse"


def regressed(metric: str, value: float | None, baseline: float | None, max_regression_pct: float) -> bool:
    """Whether ``value`` is worse than ``baseline`` by more than ``max_regression_pct`` percent."""
    if value is None or baseline is None:
        return False
    pct = worse_pct(metric, value, baseline)
    if pct is None:  # from a zero baseline: any change for the worse counts
        return (value < baseline) if HIGHER_IS_BETTER[metric] else (value > baseline)
    return pct > max_regression_pct


def _metric_rows(run: dict, base: dict) -> list[dict]:
    rows = []
    for metric in METRICS:
        value, before = run["headline"].get(metric), base["headline"].get(metric)
        rows.append({"metric": metric, "value": value, "baseline_value": before,
                     "change": None if value is None or before is None else round(value - before, 6),
                     "worse_pct": worse_pct(metric, value, before), "verdict": verdict(metric, value, before),
                     "higher_is_better": HIGHER_IS_BETTER[metric]})
    return rows


def group_changes(con, run_id: int, baseline_id: int, top: int | None = TOP_GROUPS) -> list[dict]:
    """Buckets and units (and other collectives) by how much their mean exposed time per
    collective changed, largest change first; a group only one run has counts from zero."""
    now = {(g["kind"], g["id"], g["phase"]): g for g in sql.rows(con, "catalog.group_metrics", run_id=run_id)}
    before = {(g["kind"], g["id"], g["phase"]): g for g in sql.rows(con, "catalog.group_metrics", run_id=baseline_id)}
    out = []
    for key in now.keys() | before.keys():
        a, b = now.get(key, {}), before.get(key, {})
        kind, id_, phase = key
        out.append({"kind": kind, "id": id_, "phase": phase, "label": group_label({"kind": kind, "id": id_,
                                                                                  "phase": phase}),
                    "exposed_ms": a.get("exposed_ms"), "baseline_exposed_ms": b.get("exposed_ms"),
                    "change_ms": round((a.get("exposed_ms") or 0.0) - (b.get("exposed_ms") or 0.0), 6),
                    "comm_ms": a.get("comm_ms"), "baseline_comm_ms": b.get("comm_ms")})
    out.sort(key=lambda g: (-abs(g["change_ms"]), -max(g["exposed_ms"] or 0.0, g["baseline_exposed_ms"] or 0.0),
                            g["label"]))
    return out if top is None else out[:top]


def warnings(run: dict, base: dict) -> list[str]:
    """Why two runs may not be comparable: world size or parallelism differ."""
    out = []
    if run["world_size"] != base["world_size"]:
        out.append(f"world sizes differ: run {run['run_id']} ran on {run['world_size']} ranks and baseline "
                   f"run {base['run_id']} on {base['world_size']}, so their times are not like for like")
    if run["parallelism"] != base["parallelism"]:
        out.append(f"parallelism differs: run {run['run_id']} is {run['parallelism'] or 'of unknown parallelism'} "
                   f"and baseline run {base['run_id']} {base['parallelism'] or 'of unknown parallelism'}, so "
                   "their times are not like for like")
    return out


def compare(con, run_id: int, baseline_id: int, top: int | None = TOP_GROUPS) -> dict:
    """Two stored runs side by side: every headline metric, the groups that changed most, warnings."""
    run, base = catalog.run(con, run_id), catalog.run(con, baseline_id)
    if run["headline"] is None or base["headline"] is None:
        raise UsageError(f"run {run_id if run['headline'] is None else baseline_id} has no headline "
                         "(stored by an older overlapscope: open the catalog for writing once)")
    return {"run": {k: run[k] for k in RUN_KEYS}, "baseline": {k: base[k] for k in RUN_KEYS},
            "metrics": _metric_rows(run, base), "groups": group_changes(con, run_id, baseline_id, top),
            "warnings": warnings(run, base)}


def baseline_of(con, run_id: int, baseline: str | int = "previous") -> int:
    """The baseline's run id: ``previous`` (the run of the same name stored before
    ``run_id``) or a run id."""
    if str(baseline) == "previous":
        found = sql.one(con, "catalog.previous_of", run_id=run_id)
        if not found or found[0] is None:
            name = catalog.run(con, run_id)["name"]
            raise UsageError(f"run {run_id} is the first run named {name!r}: nothing to compare it with "
                             "(give a baseline run id)")
        return found[0]
    if not str(baseline).isdigit():
        raise UsageError(f"the baseline is 'previous' or a run id, got {baseline!r}")
    catalog.run(con, int(baseline))  # a missing one fails here, in one line
    return int(baseline)


def check_bound(max_regression_pct) -> float:
    """The gate's bound as given, or a ``UsageError``: a finite number of 0 % or more (NaN
    compares false with everything, so a NaN bound would pass any regression)."""
    try:
        bound = float(max_regression_pct)
    except (TypeError, ValueError):
        raise UsageError(f"the largest regression allowed must be a number, got {max_regression_pct!r}") from None
    if not math.isfinite(bound) or bound < 0:
        raise UsageError(f"the largest regression allowed must be a finite number of 0 % or more, "
                         f"got {max_regression_pct!r}")
    return bound


def check(con, run_id: int, baseline: str | int = "previous", metric: str = DEFAULT_METRIC,
          max_regression_pct: float = DEFAULT_MAX_REGRESSION_PCT, strict: bool = False) -> dict:
    """The gate's verdict on ``run_id`` against its baseline: ``status`` is ``pass``,
    ``regression``, or ``no_baseline`` for the first run of a name held against the previous
    one (a new CI pipeline's first job passes; ``strict`` makes it a ``UsageError``)."""
    check_metric(metric)
    max_regression_pct = check_bound(max_regression_pct)
    if str(baseline) == "previous" and not strict:
        found = sql.one(con, "catalog.previous_of", run_id=run_id)
        if not found or found[0] is None:
            return _first_run(con, run_id, metric, max_regression_pct)
    result = compare(con, run_id, baseline_of(con, run_id, baseline))
    row = next(m for m in result["metrics"] if m["metric"] == metric)
    if row["value"] is None or row["baseline_value"] is None:
        unknown = run_id if row["value"] is None else result["baseline"]["run_id"]
        raise UsageError(f"{metric} is unknown for run {unknown} (a trace without ProfilerStep windows has no step time)")
    bad = regressed(metric, row["value"], row["baseline_value"], max_regression_pct)
    return {"status": "regression" if bad else "pass", "regressed": bad, "metric": metric,
            "higher_is_better": HIGHER_IS_BETTER[metric], "max_regression_pct": max_regression_pct,
            "value": row["value"], "baseline_value": row["baseline_value"], "change": row["change"],
            "worse_pct": row["worse_pct"], **result}


def _first_run(con, run_id: int, metric: str, max_regression_pct: float) -> dict:
    """The verdict on the first run of a name: nothing to hold it against yet, so it passes."""
    run = catalog.run(con, run_id)
    value = (run["headline"] or {}).get(metric)
    return {"status": "no_baseline", "regressed": False, "metric": metric, "higher_is_better": HIGHER_IS_BETTER[metric],
            "max_regression_pct": max_regression_pct, "value": value, "baseline_value": None, "change": None,
            "worse_pct": None, "run": {k: run[k] for k in RUN_KEYS}, "baseline": None, "metrics": [], "groups": [],
            "warnings": []}


def change_words(worse_pct: float | None) -> str:
    """A signed change in words: '12.3 % worse', '4.0 % better', 'no change' (never '-4.0 % worse');
    ``worse_pct`` as ``worse_pct`` gives it (positive: worse, whatever the metric's direction)."""
    if worse_pct is None:
        return "change unknown (a zero baseline)"
    if abs(worse_pct) < 0.05:
        return "no change"
    return f"{abs(worse_pct):.1f} % {'worse' if worse_pct > 0 else 'better'}"


def regressions(runs: list[dict], metric: str, max_regression_pct: float) -> dict[int, float | None]:
    """Runs (``catalog.runs`` rows) worse than the previous run of their name by more than
    ``max_regression_pct``: run id -> how much worse, in % (None from a zero baseline)."""
    check_metric(metric)
    max_regression_pct = check_bound(max_regression_pct)
    out: dict[int, float | None] = {}
    previous: dict[str, dict] = {}
    for run in sorted(runs, key=lambda r: r["run_id"]):
        before = previous.get(run["name"])
        value = (run["headline"] or {}).get(metric)
        if before is not None:
            base = (before["headline"] or {}).get(metric)
            if regressed(metric, value, base, max_regression_pct):
                out[run["run_id"]] = worse_pct(metric, value, base)
        previous[run["name"]] = run
    return out
