"""Timeline replays that predict exposed communication: DDP buckets and FSDP units.

Pure and deterministic: durations in, start/end/exposed times out, all in
seconds from the start of the replayed pass. docs/model.md, "The replays"
(DDP buckets, FSDP units) says what each assumes and why.

Shared assumptions (each function adds its own):

- One compute lane: kernels of one GPU run one after the other.
- One comm lane: collectives run one at a time, in the order they are issued
  (one NCCL stream, or several streams sharing the same links). A collective
  issued at ``t`` starts at ``max(t, end of the previous collective)``.
- Comm running beside compute is not slowed down by it (no contention).
- Exposed time of a collective = the part of its interval not covered by compute
  (docs/definitions.md, "exposed comm"); collectives never overlap each other here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from overlapscope.contract.figures import overlap_pct


# --- DDP buckets ---------------------------------------------------------------------


@dataclass(frozen=True)
class Bucket:
    """A DDP gradient bucket to replay."""

    ready_s: float
    """When its last gradient became ready, seconds after the backward pass starts."""
    comm_s: float
    """Predicted all-reduce time of the bucket (seconds)."""
    delay_s: float = 0.0
    """Time it waits after it could start (ready, lane free) before it starts: what a
    measured bucket waited for the backend's thread (seconds)."""
    peer_s: float | None = None
    """When its last peer arrives (seconds after the backward pass starts): the all-reduce
    moves no data before, so it waits on the lane until then (None: no peer is late)."""

    def __post_init__(self):
        if self.ready_s < 0 or self.comm_s < 0 or self.delay_s < 0:
            raise ValueError(f"bucket times must be >= 0, got {self}")


@dataclass(frozen=True)
class BucketSpan:
    """Where a bucket's all-reduce lands in the replay."""

    index: int
    """Position in the launch order (0 = first launched)."""
    ready_s: float
    """When the bucket became ready (seconds)."""
    start_s: float
    """Launch: max(ready, end of the previous bucket) (seconds)."""
    end_s: float
    """start_s + comm_s, after any wait for its peers (seconds)."""
    exposed_s: float
    """Part of [start_s, end_s] after the backward pass ends (seconds)."""

    @property
    def comm_s(self) -> float:
        """All-reduce time (seconds)."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class DdpTimeline:
    """Replay of one backward pass with bucketed all-reduces."""

    buckets: tuple[BucketSpan, ...]
    """One span per bucket, in launch order."""
    backward_end_s: float
    """When the backward compute ends (seconds)."""

    @property
    def end_s(self) -> float:
        """When the step can go on to the optimizer: backward and all comm done (seconds)."""
        return max([self.backward_end_s] + [b.end_s for b in self.buckets])

    @property
    def comm_s(self) -> float:
        """Total all-reduce time (seconds)."""
        return sum(b.comm_s for b in self.buckets)

    @property
    def exposed_s(self) -> float:
        """Comm not hidden by the backward pass (seconds) = end_s - backward_end_s."""
        return sum(b.exposed_s for b in self.buckets)

    @property
    def overlap_pct(self) -> float | None:
        """100 x hidden comm / comm time (None when there is no comm: nothing to overlap)."""
        return overlap_pct(self.comm_s, self.exposed_s)


def replay_ddp(buckets: Sequence[Bucket], backward_end_s: float) -> DdpTimeline:
    """Replay bucketed all-reduces on one comm stream against a backward pass.

    Assumptions: the backward pass keeps the compute lane busy from 0 to
    ``backward_end_s``; buckets launch in the order given (DDP's fixed bucket
    order, the same on every rank), each at max(its ready time, the previous
    bucket's end) plus its ``delay_s``; its transfer begins once its last peer arrives
    (``peer_s``). A bucket's exposed time is the part of its all-reduce after
    ``backward_end_s``; with buckets that finish before the next one is ready,
    only the last one is exposed (docs/model.md, "DDP buckets").
    """
    if backward_end_s < 0:
        raise ValueError(f"backward_end_s must be >= 0, got {backward_end_s}")
    spans, lane_free = [], 0.0
    for index, bucket in enumerate(buckets):
        start = max(bucket.ready_s, lane_free) + bucket.delay_s
        end = max(start, bucket.peer_s or 0.0) + bucket.comm_s
        exposed = max(0.0, end - max(start, backward_end_s))
        spans.append(BucketSpan(index, bucket.ready_s, start, end, exposed))
        lane_free = end
    return DdpTimeline(tuple(spans), backward_end_s)


# --- FSDP units ------------------------------------------------------------------------

COMM_PHASES = ("forward_allgather", "backward_allgather", "reduce_scatter")


@dataclass(frozen=True)
class FsdpUnit:
    """One FSDP unit (usually one transformer block) to replay."""

    name: str
    """Label used in the output (e.g. ``layers.3``)."""
    forward_s: float
    """Forward compute of the unit (seconds)."""
    backward_s: float
    """Backward compute of the unit (seconds)."""
    allgather_s: float
    """All-gather of its parameters (seconds), the same in forward and backward."""
    reduce_scatter_s: float
    """Reduce-scatter of its gradients (seconds)."""
    backward_allgather_s: float | None = None
    """Its backward all-gather (seconds); None: the same as ``allgather_s``."""
    regather: bool = True
    """Whether backward gathers it again (False: kept from forward, as FSDP2 keeps the root,
    or ``reshard_after_forward=False``); ``FsdpOptions.reshard_after_forward=False`` drops
    every unit's."""

    def __post_init__(self):
        if min(self.forward_s, self.backward_s, self.allgather_s, self.reduce_scatter_s,
               self.backward_allgather_s or 0.0) < 0:
            raise ValueError(f"unit times must be >= 0, got {self}")


@dataclass(frozen=True)
class FsdpOptions:
    """FSDP settings the replay honours."""

    forward_prefetch: bool = True
    """Issue the next units' forward all-gathers when the current unit's compute starts."""
    backward_prefetch: bool = True
    """Issue the next units' backward all-gathers when the current unit's backward
    starts, so they queue before its reduce-scatter (FSDP1 BACKWARD_PRE)."""
    prefetch_limit: int = 1
    """How many units ahead may be gathered (FSDP keeps this at one or two)."""
    reshard_after_forward: bool = True
    """False keeps the full weights from forward to backward: no backward all-gathers."""

    def __post_init__(self):
        if not isinstance(self.prefetch_limit, int) or self.prefetch_limit < 1:
            raise ValueError(f"prefetch_limit must be a positive integer, got {self.prefetch_limit}")


@dataclass(frozen=True)
class FsdpSpan:
    """One compute or comm interval of the FSDP replay."""

    unit: str
    """The unit's name."""
    phase: str
    """``forward``, ``backward`` (compute) or ``forward_allgather``,
    ``backward_allgather``, ``reduce_scatter`` (comm, the phase names of docs/definitions.md)."""
    start_s: float
    """Start (seconds from the step start)."""
    end_s: float
    """End (seconds)."""
    exposed_s: float
    """Comm only: the part not covered by compute (seconds); 0 for compute."""

    @property
    def is_comm(self) -> bool:
        """True for collectives."""
        return self.phase in COMM_PHASES

    @property
    def dur_s(self) -> float:
        """Length (seconds)."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class FsdpTimeline:
    """Replay of one FSDP forward and backward pass (the optimizer step is not included)."""

    spans: tuple[FsdpSpan, ...]
    """Compute and comm spans in the order they were issued."""

    @property
    def step_s(self) -> float:
        """Time until the last compute or collective ends (seconds)."""
        return max((s.end_s for s in self.spans), default=0.0)

    @property
    def compute_s(self) -> float:
        """Total compute time (seconds)."""
        return sum(s.dur_s for s in self.spans if not s.is_comm)

    @property
    def comm_s(self) -> float:
        """Total comm time (seconds)."""
        return sum(s.dur_s for s in self.spans if s.is_comm)

    @property
    def exposed_s(self) -> float:
        """Comm not covered by compute (seconds)."""
        return sum(s.exposed_s for s in self.spans)

    def phase(self, phase: str) -> list[FsdpSpan]:
        """The spans of one phase, in issue order."""
        return [s for s in self.spans if s.phase == phase]


class _Lanes:
    """Compute lane and comm lane of the replay; records the spans."""

    def __init__(self):
        self.compute_free = 0.0
        self.comm_free = 0.0
        self.compute: list[tuple[str, str, float, float]] = []
        self.comm: list[tuple[str, str, float, float]] = []
        self.order: list[tuple[str, int]] = []

    def issue(self, unit: str, phase: str, at_s: float, dur_s: float) -> float:
        """Queue a collective issued at ``at_s``; returns its end."""
        start = max(at_s, self.comm_free)
        self.comm_free = start + dur_s
        self.order.append(("comm", len(self.comm)))
        self.comm.append((unit, phase, start, self.comm_free))
        return self.comm_free

    def run(self, unit: str, phase: str, ready_s: float, dur_s: float) -> tuple[float, float]:
        """Run compute once the lane is free and its input is ready; returns (start, end)."""
        start = max(ready_s, self.compute_free)
        self.compute_free = start + dur_s
        self.order.append(("compute", len(self.compute)))
        self.compute.append((unit, phase, start, self.compute_free))
        return start, self.compute_free

    def timeline(self) -> FsdpTimeline:
        covers = [(s, e) for _, _, s, e in self.compute]
        spans = []
        for lane, i in self.order:
            unit, phase, s, e = (self.comm if lane == "comm" else self.compute)[i]
            exposed = _uncovered_s(s, e, covers) if lane == "comm" else 0.0
            spans.append(FsdpSpan(unit, phase, s, e, exposed))
        return FsdpTimeline(tuple(spans))


def _uncovered_s(start: float, end: float, covers: list[tuple[float, float]]) -> float:
    """Length of [start, end] minus the disjoint intervals ``covers`` (seconds)."""
    covered = sum(max(0.0, min(end, e) - max(start, s)) for s, e in covers)
    return max(0.0, (end - start) - covered)


def _pass(lanes: _Lanes, units: Sequence[FsdpUnit], compute: str, gather: str | None,
          prefetch: bool, limit: int, with_reduce_scatter: bool) -> None:
    """Replay one pass over ``units`` in the given order.

    Before a unit's compute its all-gather is issued if not yet issued (the
    pre-hook, at the previous compute's end); with prefetch, when a unit's
    compute starts, the all-gathers of the next ``limit`` units are issued.
    After a unit's backward compute its reduce-scatter is issued.
    """
    gathered: dict[int, float] = {}  # unit position -> all-gather end

    def gather_unit(i: int, at_s: float) -> None:
        if gather is None or i >= len(units) or i in gathered:
            return
        unit = units[i]
        if gather == "backward_allgather":
            if not unit.regather:
                return
            dur = unit.allgather_s if unit.backward_allgather_s is None else unit.backward_allgather_s
        else:
            dur = unit.allgather_s
        gathered[i] = lanes.issue(unit.name, gather, at_s, dur)

    for i, unit in enumerate(units):
        gather_unit(i, lanes.compute_free)
        dur = unit.forward_s if compute == "forward" else unit.backward_s
        start, end = lanes.run(unit.name, compute, gathered.get(i, 0.0), dur)
        if prefetch:
            for ahead in range(i + 1, i + 1 + limit):
                gather_unit(ahead, start)
        if with_reduce_scatter:
            lanes.issue(unit.name, "reduce_scatter", end, unit.reduce_scatter_s)


def replay_fsdp(units: Sequence[FsdpUnit], options: FsdpOptions = FsdpOptions()) -> FsdpTimeline:
    """Replay the forward and backward pass of FSDP units (docs/model.md, "FSDP units").

    Forward in the given order, each unit's compute after its all-gather:
    without prefetch the all-gather of unit i is issued when unit i-1's compute
    ends, so compute waits for every gather; with prefetch the gathers of the
    next ``prefetch_limit`` units are issued when unit i's compute starts. The
    first unit's gather is issued at 0 and is always exposed.

    Backward in reverse order, starting when the forward compute ends; each
    unit's backward needs its all-gather again (unless
    ``reshard_after_forward=False``, which drops those gathers) and issues its
    reduce-scatter when its compute ends. Prefetched gathers are issued at the
    unit's backward start, so they queue ahead of its reduce-scatter; without
    prefetch a gather queues behind the previous unit's reduce-scatter. The step
    ends with the last reduce-scatter.
    """
    lanes = _Lanes()
    limit = options.prefetch_limit
    _pass(lanes, list(units), "forward", "forward_allgather",
          options.forward_prefetch, limit, with_reduce_scatter=False)
    back_gather = "backward_allgather" if options.reshard_after_forward else None
    _pass(lanes, list(reversed(units)), "backward", back_gather,
          options.backward_prefetch, limit, with_reduce_scatter=True)
    return lanes.timeline()
