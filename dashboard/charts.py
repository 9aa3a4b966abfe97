"""Chart builders: plain rows in, an Altair chart out. Pure: no Streamlit, no catalog.

Colours (Okabe-Ito, told apart by colour-blind readers too): compute blue, hidden comm sky blue,
exposed comm vermillion (orange-red), memcpy orange, memset yellow, idle grey; outlines black.
"""

from __future__ import annotations

import json

import altair as alt
import polars as pl

COMPUTE, COMM, EXPOSED = "#0072B2", "#56B4E9", "#D55E00"
MEMCPY, MEMSET, IDLE, HIGHLIGHT = "#E69F00", "#F0E442", "#BBBBBB", "#000000"
WINDOW = "#E8ECF1"  # a timeline's step window: where it shows, nothing runs
KIND_COLORS = {"compute": COMPUTE, "comm": COMM, "memcpy": MEMCPY, "memset": MEMSET, "exposed": EXPOSED}
# the timeline's key: comm left sky blue is the hidden part (its exposed part is drawn on top)
KIND_LABELS = {"comm": "hidden comm", "exposed": "exposed comm", "idle": "idle (the step's window)"}
LANE_PX = 26
# Drawn as SVG: text a reader can select, and that a browser test can read (a legend or
# label cut with an ellipsis). The timeline and the heatmap keep the canvas (many marks).
SVG = {"embedOptions": {"renderer": "svg"}}


def _frame(rows: list[dict], columns: list[str] | None = None) -> pl.DataFrame:
    """A DataFrame with at least ``columns`` (an empty one draws an empty chart, not an error)."""
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame({c: [] for c in columns or []})


def _long(rows: list[dict], parts: dict[str, str], name: str, value: str, **extra) -> list[dict]:
    """Wide rows to long ones: one row per (row, part) with the part's label and value."""
    return [{**{k: v for k, v in r.items() if k not in parts}, name: label, value: r.get(key), **extra}
            for r in rows for key, label in parts.items()]


def _kind_scale(kinds: list[str]) -> alt.Scale:
    return alt.Scale(domain=kinds, range=[KIND_COLORS[k] for k in kinds])


# --- overview ----------------------------------------------------------------------

# A mean step = compute + exposed comm + other (memcpy/memset only) + idle; the spill
# across step boundaries cancels out over the steps.
BREAKDOWN_PARTS = {"compute_ms": ("compute", COMPUTE), "exposed_comm_ms": ("exposed comm", EXPOSED),
                   "other_ms": ("other (memcpy only)", MEMCPY), "idle_ms": ("idle", IDLE)}


# Every label of a discrete axis, each on its own row or bar: Vega drops overlapping ones by
# default, and Streamlit's theme sets labelFlush, which moves a band axis's first and last
# labels off their rows (onto the next: "0" over "1" on a 64-rank heatmap).
EVERY_LABEL = {"labelOverlap": False, "labelFlush": False}

WHOLE_RANK_AXIS = 32  # up to this many ranks, every rank is labelled (upright beyond 16)


def step_breakdown(rank_rows: list[dict], highlight_rank: int | None = None) -> alt.Chart:
    """Per rank, its median step (the headline's aggregation) split into compute, exposed comm,
    other and idle (stacked); the highlighted rank (the headline's) is outlined. Tooltips add comm, hidden comm and overlap %."""
    labels = {key: label for key, (label, _) in BREAKDOWN_PARTS.items()}
    long = [{**r, "slowest": r["rank"] == highlight_rank} for r in _long(rank_rows, labels, "part", "ms")]
    long = _frame(long, ["rank", "part", "ms", "slowest", "comm_ms", "hidden_comm_ms", "step_ms", "overlap_pct"])
    parts = list(labels.values())
    ranks = sorted({r["rank"] for r in rank_rows})
    # every rank a bar; up to WHOLE_RANK_AXIS ranks every rank labelled (upright beyond 16), past it
    # every k-th, at most 16 labels: the others are read from the tooltip
    every = max(1, -(-len(ranks) // 16)) if len(ranks) > WHOLE_RANK_AXIS else 1
    x = {"x": alt.X("rank:O", title="rank" if every == 1 else f"rank (every {every}th labelled)",
                    axis=alt.Axis(labelAngle=-90 if 16 < len(ranks) <= WHOLE_RANK_AXIS else 0, **EVERY_LABEL,
                                  values=ranks[::every] if every > 1 else alt.Undefined))}
    return alt.Chart(long).mark_bar().encode(
        **x,
        y=alt.Y("ms:Q", title="median step (ms)", stack="zero"),
        color=alt.Color("part:N", title=None, sort=parts,
                        scale=alt.Scale(domain=parts, range=[c for _, c in BREAKDOWN_PARTS.values()])),
        order=alt.Order("part_order:Q"),
        stroke=alt.condition(alt.datum.slowest, alt.value(HIGHLIGHT), alt.value(None)),
        strokeWidth=alt.condition(alt.datum.slowest, alt.value(2), alt.value(0)),
        tooltip=[alt.Tooltip("rank:O"), alt.Tooltip("part:N"), alt.Tooltip("ms:Q", format=".3f"),
                 alt.Tooltip("step_ms:Q", title="step (ms)", format=".3f"),
                 alt.Tooltip("comm_ms:Q", title="comm (ms)", format=".3f"),
                 alt.Tooltip("hidden_comm_ms:Q", title="hidden comm (ms)", format=".3f"),
                 alt.Tooltip("overlap_pct:Q", title="overlap %", format=".1f")],
    ).transform_calculate(
        part_order=f"indexof({parts!r}, datum.part)"
    ).properties(usermeta=SVG, height=260)


def step_heatmap(steps: list[dict], metric: str = "step_ms", highlight: tuple[int, int] | None = None,
                 title: str | None = None) -> alt.Chart:
    """Rank x step grid coloured by ``metric`` (its legend titled ``title``); the highlighted
    (slowest) cell is outlined."""
    df = _frame([{**s, "slowest": (s["rank"], s["step"]) == highlight} for s in steps],
                ["rank", "step", metric, "compute_ms", "comm_ms", "exposed_comm_ms", "overlap_pct", "slowest"])
    base = alt.Chart(df).encode(x=alt.X("step:O", title="step", axis=alt.Axis(labelAngle=0, **EVERY_LABEL)),
                                y=alt.Y("rank:O", title="rank", axis=alt.Axis(**EVERY_LABEL)))
    cells = base.mark_rect().encode(
        color=alt.Color(f"{metric}:Q", title=title or metric.replace("_", " "), scale=alt.Scale(scheme="purples")),
        tooltip=[alt.Tooltip("rank:O"), alt.Tooltip("step:O"),
                 *[alt.Tooltip(f"{c}:Q", format=".3f") for c in ("step_ms", "compute_ms", "comm_ms",
                                                                   "exposed_comm_ms", "idle_ms", "other_ms",
                                                                   "spill_in_ms", "spill_out_ms") if c in df.columns],
                 alt.Tooltip("overlap_pct:Q", title="overlap %", format=".1f")],
    )
    outline = base.mark_rect(fill=None, stroke=HIGHLIGHT, strokeWidth=3).transform_filter(alt.datum.slowest)
    ranks = df["rank"].n_unique() if len(df) else 1
    # rows of 24 px (16 px beyond 32 ranks: the page scrolls), every rank labelled
    return (cells + outline).properties(height=alt.Step(24 if ranks <= 32 else 16))


# --- timeline ----------------------------------------------------------------------


def timeline(tl: dict) -> alt.LayerChart:
    """Lanes of one step: compute, comm, memcpy marks, the exposed parts of comm in
    vermillion on top (comm left sky blue is hidden), each rank's window in grey behind.
    Drag or scroll to zoom in time."""
    lanes = [lane["lane"] for lane in tl["lanes"]]
    columns = ["lane", "kind", "name", "start_ms", "end_ms", "dur_ms", "busy_ms", "marks", "coll_kind",
               "coll_id", "phase", "collective", "bytes", "coll_comm_ms", "coll_exposed_ms"]
    marks, exposed = _frame(tl["marks"], columns), _frame(tl["exposed"], columns)
    windows = {w["rank"]: (w.get("start_ms", 0.0), w.get("end_ms", w["window_ms"])) for w in tl["windows"]}
    background = _frame([{"lane": lane["lane"], "kind": "idle", "start_ms": windows.get(lane["rank"], (0.0, 0.0))[0],
                          "end_ms": windows.get(lane["rank"], (0.0, 0.0))[1]}
                         for lane in tl["lanes"]], columns=["lane", "kind", "start_ms", "end_ms"])
    kinds = [k for k in KIND_COLORS if k in set(marks["kind"]) | set(exposed["kind"])] or ["compute"]
    y = alt.Y("lane:N", sort=lanes, title=None, axis=alt.Axis(labelLimit=260, **EVERY_LABEL))
    first_ms = min((a for a, _ in windows.values()), default=0.0)
    last_ms = max((b for _, b in windows.values()), default=0.0) or None
    title = ("ms from the earliest step start (ranks on one clock)" if tl.get("aligned", False)
             else "ms from the step's start (each rank's own clock)")
    x = alt.X("start_ms:Q", title=title,
              scale=alt.Scale(domain=[first_ms, last_ms], nice=False) if last_ms else alt.Undefined)
    tooltip = [alt.Tooltip("lane:N"), alt.Tooltip("kind:N"), alt.Tooltip("name:N"),
               alt.Tooltip("start_ms:Q", format=".3f"), alt.Tooltip("dur_ms:Q", title="duration (ms)", format=".3f"),
               alt.Tooltip("marks:Q", title="events merged"), alt.Tooltip("busy_ms:Q", format=".3f"),
               alt.Tooltip("coll_kind:N", title="bucket/unit"), alt.Tooltip("coll_id:N", title="id"),
               alt.Tooltip("phase:N"), alt.Tooltip("bytes:Q", format=","),
               alt.Tooltip("coll_comm_ms:Q", title="collective comm (ms)", format=".3f"),
               alt.Tooltip("coll_exposed_ms:Q", title="collective exposed (ms)", format=".3f")]
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    # one key above the lanes, the step's window (idle where it shows) included
    keyed = kinds + ["idle"]
    scale = alt.Scale(domain=keyed, range=[KIND_COLORS.get(k, WINDOW) for k in keyed])
    label = " : ".join(f"datum.label == {json.dumps(k)} ? {json.dumps(v)}" for k, v in KIND_LABELS.items()) \
        + " : datum.label"
    color = alt.Color("kind:N", title=None, scale=scale, sort=keyed,
                      legend=alt.Legend(orient="top", direction="horizontal", labelExpr=label, labelLimit=0,
                                        symbolType="square", symbolStrokeWidth=0))
    back = alt.Chart(background).mark_bar().encode(x=x, x2="end_ms:Q", y=y, color=color).add_params(zoom)
    # an outline of the bar's own colour keeps a kernel of a fraction of a pixel visible
    stroke = alt.Stroke("kind:N", scale=scale, legend=None)
    drawn = alt.Chart(marks).mark_bar(strokeWidth=1).encode(x=x, x2="end_ms:Q", y=y, color=color, stroke=stroke,
                                                           tooltip=tooltip)
    hidden = alt.Chart(exposed).mark_bar(strokeWidth=1).encode(x=x, x2="end_ms:Q", y=y, color=color, stroke=stroke,
                                                              tooltip=tooltip)
    return alt.layer(back, drawn, hidden).properties(height=alt.Step(LANE_PX))


# --- buckets and units -------------------------------------------------------------


ROW_PX = 26  # a bar of a bucket or unit and its label (11 px text, with room above and below)


def exposed_hidden(groups: list[dict]) -> alt.Chart:
    """Per bucket/unit/phase: mean exposed (vermillion) and hidden (sky blue) comm per step."""
    keep = ("group", "comm_ms", "bytes", "count", "busbw_gbps", "exposed_ms", "hidden_ms")
    long = _frame(_long([{k: g.get(k) for k in keep} for g in groups], {"exposed_ms": "exposed", "hidden_ms": "hidden"},
                        "part", "ms"), ["group", "part", "ms", "comm_ms", "bytes", "count", "busbw_gbps"])
    order = [g["group"] for g in groups]
    return alt.Chart(long).mark_bar().encode(
        y=alt.Y("group:N", sort=order, title=None, axis=alt.Axis(labelLimit=280, **EVERY_LABEL)),
        x=alt.X("ms:Q", title="mean comm per collective (ms)", stack="zero"),
        color=alt.Color("part:N", title=None, scale=alt.Scale(domain=["exposed", "hidden"], range=[EXPOSED, COMM])),
        tooltip=["group:N", "part:N", alt.Tooltip("ms:Q", format=".3f"), alt.Tooltip("comm_ms:Q", format=".3f"),
                 alt.Tooltip("bytes:Q", format=","), alt.Tooltip("count:Q", title="collectives"),
                 alt.Tooltip("busbw_gbps:Q", title="bus bandwidth (GB/s)", format=".3f")],
    ).properties(usermeta=SVG, height=max(120, ROW_PX * len(order)))


def bus_bandwidth(groups: list[dict], measured_gbps: float | None = None) -> alt.Chart:
    """Median bus bandwidth (GB/s, nccl-tests) per group; the run's W as a rule."""
    df = _frame([{k: g.get(k) for k in ("group", "busbw_gbps", "bytes")} for g in groups
                 if g.get("busbw_gbps") is not None], ["group", "busbw_gbps", "bytes"])
    bars = alt.Chart(df).mark_bar(color=COMM).encode(
        y=alt.Y("group:N", sort=list(df["group"]), title=None, axis=alt.Axis(labelLimit=280, **EVERY_LABEL)),
        x=alt.X("busbw_gbps:Q", title="bus bandwidth (GB/s)"),
        tooltip=["group:N", alt.Tooltip("busbw_gbps:Q", format=".3f"), alt.Tooltip("bytes:Q", format=",")])
    chart = bars
    if measured_gbps:
        level = _frame([{"w": measured_gbps, "label": f"run's W = {measured_gbps:.3g} GB/s"}])
        rule = alt.Chart(level).mark_rule(color=HIGHLIGHT, strokeDash=[4, 3]).encode(x="w:Q", tooltip=["label:N"])
        # the label left of the line, inside the frame: W is often the largest value, at the right edge
        text = alt.Chart(level).mark_text(align="right", baseline="top", dx=-4, y=2, color=HIGHLIGHT).encode(
            x="w:Q", text="label:N")
        chart = bars + rule + text
    return chart.properties(usermeta=SVG, height=max(120, ROW_PX * max(1, len(df))))


def predicted_vs_measured(groups: list[dict]) -> alt.Chart:
    """Per group: measured and predicted comm, measured and predicted exposed (ms)."""
    fields = {"comm_ms": "comm, measured", "predicted_comm_ms": "comm, predicted",
              "exposed_ms": "exposed, measured", "predicted_exposed_ms": "exposed, predicted"}
    df = _frame(groups, ["group", *fields])
    long = _frame(_long([{k: g.get(k) for k in ("group", *fields)} for g in groups], fields, "what", "ms"),
                  ["group", "what", "ms"])
    colors = [COMM, "#B9DDF3", EXPOSED, "#F2BE99"]  # measured, then a light tint for predicted
    return alt.Chart(long).mark_bar().encode(
        y=alt.Y("group:N", sort=list(df["group"]), title=None, axis=alt.Axis(labelLimit=280, **EVERY_LABEL)),
        yOffset=alt.YOffset("what:N", sort=list(fields.values())),
        x=alt.X("ms:Q", title="ms per collective"),
        color=alt.Color("what:N", title=None, scale=alt.Scale(domain=list(fields.values()), range=colors)),
        tooltip=["group:N", "what:N", alt.Tooltip("ms:Q", format=".3f")],
    ).properties(usermeta=SVG, height=max(160, 72 * len(df)))  # four bars of 16 px a group, and a gap


# --- model -------------------------------------------------------------------------


def hide_ratio(curve: list[dict], t_hide: float, points: list[dict],
               measured_ratio: float | None = None) -> alt.LayerChart:
    """Comm time / backward time against tokens per GPU (log-log): the model's
    ratio T_hide / T, the threshold (ratio 1 at T = T_hide) and this run's points.
    Without points (tokens unknown) a measured ratio is drawn as a level instead."""
    df = _frame(curve, ["tokens", "ratio"])
    x = alt.X("tokens:Q", scale=alt.Scale(type="log"), title="tokens per GPU per micro-batch (T)")
    y = alt.Y("ratio:Q", scale=alt.Scale(type="log"), title="comm time / backward time")
    line = alt.Chart(df).mark_line(color=COMPUTE).encode(x=x, y=y, tooltip=[alt.Tooltip("tokens:Q", format=",.0f"),
                                                                           alt.Tooltip("ratio:Q", format=".3f")])
    one_row = _frame([{"ratio": 1.0, "tokens": df["tokens"].min() if len(df) else t_hide,
                       "label": "ratio 1: comm takes as long as the backward"}])
    one = alt.Chart(one_row).mark_rule(color="#64748b", strokeDash=[4, 3]).encode(y="ratio:Q", tooltip=["label:N"])
    one_label = alt.Chart(one_row).mark_text(align="left", baseline="top", dx=4, dy=4, color="#64748b").encode(
        x="tokens:Q", y="ratio:Q", text="label:N")
    at = alt.Chart(_frame([{"tokens": t_hide, "label": f"T_hide = {t_hide:,.0f} tokens"}])).mark_rule(
        color=HIGHLIGHT, strokeDash=[4, 3]).encode(x="tokens:Q", tooltip=["label:N"])
    label = alt.Chart(_frame([{"tokens": t_hide, "ratio": 1.0, "label": f"T_hide ≈ {t_hide:,.0f}"}])).mark_text(
        align="left", dx=6, dy=-8, color=HIGHLIGHT).encode(x="tokens:Q", y="ratio:Q", text="label:N")
    layers = [line, one, one_label, at, label]
    if measured_ratio is not None and not points:
        # its label at the right end, above the level: the ratio-1 label sits at the left end, below its
        # line, and a measured ratio near 1 would put the two on top of each other
        level = _frame([{"ratio": measured_ratio, "tokens": df["tokens"].max() if len(df) else t_hide,
                         "label": f"measured {measured_ratio:.3g} (T unknown)"}])
        layers.append(alt.Chart(level).mark_rule(color=MEMCPY, strokeDash=[2, 2]).encode(y="ratio:Q",
                                                                                       tooltip=["label:N"]))
        layers.append(alt.Chart(level).mark_text(align="right", baseline="bottom", dx=-4, dy=-3, color=MEMCPY).encode(
            x="tokens:Q", y="ratio:Q", text="label:N"))
    if points:
        layers.append(alt.Chart(_frame(points)).mark_point(size=120, filled=True).encode(
            x="tokens:Q", y="ratio:Q",
            color=alt.Color("source:N", title="this run",
                            scale=alt.Scale(domain=["model (F, W)", "measured"], range=["#1e3a8a", MEMCPY])),
            tooltip=["source:N", alt.Tooltip("tokens:Q", format=",.0f"), alt.Tooltip("ratio:Q", format=".3f")]))
    return alt.layer(*layers).properties(usermeta=SVG, height=320)


def _byte_unit(largest: float) -> tuple[str, float]:
    for name, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if largest >= size:
            return name, size
    return "bytes", 1.0


# device memory: a black dashed line, the limit; the measured peak: a solid vermillion line
MEMORY_LIMITS = {"device memory": (HIGHLIGHT, [6, 4]), "measured peak": (EXPOSED, [1, 0])}


def memory(rows: list[dict], device_bytes: float | None = None, peak_bytes: float | None = None) -> alt.LayerChart:
    """Model-state memory per GPU for each stage (weights, gradients, optimizer stacked),
    against the device memory and the measured peak (rules). Unit: GB, MB or KB (1e9, 1e6, 1e3)."""
    unit, size = _byte_unit(max([*(r["total_bytes"] for r in rows), device_bytes or 0, peak_bytes or 0, 1]))
    df = _frame([{**r, "amount": r["bytes"] / size, "total": r["total_bytes"] / size} for r in rows],
                ["stage", "part", "bytes", "total_bytes", "amount", "total"])
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    bars = alt.Chart(df).mark_bar().encode(
        x=alt.X("stage:N", sort=stages, title="stage", axis=alt.Axis(**EVERY_LABEL, labelAngle=0)),
        y=alt.Y("amount:Q", title=f"model states per GPU ({unit})", stack="zero"),
        color=alt.Color("part:N", title=None, sort=["weights", "gradients", "optimizer"],
                        scale=alt.Scale(range=[COMPUTE, COMM, "#94a3b8"])),
        tooltip=["stage:N", "part:N", alt.Tooltip("amount:Q", title=unit, format=".4g"),
                 alt.Tooltip("total:Q", title=f"stage total ({unit})", format=".4g")])
    rules = [{"amount": value / size, "what": what, "label": f"{what}: {value / size:.3g} {unit}"}
             for what, value in (("device memory", device_bytes), ("measured peak", peak_bytes)) if value]
    if not rules:
        return alt.layer(bars).properties(usermeta=SVG, height=300)
    drawn = [r["what"] for r in rules]
    colors = alt.Scale(domain=drawn, range=[MEMORY_LIMITS[w][0] for w in drawn])
    color = alt.Color("what:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0), scale=colors)
    dash = alt.StrokeDash("what:N", legend=None,
                          scale=alt.Scale(domain=drawn, range=[MEMORY_LIMITS[w][1] for w in drawn]))
    lines = alt.Chart(_frame(rules)).mark_rule(strokeWidth=2).encode(y="amount:Q", tooltip=["label:N"],
                                                                     color=color, strokeDash=dash)
    # each line's label at its left end, above it
    text = alt.Chart(_frame(rules)).mark_text(align="left", baseline="bottom", dy=-3, x=4, fontWeight="bold").encode(
        y="amount:Q", text="label:N", color=alt.Color("what:N", scale=colors, legend=None))
    return alt.layer(bars, lines, text).resolve_scale(color="independent").properties(usermeta=SVG, height=300)


# --- compare -----------------------------------------------------------------------


def compare_steps(rows: list[dict], metric: str = "step_ms", title: str | None = None) -> alt.Chart:
    """Two runs side by side per profiled step (by position), mean over ranks; ``title``: the y axis'."""
    df = _frame(rows, ["run", "step_index", "step", metric])
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("step_index:O", title="profiled step (position)", axis=alt.Axis(labelAngle=0, **EVERY_LABEL)),
        xOffset="run:N",
        y=alt.Y(f"{metric}:Q", title=title or metric.replace("_", " ")),
        color=alt.Color("run:N", title="run", scale=alt.Scale(range=[COMPUTE, MEMCPY]),
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
        tooltip=["run:N", "step:O", alt.Tooltip(f"{metric}:Q", title=title or metric, format=".3f")],
    ).properties(usermeta=SVG, height=260)


def compare_groups(rows: list[dict], metric: str = "exposed_ms", title: str | None = None) -> alt.Chart:
    """Two runs side by side per bucket/unit/phase; ``title``: the x axis'."""
    df = _frame(rows, ["run", "group", metric])
    groups = list(dict.fromkeys(r["group"] for r in rows))
    return alt.Chart(df).mark_bar().encode(
        y=alt.Y("group:N", sort=groups, title=None, axis=alt.Axis(labelLimit=280, **EVERY_LABEL)),
        yOffset="run:N",
        x=alt.X(f"{metric}:Q", title=title or metric.replace("_", " ")),
        color=alt.Color("run:N", title="run", scale=alt.Scale(range=[COMPUTE, MEMCPY]),
                        legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
        tooltip=["run:N", "group:N", alt.Tooltip(f"{metric}:Q", format=".3f")],
    ).properties(usermeta=SVG, height=max(120, 36 * len(groups)))


# --- history -----------------------------------------------------------------------

PICK = "pick"  # the History chart's click selection (Streamlit returns the picked run's id)
# Tableau 20, its ten dark colours first, then their light tints: 20 names before a colour repeats.
NAME_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#b6992d", "#499894", "#e15759", "#79706e", "#d37295", "#b07aa1",
               "#9d7660", "#a0cbe8", "#ffbe7d", "#8cd17d", "#f1ce63", "#86bcb6", "#ff9d9a", "#bab0ac", "#fabfd2",
               "#d4a6c8", "#d7b5a6"]


def history(rows: list[dict], metric: str, title: str) -> alt.LayerChart:
    """A headline metric over time: one line per run name, a point per run (click: that
    run), and the runs that regressed against the previous run of their name marked with
    a black triangle. Tooltips name the run, its tags and who pushed it. Drawn as SVG."""
    df = _frame([{**r, "stored": r["created_at"], "created_at": f"{r['created_at']}Z".replace(" ", "T")}
                 for r in rows],
                ["run_id", "name", "created_at", "stored", "value", "commit", "tags", "pushed_by", "regression",
                 "worse_pct"])
    names = list(dict.fromkeys(r["name"] for r in rows))
    x = alt.X("created_at:T", title="stored (UTC)", scale=alt.Scale(type="utc"),
              axis=alt.Axis(format="%b %d %H:%M", labelOverlap=True))
    y = alt.Y("value:Q", title=title, scale=alt.Scale(zero=False))
    # below the chart in columns, whole names (CI names are long); no colour repeats for 20 names
    color = alt.Color("name:N", title="run name", sort=names, scale=alt.Scale(domain=names, range=NAME_COLORS),
                      legend=alt.Legend(orient="bottom", columns=min(3, max(1, len(names))), labelLimit=0))
    tooltip = [alt.Tooltip("name:N"), alt.Tooltip("run_id:O", title="run"),
               alt.Tooltip("stored:N", title="stored (UTC)"), alt.Tooltip("value:Q", title=metric, format=".3f"),
               alt.Tooltip("commit:N"), alt.Tooltip("tags:N"), alt.Tooltip("pushed_by:N", title="pushed by"),
               alt.Tooltip("worse_pct:Q", title="worse than the previous run (%)", format=".1f")]
    base = alt.Chart(df)
    lines = base.mark_line(strokeWidth=2).encode(x=x, y=y, color=color)
    pick = alt.selection_point(name=PICK, fields=["run_id"], on="click")
    points = base.mark_point(filled=True, size=70, cursor="pointer").encode(
        x=x, y=y, color=color, tooltip=tooltip).add_params(pick)
    marked = base.transform_filter(alt.datum.regression).mark_point(
        shape="triangle-up", filled=True, size=260, color=HIGHLIGHT, stroke="white", strokeWidth=1).encode(
        x=x, y=y, tooltip=tooltip)
    return alt.layer(lines, points, marked).properties(height=340, usermeta=SVG)


# --- what if -----------------------------------------------------------------------

WHATIF_PARTS = {"step_ms": ("predicted step", "#1e3a8a"), "exposed_comm_ms": ("predicted exposed comm", EXPOSED)}


def _sweep_order(values: list[str], measured_value: str | None) -> list[str]:
    """The x order of a sweep: its values as given, the run's own value among them, in
    numeric order when every value reads as a number (``25``, ``2x``), else last."""
    if measured_value is None or measured_value in values:
        return list(values)

    def number(v: str) -> float | None:
        try:
            return float(v.strip().lower().rstrip("x"))
        except ValueError:
            return None
    keys = [number(v) for v in values]
    mine = number(measured_value)
    if mine is None or None in keys:
        return [*values, measured_value]
    at = next((i for i, k in enumerate(keys) if k > mine), len(values))
    return [*values[:at], measured_value, *values[at:]]


def whatif_sweep(points: list[dict], measured: dict, name: str, measured_value: str | None = None) -> alt.LayerChart:
    """Predicted step and exposed comm (ms) at each value of a sweep (x in the order given),
    the measured step and exposed comm as dashed levels with their labels and, where the
    run's own value of the swept flag is known (``measured_value``: its bucket cap, ``1x``
    of tokens or bandwidth), as diamonds at that value. ``points``:
    ``{"value", "step_ms", "exposed_comm_ms", "fits"}``."""
    order = _sweep_order([p["value"] for p in points], measured_value)
    rows = [{"value": p["value"], "series": label, "ms": p.get(key), "fits": p.get("fits")}
            for p in points for key, (label, _) in WHATIF_PARTS.items()]
    labels = [label for label, _ in WHATIF_PARTS.values()]
    scale = alt.Scale(domain=labels, range=[c for _, c in WHATIF_PARTS.values()])
    color = alt.Color("series:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0), scale=scale)
    x = alt.X("value:N", sort=order, scale=alt.Scale(domain=order), title=f"--{name}", axis=alt.Axis(labelAngle=0))
    base = alt.Chart(_frame(rows, ["value", "series", "ms", "fits"]))
    tooltip = ["value:N", "series:N", alt.Tooltip("ms:Q", format=",.2f"), "fits:N"]
    lines = base.mark_line(point=alt.OverlayMarkDef(size=80, filled=True)).encode(
        x=x, y=alt.Y("ms:Q", title="ms per step"), color=color, tooltip=tooltip)
    levels = [{"ms": measured.get(key), "label": f"measured {label.split(' ', 1)[1]} {measured.get(key):,.2f} ms",
               "series": label} for key, (label, _) in WHATIF_PARTS.items() if measured.get(key) is not None]
    rule = alt.Chart(_frame(levels, ["ms", "label", "series"])).mark_rule(strokeDash=[4, 3]).encode(
        y="ms:Q", color=alt.Color("series:N", scale=scale, legend=None), tooltip=["label:N"])
    text = alt.Chart(_frame(levels, ["ms", "label", "series"])).mark_text(
        align="left", baseline="bottom", dy=-3, x=4).encode(
        y="ms:Q", text="label:N", color=alt.Color("series:N", scale=scale, legend=None))
    layers = [lines, rule, text]
    if measured_value is not None and levels:
        marks = [{**level, "value": measured_value, "label": f"{level['label']} (--{name} {measured_value})"}
                 for level in levels]
        layers.append(alt.Chart(_frame(marks, ["value", "ms", "label", "series"])).mark_point(
            shape="diamond", size=160, filled=True, stroke="black", strokeWidth=1, opacity=1).encode(
            x=x, y="ms:Q", color=alt.Color("series:N", scale=scale, legend=None), tooltip=["label:N"]))
    return alt.layer(*layers).properties(usermeta=SVG, height=300)
