"""Timeline: one step on a set of ranks, lane per GPU stream (or CPU thread), with the
exposed parts of comm in orange-red. Large traces are merged into busy blocks."""

from __future__ import annotations

import streamlit as st

from overlapscope.contract import api
from overlapscope.dashboard import charts, context, data, shape, tables
from overlapscope.dashboard.text import md


def _pickers(ctx, result: dict, steps: list[dict]) -> tuple[int, list[int]]:
    worst = result["headline"]["slowest_step"]
    numbers = [s["step"] for s in steps]
    default_step = worst["step"] if worst and worst["step"] in numbers else numbers[0]
    ranks = [r["rank"] for r in result["ranks"]]
    left, right = st.columns([1, 3])
    step = left.selectbox("Step", numbers, index=numbers.index(default_step), key=f"tl_step_{ctx.run['run_id']}",
                          help="The slowest step is selected first.")
    chosen = right.multiselect("Ranks", ranks, default=shape.default_ranks(result["ranks"], result["headline"]["slowest_rank"]),
                               key=f"tl_ranks_{ctx.run['run_id']}",
                               help="Few ranks draw faster; every lane is one GPU stream or CPU thread.")
    return step, chosen


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    st.title(f"Timeline · {md(run['name'])}")
    context.require_events(run, "its timeline")
    st.link_button("Download for Perfetto", api.path(api.PERFETTO, run_id=run["run_id"]), icon=":material/download:",
                   help="Every rank on one clock in one Chrome-trace JSON (gzip), with exposed comm, collectives, "
                        "steps and findings as extra tracks: open it at ui.perfetto.dev. The same file as "
                        f"`overlapscope export --run #{run['run_id']} --perfetto OUT.json.gz`.")
    result = data.analysis(*ctx.key())
    steps = data.steps(*ctx.key())
    if not steps:
        st.info("These traces have no ProfilerStep windows, so there is no step to draw.")
        return
    step, ranks = _pickers(ctx, result, steps)
    if not ranks:
        st.info("Choose at least one rank.")
        return
    aligned = st.toggle("Ranks on one clock", value=True, key=f"tl_aligned_{ctx.run['run_id']}",
                        help="Each rank's clock offset, estimated from the moments all ranks leave a collective "
                             "together, is added to its times, so a rank that arrives late shows late. Off: each "
                             "rank from its own step start.")
    tl = data.timeline(*ctx.key(), step, tuple(sorted(ranks)), ctx.settings.timeline_marks, aligned)
    if not tl["lanes"]:
        st.info(f"No device work in step {step} on the chosen ranks.")
        return
    st.altair_chart(charts.timeline(tl), width="stretch")
    st.caption("Blue compute, sky-blue comm hidden behind compute, **orange-red comm exposed** (no compute of the "
               "rank runs), orange memcpy, yellow memset; grey is the step's window. "
               + ("Ranks are on one clock (offsets in the table below): a rank that starts late or arrives late "
                  "at a collective shows late, and the others' comm waits for it. " if tl["aligned"] else
                  "Times are from each rank's own step start. ")
               + "Lanes marked (NCCL) are the GPU streams that run the collectives. "
               "Scroll or drag to zoom; hover for name, bucket or unit, bytes and duration.")
    if tl["aggregated"]:
        st.info(f"Aggregated: {tl['raw_marks']:,} marks are drawn as {tl['drawn_marks']:,} "
                f"(at most about {tl['max_marks']:,} per chart). Lanes with many events show busy blocks; "
                "hover a block for how many events it merged and the longest one. Choose fewer ranks for detail.")
    st.subheader("In this window")
    tables.show(tl["windows"], shape.WINDOW_TABLE)
    st.caption("Exposed comm here counts the comm that runs in the window; the overview's per-step figure "
               "counts the comm the step launched (it may run past the window's end).")


render()
