"""Compare: two runs side by side, what got better or worse, and which buckets or units changed most.

Everything here comes from what the catalog stored at ingest (headline, per-step
figures, per-bucket/unit figures), so pruned runs compare too.
"""

from __future__ import annotations

import streamlit as st

from overlapscope.analyzer import gate
from overlapscope.dashboard import charts, context, data, shape, tables
from overlapscope.dashboard.text import md

# The headline's figures (analyzer/headline.py: the median step of the slowest rank).
HEADLINE = (("step_ms", "Step", "ms"), ("exposed_comm_ms", "Exposed comm", "ms"),
            ("overlap_pct", "Overlap", "%"), ("comm_ms", "Comm", "ms"))
TOP_GROUPS = 30  # rows of the table
TOP_CHART = 15  # groups in the chart


def picker_label(run: dict) -> str:
    """A run in Compare's pickers: name, id, date, then its commit and other tags (cut at 60
    characters: the whole run is in the sidebar and History)."""
    tags = dict(run.get("tags") or {})
    commit = tags.pop("commit", None) or tags.pop("sha", None)
    extra = ([f"commit {commit[:12]}"] if commit else []) + [f"{k}={v}" for k, v in sorted(tags.items())]
    words = " · ".join(extra)
    return context.run_label(run) + (f" · {words[:60]}{'…' if len(words) > 60 else ''}" if words else "")


def default_b(runs: list[dict], a: dict) -> dict | None:
    """Run B at first: the previous run of A's name (what ``check`` compares with), else the run
    stored just before A, else the one just after; None with A alone."""
    older = [r for r in runs if r["run_id"] < a["run_id"]]
    same = [r for r in older if r["name"] == a["name"]]
    if same or older:
        return max(same or older, key=lambda r: r["run_id"])
    newer = [r for r in runs if r["run_id"] > a["run_id"]]
    return min(newer, key=lambda r: r["run_id"]) if newer else None


def _pick(ctx) -> tuple[dict, dict]:
    # the sidebar's filter applies here too; the run it selects is always among the choices
    shown = ctx.shown if any(r["run_id"] == ctx.run["run_id"] for r in ctx.shown) else [ctx.run, *ctx.shown]
    by_id = {r["run_id"]: r for r in sorted(shown, key=lambda r: -r["run_id"])}
    ids = list(by_id)
    state = st.session_state
    if state.get("cmp_a") not in by_id:  # first visit: A is the sidebar's run
        state["cmp_a"] = ctx.run["run_id"]
    left, right = st.columns(2)
    a = left.selectbox("Run A", ids, format_func=lambda i: picker_label(by_id[i]), key="cmp_a")
    if state.get("cmp_b_for") != a or state.get("cmp_b") not in by_id:  # a new A: B is A's previous run
        state["cmp_b"] = (default_b(list(by_id.values()), by_id[a]) or by_id[a])["run_id"]
        state["cmp_b_for"] = a
    b = right.selectbox("Run B", ids, format_func=lambda i: picker_label(by_id[i]), key="cmp_b")
    return by_id[a], by_id[b]


def _headline(a: dict, b: dict, comparison: dict) -> None:
    """Run B's figures with the change from run A, green when B is better, red when worse."""
    rows = {m["metric"]: m for m in comparison["metrics"]}
    cols = st.columns(len(HEADLINE))
    for col, (key, label, unit) in zip(cols, HEADLINE):
        row = rows[key]
        va, vb = row["baseline_value"], row["value"]
        same = row["change"] == 0
        delta = None if row["change"] is None else "same as A" if same else f"{row['change']:+.2f} {unit} (B − A)"
        col.metric(label, "–" if vb is None else f"{vb:.2f} {unit}", delta,
                   delta_color="off" if same else "normal" if gate.HIGHER_IS_BETTER[key] else "inverse",
                   delta_arrow="off" if same else "auto",
                   help=f"Run B; run A: {'–' if va is None else f'{va:.2f} {unit}'}. Green: B is better.")


def _side_by_side(comparison: dict) -> None:
    """Every headline metric of both runs, the change and whether B is better or worse."""
    tables.show([{**m, "metric": shape.figure_label(m["metric"]),
                  "change_words": None if m["verdict"] is None else gate.change_words(m["worse_pct"])}
                 for m in comparison["metrics"]], shape.SIDE_BY_SIDE_TABLE)


def _groups(comparison: dict, names: dict) -> None:
    changed = comparison["groups"]
    if not changed:
        st.info("Neither run has collectives.")
        return
    rows = [{"run": names[side], "group": g["label"], "exposed_ms": g[key]}
            for g in changed[:TOP_CHART] for side, key in (("A", "baseline_exposed_ms"), ("B", "exposed_ms"))]
    st.altair_chart(charts.compare_groups(rows, "exposed_ms", "mean exposed comm per collective (ms)"),
                    width="stretch")
    tables.show(changed[:TOP_GROUPS], shape.COMPARE_GROUP_TABLE)
    st.caption("Mean exposed time per collective of each bucket, unit or other collective, largest change "
               "first; a group only one run has counts from zero.")


def render() -> None:
    ctx = context.current()
    context.require_run(ctx)
    st.title("Compare two runs")
    if len(ctx.runs) < 2:
        st.info("The catalog holds one run: upload another to compare.")
        return
    a, b = _pick(ctx)
    names = {"A": f"A: {a['name']} #{a['run_id']}", "B": f"B: {b['name']} #{b['run_id']}"}
    comparison = data.comparison(ctx.db, b["run_id"], data.stamp(b), a["run_id"], data.stamp(a))
    for warning in comparison["warnings"]:
        st.warning(f"These runs may not be comparable: {md(warning)}.", icon=":material/warning:")
    _headline(a, b, comparison)
    with st.expander("Every headline metric, side by side"):
        _side_by_side(comparison)
    analyses = {names["A"]: data.analysis(*ctx.key(a)), names["B"]: data.analysis(*ctx.key(b))}
    st.subheader("Per profiled step (mean over ranks)")
    metric = st.segmented_control("Metric", ["step_ms", "exposed_comm_ms", "comm_ms", "compute_ms"],
                                  default="step_ms", key="cmp_metric", format_func=shape.figure_label) or "step_ms"
    step_rows = shape.compare_steps(analyses)
    st.altair_chart(charts.compare_steps(step_rows, metric, shape.figure_label(metric)), width="stretch")
    st.caption("Steps are matched by position: the k-th profiled step of each run.")

    st.subheader("Per bucket or unit: what changed most")
    _groups(comparison, names)


render()
