"""How findings speak: grouping collectives by step, naming their owner, formatting figures."""

from __future__ import annotations

from collections import defaultdict

from overlapscope.analyzer.measure.collectives import Collective


def per_step(rows: list[Collective]) -> dict[tuple, list[Collective]]:
    """Rows grouped by (rank, step)."""
    groups: dict[tuple, list[Collective]] = defaultdict(list)
    for r in rows:
        if r.step is not None:
            groups[(r.rank, r.step)].append(r)
    return groups


def label(r: Collective) -> str:
    """How evidence names a collective's owner: bucket 3, unit layers.0 (reduce_scatter)."""
    if r.kind == "ddp_bucket":
        return f"bucket {r.id}"
    if r.kind == "fsdp_unit":
        return f"unit {r.id or '<root>'} ({r.phase})"
    return f"{r.id}"


def worst_owners(rows: list[Collective], n: int = 3) -> str:
    """The n owners with the most exposed time, with their mean exposed time per collective."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        total[label(r)] += r.exposed_ms
        count[label(r)] += 1
    top = sorted(total.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {fmt_ms(v / count[k])}" for k, v in top) or "-"


def fmt_ms(value: float) -> str:
    return f"{value:.3g} ms" if value >= 0.01 else f"{value * 1000:.3g} us"


def fmt_bytes(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"
