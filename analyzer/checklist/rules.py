"""The checklist's rules: one function per rule id, each (context) -> Finding.

The context is ``buckets.context`` plus ``rules_data.extra``: per-collective rows
(rank, step, microbatch, kind, id, phase, bytes, comm_ms, exposed_ms, busbw,
predictions, instance), per-rank and per-step overlap, the manifest, F and W.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.findings import Finding, t
from overlapscope.analyzer.checklist.ddp import accumulation_comm, ddp_bucket_size, last_bucket_exposed
from overlapscope.analyzer.checklist.fsdp import hsdp_candidate, reshard_after_forward, root_only_wrap, unit_size
from overlapscope.analyzer.checklist.evidence import fmt_ms, label, mean_step_ms, per_step, steps_of


def tokens_below_fw(ctx: dict) -> Finding:
    title = "Tokens per micro-batch below F/W"
    fix = ("Raise the tokens per GPU per micro-batch (micro-batch size or sequence length) above F/W; "
           "or shard within the node (HSDP) so the gathers run on faster links; or get faster links.")
    models = [m for m in ctx["model"] if m["verdict"]]
    if not models:
        reason = ctx["model"][0]["reason"] if ctx["model"] else "no steps in the trace"
        return Finding("tokens_below_fw", title, "n/a", reason, fix)
    m = models[0]
    per = "per micro-batch (ZeRO-3 gathers repeat in every micro-batch)" if m["stage"] == "zero3" else "per step"
    evidence = (f"T = {m['tokens']:.0f} tokens {per}; F = {m['flops_per_s'] / 1e12:.3g} TFLOP/s "
                f"({ctx['sources']['flops_source']}), W = {m['bus_bandwidth_bytes_per_s'] / 1e9:.3g} GB/s "
                f"({ctx['sources']['bandwidth_source']}), {m['gpus']} GPUs, {m['grad_bytes']:.0f}-byte gradients "
                f"-> {m['tokens_to_hide']:.0f} tokens hide the {m['stage']} communication "
                f"(comm/compute {m['comm_to_compute_ratio']:.2f})")
    status = {"exposed": "fail", "marginal": "warn", "hidden": "pass"}[m["verdict"]]
    return Finding("tokens_below_fw", title, status, evidence, fix,
                   details={"tokens": m["tokens"], "tokens_to_hide": m["tokens_to_hide"]})


def exposed_forward_allgather(ctx: dict) -> Finding:
    title = "Forward all-gathers not hidden"
    fix = ("Prefetch the next unit's all-gather during the current unit's forward: "
           "module.set_modules_to_forward_prefetch([next]) (FSDP2) or forward_prefetch=True (FSDP1); "
           "remove device-to-host syncs (.item(), prints) that stop the CPU from running ahead.")
    rows = [r for r in ctx["rows"] if r["kind"] == "fsdp_unit" and r["phase"] == "forward_allgather"]
    if not rows:
        return Finding("exposed_forward_allgather", title, "n/a", "no FSDP forward all-gathers in the trace", fix)
    # The step's first gather cannot overlap anything: leave it out.
    groups = per_step(rows)
    later = [r for g in groups.values() for r in sorted(g, key=lambda r: r["offset_ms"] or 0)[1:]]
    if not later:
        return Finding("exposed_forward_allgather", title, "pass", "one forward all-gather per step (one unit)", fix)
    exposed = sum(r["exposed_ms"] for r in later)
    comm = sum(r["comm_ms"] for r in later)
    hidden_share = 1 - exposed / comm if comm else 1.0
    per_step_ms = exposed / len(groups)
    share = per_step_ms / mean_step_ms(ctx)
    worst = _worst_units(later)
    evidence = (f"{fmt_ms(per_step_ms)} per step of forward all-gathers exposed after the first unit "
                f"({100 * (1 - hidden_share):.0f}% of their {fmt_ms(comm / len(groups))}, "
                f"{100 * share:.1f}% of the step); most exposed: {worst}")
    status = "pass"
    if hidden_share < t("forward_gather_hidden") and share >= t("exposed_warn"):
        status = "fail" if share >= t("exposed_fail") else "warn"
    return Finding("exposed_forward_allgather", title, status, evidence, fix, impact_ms=per_step_ms)


def _worst_units(rows: list[dict], n: int = 3) -> str:
    by = defaultdict(float)
    count = defaultdict(int)
    for r in rows:
        by[label(r)] += r["exposed_ms"]
        count[label(r)] += 1
    top = sorted(by.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {fmt_ms(v / count[k])}" for k, v in top) or "-"


def exposed_backward_comm(ctx: dict) -> Finding:
    title = "Backward communication exposed beyond the last collective"
    fix = ("Let the backward hide its communication: for FSDP keep backward prefetch on and give "
           "reduce-scatters their own process group if they queue behind all-gathers; for DDP use "
           "smaller buckets early (first_bucket_bytes_cap), static_graph=True, and a high-priority NCCL "
           "stream (TORCH_NCCL_HIGH_PRIORITY=1).")
    backward = {"backward_allgather", "reduce_scatter", "allreduce"}
    rows = [r for r in ctx["rows"] if r["kind"] in ("fsdp_unit", "ddp_bucket") and r["phase"] in backward]
    if not rows:
        return Finding("exposed_backward_comm", title, "n/a", "no backward collectives of buckets or units", fix)
    groups = per_step(rows)
    beyond = []
    for g in groups.values():
        last = max(g, key=lambda r: (r["offset_ms"] or 0) + r["comm_ms"])  # the unavoidable tail
        beyond += [r for r in g if r is not last]
    per_step_ms = sum(r["exposed_ms"] for r in beyond) / len(groups)
    share = per_step_ms / mean_step_ms(ctx)
    status = "fail" if share >= t("exposed_fail") else "warn" if share >= t("exposed_warn") else "pass"
    evidence = (f"{fmt_ms(per_step_ms)} per step of backward comm exposed besides the last collective "
                f"({100 * share:.1f}% of the step); most exposed: {_worst_units(beyond)}")
    return Finding("exposed_backward_comm", title, status, evidence, fix, impact_ms=per_step_ms)


def low_bus_bandwidth(ctx: dict) -> Finding:
    title = "Bus bandwidth far below the calibration"
    fix = ("Check the transport NCCL picked (NCCL_DEBUG=INFO: IB/RoCE vs sockets, NVLS), NIC and GPU "
           "affinity, and contention from other jobs; compare with nccl-tests on the same nodes.")
    src = ctx["sources"]
    measured, calibrated = src["bus_bandwidth_bytes_per_s_trace"], src["bus_bandwidth_bytes_per_s_calibration"]
    if not measured:
        return Finding("low_bus_bandwidth", title, "n/a", "no sized collectives to measure bus bandwidth on", fix)
    if not calibrated:
        return Finding("low_bus_bandwidth", title, "n/a",
                       f"measured {measured / 1e9:.3g} GB/s on the large collectives; no calibration to compare "
                       f"with (run the tracer with calibration on)", fix)
    ratio = measured / calibrated
    status = "fail" if ratio < t("busbw_fail") else "warn" if ratio < t("busbw_warn") else "pass"
    evidence = (f"large collectives reach {measured / 1e9:.3g} GB/s bus bandwidth, {100 * ratio:.0f}% of the "
                f"{calibrated / 1e9:.3g} GB/s calibrated on this process group")
    return Finding("low_bus_bandwidth", title, status, evidence, fix, details={"ratio": ratio})


def straggler(ctx: dict) -> Finding:
    title = "A straggler rank makes the others wait in collectives"
    fix = ("Find what the late rank does before the collective (data loading, uneven sequence lengths, "
           "a slower device or host, extra work on rank 0): use loader workers and pinned memory, balance "
           "tokens across ranks.")
    rows = [r for r in ctx["rows"] if r.get("instance")]
    ranks = {r["rank"] for r in rows}
    if len(ranks) < 2:
        return Finding("straggler", title, "n/a", "needs the traces of at least two ranks", fix)
    best = defaultdict(lambda: float("inf"))
    for r in rows:
        best[r["instance"]] = min(best[r["instance"]], r["comm_ms"])
    wait = defaultdict(float)  # per rank: time spent in collectives beyond the transfer itself
    for r in rows:
        wait[r["rank"]] += r["comm_ms"] - best[r["instance"]]
    steps = len(steps_of(ctx)) or 1
    per_rank = {k: v / steps for k, v in wait.items()}
    late = min(per_rank, key=per_rank.get)
    spread = max(per_rank.values()) - per_rank[late]
    share = spread / mean_step_ms(ctx)
    status = "fail" if share >= t("straggler_fail") else "warn" if share >= t("straggler_warn") else "pass"
    waits = ", ".join(f"rank {k} {fmt_ms(v)}" for k, v in sorted(per_rank.items()))
    evidence = (f"waiting inside collectives per step: {waits}; rank {late} waits least, so the others wait "
                f"for it: up to {fmt_ms(spread)} per step ({100 * share:.1f}% of the step)")
    return Finding("straggler", title, status, evidence, fix, impact_ms=spread, details={"late_rank": late})


def fp32_reduction(ctx: dict) -> Finding:
    title = "Gradients reduced in fp32 (twice the bytes)"
    fix = ("Reduce gradients in bf16 where numerics allow: MixedPrecisionPolicy(reduce_dtype=torch.bfloat16) "
           "for FSDP2, a bf16 compress hook for DDP (ddp.register_comm_hook(None, bf16_compress_hook)).")
    reduce_rows = [r for r in ctx["rows"] if r["phase"] in ("reduce_scatter", "allreduce") and r["dtype"]]
    if not reduce_rows:
        return Finding("fp32_reduction", title, "n/a", "no gradient reductions with a dtype in the trace", fix)
    dtypes = sorted({str(r["dtype"]) for r in reduce_rows})
    fp32 = [d for d in dtypes if d.lower() in ("float", "float32")]
    gathers = sorted({str(r["dtype"]) for r in ctx["rows"] if r["phase"].endswith("allgather") and r["dtype"]})
    param = (ctx["manifest"].get("param_dtype") or "").replace("torch.", "")
    if not fp32:
        return Finding("fp32_reduction", title, "pass", f"gradients reduced in {', '.join(dtypes)}", fix)
    nbytes = sum(r["bytes"] or 0 for r in reduce_rows) / (len(per_step(reduce_rows)) or 1)
    low_precision = any(d.lower() in ("bfloat16", "half", "float16", "c10::bfloat16") for d in gathers) or \
        param in ("bfloat16", "float16")
    evidence = (f"reductions in {', '.join(dtypes)} ({nbytes / 1e6:.3g} MB per step and rank)"
                + (f" while parameters are gathered in {', '.join(gathers)}" if gathers else "")
                + (f"; param_dtype {param}" if param else ""))
    if low_precision:
        return Finding("fp32_reduction", title, "fail", evidence + ": twice the bytes of a bf16 reduction", fix)
    return Finding("fp32_reduction", title, "warn",
                   evidence + ": training is fp32 throughout; a bf16 reduction would halve these bytes", fix)


def host_bound(ctx: dict) -> Finding:
    title = "Host-bound: the device idles while the CPU launches work"
    fix = ("Cut CPU overhead per step: torch.compile or CUDA graphs, fused optimizers (fused=True / foreach), "
           "fewer and larger FSDP units, no per-step Python work or syncs in the loop.")
    if ctx["device_kind"] != "gpu":
        return Finding("host_bound", title, "n/a", "CPU-only trace: the CPU is the device", fix)
    idle = ctx["idle"]
    if not idle:
        return Finding("host_bound", title, "n/a", "no device work in the profiled steps", fix)
    steps = {(r["rank"], r["step"]): r["step_ms"] for r in ctx["overlap"]["steps"]}
    shares = [(r["host_idle_ns"] / 1e6 / steps[(r["rank"], r["step"])], r) for r in idle
              if steps.get((r["rank"], r["step"]))]
    if not shares:
        return Finding("host_bound", title, "n/a", "no step windows on the device", fix)
    mean_share = statistics.fmean(s for s, _ in shares)
    worst_share, worst = max(shares, key=lambda x: x[0])
    host_ms = statistics.fmean(r["host_idle_ns"] / 1e6 for _, r in shares)
    idle_ms = statistics.fmean(r["idle_ns"] / 1e6 for _, r in shares)
    status = "fail" if mean_share >= t("host_idle_fail") else "warn" if mean_share >= t("host_idle_warn") else "pass"
    evidence = (f"device idle {fmt_ms(idle_ms)} per step, of it {fmt_ms(host_ms)} waiting for launches "
                f"({100 * mean_share:.1f}% of the step; worst rank {worst['rank']} step {worst['step']} "
                f"{100 * worst_share:.1f}%)")
    return Finding("host_bound", title, status, evidence, fix, impact_ms=host_ms)


def local_grad_clipping(ctx: dict) -> Finding:
    title = "Gradient clipping without a global norm"
    fix = ("With sharded gradients the norm must be all-reduced: use the FSDP-aware "
           "torch.nn.utils.clip_grad_norm_ on DTensor gradients (FSDP2) or model.clip_grad_norm_ (FSDP1).")
    if ctx["stage"] not in ("zero3",):
        return Finding("local_grad_clipping", title, "n/a", "gradients are not sharded (not FSDP)", fix)
    norms = {(r["rank"], r["step"]) for r in ctx["norms"]}
    if not norms:
        return Finding("local_grad_clipping", title, "pass", "no gradient-norm ops in the profiled steps", fix)
    small_allreduce = {(r["rank"], r["step"]) for r in ctx["rows"]
                       if r["collective"] == "all_reduce" and (r["bytes"] or 0) <= 64}
    local = sorted(norms - small_allreduce)
    if not local:
        return Finding("local_grad_clipping", title, "pass", "norm ops are followed by an all-reduce of the norm", fix)
    where = ", ".join(f"rank {r} step {s}" for r, s in local[:4])
    return Finding("local_grad_clipping", title, "warn",
                   f"gradient-norm ops without an all-reduce of the norm in the same step ({where}): each rank "
                   f"clips by the norm of its own shard", fix)


def uneven_tokens(ctx: dict) -> Finding:
    title = "Uneven work between ranks (token counts)"
    fix = ("Give every rank the same number of tokens per step (pack or bucket sequences by length), or "
           "weight each rank's loss by its token count so the averaged gradient stays exact.")
    flops = ctx["flops"]
    if len({r["rank"] for r in flops}) < 2:
        return Finding("uneven_tokens", title, "n/a", "needs matmul FLOP counts of at least two ranks", fix)
    per_rank = defaultdict(list)
    for r in flops:
        per_rank[r["rank"]].append(r["flops"])
    means = {k: statistics.fmean(v) for k, v in per_rank.items()}
    lo, hi = min(means.values()), max(means.values())
    spread = (hi - lo) / hi if hi else 0.0
    evidence = "matmul FLOPs per step: " + ", ".join(f"rank {k} {v / 1e9:.3g} GFLOP" for k, v in sorted(means.items()))
    status = "warn" if spread > t("uneven_work") else "pass"
    return Finding("uneven_tokens", title, status, evidence + f" ({100 * spread:.1f}% apart)", fix)


RULES = (
    tokens_below_fw, exposed_forward_allgather, exposed_backward_comm, root_only_wrap, unit_size,
    low_bus_bandwidth, reshard_after_forward, hsdp_candidate, ddp_bucket_size, last_bucket_exposed,
    accumulation_comm, straggler, fp32_reduction, host_bound, local_grad_clipping, uneven_tokens,
)
