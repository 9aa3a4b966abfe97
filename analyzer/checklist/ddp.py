"""Checklist rules about DDP buckets and gradient accumulation.

How many times a step reduces its gradients (the synchronizing backward passes)
comes from every source there is, in this order: the tracer's micro-batch marks;
else a bucket (or unit) id that repeats within a step (the tracer's bucket ranges
name each bucket in every backward that all-reduces); else the manifest's
``accumulation_steps`` and ``no_sync``. The trace comes first: it shows what ran,
the manifest only what the script was set up to do. Bucket counts are per backward.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import (AGGREGATION, exposed_transfer, fmt_bytes, fmt_ms, headline_figure,
                                                      per_step, transfer)
from overlapscope.analyzer.checklist.findings import Result, fail_or_warn, grade, na, rule, t
from overlapscope.analyzer.checklist.setup import join, only_for, pick
from overlapscope.analyzer.measure.collectives import Collective


def _buckets(ctx: CheckContext) -> list[Collective]:
    return [r for r in ctx.rows if r.kind == "ddp_bucket"]


@dataclass(frozen=True)
class Backwards:
    """The reductions of each step split into its synchronizing backward passes."""

    rounds: dict[tuple, list[Collective]]  # (rank, step, backward) -> the step's reductions in that backward
    syncs: dict[tuple, int]  # (rank, step) -> backward passes that reduced gradients
    source: str  # where the split comes from, in words

    def per_step(self) -> float:
        return statistics.median(self.syncs.values()) if self.syncs else 0


def backwards(rows: list[Collective], manifest, marked: bool | None = None) -> Backwards:
    """Split each (rank, step)'s reductions (bucket all-reduces, or a unit's reduce-scatters)
    into backward passes: micro-batches (the tracer's marks, else the model's forward ranges),
    else repeated ids, else the manifest. ``marked``: whether the run was traced with the
    tracer's marks (a bundle with a manifest); None: where any bucket id was annotated."""
    steps: dict[tuple, list[Collective]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.launch_ts_ns or r.start_ns, r.event_id)):
        if r.step is not None:
            steps[(r.rank, r.step)].append(r)
    rounds: dict[tuple, list[Collective]] = {}
    if any(r.microbatch is not None for r in rows):
        # without the tracer (a raw trace: DDP's ids all inferred), the micro-batches are the
        # model's forward ranges (collectives.sql, _co_fwd)
        marked = any(not r.inferred for r in rows) if marked is None else marked
        source = "micro-batch marks" if marked else "the model's forward ranges: DDP's forward, FSDP2's root pre-forward"
        for key, group in steps.items():
            for r in group:
                rounds.setdefault(key + (r.microbatch,), []).append(r)
    elif any(not r.inferred for r in rows) and any(max(Counter(r.id for r in g).values()) > 1 for g in steps.values()):
        source = "bucket ids repeated within each step"
        for key, group in steps.items():
            seen: Counter = Counter()
            for r in group:
                rounds.setdefault(key + (seen[r.id],), []).append(r)
                seen[r.id] += 1
    else:
        m = manifest.accumulation_steps or 1
        per = m if (m > 1 and manifest.no_sync is False) else 1
        source = (f"the manifest (accumulation_steps={m}, no_sync={str(manifest.no_sync).lower()})"
                  if m > 1 else "one backward per step")
        for key, group in steps.items():
            size = len(group) // per if per > 1 and len(group) % per == 0 else len(group)
            for i, r in enumerate(group):
                rounds.setdefault(key + (i // size,), []).append(r)
    syncs = Counter(key[:2] for key in rounds)
    return Backwards(rounds, dict(syncs), source)


def _raise_fix(ctx: CheckContext, now: str) -> str:
    return join(f"Raise bucket_cap_mb (default 25) so each all-reduce carries megabytes, not kilobytes{now}.",
                pick(ctx.setup, nccl="", gloo="On gloo each all-reduce also pays TCP round trips: fewer, larger "
                                              "buckets matter even more.", default=""))


def _lower_fix(ctx: CheckContext, now: str) -> str:
    return ("Lower bucket_cap_mb so the first buckets start during the backward pass; keep the first "
            f"bucket small (first_bucket_bytes_cap){now}.")


@rule("ddp_bucket_size", "DDP bucket size",
      "Raise bucket_cap_mb (default 25) so each all-reduce carries megabytes, not kilobytes.")
def ddp_bucket_size(ctx: CheckContext) -> Result:
    cap = ctx.manifest.bucket_cap_mb
    now = f" (now {cap} MB)" if cap else ""
    fix_small = only_for(ctx.setup, "ddp", _raise_fix(ctx, now))
    fix_large = only_for(ctx.setup, "ddp", _lower_fix(ctx, now))
    rows = _buckets(ctx)
    if not rows:
        return na("no DDP bucket all-reduces in the trace", fix_small)
    split = backwards(rows, ctx.manifest)
    count = statistics.median(len(g) for g in split.rounds.values())
    sized = [r.bytes for r in rows if r.bytes]
    median_bytes = statistics.median(sized) if sized else None
    # the largest collectives' bus bandwidth: W, or where they are all latency-bound their own figure
    w = ctx.sources["bus_bandwidth_bytes_per_s_trace"] or ctx.sources.get("latency_bound_bytes_per_s")
    slow = [r for r in rows if r.busbw_gbps is not None and w and r.busbw_gbps * 1e9 < t("latency_busbw") * w]
    moving = sum(transfer(r) for r in rows)  # the wait for late peers is the straggler rule's
    hidden = 1 - sum(exposed_transfer(r) for r in rows) / moving if moving else 1.0
    size = fmt_bytes(median_bytes) if median_bytes else "sizes unknown"
    evidence = (f"{count:g} buckets per backward ({split.source}), median {size}; "
                f"{len(slow)} of {len(rows)} all-reduces below {100 * t('latency_busbw'):.0f}% of the large "
                f"collectives' bus bandwidth; {100 * hidden:.0f}% of the buckets' transfer hidden")
    small = count >= t("latency_count") and (
        (median_bytes is not None and median_bytes < t("bucket_min_bytes")) or len(slow) >= len(rows) / 2)
    if small:
        return Result("fail", evidence + ": buckets too small, latency-bound", fix=fix_small)
    if count <= t("bucket_few") and hidden < 0.5:
        status = fail_or_warn(headline_figure(ctx.steps, rows).share, "exposed_fail")
        return Result(status, evidence + ": too few buckets to overlap the backward pass", fix=fix_large)
    if count >= t("latency_count") and median_bytes is None and not w:
        # many buckets, and neither sizes nor bus bandwidths to tell whether they are latency-bound
        return na(f"{count:g} buckets per backward ({split.source}) but no bucket sizes in the trace (no sizes in "
                  f"the kernels' args or the launch ranges' Input Dims, no manifest buckets): cannot tell whether "
                  f"they are latency-bound", fix_small)
    return Result("pass", evidence, fix=fix_small)


_LAST_FIX = ("The last bucket holds the first layers' gradients (often the input embedding), computed last "
             "with no compute left to hide behind: bound it with a smaller bucket_cap_mb, reduce in bf16 "
             "(ddp.register_comm_hook(None, bf16_compress_hook)), or keep a large input embedding out of the "
             "DDP all-reduce path.")


@rule("last_bucket_exposed", "Exposed tail: the last DDP bucket", _LAST_FIX)
def last_bucket_exposed(ctx: CheckContext) -> Result:
    rows = _buckets(ctx)
    if not rows:
        return na("no DDP bucket all-reduces in the trace", only_for(ctx.setup, "ddp", _LAST_FIX))
    rounds = backwards(rows, ctx.manifest).rounds
    tails = [max(g, key=lambda r: (r.offset_ms or 0) + r.comm_ms) for g in rounds.values()]
    exposed = headline_figure(ctx.steps, tails)
    ids = sorted({r.id for r in tails})
    sizes = [r.bytes for r in tails if r.bytes]
    evidence = (f"last bucket ({', '.join(ids)}"
                + (f", {fmt_bytes(statistics.median(sizes))}" if sizes else "")
                + f") exposed {fmt_ms(exposed.ms)} per step, {100 * exposed.share:.1f}% of the step "
                  f"({AGGREGATION}; waiting for late peers is the straggler rule's)")
    status = grade(exposed.share, "exposed_fail", "exposed_warn")
    if status == "pass":
        evidence += " (the expected small tail)"
    return Result(status, evidence, impact_ms=exposed.ms)


def _accum_fix(ctx: CheckContext) -> str:
    return pick(
        ctx.setup,
        ddp="Wrap the forward and backward of every micro-batch but the last in ddp.no_sync().",
        fsdp2="ZeRO-3 re-gathers every unit in every micro-batch (3mΨ per step): skip the reduce-scatter of all but "
              "the last micro-batch (model.set_requires_gradient_sync(False)), keep weights gathered across "
              "micro-batches (set_reshard_after_backward(False) / reshard_after_forward=False) if memory allows, "
              "or use fewer, larger micro-batches.",
        fsdp1="ZeRO-3 re-gathers every unit in every micro-batch (3mΨ per step): run all but the last micro-batch "
              "inside model.no_sync() (it keeps unsharded gradients: more memory), or use fewer, larger "
              "micro-batches.",
        default="ZeRO-3 re-gathers every unit in every micro-batch (3mΨ per step): skip the reduce-scatter of all but "
                "the last micro-batch (FSDP2 set_requires_gradient_sync(False), FSDP1 no_sync()), or use fewer, "
                "larger micro-batches.")


def _micro_batches(ctx: CheckContext, split: Backwards) -> int:
    """Micro-batches per step: the manifest's, else the marks', else the model's forward ranges per step
    (the median step), else the reductions repeated per step."""
    marks = {(r.rank, r.step, r.microbatch) for r in ctx.rows if r.microbatch is not None and r.step is not None}
    per_marks = Counter(key[:2] for key in marks)
    forwards = ctx.analysis.forwards
    return int(ctx.manifest.accumulation_steps or max(max(per_marks.values(), default=0),
                                                      statistics.median(forwards.values()) if forwards else 0,
                                                      max(split.syncs.values(), default=1)))


@rule("accumulation_comm", "Communication repeated in every micro-batch", "Nothing to do.")
def accumulation_comm(ctx: CheckContext) -> Result:
    fix = _accum_fix(ctx)
    if ctx.stage == "ddp":
        rows = _buckets(ctx)
    else:
        rows = [r for r in ctx.rows if r.kind == "fsdp_unit" and r.phase == "reduce_scatter"]
    # FSDP's unit ids come from FSDP's own ranges, annotated with or without the tracer: its bundle's manifest says
    split = backwards(rows, ctx.manifest, None if ctx.stage == "ddp" else ctx.analysis.info.has_manifest)
    m = _micro_batches(ctx, split)
    if m <= 1:
        return na("one micro-batch per step as far as the run shows (no micro-batch marks, no manifest "
                  "accumulation_steps, one forward of the model per step, no reduction repeated within a step)", fix)
    syncs = split.per_step()
    if ctx.stage == "ddp":
        if not rows:
            return na(f"{m} micro-batches per step but no bucket all-reduces in the trace", fix)
        if syncs > 1:
            return Result("fail", f"{m} micro-batches per step and the buckets all-reduced in {syncs:g} of them "
                                  f"({split.source}): {syncs:g}x the gradient traffic of one all-reduce per step",
                          fix=fix)
        return Result("pass", f"{m} micro-batches per step, bucket all-reduces only in one ({split.source}; "
                              f"no_sync works)", fix=fix)
    units = [r for r in ctx.rows if r.kind == "fsdp_unit"]
    if not units:
        return na(f"{m} micro-batches but no FSDP collectives", fix)
    gathers = [r for r in units if r.phase.endswith("allgather")]
    per_gather = len(gathers) / (len(per_step(gathers)) or 1)
    evidence = (f"{m} micro-batches per step: {per_gather:g} all-gathers per step and reduce-scatters in "
                f"{syncs:g} micro-batch{'' if syncs == 1 else 'es'} per step ({split.source})")
    return Result("warn", evidence, fix=fix)
