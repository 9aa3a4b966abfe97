"""Checklist rules about communication: does it hide, how fast is it, who makes whom wait."""

from __future__ import annotations

from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import fmt_ms, per_step, worst_owners
from overlapscope.analyzer.checklist.findings import Result, grade, na, rule, t

_VERDICT_STATUS = {"exposed": "fail", "marginal": "warn", "hidden": "pass"}
_BACKWARD = {"backward_allgather", "reduce_scatter", "allreduce"}


@rule("tokens_below_fw", "Tokens per micro-batch below F/W",
      "Raise the tokens per GPU per micro-batch (micro-batch size or sequence length) above F/W; "
      "or shard within the node (HSDP) so the gathers run on faster links; or get faster links.")
def tokens_below_fw(ctx: CheckContext) -> Result:
    models = [m for m in ctx.model if m["verdict"]]
    if not models:
        return na(ctx.model[0]["reason"] if ctx.model else "no steps in the trace")
    m = models[0]
    per = "per micro-batch (ZeRO-3 gathers repeat in every micro-batch)" if m["stage"] == "zero3" else "per step"
    evidence = (f"T = {m['tokens']:.0f} tokens {per}; F = {m['flops_per_s'] / 1e12:.3g} TFLOP/s "
                f"({ctx.sources['flops_source']}), W = {m['bus_bandwidth_bytes_per_s'] / 1e9:.3g} GB/s "
                f"({ctx.sources['bandwidth_source']}), {m['gpus']} GPUs, {m['grad_bytes']:.0f}-byte gradients "
                f"-> {m['tokens_to_hide']:.0f} tokens hide the {m['stage']} communication "
                f"(comm/compute {m['comm_to_compute_ratio']:.2f})")
    return Result(_VERDICT_STATUS[m["verdict"]], evidence,
                  details={"tokens": m["tokens"], "tokens_to_hide": m["tokens_to_hide"]})


@rule("exposed_forward_allgather", "Forward all-gathers not hidden",
      "Prefetch the next unit's all-gather during the current unit's forward: "
      "module.set_modules_to_forward_prefetch([next]) (FSDP2) or forward_prefetch=True (FSDP1); "
      "remove device-to-host syncs (.item(), prints) that stop the CPU from running ahead.")
def exposed_forward_allgather(ctx: CheckContext) -> Result:
    rows = [r for r in ctx.rows if r.kind == "fsdp_unit" and r.phase == "forward_allgather"]
    if not rows:
        return na("no FSDP forward all-gathers in the trace")
    # The step's first gather cannot overlap anything: leave it out.
    groups = per_step(rows)
    later = [r for g in groups.values() for r in sorted(g, key=lambda r: r.offset_ms or 0)[1:]]
    if not later:
        return Result("pass", "one forward all-gather per step (one unit)")
    exposed = sum(r.exposed_ms for r in later)
    comm = sum(r.comm_ms for r in later)
    hidden_share = 1 - exposed / comm if comm else 1.0
    per_step_ms = exposed / len(groups)
    share = per_step_ms / ctx.mean_step_ms()
    evidence = (f"{fmt_ms(per_step_ms)} per step of forward all-gathers exposed after the first unit "
                f"({100 * (1 - hidden_share):.0f}% of their {fmt_ms(comm / len(groups))}, "
                f"{100 * share:.1f}% of the step); most exposed: {worst_owners(later)}")
    status = "pass"
    if hidden_share < t("forward_gather_hidden"):
        status = grade(share, "exposed_fail", "exposed_warn")
    return Result(status, evidence, impact_ms=per_step_ms)


@rule("exposed_backward_comm", "Backward communication exposed beyond the last collective",
      "Let the backward hide its communication: for FSDP keep backward prefetch on and give "
      "reduce-scatters their own process group if they queue behind all-gathers; for DDP use "
      "smaller buckets early (first_bucket_bytes_cap), static_graph=True, and a high-priority NCCL "
      "stream (TORCH_NCCL_HIGH_PRIORITY=1).")
def exposed_backward_comm(ctx: CheckContext) -> Result:
    rows = [r for r in ctx.rows if r.kind in ("fsdp_unit", "ddp_bucket") and r.phase in _BACKWARD]
    if not rows:
        return na("no backward collectives of buckets or units")
    groups = per_step(rows)
    beyond = []
    for g in groups.values():
        last = max(g, key=lambda r: (r.offset_ms or 0) + r.comm_ms)  # the unavoidable tail
        beyond += [r for r in g if r is not last]
    per_step_ms = sum(r.exposed_ms for r in beyond) / len(groups)
    share = per_step_ms / ctx.mean_step_ms()
    evidence = (f"{fmt_ms(per_step_ms)} per step of backward comm exposed besides the last collective "
                f"({100 * share:.1f}% of the step); most exposed: {worst_owners(beyond)}")
    return Result(grade(share, "exposed_fail", "exposed_warn"), evidence, impact_ms=per_step_ms)


@rule("low_bus_bandwidth", "Bus bandwidth far below the calibration",
      "Check the transport NCCL picked (NCCL_DEBUG=INFO: IB/RoCE vs sockets, NVLS), NIC and GPU "
      "affinity, and contention from other jobs; compare with nccl-tests on the same nodes.")
def low_bus_bandwidth(ctx: CheckContext) -> Result:
    src = ctx.sources
    measured, calibrated = src["bus_bandwidth_bytes_per_s_trace"], src["bus_bandwidth_bytes_per_s_calibration"]
    if not measured:
        return na("no sized collectives to measure bus bandwidth on")
    if not calibrated:
        return na(f"measured {measured / 1e9:.3g} GB/s on the large collectives; no calibration to compare "
                  f"with (run the tracer with calibration on)")
    ratio = measured / calibrated
    evidence = (f"large collectives reach {measured / 1e9:.3g} GB/s bus bandwidth, {100 * ratio:.0f}% of the "
                f"{calibrated / 1e9:.3g} GB/s calibrated on this process group")
    return Result(grade(ratio, "busbw_fail", "busbw_warn", lower_is_worse=True), evidence, details={"ratio": ratio})


@rule("straggler", "A straggler rank makes the others wait in collectives",
      "Find what the late rank does before the collective (data loading, uneven sequence lengths, "
      "a slower device or host, extra work on rank 0): use loader workers and pinned memory, balance "
      "tokens across ranks.")
def straggler(ctx: CheckContext) -> Result:
    rows = ctx.rows
    if len({r.rank for r in rows}) < 2:
        return na("needs the traces of at least two ranks")
    best: dict = defaultdict(lambda: float("inf"))
    for r in rows:
        key = ctx.instances[(r.rank, r.event_id)]
        best[key] = min(best[key], r.comm_ms)
    wait: dict[int, float] = defaultdict(float)  # per rank: time in collectives beyond the transfer itself
    for r in rows:
        wait[r.rank] += r.comm_ms - best[ctx.instances[(r.rank, r.event_id)]]
    steps = len(ctx.steps) or 1
    per_rank = {k: v / steps for k, v in wait.items()}
    late = min(per_rank, key=per_rank.get)
    spread = max(per_rank.values()) - per_rank[late]
    share = spread / ctx.mean_step_ms()
    waits = ", ".join(f"rank {k} {fmt_ms(v)}" for k, v in sorted(per_rank.items()))
    evidence = (f"waiting inside collectives per step: {waits}; rank {late} waits least, so the others wait "
                f"for it: up to {fmt_ms(spread)} per step ({100 * share:.1f}% of the step)")
    return Result(grade(share, "straggler_fail", "straggler_warn"), evidence, impact_ms=spread,
                  details={"late_rank": late})


_FP32 = ("float", "float32")
_HALF = ("bfloat16", "half", "float16", "c10::bfloat16")


@rule("fp32_reduction", "Gradients reduced in fp32 (twice the bytes)",
      "Reduce gradients in bf16 where numerics allow: MixedPrecisionPolicy(reduce_dtype=torch.bfloat16) "
      "for FSDP2, a bf16 compress hook for DDP (ddp.register_comm_hook(None, bf16_compress_hook)).")
def fp32_reduction(ctx: CheckContext) -> Result:
    reduce_rows = [r for r in ctx.rows if r.phase in ("reduce_scatter", "allreduce") and r.dtype]
    if not reduce_rows:
        return na("no gradient reductions with a dtype in the trace")
    dtypes = sorted({str(r.dtype) for r in reduce_rows})
    fp32 = [d for d in dtypes if d.lower() in _FP32]
    gathers = sorted({str(r.dtype) for r in ctx.rows if r.phase.endswith("allgather") and r.dtype})
    param = (ctx.manifest.param_dtype or "").replace("torch.", "")
    if not fp32:
        return Result("pass", f"gradients reduced in {', '.join(dtypes)}")
    nbytes = sum(r.bytes or 0 for r in reduce_rows) / (len(per_step(reduce_rows)) or 1)
    low_precision = any(d.lower() in _HALF for d in gathers) or param in ("bfloat16", "float16")
    evidence = (f"reductions in {', '.join(dtypes)} ({nbytes / 1e6:.3g} MB per step and rank)"
                + (f" while parameters are gathered in {', '.join(gathers)}" if gathers else "")
                + (f"; param_dtype {param}" if param else ""))
    if low_precision:
        return Result("fail", evidence + ": twice the bytes of a bf16 reduction")
    return Result("warn", evidence + ": training is fp32 throughout; a bf16 reduction would halve these bytes")
