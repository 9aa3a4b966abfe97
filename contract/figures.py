"""A run's figures, defined once: what every reader of them takes their names, units,
direction and labels from, and the typed rows they come in.

- ``METRICS``: the headline's metrics, one row each (JSON key, unit, whether higher is
  better, the label a table or chart gives it). The CLI's tables, the gate (``check``),
  History, Compare, the export and the API read it; the catalog stores these metrics.
- ``group_label``: the name of a bucket, unit or other collective and its phase.
- ``overlap_pct``: 100 x (comm - exposed) / comm, null where there is no comm (nothing
  to overlap), everywhere: per rank, per step, in the headline and in a replay.
- ``RankFigures``, ``StepFigures``, ``Headline``: the rows of ``analyze --json`` and
  the headline, as typed structs whose fields are the JSON keys in their order
  (docs/json.md). ``as_json`` gives the JSON object.

No torch, no DuckDB: the CLI's HTTP client decodes a server's answers with these too.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

PCT_DIGITS = 2  # percentages keep two decimals


@dataclass(frozen=True)
class Metric:
    """One metric of a run's headline."""

    name: str
    """Its JSON key (``exposed_comm_ms``): names carry their unit."""
    unit: str
    """ms, % or rank."""
    higher_is_better: bool | None
    """Whether a higher value is an improvement; None where it is no quality (a rank)."""
    label: str
    """How a table, chart or button names it, with its unit."""
    per_step_label: str
    """Its label on History's axis, where each point is a run's typical step."""


# In the order a comparison lists them (``check``, Compare, the API's verdict).
METRICS: tuple[Metric, ...] = (
    Metric("step_ms", "ms", False, "step (ms)", "step (ms)"),
    Metric("exposed_comm_ms", "ms", False, "exposed comm (ms)", "exposed comm per step (ms)"),
    Metric("comm_ms", "ms", False, "comm (ms)", "comm per step (ms)"),
    Metric("compute_ms", "ms", False, "compute (ms)", "compute per step (ms)"),
    Metric("idle_ms", "ms", False, "idle (ms)", "idle per step (ms)"),
    Metric("exposed_pct", "%", False, "exposed share (%)", "exposed comm (% of the step)"),
    Metric("overlap_pct", "%", True, "overlap (%)", "overlap (%)"),
    Metric("slowest_rank", "rank", None, "slowest rank", "slowest rank"),
)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
# the headline's figures that history's rows carry at their top level (``history --json``)
HISTORY_FIGURES: tuple[str, ...] = ("step_ms", "exposed_comm_ms", "comm_ms", "overlap_pct")
# the metrics a regression gate can hold: those with a better direction
GATED: tuple[str, ...] = tuple(m.name for m in METRICS if m.higher_is_better is not None)
# the per-step times of a figure set (analyze's step rows, the what-if's four figure sets)
STEP_TIMES: tuple[str, ...] = ("step_ms", "compute_ms", "comm_ms", "exposed_comm_ms")


def group_label(row: dict) -> str:
    """How tables, charts and the gate name a bucket, unit or other collective and its phase:
    ``bucket 2 · allreduce``, ``unit blocks.0 · forward_allgather``, ``all_reduce``."""
    if row["kind"] == "ddp_bucket":
        return f"bucket {row['id']} · {row['phase']}"
    if row["kind"] == "fsdp_unit":
        return f"unit {row['id'] or '(root)'} · {row['phase']}"
    same = str(row["id"]).replace("_", "") == str(row["phase"]).replace("_", "")
    return str(row["id"]) if same else f"{row['id']} · {row['phase']}"


def overlap_pct(comm, exposed) -> float | None:
    """100 x (comm - exposed) / comm, rounded to PCT_DIGITS; None where comm is 0 or
    unknown, or exposed unknown. Any unit, the same for both (ms, ns, s)."""
    if not comm or exposed is None:
        return None
    return round(100.0 * (comm - exposed) / comm, PCT_DIGITS)


class _Figures(msgspec.Struct, kw_only=True):
    def as_json(self) -> dict:
        """The JSON object: the fields in their order."""
        return msgspec.to_builtins(self)


class RankFigures(_Figures, kw_only=True):
    """One rank of ``analyze --json`` (``ranks``): totals over its profiled events, its median step."""

    rank: int
    device_kind: str | None
    steps: int
    step_ms: float | None  # the median of its steps
    compute_ms: float | None
    comm_ms: float | None
    exposed_comm_ms: float | None
    overlap_pct: float | None
    idle_ms: float | None
    other_ms: float | None
    span_ms: float | None
    hta_overlap_pct: float | None  # Holistic Trace Analysis' figure, computed its way
    clock_offset_ms: float | None
    comm_wait_ms: float | None  # waiting for the last peer (null without a peer loaded)
    comm_transfer_ms: float | None
    exposed_wait_ms: float | None


class StepFigures(_Figures, kw_only=True):
    """One rank's step of ``analyze --json`` (``steps``)."""

    rank: int
    step: int
    step_ms: float | None
    compute_ms: float | None
    comm_ms: float | None
    exposed_comm_ms: float | None
    overlap_pct: float | None
    idle_ms: float | None
    # step_ms = compute + exposed comm + other + idle + spill_in - spill_out, exactly
    other_ms: float | None
    spill_in_ms: float | None
    spill_out_ms: float | None


class SlowestStep(_Figures, kw_only=True):
    rank: int
    step: int
    step_ms: float | None
    exposed_comm_ms: float | None


class Headline(_Figures, kw_only=True):
    """A run's headline (analyzer/headline.py: the median over the steps of the slowest rank)."""

    aggregation: str
    ranks: int = 0
    steps: int = 0
    slowest_rank: int | None
    step_ms: float | None = None
    compute_ms: float | None = None
    comm_ms: float | None = None
    exposed_comm_ms: float | None = None
    idle_ms: float | None = None
    overlap_pct: float | None = None
    exposed_pct: float | None = None
    slowest_step: SlowestStep | None = None
    failed_findings: list[str] | None = None  # the checklist's failed rules; None: not evaluated
