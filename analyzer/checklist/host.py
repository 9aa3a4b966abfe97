"""Checklist rules about the host and the ranks' work: launch-bound devices, clipping, uneven tokens."""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import fmt_ms
from overlapscope.analyzer.checklist.findings import Result, grade, na, rule, t
from overlapscope.analyzer.checklist.setup import join, only_for, pick
from overlapscope.analyzer.units import NS_PER_MS


_LOOP = ("Keep data loading off the training thread (DataLoader num_workers > 0, pin_memory=True) and take "
         "per-step Python work and device-to-host syncs (.item(), prints) out of the loop.")


def _host_fix(ctx: CheckContext) -> str:
    """Less CPU work per launched kernel, in the run's own terms: DDP's host work is its
    unused-parameter search and per-bucket hooks, FSDP's its per-unit hooks."""
    if ctx.device_kind != "gpu":
        return "Nothing to change here: on a CPU-only run the CPU is the device, there are no launches to wait for."
    return join(pick(
        ctx.setup,
        ddp="Cut the CPU work per step: larger micro-batches (the same launches carry more tokens), CUDA graphs "
            "(torch.compile(mode=\"reduce-overhead\")) or torch.compile, fused optimizers (fused=True or "
            "foreach=True); DDP's own host work: find_unused_parameters=False (it walks the autograd graph after "
            "every forward) and static_graph=True.",
        fsdp2="Cut the CPU work per step: fewer and larger FSDP units (several small modules under one "
              "fully_shard call: the hooks run per unit), torch.compile, fused optimizers (fused=True or "
              "foreach=True), larger micro-batches.",
        fsdp1="Cut the CPU work per step: fewer and larger FSDP units (auto_wrap_policy at block granularity: the "
              "hooks run per unit), limit_all_gathers=False where cudaEventSynchronize shows in _pre_forward (the "
              "rate limiter blocks the host), torch.compile, fused optimizers (fused=True or foreach=True).",
        default="Cut the CPU work per step: torch.compile or CUDA graphs, fused optimizers (fused=True or "
                "foreach=True), larger micro-batches; with FSDP, fewer and larger units."), _LOOP)


@rule("host_bound", "Host-bound: the device idles while the CPU launches work",
      "Cut the CPU work per step: torch.compile or CUDA graphs, fused optimizers (fused=True or foreach=True), "
      "larger micro-batches; with FSDP, fewer and larger units. " + _LOOP)
def host_bound(ctx: CheckContext) -> Result:
    fix = _host_fix(ctx)
    if ctx.device_kind != "gpu":
        return na("CPU-only trace: the CPU is the device", fix)
    if not ctx.idle:
        return na("no device work in the profiled steps", fix)
    steps = {(s["rank"], s["step"]): s["step_ms"] for s in ctx.steps}
    shares = [(r["host_idle_ns"] / NS_PER_MS / steps[(r["rank"], r["step"])], r) for r in ctx.idle
              if steps.get((r["rank"], r["step"]))]
    if not shares:
        return na("no step windows on the device", fix)
    mean_share = statistics.fmean(s for s, _ in shares)
    worst_share, worst = max(shares, key=lambda x: x[0])
    host_ms = statistics.fmean(r["host_idle_ns"] / NS_PER_MS for _, r in shares)
    idle_ms = statistics.fmean(r["idle_ns"] / NS_PER_MS for _, r in shares)
    evidence = (f"device idle {fmt_ms(idle_ms)} per step, of it {fmt_ms(host_ms)} waiting for launches "
                f"({100 * mean_share:.1f}% of the step; worst rank {worst['rank']} step {worst['step']} "
                f"{100 * worst_share:.1f}%)")
    return Result(grade(mean_share, "host_idle_fail", "host_idle_warn"), evidence, impact_ms=host_ms, fix=fix)


@rule("local_grad_clipping", "Gradient clipping without a global norm",
      "With sharded gradients the norm must be all-reduced: use the FSDP-aware "
      "torch.nn.utils.clip_grad_norm_ on DTensor gradients (FSDP2) or model.clip_grad_norm_ (FSDP1).")
def local_grad_clipping(ctx: CheckContext) -> Result:
    fix = pick(ctx.setup,
               fsdp2="With sharded gradients the norm must be all-reduced: use torch.nn.utils.clip_grad_norm_ on "
                     "the DTensor gradients (it all-reduces the norm), not a per-shard norm.",
               fsdp1="With sharded gradients the norm must be all-reduced: use model.clip_grad_norm_ (FSDP1's own), "
                     "not torch.nn.utils.clip_grad_norm_ on the local shards.",
               default="With sharded gradients the norm must be all-reduced: use the FSDP-aware "
                       "torch.nn.utils.clip_grad_norm_ on DTensor gradients (FSDP2) or model.clip_grad_norm_ (FSDP1).")
    fix = only_for(ctx.setup, "fsdp", fix)
    if ctx.stage not in ("zero3",):
        return na("gradients are not sharded (not FSDP)", fix)
    norms = {(r["rank"], r["step"]) for r in ctx.norms}
    if not norms:
        return Result("pass", "no gradient-norm ops in the profiled steps", fix=fix)
    all_reduces = [r for r in ctx.rows if r.collective == "all_reduce" and r.step is not None]
    if all_reduces and not any(r.bytes for r in all_reduces):
        return na("gradient-norm ops and all-reduces, but no all-reduce sizes to find the norm's scalar among "
                  "them", fix)
    small_allreduce = {(r.rank, r.step) for r in all_reduces if r.bytes and r.bytes <= 64}
    local = sorted(norms - small_allreduce)
    if not local:
        return Result("pass", "norm ops are followed by an all-reduce of the norm", fix=fix)
    where = ", ".join(f"rank {r} step {s}" for r, s in local[:4])
    return Result("warn", f"gradient-norm ops without an all-reduce of the norm in the same step ({where}): each "
                          f"rank clips by the norm of its own shard", fix=fix)


@rule("uneven_tokens", "Uneven work between ranks (token counts)",
      "Give every rank the same number of tokens per step (pack or bucket sequences by length), or "
      "weight each rank's loss by its token count so the averaged gradient stays exact.")
def uneven_tokens(ctx: CheckContext) -> Result:
    if len({r["rank"] for r in ctx.flops}) < 2:
        return na("needs matmul FLOP counts of at least two ranks")
    per_rank: dict[int, list[float]] = defaultdict(list)
    for r in ctx.flops:
        per_rank[r["rank"]].append(r["flops"])
    means = {k: statistics.fmean(v) for k, v in per_rank.items()}
    lo, hi = min(means.values()), max(means.values())
    spread = (hi - lo) / hi if hi else 0.0
    evidence = "matmul FLOPs per step: " + ", ".join(f"rank {k} {v / 1e9:.3g} GFLOP" for k, v in sorted(means.items()))
    return Result("warn" if spread > t("uneven_work") else "pass", evidence + f" ({100 * spread:.1f}% apart)")
