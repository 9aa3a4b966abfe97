"""Checklist rules about FSDP units: wrapping, unit size, resharding, HSDP."""

from __future__ import annotations

import statistics
from collections import defaultdict

from overlapscope.analyzer.checklist.findings import Finding, t
from overlapscope.analyzer.checklist.evidence import fmt_bytes, fmt_ms, mean_step_ms, per_step


def _units(ctx: dict) -> list[dict]:
    return [r for r in ctx["rows"] if r["kind"] == "fsdp_unit"]


def _unit_bytes(ctx: dict) -> dict[str, float]:
    """Unsharded bytes per unit: the manifest's, else the forward all-gather's output."""
    units = ctx["manifest"].get("units") or []
    if units:
        return {u["name"]: u["bytes"] for u in units}
    sizes = defaultdict(list)
    for r in _units(ctx):
        if r["phase"] == "forward_allgather" and r["bytes"]:
            sizes[r["id"]].append(r["bytes"])
    return {k: statistics.median(v) for k, v in sizes.items()}


def root_only_wrap(ctx: dict) -> Finding:
    title = "FSDP wraps only the root"
    fix = "fully_shard each transformer block first, then the root (one unit per block)."
    if ctx["stage"] != "zero3":
        return Finding("root_only_wrap", title, "n/a", "not an FSDP run", fix)
    sizes = _unit_bytes(ctx)
    if len(sizes) == 1:
        (name, nbytes), = sizes.items()
        return Finding("root_only_wrap", title, "fail",
                       f"one unit ({name or '<root>'}, {fmt_bytes(nbytes)}): the whole model is gathered at once "
                       f"and no all-gather overlaps compute", fix)
    return Finding("root_only_wrap", title, "pass", f"{len(sizes)} units", fix)


def unit_size(ctx: dict) -> Finding:
    title = "Unit size: latency-bound small units or one oversized unit"
    fix = ("Wrap at the granularity of a transformer block: group tiny modules into one fully_shard call "
           "(latency-bound collectives), split oversized units so their gathers overlap and fewer full "
           "weights sit in memory at once.")
    rows = _units(ctx)
    if not rows:
        return Finding("unit_size", title, "n/a", "no FSDP units (DDP buckets: see ddp_bucket_size)", fix)
    w = ctx["sources"]["bus_bandwidth_bytes_per_s_trace"]
    slow = [r for r in rows if r["busbw_gbps"] is not None and w and r["busbw_gbps"] * 1e9 < t("latency_busbw") * w]
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
        exposed = sum(r["exposed_ms"] for r in slow) / steps
        status = "fail" if exposed / mean_step_ms(ctx) >= t("exposed_fail") else "warn"
        return Finding("unit_size", title, status, evidence + ": many latency-bound collectives", fix,
                       impact_ms=exposed)
    if len(sizes) > 2 and share >= t("large_share"):
        return Finding("unit_size", title, "warn", evidence + ": one unit dominates", fix)
    return Finding("unit_size", title, "pass", evidence, fix)


def _device_memory(ctx: dict) -> float | None:
    mems = [r["device_memory_bytes"] for r in ctx["ranks"] if r["device_memory_bytes"]]
    if not mems:
        mems = [d.get("memory_bytes") for d in ctx["manifest"].get("devices") or [] if d.get("memory_bytes")]
    return min(mems) if mems else None


def reshard_after_forward(ctx: dict) -> Finding:
    title = "reshard_after_forward against the memory headroom"
    rows = _units(ctx)
    if not rows:
        return Finding("reshard_after_forward", title, "n/a", "not an FSDP run", "Nothing to do.")
    peaks = [m["peak_allocated_bytes"] for m in ctx["memory"] if m["peak_allocated_bytes"]]
    device = _device_memory(ctx)
    back = [r for r in rows if r["phase"] == "backward_allgather"]
    steps = len(per_step(rows)) or 1
    back_comm, back_exposed = sum(r["comm_ms"] for r in back) / steps, sum(r["exposed_ms"] for r in back) / steps
    if not peaks or not device:
        return Finding("reshard_after_forward", title, "n/a",
                       "no memory events or device memory in the trace (profile_memory=True records them)",
                       "Profile with profile_memory=True to judge the headroom.")
    peak = max(peaks)
    full = sum(_unit_bytes(ctx).values())
    if back:
        fix = ("Set reshard_after_forward=False on the units whose backward all-gather is exposed (the last "
               "units first): one all-gather fewer per unit and step, at the cost of keeping them gathered.")
        evidence = (f"peak {fmt_bytes(peak)} of {fmt_bytes(device)}; keeping all {fmt_bytes(full)} of unsharded "
                    f"weights would reach {fmt_bytes(peak + full)}; backward all-gathers take {fmt_ms(back_comm)} "
                    f"per step, {fmt_ms(back_exposed)} exposed")
        if peak + full <= t("memory_headroom") * device and back_exposed > 0:
            share = back_exposed / mean_step_ms(ctx)
            status = "fail" if share >= t("exposed_fail") else "warn"
            return Finding("reshard_after_forward", title, status, evidence + ": the headroom allows it", fix,
                           impact_ms=back_exposed)
        return Finding("reshard_after_forward", title, "pass", evidence, fix)
    fix = "Set reshard_after_forward=True (or an int, the intra-node size) to free the gathered weights."
    evidence = f"no backward all-gathers (reshard_after_forward=False); peak {fmt_bytes(peak)} of {fmt_bytes(device)}"
    if peak >= t("memory_pressure") * device:
        return Finding("reshard_after_forward", title, "warn", evidence + ": under memory pressure", fix)
    return Finding("reshard_after_forward", title, "pass", evidence, fix)


def hsdp_candidate(ctx: dict) -> Finding:
    title = "Flat sharding across nodes (HSDP candidate)"
    fix = ("Shard within a node and replicate across nodes: fully_shard(..., mesh=init_device_mesh(..., "
           "(nodes, gpus_per_node))) (HSDP) or reshard_after_forward=<gpus per node>, so the all-gathers and "
           "reduce-scatters stay on NVLink and only a gradient all-reduce crosses the network.")
    par = ctx["manifest"].get("parallelism")
    if ctx["stage"] != "zero3":
        return Finding("hsdp_candidate", title, "n/a", "not an FSDP run", fix)
    if par == "hsdp":
        return Finding("hsdp_candidate", title, "pass", "already HSDP (2-D mesh)", fix)
    hosts = {r["hostname"] for r in ctx["ranks"] if r["hostname"]} or set(ctx["manifest"].get("hostnames") or [])
    if not hosts:
        return Finding("hsdp_candidate", title, "n/a", "the traces name no hosts", fix)
    if len(hosts) == 1:
        return Finding("hsdp_candidate", title, "pass", f"all ranks on one host ({next(iter(hosts))})", fix)
    rows = [r for r in _units(ctx) if r["phase"] in ("forward_allgather", "backward_allgather", "reduce_scatter")]
    steps = len(per_step(rows)) or 1
    exposed = sum(r["exposed_ms"] for r in rows) / steps
    share = exposed / mean_step_ms(ctx)
    status = "fail" if share >= t("exposed_fail") else "warn"
    return Finding("hsdp_candidate", title, status,
                   f"FSDP over {len(hosts)} hosts: gathers and reduce-scatters cross the network, "
                   f"{fmt_ms(exposed)} per step exposed ({100 * share:.1f}% of the step)", fix, impact_ms=exposed)
