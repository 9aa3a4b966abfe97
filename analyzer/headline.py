"""A run's headline, defined once: what ``analyze --json``, the catalog, ``history``
and the dashboard's Overview all show.

One aggregation for every figure: **the median over the profiled steps of the
slowest rank**, the rank whose median step is longest (ties: the one with more
exposed comm). Step, compute, comm, exposed comm and idle are that rank's
medians (the mean of the two middle steps for an even count); overlap % and the
exposed share of the step are computed from those medians, so the figures of
one headline agree with each other. A trace without ProfilerStep windows falls
back to the whole-trace figures of its most exposed rank, and says so.
"""

from __future__ import annotations

import statistics

from overlapscope.analyzer.units import pct
from overlapscope.contract import figures as contract_figures
from overlapscope.contract.figures import Headline, SlowestStep

AGGREGATION = "median over the steps of the slowest rank"
AGGREGATION_NO_STEPS = "whole trace of the most exposed rank (no ProfilerStep windows)"
FIGURES = ("step_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms")


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 6) if values else None


def rank_medians(steps: list[dict], figures: tuple[str, ...] = FIGURES) -> dict[int, dict]:
    """Each rank's median of each figure over its steps: the headline's aggregation applied to
    every rank (the Overview draws it per rank beside the headline)."""
    by_rank: dict[int, list[dict]] = {}
    for s in steps:
        by_rank.setdefault(s["rank"], []).append(s)
    return {rank: {k: _median([s.get(k) for s in items]) for k in figures} for rank, items in by_rank.items()}


def slowest(steps: list[dict], figures: tuple[str, ...] = FIGURES) -> tuple[int | None, dict]:
    """The headline's aggregation of step rows (``rank`` and the ``figures``): the slowest
    rank, the one whose median step is longest (ties: more exposed comm, then the lower
    rank), and its median of each figure. (None, {}) without rows. The what-if engine
    aggregates its replayed and predicted steps with it."""
    per_rank = rank_medians(steps, figures)
    if not per_rank:
        return None, {}
    rank = max(per_rank, key=lambda r: (per_rank[r].get("step_ms") or 0, per_rank[r].get("exposed_comm_ms") or 0, -r))
    return rank, per_rank[rank]


def overlap_pct(figures: dict) -> float | None:
    """Overlap % of one rank's figures, from its medians of comm and exposed comm."""
    return contract_figures.overlap_pct(figures.get("comm_ms"), figures.get("exposed_comm_ms"))


def headline(result: dict, failed_findings: list[str] | None = None) -> dict:
    """The headline of an ``analyze`` result (its ``ranks`` and ``steps`` rows).

    ``failed_findings``: the ids of the checklist's failed rules, when it ran
    (None: not evaluated, as in ``analyze``).
    """
    ranks, steps = result["ranks"], result["steps"]
    by_rank: dict[int, list[dict]] = {}
    for s in steps:
        by_rank.setdefault(s["rank"], []).append(s)
    if by_rank:
        slowest_rank, figures = slowest(steps)
        aggregation = AGGREGATION
    elif ranks:
        row = max(ranks, key=lambda r: (r["exposed_comm_ms"] or 0, -r["rank"]))
        slowest_rank, aggregation = row["rank"], AGGREGATION_NO_STEPS
        figures = {k: (None if k == "step_ms" else row[k]) for k in FIGURES}
    else:
        slowest_rank, aggregation, figures = None, AGGREGATION_NO_STEPS, dict.fromkeys(FIGURES)
    exposed, step = figures["exposed_comm_ms"], figures["step_ms"]
    worst = max(steps, key=lambda s: (s["step_ms"] or 0, s["exposed_comm_ms"] or 0), default=None)
    return Headline(
        aggregation=aggregation,
        ranks=len(ranks),
        steps=max((len(v) for v in by_rank.values()), default=0),
        slowest_rank=slowest_rank,
        **figures,
        overlap_pct=overlap_pct(figures),
        exposed_pct=pct(exposed, step) if step and exposed is not None else None,
        slowest_step=None if worst is None else SlowestStep(**{k: worst[k] for k in ("rank", "step", "step_ms",
                                                                                       "exposed_comm_ms")}),
        failed_findings=failed_findings,
    ).as_json()


def failed(findings: list[dict]) -> list[str]:
    """The ids of failed findings, in the checklist's order."""
    return [f["id"] for f in findings if f["status"] == "fail"]
