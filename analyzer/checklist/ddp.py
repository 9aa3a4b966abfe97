"""Checklist rules about DDP buckets and gradient accumulation."""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.findings import Finding, t
from overlapscope.analyzer.checklist.evidence import fmt_bytes, fmt_ms, mean_step_ms, per_step


def _buckets(ctx: dict) -> list[dict]:
    return [r for r in ctx["rows"] if r["kind"] == "ddp_bucket"]


def _rounds(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Bucket all-reduces per synchronizing backward: (rank, step, microbatch)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["step"] is not None:
            groups[(r["rank"], r["step"], r["microbatch"])].append(r)
    return groups


def ddp_bucket_size(ctx: dict) -> Finding:
    title = "DDP bucket size"
    cap = ctx["manifest"].get("bucket_cap_mb")
    fix_small = ("Raise bucket_cap_mb (default 25) so each all-reduce carries megabytes, not kilobytes"
                 + (f" (now {cap} MB)" if cap else "") + ".")
    fix_large = ("Lower bucket_cap_mb so the first buckets start during the backward pass; keep the first "
                 "bucket small (first_bucket_bytes_cap)" + (f" (now {cap} MB)" if cap else "") + ".")
    rows = _buckets(ctx)
    if not rows:
        return Finding("ddp_bucket_size", title, "n/a", "no DDP bucket all-reduces in the trace", fix_small)
    rounds = _rounds(rows)
    count = statistics.median(len(g) for g in rounds.values())
    sized = [r["bytes"] for r in rows if r["bytes"]]
    median_bytes = statistics.median(sized) if sized else None
    w = ctx["sources"]["bus_bandwidth_bytes_per_s_trace"]
    slow = [r for r in rows if r["busbw_gbps"] is not None and w and r["busbw_gbps"] * 1e9 < t("latency_busbw") * w]
    comm = sum(r["comm_ms"] for r in rows)
    hidden = 1 - sum(r["exposed_ms"] for r in rows) / comm if comm else 1.0
    evidence = (f"{count:g} buckets per backward, median {fmt_bytes(median_bytes) if median_bytes else '? bytes'}; "
                f"{len(slow)} of {len(rows)} all-reduces below {100 * t('latency_busbw'):.0f}% of the large "
                f"collectives' bus bandwidth; {100 * hidden:.0f}% of the bucket comm hidden")
    small = count >= t("latency_count") and (
        (median_bytes is not None and median_bytes < t("bucket_min_bytes")) or len(slow) >= len(rows) / 2)
    if small:
        return Finding("ddp_bucket_size", title, "fail", evidence + ": buckets too small, latency-bound", fix_small)
    if count <= t("bucket_few") and hidden < 0.5:
        share = sum(r["exposed_ms"] for r in rows) / len(rounds) / mean_step_ms(ctx)
        status = "fail" if share >= t("exposed_fail") else "warn"
        return Finding("ddp_bucket_size", title, status,
                       evidence + ": too few buckets to overlap the backward pass", fix_large)
    return Finding("ddp_bucket_size", title, "pass", evidence, fix_small)


def last_bucket_exposed(ctx: dict) -> Finding:
    title = "Exposed tail: the last DDP bucket"
    fix = ("The last bucket holds the first layers' gradients (often the input embedding), computed last "
           "with no compute left to hide behind: bound it with a smaller bucket_cap_mb, reduce in bf16 "
           "(ddp.register_comm_hook(None, bf16_compress_hook)), or keep a large input embedding out of the "
           "DDP all-reduce path.")
    rounds = _rounds(_buckets(ctx))
    if not rounds:
        return Finding("last_bucket_exposed", title, "n/a", "no DDP bucket all-reduces in the trace", fix)
    tails = [max(g, key=lambda r: (r["offset_ms"] or 0) + r["comm_ms"]) for g in rounds.values()]
    steps = len(per_step(tails)) or 1
    per_step_ms = sum(r["exposed_ms"] for r in tails) / steps
    share = per_step_ms / mean_step_ms(ctx)
    ids = sorted({r["id"] for r in tails})
    sizes = [r["bytes"] for r in tails if r["bytes"]]
    evidence = (f"last bucket ({', '.join(ids)}"
                + (f", {fmt_bytes(statistics.median(sizes))}" if sizes else "")
                + f") exposed {fmt_ms(per_step_ms)} per step, {100 * share:.1f}% of the step")
    status = "fail" if share >= t("exposed_fail") else "warn" if share >= t("exposed_warn") else "pass"
    if status == "pass":
        evidence += " (the expected small tail)"
    return Finding("last_bucket_exposed", title, status, evidence, fix, impact_ms=per_step_ms)


def accumulation_comm(ctx: dict) -> Finding:
    title = "Communication repeated in every micro-batch"
    manifest = ctx["manifest"]
    m = manifest.get("accumulation_steps")
    micro = {r["microbatch"] for r in ctx["rows"] if r["microbatch"] is not None}
    m = m or (len(micro) if micro else None)
    if not m or m <= 1:
        return Finding("accumulation_comm", title, "n/a", "one micro-batch per step (no gradient accumulation)",
                       "Nothing to do.")
    if ctx["stage"] == "ddp":
        fix = "Wrap the forward and backward of every micro-batch but the last in ddp.no_sync()."
        rounds = _rounds(_buckets(ctx))
        synced = defaultdict(set)
        for (rank, step, mb) in rounds:
            synced[(rank, step)].add(mb)
        per = statistics.median(len(v) for v in synced.values()) if synced else 0
        if per > 1:
            return Finding("accumulation_comm", title, "fail",
                           f"{m} micro-batches per step and bucket all-reduces in {per:g} of them: "
                           f"{per:g}x the gradient traffic of one all-reduce per step", fix)
        return Finding("accumulation_comm", title, "pass",
                       f"{m} micro-batches per step, bucket all-reduces only in one (no_sync works)", fix)
    fix = ("ZeRO-3 re-gathers every unit in every micro-batch (3mΨ per step): skip the reduce-scatter of all "
           "but the last micro-batch (FSDP2 set_requires_gradient_sync(False)), keep weights gathered across "
           "micro-batches (reshard_after_forward=False) if memory allows, or use fewer, larger micro-batches.")
    units = [r for r in ctx["rows"] if r["kind"] == "fsdp_unit"]
    if not units:
        return Finding("accumulation_comm", title, "n/a", f"{m} micro-batches but no FSDP collectives", fix)
    rs = defaultdict(set)
    for r in units:
        if r["phase"] == "reduce_scatter":
            rs[(r["rank"], r["step"])].add(r["microbatch"])
    per_rs = statistics.median(len(v) for v in rs.values()) if rs else 0
    gathers = [r for r in units if r["phase"].endswith("allgather")]
    per_gather = len(gathers) / (len(per_step(gathers)) or 1)
    evidence = (f"{m} micro-batches per step: {per_gather:g} all-gathers and reduce-scatters in "
                f"{per_rs:g} micro-batches per step")
    return Finding("accumulation_comm", title, "warn" if per_rs > 1 or m > 1 else "pass", evidence, fix)
