"""Compare: two runs side by side, per step and per bucket or unit."""

from __future__ import annotations

import polars as pl
import streamlit as st

from overlapscope.dashboard import charts, context, data, shape

# The headline's figures (analyzer/headline.py: the median step of the slowest rank).
HEADLINE = (("step_ms", "Step", "ms"), ("exposed_comm_ms", "Exposed comm", "ms"),
            ("overlap_pct", "Overlap", "%"), ("comm_ms", "Comm", "ms"))


def _pick(ctx) -> tuple[dict, dict] | None:
    by_id = {r["run_id"]: r for r in ctx.runs}
    ids = list(by_id)
    first = ctx.run["run_id"]
    second = next((i for i in ids if i != first), first)
    left, right = st.columns(2)
    a = left.selectbox("Run A", ids, index=ids.index(first), format_func=lambda i: context.run_label(by_id[i]),
                       key="cmp_a")
    b = right.selectbox("Run B", ids, index=ids.index(second), format_func=lambda i: context.run_label(by_id[i]),
                        key="cmp_b")
    return by_id[a], by_id[b]


def _headline(a: dict, b: dict) -> None:
    cols = st.columns(len(HEADLINE))
    for col, (key, label, unit) in zip(cols, HEADLINE):
        va, vb = a.get(key), b.get(key)
        delta = None if va is None or vb is None else f"{vb - va:+.2f} {unit} (B - A)"
        col.metric(label, "–" if vb is None else f"{vb:.2f} {unit}", delta, delta_color="off",
                   help=f"Run B; run A: {'–' if va is None else f'{va:.2f} {unit}'}")


def render() -> None:
    ctx = context.current()
    context.require_run(ctx)
    st.title("Compare two runs")
    if len(ctx.runs) < 2:
        st.info("The catalog holds one run: upload another to compare.")
        return
    a, b = _pick(ctx)
    names = {"A": f"A: {a['name']} #{a['run_id']}", "B": f"B: {b['name']} #{b['run_id']}"}
    _headline(a, b)
    analyses = {names["A"]: data.analysis(*ctx.key(a)), names["B"]: data.analysis(*ctx.key(b))}
    st.subheader("Per profiled step (mean over ranks)")
    metric = st.segmented_control("Metric", ["step_ms", "exposed_comm_ms", "comm_ms", "compute_ms"],
                                  default="step_ms", key="cmp_metric") or "step_ms"
    step_rows = shape.compare_steps(analyses)
    st.altair_chart(charts.compare_steps(step_rows, metric), width="stretch")
    st.caption("Steps are matched by position: the k-th profiled step of each run.")

    st.subheader("Per bucket or unit (mean per collective)")
    results = {names["A"]: data.buckets(*ctx.key(a)), names["B"]: data.buckets(*ctx.key(b))}
    group_rows = shape.compare_groups(results)
    if group_rows:
        st.altair_chart(charts.compare_groups(group_rows, "exposed_ms"), width="stretch")
        table = pl.DataFrame(group_rows, infer_schema_length=None).pivot(
            on="run", index="group", values=["exposed_ms", "comm_ms"], aggregate_function="first")
        st.dataframe(table, hide_index=True)
    else:
        st.info("Neither run has collectives.")


render()
