"""Replay a StepPlan with the model's timelines (model.replay): exposed comm per collective.

DDP passes: ``replay_ddp`` (buckets on one comm lane from their ready times, hidden
while the backward computes). FSDP passes: ``replay_fsdp`` (units in forward order,
prefetch as the pass says, the backward's gathers only for the units it regathers).
A plan whose collectives block compute (``StepPlan.blocking``) exposes every
collective in full: the measurement showed nothing hides them. Waits for peers are
the measurement's (whatif.plan): a DDP bucket waits on the lane for its peers'
arrival (``peer_ms``); other collectives last their wait, then their transfer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

from overlapscope.analyzer.model.replay import Bucket, FsdpOptions, FsdpUnit, replay_ddp, replay_fsdp
from overlapscope.analyzer.predict.plan import DdpPass, FsdpPass, StepPlan


@dataclass(frozen=True)
class Span:
    """Where one collective lands in the replay (ms from the pass's start)."""

    start_ms: float
    end_ms: float
    exposed_ms: float
    hidden_by: str | None  # the compute that hides (part of) it


@dataclass(frozen=True)
class StepReplay:
    comm_ms: float
    exposed_ms: float
    spans: dict  # id(xfer) -> Span


# What a replay times each collective with (``replay_plan``'s ``which``):
#   dur       the durations the change gives (measured transfers, retimed), waits as measured
#   model     the fitted ring model's transfers, waits for peers as measured
#   transfer  the fitted ring model's transfers alone: no waits for peers, no backend delays
#             (what the F/W model predicts; the buckets report's predicted exposed time)
WHICH = ("dur", "model", "transfer")


def _duration(x, which: str) -> float:
    """The transfer of one collective (ms)."""
    if which in ("model", "transfer"):
        return x.model_ms if x.model_ms is not None else x.dur_ms
    return x.dur_ms


def _lane(x, which: str) -> float:
    """Its time on the lane where the replay does not place its peers: its wait, then its transfer."""
    return (0.0 if which == "transfer" else x.wait_ms) + _duration(x, which)


def _reach(cover: list) -> list[float] | None:
    """Per piece of a pass's cover, the latest end of it and every piece before it: the pieces
    before the first whose reach passes a time all end by it (``_hidden_ms`` skips them
    without a look). None where an end is NaN (no order to rely on)."""
    out, most = [], float("-inf")
    for _, t1, _ in cover:
        if t1 != t1:
            return None
        most = t1 if t1 > most else most
        out.append(most)
    return out


def _hidden_ms(p: DdpPass, start: float, end: float, backward_end: float, reach: list[float] | None = None) -> float:
    """How much of [start, end] (ms) the pass's compute hides: the measured cover where a
    bucket measured it, else the measured fraction before the backward's end, none after.
    ``reach``: ``_reach(p.cover)``, to skip the pieces that end by ``start`` (each would add
    nothing: a late bucket of a pass looked at every piece before it, 1 s of a 64-rank DDP
    run's what-if)."""
    hidden, open_at = 0.0, start
    first = bisect_right(reach, start) if reach is not None else 0
    for t0, t1, frac in p.cover[first:]:  # sorted by start (plan._cover): those from ``end`` on add nothing
        if t0 >= end:
            break
        if t1 <= start:
            continue
        a, b = max(start, t0), min(end, t1)
        hidden += frac * (b - a)
        if a > open_at:  # the gap before this measured piece
            hidden += p.hidden_before_end * max(0.0, min(a, backward_end) - open_at)
        open_at = max(open_at, b)
    if open_at < end:
        hidden += p.hidden_before_end * max(0.0, min(end, backward_end) - open_at)
    return min(hidden, end - start)


def _ddp(p: DdpPass, which: str, spans: dict) -> float:
    # a bucket whose peers' arrival is known waits for it on the lane; any other lasts its wait
    if which == "transfer":  # each bucket issued when ready and the lane is free, for its transfer alone
        buckets = [Bucket(max(0.0, x.ready_ms) / 1e3, _duration(x, which) / 1e3) for x in p.buckets]
    else:
        buckets = [Bucket(max(0.0, x.ready_ms) / 1e3,
                          (_duration(x, which) if x.peer_ms is not None else _lane(x, which)) / 1e3,
                          x.delay_ms / 1e3, None if x.peer_ms is None else x.peer_ms / 1e3) for x in p.buckets]
    end_ms = max([x.ready_ms for x in p.buckets] + [0.0])
    timeline = replay_ddp(buckets, backward_end_s=end_ms / 1e3)
    exposed, reach = 0.0, _reach(p.cover)
    for x, b in zip(p.buckets, timeline.buckets):
        start, end = b.start_s * 1e3, b.end_s * 1e3
        hidden = _hidden_ms(p, start, end, end_ms, reach)
        exposed += end - start - hidden
        spans[id(x)] = Span(start, end, end - start - hidden, "backward compute" if hidden > 1e-9 else None)
    return exposed


def _fsdp(p: FsdpPass, which: str, spans: dict) -> float:
    units = []
    for u in p.units:
        reduce_s = sum(_lane(x, which) for x in u.reduce) / 1e3
        units.append(FsdpUnit(u.name, u.forward_ms / 1e3, u.backward_ms / 1e3, _lane(u.gather, which) / 1e3,
                              reduce_s, _lane(u.regather, which) / 1e3 if u.regather else None,
                              regather=u.regather is not None))
    timeline = replay_fsdp(units, FsdpOptions(forward_prefetch=p.forward_prefetch,
                                              backward_prefetch=p.backward_prefetch))
    compute = [s for s in timeline.spans if not s.is_comm]
    by_key = defaultdict(list)
    for s in timeline.spans:
        if s.is_comm:
            by_key[(s.unit, s.phase)].append(s)
    for u in p.units:
        for phase, x in (("forward_allgather", u.gather), ("backward_allgather", u.regather)):
            if x is not None and by_key.get((u.name, phase)):
                spans[id(x)] = _span(by_key[(u.name, phase)][0], compute)
        rs = by_key.get((u.name, "reduce_scatter"))
        if rs:  # the unit's reduce: its reduce-scatter then HSDP's all-reduce, exposure shared by time
            s = rs[0]
            total = sum(_lane(x, which) for x in u.reduce) or 1.0
            at = s.start_s * 1e3
            for x in u.reduce:
                share = _lane(x, which) / total
                spans[id(x)] = Span(at, at + _lane(x, which), s.exposed_s * 1e3 * share,
                                    _span(s, compute).hidden_by)
                at += _lane(x, which)
    return timeline.exposed_s * 1e3


def _span(s, compute) -> Span:
    hiders = [c for c in compute if c.start_s < s.end_s and c.end_s > s.start_s]
    names = []
    for c in hiders:
        name = f"{c.phase} of {c.unit or '<root>'}"
        if name not in names:
            names.append(name)
    hidden_by = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "") if names else None
    return Span(s.start_s * 1e3, s.end_s * 1e3, s.exposed_s * 1e3, hidden_by if s.exposed_s < s.dur_s else None)


def replay_plan(plan: StepPlan, which: str = "dur") -> StepReplay:
    """Exposed comm of the plan's collectives, timed as ``which`` says (WHICH): ``dur`` (the
    durations the change gives), ``model`` (the fitted ring model's, waits as measured) or
    ``transfer`` (the model's transfers alone). Comm is the time the collectives hold the
    lane, their waits for peers included where the replay keeps them."""
    spans: dict = {}
    if plan.blocking:
        at = 0.0
        for x in plan.xfers:
            d = _lane(x, which)
            spans[id(x)] = Span(at, at + d, d, None)
            at += d
        return StepReplay(at, at, spans)
    exposed = 0.0
    for p in plan.passes:
        exposed += _ddp(p, which, spans) if isinstance(p, DdpPass) else _fsdp(p, which, spans)
    comm = sum(spans[id(x)].end_ms - spans[id(x)].start_ms if id(x) in spans else _lane(x, which)
               for x in plan.xfers)
    return StepReplay(comm, exposed, spans)
