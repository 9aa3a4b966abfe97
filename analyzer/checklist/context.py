"""What every rule reads: one typed context per run, built once.

It holds the buckets analysis (``predict.buckets.RunAnalysis``: overlap per rank
and step, the collectives with their predictions, F and W, the stage, the
per-step model) and what only the checklist needs (``sql/checklist.sql``: idle
gaps and launch waits, matmul FLOPs and gradient-norm ops per step), plus each
collective's instance across ranks (the straggler rule).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from overlapscope.analyzer import sql
from overlapscope.analyzer.checklist.findings import t
from overlapscope.analyzer.ingest.classify import NORM_OPS
from overlapscope.analyzer.measure import rates
from overlapscope.analyzer.measure.collectives import Collective
from overlapscope.analyzer.predict.buckets import RunAnalysis
from overlapscope.analyzer.units import NS_PER_US
from overlapscope.contract.manifest import Manifest


@dataclass(frozen=True)
class CheckContext:
    analysis: RunAnalysis
    idle: list[dict]  # rank, step, idle_ns, host_idle_ns
    flops: list[dict]  # rank, step, flops
    norms: list[dict]  # rank, step, norms
    instances: dict  # (rank, event_id) -> the collective's instance across ranks (measure.rates)

    @property
    def rows(self) -> list[Collective]:
        return self.analysis.collectives

    @property
    def manifest(self) -> Manifest:
        return self.analysis.info.manifest

    @property
    def stage(self) -> str | None:
        return self.analysis.stage

    @property
    def sources(self) -> dict:
        return self.analysis.sources

    @property
    def model(self) -> list[dict]:
        return self.analysis.model

    @property
    def memory(self) -> list[dict]:
        return self.analysis.memory

    @property
    def device_kind(self) -> str:
        return self.analysis.info.device_kind

    @property
    def ranks(self) -> list[dict]:
        """Loaded ranks: rank, hostname, device_memory_bytes, device_names."""
        return self.analysis.info.ranks

    @property
    def steps(self) -> list[dict]:
        """Per rank and step: the overlap rows (step_ms, comm_ms, exposed_comm_ms, ...)."""
        return self.analysis.overlap["steps"]

    def mean_step_ms(self) -> float:
        """The mean step over ranks and steps (inf without steps: shares become 0)."""
        values = [s["step_ms"] for s in self.steps if s["step_ms"]]
        return statistics.fmean(values) if values else float("inf")


def build(con, analysis: RunAnalysis) -> CheckContext:
    sql.ensure(con, "checklist", run_id=analysis.info.run_id, launch_gap_ns=int(t("launch_gap_us") * NS_PER_US),
               norm_ops=sorted(NORM_OPS))
    return CheckContext(analysis, sql.rows(con, "checklist.idle"), sql.rows(con, "checklist.flops"),
                        sql.rows(con, "checklist.norms"), rates.instances(analysis.collectives))
