"""The checklist ("why is my data-parallel run slow"), evaluated on a run.

Rules register themselves (``findings.rule``) in the modules below, one module per
family: communication (``comm``), DDP buckets and accumulation (``ddp``), FSDP
units (``fsdp``), the host and the ranks' work (``host``), ranks waiting for a late
one (``straggler``). Fix texts fit the run (``setup``: backend, parallelism, device). Each reads a typed
``CheckContext``; docs/checklist.md says what each looks for and why.
"""

from __future__ import annotations

from dataclasses import asdict

from overlapscope.analyzer.checklist import comm, ddp, fsdp, host, straggler  # noqa: F401  (they register the rules)
from overlapscope.analyzer.checklist.context import CheckContext, build
from overlapscope.analyzer.checklist.findings import RULES, STATUS_ORDER, THRESHOLDS, Finding
from overlapscope.analyzer.predict.buckets import RunAnalysis


def evaluate(ctx: CheckContext) -> list[Finding]:
    """Every rule on one context; failed first, then by impact, then by id."""
    findings = [r(ctx) for r in RULES.values()]
    findings.sort(key=lambda f: (STATUS_ORDER[f.status], -(f.impact_ms or 0), f.id))
    return findings


def diagnose(con, analysis: RunAnalysis) -> dict:
    """The ``diagnose`` result (the JSON contract, without ``run``)."""
    findings = evaluate(build(con, analysis))
    return {"findings": [asdict(f) for f in findings], "thresholds": {k: asdict(v) for k, v in THRESHOLDS.items()}}
