"""Overview: per rank and per step compute, comm, exposed comm, idle and overlap %;
the slowest rank and step stand out."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from overlapscope.dashboard import charts, context, data, shape


def _fmt(value, unit: str = "ms", digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f} {unit}".strip()


def _figures(result: dict, worst_step: dict | None) -> None:
    head = shape.headline(result)
    cols = st.columns(5)
    cols[0].metric("Step time", _fmt(head["step_ms"]),
                   help="Median step time of the slowest rank (ProfilerStep windows on the device).")
    cols[1].metric("Exposed comm / step", _fmt(head["exposed_comm_ms"]),
                   help="Comm time not covered by compute in the median step of the slowest rank "
                        "(over all profiled events when the trace has no steps).")
    cols[2].metric("Overlap", _fmt(head["overlap_pct"], "%", 1),
                   help="100 x (comm - exposed comm) / comm, the mean of the ranks.")
    cols[3].metric("Slowest rank", "–" if head["slowest_rank"] is None else f"rank {head['slowest_rank']}")
    cols[4].metric("Slowest step", "–" if worst_step is None else f"{worst_step['step']} · r{worst_step['rank']}",
                   help=None if worst_step is None else
                   f"Step {worst_step['step']} on rank {worst_step['rank']}: {worst_step['step_ms']:.2f} ms")


def _table(rows: list[dict], marker) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if len(df):
        df.insert(0, "slowest", ["◀" if marker(r) else "" for r in rows])
    return df


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    result = data.analysis(*ctx.key())
    info = result["run"]
    st.title(f"Overview · {run['name']}")
    st.caption(f"{info['world_size']} ranks in the job, {len(info['ranks_loaded'])} loaded · backend "
               f"{info['backend'] or '?'} · devices {', '.join(info['devices']) or '?'} · "
               f"parallelism {info['parallelism'] or 'not recorded'}")
    if not result["steps"]:
        st.warning("No ProfilerStep windows in these traces: per-step figures need `prof.step()` in the "
                   "training loop. The per-rank figures below cover every profiled event.")
    worst_step = shape.slowest_step(result["steps"])
    worst_rank = shape.slowest_rank(result["ranks"])
    _figures(result, worst_step)

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
