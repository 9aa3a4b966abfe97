"""``buckets``: per-bucket, per-unit and per-phase communication beside the seed's model.

Composes the attribution (collectives), the measurement of F and W (measure),
the predictions (predict) and the seed's verdict (model_overlap) into the JSON
contract: ``collectives``, ``summary``, ``steps`` and per-step ``model`` objects.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.measure import collectives, rates as measure, overlap
from overlapscope.analyzer.predict import exposure as predict
from overlapscope.analyzer.ingest.dtypes import itemsize
from overlapscope.analyzer.model.memory import model_state_bytes
from overlapscope.analyzer.model.hide import overlap_verdict
from overlapscope.analyzer.store.runinfo import manifest as manifest_of

INTERNAL_KEYS = ("start_ns", "launch_ts_ns", "instance")
STAGE_OF = {"ddp": "ddp", "fsdp": "zero3", "hsdp": "zero3"}


def _stage(manifest: dict, rows: list[dict]) -> str | None:
    if manifest.get("parallelism") in STAGE_OF:
        return STAGE_OF[manifest["parallelism"]]
    kinds = {r["kind"] for r in rows}
    return "zero3" if "fsdp_unit" in kinds else "ddp" if "ddp_bucket" in kinds else None


def _grad_bytes(manifest: dict, rows: list[dict]) -> float:
    """Bytes per reduced gradient element: the manifest's reduce dtype, else the trace's."""
    size = itemsize((manifest.get("reduce_dtype") or "").replace("torch.", ""))
    if size:
        return float(size)
    sizes = [itemsize(r["dtype"]) for r in rows if r["phase"] in ("allreduce", "reduce_scatter") and r["dtype"]]
    sizes = [s for s in sizes if s]
    return float(statistics.median(sizes)) if sizes else 2.0


def _sources(con, run_id: int, manifest: dict, rows: list[dict]) -> dict:
    """F and W from the trace and from the tracer's calibration; which ones the model uses."""
    f_trace = measure.flops_per_s(con, run_id)
    w_trace = measure.bandwidth(rows)
    cal = manifest.get("calibration") or {}
    f_cal, w_cal = cal.get("flops_per_s"), cal.get("bus_bandwidth_bytes_per_s")
    w_used = w_cal or w_trace["bus_bandwidth_bytes_per_s"]
    return {
        "flops_per_s_trace": f_trace["flops_per_s"],
        "flops_per_s_calibration": f_cal,
        "bus_bandwidth_bytes_per_s_trace": w_trace["bus_bandwidth_bytes_per_s"],
        "bus_bandwidth_bytes_per_s_calibration": w_cal,
        # latency term of one collective, fitted on this trace's small collectives given W
        "latency_s": measure.latency(rows, w_used)["latency_s"],
        # the model uses the calibration when there is one (measured apart from the run)
        "flops_per_s": f_cal or f_trace["flops_per_s"],
        "bus_bandwidth_bytes_per_s": w_cal or w_trace["bus_bandwidth_bytes_per_s"],
        "flops_source": "calibration" if f_cal else ("trace" if f_trace["flops_per_s"] else None),
        "bandwidth_source": "calibration" if w_cal else ("trace" if w_trace["bus_bandwidth_bytes_per_s"] else None),
        "matmul_ops": f_trace["matmul_ops"],
        "large_collectives": w_trace["large_collectives"],
    }


def _summary(rows: list[dict]) -> list[dict]:
    """Per (kind, id, phase) over ranks and steps: means and the median bus bandwidth."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["kind"], r["id"], r["phase"])].append(r)

    def mean(key, items):
        vals = [i[key] for i in items if i[key] is not None]
        return round(statistics.fmean(vals), 6) if vals else None

    out = []
    for (kind, id_, phase), items in groups.items():
        bws = [i["busbw_gbps"] for i in items if i["busbw_gbps"] is not None]
        out.append({
            "kind": kind, "id": id_, "phase": phase, "count": len(items),
            "bytes": items[0]["bytes"], "comm_ms": mean("comm_ms", items), "exposed_ms": mean("exposed_ms", items),
            "hidden_ms": round(mean("comm_ms", items) - mean("exposed_ms", items), 6),
            "busbw_gbps": round(statistics.median(bws), 4) if bws else None,
            "predicted_comm_ms": mean("predicted_comm_ms", items),
            "predicted_exposed_ms": mean("predicted_exposed_ms", items),
            "inferred": any(i["inferred"] for i in items),
        })
    return sorted(out, key=lambda s: -(s["exposed_ms"] or 0))


CPU_CAVEAT = ("CPU-only run: gloo's threads share the CPU cores with compute, so communication overlaps "
              "compute less than the model assumes (on GPUs it runs on NICs and copy engines)")


def _per_step(rows: list[dict], overlap_steps: list[dict], sources: dict, manifest: dict,
              world: int, tokens: float | None, stage: str | None, grad_bytes: float,
              device_kind: str = "gpu") -> tuple[list, list]:
    """Per-step comm beside its prediction, and the per-step model objects (verdicts)."""
    by_step: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by_step[(r["rank"], r["step"])].append(r)
    steps, models = [], []
    f, w = sources["flops_per_s"], sources["bus_bandwidth_bytes_per_s"]
    tokens = tokens or manifest.get("tokens_per_microbatch")
    mesh = (manifest.get("mesh") or {}).get("shape") if isinstance(manifest.get("mesh"), dict) else None
    gpus = int(mesh[-1]) if manifest.get("parallelism") == "hsdp" and mesh else world
    verdict = None
    if f and w and tokens and stage and gpus and gpus > 1:
        verdict = overlap_verdict(tokens, f, w, gpus=gpus, stage=stage, grad_bytes=grad_bytes)
    for s in overlap_steps:
        items = by_step.get((s["rank"], s["step"]), [])
        pc = [i["predicted_comm_ms"] for i in items if i["predicted_comm_ms"] is not None]
        pe = [i["predicted_exposed_ms"] for i in items if i["predicted_exposed_ms"] is not None]
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
            "caveat": CPU_CAVEAT if device_kind == "cpu" else None,
        })
    return steps, models


def _missing(f, w, tokens, stage) -> str:
    lacking = [n for n, v in (("F (no FLOP counts or calibration)", f), ("W (no collective sizes or calibration)", w),
                              ("tokens per micro-batch (use --tokens)", tokens), ("a DDP/FSDP stage", stage)) if not v]
    return "cannot judge: missing " + ", ".join(lacking)


def _memory(con, run_id: int, manifest: dict, stage: str | None, world: int) -> list[dict]:
    """Measured peak allocated memory per rank beside the model states of the run's stage."""
    peaks = con.execute("""
        SELECT rank, max(total_allocated_bytes) AS peak, max(total_reserved_bytes) AS reserved
        FROM memory WHERE run_id = ? GROUP BY rank ORDER BY rank""", [run_id]).fetchall()
    params = manifest.get("params")
    model_bytes = None
    if params and stage in ("ddp", "zero1", "zero2", "zero3"):
        model_bytes = model_state_bytes(stage, params, world)
    return [{"rank": rank, "peak_allocated_bytes": peak, "peak_reserved_bytes": reserved,
             "model_state_bytes": model_bytes, "stage": stage} for rank, peak, reserved in peaks]


def context(con, run_id: int, tokens: float | None = None) -> dict:
    """Everything the buckets and diagnose analyses read, computed once.

    Keys: overlap (ranks, steps), rows (collectives, with internal keys),
    manifest, device_kind, world, sources (F, W), stage, grad_bytes, steps and
    model (per step), memory.
    """
    ov = overlap.compute(con, run_id)
    rows = collectives.compute(con, run_id, overlap_done=True)
    manifest = manifest_of(con, run_id)
    device_kind, world = con.execute("SELECT device_kind, world_size FROM runs WHERE run_id = ?", [run_id]).fetchone()
    sources = _sources(con, run_id, manifest, rows)
    predict.predict_comm(rows, sources["bus_bandwidth_bytes_per_s"], sources["latency_s"])
    predict.predict_exposed(con, run_id, rows, device_kind, manifest)
    stage = _stage(manifest, rows)
    grad_bytes = _grad_bytes(manifest, rows)
    steps, models = _per_step(rows, ov["steps"], sources, manifest, world, tokens, stage, grad_bytes, device_kind)
    return {"overlap": ov, "rows": rows, "manifest": manifest, "device_kind": device_kind, "world": world,
            "sources": sources, "stage": stage, "grad_bytes": grad_bytes, "steps": steps, "model": models,
            "memory": _memory(con, run_id, manifest, stage, world), "tokens": tokens}


def compute(con, run_id: int, tokens: float | None = None) -> dict:
    """The whole ``buckets`` result for a stored run (the JSON contract)."""
    ctx = context(con, run_id, tokens)
    rows = [{k: v for k, v in r.items() if k not in INTERNAL_KEYS} for r in ctx["rows"]]
    return {"collectives": rows, "summary": _summary(rows), "steps": ctx["steps"], "model": ctx["model"],
            "measured": ctx["sources"], "memory": ctx["memory"]}
