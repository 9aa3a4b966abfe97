"""Checklist rules about communication: does it hide, how fast is it, in what precision,
and the communication that belongs to no bucket or unit."""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import (AGGREGATION, exposed_transfer, fmt_bytes, fmt_ms, headline_figure,
                                                      per_step, steps_of, transfer, worst_owners)
from overlapscope.analyzer.checklist.findings import Result, grade, na, rule, t
from overlapscope.analyzer.checklist.setup import join, only_for, pick
from overlapscope.analyzer.measure.collectives import (NULL_INT, Selection, first_met_groups, median, selection,
                                                       text_test)
from overlapscope.analyzer.measure.rates import BANDWIDTH_MIN_BYTES
from overlapscope.analyzer.predict.plan import BLOCKING_EXPOSED, blocking_families
from overlapscope.analyzer.units import NS_PER_MS

_VERDICT_STATUS = {"exposed": "fail", "marginal": "warn", "hidden": "pass"}
_BACKWARD = {"backward_allgather", "reduce_scatter", "allreduce"}
_GLOO = "On gloo (CPU) W is TCP over the host's network; for GPU training the figures of NCCL on the GPUs count."


def _tokens_fix(ctx: CheckContext) -> str:
    raise_t = "Raise the tokens per GPU per micro-batch (micro-batch size or sequence length) above F/W."
    return join(raise_t, pick(
        ctx.setup,
        ddp="Or reduce gradients in bf16 (ddp.register_comm_hook(None, bf16_compress_hook)) to halve the bytes; "
            "or get faster links.",
        fsdp="Or shard within the node (HSDP) so the gathers and reduce-scatters run on faster links; gather "
             "in bf16 (param_dtype=torch.bfloat16); or get faster links.",
        hsdp="Or tune the shard group size G: kept inside one NVLink domain (the GPUs of one node) the gathers "
             "and reduce-scatters use the fast links, and the larger G, the smaller the gradient shard each rank "
             "all-reduces across the replicas; reduce in bf16 to halve those bytes; or get faster links.",
        default="Or get faster links."), pick(ctx.setup, gloo=_GLOO, default=""))


@rule("tokens_below_fw", "Tokens per micro-batch below F/W",
      "Raise the tokens per GPU per micro-batch (micro-batch size or sequence length) above F/W; "
      "or shard within the node (HSDP) so the gathers run on faster links; or get faster links.")
def tokens_below_fw(ctx: CheckContext) -> Result:
    models = [m for m in ctx.model if m["verdict"]]
    if not models:
        return na(ctx.model[0]["reason"] if ctx.model else "no steps in the trace", _tokens_fix(ctx))
    m = models[0]
    per = "per micro-batch (ZeRO-3 gathers repeat in every micro-batch)" if m["stage"] == "zero3" else "per step"
    w = f"W = {m['bus_bandwidth_bytes_per_s'] / 1e9:.3g} GB/s"
    gpus, what = f"{m['gpus']} GPUs", f"the {m['stage']} communication"
    if m["stage"] == "zero3":
        w = f"W = {m['bus_bandwidth_bytes_per_s'] / 1e9:.3g} GB/s (all-gather)"
        if m.get("reduce_bus_bandwidth_bytes_per_s"):
            w += f", {m['reduce_bus_bandwidth_bytes_per_s'] / 1e9:.3g} GB/s (reduce-scatter)"
        if m.get("replicas"):  # HSDP: the replica all-reduce is part of the backward's comm
            w += f", {m['replicate_bus_bandwidth_bytes_per_s'] / 1e9:.3g} GB/s (replica all-reduce)"
            gpus = f"shard groups of {m['gpus']} GPUs x {m['replicas']} replicas"
            what = "the HSDP communication (zero3 in the shard group, the gradient shard's all-reduce across replicas)"
        w += f" ({ctx.sources['bandwidth_source']}), {m['weight_bytes']:.0f}-byte weights"
    else:
        kind = ctx.sources.get("bandwidth_kind")
        w += f" ({(kind.replace('_', '-') + ', ') if kind else ''}{ctx.sources['bandwidth_source']})"
    evidence = (f"T = {m['tokens']:.0f} tokens {per}; F = {m['flops_per_s'] / 1e12:.3g} TFLOP/s "
                f"({ctx.sources['flops_source']}), {w}, {gpus}, {m['grad_bytes']:.0f}-byte gradients "
                f"-> {m['tokens_to_hide']:.0f} tokens hide {what} "
                f"(comm/compute {m['comm_to_compute_ratio']:.2f})")
    return Result(_VERDICT_STATUS[m["verdict"]], evidence, fix=_tokens_fix(ctx),
                  details={"tokens": m["tokens"], "tokens_to_hide": m["tokens_to_hide"]})


def _prefetch_fix(ctx: CheckContext) -> str:
    return only_for(ctx.setup, "fsdp", join(pick(ctx.setup,
                     fsdp2="Prefetch the next unit's all-gather during the current unit's forward: "
                           "module.set_modules_to_forward_prefetch([next]).",
                     fsdp1="Prefetch the next unit's all-gather: FullyShardedDataParallel(..., forward_prefetch=True).",
                     default="Prefetch the next unit's all-gather during the current unit's forward: "
                             "set_modules_to_forward_prefetch([next]) (FSDP2) or forward_prefetch=True (FSDP1)."),
                pick(ctx.setup,
                     gpu="Remove device-to-host syncs (.item(), prints) that stop the CPU from running ahead.",
                     cpu="On CPU (gloo) the gathers run on gloo's threads, which need free cores to run beside "
                         "compute (torch.set_num_threads below the cores per rank).")))


def _blocking_fix(ctx: CheckContext) -> str:
    return only_for(ctx.setup, "fsdp", pick(ctx.setup,
                    cpu="On CPU (gloo) FSDP waits for each collective where it issues it, so neither prefetch nor "
                        "free cores hide the gathers: fewer, larger units (fewer waits) and fewer ranks per host help "
                        "here; judge overlap on the GPU run's trace, where the gathers run on their own stream.",
                    default="FSDP waits for each collective where it issues it: look for a synchronizing call in the "
                            "unshard path (a custom hook, a .item() on the gathered weights) and remove it; fewer, "
                            "larger units wait fewer times."))


def _comm_bound_fix(ctx: CheckContext) -> str:
    return only_for(ctx.setup, "fsdp", join("The gathers take longer than the compute of the unit they hide behind:",
                "raise the tokens per GPU per micro-batch above F/W (micro-batch size or sequence length);",
                pick(ctx.setup,
                     hsdp="shrink the shard group to the GPUs of one NVLink domain so gathers use faster links;",
                     default="shard within the node (HSDP) so gathers use faster links;"),
                "gather in bf16 (param_dtype=torch.bfloat16) if the weights are gathered in fp32; or get faster "
                "links."))


@rule("exposed_forward_allgather", "Forward all-gathers not hidden",
      "Prefetch the next unit's all-gather during the current unit's forward: "
      "module.set_modules_to_forward_prefetch([next]) (FSDP2) or forward_prefetch=True (FSDP1); "
      "remove device-to-host syncs (.item(), prints) that stop the CPU from running ahead.")
def exposed_forward_allgather(ctx: CheckContext) -> Result:
    rows = [r for r in ctx.rows if r.kind == "fsdp_unit" and r.phase == "forward_allgather"]
    if not rows:
        return na("no FSDP forward all-gathers in the trace", _prefetch_fix(ctx))
    # The step's first gather cannot overlap anything: leave it out.
    groups = per_step(rows)
    later = [r for g in groups.values() for r in sorted(g, key=lambda r: r.offset_ms or 0)[1:]]
    if not later:
        return Result("pass", "one forward all-gather per step (one unit)", fix=_prefetch_fix(ctx))
    exposed = headline_figure(ctx.steps, later)
    moving = headline_figure(ctx.steps, later, value=transfer)
    hidden_share = 1 - exposed.ms / moving.ms if moving.ms else 1.0
    hidden_ms = max(0.0, moving.ms - exposed.ms)
    per_step_ms, share = exposed.ms, exposed.share
    status = grade(share, "exposed_fail", "exposed_warn")
    evidence = (f"{fmt_ms(per_step_ms)} per step of forward all-gathers exposed after the first unit "
                f"({100 * (1 - hidden_share):.0f}% of their {fmt_ms(moving.ms)} of transfer, "
                f"{100 * share:.1f}% of the step; {AGGREGATION}, waiting for late peers is the straggler rule's); "
                f"most exposed: {worst_owners(later)}")
    # Prefetch works when the gathers hide behind the compute that could hide them: each later
    # gather behind the previous unit's forward compute. A comm-bound forward hides little of each
    # long gather, yet keeps that compute busy hiding; a gather issued only after the previous
    # unit's compute hides next to nothing.
    room_ms = _forward_room_ms(ctx, exposed.rank)
    can_hide = min(moving.ms, room_ms) if room_ms else None
    issued_ahead = (hidden_ms >= t("forward_gather_hidden") * can_hide if can_hide
                    else hidden_share >= t("forward_gather_hidden"))
    if not issued_ahead and status != "pass" and ctx.device_kind == "cpu" and \
            blocking_families(ctx.rows).get("fsdp_unit"):
        # the run's FSDP collectives block compute (FSDP over gloo on CPU holds its all_gather range for
        # the whole transfer; on GPUs the launch returns at once): no prefetch can hide a gather there
        evidence += (f": {fmt_ms(hidden_ms)} hidden; this run's FSDP collectives block compute (at least "
                     f"{100 * BLOCKING_EXPOSED:.0f}% of their time exposed): FSDP waits for each gather where it is "
                     f"issued, so prefetch cannot hide it here")
        return Result(status, evidence, impact_ms=per_step_ms, fix=_blocking_fix(ctx))
    if not issued_ahead:
        if status != "pass":
            evidence += (f": {fmt_ms(hidden_ms)} hidden of the {fmt_ms(can_hide)} the previous units' forward "
                         f"compute could hide, prefetch is not working" if can_hide
                         else ": under half hidden, prefetch is not working")
        return Result(status, evidence, impact_ms=per_step_ms, fix=_prefetch_fix(ctx))
    if status != "pass":
        # prefetch works (the gathers hide behind the compute there is) and still the step waits: comm-bound
        evidence += (f": prefetch works ({fmt_ms(hidden_ms)} hidden"
                     + (f" of the {fmt_ms(can_hide)} the previous units' forward compute could hide" if can_hide
                        else f", {100 * hidden_share:.0f}%")
                     + f"; {100 * hidden_share:.0f}% hidden), but the gathers take longer than the compute they "
                       f"hide behind (comm-bound forward)")
    return Result(status, evidence, impact_ms=per_step_ms, fix=_comm_bound_fix(ctx))


def _forward_room_ms(ctx: CheckContext, rank: int | None) -> float | None:
    """The forward compute per step that can hide the gathers after the first: each unit's
    forward compute but the last's (the forward from the first gather's launch to the first
    backward collective's, split evenly over the units; plan._fsdp_windows' measure), the
    median over the steps of ``rank`` (the headline's slowest); None where the rows do not tell."""
    by_pass: dict[tuple, list] = defaultdict(list)
    for r in ctx.rows:
        if r.kind == "fsdp_unit" and r.compute_before_ns is not None:
            by_pass[(r.rank, r.step, r.microbatch)].append(r)
    per_step: dict[tuple, float] = defaultdict(float)
    for (owner, step, _), rows in by_pass.items():
        gathers = [r for r in rows if r.phase == "forward_allgather"]
        back = [r.compute_before_ns for r in rows if r.phase != "forward_allgather"]
        if len(gathers) < 2 or not back:
            continue
        forward_ms = (min(back) - min(r.compute_before_ns for r in gathers)) / NS_PER_MS
        per_step[(owner, step)] += max(0.0, forward_ms) * (len(gathers) - 1) / len(gathers)
    mine = [ms for (r, _), ms in per_step.items() if rank is None or r == rank] or list(per_step.values())
    return statistics.median(mine) if mine else None


def _backward_fix(ctx: CheckContext) -> str:
    return join(pick(
        ctx.setup,
        ddp_nccl="Let the backward hide its all-reduces: smaller first buckets (first_bucket_bytes_cap), "
                 "static_graph=True, and a high-priority NCCL stream (TORCH_NCCL_HIGH_PRIORITY=1).",
        ddp="Let the backward hide its all-reduces: smaller first buckets (first_bucket_bytes_cap) and "
            "static_graph=True.",
        fsdp2="Keep backward prefetch on (set_modules_to_backward_prefetch for more than one unit ahead) and give "
              "reduce-scatters their own process group if they queue behind all-gathers.",
        fsdp1="Keep backward prefetch on (backward_prefetch=BackwardPrefetch.BACKWARD_PRE) and give "
              "reduce-scatters their own process group if they queue behind all-gathers.",
        default="Keep backward prefetch on (FSDP) or use smaller first buckets and static_graph=True (DDP)."),
        pick(ctx.setup, nccl="Unset CUDA_DEVICE_MAX_CONNECTIONS=1 if set: it serializes NCCL kernels behind compute.",
             gloo="gloo runs collectives on its own CPU threads: leave them cores (torch.set_num_threads below "
                  "the cores per rank).", default=""))


@rule("exposed_backward_comm", "Backward communication exposed beyond the last collective",
      "Let the backward hide its communication: for FSDP keep backward prefetch on and give "
      "reduce-scatters their own process group if they queue behind all-gathers; for DDP use "
      "smaller buckets early (first_bucket_bytes_cap), static_graph=True, and a high-priority NCCL "
      "stream (TORCH_NCCL_HIGH_PRIORITY=1).")
def exposed_backward_comm(ctx: CheckContext) -> Result:
    rows = [r for r in ctx.rows if r.kind in ("fsdp_unit", "ddp_bucket") and r.phase in _BACKWARD]
    if not rows:
        return na("no backward collectives of buckets or units", _backward_fix(ctx))
    beyond = []
    for g in per_step(rows).values():
        last = max(g, key=lambda r: (r.offset_ms or 0) + r.comm_ms)  # the unavoidable tail
        beyond += [r for r in g if r is not last]
    exposed = headline_figure(ctx.steps, beyond)
    evidence = (f"{fmt_ms(exposed.ms)} per step of backward comm exposed besides the last collective "
                f"({100 * exposed.share:.1f}% of the step; {AGGREGATION}, waiting for late peers is the straggler rule's); "
                f"most exposed: {worst_owners(beyond)}")
    return Result(grade(exposed.share, "exposed_fail", "exposed_warn"), evidence, impact_ms=exposed.ms,
                  fix=_backward_fix(ctx))


def _bandwidth_fix(ctx: CheckContext) -> str:
    return pick(ctx.setup,
                nccl="Check the transport NCCL picked (NCCL_DEBUG=INFO: IB/RoCE vs sockets, NVLS), NIC and GPU "
                     "affinity, and contention from other jobs; compare with nccl-tests on the same nodes.",
                gloo="gloo runs over TCP: check that GLOO_SOCKET_IFNAME names the fastest interface, that gloo's "
                     "threads get free cores, and contention from other processes; on GPUs use NCCL.",
                default="Check the transport the backend uses, the network interface and contention from other "
                        "jobs; compare with a collective benchmark on the same nodes.")


@rule("low_bus_bandwidth", "Bus bandwidth far below the calibration",
      "Check the transport NCCL picked (NCCL_DEBUG=INFO: IB/RoCE vs sockets, NVLS), NIC and GPU "
      "affinity, and contention from other jobs; compare with nccl-tests on the same nodes.")
def low_bus_bandwidth(ctx: CheckContext) -> Result:
    """Each collective kind against its own calibration (kinds differ: on gloo by 4x)."""
    fix = _bandwidth_fix(ctx)
    by_kind = ctx.sources.get("bus_bandwidth_by_kind") or {}
    measured = {k: v["trace_bytes_per_s"] for k, v in by_kind.items() if v["trace_bytes_per_s"]}
    small = {k: v for k, v in by_kind.items() if v.get("latency_bound")}
    # a kind whose collectives are all small is latency-bound: its bus bandwidth is the
    # per-message latency's, not the links', and says nothing about the network
    latency_bound = "; ".join(
        f"{k}: at most {fmt_bytes(v['largest_bytes'])}, {v['latency_bound_bytes_per_s'] / 1e9:.3g} GB/s"
        for k, v in sorted(small.items())) + (
        f" (under {BANDWIDTH_MIN_BYTES >> 20} MiB a collective is latency-bound: its bus bandwidth measures the "
        f"per-message latency, not the links; see {pick(ctx.setup, ddp='ddp_bucket_size', fsdp='unit_size', default='ddp_bucket_size and unit_size')})"
        if small else "")
    if not measured:
        if small:
            return na(f"no collective large enough to measure the links: {latency_bound}", fix)
        return na("no sized collectives to measure bus bandwidth on (no sizes in the kernels' args or in the "
                  "launch ranges' Input Dims)", fix)
    overall = ctx.sources["bus_bandwidth_bytes_per_s_calibration"]
    pairs = {k: (w, by_kind[k]["calibration_bytes_per_s"]) for k, w in measured.items()}
    against = "the calibration of the same kind" + (" and group" if ctx.setup.parallelism == "hsdp" else "")
    if not any(c for _, c in pairs.values()) and overall:
        # an older calibration without per-kind figures: its one W for every kind, said so
        pairs = {k: (w, overall) for k, w in measured.items()}
        against = "the calibration's one W over every kind (it has no per-kind figures)"
    compared = {k: (w, c, w / c) for k, (w, c) in pairs.items() if c}
    if not compared:
        listed = ", ".join(f"{k} {w / 1e9:.3g} GB/s" for k, w in sorted(measured.items()))
        return na(f"measured {listed} on the large collectives; no calibration of these kinds to compare with "
                  f"(run the tracer with calibration on)", fix)
    worst = min(compared, key=lambda k: compared[k][2])
    ratio = compared[worst][2]
    parts = "; ".join(f"{k}: {w / 1e9:.3g} GB/s, {100 * r:.0f}% of the {c / 1e9:.3g} GB/s calibrated"
                      for k, (w, c, r) in sorted(compared.items()))
    uncompared = sorted(set(measured) - set(compared))
    evidence = (f"large collectives' bus bandwidth per kind against {against}: {parts}"
                + (f" (no calibration for {', '.join(uncompared)})" if uncompared else "")
                + (f"; not judged, latency-bound: {latency_bound}" if small else ""))
    return Result(grade(ratio, "busbw_fail", "busbw_warn", lower_is_worse=True), evidence, fix=fix,
                  details={"ratio": ratio, "kind": worst})


_FP32 = ("float", "float32")
_HALF = ("bfloat16", "half", "float16", "c10::bfloat16")


def _fp32_fix(ctx: CheckContext) -> str:
    return pick(ctx.setup,
                ddp="Reduce gradients in bf16 where numerics allow: ddp.register_comm_hook(None, bf16_compress_hook).",
                fsdp2="Reduce gradients in bf16 where numerics allow: "
                      "fully_shard(..., mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)).",
                fsdp1="Reduce gradients in bf16 where numerics allow: "
                      "FullyShardedDataParallel(..., mixed_precision=MixedPrecision(reduce_dtype=torch.bfloat16)).",
                default="Reduce gradients in bf16 where numerics allow: MixedPrecisionPolicy(reduce_dtype="
                        "torch.bfloat16) for FSDP2, a bf16 compress hook for DDP.")


@rule("fp32_reduction", "Gradients reduced in fp32 (twice the bytes)",
      "Reduce gradients in bf16 where numerics allow: MixedPrecisionPolicy(reduce_dtype=torch.bfloat16) "
      "for FSDP2, a bf16 compress hook for DDP (ddp.register_comm_hook(None, bf16_compress_hook)).")
def fp32_reduction(ctx: CheckContext) -> Result:
    import numpy as np

    fix = _fp32_fix(ctx)
    # on the columns: every collective of a data-parallel run is a reduction or a gather
    rows = selection(ctx.rows)
    texts = rows.texts
    phase, dtype = rows.numpy("phase"), rows.numpy("dtype")
    typed = text_test(texts, bool, dtype)
    reduce_rows = rows.where(text_test(texts, lambda p: p in ("reduce_scatter", "allreduce"), phase) & typed)
    if not reduce_rows:
        return na("no gradient reductions with a dtype in the trace", fix)
    dtypes = sorted({str(texts[c]) for c in np.unique(reduce_rows.numpy("dtype")).tolist()})
    fp32 = [d for d in dtypes if d.lower() in _FP32]
    gathering = text_test(texts, lambda x: (x or "").endswith("allgather"), phase) & typed
    gathers = sorted({str(texts[c]) for c in np.unique(dtype[gathering]).tolist()})
    param = (ctx.manifest.param_dtype or "").replace("torch.", "")
    if not fp32:
        return Result("pass", f"gradients reduced in {', '.join(dtypes)}", fix=fix)
    nbytes = reduce_rows.numpy("bytes")
    nbytes = int(nbytes.sum(where=nbytes != NULL_INT)) / (steps_of(reduce_rows) or 1)  # a null: none
    low_precision = any(d.lower() in _HALF for d in gathers) or param in ("bfloat16", "float16")
    evidence = (f"reductions in {', '.join(dtypes)} ({nbytes / 1e6:.3g} MB per step and rank)"
                + (f" while parameters are gathered in {', '.join(gathers)}" if gathers else "")
                + (f"; param_dtype {param}" if param else ""))
    if low_precision:
        return Result("fail", evidence + ": twice the bytes of a bf16 reduction", fix=fix)
    return Result("warn", evidence + ": training is fp32 throughout; a bf16 reduction would halve these bytes",
                  fix=fix)


# What each kind of "other" communication usually is, and what to look at.
_OTHER_HINTS = {
    "all_to_all": "all-to-all: an embedding exchange (DLRM's sharded embeddings, MoE token dispatch): overlap it "
                  "with dense compute (pipelined embedding lookups), shrink it (lower-precision embeddings, fewer "
                  "tokens per expert) or balance the splits across ranks",
    "send_recv": "send/recv: pipeline-parallel activations; their exposed time is the pipeline bubble: more "
                 "micro-batches per step or an interleaved schedule",
    "broadcast": "broadcast: DDP re-sends its buffers every forward with broadcast_buffers=True (set it False if "
                 "the buffers need no sync); a parameter broadcast belongs at start-up, not in the step",
    "all_reduce": "all-reduces outside the buckets: a loss, metric or gradient-norm all-reduce per step: log "
                  "every N steps, batch scalars into one tensor, avoid .item() right after it",
    "all_gather": "all-gathers outside FSDP units: metrics or data gathered every step: do it every N steps",
    "reduce_scatter": "reduce-scatters outside FSDP units: a custom sharded optimizer or ZeRO-1/2: overlap it "
                      "with the backward",
    "barrier": "barriers in the step: remove them; each waits for the slowest rank",
}
_OTHER_DEFAULT = "collectives outside buckets and units: see what launches them on the Timeline"


def _other_kinds(rows: Selection) -> tuple[list[str], object]:
    """The kinds of other communication among ``rows`` (a row's collective, else its phase),
    in the order first met, and each row's kind as an index into them (NumPy)."""
    import numpy as np

    texts = rows.texts
    collective, phase = rows.numpy("collective"), rows.numpy("phase")
    firsts, group = first_met_groups([collective, phase])  # (collective, phase) pairs as first met
    kinds: dict[str, int] = {}
    of_group = [kinds.setdefault(texts[collective[i]] or texts[phase[i]] or "unknown", len(kinds)) for i in firsts]
    return list(kinds), np.array(of_group, np.int32)[group]  # int32: a row's kind is one of a few


def _known_sizes(nbytes):
    """The sizes of a bytes column neither null (NULL_INT, below any size) nor 0, sorted: one
    sorted copy and a view of it, where a copy of the known ones and then their sorted copy took
    two (16.5 MB each for a 1,024-rank run's other collectives)."""
    import numpy as np

    ordered = np.sort(nbytes)
    low = np.searchsorted(ordered, NULL_INT, side="right")  # past the nulls
    first_zero, past_zero = np.searchsorted(ordered, 0, side="left"), np.searchsorted(ordered, 0, side="right")
    if first_zero == low:  # no size below 0 (none ever is): the known sizes are the ones above 0
        return ordered[past_zero:]
    return np.concatenate([ordered[low:first_zero], ordered[past_zero:]])


@rule("other_comm", "Other communication: all-to-all, send/recv, broadcast, all-reduces outside buckets",
      "Look at what launches the collectives that belong to no DDP bucket or FSDP unit: embedding exchanges "
      "(all-to-all), pipeline bubbles (send/recv), buffer broadcasts, metric all-reduces.")
def other_comm(ctx: CheckContext) -> Result:
    import numpy as np

    # on the columns: a run of other collectives only (an all-reduce benchmark) has millions
    rows = selection(ctx.rows)
    rows = rows.where(rows.numpy("kind") == rows.code("other"))
    in_steps = rows.where(rows.numpy("step") != NULL_INT)
    owners = pick(ctx.setup, ddp="DDP buckets", fsdp="FSDP units", default="DDP buckets and FSDP units")
    nothing = f"Nothing to do: the step's communication belongs to the {owners}."
    if not rows:
        return Result("pass", f"no communication outside the {owners}", fix=nothing)
    if not in_steps or not ctx.steps:
        kinds = ", ".join(sorted(_other_kinds(rows)[0]))
        return Result("pass", f"{len(rows)} collectives outside the {owners} ({kinds}), none inside a "
                              f"profiled step", fix=nothing)
    names, kind_of = _other_kinds(in_steps)
    by_kind = {k: in_steps.where(kind_of == i) for i, k in enumerate(names)}
    del kind_of
    figures = {k: headline_figure(ctx.steps, v) for k, v in by_kind.items()}
    exposed = {k: f.ms for k, f in figures.items()}
    count = {k: headline_figure(ctx.steps, v, value=lambda r: 1.0).ms for k, v in by_kind.items()}
    order = sorted(by_kind, key=lambda k: -exposed[k])
    parts = []
    for k in order:
        v = by_kind[k]
        sizes = _known_sizes(v.numpy("bytes"))
        size_text = f", median {fmt_bytes(median(sizes))}" if len(sizes) else ", sizes unknown"
        del sizes
        moving = headline_figure(ctx.steps, v, value=transfer).ms
        waiting = headline_figure(ctx.steps, v, value=lambda r: r.exposed_wait_ms or 0.0).ms
        parts.append(f"{k}: {count[k]:.3g} per step"
                     + size_text
                     + f", {fmt_ms(moving)} transfer, {fmt_ms(exposed[k])} exposed per step "
                     f"({100 * figures[k].share:.1f}% of the step)"
                     + (f", besides {fmt_ms(waiting)} exposed waiting for peers (see straggler)" if waiting else ""))
    total = sum(exposed.values())
    share = sum(f.share for f in figures.values())
    outside = len(rows) - len(in_steps)
    evidence = (f"outside the {owners} ({AGGREGATION}): " + "; ".join(parts)
                + (f" ({outside} more outside the profiled steps)" if outside else ""))
    fix = "Look at: " + "; ".join(_OTHER_HINTS.get(k, _OTHER_DEFAULT) for k in order) + "."
    return Result(grade(share, "exposed_fail", "exposed_warn"), evidence, impact_ms=total, fix=fix,
                  details={"kinds": [{"collective": k, "per_step": round(count[k], 4),
                                      "exposed_ms": round(exposed[k], 6)} for k in order]})
