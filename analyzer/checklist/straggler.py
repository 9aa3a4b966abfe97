"""The straggler rule: one rank arrives late at the collectives and the others wait for it.

Measured as engineers read it (measure.waits, on one clock): per rank, comm splits
into waiting for peers and transfer; what a rank loses is its exposed wait, the
waiting that no transfer and no compute of its own covers, counted once however
many collectives wait at the same time. The late rank waits least; what the
others lose to it in a step, in wall-clock time, is their mean exposed wait beyond
the late rank's own (the jitter every rank sees).

A run always has a last rank somewhere: the rule fails or warns only when the same
rank is late consistently, beyond the run's jitter: late (the others losing at least
half of the typical loss) in more steps than chance makes any one rank last in
(``steps_needed``: every step of a run of fewer than 4, or of 2 ranks over 4 to 8
steps; 3 of 4 would be a coin's 62 % for 2 ranks), the typical loss being the median
over steps, and that typical loss
over twice the run's jitter. The jitter is the largest of how much the loss itself
varies from step to step (its standard deviation), how much each rank's compute per
step varies (the median over ranks of its robust spread, 1.4826 x the median absolute
deviation), which is what moves a rank's arrival, and how far apart the other ranks'
own waits are (with two or more ranks beside the late one: the median over steps of their standard
deviation; ranks that nobody made late arrive that far apart). Noise moves the last
rank from step to step, makes one step's loss stand out alone, or stays within what
ranks differ by anyway (healthy 2- and 4-rank gloo runs on 2 cores: "losses" of 0-4 ms,
the other ranks' waits 1-5 ms apart, compute varying by 1-5 ms).

What fixing it buys is the step it would save: the what-if with the late rank on
time (``--on-time RANK``: it arrives with the latest other rank, so the waits it alone
caused go and the transfers that queued behind them move up; the step is the others'),
its gain the finding's ``impact_ms``. The rule
also says why the late rank is late where the trace shows it (host-bound, more work,
a slower device, idle time before the collectives).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import fmt_ms
from overlapscope.analyzer.checklist.findings import Result, grade, na, rule, t
from overlapscope.analyzer.checklist.setup import join, pick
from overlapscope.analyzer.predict import whatif
from overlapscope.analyzer.predict.changes import Changes
from overlapscope.analyzer.units import NS_PER_MS

CONSISTENT_SHARE = 0.75  # of the profiled steps the late rank must be late in, at least
CHANCE = 0.05  # the most that noise may have made the same rank late in that many steps
TYPICAL_SHARE = 0.5  # late in a step: the others lose at least half of the median loss
JITTER_TIMES = 2.0  # the median loss must exceed this many times the run's jitter
REPLAYED_RANKS = 8  # the on-time what-if of a larger run replays the late rank and the slowest others

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


def _losses(ctx: CheckContext, late: int, ranks: list[int]) -> tuple[list[float], list[float]]:
    """Per profiled step that the ranks of ``ranks`` share: what the others lose to ``late``
    (their mean exposed wait beyond its own), ms; and, where there are two or more others,
    how much their own exposed waits differ (their standard deviation): how far apart ranks
    arrive that nobody made late."""
    by_step: dict[int, dict[int, float]] = defaultdict(dict)
    for w in ctx.waits:
        if w["rank"] in ranks:
            by_step[w["step"]][w["rank"]] = w["exposed_wait_ms"] or 0.0
    losses, apart = [], []
    for step in sorted(by_step):
        waits = by_step[step]
        others = [waits[r] for r in ranks if r != late and r in waits]
        if late in waits and others:
            losses.append(statistics.fmean(others) - waits[late])
            if len(others) > 1:
                apart.append(statistics.stdev(others))
    return losses, apart


def _spread(values: list[float]) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of normal noise, robust to outliers."""
    middle = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - middle) for v in values)


def jitter_ms(steps: list[dict], losses: list[float], apart: list[float]) -> float:
    """The run's jitter, the largest of: the step-to-step standard deviation of the loss; the
    median over ranks of the robust spread of their compute per step (what moves a rank's
    arrival; step times move together on a loaded machine, their spread says nothing about
    who arrives when); the median over steps of how far apart the other ranks' waits are."""
    by_rank: dict[int, list[float]] = defaultdict(list)
    for s in steps:
        if s["compute_ms"] is not None:
            by_rank[s["rank"]].append(s["compute_ms"])
    spreads = [_spread(v) for v in by_rank.values() if len(v) > 1]
    return max(statistics.median(spreads) if spreads else 0.0,
               statistics.stdev(losses) if len(losses) > 1 else 0.0,
               statistics.median(apart) if apart else 0.0)


def steps_needed(steps: int, ranks: int) -> int:
    """How many of ``steps`` profiled steps one rank must be late in to be late by more than
    chance: noise makes some rank last in every step, the same one in k steps or more with
    ``ranks`` x P(Binomial(steps, 1/ranks) >= k); the fewest k, and at least 75 % of the steps,
    that chance is under 5 % for (every step where none is: 2 ranks need 4 of 4, or 9 of 10)."""
    if steps < 4:
        return steps
    p = 1.0 / max(ranks, 2)
    floor = math.ceil(CONSISTENT_SHARE * steps)
    for k in range(floor, steps + 1):
        at_least = sum(math.comb(steps, j) * p ** j * (1 - p) ** (steps - j) for j in range(k, steps + 1))
        if max(ranks, 2) * at_least <= CHANCE:
            return k
    return steps


def _consistent(losses: list[float], jitter: float, ranks: int) -> tuple[bool, float, int]:
    """Whether the late rank is late beyond the jitter: (consistent, median loss, steps late)."""
    if not losses:
        return False, 0.0, 0
    typical = statistics.median(losses)
    late_steps = sum(1 for v in losses if typical > 0 and v >= TYPICAL_SHARE * typical)
    return typical > JITTER_TIMES * jitter and late_steps >= steps_needed(len(losses), ranks), typical, late_steps


def _on_time_gain(ctx: CheckContext, late: int) -> tuple[float | None, float | None, str | None]:
    """The step the others would save with ``late`` on time (the what-if's gain, the headline's
    aggregation), the measured step it is a share of (the headline's) and the what-if's flags;
    all None where nothing can be replayed."""
    a = ctx.analysis
    ranks = None
    if len(ctx.ranks) > REPLAYED_RANKS:
        slow = sorted((r for r in a.overlap["ranks"] if r.get("step_ms") is not None and r["rank"] != late),
                      key=lambda r: -r["step_ms"])[:REPLAYED_RANKS - 1]
        ranks = {late, *(r["rank"] for r in slow)}
    p = whatif.predict(a, Changes(on_time=late), ranks=ranks)
    if not p["predicted"]:
        return None, None, None
    return max(0.0, p["predicted"]["gain_ms"]), p["measured"]["step_ms"], p["label"]


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
    losses, apart = _losses(ctx, late, sorted(peered))
    jitter = jitter_ms(ctx.steps, losses, apart)
    consistent, typical, late_steps = _consistent(losses, jitter, len(peered))
    lost = max(0.0, typical)
    cause, why = _cause(ctx, late, others, lost)
    per_rank = ", ".join(f"rank {k} {fmt_ms(exposed[k])}" for k in sorted(exposed))
    gain, step_ms, label = _on_time_gain(ctx, late) if consistent else (None, None, None)
    impact = gain if gain is not None else lost
    share = impact / (step_ms or ctx.mean_step_ms())
    evidence = (f"rank {late} arrives last at {100 * last[late]:.0f}% of the collectives it shares and is late in "
                f"{late_steps} of {len(losses)} profiled steps; the other ranks lose a median {fmt_ms(lost)} per step "
                f"waiting for it (wall clock, concurrent collectives counted once, beyond what rank {late} waits "
                f"itself)")
    if gain is not None:
        evidence += (f"; with it on time the step would save {fmt_ms(gain)} ({100 * share:.1f}% of the step: "
                     f"the waits and the transfers delayed behind them, whatif {label})")
    evidence += f". Exposed waiting for peers per step: {per_rank}" + (f". {why[0].upper()}{why[1:]}" if why else "")
    details = {
        "late_rank": late, "lost_ms": round(lost, 6), "cause": cause, "consistent": consistent,
        "late_steps": late_steps, "steps": len(losses), "jitter_ms": round(jitter, 6),
        "step_losses_ms": [round(v, 6) for v in losses],
        "ranks": [{"rank": k, "exposed_wait_ms": round(exposed[k], 6), "wait_ms": round(waiting[k], 6),
                   "last_arrival_pct": round(100 * last[k], 2)} for k in sorted(exposed)],
    }
    if not consistent:
        evidence = (f"no rank is late consistently beyond the run's jitter ({fmt_ms(jitter)}: how much the loss and "
                    f"the ranks' compute vary from step to step; late means by half the median loss in "
                    f"{steps_needed(len(losses), len(peered))} of {len(losses)} steps, more than chance gives "
                    f"{len(peered)} ranks, that loss over {JITTER_TIMES:g}x the jitter): " + evidence)
        return Result("pass", evidence, impact_ms=lost, details=details, fix=_fix(ctx, late, cause))
    status = grade(share, "straggler_fail", "straggler_warn")
    linked = gain is not None and status != "pass"
    return Result(status, evidence, impact_ms=impact, details=details, fix=_fix(ctx, late, cause),
                  predicted_gain_ms=round(gain, 4) if linked else None, whatif=label if linked else None)
