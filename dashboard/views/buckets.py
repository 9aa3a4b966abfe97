"""Buckets & units: exposed against hidden comm per DDP bucket, FSDP unit and phase;
bus bandwidth; the model's prediction beside the measurement."""

from __future__ import annotations

import streamlit as st

from overlapscope.dashboard import charts, context, data, shape, tables
from overlapscope.dashboard.text import md

KIND_LABELS = {"ddp_bucket": "DDP buckets", "fsdp_unit": "FSDP units", "other": "other collectives"}
TOP = 40


def _measured(measured: dict) -> str:
    f, w = measured.get("flops_per_s"), measured.get("bus_bandwidth_bytes_per_s")
    f_text = f"F = {f / 1e12:.3g} TFLOP/s ({measured['flops_source']})" if f else "F unknown (no FLOP counts)"
    w_text = f"W = {w / 1e9:.3g} GB/s ({measured['bandwidth_source']})" if w else "W unknown (no collective sizes)"
    return f"{f_text} · {w_text}"


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    st.title(f"Buckets & units · {md(run['name'])}")
    context.require_analyses(ctx, "its collectives")
    result = data.buckets(*ctx.key())
    summary = result["summary"]
    if not summary:
        st.info("No collectives in these traces.")
        return
    kinds = [k for k in KIND_LABELS if any(s["kind"] == k for s in summary)]
    chosen = st.pills("Show", kinds, default=kinds, selection_mode="multi", format_func=KIND_LABELS.get,
                      key=f"bk_kinds_{run['run_id']}") or kinds
    groups = shape.group_rows([s for s in summary if s["kind"] in chosen], top=TOP)
    shown = sum(1 for s in summary if s["kind"] in chosen)
    if shown > len(groups):
        st.caption(f"The {len(groups)} most exposed of {shown} groups.")
    if any(s["inferred"] for s in summary):
        st.caption("Some buckets or units are inferred from the order of the collectives "
                   "(the trace has no tracer annotations).")

    st.subheader("Exposed and hidden comm per collective")
    st.altair_chart(charts.exposed_hidden(groups), width="stretch")
    st.caption("Mean per collective over ranks and steps. Orange-red: exposed (no compute of the rank runs); sky blue: hidden.")

    left, right = st.columns(2)
    with left:
        st.subheader("Bus bandwidth")
        w = result["measured"].get("bus_bandwidth_bytes_per_s")
        if any(g["busbw_gbps"] is not None for g in groups):
            st.altair_chart(charts.bus_bandwidth(groups, w / 1e9 if w else None), width="stretch")
        else:
            st.info("No bus bandwidth: the traces give no collective sizes (bytes).")
        st.caption(f"Median over instances of each transfer's bus bandwidth (nccl-tests' definition; the time "
                   f"waiting for a late peer left out). The dashed line is the run's W: bars well below it are "
                   f"latency-bound (small messages) or slowed by something else on the link. "
                   f"{_measured(result['measured'])}")
    with right:
        st.subheader("Predicted beside measured")
        if any(g.get("predicted_comm_ms") is not None for g in groups):
            st.altair_chart(charts.predicted_vs_measured(groups), width="stretch")
            st.caption("Predicted from the bytes, W and the latency term (ring collectives), and the "
                       "model's overlap timeline (docs/model.md) for exposed time.")
        else:
            st.info("No prediction: the model needs W (collective sizes or a calibration).")

    st.subheader("Per bucket, unit and phase")
    tables.show(shape.with_mb(groups), shape.GROUP_TABLE)
    st.caption("Times are the mean of one collective over ranks and steps; hidden = comm − exposed.")
    st.subheader("Per step: measured and predicted")
    tables.show(result["steps"], shape.BUCKET_STEP_TABLE)


render()
