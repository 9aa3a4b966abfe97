"""A measured step as the what-if engine replays it: passes of buckets or units.

``plans`` reads the buckets report's ``RunAnalysis`` (measured collectives with their
bucket or unit, phase, bytes, times and the compute around them) into one
``StepPlan`` per rank and step. A plan holds what the replay needs and nothing it
would have to guess: each pass (one micro-batch's forward and backward) with its
DDP buckets or FSDP units, the measured compute of the passes and of the rest of
the step (the optimizer), and the measured totals that a prediction is a change of.
Times are milliseconds; DDP ready times count from the pass's backward start.

Each collective holds its piece of the rank's one comm lane (sql/lanes.sql: concurrent
gloo transfers counted once), split into the time it waited there for its peers
(sql/waits.sql: a collective moves no data before its last rank arrives) and its
transfer. A change retimes the transfer; the wait is carried as measured: DDP
buckets wait until the measured arrival of their peers (``peer_ms``), FSDP
collectives for as long as they waited (``wait_ms``). The compute that hid each
piece is measured too (``measured_exposed_ms``), so an unchanged step replays to
its measured exposure.

Where the trace cannot tell (a pass's backward start on CPU traces, a unit's own
compute), the estimates are the data-parallel model's: backward = 2/3 of a pass's compute
(model.hide.BACKWARD_SHARE: 2 and 4 FLOPs per parameter and token), a unit's compute in
proportion to its bytes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
import dataclasses
from dataclasses import dataclass, field

import msgspec

from overlapscope.analyzer.ingest.dtypes import itemsize
from overlapscope.analyzer.measure.blocks import rank_blocks
from overlapscope.analyzer.measure.collectives import table_of
from overlapscope.analyzer.measure.waits import Lane, Lanes
from overlapscope.analyzer.model.hide import BACKWARD_SHARE
from overlapscope.analyzer.units import NS_PER_MS

BLOCKING_EXPOSED = 0.9  # a family whose comm is this exposed or more is replayed as blocking
REDUCE_PHASES = ("reduce_scatter", "allreduce")


def replace(obj, **changes):
    """``dataclasses.replace`` for the plans' classes (a shallow copy with ``changes``) in a
    sixth of its time: a what-if copies every collective of every step it replays (0.4 us a
    copy of an ``Xfer``, against 2.7 us). The classes here have no ``__post_init__`` and no
    field outside ``__init__``, so a copy of each field is what ``__init__`` would make."""
    cls = type(obj)
    copier = _COPIERS.get(cls) or _copier(cls)
    if not changes.keys() <= copier.names:
        raise TypeError(f"{cls.__name__} has no field {sorted(changes.keys() - copier.names)[0]!r}")
    new = copier(obj)
    for name, value in changes.items():
        setattr(new, name, value)
    return new


def _copier(cls):
    """A function that copies each field of a ``cls`` one statement at a time (made once per
    class, as ``dataclasses`` makes ``__init__``: a loop over the names took 3.9 us)."""
    names = [f.name for f in dataclasses.fields(cls)]
    source = "def copy(obj):\n    new = new_object(cls)\n" + "".join(f"    new.{n} = obj.{n}\n" for n in names)
    scope = {"new_object": object.__new__, "cls": cls}
    exec(source + "    return new\n", scope)  # noqa: S102 (field names of our own dataclasses)
    copy = scope["copy"]
    copy.names = frozenset(names)
    _COPIERS[cls] = copy
    return copy


_COPIERS: dict = {}


@dataclass(slots=True)  # one per bucket or unit collective of a run: 474 bytes with its numbers, 530 with a dict
class Xfer:
    """One collective of a replay."""

    phase: str  # allreduce, forward_allgather, backward_allgather, reduce_scatter
    id: str  # bucket index or unit name
    collective: str  # all_reduce, all_gather, reduce_scatter
    bytes: float  # full buffer (nccl-tests' size)
    group_size: int
    dur_ms: float  # its transfer, what a change retimes: measured, its lane piece less its wait for peers
    model_ms: float | None  # the fitted ring model's time (no level from the run)
    measured_ms: float | None = None  # its measured span (None: a collective the change created)
    measured_exposed_ms: float | None = None  # of its lane piece, the part no compute hid
    link: str = "intra"  # intra: the data-parallel or shard group; inter: HSDP's replicas
    ready_ms: float = 0.0  # DDP: when its gradients were ready, ms after the pass's backward start
    delay_ms: float = 0.0  # DDP: measured wait after it could start (ready, lane free): the backend's thread
    dtype_bytes: float | None = None  # bytes per element
    terms: object = None  # comm.Terms of the prediction (None: as measured)
    wait_ms: float = 0.0  # of its lane piece, the time it waited for its peers (carried as measured)
    peer_ms: float | None = None  # DDP: when its last peer arrived, ms after the backward start (None: no wait)
    last_rank: int | None = None  # the rank that arrived last at it (None: no peer loaded)
    lead_ms: float = 0.0  # of wait_ms, what last_rank alone caused: it arrived this long after every other rank
    key: tuple[int, int] | None = None  # (rank, event_id) of the measured collective it was read from

    @property
    def lane_ms(self) -> float:
        """Its time on the comm lane: waiting for peers, then the transfer."""
        return self.wait_ms + self.dur_ms


@dataclass
class DdpPass:
    """One micro-batch's backward with its buckets, in launch order."""

    microbatch: int | None
    buckets: list[Xfer]
    backward_ms: float  # backward start to the last gradient ready
    ready_curve: list[tuple[float, float]]  # (gradient bytes ready, ms after backward start), rising
    origin_ns: int = 0  # the backward start on the trace clock
    cover: list[tuple[float, float, float]] = field(default_factory=list)
    """The measured compute around the comm: (start ms, end ms, fraction hidden) of each
    bucket's time on the comm lane, after the backward start (``_cover``)."""
    hidden_before_end: float = 1.0  # fraction hidden of the lane time before the backward's end, where unmeasured
    peer_lag_ms: float = 0.0
    """How much later than this rank its peers arrived at every bucket (the least over the
    pass's buckets: a peer late at each, as a straggler is): a new bucket's peers arrive
    this long after its gradients are ready. 0: at some bucket no peer was late."""
    grad_bytes: list[float] = field(default_factory=list)
    """Bytes of each gradient in the order they became ready, read from the trace's AccumulateGrad
    ranges (each measured bucket's bytes split evenly over the gradients that filled it); empty
    where the trace does not tell (GPU traces: the host's AccumulateGrad runs ahead of the device)."""

    @property
    def xfers(self) -> list[Xfer]:
        return self.buckets


@dataclass
class Unit:
    """One FSDP unit of a pass."""

    name: str
    bytes: float  # unsharded bytes of its parameters (the forward all-gather's buffer)
    forward_ms: float
    backward_ms: float
    gather: Xfer
    regather: Xfer | None  # backward all-gather (None: kept from forward)
    reduce: list[Xfer]  # reduce-scatter, then HSDP's all-reduce


@dataclass
class FsdpPass:
    """One micro-batch's forward and backward over FSDP units, in forward order."""

    microbatch: int | None
    units: list[Unit]
    forward_prefetch: bool
    backward_prefetch: bool

    @property
    def xfers(self) -> list[Xfer]:
        out = []
        for u in self.units:
            out += [u.gather] + ([u.regather] if u.regather else []) + u.reduce
        return out


@dataclass
class StepPlan:
    """One rank's step: its passes and the measured totals (ms)."""

    rank: int
    step: int
    step_ms: float
    compute_ms: float
    comm_ms: float
    exposed_ms: float
    optimizer_ms: float  # compute after the passes' last collective: neither tokens nor micro-batches scale it
    passes: list = field(default_factory=list)
    microbatches: int = 1  # micro-batches per optimizer step (the passes that reduce may be fewer: no_sync)
    blocking: bool = False  # the family's collectives block compute (measured fully exposed)
    reducer_ms: float = 0.0  # DDP's reducer ops in the step (collectives.sql's step_reducer): compute its passes
    #                          spend because they reduce, which a pass inside no_sync does not

    @property
    def xfers(self) -> list[Xfer]:
        return [x for p in self.passes for x in p.xfers]

    @property
    def pass_compute_ms(self) -> float:
        return max(0.0, self.compute_ms - self.optimizer_ms)

    def copy(self) -> "StepPlan":
        """A deep copy of the passes (the changes edit them)."""
        def copy_pass(p):
            if isinstance(p, DdpPass):
                return replace(p, buckets=[replace(x) for x in p.buckets], ready_curve=list(p.ready_curve),
                               cover=list(p.cover))
            return replace(p, units=[replace(u, gather=replace(u.gather),
                                             regather=replace(u.regather) if u.regather else None,
                                             reduce=[replace(x) for x in u.reduce]) for u in p.units])
        return replace(self, passes=[copy_pass(p) for p in self.passes])


class PlanRecord(msgspec.Struct, array_like=True):
    """A StepPlan as MessagePack holds it: its passes split by kind (msgspec decodes one
    dataclass per list), ``order`` "d" or "f" per pass in the plan's order."""

    plan: StepPlan  # its passes empty
    ddp: list[DdpPass]
    fsdp: list[FsdpPass]
    order: str


def _record(p: StepPlan) -> PlanRecord:
    ddp = [x for x in p.passes if isinstance(x, DdpPass)]
    fsdp = [x for x in p.passes if isinstance(x, FsdpPass)]
    order = "".join("d" if isinstance(x, DdpPass) else "f" for x in p.passes)
    bare = StepPlan(p.rank, p.step, p.step_ms, p.compute_ms, p.comm_ms, p.exposed_ms, p.optimizer_ms, [],
                    p.microbatches, p.blocking, p.reducer_ms)
    return PlanRecord(bare, ddp, fsdp, order)


def _step_plan(rec: PlanRecord) -> StepPlan:
    ddp, fsdp = iter(rec.ddp), iter(rec.fsdp)
    rec.plan.passes = [next(ddp) if k == "d" else next(fsdp) for k in rec.order]
    return rec.plan


_BLOCK = msgspec.msgpack.Decoder(list[PlanRecord])
XFERS_PER_BLOCK = 4_096  # collectives of the plans packed together: what a reader holds as objects at a time


class Plans(Sequence):
    """A run's measured plans, packed: MessagePack blocks of about ``XFERS_PER_BLOCK``
    collectives, each compressed (isal's deflate, level 1); read by iterating, a block at a
    time, each plan a fresh object. As objects a plan took about 1.2 KB a collective (89 MiB
    for a 64-rank DDP run of 73 thousand bucket all-reduces, measured): packed, 63 bytes,
    and a pass over them decodes at about 7 us a collective. The blocks are what the engine's
    stored state keeps (``predict.state``). ``append`` plans, then ``close``."""

    def __init__(self, blocks: list[bytes] | None = None, counts: list[int] | None = None):
        self.blocks, self.counts = list(blocks or []), list(counts or [])
        self._pending: list[StepPlan] = []
        self._pending_xfers = 0

    @classmethod
    def of(cls, plans) -> "Plans":
        """Plans packed from any sequence of ``StepPlan``."""
        out = cls()
        for p in plans:
            out.append(p)
        out.close()
        return out

    def append(self, plan: StepPlan) -> None:
        self._pending.append(plan)
        self._pending_xfers += sum(len(p.xfers) for p in plan.passes)
        if self._pending_xfers >= XFERS_PER_BLOCK:
            self.close()

    def close(self) -> None:
        """Pack the plans appended since the last block into one."""
        from isal import isal_zlib

        if self._pending:
            self.blocks.append(isal_zlib.compress(msgspec.msgpack.encode([_record(p) for p in self._pending]),
                                                  level=1))
            self.counts.append(len(self._pending))
        self._pending, self._pending_xfers = [], 0

    @staticmethod
    def _unpack(block: bytes) -> list[StepPlan]:
        from isal import isal_zlib

        return [_step_plan(r) for r in _BLOCK.decode(isal_zlib.decompress(block))]

    def __len__(self) -> int:
        return sum(self.counts) + len(self._pending)

    def __iter__(self):
        for block in self.blocks:
            yield from self._unpack(block)
        yield from list(self._pending)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        for block, count in zip(self.blocks, self.counts):
            if i < count:
                return self._unpack(block)[i]
            i -= count
        return self._pending[i]

    def check(self) -> None:
        """Inflate every block (its checksum): a damaged one raises ``isal_zlib.error`` here,
        not in the middle of a prediction."""
        from isal import isal_zlib

        for block in self.blocks:
            isal_zlib.decompress(block)


def _lane(r, lanes: Lanes) -> Lane:
    """The collective's lane piece (sql/lanes.sql); its whole span where none was measured."""
    lane = lanes.of(r)
    if lane is None:
        dur_ns = round(r.comm_ms * NS_PER_MS)
        return Lane(r.start_ns, dur_ns, dur_ns - round(r.exposed_ms * NS_PER_MS), 0)
    return lane


def _xfer(r, model, lanes: Lanes) -> Xfer:
    lane = _lane(r, lanes)
    link = "inter" if r.kind == "fsdp_unit" and r.phase == "allreduce" else "intra"
    # the peers arrived wait_ns into its span: the part of its lane piece before that is waiting
    wait_ns = min(lane.lane_ns, max(0, r.start_ns + lane.wait_ns - lane.lane_ts_ns))
    return Xfer(phase=r.phase, id=str(r.id), collective=r.collective or "", bytes=float(r.bytes or 0),
                group_size=int(r.group_size or 1), dur_ms=(lane.lane_ns - wait_ns) / NS_PER_MS,
                model_ms=model.model_ms(r.collective, r.bytes or 0, int(r.group_size or 1)) if r.collective else None,
                measured_ms=r.comm_ms, measured_exposed_ms=(lane.lane_ns - lane.hidden_ns) / NS_PER_MS, link=link,
                dtype_bytes=float(itemsize(r.dtype)) if r.dtype and itemsize(r.dtype) else None,
                wait_ms=wait_ns / NS_PER_MS, key=(r.rank, r.event_id), last_rank=lane.last_rank,
                lead_ms=min(wait_ns, lane.lead_ns) / NS_PER_MS)


def _ready_ns(r, device_kind: str) -> int:
    """When a bucket's gradients were ready (predict.exposure's rule)."""
    if device_kind == "gpu" and r.ready_ns is not None:
        return r.ready_ns
    return r.launch_ts_ns or r.start_ns


def _curve(buckets: list[Xfer]) -> list[tuple[float, float]]:
    """The gradients' ready curve in bucket (gradient) order: bucket i's bytes are ready by its ready time."""
    curve, held, latest = [(0.0, 0.0)], 0.0, 0.0
    for x in sorted(buckets, key=lambda x: int(x.id) if x.id.isdigit() else 0):
        held += x.bytes
        latest = max(latest, x.ready_ms)
        curve.append((held, latest))
    return curve


def _cover(buckets: list[Xfer], lane_start_ms: list[float], backward_ms: float) -> tuple[list, float]:
    """What the measured compute hid of each bucket's lane piece, where it was: the replay
    reads the compute of the trace from it, so an unchanged pass replays to its measured
    exposure and a changed one meets the compute that was there at that time. Each piece
    is split into its hidden part, then its exposed part (exact where compute stops once
    during a piece, as at the backward's end): a bucket moved earlier meets compute, one
    moved later not. Also the fraction hidden of the pieces before the backward's end, for
    lane time before it that no bucket measured."""
    cover, hidden, total = [], 0.0, 0.0
    for x, start in zip(buckets, lane_start_ms):
        end = start + x.lane_ms
        hidden_ms = max(0.0, x.lane_ms - (x.measured_exposed_ms or 0.0))
        cover += [(start, start + hidden_ms, 1.0), (start + hidden_ms, end, 0.0)]
        if end <= backward_ms:
            hidden += hidden_ms
            total += x.lane_ms
    return sorted(cover), (hidden / total if total > 0 else 1.0)


def _grad_curve(rows, grads: list[int], params: int, origin: int) -> tuple[list, list] | None:
    """The ready curve per gradient and each gradient's bytes, from the trace's AccumulateGrad
    starts (``grads``, ns, the step's): the pass's own are the ``params`` latest up to its last
    bucket's launch; a bucket is filled by those after the previous bucket's launch, up to its own
    (DDP launches a bucket in the hook of its last gradient), its bytes split evenly over them.
    None where some bucket gets no gradient (the trace and the buckets do not line up)."""
    launches = [r.launch_ts_ns or r.start_ns for r in rows]
    mine = [t for t in grads if t <= launches[-1]][-params:] if params > 0 else []
    if len(mine) < len(rows):
        return None
    curve, sizes, held, at, previous = [(0.0, 0.0)], [], 0.0, 0, None
    for r, launch in zip(rows, launches):
        filled = []
        while at < len(mine) and mine[at] <= launch:
            if previous is None or mine[at] > previous:
                filled.append(mine[at])
            at += 1
        if not filled:
            return None
        share = float(r.bytes or 0) / len(filled)
        for t in filled:
            held += share
            sizes.append(share)
            curve.append((held, max(curve[-1][1], (t - origin) / NS_PER_MS)))
        previous = launch
    return curve, sizes


def _ddp_pass(rows, model, device_kind: str, pass_compute_ms: float, lanes: Lanes,
              grads: list[int] | None = None, params: int = 0) -> DdpPass:
    rows = sorted(rows, key=lambda r: (r.launch_ts_ns or r.start_ns, r.event_id))
    ready = [_ready_ns(r, device_kind) for r in rows]
    last = max(ready)
    spread_ms = (last - min(ready)) / NS_PER_MS
    backward_ms = max(BACKWARD_SHARE * pass_compute_ms, spread_ms)
    origin = last - round(backward_ms * NS_PER_MS)  # int ns (floats of epoch ns lose 256 ns)
    buckets, starts, lane_free = [], [], 0.0
    for r, t in zip(rows, ready):
        x, lane = _xfer(r, model, lanes), _lane(r, lanes)
        start, ready_ms = (lane.lane_ts_ns - origin) / NS_PER_MS, (t - origin) / NS_PER_MS
        # the replay issues it at max(ready, lane free) + delay: the delay lands it where it was
        delay = max(0.0, start - max(ready_ms, lane_free))
        peer = start + x.wait_ms if x.wait_ms > 0 else None
        buckets.append(replace(x, ready_ms=ready_ms, delay_ms=delay, peer_ms=peer))
        starts.append(start)
        lane_free = max(lane_free, start + x.lane_ms)
    cover, hidden_before_end = _cover(buckets, starts, backward_ms)
    lag = min(x.peer_ms - x.ready_ms if x.peer_ms is not None else 0.0 for x in buckets)
    # on CPU traces the gradients' own ready times (AccumulateGrad), where they line up with the
    # buckets: a bucket what-if then splits a measured bucket where its gradients were ready
    traced = _grad_curve(rows, grads, params, origin) if device_kind == "cpu" and grads else None
    curve, sizes = traced if traced else (_curve(buckets), [])
    return DdpPass(rows[0].microbatch, buckets, backward_ms, curve, origin_ns=origin,
                   cover=cover, hidden_before_end=hidden_before_end, peer_lag_ms=max(0.0, lag), grad_bytes=sizes)


def _fsdp_pass(rows, model, device_kind: str, forward_ms: float, backward_ms: float,
               lanes: Lanes) -> FsdpPass | None:
    rows = sorted(rows, key=lambda r: (r.launch_ts_ns or r.start_ns, r.event_id))
    by_phase = {(str(r.id), r.phase): r for r in rows}
    order = [str(r.id) for r in rows if r.phase == "forward_allgather"]
    if not order:
        return None
    total = sum(float(by_phase[(u, "forward_allgather")].bytes or 0) for u in order) or 1.0
    units = []
    for u in order:
        g = by_phase[(u, "forward_allgather")]
        share = float(g.bytes or 0) / total
        back = by_phase.get((u, "backward_allgather"))
        units.append(Unit(u, float(g.bytes or 0), forward_ms * share, backward_ms * share, _xfer(g, model, lanes),
                          _xfer(back, model, lanes) if back else None,
                          [_xfer(by_phase[(u, p)], model, lanes) for p in REDUCE_PHASES if (u, p) in by_phase]))
    return FsdpPass(rows[0].microbatch, units, forward_prefetch=device_kind == "gpu", backward_prefetch=True)


def _fsdp_windows(rows) -> tuple[float, float]:
    """Measured forward and backward compute (ms) of one pass (predict.exposure's windows):
    from its first collective's launch to its first backward one, and from there to its
    last backward one."""
    back = [r.compute_before_ns for r in rows if r.phase in ("backward_allgather",) + REDUCE_PHASES]
    if not back:
        return 0.0, 0.0
    first = min(r.compute_before_ns for r in rows)
    return (min(back) - first) / NS_PER_MS, (max(back) - min(back)) / NS_PER_MS


def blocking_families(rows) -> dict[str, bool]:
    """Per family (ddp_bucket, fsdp_unit): whether its collectives block compute, read from
    the measurement: exposed for BLOCKING_EXPOSED of their time or more (FSDP over gloo on
    CPU waits for each collective at once; on GPUs they run beside the compute)."""
    comm, exposed = defaultdict(float), defaultdict(float)
    last: dict[tuple, object] = {}  # the last-launched DDP bucket of each pass
    for r in rows:
        if r.kind == "ddp_bucket":
            key = (r.rank, r.step, r.microbatch)
            if key not in last or (r.launch_ts_ns or r.start_ns) >= (last[key].launch_ts_ns or last[key].start_ns):
                last[key] = r
    lasts = {(r.rank, r.event_id) for r in last.values()}  # by key: a run's rows may be views made as read
    for r in rows:
        # a pass's last bucket starts when the backward has no compute left: exposed whether or not
        # collectives block compute, so it says nothing about it (a run of one bucket per pass:
        # no evidence, not blocking)
        if (r.rank, r.event_id) in lasts:
            continue
        comm[r.kind] += r.comm_ms
        exposed[r.kind] += r.exposed_ms
    return {k: comm[k] > 0 and exposed[k] / comm[k] >= BLOCKING_EXPOSED for k in comm}


def _passes(rows, kind: str, device_kind: str, lanes: Lanes, model, pass_ms: float,
            grads: list[int] | None = None, params: int = 0) -> list:
    """The passes of one step: one per micro-batch with collectives of the step's family."""
    by_mb: dict = defaultdict(list)
    for r in rows:
        if r.kind == kind:
            by_mb[r.microbatch].append(r)
    out = []
    for mb in sorted(by_mb, key=lambda m: (m is None, m)):
        if kind == "ddp_bucket":
            out.append(_ddp_pass(by_mb[mb], model, device_kind, pass_ms, lanes, grads, params))
        else:
            p = _fsdp_pass(by_mb[mb], model, device_kind, *_fsdp_windows(by_mb[mb]), lanes)
            if p:
                out.append(p)
    return out


def plans(info, collectives, steps: list[dict], lanes: Lanes, model, forwards: dict | None = None,
          reducer: dict | None = None, grads: dict | None = None) -> Plans:
    """One StepPlan per (rank, step) that has DDP buckets or FSDP units: ``collectives`` the
    run's measured collectives, ``steps`` its measured steps (analyze's rows), ``lanes`` each
    collective's piece of the comm lane (measure.waits.lanes), ``model`` its comm model,
    ``forwards`` the model's forward ranges per (rank, step): micro-batches where nothing else says;
    ``reducer`` DDP's reducer ops per (rank, step), ms; ``grads`` when each gradient was ready per
    (rank, step), ns (the step's backward passes run one AccumulateGrad per parameter each).
    Packed as built (``Plans``), in the steps' order."""
    forwards, reducer, grads = forwards or {}, reducer or {}, grads or {}
    table = table_of(collectives)
    blocking = blocking_families(table)
    rank = table.numpy("rank")
    # a block of whole ranks' rows at a time, and the steps of those ranks (steps in rank
    # order; else one block): the rows of a step held as views are a block's, not the run's
    in_order = all(a["rank"] <= b["rank"] for a, b in zip(steps, steps[1:]))
    blocks = rank_blocks(rank) if in_order else [(0, len(table))]
    out, at = Plans(), 0
    for k, (start, stop) in enumerate(blocks):
        by_step: dict[tuple, list] = defaultdict(list)
        for r in table[start:stop]:
            if r.step is not None and r.kind in ("ddp_bucket", "fsdp_unit") and r.collective:
                by_step[(r.rank, r.step)].append(r)
        last = k == len(blocks) - 1
        while at < len(steps) and (last or steps[at]["rank"] <= rank[stop - 1]):
            s, at = steps[at], at + 1
            plan = _plan(s, by_step.get((s["rank"], s["step"])), info, lanes, model, blocking, forwards, reducer,
                         grads)
            if plan is not None:
                out.append(plan)
    out.close()
    return out


def _plan(s: dict, rows: list | None, info, lanes: Lanes, model, blocking: dict, forwards: dict, reducer: dict,
          grads: dict) -> StepPlan | None:
    """The plan of measured step ``s`` from its DDP bucket and FSDP unit ``rows`` (None: none)."""
    if not rows:
        return None
    after = [r.compute_after_ns for r in rows if r.compute_after_ns is not None]
    optimizer_ms = min(min(after) / NS_PER_MS if after else 0.0, s["compute_ms"])
    kind = max(("ddp_bucket", "fsdp_unit"), key=lambda k: sum(r.kind == k for r in rows))
    # a pass's compute: the measured compute of the passes shared by the micro-batches
    microbatches = max(len({r.microbatch for r in rows}), int(info.manifest.accumulation_steps or 1),
                       forwards.get((s["rank"], s["step"]), 1))
    pass_ms = max(0.0, s["compute_ms"] - optimizer_ms) / microbatches
    ready = grads.get((s["rank"], s["step"]), [])
    passes = _passes(rows, kind, info.device_kind, lanes, model, pass_ms, ready,
                     round(len(ready) / microbatches))
    if not passes:
        return None
    return StepPlan(s["rank"], s["step"], s["step_ms"], s["compute_ms"], s["comm_ms"], s["exposed_comm_ms"],
                    optimizer_ms, passes, microbatches, blocking.get(kind, False),
                    reducer.get((s["rank"], s["step"]), 0.0))

