"""History: each headline metric over time, one line per run name (the most recently
stored names, or those picked), regressions marked; the run names, the regressions
and the newest runs in tables below.

A regression is a run worse than the previous run of its name by more than the
bound (``analyzer/gate.py``, as ``overlapscope check`` judges it). The runs are
those the sidebar's filter lets through; a click on a run opens its Overview.
"""

from __future__ import annotations

import streamlit as st

from overlapscope.analyzer import gate
from overlapscope.contract import figures
from overlapscope.dashboard import charts, context, shape, tables

# the gate's metrics, its default first, by their label on the axis (contract.figures)
METRICS = {m: figures.BY_NAME[m].per_step_label for m in sorted(gate.METRICS, key=lambda m: m != gate.DEFAULT_METRIC)}
OVERVIEW = "views/overview.py"


def _open_picked(event) -> None:
    """A click on a run: select it and open its Overview."""
    picked = (getattr(event, "selection", None) or {}).get(charts.PICK) or []
    if picked and picked[0].get("run_id") is not None:
        context.select_run(int(picked[0]["run_id"]))
        st.switch_page(OVERVIEW)


def render() -> None:
    ctx = context.current()
    context.require_run(ctx)
    st.title("History")
    runs = ctx.shown
    if not runs:
        st.info("No run matches the sidebar's filter.")
        return
    # the metric's buttons on a row of their own: beside another control the last ones were cut
    metric = st.segmented_control("Metric", list(METRICS), default=gate.DEFAULT_METRIC, key="history_metric",
                                    format_func=shape.figure_label) or gate.DEFAULT_METRIC
    recent = shape.names_by_recency(runs)
    left, right = st.columns([3, 1])
    # a line per name stays readable up to a handful: the most recently stored names first, others on demand
    plotted = left.multiselect(f"Run names in the chart ({len(recent)} in all)", recent,
                               default=recent[:shape.HISTORY_NAMES_SHOWN], key="history_names",
                               placeholder="Choose the run names to plot")
    bound = right.number_input("Regression: worse by more than (%)", min_value=0.0, max_value=1e6,
                               value=gate.DEFAULT_MAX_REGRESSION_PCT, step=1.0, key="history_bound")
    marked = gate.regressions(runs, metric, bound)
    rows = shape.history_rows(runs, metric, marked)
    shown = [r for r in rows if r["name"] in set(plotted)]
    higher = "higher" if gate.HIGHER_IS_BETTER[metric] else "lower"
    if shown:
        event = st.altair_chart(charts.history(shown, metric, METRICS[metric]), width="stretch",
                                on_select="rerun", selection_mode=charts.PICK, key=f"history_chart_{metric}")
        _open_picked(event)
        st.caption(f"Showing {len(shown)} runs of {len(plotted)} names, one line per name; {higher} is better. "
                   f"A black triangle marks a run worse than the previous run of its name by more than "
                   f"{bound:g} %. Click a run to open it.")
    else:
        st.info("Choose one or more run names to plot.")
    st.subheader(f"Run names ({len(recent)})")
    tables.show(shape.history_names(rows), shape.history_name_table(METRICS[metric]))
    regressed = [r for r in rows if r["regression"]]
    st.subheader(f"Regressions ({len(regressed)})")
    if not regressed:
        st.caption(f"No run is worse than the previous run of its name by more than {bound:g} %.")
    else:
        tables.show(regressed[::-1], shape.regression_table(METRICS[metric]))
    newest = rows[::-1][:shape.HISTORY_TABLE_ROWS]
    st.subheader(f"Runs ({len(rows)})")
    tables.show(newest, shape.history_run_table(METRICS[metric]))
    if len(rows) > len(newest):
        st.caption(f"The newest {len(newest)} of {len(rows)} runs; the sidebar's filter narrows them "
                   "(`overlapscope history --json` lists every one).")

render()
