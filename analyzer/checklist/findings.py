"""``diagnose``: the seed's "why is my FSDP slow" checklist, evaluated on a trace.

Every rule returns one Finding: a status (fail, warn, pass, or n/a when the
trace cannot tell), evidence with numbers from this trace (naming buckets,
units, ranks and steps) and a fix an engineer can act on. Rule ids are a
contract. Every threshold lives in THRESHOLDS, with its reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

STATUS_ORDER = {"fail": 0, "warn": 1, "pass": 2, "n/a": 3}
SEVERITY = {"fail": 3, "warn": 2, "pass": 0, "n/a": 0}


@dataclass(frozen=True)
class Threshold:
    value: float
    reason: str


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
    "launch_gap_us": Threshold(20.0, "a kernel that starts within 20 us of its launch after an idle gap was "
                                     "waiting for the host, not for other work"),
    "uneven_work": Threshold(0.05, "matmul FLOPs per step differing by over 5% between ranks means they "
                                   "processed different numbers of tokens"),
}


@dataclass
class Finding:
    id: str
    title: str
    status: str
    evidence: str
    fix: str
    severity: int = 0
    impact_ms: float | None = None  # exposed or waiting time per step this finding accounts for
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUS_ORDER:
            raise ValueError(f"bad status {self.status!r}")
        self.severity = SEVERITY[self.status]


def t(name: str) -> float:
    """A threshold's value."""
    return THRESHOLDS[name].value


def evaluate(ctx: dict) -> list[dict]:
    """Every rule on one analysis context; failed first, then by impact."""
    from overlapscope.analyzer.checklist.rules import RULES

    findings = [rule(ctx) for rule in RULES]
    findings.sort(key=lambda f: (STATUS_ORDER[f.status], -(f.impact_ms or 0), f.id))
    return [asdict(f) for f in findings]


def compute(con, run_id: int, tokens: float | None = None) -> dict:
    """The ``diagnose`` result for a stored run."""
    from overlapscope.analyzer.predict import buckets
    from overlapscope.analyzer.checklist import facts as rules_data

    ctx = buckets.context(con, run_id, tokens)
    ctx.update(rules_data.extra(con, run_id, ctx))
    return {"findings": evaluate(ctx), "thresholds": {k: asdict(v) for k, v in THRESHOLDS.items()}}
