"""Checklist rules about FSDP units: wrapping, unit size, resharding, HSDP."""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.context import CheckContext
from overlapscope.analyzer.checklist.evidence import fmt_bytes, fmt_ms, per_step
from overlapscope.analyzer.checklist.findings import Result, na, rule, t
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


@rule("root_only_wrap", "FSDP wraps only the root",
      "fully_shard each transformer block first, then the root (one unit per block).")
def root_only_wrap(ctx: CheckContext) -> Result:
    if ctx.stage != "zero3":
        return na("not an FSDP run")
    sizes = _unit_bytes(ctx)
    if len(sizes) == 1:
        (name, nbytes), = sizes.items()
        return Result("fail", f"one unit ({name or '<root>'}, {fmt_bytes(nbytes)}): the whole model is gathered at "
                              f"once and no all-gather overlaps compute")
    return Result("pass", f"{len(sizes)} units")


@rule("unit_size", "Unit size: latency-bound small units or one oversized unit",
      "Wrap at the granularity of a transformer block: group tiny modules into one fully_shard call "
      "(latency-bound collectives), split oversized units so their gathers overlap and fewer full "
      "weights sit in memory at once.")
def unit_size(ctx: CheckContext) -> Result:
    rows = _units(ctx)
    if not rows:
        return na("no FSDP units (DDP buckets: see ddp_bucket_size)")
    w = ctx.sources["bus_bandwidth_bytes_per_s_trace"]
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
        exposed = sum(r.exposed_ms for r in slow) / steps
        status = "fail" if exposed / ctx.mean_step_ms() >= t("exposed_fail") else "warn"
        return Result(status, evidence + ": many latency-bound collectives", impact_ms=exposed)
    if len(sizes) > 2 and share >= t("large_share"):
        return Result("warn", evidence + ": one unit dominates")
    return Result("pass", evidence)


def _device_memory(ctx: CheckContext) -> float | None:
    return ctx.analysis.info.device_memory_bytes()[0]


_KEEP_GATHERED = ("Set reshard_after_forward=False on the units whose backward all-gather is exposed (the last "
                  "units first): one all-gather fewer per unit and step, at the cost of keeping them gathered.")
_RESHARD = "Set reshard_after_forward=True (or an int, the intra-node size) to free the gathered weights."


@rule("reshard_after_forward", "reshard_after_forward against the memory headroom", "Nothing to do.")
def reshard_after_forward(ctx: CheckContext) -> Result:
    rows = _units(ctx)
    if not rows:
        return na("not an FSDP run")
    peaks = [m["peak_allocated_bytes"] for m in ctx.memory if m["peak_allocated_bytes"]]
    device = _device_memory(ctx)
    back = [r for r in rows if r.phase == "backward_allgather"]
    steps = len(per_step(rows)) or 1
    back_comm, back_exposed = sum(r.comm_ms for r in back) / steps, sum(r.exposed_ms for r in back) / steps
    if not peaks or not device:
        return na("no memory events or device memory in the trace (profile_memory=True records them)",
                  "Profile with profile_memory=True to judge the headroom.")
    peak = max(peaks)
    full = sum(_unit_bytes(ctx).values())
    if back:
        evidence = (f"peak {fmt_bytes(peak)} of {fmt_bytes(device)}; keeping all {fmt_bytes(full)} of unsharded "
                    f"weights would reach {fmt_bytes(peak + full)}; backward all-gathers take {fmt_ms(back_comm)} "
                    f"per step, {fmt_ms(back_exposed)} exposed")
        if peak + full <= t("memory_headroom") * device and back_exposed > 0:
            share = back_exposed / ctx.mean_step_ms()
            status = "fail" if share >= t("exposed_fail") else "warn"
            return Result(status, evidence + ": the headroom allows it", impact_ms=back_exposed, fix=_KEEP_GATHERED)
        return Result("pass", evidence, fix=_KEEP_GATHERED)
    evidence = f"no backward all-gathers (reshard_after_forward=False); peak {fmt_bytes(peak)} of {fmt_bytes(device)}"
    if peak >= t("memory_pressure") * device:
        return Result("warn", evidence + ": under memory pressure", fix=_RESHARD)
    return Result("pass", evidence, fix=_RESHARD)


@rule("hsdp_candidate", "Flat sharding across nodes (HSDP candidate)",
      "Shard within a node and replicate across nodes: fully_shard(..., mesh=init_device_mesh(..., "
      "(nodes, gpus_per_node))) (HSDP) or reshard_after_forward=<gpus per node>, so the all-gathers and "
      "reduce-scatters stay on NVLink and only a gradient all-reduce crosses the network.")
def hsdp_candidate(ctx: CheckContext) -> Result:
    if ctx.stage != "zero3":
        return na("not an FSDP run")
    if ctx.manifest.parallelism == "hsdp":
        return Result("pass", "already HSDP (2-D mesh)")
    hosts = {r["hostname"] for r in ctx.ranks if r["hostname"]} or {h for h in ctx.manifest.hostnames if h}
    if not hosts:
        return na("the traces name no hosts")
    if len(hosts) == 1:
        return Result("pass", f"all ranks on one host ({next(iter(hosts))})")
    rows = [r for r in _units(ctx) if r.phase in ("forward_allgather", "backward_allgather", "reduce_scatter")]
    steps = len(per_step(rows)) or 1
    exposed = sum(r.exposed_ms for r in rows) / steps
    share = exposed / ctx.mean_step_ms()
    status = "fail" if share >= t("exposed_fail") else "warn"
    return Result(status, f"FSDP over {len(hosts)} hosts: gathers and reduce-scatters cross the network, "
                          f"{fmt_ms(exposed)} per step exposed ({100 * share:.1f}% of the step)", impact_ms=exposed)
