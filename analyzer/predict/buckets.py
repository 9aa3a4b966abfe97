"""``buckets``: per-bucket, per-unit and per-phase communication beside the data-parallel model.

``analysis`` composes the measurement (overlap, collectives, F and W from the
trace) with the model's predictions and verdicts into one typed ``RunAnalysis``,
computed once; ``report`` turns it into the JSON contract of ``buckets``
(``collectives``, ``summary``, ``steps``, ``model``, ``measured``, ``memory``),
and the checklist reads the same object.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from overlapscope.analyzer import sql
from overlapscope.analyzer.ingest.dtypes import itemsize
from overlapscope.analyzer.measure import collectives, overlap, rates
from overlapscope.analyzer.measure.collectives import Collective
from overlapscope.analyzer.model.hide import overlap_verdict
from overlapscope.analyzer.model.memory import model_state_bytes
from overlapscope.analyzer.predict import exposure
from overlapscope.analyzer.store.runinfo import RunInfo, run_info

STAGE_OF = {"ddp": "ddp", "fsdp": "zero3", "hsdp": "zero3"}
CPU_CAVEAT = ("CPU-only run: gloo's threads share the CPU cores with compute, so communication overlaps "
              "compute less than the model assumes (on GPUs it runs on NICs and copy engines)")


@dataclass(frozen=True)
class RunAnalysis:
    """Everything the buckets report and the checklist read about one run, computed once."""

    info: RunInfo
    overlap: dict  # measure.overlap.compute: ranks and steps rows (JSON contract of analyze)
    collectives: list[Collective]  # with the model's predictions
    sources: dict  # F and W from the trace and the calibration, and which ones the model uses
    stage: str | None  # ddp or zero3
    grad_bytes: float  # bytes per reduced gradient element
    steps: list[dict]  # per step: measured comm beside the prediction
    model: list[dict]  # per step: F, W, T, tokens to hide, verdict
    memory: list[dict]  # per rank: measured peak beside the model states
    tokens: float | None  # tokens per GPU per micro-batch (given, or the manifest's)

    @property
    def device_kind(self) -> str:
        return self.info.device_kind

    @property
    def world(self) -> int | None:
        return self.info.world_size


def _stage(info: RunInfo, rows: list[Collective]) -> str | None:
    if info.parallelism in STAGE_OF:
        return STAGE_OF[info.parallelism]
    kinds = {r.kind for r in rows}
    return "zero3" if "fsdp_unit" in kinds else "ddp" if "ddp_bucket" in kinds else None


def _grad_bytes(info: RunInfo, rows: list[Collective]) -> float:
    """Bytes per reduced gradient element: the manifest's reduce dtype, else the trace's."""
    size = itemsize((info.manifest.reduce_dtype or "").replace("torch.", ""))
    if size:
        return float(size)
    sizes = [itemsize(r.dtype) for r in rows if r.phase in ("allreduce", "reduce_scatter") and r.dtype]
    sizes = [s for s in sizes if s]
    return float(statistics.median(sizes)) if sizes else 2.0


def _sources(con, info: RunInfo, rows: list[Collective]) -> dict:
    """F and W from the trace and from the tracer's calibration; which ones the model uses."""
    f_trace = rates.flops_per_s(con, info.run_id, info.device_kind)
    w_trace = rates.bandwidth(rows)
    cal = info.manifest.calibration
    f_cal = cal.flops_per_s if cal else None
    w_cal = cal.bus_bandwidth_bytes_per_s if cal else None
    w_used = w_cal or w_trace["bus_bandwidth_bytes_per_s"]
    return {
        "flops_per_s_trace": f_trace["flops_per_s"],
        "flops_per_s_calibration": f_cal,
        "bus_bandwidth_bytes_per_s_trace": w_trace["bus_bandwidth_bytes_per_s"],
        "bus_bandwidth_bytes_per_s_calibration": w_cal,
        # latency term of one collective, fitted on this trace's small collectives given W
        "latency_s": rates.latency(rows, w_used)["latency_s"],
        # the model uses the calibration when there is one (measured apart from the run)
        "flops_per_s": f_cal or f_trace["flops_per_s"],
        "bus_bandwidth_bytes_per_s": w_used,
        "flops_source": "calibration" if f_cal else ("trace" if f_trace["flops_per_s"] else None),
        "bandwidth_source": "calibration" if w_cal else ("trace" if w_trace["bus_bandwidth_bytes_per_s"] else None),
        "matmul_ops": f_trace["matmul_ops"],
        "large_collectives": w_trace["large_collectives"],
    }


def _missing(f, w, tokens, stage) -> str:
    lacking = [n for n, v in (("F (no FLOP counts or calibration)", f), ("W (no collective sizes or calibration)", w),
                              ("tokens per micro-batch (use --tokens)", tokens), ("a DDP/FSDP stage", stage)) if not v]
    return "cannot judge: missing " + ", ".join(lacking)


def _per_step(rows: list[Collective], overlap_steps: list[dict], sources: dict, info: RunInfo,
              tokens: float | None, stage: str | None, grad_bytes: float) -> tuple[list, list]:
    """Per-step comm beside its prediction, and the per-step model objects (verdicts)."""
    by_step: dict[tuple, list[Collective]] = defaultdict(list)
    for r in rows:
        by_step[(r.rank, r.step)].append(r)
    f, w = sources["flops_per_s"], sources["bus_bandwidth_bytes_per_s"]
    gpus = info.manifest.data_parallel_gpus(info.world_size)
    verdict = None
    if f and w and tokens and stage and gpus and gpus > 1:
        verdict = overlap_verdict(tokens, f, w, gpus=gpus, stage=stage, grad_bytes=grad_bytes)
    steps, models = [], []
    for s in overlap_steps:
        items = by_step.get((s["rank"], s["step"]), [])
        pc = [i.predicted_comm_ms for i in items if i.predicted_comm_ms is not None]
        pe = [i.predicted_exposed_ms for i in items if i.predicted_exposed_ms is not None]
        steps.append({
            "rank": s["rank"], "step": s["step"], "step_ms": s["step_ms"], "comm_ms": s["comm_ms"],
            "exposed_comm_ms": s["exposed_comm_ms"], "collectives": len(items),
            # sums over the collectives that have a prediction (an un-modelled
            # broadcast or all-to-all contributes nothing)
            "predicted_comm_ms": round(sum(pc), 6) if pc else None,
            "predicted_exposed_ms": round(sum(pe), 6) if pe else None,
        })
        models.append({
            "rank": s["rank"], "step": s["step"], "stage": stage, "gpus": gpus,
            "flops_per_s": f, "bus_bandwidth_bytes_per_s": w, "tokens": tokens, "grad_bytes": grad_bytes,
            "tokens_to_hide": round(verdict.tokens_to_hide, 1) if verdict else None,
            "comm_to_compute_ratio": round(verdict.ratio, 4) if verdict else None,
            "verdict": verdict.verdict if verdict else None,
            "reason": verdict.reason if verdict else _missing(f, w, tokens, stage),
            "caveat": CPU_CAVEAT if info.device_kind == "cpu" else None,
        })
    return steps, models


def _memory(con, info: RunInfo, stage: str | None) -> list[dict]:
    """Measured peak allocated memory per rank beside the model states of the run's stage."""
    params = info.manifest.params
    model_bytes = None
    if params and stage in ("ddp", "zero1", "zero2", "zero3"):
        model_bytes = model_state_bytes(stage, params, info.world_size)
    return [{**peak, "model_state_bytes": model_bytes, "stage": stage}
            for peak in sql.rows(con, "predict.memory_peaks", run_id=info.run_id)]


def analysis(con, run_id: int, tokens: float | None = None) -> RunAnalysis:
    """Measure the run, predict it with the model, and hold both side by side."""
    info = run_info(con, run_id)
    ov = overlap.compute(con, run_id)
    rows = collectives.compute(con, info)
    sources = _sources(con, info, rows)
    rows = exposure.predict_comm(rows, sources["bus_bandwidth_bytes_per_s"], sources["latency_s"])
    rows = exposure.predict_exposed(con, info, rows)
    stage = _stage(info, rows)
    grad_bytes = _grad_bytes(info, rows)
    tokens = tokens or info.manifest.tokens_per_microbatch
    steps, models = _per_step(rows, ov["steps"], sources, info, tokens, stage, grad_bytes)
    return RunAnalysis(info, ov, rows, sources, stage, grad_bytes, steps, models, _memory(con, info, stage), tokens)


def summary(rows: list[Collective]) -> list[dict]:
    """Per (kind, id, phase) over ranks and steps: means and the median bus bandwidth; most exposed first."""
    groups: dict[tuple, list[Collective]] = defaultdict(list)
    for r in rows:
        groups[(r.kind, r.id, r.phase)].append(r)

    def mean(values) -> float | None:
        values = [v for v in values if v is not None]
        return round(statistics.fmean(values), 6) if values else None

    out = []
    for (kind, id_, phase), items in groups.items():
        bws = [i.busbw_gbps for i in items if i.busbw_gbps is not None]
        comm, exposed = mean(i.comm_ms for i in items), mean(i.exposed_ms for i in items)
        out.append({
            "kind": kind, "id": id_, "phase": phase, "count": len(items),
            "bytes": items[0].bytes, "comm_ms": comm, "exposed_ms": exposed,
            "hidden_ms": round(comm - exposed, 6),
            "busbw_gbps": round(statistics.median(bws), 4) if bws else None,
            "predicted_comm_ms": mean(i.predicted_comm_ms for i in items),
            "predicted_exposed_ms": mean(i.predicted_exposed_ms for i in items),
            "inferred": any(i.inferred for i in items),
        })
    return sorted(out, key=lambda s: -(s["exposed_ms"] or 0))


def report(a: RunAnalysis) -> dict:
    """The ``buckets`` result (the JSON contract, without ``run``)."""
    return {"collectives": collectives.as_json(a.collectives), "summary": summary(a.collectives),
            "steps": a.steps, "model": a.model, "measured": a.sources, "memory": a.memory}
