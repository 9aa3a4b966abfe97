"""The checklist ("why is my data-parallel run slow"), evaluated on a run.

Rules register themselves (``findings.rule``) in the modules below, one module per
family: communication (``comm``), DDP buckets and accumulation (``ddp``), FSDP
units (``fsdp``), the host and the ranks' work (``host``), ranks waiting for a late
one (``straggler``). Fix texts fit the run (``setup``: backend, parallelism, device). Each reads a typed
``CheckContext``; docs/checklist.md says what each looks for and why.
"""

from __future__ import annotations

from dataclasses import asdict

from overlapscope.analyzer.checklist import comm, ddp, fsdp, gains, host, straggler  # noqa: F401  (they register the rules)
from overlapscope.analyzer.checklist.context import CheckContext, build
from overlapscope.analyzer.checklist.findings import RULES, STATUS_ORDER, THRESHOLDS, Finding
from overlapscope.analyzer.measure import collectives
from overlapscope.analyzer.predict.buckets import RunAnalysis


def _rank(f: Finding) -> tuple:
    """Failed first; then by what the fix would buy (the what-if's gain), else by what the
    finding costs (impact); then by id."""
    worth = f.predicted_gain_ms if f.predicted_gain_ms is not None else (f.impact_ms or 0)
    return (STATUS_ORDER[f.status], -worth, f.id)


def evaluate(ctx: CheckContext) -> list[Finding]:
    """Every rule on one context, ranked (``_rank``). The pages each rule read of the run's
    mapped columns are handed back after it (``measure.mapped``)."""
    findings = []
    for r in RULES.values():
        findings.append(r(ctx))
        collectives.release(ctx.rows)
    findings.sort(key=_rank)
    return findings


def diagnose(con, analysis: RunAnalysis) -> dict:
    """The ``diagnose`` result (the JSON contract, without ``run``): each failed or warned
    finding whose fix a what-if expresses carries its predicted gain (checklist.gains)."""
    findings = sorted(gains.link(evaluate(build(con, analysis)), analysis), key=_rank)
    return {"findings": [asdict(f) for f in findings], "thresholds": {k: asdict(v) for k, v in THRESHOLDS.items()}}
