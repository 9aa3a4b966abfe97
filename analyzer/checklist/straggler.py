"""The straggler rule: one rank arrives late at the collectives and the others wait for it.

Measured as engineers read it (measure.waits, on one clock): per rank, comm splits
into waiting for peers and transfer; what a rank loses is its exposed wait, the
waiting that no transfer and no compute of its own covers, counted once however
many collectives wait at the same time. The late rank waits least; what the
others lose to it, per step in wall-clock time, is their mean exposed wait beyond
the late rank's own (the jitter every rank sees). The rule also says why the late
rank is late where the trace shows it (host-bound, more work, a slower device,
idle time before the collectives).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import fmt_ms
from overlapscope.analyzer.checklist.findings import Result, grade, na, rule, t
from overlapscope.analyzer.checklist.setup import join, pick
from overlapscope.analyzer.units import NS_PER_MS

_FIX_BASE = "Find what rank {late} does before the collectives it arrives last at."
_FIX_CAUSE = {
    "host_bound": ("Its device waits for the host: cut CPU work per step on that rank (torch.compile or CUDA "
                   "graphs, fused optimizers, no rank-specific logging or syncs in the step)."),
    "uneven_tokens": ("It computes more than the others: give every rank the same number of tokens per step "
                      "(pack or bucket sequences by length)."),
    "slow_compute": None,  # by device, below
    "idle": ("It idles before the collectives: look for data loading (more DataLoader workers, pin_memory, "
             "prefetch), rank-specific work such as logging or checkpointing on rank 0, or a sleep or sync."),
}
_SLOW_COMPUTE = {
    "gpu": ("It computes the same work more slowly: check that GPU (clocks, thermal throttling, another "
            "process on it: nvidia-smi) and its host's CPU affinity."),
    "cpu": ("It computes the same work more slowly: check for other processes on its cores and its thread count "
            "(torch.set_num_threads, OMP_NUM_THREADS)."),
}
_FIX_NONE = ("Compare that rank's step with the others' on the Timeline: data loading, uneven sequence lengths, a "
             "slower device or host, extra work on rank 0; use loader workers and pinned memory, balance tokens "
             "across ranks.")


def _per_rank(rows: list[dict], key: str, divisor: dict[int, int]) -> dict[int, float]:
    total: dict[int, float] = defaultdict(float)
    for r in rows:
        total[r["rank"]] += r[key] or 0.0
    return {k: total[k] / (divisor.get(k) or 1) for k in divisor}


def _mean_of(values: dict[int, float], ranks: list[int]) -> float:
    return statistics.fmean(values.get(r, 0.0) for r in ranks) if ranks else 0.0


def _cause(ctx: CheckContext, late: int, others: list[int], lost_ms: float) -> tuple[str | None, str]:
    """Why the late rank is late, where another measurement says so: (cause, sentence)."""
    steps = ctx.steps_per_rank()
    if ctx.device_kind == "gpu" and ctx.idle:
        host = _per_rank([{**r, "host_ms": r["host_idle_ns"] / NS_PER_MS} for r in ctx.idle], "host_ms", steps)
        extra = host.get(late, 0.0) - _mean_of(host, others)
        if extra > 0 and extra >= 0.5 * lost_ms:
            return "host_bound", (f"rank {late}'s device waits for launches {fmt_ms(host[late])} per step against "
                                  f"{fmt_ms(_mean_of(host, others))} on the others (see host_bound)")
    flops = _per_rank(ctx.flops, "flops", steps) if ctx.flops else {}
    if flops.get(late) and _mean_of(flops, others) > 0:
        more = flops[late] / _mean_of(flops, others) - 1
        if more > t("uneven_work"):
            return "uneven_tokens", (f"rank {late} does {100 * more:.0f}% more matmul FLOPs per step than the "
                                     f"others (see uneven_tokens)")
    compute = _per_rank(ctx.steps, "compute_ms", steps)
    slower = compute.get(late, 0.0) - _mean_of(compute, others)
    if slower > 0 and slower >= 0.5 * lost_ms:
        return "slow_compute", (f"rank {late} computes {fmt_ms(compute[late])} per step against "
                                f"{fmt_ms(_mean_of(compute, others))} on the others")
    idle = _per_rank(ctx.steps, "idle_ms", steps)
    more_idle = idle.get(late, 0.0) - _mean_of(idle, others)
    if more_idle > 0 and more_idle >= 0.5 * lost_ms:
        return "idle", (f"rank {late}'s device idles {fmt_ms(idle[late])} per step against "
                        f"{fmt_ms(_mean_of(idle, others))} on the others")
    return None, ""


def _fix(ctx: CheckContext, late: int, cause: str | None) -> str:
    if cause == "slow_compute":
        how = pick(ctx.setup, gpu=_SLOW_COMPUTE["gpu"], default=_SLOW_COMPUTE["cpu"])
    else:
        how = _FIX_CAUSE.get(cause) or _FIX_NONE
    return join(_FIX_BASE.format(late=late), how)


@rule("straggler", "A straggler rank makes the others wait in collectives", _FIX_NONE)
def straggler(ctx: CheckContext) -> Result:
    if len(ctx.ranks) < 2:
        return na("needs the traces of at least two ranks")
    steps = ctx.steps_per_rank()
    if not steps:
        return na("no ProfilerStep windows: the time lost per step needs steps")
    peered = {k: v for k, v in ctx.wait_ranks.items() if v["peered"] and k in steps}
    if len(peered) < 2:
        return na("the loaded ranks share no collective (none was found on two ranks)")
    exposed = _per_rank([w for w in ctx.waits if w["rank"] in peered], "exposed_wait_ms",
                        {k: steps[k] for k in peered})
    waiting = _per_rank([w for w in ctx.waits if w["rank"] in peered], "wait_ms", {k: steps[k] for k in peered})
    last = {k: v["last_arrivals"] / v["peered"] for k, v in peered.items()}
    late = min(exposed, key=lambda k: (exposed[k], -last[k], k))
    others = sorted(k for k in exposed if k != late)
    lost = max(0.0, _mean_of(exposed, others) - exposed[late])
    share = lost / ctx.mean_step_ms()
    cause, why = _cause(ctx, late, others, lost)
    per_rank = ", ".join(f"rank {k} {fmt_ms(exposed[k])}" for k in sorted(exposed))
    evidence = (f"rank {late} arrives last at {100 * last[late]:.0f}% of the collectives it shares; the other ranks "
                f"lose {fmt_ms(lost)} per step waiting for it ({100 * share:.1f}% of the step; wall clock, "
                f"concurrent collectives counted once, beyond the {fmt_ms(exposed[late])} rank {late} waits itself). "
                f"Exposed waiting for peers per step: {per_rank}" + (f". {why[0].upper()}{why[1:]}" if why else ""))
    details = {
        "late_rank": late, "lost_ms": round(lost, 6), "cause": cause,
        "ranks": [{"rank": k, "exposed_wait_ms": round(exposed[k], 6), "wait_ms": round(waiting[k], 6),
                   "last_arrival_pct": round(100 * last[k], 2)} for k in sorted(exposed)],
    }
    return Result(grade(share, "straggler_fail", "straggler_warn"), evidence, impact_ms=lost, details=details,
                  fix=_fix(ctx, late, cause))
