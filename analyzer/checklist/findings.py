"""The checklist's vocabulary: findings, thresholds, the fail/warn/pass ladder and the registry.

Every rule is a function of a ``CheckContext`` registered with ``@rule(id, title,
fix)``; it returns a ``Result`` (status, evidence with numbers from this trace,
and optionally the impact in ms per step and a fix of its own), which the
registry turns into a ``Finding``. Rule ids are a contract. Every threshold
lives in ``THRESHOLDS``, with its reason (docs/checklist.md says what each rule
looks for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from overlapscope.analyzer.sql.params import LAUNCH_GAP_US

STATUS_ORDER = {"fail": 0, "warn": 1, "pass": 2, "n/a": 3}
SEVERITY = {"fail": 3, "warn": 2, "pass": 0, "n/a": 0}


@dataclass(frozen=True)
class Threshold:
    value: float
    reason: str  # why this value (printed in diagnose --json)


THRESHOLDS: dict[str, Threshold] = {
    "exposed_fail": Threshold(0.10, "exposed comm over 10% of the step time costs more than a setup change "
                                    "usually does (a bigger micro-batch, prefetch, another wrap)"),
    "exposed_warn": Threshold(0.03, "3% of the step is above run-to-run noise of step time on a quiet machine"),
    "forward_gather_hidden": Threshold(0.5, "with prefetch a forward all-gather overlaps the previous unit's "
                                            "compute; under half of it hidden means prefetch is not working"),
    "latency_busbw": Threshold(0.25, "a collective reaching under a quarter of the bus bandwidth of the large "
                                     "ones spends most of its time in per-message latency, not in bytes"),
    "latency_count": Threshold(8, "a handful of small collectives per step (scalars, the root unit) is normal; "
                                  "eight or more latency-bound ones add up"),
    "large_share": Threshold(0.5, "when one unit or bucket carries half of the bytes, its collective cannot "
                                  "overlap much and its full copy dominates memory"),
    "busbw_fail": Threshold(0.5, "under half of the calibrated bus bandwidth: the collectives are not getting "
                                 "the links they were measured on (contention, wrong transport, topology)"),
    "busbw_warn": Threshold(0.75, "nccl-tests figures are reached within about 25% by large collectives in "
                                  "training; more loss than that is worth a look"),
    "memory_headroom": Threshold(0.8, "keeping all units gathered after forward must leave 20% of device "
                                      "memory for activations' peaks and allocator fragmentation"),
    "memory_pressure": Threshold(0.9, "above 90% of device memory the allocator starts to stall (cudaMalloc "
                                      "retries, expandable-segment growth)"),
    "bucket_min_bytes": Threshold(1 << 20, "below 1 MiB an all-reduce is latency-bound on every NCCL transport "
                                           "(DDP's default bucket is 25 MiB)"),
    "bucket_few": Threshold(2, "one or two buckets for the whole model leave nothing to start early"),
    "straggler_fail": Threshold(0.10, "ranks waiting in collectives for one rank over 10% of the step"),
    "straggler_warn": Threshold(0.03, "3% of the step: above the jitter of collective start times"),
    "host_idle_fail": Threshold(0.20, "the device idle a fifth of the step waiting for launches: overlap "
                                      "cannot help until the host keeps up"),
    "host_idle_warn": Threshold(0.10, "10% launch-bound idle is visible in step time"),
    "launch_gap_us": Threshold(LAUNCH_GAP_US, "a kernel that starts within 20 us of its launch after an idle gap was "
                                     "waiting for the host, not for other work"),
    "gain_floor": Threshold(0.01, "a change is linked to a finding only when the what-if predicts it saves 1% of "
                                  "the measured step: less is below the run-to-run noise of step time"),
    "uneven_work": Threshold(0.05, "matmul FLOPs per step differing by over 5% between ranks means they "
                                   "processed different numbers of tokens"),
}


@dataclass
class Finding:
    """One rule's verdict on one run (the ``findings`` rows of ``diagnose --json``)."""

    id: str
    title: str
    status: str  # fail, warn, pass, n/a
    evidence: str
    fix: str
    severity: int = 0
    impact_ms: float | None = None  # time per step this finding accounts for
    details: dict = field(default_factory=dict)
    predicted_gain_ms: float | None = None  # step time the what-if of its fix saves (checklist.gains)
    whatif: str | None = None  # that what-if's flags (``overlapscope whatif PATH <flags>``)
    no_change: str | None = None  # why a failed or warned finding whose fix a change expresses links none

    def __post_init__(self):
        if self.status not in STATUS_ORDER:
            raise ValueError(f"bad status {self.status!r}")
        self.severity = SEVERITY[self.status]


@dataclass(frozen=True)
class Result:
    """What a rule found; the registry adds the rule's id, title and (default) fix."""

    status: str
    evidence: str
    impact_ms: float | None = None
    details: dict = field(default_factory=dict)
    fix: str | None = None  # instead of the rule's default fix
    predicted_gain_ms: float | None = None  # a rule that ran its fix's what-if itself (straggler)
    whatif: str | None = None  # that what-if's flags


def na(evidence: str, fix: str | None = None) -> Result:
    """The trace cannot tell: ``evidence`` names what is missing."""
    return Result("n/a", evidence, fix=fix)


def t(name: str) -> float:
    """A threshold's value."""
    return THRESHOLDS[name].value


def grade(value: float, fail: str, warn: str, lower_is_worse: bool = False) -> str:
    """fail, warn or pass: ``value`` against the thresholds named ``fail`` and ``warn``
    (at or above them, or below them with ``lower_is_worse``)."""
    if lower_is_worse:
        return "fail" if value < t(fail) else "warn" if value < t(warn) else "pass"
    return "fail" if value >= t(fail) else "warn" if value >= t(warn) else "pass"


def fail_or_warn(value: float, fail: str) -> str:
    """fail at or above the threshold named ``fail``, else warn: the ladder of a finding
    already known to be a problem (its share of the step says how bad)."""
    return "fail" if value >= t(fail) else "warn"


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    fix: str
    check: Callable

    def __call__(self, ctx) -> Finding:
        r = self.check(ctx)
        return Finding(self.id, self.title, r.status, r.evidence, r.fix or self.fix,
                       impact_ms=r.impact_ms, details=dict(r.details),
                       predicted_gain_ms=r.predicted_gain_ms, whatif=r.whatif)


RULES: dict[str, Rule] = {}


def rule(id: str, title: str, fix: str):
    """Register a check under rule ``id`` (a contract) with its title and default fix."""
    def register(check: Callable) -> Callable:
        if id in RULES:
            raise ValueError(f"rule {id!r} registered twice")
        RULES[id] = Rule(id, title, fix, check)
        return check
    return register
