"""Checklist rules about DDP buckets and gradient accumulation."""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import fmt_bytes, fmt_ms, per_step
from overlapscope.analyzer.checklist.findings import Result, grade, na, rule, t
from overlapscope.analyzer.measure.collectives import Collective


def _buckets(ctx: CheckContext) -> list[Collective]:
    return [r for r in ctx.rows if r.kind == "ddp_bucket"]


def _rounds(rows: list[Collective]) -> dict[tuple, list[Collective]]:
    """Bucket all-reduces per synchronizing backward: (rank, step, microbatch)."""
    groups: dict[tuple, list[Collective]] = defaultdict(list)
    for r in rows:
        if r.step is not None:
            groups[(r.rank, r.step, r.microbatch)].append(r)
    return groups


_RAISE_CAP = "Raise bucket_cap_mb (default 25) so each all-reduce carries megabytes, not kilobytes{now}."
_LOWER_CAP = ("Lower bucket_cap_mb so the first buckets start during the backward pass; keep the first "
              "bucket small (first_bucket_bytes_cap){now}.")


@rule("ddp_bucket_size", "DDP bucket size", _RAISE_CAP.format(now=""))
def ddp_bucket_size(ctx: CheckContext) -> Result:
    cap = ctx.manifest.bucket_cap_mb
    now = f" (now {cap} MB)" if cap else ""
    fix_small, fix_large = _RAISE_CAP.format(now=now), _LOWER_CAP.format(now=now)
    rows = _buckets(ctx)
    if not rows:
        return na("no DDP bucket all-reduces in the trace", fix_small)
    rounds = _rounds(rows)
    count = statistics.median(len(g) for g in rounds.values())
    sized = [r.bytes for r in rows if r.bytes]
    median_bytes = statistics.median(sized) if sized else None
    w = ctx.sources["bus_bandwidth_bytes_per_s_trace"]
    slow = [r for r in rows if r.busbw_gbps is not None and w and r.busbw_gbps * 1e9 < t("latency_busbw") * w]
    comm = sum(r.comm_ms for r in rows)
    hidden = 1 - sum(r.exposed_ms for r in rows) / comm if comm else 1.0
    evidence = (f"{count:g} buckets per backward, median {fmt_bytes(median_bytes) if median_bytes else '? bytes'}; "
                f"{len(slow)} of {len(rows)} all-reduces below {100 * t('latency_busbw'):.0f}% of the large "
                f"collectives' bus bandwidth; {100 * hidden:.0f}% of the bucket comm hidden")
    small = count >= t("latency_count") and (
        (median_bytes is not None and median_bytes < t("bucket_min_bytes")) or len(slow) >= len(rows) / 2)
    if small:
        return Result("fail", evidence + ": buckets too small, latency-bound", fix=fix_small)
    if count <= t("bucket_few") and hidden < 0.5:
        share = sum(r.exposed_ms for r in rows) / len(rounds) / ctx.mean_step_ms()
        status = "fail" if share >= t("exposed_fail") else "warn"
        return Result(status, evidence + ": too few buckets to overlap the backward pass", fix=fix_large)
    return Result("pass", evidence, fix=fix_small)


@rule("last_bucket_exposed", "Exposed tail: the last DDP bucket",
      "The last bucket holds the first layers' gradients (often the input embedding), computed last "
      "with no compute left to hide behind: bound it with a smaller bucket_cap_mb, reduce in bf16 "
      "(ddp.register_comm_hook(None, bf16_compress_hook)), or keep a large input embedding out of the "
      "DDP all-reduce path.")
def last_bucket_exposed(ctx: CheckContext) -> Result:
    rounds = _rounds(_buckets(ctx))
    if not rounds:
        return na("no DDP bucket all-reduces in the trace")
    tails = [max(g, key=lambda r: (r.offset_ms or 0) + r.comm_ms) for g in rounds.values()]
    steps = len(per_step(tails)) or 1
    per_step_ms = sum(r.exposed_ms for r in tails) / steps
    share = per_step_ms / ctx.mean_step_ms()
    ids = sorted({r.id for r in tails})
    sizes = [r.bytes for r in tails if r.bytes]
    evidence = (f"last bucket ({', '.join(ids)}"
                + (f", {fmt_bytes(statistics.median(sizes))}" if sizes else "")
                + f") exposed {fmt_ms(per_step_ms)} per step, {100 * share:.1f}% of the step")
    status = grade(share, "exposed_fail", "exposed_warn")
    if status == "pass":
        evidence += " (the expected small tail)"
    return Result(status, evidence, impact_ms=per_step_ms)


_NO_SYNC = "Wrap the forward and backward of every micro-batch but the last in ddp.no_sync()."
_FSDP_ACCUM = ("ZeRO-3 re-gathers every unit in every micro-batch (3mΨ per step): skip the reduce-scatter of all "
               "but the last micro-batch (FSDP2 set_requires_gradient_sync(False)), keep weights gathered across "
               "micro-batches (reshard_after_forward=False) if memory allows, or use fewer, larger micro-batches.")


@rule("accumulation_comm", "Communication repeated in every micro-batch", "Nothing to do.")
def accumulation_comm(ctx: CheckContext) -> Result:
    m = ctx.manifest.accumulation_steps
    micro = {r.microbatch for r in ctx.rows if r.microbatch is not None}
    m = m or (len(micro) if micro else None)
    if not m or m <= 1:
        return na("one micro-batch per step (no gradient accumulation)")
    if ctx.stage == "ddp":
        synced: dict[tuple, set] = defaultdict(set)
        for (rank, step, mb) in _rounds(_buckets(ctx)):
            synced[(rank, step)].add(mb)
        per = statistics.median(len(v) for v in synced.values()) if synced else 0
        if per > 1:
            return Result("fail", f"{m} micro-batches per step and bucket all-reduces in {per:g} of them: "
                                  f"{per:g}x the gradient traffic of one all-reduce per step", fix=_NO_SYNC)
        return Result("pass", f"{m} micro-batches per step, bucket all-reduces only in one (no_sync works)",
                      fix=_NO_SYNC)
    units = [r for r in ctx.rows if r.kind == "fsdp_unit"]
    if not units:
        return na(f"{m} micro-batches but no FSDP collectives", _FSDP_ACCUM)
    rs: dict[tuple, set] = defaultdict(set)
    for r in units:
        if r.phase == "reduce_scatter":
            rs[(r.rank, r.step)].add(r.microbatch)
    per_rs = statistics.median(len(v) for v in rs.values()) if rs else 0
    gathers = [r for r in units if r.phase.endswith("allgather")]
    per_gather = len(gathers) / (len(per_step(gathers)) or 1)
    evidence = (f"{m} micro-batches per step: {per_gather:g} all-gathers and reduce-scatters in "
                f"{per_rs:g} micro-batches per step")
    return Result("warn" if per_rs > 1 or m > 1 else "pass", evidence, fix=_FSDP_ACCUM)
