"""The changes of a what-if, applied to a measured StepPlan (a new plan; the input is kept).

In the order they compose: the structure first (micro-batches and sync, DDP buckets,
FSDP wrapping, resharding, prefetch), then the compute (tokens), then the collectives'
times (HSDP groups, world size, bandwidth, reduce dtype). A collective that a change
keeps takes its measured transfer x model(changed) / model(measured); one that a change
creates takes the model's time x the level of the collectives it replaces (whatif.comm).
At a bandwidth the user gives in bytes/s (``--bandwidth W``, ``--intra-bandwidth``,
``--inter-bandwidth``) a collective takes the model's time at that W, latency + wire / W,
without the run's level: the user's W is the link's, not this run's. Waits for peers
are carried as measured (whatif.plan). A collective a change creates waits by the least
its measured counterparts waited: a peer late at every one of them (a straggler)
stays late, waits that come and go between collectives (skew, contention) are not
carried to collectives nobody measured. A new DDP bucket's peers arrive that long
after its gradients are ready (``DdpPass.peer_lag_ms``); a new FSDP collective waits
as long as the least of its phase; HSDP's new all-reduce across groups waits for none.
``notes`` collects one line per change that does not apply to the run, and why.
"""

from __future__ import annotations

import re
from bisect import bisect_left

from overlapscope.analyzer.predict.changes import BUCKET_DEFAULT, REDUCE_DTYPES, Changes
from overlapscope.analyzer.predict.plan import REDUCE_PHASES, DdpPass, FsdpPass, StepPlan, Unit, Xfer, replace

MIB = 1024 * 1024
# DDP's bucket_cap_mb when none is given: its first bucket is then 1 MiB. A cap that is set makes
# no small first bucket (torch 2.x: bucket_bytes_cap_default; 2.13: unset gives 1.06 + 3.23 MB,
# bucket_cap_mb=25 one 4.29 MB bucket), so a what-if's cap, which the user sets, has none.
DDP_DEFAULT_BUCKET_MB = 25
DDP_FIRST_BUCKET_BYTES = 1 * MIB
NO_REDUCE = "a micro-batch that no longer reduces (no_sync) skips DDP's reducer ops, as long as the measured ones"
NO_LATENCY = "each timed with no per-collective latency"  # the note of an unpriced rebucketing (checklist.gains)
SHARED_CORES = ("CPU-only run: gloo's comm shares the cores with the compute, so a micro-batch that no longer reduces "
                "also computes faster by the comm time its measured pass hid")
_BLOCK = re.compile(r"^(.*?\.\d+)\.")  # the first repeated-module prefix of a parameter: blocks.3.


def _level(xfers: list[Xfer]) -> float:
    """Measured / model time of the collectives a change replaces (1 when unknown): their
    transfers on the lane, not their spans, which overlap where gloo runs several at once
    and would count the shared time twice, and without their waits for peers."""
    measured = sum(x.dur_ms for x in xfers if x.model_ms and x.measured_ms is not None)
    modelled = sum(x.model_ms for x in xfers if x.model_ms and x.measured_ms is not None)
    return measured / modelled if measured > 0 and modelled > 0 else 1.0


def _wait(xfers: list[Xfer]) -> float:
    """The wait for peers that every measured collective among ``xfers`` had: the least (ms)."""
    waits = [x.wait_ms for x in xfers if x.measured_ms is not None]
    return min(waits) if waits else 0.0


def _new(model, phase: str, id_: str, collective: str, nbytes: float, group: int, level: float,
         link: str = "intra", **kw) -> Xfer:
    terms = model.terms(collective, nbytes, group)
    t = terms.model_ms if terms else 0.0
    return Xfer(phase=phase, id=id_, collective=collective, bytes=nbytes, group_size=group, dur_ms=t * level,
                model_ms=t, link=link, terms=terms, **kw)


# --- the late rank on time -----------------------------------------------------------


def _on_time(plan: StepPlan, late: int | None) -> StepPlan:
    """Rank ``late`` arrives at each collective when the latest other rank does. Where it was
    the last to arrive, the wait it alone caused (``lead_ms``) goes; and since collectives
    run in issue order, its lateness also held up the arrivals at the collectives queued
    behind (everyone's next collective starts after this one): those waits shrink by the
    largest lead so far in the pass. The waits for the other ranks beyond that stay."""
    if late is None:
        return plan
    for p in plan.passes:
        shift = 0.0
        for x in p.xfers:
            if x.last_rank == late:
                shift = max(shift, x.lead_ms)
            cut = min(x.wait_ms, shift)
            if cut > 0:
                x.wait_ms -= cut
                x.peer_ms = x.peer_ms - cut if x.peer_ms is not None and x.wait_ms > 0 else None
            x.lead_ms = 0.0
        if isinstance(p, DdpPass):
            p.peer_lag_ms = max(0.0, min((x.peer_ms - x.ready_ms if x.peer_ms is not None else 0.0)
                                         for x in p.buckets)) if p.buckets else 0.0
    return plan


# --- micro-batches and sync ---------------------------------------------------------


def _clone(p):
    """A copy of a pass with its own collectives (a pass may be repeated)."""
    return StepPlan(0, 0, 0, 0, 0, 0, 0, passes=[p]).copy().passes[0]


def _hidden_ms(xfers: list[Xfer]) -> float:
    """The lane time of collectives that the compute beside them hid (ms), as measured."""
    return sum(max(0.0, x.lane_ms - (x.measured_exposed_ms if x.measured_exposed_ms is not None else x.lane_ms))
               for x in xfers)


def _reductions(p) -> list[Xfer]:
    """A pass's gradient reductions: what a micro-batch inside no_sync skips."""
    return list(p.buckets) if isinstance(p, DdpPass) else [x for u in p.units for x in u.reduce]


def _without_reduce(p):
    """The pass as a micro-batch inside no_sync: no gradient reduction (a copy)."""
    p = _clone(p)
    if isinstance(p, DdpPass):
        return replace(p, buckets=[])
    return replace(p, units=[replace(u, reduce=[]) for u in p.units])


def _reducing(p, template):
    """The pass as a micro-batch that reduces (a copy): as measured, or, where it was measured
    inside no_sync (an FSDP pass gathers either way), with the last pass's reductions."""
    q = _clone(p)
    if not isinstance(q, FsdpPass) or any(u.reduce for u in q.units):
        return q
    reduce = {u.name: u.reduce for u in template.units}
    return replace(q, units=[replace(u, reduce=[replace(x) for x in reduce.get(u.name, [])]) for u in q.units])


def _accumulate(plan: StepPlan, c: Changes, a, notes: list[str]) -> StepPlan:
    if c.accum is None and c.sync is None:
        return plan
    m = plan.microbatches
    target = c.accum or m
    if c.sync is not None:
        sync = c.sync
    else:  # as measured: no_sync when the run used it or reduced in fewer passes than micro-batches
        sync = not (a.info.manifest.no_sync or len(plan.passes) < m)
    template = plan.passes[-1]  # the last micro-batch always reduces
    reducing = [p for p in plan.passes if p.xfers]
    passes = []
    for i in range(target):
        last = i == target - 1
        # each micro-batch from its own measured pass where the run had one (the last one's beyond):
        # its gathers and their waits as timed, so that one pass's slow gathers or late peer are not
        # copied into every other micro-batch's (FSDP under --no-sync read a loss so, -25.8 ms)
        source = template if last or i >= len(reducing) - 1 else reducing[i]
        passes.append(_reducing(source, template) if sync or last else _without_reduce(source))
    compute = plan.optimizer_ms + plan.pass_compute_ms * target / m
    # the passes' compute, scaled to the micro-batches, holds the measured passes' share of what
    # reducing costs the compute: DDP's reducer ops and, on a CPU run, the reductions' time that
    # it hid (gloo's comm shares the cores, so what it hid was paid in compute: SHARED_CORES).
    # Each pass that reduces now pays one share: fewer than measured save it, more pay it (a run
    # measured inside no_sync saves nothing under --no-sync: it read 5 % faster so before)
    reduced = [x for x in map(_reductions, plan.passes) if x]
    if reduced:
        hidden_ms = sum(_hidden_ms(x) for x in reduced) if a.device_kind == "cpu" else 0.0
        share_ms = (plan.reducer_ms + hidden_ms) / len(reduced)
        now = sum(1 for p in passes if _reductions(p))
        compute = max(plan.optimizer_ms, compute + (now - len(reduced) * target / m) * share_ms)
    # passes without collectives replay to nothing: keep only those with some
    passes = [p for p in passes if p.xfers]
    if target == 1 and c.sync is not None:
        notes.append("--sync/--no-sync: one micro-batch per step, nothing to accumulate")
    return replace(plan, passes=passes, compute_ms=compute, microbatches=target)


# --- DDP buckets ----------------------------------------------------------------------


def param_sizes(a) -> list[float] | None:
    """Gradient bytes of each parameter in the order their gradients become ready (the
    manifest's buckets in index order); a bucket without ``param_bytes`` is split evenly
    over its parameters. None without a manifest's buckets."""
    buckets = sorted(a.info.manifest.buckets, key=lambda b: b.index)
    if not buckets:
        return None
    sizes = []
    for b in buckets:
        if b.param_bytes:
            sizes += [float(v) for v in b.param_bytes]
        else:
            n = max(1, len(b.param_names))
            sizes += [float(b.bytes or 0) / n] * n
    return sizes


def bucket_assignment(sizes: list[float], cap_mb: float | None) -> list[float]:
    """The bucket sizes DDP's rebuild makes (``compute_bucket_assignment_by_size``): gradients
    in ready order, a bucket closed at the first one that brings it to its limit. ``cap_mb``
    None: the cap left unset (DDP's default 25 MiB, its first bucket 1 MiB); a cap that is set
    is every bucket's limit, the first one's too."""
    if cap_mb is None:
        limits = [DDP_FIRST_BUCKET_BYTES, DDP_DEFAULT_BUCKET_MB * MIB]
    else:
        limits = [cap_mb * MIB]
    out, held = [], 0.0
    for s in sizes:
        held += s
        if held >= limits[min(len(out), len(limits) - 1)]:
            out.append(held)
            held = 0.0
    if held > 0:
        out.append(held)
    return out


def _ready_at(curve: list[tuple[float, float]], held: float) -> float:
    """When ``held`` bytes of gradients are ready: the pass's ready curve, linear between points."""
    xs = [b for b, _ in curve]
    i = bisect_left(xs, held)
    if i <= 0:
        return curve[0][1]
    if i >= len(curve):
        return curve[-1][1]
    (b0, t0), (b1, t1) = curve[i - 1], curve[i]
    return t0 if b1 == b0 else t0 + (t1 - t0) * (held - b0) / (b1 - b0)


def _rebucket(plan: StepPlan, c: Changes, a, model, notes: list[str]) -> StepPlan:
    if c.bucket_mb is None:
        return plan
    if not any(isinstance(p, DdpPass) for p in plan.passes):
        notes.append("--bucket-mb: not a DDP run (no buckets to rebuild)")
        return plan
    sizes = param_sizes(a)
    traced = next((p.grad_bytes for p in reversed(plan.passes) if isinstance(p, DdpPass) and p.grad_bytes), None)
    if sizes is None and traced:  # no manifest: the gradients the trace's AccumulateGrad ranges show
        sizes = list(traced)
        notes.append(f"--bucket-mb: no manifest with the parameters' sizes: {len(sizes)} gradients read from the "
                     f"trace's AccumulateGrad ranges, each measured bucket's bytes split evenly over its gradients")
    elif sizes is None:  # no manifest: the measured buckets are the finest grain known
        sizes = [x.bytes for x in sorted(plan.passes[-1].buckets, key=lambda x: int(x.id) if x.id.isdigit() else 0)]
        notes.append("--bucket-mb: no manifest with the parameters' sizes: buckets rebuilt from the measured ones")
    elif not all(b.param_bytes for b in a.info.manifest.buckets):
        notes.append("--bucket-mb: the manifest has no param_bytes (a tracer before 0.7): each bucket's bytes "
                     "split evenly over its parameters")
    new_sizes = bucket_assignment(sizes, None if c.bucket_mb == BUCKET_DEFAULT else c.bucket_mb)
    passes = []
    for p in plan.passes:
        if not isinstance(p, DdpPass) or not p.buckets:
            passes.append(p)
            continue
        level = _level(p.buckets)
        first = p.buckets[0]
        scale = (sum(x.bytes for x in p.buckets) / sum(new_sizes)) if sum(new_sizes) else 1.0
        measured = [x.bytes for x in sorted(p.buckets, key=lambda x: int(x.id) if x.id.isdigit() else 0)]
        if len(measured) == len(new_sizes) and all(abs(m - n * scale) <= 0.01 * m for m, n in zip(measured, new_sizes)):
            passes.append(p)  # the cap gives the measured buckets: they stay as measured
            continue
        buckets, held = [], 0.0
        for i, size in enumerate(new_sizes):
            size *= scale  # the manifest's bytes against the trace's (equal when both are there)
            held += size
            ready = _ready_at(p.ready_curve, held)
            buckets.append(_new(model, "allreduce", str(i), first.collective, size, first.group_size, level,
                                ready_ms=ready, dtype_bytes=first.dtype_bytes,
                                peer_ms=ready + p.peer_lag_ms if p.peer_lag_ms > 0 else None))
        passes.append(replace(p, buckets=buckets))
        if len(buckets) > len(p.buckets):
            _note_no_latency(model, first.collective, len(p.buckets), notes)
    return replace(plan, passes=passes)


def _note_no_latency(model, kind: str, measured: int, notes: list[str]) -> None:
    """More buckets than measured, timed with no latency term because none could be fitted (a
    run whose collectives of the kind are all of one size, and no calibration): each new bucket
    costs only its bytes, so smaller caps look better than they are. Measured on 2-rank gloo (48 x
    Linear(128, 128)): a 0.05 MB cap predicted 16-18 % faster than the 25 MB run it was
    replayed from, and measured 1.7-3.4x slower (30 ms of comm per step against 4.6)."""
    fit = model.fits.get(kind)
    if fit is not None and fit.fitted:
        return
    notes.append(f"--bucket-mb: more buckets per pass than the run's {measured}, {NO_LATENCY} (no calibration, and "
                 f"this run's {kind} collectives fit none: one size, or times that do not grow with it): smaller buckets "
                 "are predicted optimistic; a capture with the tracer's calibration, or a run at another cap, fits one")


# --- FSDP units -------------------------------------------------------------------------


def _per_block_groups(a) -> list[tuple[str, float]] | None:
    """(unit name, unsharded bytes) per block and the root ("") from the manifest's
    parameters, in forward order (root first, then blocks by index); None without sizes."""
    groups: dict[str, float] = {}
    for u in a.info.manifest.units:
        if not u.param_bytes or len(u.param_bytes) != len(u.param_names):
            return None
        for name, size in zip(u.param_names, u.param_bytes):
            m = _BLOCK.match(name)
            key = m.group(1) if m else ""
            groups[key] = groups.get(key, 0.0) + float(size)
    if not groups:
        return None

    def order(key: str):
        if key == "":
            return (0, "", 0)
        prefix, _, index = key.rpartition(".")
        return (1, prefix, int(index))
    return [(k, groups[k]) for k in sorted(groups, key=order)]


def _unit(model, name: str, nbytes: float, fwd: float, bwd: float, like: Unit, levels: dict, regather: bool) -> Unit:
    g = like.gather
    level, wait = levels["gather"]
    gather = _new(model, "forward_allgather", name, g.collective, nbytes, g.group_size, level,
                  dtype_bytes=g.dtype_bytes, wait_ms=wait)
    back = _new(model, "backward_allgather", name, g.collective, nbytes, g.group_size, level,
                dtype_bytes=g.dtype_bytes, wait_ms=wait) if regather else None
    ratio = nbytes / like.bytes if like.bytes else 1.0
    reduce = [_new(model, x.phase, name, x.collective, x.bytes * ratio, x.group_size, levels[x.phase][0],
                   link=x.link, dtype_bytes=x.dtype_bytes, wait_ms=levels[x.phase][1]) for x in like.reduce]
    return Unit(name, nbytes, fwd, bwd, gather, back, reduce)


def _levels(p: FsdpPass) -> dict[str, tuple[float, float]]:
    """Per family of the pass's collectives (gathers, each reduce phase): (level, mean wait ms)."""
    gathers = [u.gather for u in p.units] + [u.regather for u in p.units if u.regather]
    out = {"gather": (_level(gathers), _wait(gathers))}
    for phase in REDUCE_PHASES:
        xfers = [x for u in p.units for x in u.reduce if x.phase == phase]
        out[phase] = (_level(xfers), _wait(xfers))
    return out


def _rewrap(plan: StepPlan, c: Changes, a, model, notes: list[str]) -> StepPlan:
    if c.wrap is None:
        return plan
    passes = []
    for p in plan.passes:
        if not isinstance(p, FsdpPass):
            notes.append("--wrap: not an FSDP run")
            return plan
        levels = _levels(p)
        template = max(p.units, key=lambda u: u.bytes)
        fwd, bwd = sum(u.forward_ms for u in p.units), sum(u.backward_ms for u in p.units)
        total = sum(u.bytes for u in p.units) or 1.0
        if c.wrap == "root-only":
            if len(p.units) == 1:
                passes.append(p)
                continue
            # FSDP2 keeps the root's weights from forward to backward: one gather, one reduce
            passes.append(replace(p, units=[_unit(model, "", total, fwd, bwd, template, levels, regather=False)]))
        else:
            groups = _per_block_groups(a)
            if groups is None:
                notes.append("--wrap per-block: the manifest has no param_bytes per unit (a tracer before 0.7): "
                             "cannot tell the blocks apart")
                return plan
            if len(groups) == len(p.units):
                passes.append(p)
                continue
            scale = total / (sum(b for _, b in groups) or 1.0)
            reshard = c.reshard_after_forward if c.reshard_after_forward is not None else True
            units = [_unit(model, name, b * scale, fwd * b / sum(x for _, x in groups),
                           bwd * b / sum(x for _, x in groups), template, levels, regather=bool(name) and reshard)
                     for name, b in groups]
            passes.append(replace(p, units=units))
    return replace(plan, passes=passes)


def _reshard(plan: StepPlan, c: Changes, model, notes: list[str]) -> StepPlan:
    if c.reshard_after_forward is None and c.forward_prefetch is None and c.backward_prefetch is None:
        return plan
    if not any(isinstance(p, FsdpPass) for p in plan.passes):
        notes.append("--reshard-after-forward/--forward-prefetch/--backward-prefetch: not an FSDP run")
        return plan
    passes = []
    for p in plan.passes:
        units = p.units
        if c.reshard_after_forward is False:
            units = [replace(u, regather=None) for u in units]
        elif c.reshard_after_forward is True:
            level, wait = _levels(p)["gather"]
            units = [u if u.regather or not u.name else
                     replace(u, regather=_new(model, "backward_allgather", u.name, u.gather.collective, u.bytes,
                                              u.gather.group_size, level, dtype_bytes=u.gather.dtype_bytes,
                                              wait_ms=wait))
                     for u in units]
        passes.append(replace(p, units=units,
                              forward_prefetch=p.forward_prefetch if c.forward_prefetch is None else c.forward_prefetch,
                              backward_prefetch=p.backward_prefetch if c.backward_prefetch is None
                              else c.backward_prefetch))
    if plan.blocking and (c.forward_prefetch is not None or c.backward_prefetch is not None):
        notes.append("prefetch: this run's FSDP collectives block compute (measured fully exposed): prefetch "
                     "cannot hide them here")
    return replace(plan, passes=passes)


# --- compute ----------------------------------------------------------------------------


def _tokens(plan: StepPlan, c: Changes, a, notes: list[str]) -> StepPlan:
    if c.tokens is None:
        return plan
    measured = a.tokens
    if c.tokens.ratio:  # Nx needs no count of the run's tokens
        k = c.tokens.value
    elif measured:
        k = c.tokens.value / measured
    else:
        notes.append("--tokens: the run's tokens per micro-batch are unknown (no manifest): give --tokens Nx")
        return plan
    passes = []
    for p in plan.passes:
        if isinstance(p, DdpPass):
            # a peer's lateness is its own (a sleep, a slower host): its arrival moves with the
            # gradients' ready time, by as much as they were late
            def later(x: Xfer) -> Xfer:
                return replace(x, ready_ms=x.ready_ms * k,
                               peer_ms=None if x.peer_ms is None else x.peer_ms + x.ready_ms * (k - 1))
            passes.append(replace(p, backward_ms=p.backward_ms * k, buckets=[later(x) for x in p.buckets],
                                  ready_curve=[(b, t * k) for b, t in p.ready_curve],
                                  cover=[(t0 * k, t1 * k, f) for t0, t1, f in p.cover]))
        else:
            passes.append(replace(p, units=[replace(u, forward_ms=u.forward_ms * k, backward_ms=u.backward_ms * k)
                                            for u in p.units]))
    return replace(plan, passes=passes, compute_ms=plan.optimizer_ms + (plan.compute_ms - plan.optimizer_ms) * k)


# --- the collectives' times --------------------------------------------------------------


def _retime(x: Xfer, model, nbytes: float, group: int, w_scale: float, w_abs: float | None) -> Xfer:
    """x at other bytes, group or W: its transfer x model(changed) / model(measured); at a W
    given in bytes/s (``w_abs``), the model's time at that W (no level from the run)."""
    after = model.terms(x.collective, nbytes, group, w_scale, w_abs)
    before = model.terms(x.collective, x.bytes, x.group_size) if w_abs is None else None
    if after is None or (w_abs is None and before is None):
        return replace(x, bytes=nbytes, group_size=group)
    if w_abs is not None:
        dur = after.model_ms
    else:
        dur = x.dur_ms * (after.model_ms / before.model_ms if before.model_ms > 0 else 1.0)
    return replace(x, bytes=nbytes, group_size=group, dur_ms=dur, model_ms=after.model_ms, terms=after)


def _world(a) -> int:
    return int(a.info.world_size or 1)


def _groups(plan: StepPlan, c: Changes, a, model, notes: list[str]) -> StepPlan:
    """HSDP groups, world size, bandwidth and reduce dtype: the collectives' bytes, groups and W."""
    if c.hsdp is None and c.gpus is None and c.bandwidth is None and c.reduce_dtype is None:
        return plan
    shape = a.info.manifest.hsdp_shape  # (replicate, shard) of an HSDP run
    world = c.gpus or _world(a)
    shard = c.hsdp or (shape[1] if shape else world)
    replicas = max(1, world // shard)
    if c.hsdp and world % c.hsdp:
        notes.append(f"--hsdp {c.hsdp}: does not divide the world size {world}; ignored")
        shard, replicas = (shape[1], max(1, world // shape[1])) if shape else (world, 1)
    ratio_w = c.bandwidth.value if c.bandwidth and c.bandwidth.ratio else 1.0
    abs_w = c.bandwidth.value if c.bandwidth and not c.bandwidth.ratio else None
    new_itemsize = REDUCE_DTYPES[c.reduce_dtype] if c.reduce_dtype else None
    if c.hsdp and plan.passes and isinstance(plan.passes[0], DdpPass):
        notes.append("--hsdp: a DDP run has nothing to shard (use --gpus for the world size)")

    def w_of(x: Xfer) -> float | None:
        if c.hsdp and x.link == "inter" and c.inter_bandwidth:
            return c.inter_bandwidth
        if c.hsdp and x.link == "intra" and c.intra_bandwidth:
            return c.intra_bandwidth
        return abs_w

    def dtype_ratio(x: Xfer) -> float:
        if new_itemsize is None or x.phase not in REDUCE_PHASES:
            return 1.0
        old = x.dtype_bytes or REDUCE_DTYPES.get(str(a.info.manifest.reduce_dtype or "").lower().replace("torch.", ""))
        return new_itemsize / old if old else 1.0

    def retimed(x: Xfer, group: int, nbytes: float | None = None) -> Xfer:
        return _retime(x, model, (x.bytes if nbytes is None else nbytes) * dtype_ratio(x), group, ratio_w, w_of(x))

    passes = []
    for p in plan.passes:
        if isinstance(p, DdpPass):
            passes.append(replace(p, buckets=[retimed(x, world) for x in p.buckets]))
            continue
        units = []
        for u in p.units:
            gather = retimed(u.gather, shard)
            regather = retimed(u.regather, shard) if u.regather else None
            reduce = []
            for x in u.reduce:
                if x.phase == "reduce_scatter":
                    reduce.append(retimed(x, shard))
            rs = next((x for x in u.reduce if x.phase == "reduce_scatter"), None)
            ar = next((x for x in u.reduce if x.phase == "allreduce"), None)
            if replicas > 1 and rs is not None:
                shard_bytes = rs.bytes / shard
                if ar is not None:  # HSDP already: the all-reduce of the shard across the replicas
                    reduce.append(retimed(ar, replicas, shard_bytes))
                else:  # a new link: no level of the run's (intra-group) collectives carries to it
                    new = _new(model, "allreduce", u.name, "all_reduce", shard_bytes * dtype_ratio(rs), replicas,
                               1.0, link="inter", dtype_bytes=rs.dtype_bytes)
                    reduce.append(_retime(new, model, new.bytes, replicas, ratio_w, w_of(new)))
                    if reduce[-1].terms is None:
                        notes.append("--hsdp: no all-reduce in the calibration or the trace to time the one across "
                                     "groups: give --inter-bandwidth")
            units.append(replace(u, gather=gather, regather=regather, reduce=reduce))
        passes.append(replace(p, units=units))
    if c.hsdp and not c.inter_bandwidth:
        notes.append("--hsdp without --inter-bandwidth: the all-reduce across groups at the calibrated W "
                     "(on one node that is the intra-node link; give the network's)")
    return replace(plan, passes=passes)


def apply(plan: StepPlan, c: Changes, a, model, notes: list[str], late: int | None = None) -> StepPlan:
    """``plan`` under the changes ``c`` (a new plan); ``late``: the rank ``c.on_time`` puts on
    time, resolved over the run (whatif.late_rank)."""
    if c.is_empty():
        return plan
    changed = plan.copy()
    changed = _on_time(changed, late)
    changed = _accumulate(changed, c, a, notes)
    changed = _rebucket(changed, c, a, model, notes)
    changed = _rewrap(changed, c, a, model, notes)
    changed = _reshard(changed, c, model, notes)
    changed = _tokens(changed, c, a, notes)
    return _groups(changed, c, a, model, notes)


def assumptions(blocking: bool, c: Changes, cpu: bool = False) -> list[str]:
    """What the prediction takes as given, in words (the ``assumptions`` of whatif --json);
    ``blocking``: some replayed plan's collectives block compute (``StepPlan.blocking``)."""
    out = ["compute of the passes, the optimizer's compute and the step's other time (host gaps, waits outside "
           "the replayed collectives) as measured, unless a change scales them",
           "one comm lane: collectives run one at a time in issue order, not slowed by compute"]
    if blocking:
        out.append("the run's collectives block compute (measured at least 90% exposed, a pass's last bucket "
                   "aside): replayed fully exposed")
    if c.tokens is not None:
        out.append("compute of the forward and backward passes proportional to tokens; the optimizer's not")
    if c.accum is not None or c.sync is not None:
        out.append("each micro-batch replays its own measured pass (its collectives and their waits as timed; "
                   "micro-batches beyond the measured ones the last one's); a pass measured inside no_sync that "
                   "reduces takes the last pass's reductions")
        out.append(NO_REDUCE)
        if cpu:
            out.append(SHARED_CORES)
    if c.bucket_mb is not None:
        out.append("gradients become ready when the trace's AccumulateGrad ranges say (CPU traces), else in bucket "
                   "order at the rate the measured buckets show, linear between their ready times")
        out.append("bucket_cap_mb left unset: DDP's 25 MiB with a 1 MiB first bucket" if c.bucket_mb == BUCKET_DEFAULT
                   else "bucket_cap_mb set: every bucket up to the cap, the first one too (DDP makes its 1 MiB first "
                        "bucket only with the cap unset: --bucket-mb default)")
    if c.wrap is not None:
        out.append("a unit's compute in proportion to its bytes")
    if c.on_time is not None:
        out.append("the rank on time arrives at each replayed collective with the latest other rank: the others wait "
                   "only for each other; the run's predicted figures are the other ranks' (waits outside the "
                   "replayed collectives as measured)")
    return out
