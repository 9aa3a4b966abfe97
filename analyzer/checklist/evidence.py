"""Small helpers shared by the checklist's rules."""

from __future__ import annotations

import statistics
from collections import defaultdict


def per_step(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Rows grouped by (rank, step)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["step"] is not None:
            groups[(r["rank"], r["step"])].append(r)
    return groups


def steps_of(ctx: dict) -> list[tuple]:
    return [(s["rank"], s["step"]) for s in ctx["overlap"]["steps"]]


def mean_step_ms(ctx: dict) -> float:
    values = [s["step_ms"] for s in ctx["overlap"]["steps"] if s["step_ms"]]
    return statistics.fmean(values) if values else float("inf")


def label(r: dict) -> str:
    """How evidence names a collective's owner: bucket 3, unit layers.0 (reduce_scatter)."""
    if r["kind"] == "ddp_bucket":
        return f"bucket {r['id']}"
    if r["kind"] == "fsdp_unit":
        return f"unit {r['id'] or '<root>'} ({r['phase']})"
    return f"{r['id']}"


def fmt_ms(value: float) -> str:
    return f"{value:.3g} ms" if value >= 0.01 else f"{value * 1000:.3g} us"


def fmt_bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"
