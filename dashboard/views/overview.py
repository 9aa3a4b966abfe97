"""Overview: per rank and per step compute, comm, exposed comm, idle and overlap %;
the headline's rank, the longest step and a late rank stand out."""

from __future__ import annotations

import streamlit as st

from overlapscope.analyzer.errors import UsageError
from overlapscope.dashboard import charts, context, data, shape, tables
from overlapscope.dashboard.text import md


def _fmt(value, unit: str = "ms", digits: int = 2) -> str:
    return "–" if value is None else f"{value:,.{digits}f} {unit}".strip()


def _late_rank(findings: list[dict]) -> dict | None:
    """The straggler finding when it names a late rank (fail or warn): the rank the others wait
    for, which is not the headline's rank (that one waits longest, so its step is longest)."""
    f = next((f for f in findings if f["id"] == "straggler"), None)
    if f is None or f["status"] not in ("fail", "warn") or (f.get("details") or {}).get("late_rank") is None:
        return None
    return f


def _late(ctx, run: dict) -> dict | None:
    """The straggler finding from the run's stored checklist; None where the run has none to read
    (a pruned run's stored findings lack the details; a run whose files are gone shows the rest)."""
    if run.get("pruned_at"):
        return None
    try:
        return _late_rank(data.diagnosis(*ctx.key())["findings"])
    except UsageError:
        return None


def _figures(head: dict, late: dict | None) -> None:
    """The headline (analyzer/headline.py: one aggregation for every figure), exposed comm first;
    then where it is worst, each named for what it is."""
    how = f"The {head['aggregation']} (rank {head['slowest_rank']})."
    cols = st.columns(4)
    cols[0].metric("Exposed comm / step", _fmt(head["exposed_comm_ms"]), help=f"Comm time not covered by compute. {how}")
    cols[1].metric("Exposed share of the step", _fmt(head.get("exposed_pct"), "%", 1),
                   help=f"Exposed comm over the step time. {how}")
    cols[2].metric("Overlap", _fmt(head["overlap_pct"], "%", 1),
                   help=f"100 x (comm - exposed comm) / comm of that step. {how}")
    cols[3].metric("Step time", _fmt(head["step_ms"]), help=how)
    cols = st.columns(4)
    cols[0].metric("Longest median step", "–" if head["slowest_rank"] is None else f"rank {head['slowest_rank']}",
                   help="The rank whose median step is longest: every figure above is taken from it. Where a "
                        "rank comes late, this is usually one that waits for it, not the late rank.")
    worst = head["slowest_step"]
    # the rank in the label: "rank 1, step 3" as a value is cut at a quarter of the page
    cols[1].metric("Longest single step" + ("" if worst is None else f" (rank {worst['rank']})"),
                   "–" if worst is None else f"step {worst['step']}",
                   help=None if worst is None else
                   f"The longest single step of any rank: {_fmt(worst['step_ms'])}, "
                   f"{_fmt(worst['exposed_comm_ms'])} exposed comm.")
    if late is not None:
        cols[2].metric("Late rank (the others wait)", f"rank {late['details']['late_rank']}",
                       help=f"The checklist's straggler finding ({late['status']}): the others lose "
                            f"{_fmt(late['impact_ms'])} per step waiting for it. See the Checklist.")
    st.caption(f"Every figure above: the {head['aggregation']}"
               + (f" (rank {head['slowest_rank']})." if head["slowest_rank"] is not None else ".")
               + " The same headline as `overlapscope analyze`, History and the API.")


SHOWN_WARNINGS = 12


def _input_warnings(lines: list[str]) -> None:
    """What the traces lacked (missing ranks, events left out, text read as U+FFFD), as
    ``overlapscope analyze`` says it: one box, a line each (file names escaped)."""
    if not lines:
        return
    shown = [f"- {md(line)}" for line in lines[:SHOWN_WARNINGS]]
    if len(lines) > SHOWN_WARNINGS:
        shown.append(f"- and {len(lines) - SHOWN_WARNINGS:,} more (`overlapscope analyze --run` lists them all)")
    st.warning("\n".join(shown))


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    result = data.analysis(*ctx.key())
    info = result["run"]
    st.title(f"Overview · {md(run['name'])}")
    st.caption(f"{info['world_size']} ranks in the job, {len(info['ranks_loaded'])} loaded · backend "
               f"{md(info['backend'] or '?')} · devices {md(', '.join(info['devices']) or '?')} · "
               f"parallelism {md(info['parallelism'] or 'not recorded')}")
    _input_warnings(info.get("warnings") or [])
    if info.get("pruned_at"):
        st.caption(f"Pruned on {str(info['pruned_at'])[:10]}: the figures below were stored at ingest; the "
                   "raw events are gone.")
    if not result["steps"]:
        st.warning("No ProfilerStep windows in these traces: per-step figures need `prof.step()` in the "
                   "training loop. The per-rank figures below cover every profiled event.")
    head = result["headline"]
    worst_step = head["slowest_step"]
    worst_rank = {"rank": head["slowest_rank"]} if head["slowest_rank"] is not None else None
    _figures(head, _late(ctx, run))

    medians = shape.rank_medians(result["steps"])
    left, right = st.columns(2)
    with left:
        st.subheader("Median step per rank")
        st.altair_chart(charts.step_breakdown(medians, worst_rank["rank"] if worst_rank else None), width="stretch")
        st.caption("Each rank's median of compute, exposed comm, other and idle over its steps, as in the "
                   "headline (medians of parts add up to about the median step); the headline's rank is "
                   "outlined in black. Hover for comm, hidden comm and overlap %.")
    with right:
        st.subheader("Per rank and step")
        metric = st.segmented_control("Colour by", ["step_ms", "exposed_comm_ms", "overlap_pct", "idle_ms"],
                                      default="step_ms", key="overview_metric",
                                      format_func=shape.figure_label) or "step_ms"
        highlight = (worst_step["rank"], worst_step["step"]) if worst_step else None
        st.altair_chart(charts.step_heatmap(result["steps"], metric, highlight, shape.figure_label(metric)),
                        width="stretch")
        st.caption("The longest single step is outlined in black.")

    st.subheader("Per rank: totals over the profiled steps")
    slow = worst_rank["rank"] if worst_rank else None
    tables.show(result["ranks"], shape.RANK_TABLE, lambda r: r["rank"] == slow, f"{tables.MARK} the headline's rank (longest median step)")
    if any(r.get("clock_offset_ms") is not None for r in result["ranks"]):
        with st.expander("Between ranks: clock offsets and waiting for peers"):
            tables.show(result["ranks"], shape.RANK_CLOCK_TABLE, lambda r: r["rank"] == slow,
                        f"{tables.MARK} the headline's rank")
    st.subheader("Per step")
    tables.show(result["steps"], shape.STEP_TABLE, lambda r: worst_step is not None and
                (r["rank"], r["step"]) == (worst_step["rank"], worst_step["step"]), f"{tables.MARK} the longest single step")

render()
