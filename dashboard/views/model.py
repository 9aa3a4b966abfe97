"""Model: comm time over backward time against tokens per GPU (the data-parallel model's F/W
threshold, with this run's point), model-state memory per ZeRO stage against the
device memory and the measured peak, and What if: the run replayed under other
settings (``overlapscope whatif``), with a sweep drawn."""

from __future__ import annotations

import streamlit as st

from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.predict.changes import SWEEPS, sweep_family
from overlapscope.dashboard import charts, context, data, shape, tables
from overlapscope.dashboard.text import md


AS_MEASURED = "as measured"  # an empty input: the run's own setting


def _ratio_section(result: dict, analysis: dict, run_id: int) -> None:
    st.subheader("Does the communication hide? Comm time / backward time against tokens per GPU")
    threshold = shape.hide_threshold(result["model"])
    if threshold["tokens_to_hide"] is None:
        st.info("Cannot draw the model's curve: missing " + ", ".join(threshold["missing"]) + ".")
        return
    if not threshold["tokens"]:
        entered = st.number_input("Tokens per GPU per micro-batch (not in the manifest: enter it to place this run)",
                                  min_value=1, value=None, step=512, key=f"model_tokens_{run_id}",
                                  placeholder="not known")
        threshold = {**threshold, "tokens": entered or None, "verdict": shape.verdict_at(threshold, entered)}
    measured = shape.measured_ratio(analysis["steps"])
    points = shape.run_points(threshold, measured)
    curve = shape.ratio_curve(threshold["tokens_to_hide"], threshold["tokens"])
    st.altair_chart(charts.hide_ratio(curve, threshold["tokens_to_hide"], points, measured), width="stretch")
    f, w = threshold["flops_per_s"], threshold["bus_bandwidth_bytes_per_s"]
    group = (f"HSDP: {threshold['stage']} in shard groups of {threshold['gpus']} GPUs plus the all-reduce across "
             f"{threshold['replicas']} replicas" if threshold.get("replicas") else
             f"Stage {threshold['stage']}, {threshold['gpus']} GPUs")
    st.caption(
        f"{group}, F = {f / 1e12:.3g} TFLOP/s, W = {w / 1e9:.3g} GB/s, "
        f"{threshold['grad_bytes']:g} bytes per reduced gradient: comm hides when T ≥ T_hide = "
        f"{threshold['tokens_to_hide']:,.0f} tokens (ratio ≤ 1; the model's F/W (N-1)/N scaled by the stage and dtype). "
        "The measured point is the median step's comm over 2/3 of its compute (the backward's share of the FLOPs).")
    if not threshold["tokens"]:
        st.info("This run's point needs the tokens per GPU per micro-batch (`tokens_per_microbatch` in the "
                "tracer's manifest, or enter it above); the orange level is the measured ratio.")
    elif threshold["verdict"]:
        overlap = (analysis.get("headline") or {}).get("overlap_pct")
        # the verdict is what the model says the run could hide; beside a run that hides little, say so
        gap = (f" The model's verdict, not the run's: this run measured {overlap:.1f} % overlap (why is below)."
               if threshold["verdict"] == "hidden" and overlap is not None and overlap < 50 else "")
        st.markdown(f"Verdict at T = {threshold['tokens']:,.0f}: **{threshold['verdict']}**.{gap}")


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
        tables.show(found["rows"], shape.DISAGREEMENT_TABLE)
        st.caption("Explained by: order (the run's own bucket or unit order and timing), late_rank (waiting for a "
                   "late rank), slow_transfers (longer than W predicts), host_bound (device idle), cpu_sharing "
                   "(gloo's threads share the cores with compute), model_inputs (the run hides more than the "
                   "model expects); term (ms) is that term's figure per step.")


def _memory_section(result: dict, facts: dict, run_id: int) -> None:
    st.subheader("Model-state memory per GPU, per ZeRO stage")
    peaks = [m["peak_allocated_bytes"] for m in result["memory"] if m["peak_allocated_bytes"]]
    peak = max(peaks) if peaks else None
    device = facts["device_memory_bytes"]
    params = facts["params"] or st.number_input(
        "Parameters (not in the manifest: enter the model's size to draw the stages)", min_value=1, value=None,
        step=1_000_000, key=f"model_params_{run_id}", placeholder="not known")
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


SWITCH = {"as measured": None, "on": "on", "off": "off"}


def _whatif_controls(parallelism: str, run_id: int) -> tuple[tuple, str | None]:
    """The panel's changes as (flag, value) pairs, and the sweep spec."""
    flags: list[tuple[str, object]] = []
    key = f"wi_{run_id}_"
    cols = st.columns(4)
    if parallelism == "ddp":
        mb = cols[0].number_input("Bucket cap (MiB)", min_value=0.0, value=None, step=5.0, key=key + "mb",
                                  placeholder=AS_MEASURED, help="DDP's bucket_cap_mb; empty keeps the measured buckets.")
        if mb:
            flags.append(("bucket-mb", f"{mb:g}"))
        sync = cols[1].selectbox("Accumulation", ["as measured", "sync every micro-batch", "no_sync"],
                                 key=key + "sync")
        if sync != "as measured":
            flags.append(("sync", sync == "sync every micro-batch"))
        accum = cols[2].number_input("Micro-batches", min_value=1, value=None, step=1, key=key + "accum",
                                     placeholder=AS_MEASURED, help="Empty keeps the measured count.")
        if accum:
            flags.append(("accum", str(accum)))
    else:
        for col, (flag, label) in zip(cols, (("reshard-after-forward", "Reshard after forward"),
                                             ("forward-prefetch", "Forward prefetch"),
                                             ("backward-prefetch", "Backward prefetch"))):
            choice = col.selectbox(label, list(SWITCH), key=key + flag)
            if SWITCH[choice]:
                flags.append((flag, SWITCH[choice]))
        wrap = cols[3].selectbox("Wrapping", ["as measured", "per-block", "root-only"], key=key + "wrap")
        if wrap != "as measured":
            flags.append(("wrap", wrap))
    cols = st.columns(4)
    tokens = cols[0].number_input("Tokens (x measured)", min_value=0.0, value=1.0, step=0.5, key=key + "tokens")
    if tokens != 1.0 and tokens > 0:
        flags.append(("tokens", f"{tokens:g}x"))
    bandwidth = cols[1].number_input("Bandwidth (x measured)", min_value=0.0, value=1.0, step=0.5,
                                     key=key + "bw")
    w_abs = cols[2].number_input("Bandwidth (GB/s)", min_value=0.0, value=None, step=10.0, key=key + "bwabs",
                                 placeholder=AS_MEASURED,
                                 help="The links' bus bandwidth W: collectives at latency + wire / W, without this "
                                      "run's level. Empty keeps the multiple beside it.")
    if w_abs:
        flags.append(("bandwidth", f"{w_abs:g}G"))
    elif bandwidth != 1.0 and bandwidth > 0:
        flags.append(("bandwidth", f"{bandwidth:g}x"))
    dtype = cols[3].selectbox("Reduce dtype", ["as measured", "bf16", "fp32"], key=key + "dtype")
    if dtype != "as measured":
        flags.append(("reduce-dtype", dtype))
    cols = st.columns(4)
    gpus = cols[0].number_input("GPUs", min_value=1, value=None, step=1, key=key + "gpus", placeholder=AS_MEASURED,
                                help="Data-parallel world size; empty keeps the measured one.")
    if gpus:
        flags.append(("gpus", str(gpus)))
    if parallelism != "ddp":
        hsdp = cols[1].number_input("HSDP shard group", min_value=1, value=None, step=1, key=key + "hsdp",
                                    placeholder=AS_MEASURED,
                                    help="Shard within groups of this many ranks, replicate across them; empty: as "
                                         "measured.")
        intra = cols[2].number_input("Intra-group W (GB/s)", min_value=0.0, value=None, step=10.0, key=key + "intra",
                                     placeholder="the run's", disabled=not hsdp,
                                     help="Bus bandwidth inside a shard group; empty: the run's.")
        inter = cols[3].number_input("Inter-group W (GB/s)", min_value=0.0, value=None, step=10.0, key=key + "inter",
                                     placeholder="the calibration's", disabled=not hsdp,
                                     help="Bus bandwidth across the groups (HSDP's all-reduce); empty: the "
                                          "calibration's.")
        if hsdp:
            flags.append(("hsdp", str(hsdp)))
            flags += [(flag, f"{w:g}G") for flag, w in (("intra-bandwidth", intra), ("inter-bandwidth", inter)) if w]
    options = SWEEPS[sweep_family(parallelism)]
    cols = st.columns([1, 3])
    name = cols[0].selectbox("Sweep", list(options), key=key + "sweep")
    values = cols[1].text_input(f"Values of --{name}", value=options[name], key=key + f"sweep_{name}",
                                help="Comma-separated, as the command line takes them (e.g. 1,5,25 or 0.5x,2x).")
    return tuple(flags), (f"{name}={values}" if values.strip() else None)


def _delta(change_ms: float) -> dict:
    """A metric's change against the measured run: lower is better; under 0.005 ms it is no change
    (neither a red +0.00 nor a green -0.00)."""
    if abs(change_ms) < 0.005:
        return {"delta": "no change", "delta_color": "off", "delta_arrow": "off"}
    return {"delta": f"{change_ms:+,.2f} ms", "delta_color": "inverse"}


def _figure_row(p: dict) -> None:
    m, pred = p["measured"], p["predicted"]
    cols = st.columns(4)
    cols[0].metric("Step (predicted)", f"{pred['step_ms']:,.2f} ms", **_delta(-pred["gain_ms"]),
                   help=f"measured {m['step_ms']:,.2f} ms; the slowest rank's median step")
    cols[1].metric("Exposed comm (predicted)", f"{pred['exposed_comm_ms']:,.2f} ms",
                   **_delta(pred["exposed_comm_ms"] - m["exposed_comm_ms"]),
                   help=f"measured {m['exposed_comm_ms']:,.2f} ms")
    overlap = pred["overlap_pct"]
    cols[2].metric("Overlap (predicted)", "–" if overlap is None else f"{overlap:.1f} %",
                   help=f"measured {m['overlap_pct']} %")
    cols[3].metric("Replay error (no change)", f"{p['replayed']['error_pct_of_step']:+.2f} %",
                   help="The replay of the run as measured against its measurement, % of the step.")


def _whatif_section(ctx, run: dict) -> None:
    st.subheader("What if: this run replayed under other settings")
    base = data.whatif(*ctx.key(), ())
    if base["predicted"] is None:
        st.info("; ".join(base["warnings"]) or "Nothing to replay in this run.")
        return
    parallelism = "ddp" if (base["run"].get("parallelism") or "ddp") == "ddp" else "fsdp"
    flags, sweep = _whatif_controls(parallelism, run["run_id"])
    try:
        p = data.whatif(*ctx.key(), flags, sweep)
    except UsageError as e:
        st.error(md(str(e)))
        return
    st.caption(f"**{md(p['label'])}** · the same on the command line:")
    st.code(shape.whatif_command(run["name"], p["label"], sweep if p.get("sweep") else None), language="bash")
    _figure_row(p)
    memory = p.get("memory") or {}
    if memory.get("predicted_peak_bytes"):
        fits = {True: "fits", False: ":red[does not fit]", None: "fit unknown"}[memory.get("fits")]
        states = memory.get("predicted_model_state_bytes")
        st.caption(f"Memory per GPU: {memory['predicted_peak_bytes'] / 1e9:.3g} GB predicted peak "
                   + (f"(model states {states / 1e9:.3g} GB, {memory['predicted_stage']})" if states is not None
                      else "(model states unknown: no parameter count in the manifest)")
                   + f", {fits}.")
    for w in p["warnings"]:
        st.warning(md(w))
    if sweep and p.get("sweep"):
        sw = p["sweep"]
        st.altair_chart(charts.whatif_sweep(shape.whatif_points(sw), sw["measured"], sw["name"],
                                            sw.get("measured_value")), width="stretch")
        st.caption("Each point is the run replayed at that value, on top of the settings above; dashed: as "
                   "measured" + (f", the diamonds at the run's own --{md(sw['name'])} "
                                 f"({md(sw['measured_value'])})" if sw.get("measured_value") else "")
                   + ". Points whose memory does not fit are marked in the tooltip.")
    with st.expander("Terms of each predicted collective"):
        tables.show(shape.with_mb([{**c, "id": "(root)" if c["id"] == "" else c["id"]} for c in p["collectives"]]),
                    shape.WHATIF_COLLECTIVE_TABLE)
        st.caption("Assumes: " + md("; ".join(p["assumptions"])))


def render() -> None:
    ctx = context.current()
    run = context.require_run(ctx)
    st.title(f"Model · {md(run['name'])}")
    context.require_analyses(ctx, "the model's comparison with the trace")
    result = data.buckets(*ctx.key())
    _ratio_section(result, data.analysis(*ctx.key()), run["run_id"])
    _reconciled(result)
    _memory_section(result, data.facts(*ctx.key()), run["run_id"])
    _whatif_section(ctx, run)


render()
