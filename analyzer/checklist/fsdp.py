"""Checklist rules about FSDP units: wrapping, unit size, resharding, HSDP."""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import fmt_bytes, fmt_ms, headline_figure, per_step
from overlapscope.analyzer.checklist.findings import Result, fail_or_warn, na, rule, t
from overlapscope.analyzer.checklist.setup import only_for, pick
from overlapscope.analyzer.measure.collectives import Collective


def _units(ctx: CheckContext) -> list[Collective]:
    return [r for r in ctx.rows if r.kind == "fsdp_unit"]


def _unit_bytes(ctx: CheckContext) -> dict[str, float]:
    """Unsharded bytes per unit: the manifest's, else the forward all-gather's output."""
    if ctx.manifest.units:
        return {u.name: u.bytes for u in ctx.manifest.units}
    sizes: dict[str, list[int]] = defaultdict(list)
    for r in _units(ctx):
        if r.phase == "forward_allgather" and r.bytes:
            sizes[r.id].append(r.bytes)
    return {k: statistics.median(v) for k, v in sizes.items()}


def _wrap_fix(ctx: CheckContext) -> str:
    return only_for(ctx.setup, "fsdp", pick(ctx.setup,
                fsdp2="fully_shard each transformer block first, then the root (one unit per block).",
                fsdp1="Wrap each transformer block: FullyShardedDataParallel(model, auto_wrap_policy="
                      "ModuleWrapPolicy({Block})) (one unit per block).",
                default="Shard each transformer block as its own unit, then the root: fully_shard per block "
                        "(FSDP2) or auto_wrap_policy=ModuleWrapPolicy({Block}) (FSDP1)."))


def _unit_names(ctx: CheckContext) -> set[str]:
    """The run's units: the manifest's, else the ids of the forward all-gathers."""
    if ctx.manifest.units:
        return {u.name for u in ctx.manifest.units}
    return {r.id for r in _units(ctx) if r.phase == "forward_allgather"}


@rule("root_only_wrap", "FSDP wraps only the root",
      "fully_shard each transformer block first, then the root (one unit per block).")
def root_only_wrap(ctx: CheckContext) -> Result:
    fix = _wrap_fix(ctx)
    if ctx.stage != "zero3":
        return na("not an FSDP run", fix)
    names = _unit_names(ctx)
    if not names:
        return na("no units: no manifest units and no forward all-gathers in the trace", fix)
    if len(names) == 1:
        name = next(iter(names))
        nbytes = _unit_bytes(ctx).get(name)
        size = f", {fmt_bytes(nbytes)}" if nbytes else ""
        return Result("fail", f"one unit ({name or '<root>'}{size}): the whole model is gathered at "
                              f"once and no all-gather overlaps compute", fix=fix)
    return Result("pass", f"{len(names)} units", fix=fix)


@rule("unit_size", "Unit size: latency-bound small units or one oversized unit",
      "Wrap at the granularity of a transformer block: group tiny modules into one fully_shard call "
      "(latency-bound collectives), split oversized units so their gathers overlap and fewer full "
      "weights sit in memory at once.")
def unit_size(ctx: CheckContext) -> Result:
    fix = pick(ctx.setup,
               fsdp2="Wrap at the granularity of a transformer block: group tiny modules into one fully_shard call "
                     "(latency-bound collectives), split oversized units so their gathers overlap and fewer full "
                     "weights sit in memory at once.",
               fsdp1="Wrap at the granularity of a transformer block (auto_wrap_policy=ModuleWrapPolicy({Block})): "
                     "no tiny units (latency-bound collectives), no oversized ones.",
               default="Wrap at the granularity of a transformer block: no tiny units (latency-bound "
                       "collectives), no oversized ones.")
    fix = only_for(ctx.setup, "fsdp", fix)
    rows = _units(ctx)
    if not rows:
        return na("no FSDP units (DDP buckets: see ddp_bucket_size)", fix)
    if not _unit_bytes(ctx):
        return na(f"{len(_unit_names(ctx))} units but no unit sizes (no manifest units, no sizes on the forward "
                  f"all-gathers)", fix)
    # the largest collectives' bus bandwidth: W, or where they are all latency-bound their own figure
    w = ctx.sources["bus_bandwidth_bytes_per_s_trace"] or ctx.sources.get("latency_bound_bytes_per_s")
    slow = [r for r in rows if r.busbw_gbps is not None and w and r.busbw_gbps * 1e9 < t("latency_busbw") * w]
    steps = len(per_step(rows)) or 1
    slow_per_step = len(slow) / steps
    sizes = _unit_bytes(ctx)
    total = sum(sizes.values()) or 1
    biggest = max(sizes, key=sizes.get)
    share = sizes[biggest] / total
    evidence = (f"{len(sizes)} units, {fmt_bytes(min(sizes.values()))} to {fmt_bytes(max(sizes.values()))}; "
                f"{slow_per_step:.1f} collectives per step below {100 * t('latency_busbw'):.0f}% of the large ones' "
                f"bus bandwidth; largest unit {biggest or '<root>'} holds {100 * share:.0f}% of the bytes")
    if slow_per_step >= t("latency_count"):
        exposed = headline_figure(ctx.steps, slow)
        status = fail_or_warn(exposed.share, "exposed_fail")
        return Result(status, evidence + ": many latency-bound collectives", impact_ms=exposed.ms, fix=fix)
    if len(sizes) > 2 and share >= t("large_share"):
        return Result("warn", evidence + ": one unit dominates", fix=fix)
    return Result("pass", evidence, fix=fix)


def _device_memory(ctx: CheckContext) -> float | None:
    return ctx.analysis.info.device_memory_bytes()[0]


def _keep_gathered(ctx: CheckContext) -> str:
    return only_for(ctx.setup, "fsdp", pick(ctx.setup,
                fsdp2="Set reshard_after_forward=False on the units whose backward all-gather is exposed (the last "
                      "units first): one all-gather fewer per unit and step, at the cost of keeping them gathered.",
                fsdp1="Use sharding_strategy=ShardingStrategy.SHARD_GRAD_OP (no reshard after forward): one "
                      "all-gather fewer per unit and step, at the cost of keeping the weights gathered.",
                default="Keep the units gathered between forward and backward (FSDP2 reshard_after_forward=False, "
                        "FSDP1 SHARD_GRAD_OP): one all-gather fewer per unit and step."))


def _reshard(ctx: CheckContext) -> str:
    return only_for(ctx.setup, "fsdp", pick(ctx.setup,
                fsdp2="Set reshard_after_forward=True (or an int, the intra-node size) to free the gathered weights.",
                fsdp1="Use sharding_strategy=ShardingStrategy.FULL_SHARD to free the gathered weights after forward.",
                default="Reshard after forward (FSDP2 reshard_after_forward=True, FSDP1 FULL_SHARD) to free the "
                        "gathered weights."))


@rule("reshard_after_forward", "Resharding after forward against the memory headroom", "Nothing to do.")
def reshard_after_forward(ctx: CheckContext) -> Result:
    rows = _units(ctx)
    if not rows:
        return na("not an FSDP run", only_for(ctx.setup, "fsdp", _keep_gathered(ctx)))
    peaks = [m["peak_allocated_bytes"] for m in ctx.memory if m["peak_allocated_bytes"]]
    device = _device_memory(ctx)
    back = [r for r in rows if r.phase == "backward_allgather"]
    back_comm = headline_figure(ctx.steps, back, value=lambda r: r.comm_ms).ms
    back_exposed = headline_figure(ctx.steps, back)
    if not peaks or not device:
        missing = "memory events (profile_memory=True records them)" if not peaks else "the device memory"
        return na(f"no {missing} in the trace", "Profile with profile_memory=True to judge the headroom.")
    peak = max(peaks)
    full = sum(_unit_bytes(ctx).values())
    if back:
        evidence = (f"peak {fmt_bytes(peak)} of {fmt_bytes(device)}; keeping all {fmt_bytes(full)} of unsharded "
                    f"weights would reach {fmt_bytes(peak + full)}; backward all-gathers take {fmt_ms(back_comm)} "
                    f"per step, {fmt_ms(back_exposed.ms)} exposed")
        if peak + full <= t("memory_headroom") * device and back_exposed.ms > 0:
            status = fail_or_warn(back_exposed.share, "exposed_fail")
            return Result(status, evidence + ": the headroom allows it", impact_ms=back_exposed.ms,
                          fix=_keep_gathered(ctx))
        return Result("pass", evidence, fix=_keep_gathered(ctx))
    evidence = f"no backward all-gathers (reshard_after_forward=False); peak {fmt_bytes(peak)} of {fmt_bytes(device)}"
    if peak >= t("memory_pressure") * device:
        return Result("warn", evidence + ": under memory pressure", fix=_reshard(ctx))
    return Result("pass", evidence, fix=_reshard(ctx))


def _tune_shard_group(ctx: CheckContext) -> str:
    """An HSDP run needs no HSDP advice: what to tune is the shard group size G."""
    shape = ctx.manifest.hsdp_shape
    now = f" (now {shape[0]} replicas x G = {shape[1]})" if shape else ""
    mesh = pick(ctx.setup, fsdp2="init_device_mesh(..., (replicas, G))",
                fsdp1="HYBRID_SHARD's device_mesh=init_device_mesh(..., (replicas, G))",
                default="the 2-D mesh (replicas, G)")
    return (f"Already HSDP: tune the shard group size G{now}, the last dimension of {mesh}. Keep each shard group "
            f"inside one NVLink domain (the GPUs of one node) so its gathers and reduce-scatters never cross the "
            f"network; within that, a larger G saves memory ((4+K)Ψ/G of model states) and shrinks the replica "
            f"all-reduce (each rank all-reduces its Ψ/G gradient shard across the N/G replicas), a smaller G "
            f"keeps gathers on fewer, faster links. If the replica all-reduce is exposed at the end of backward, "
            f"reduce gradients in bf16.")


def _hsdp_fix(ctx: CheckContext) -> str:
    if ctx.setup.parallelism == "hsdp":
        return _tune_shard_group(ctx)
    return only_for(ctx.setup, "fsdp", pick(ctx.setup,
                fsdp2="Shard within a node and replicate across nodes: fully_shard(..., mesh=init_device_mesh(..., "
                      "(nodes, gpus_per_node))) (HSDP) or reshard_after_forward=<gpus per node>, so the all-gathers "
                      "and reduce-scatters stay on NVLink and only a gradient all-reduce crosses the network.",
                fsdp1="Shard within a node and replicate across nodes: sharding_strategy=ShardingStrategy."
                      "HYBRID_SHARD, so the all-gathers and reduce-scatters stay inside the node and only a "
                      "gradient all-reduce crosses the network.",
                default="Shard within a node and replicate across nodes (HSDP: a 2-D mesh with FSDP2, HYBRID_SHARD "
                        "with FSDP1)."))


def _hosts_of_ranks(ctx: CheckContext) -> dict[int, str]:
    """rank -> host: the traces' host names, the manifest's where the traces name none."""
    listed = {k: h for k, h in enumerate(ctx.manifest.hostnames) if h}
    return {**listed, **{r["rank"]: r["hostname"] for r in ctx.ranks if r["hostname"]}}


def _sharded_exposed(ctx: CheckContext) -> tuple[float, float, str]:
    """Exposed ms per step of the units' gathers and reduce-scatters, its share of the step, and
    the status it earns where they cross the network (fail at exposed_fail, else warn)."""
    rows = [r for r in _units(ctx) if r.phase in ("forward_allgather", "backward_allgather", "reduce_scatter")]
    exposed = headline_figure(ctx.steps, rows)
    return exposed.ms, exposed.share, fail_or_warn(exposed.share, "exposed_fail")


def _already_hsdp(ctx: CheckContext, hosts: dict[int, str]) -> Result:
    """An HSDP run: does each shard group stay on one host? (init_device_mesh lays ranks out row
    by row, so shard group i is ranks i*G .. i*G+G-1.)"""
    fix = _tune_shard_group(ctx)
    shape = ctx.manifest.hsdp_shape
    if not shape:
        return Result("pass", "already HSDP (no mesh shape in the manifest to check the shard groups against the "
                              "hosts)", fix=fix)
    replicas, group = shape
    mesh = f"already HSDP: {replicas} replicas x shard groups of {group}"
    if not hosts:
        return Result("pass", mesh + " (no host names to check the shard groups against)", fix=fix)
    spread = [i for i in range(replicas)
              if len({hosts.get(r) for r in range(i * group, (i + 1) * group)} - {None}) > 1]
    if not spread:
        where = ", ".join(sorted(set(hosts.values())))
        return Result("pass", f"{mesh}, each shard group on one host ({where})", fix=fix)
    exposed, share, status = _sharded_exposed(ctx)
    return Result(status, f"{mesh}, but {len(spread)} of {replicas} shard groups span hosts: their gathers and "
                          f"reduce-scatters cross the network, {fmt_ms(exposed)} per step exposed "
                          f"({100 * share:.1f}% of the step)", impact_ms=exposed, fix=fix)


@rule("hsdp_candidate", "Flat sharding across nodes (HSDP candidate)",
      "Shard within a node and replicate across nodes: fully_shard(..., mesh=init_device_mesh(..., "
      "(nodes, gpus_per_node))) (HSDP) or reshard_after_forward=<gpus per node>, so the all-gathers and "
      "reduce-scatters stay on NVLink and only a gradient all-reduce crosses the network.")
def hsdp_candidate(ctx: CheckContext) -> Result:
    fix = _hsdp_fix(ctx)
    if ctx.stage != "zero3":
        return na("not an FSDP run", fix)
    hosts = _hosts_of_ranks(ctx)
    if ctx.setup.parallelism == "hsdp":
        return _already_hsdp(ctx, hosts)
    if not hosts:
        return na("the traces name no hosts (no host_name in the traces, no hostnames in the manifest)", fix)
    if len(set(hosts.values())) == 1:
        return Result("pass", f"all ranks on one host ({next(iter(hosts.values()))})", fix=fix)
    exposed, share, status = _sharded_exposed(ctx)
    return Result(status, f"FSDP over {len(set(hosts.values()))} hosts: gathers and reduce-scatters cross the "
                          f"network, {fmt_ms(exposed)} per step exposed ({100 * share:.1f}% of the step)",
                  impact_ms=exposed, fix=fix)
