"""Model: comm time over backward time against tokens per GPU (the data-parallel model's F/W
threshold, with this run's point), and model-state memory per ZeRO stage
against the device memory and the measured peak."""

from __future__ import annotations

import streamlit as st

from overlapscope.dashboard import charts, context, data, shape
from overlapscope.dashboard.text import md


def _ratio_section(result: dict, analysis: dict, run_id: int) -> None:
    st.subheader("Does the communication hide? Comm time / backward time against tokens per GPU")
    threshold = shape.hide_threshold(result["model"])
    if threshold["tokens_to_hide"] is None:
        st.info("Cannot draw the model's curve: missing " + ", ".join(threshold["missing"]) + ".")
        return
    if not threshold["tokens"]:
        entered = st.number_input("Tokens per GPU per micro-batch (not in the manifest: enter it to place this run)",
                                  min_value=0, value=0, step=512, key=f"model_tokens_{run_id}")
        threshold = {**threshold, "tokens": entered or None, "verdict": shape.verdict_at(threshold, entered)}
    measured = shape.measured_ratio(analysis["steps"])
    points = shape.run_points(threshold, measured)
    curve = shape.ratio_curve(threshold["tokens_to_hide"], threshold["tokens"])
    st.altair_chart(charts.hide_ratio(curve, threshold["tokens_to_hide"], points, measured), width="stretch")
    f, w = threshold["flops_per_s"], threshold["bus_bandwidth_bytes_per_s"]
    st.caption(
        f"Stage {threshold['stage']}, {threshold['gpus']} GPUs, F = {f / 1e12:.3g} TFLOP/s, W = {w / 1e9:.3g} GB/s, "
        f"{threshold['grad_bytes']:g} bytes per reduced gradient: comm hides when T ≥ T_hide = "
        f"{threshold['tokens_to_hide']:,.0f} tokens (ratio ≤ 1; the model's F/W (N-1)/N scaled by the stage and dtype). "
        "The measured point is the median step's comm over 2/3 of its compute (the backward's share of the FLOPs).")
    if not threshold["tokens"]:
        st.info("This run's point needs the tokens per GPU per micro-batch (`tokens_per_microbatch` in the "
                "tracer's manifest, or enter it above); the orange level is the measured ratio.")
    elif threshold["verdict"]:
        st.markdown(f"Verdict at T = {threshold['tokens']:,.0f}: **{threshold['verdict']}**.")


def _reconciled(result: dict) -> None:
    """Where the verdict and the measured exposure disagree, which term explains it."""
    found = shape.disagreements(result["model"])
    if found is None:
        st.caption("The model and the measurement agree within 3% of the step on every rank and step.")
        return
    rank, step = found["example_at"]
    st.warning(f"The measurement disagrees with the model on {len(found['rows'])} of {found['of']} rank-steps "
               f"(by more than 3% of the step). Most are explained by **{found['term'].replace('_', ' ')}**; "
               f"rank {rank}, step {step}: {found['example']}.")
    with st.expander("Model beside measurement, per rank and step"):
        st.dataframe(found["rows"], hide_index=True)
        st.caption("explained_by: order (the run's own bucket or unit order and timing), late_rank (waiting for a "
                   "late rank), slow_transfers (longer than W predicts), host_bound (device idle), cpu_sharing "
                   "(gloo's threads share the cores with compute), model_inputs (the run hides more than the "
                   "model expects); term_ms is that term's figure per step.")


def _memory_section(result: dict, facts: dict, run_id: int) -> None:
    st.subheader("Model-state memory per GPU, per ZeRO stage")
    peaks = [m["peak_allocated_bytes"] for m in result["memory"] if m["peak_allocated_bytes"]]
    peak = max(peaks) if peaks else None
    device = facts["device_memory_bytes"]
    params = facts["params"] or st.number_input(
        "Parameters (not in the manifest: enter the model's size to draw the stages)", min_value=0, value=0,
        step=1_000_000, key=f"model_params_{run_id}")
    if not params:
        st.info("Cannot draw the stages: the parameter count is unknown (it comes from the tracer's manifest). "
                + (f"Measured peak allocated: {peak / 1e9:.3g} GB. " if peak else "")
                + (f"Device memory: {device / 1e9:.3g} GB." if device else ""))
        return
    rows = shape.memory_rows(params, facts["world_size"], facts["hsdp_group"])
    largest = max([r["total_bytes"] for r in rows] + [peak or 0])
    drawn_device = device if shape.on_scale(device, largest) else None
    st.altair_chart(charts.memory(rows, drawn_device, peak), width="stretch")
    notes = [f"{params:,} parameters on {facts['world_size']} GPUs; bf16 weights and gradients and "
             "K = 12 optimizer bytes per parameter (mixed-precision Adam); activations not included."]
    if device and not drawn_device:
        notes.append(f"Device memory ({device / 1e9:.3g} GB, from the {facts['device_memory_source']}) is "
                     f"{device / largest:,.0f}x the largest stage: left off the chart.")
    else:
        notes.append(f"Device memory from the {facts['device_memory_source']}." if device else
                     "Device memory unknown (no deviceProperties in the traces, no devices in the manifest).")
    notes.append("Measured peak: the largest allocated bytes of any rank (profile_memory)." if peak else
                 "No measured peak: the traces have no memory events (profile_memory=True records them).")
    st.caption(" ".join(notes))


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    st.title(f"Model · {md(run['name'])}")
    context.require_analyses(ctx, "the model's comparison with the trace")
    result = data.buckets(*ctx.key())
    _ratio_section(result, data.analysis(*ctx.key()), run["run_id"])
    _reconciled(result)
    _memory_section(result, data.facts(*ctx.key()), run["run_id"])


render()
