"""What every rule reads: one typed context per run, built once.

It holds the buckets analysis (``predict.buckets.RunAnalysis``: overlap per rank
and step, the collectives with their predictions, F and W, the stage, the
per-step model) and what only the checklist needs (``sql/checklist.sql``: idle
gaps and launch waits, matmul FLOPs and gradient-norm ops per step), each
collective's instance across ranks, the ranks' waits for each other on one clock
(``measure.waits``: the straggler rule) and the run's setup (which fix applies).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from overlapscope.analyzer import sql
from overlapscope.analyzer.checklist.setup import Setup
from overlapscope.analyzer.measure import idle, waits
from overlapscope.analyzer.measure.collectives import Collective
from overlapscope.analyzer.predict.buckets import RunAnalysis
from overlapscope.contract.manifest import Manifest


@dataclass(frozen=True)
class CheckContext:
    analysis: RunAnalysis
    idle: list[dict]  # rank, step, idle_ns, host_idle_ns
    flops: list[dict]  # rank, step, flops
    norms: list[dict]  # rank, step, norms
    waits: list[dict]  # per rank and step: wait_ms, exposed_wait_ms, peered, last_arrivals (measure.waits)
    wait_ranks: dict  # per rank: clock offset, wait and transfer, last arrivals (measure.waits)
    setup: Setup  # backend, parallelism and FSDP flavour, device: which fix applies

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

    def steps_per_rank(self) -> dict[int, int]:
        """Profiled steps of each rank."""
        out: dict[int, int] = {}
        for s in self.steps:
            out[s["rank"]] = out.get(s["rank"], 0) + 1
        return out

    def mean_step_ms(self) -> float:
        """The mean step over ranks and steps (inf without steps: shares become 0)."""
        values = [s["step_ms"] for s in self.steps if s["step_ms"]]
        return statistics.fmean(values) if values else float("inf")


_PARALLELISM_OF_STAGE = {"ddp": "ddp", "zero3": "fsdp"}


def _setup(con, analysis: RunAnalysis) -> Setup:
    info = analysis.info
    parallelism = info.parallelism or _PARALLELISM_OF_STAGE.get(analysis.stage)
    flavour = None
    if parallelism in ("fsdp", "hsdp"):
        fsdp1, fsdp2 = sql.one(con, "checklist.fsdp_flavour", run_id=info.run_id)
        flavour = "fsdp2" if fsdp2 else "fsdp1" if fsdp1 else None
    return Setup(info.backend, parallelism, flavour, info.device_kind)


def build(con, analysis: RunAnalysis) -> CheckContext:
    run_id = analysis.info.run_id
    return CheckContext(analysis, idle.per_step(con, run_id), sql.rows(con, "checklist.flops"),
                        sql.rows(con, "checklist.norms"),
                        waits.steps(con, run_id), waits.ranks(con, run_id), _setup(con, analysis))
