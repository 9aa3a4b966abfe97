"""Overview: per rank and per step compute, comm, exposed comm, idle and overlap %;
the slowest rank and step stand out."""

from __future__ import annotations

import polars as pl
import streamlit as st

from overlapscope.dashboard import charts, context, data, shape
from overlapscope.dashboard.text import md


def _fmt(value, unit: str = "ms", digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f} {unit}".strip()


def _figures(head: dict) -> None:
    """The headline (analyzer/headline.py: one aggregation for every figure)."""
    cols = st.columns(5)
    how = f"The {head['aggregation']} (rank {head['slowest_rank']})."
    cols[0].metric("Step time", _fmt(head["step_ms"]), help=how)
    cols[1].metric("Exposed comm / step", _fmt(head["exposed_comm_ms"]),
                   help=f"Comm time not covered by compute, {_fmt(head['exposed_pct'], '%', 1)} of the step. {how}")
    cols[2].metric("Overlap", _fmt(head["overlap_pct"], "%", 1),
                   help=f"100 x (comm - exposed comm) / comm. {how}")
    cols[3].metric("Slowest rank", "–" if head["slowest_rank"] is None else f"rank {head['slowest_rank']}")
    worst = head["slowest_step"]
    cols[4].metric("Slowest step", "–" if worst is None else f"step {worst['step']}, rank {worst['rank']}",
                   help=None if worst is None else
                   f"Step {worst['step']} on rank {worst['rank']}: {_fmt(worst['step_ms'])}")


def _table(rows: list[dict], marker) -> pl.DataFrame:
    marked = [{"slowest": "◀" if marker(r) else "", **r} for r in rows]
    return pl.DataFrame(marked, infer_schema_length=None)


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    result = data.analysis(*ctx.key())
    info = result["run"]
    st.title(f"Overview · {md(run['name'])}")
    st.caption(f"{info['world_size']} ranks in the job, {len(info['ranks_loaded'])} loaded · backend "
               f"{md(info['backend'] or '?')} · devices {md(', '.join(info['devices']) or '?')} · "
               f"parallelism {md(info['parallelism'] or 'not recorded')}")
    if info.get("pruned_at"):
        st.caption(f"Pruned on {str(info['pruned_at'])[:10]}: the figures below were stored at ingest; the "
                   "raw events are gone.")
    if not result["steps"]:
        st.warning("No ProfilerStep windows in these traces: per-step figures need `prof.step()` in the "
                   "training loop. The per-rank figures below cover every profiled event.")
    head = result["headline"]
    worst_step = head["slowest_step"]
    worst_rank = {"rank": head["slowest_rank"]} if head["slowest_rank"] is not None else None
    _figures(head)

    means = shape.rank_means(result["steps"])
    left, right = st.columns(2)
    with left:
        st.subheader("Mean step per rank")
        st.altair_chart(charts.step_breakdown(means, worst_rank["rank"] if worst_rank else None), width="stretch")
        st.caption("Compute + exposed comm + idle make up the step; the slowest rank is outlined in red. "
                   "Hover for comm, hidden comm and overlap %.")
    with right:
        st.subheader("Per rank and step")
        metric = st.segmented_control("Colour by", ["step_ms", "exposed_comm_ms", "overlap_pct", "idle_ms"],
                                      default="step_ms", key="overview_metric") or "step_ms"
        highlight = (worst_step["rank"], worst_step["step"]) if worst_step else None
        st.altair_chart(charts.step_heatmap(result["steps"], metric, highlight), width="stretch")
        st.caption("The slowest step is outlined in red.")

    st.subheader("Per rank (all profiled events; step_ms is the median step)")
    slow = worst_rank["rank"] if worst_rank else None
    st.dataframe(_table(result["ranks"], lambda r: r["rank"] == slow), hide_index=True)
    st.subheader("Per step")
    st.dataframe(_table(result["steps"], lambda r: worst_step is not None and
                        (r["rank"], r["step"]) == (worst_step["rank"], worst_step["step"])), hide_index=True)


render()
