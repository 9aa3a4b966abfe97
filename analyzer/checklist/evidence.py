"""How findings speak: grouping collectives by step, aggregating them as the headline does,
naming their owner, formatting figures."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple

from overlapscope.analyzer import headline
from overlapscope.analyzer.measure.blocks import ROWS_PER_BLOCK, rank_blocks
from overlapscope.analyzer.measure.collectives import (NULL_INT, Collective, Collectives, Selection, rank_steps,
                                                       selection)

AGGREGATION = "median step of the slowest rank, as the headline"


def exposed_transfer(r: Collective) -> float:
    """A collective's exposed time after its last peer arrived (the wait is the straggler's)."""
    return max(0.0, r.exposed_transfer_ms or 0.0)


def transfer(r: Collective) -> float:
    """A collective's time after its last peer arrived (all of it where no peer is loaded)."""
    return r.transfer_ms if r.transfer_ms is not None else r.comm_ms


class Figure(NamedTuple):
    """A rule's per-step figure, aggregated as the headline's: on the headline's slowest
    rank, the median over its profiled steps of the figure's sum per step (a step without
    such collectives counts 0), and its share of that rank's median step."""

    ms: float
    share: float
    rank: int | None


def headline_figure(steps: list[dict], rows: list[Collective],
                    value: Callable[[Collective], float] = exposed_transfer) -> Figure:
    """``steps``: the overlap's rows per rank and step; ``rows``: the collectives summed per step.
    Without steps (no ProfilerStep windows): the whole trace of the rank where the figure is
    largest, with no share of a step."""
    rank, figures = headline.slowest(steps, ("step_ms", "exposed_comm_ms"))
    if rank is None:
        total: dict[int, float] = defaultdict(float)
        for r in rows:
            total[r.rank] += value(r)
        worst = max(total, key=lambda k: (total[k], -k), default=None)
        return Figure(total.get(worst, 0.0), 0.0, worst)
    per_step: dict[int, float] = {s["step"]: 0.0 for s in steps if s["rank"] == rank}
    if isinstance(rows, (Collectives, Selection)):  # that rank's rows by its column, in their order
        rows = selection(rows)
        rows = rows.where(rows.numpy("rank") == rank)
    for r in rows:
        if r.rank == rank and r.step in per_step:
            per_step[r.step] += value(r)
    ms = statistics.median(per_step.values()) if per_step else 0.0
    step_ms = figures.get("step_ms")
    return Figure(ms, ms / step_ms if step_ms else 0.0, rank)


def per_step(rows: list[Collective]) -> dict[tuple, list[Collective]]:
    """Rows grouped by (rank, step)."""
    groups: dict[tuple, list[Collective]] = defaultdict(list)
    for r in rows:
        if r.step is not None:
            groups[(r.rank, r.step)].append(r)
    return groups


def steps_of(rows, rows_per_block: int = ROWS_PER_BLOCK) -> int:
    """How many (rank, step) the rows with a step belong to (``len(per_step(rows))``), read
    from the columns (a ``Collectives`` or ``Selection``) a block of whole ranks at a time:
    a (rank, step) never spans two blocks, and the run's pairs at once took int64 keys, a
    sort and an inverse of every row (50 MiB at 1,024 ranks)."""
    rank, step = rows.numpy("rank"), rows.numpy("step")
    count = 0
    for start, stop in rank_blocks(rank, rows_per_block):
        block = step[start:stop]
        known = block != NULL_INT
        count += len(rank_steps(rank[start:stop][known], block[known])[0])
    return count


def label(r: Collective) -> str:
    """How evidence names a collective's owner: bucket 3, unit layers.0 (reduce_scatter)."""
    if r.kind == "ddp_bucket":
        return f"bucket {r.id}"
    if r.kind == "fsdp_unit":
        return f"unit {r.id or '<root>'} ({r.phase})"
    return f"{r.id}"


def worst_owners(rows: list[Collective], n: int = 3) -> str:
    """The n owners with the most exposed transfer time, with their mean per collective."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in rows:
        total[label(r)] += exposed_transfer(r)
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
