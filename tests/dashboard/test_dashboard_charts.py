"""The dashboard's pure parts: chart builders (rows in, Altair chart out) and the row shaping."""

from __future__ import annotations

import altair as alt
import pytest

from overlapscope.analyzer.model import memory as seed_model
from overlapscope.dashboard import charts, shape

STEPS = [  # two ranks, two steps; rank 1 step 3 is the slowest
    {"rank": 0, "step": 2, "step_ms": 10.0, "compute_ms": 6.0, "comm_ms": 4.0, "exposed_comm_ms": 1.0,
     "overlap_pct": 75.0, "idle_ms": 3.0, "other_ms": 0.0},
    {"rank": 0, "step": 3, "step_ms": 12.0, "compute_ms": 6.0, "comm_ms": 4.0, "exposed_comm_ms": 3.0,
     "overlap_pct": 25.0, "idle_ms": 3.0, "other_ms": 0.0},
    {"rank": 1, "step": 2, "step_ms": 11.0, "compute_ms": 5.0, "comm_ms": 2.0, "exposed_comm_ms": 2.0,
     "overlap_pct": 0.0, "idle_ms": 3.5, "other_ms": 0.5},
    {"rank": 1, "step": 3, "step_ms": 15.0, "compute_ms": 5.0, "comm_ms": 6.0, "exposed_comm_ms": 4.0,
     "overlap_pct": 33.33, "idle_ms": 6.0, "other_ms": 0.0},
]
RANKS = [{"rank": 0, "steps": 2, "step_ms": 11.0, "exposed_comm_ms": 4.0, "overlap_pct": 50.0, "idle_ms": 6.0},
         {"rank": 1, "steps": 2, "step_ms": 13.0, "exposed_comm_ms": 6.0, "overlap_pct": 25.0, "idle_ms": 10.0}]
SUMMARY = [
    {"kind": "ddp_bucket", "id": "0", "phase": "allreduce", "count": 4, "bytes": 1000, "comm_ms": 2.0,
     "exposed_ms": 0.5, "hidden_ms": 1.5, "busbw_gbps": 1.2, "predicted_comm_ms": 1.8,
     "predicted_exposed_ms": 0.4, "inferred": False},
    {"kind": "fsdp_unit", "id": "", "phase": "reduce_scatter", "count": 4, "bytes": 2000, "comm_ms": 3.0,
     "exposed_ms": 3.0, "hidden_ms": 0.0, "busbw_gbps": None, "predicted_comm_ms": None,
     "predicted_exposed_ms": None, "inferred": True},
]


def _values(chart) -> list[dict]:
    """The rows of every dataset of a chart's Vega-Lite spec (validated by to_dict)."""
    spec = chart.to_dict()
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


def _layers(chart) -> list[dict]:
    return chart.to_dict()["layer"]


# --- shape -------------------------------------------------------------------------


def test_rank_medians_are_the_headlines_aggregation_per_rank():
    medians = shape.rank_medians(STEPS)
    assert [m["rank"] for m in medians] == [0, 1]
    # two steps: the mean of the middle two, (11 + 15) / 2; comm (2 + 6) / 2, exposed (2 + 4) / 2
    assert medians[1]["step_ms"] == 13.0 and medians[1]["exposed_comm_ms"] == 3.0 and medians[1]["steps"] == 2
    assert medians[1]["hidden_comm_ms"] == 1.0 and medians[1]["overlap_pct"] == 25.0
    # an outlier step moves a mean, not the median the headline shows: 10, 12 and 50 ms give 12
    third = {**STEPS[1], "step": 4, "step_ms": 50.0, "idle_ms": 41.0}
    (rank0,) = [m for m in shape.rank_medians([*STEPS, third]) if m["rank"] == 0]
    assert rank0["step_ms"] == 12.0 and rank0["idle_ms"] == 3.0 and rank0["steps"] == 3


def test_default_ranks_keep_the_slowest_and_the_calmest():
    ranks = [{"rank": r, "step_ms": 10.0 + (r == 5), "exposed_comm_ms": 5.0 - (r == 6)} for r in range(8)]
    picked = shape.default_ranks(ranks, slowest=5, limit=4)
    assert len(picked) == 4 and 5 in picked and 6 in picked and picked == sorted(picked)
    assert shape.default_ranks(ranks[:3], slowest=1) == [0, 1, 2]


def test_group_labels_and_top_groups():
    assert shape.group_label(SUMMARY[0]) == "bucket 0 · allreduce"
    assert shape.group_label(SUMMARY[1]) == "unit (root) · reduce_scatter"
    assert shape.group_label({"kind": "other", "id": "all_to_all", "phase": "all_to_all"}) == "all_to_all"
    assert shape.group_label({"kind": "other", "id": "all_reduce", "phase": "allreduce"}) == "all_reduce"
    assert shape.group_label({"kind": "other", "id": "ncclKernel_X", "phase": "unknown"}) == "ncclKernel_X · unknown"
    rows = shape.group_rows(SUMMARY, top=1)
    assert [r["group"] for r in rows] == ["unit (root) · reduce_scatter"]


def test_hide_threshold_from_the_model_or_computed():
    m = {"stage": "ddp", "gpus": 8, "flops_per_s": 4e14, "bus_bandwidth_bytes_per_s": 5e10, "grad_bytes": 2.0,
         "tokens": None, "tokens_to_hide": None, "verdict": None}
    t = shape.hide_threshold([m])
    # the seed: T >= F/W (N-1)/N for bf16 DDP
    assert t["tokens_to_hide"] == pytest.approx(4e14 / 5e10 * 7 / 8) and t["missing"] == []
    assert shape.hide_threshold([{**m, "tokens_to_hide": 123.0}])["tokens_to_hide"] == 123.0
    lacking = shape.hide_threshold([{**m, "flops_per_s": None, "stage": None}])
    assert lacking["tokens_to_hide"] is None
    assert any("F" in x for x in lacking["missing"]) and any("stage" in x for x in lacking["missing"])
    assert shape.hide_threshold([])["tokens_to_hide"] is None


def test_hide_threshold_of_an_hsdp_run():
    # docs/model.md's worked example, HSDP with G = 8 and R = 4: 777.8 + 2 / 16 x 8,000 x 3/4 = 1,527.8 tokens
    m = {"stage": "zero3", "gpus": 8, "replicas": 4, "flops_per_s": 4e14, "bus_bandwidth_bytes_per_s": 4.5e11,
         "replicate_bus_bandwidth_bytes_per_s": 5e10, "grad_bytes": 2.0, "weight_bytes": 2.0, "tokens": None,
         "tokens_to_hide": None, "verdict": None}
    t = shape.hide_threshold([m])
    assert t["tokens_to_hide"] == pytest.approx(4e14 / 4.5e11 * 7 / 8 + 750) and t["replicas"] == 4
    # an HSDP run without its mesh: the analysis says why, and nothing is computed here
    lacking = shape.hide_threshold([{**m, "gpus": None, "replicas": None,
                                     "reason": "cannot judge: missing the HSDP mesh (...)"}])
    assert lacking["tokens_to_hide"] is None and lacking["missing"] == ["the HSDP mesh (...)"]


def test_verdict_at_entered_tokens():
    t = shape.hide_threshold([{"stage": "ddp", "gpus": 8, "flops_per_s": 4e14, "bus_bandwidth_bytes_per_s": 5e10,
                               "grad_bytes": 2.0, "tokens": None, "tokens_to_hide": None, "verdict": None}])
    assert t["tokens_to_hide"] == pytest.approx(7000.0)
    assert [shape.verdict_at(t, n) for n in (16384, 7500, 1000)] == ["hidden", "marginal", "exposed"]
    assert shape.verdict_at(t, 0) is None


def test_ratio_curve_points_and_measured_ratio():
    curve = shape.ratio_curve(1000.0, tokens=50_000.0)
    assert curve[0]["tokens"] < 1000.0 / 20 and curve[-1]["tokens"] >= 50_000.0 * 2.9
    assert all(a["ratio"] > b["ratio"] for a, b in zip(curve, curve[1:]))
    assert all(r["ratio"] * r["tokens"] == pytest.approx(1000.0) for r in curve)
    # comm / (2/3 compute) per step: 1.0, 1.0, 0.6, 1.8 -> median 1.0
    assert shape.measured_ratio(STEPS) == pytest.approx(1.0)
    points = shape.run_points({"tokens": 500.0, "tokens_to_hide": 1000.0}, 0.7)
    assert points == [{"tokens": 500.0, "ratio": 2.0, "source": "model (F, W)"},
                      {"tokens": 500.0, "ratio": 0.7, "source": "measured"}]
    assert shape.run_points({"tokens": None, "tokens_to_hide": 1000.0}, 0.7) == []


def test_memory_rows_are_the_seed_formulas():
    rows = shape.memory_rows(13e9, 32)
    totals = {r["stage"]: r["total_bytes"] for r in rows}
    assert totals == {s: pytest.approx(seed_model.model_state_bytes(s, 13e9, 32)) for s in shape.MEMORY_STAGES}
    assert totals["ddp"] == pytest.approx(16 * 13e9)  # (4 + K) Psi, the seed's 208 GB
    hsdp = shape.memory_rows(13e9, 32, hsdp_group=8)
    assert {r["stage"] for r in hsdp} == {*shape.MEMORY_STAGES, "hsdp"}
    assert sum(r["bytes"] for r in hsdp if r["stage"] == "hsdp") == pytest.approx(16 * 13e9 / 8)


def test_on_scale():
    assert shape.on_scale(80e9, 60e9) and not shape.on_scale(25e9, 2e6) and not shape.on_scale(None, 1.0)


def test_findings_sorted_failed_first():
    findings = [{"id": "a", "status": "pass", "severity": 1}, {"id": "b", "status": "fail", "severity": 1},
                {"id": "c", "status": "n/a", "severity": 5}, {"id": "d", "status": "fail", "severity": 3},
                {"id": "e", "status": "warn", "severity": 2}]
    assert [f["id"] for f in shape.sorted_findings(findings)] == ["d", "b", "e", "a", "c"]
    assert shape.finding_counts(findings) == {"fail": 2, "warn": 1, "pass": 1, "n/a": 1}


def test_compare_rows_match_steps_by_position():
    other = [{**s, "step": s["step"] + 100, "step_ms": s["step_ms"] * 2} for s in STEPS]
    rows = shape.compare_steps({"A": {"steps": STEPS}, "B": {"steps": other}})
    assert [(r["run"], r["step_index"]) for r in rows] == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    assert rows[2]["step_ms"] == 2 * rows[0]["step_ms"] == 21.0
    groups = shape.compare_groups({"A": {"summary": SUMMARY}, "B": {"summary": SUMMARY[:1]}}, top=1)
    assert {r["group"] for r in groups} == {"unit (root) · reduce_scatter"}


# --- charts ------------------------------------------------------------------------


def test_step_breakdown_stacks_and_outlines_the_slowest():
    chart = charts.step_breakdown(shape.rank_medians(STEPS), highlight_rank=1)
    assert isinstance(chart, alt.Chart)
    rows = _values(chart)
    assert {r["part"] for r in rows} == {"compute", "exposed comm", "other (memcpy only)", "idle"}
    # the stacked parts of each rank make up its mean step
    for rank, mean_step_ms in ((0, 11.0), (1, 13.0)):
        assert sum(r["ms"] for r in rows if r["rank"] == rank) == pytest.approx(mean_step_ms)
    assert {r["rank"] for r in rows if r["slowest"]} == {1}
    spec = chart.to_dict()
    assert spec["encoding"]["y"]["stack"] == "zero"
    assert charts.HIGHLIGHT in str(spec["encoding"]["stroke"])


def test_step_heatmap_outlines_the_slowest_cell():
    chart = charts.step_heatmap(STEPS, "exposed_comm_ms", highlight=(1, 3))
    cells, outline = _layers(chart)
    assert cells["encoding"]["color"]["field"] == "exposed_comm_ms"
    assert [(r["rank"], r["step"]) for r in _values(chart) if r["slowest"]] == [(1, 3)]
    assert outline["mark"]["stroke"] == charts.HIGHLIGHT


def _timeline_result() -> dict:
    def mark(kind, start, end, lane="r0 · stream 7", **extra):
        return {"rank": 0, "track_id": 1, "lane": lane, "kind": kind, "name": f"{kind} op", "event_id": 1,
                "marks": 1, "start_ms": start, "end_ms": end, "dur_ms": end - start, "busy_ms": end - start,
                "coll_kind": None, "coll_id": None, "phase": None, "collective": None, "bytes": None,
                "coll_comm_ms": None, "coll_exposed_ms": None, **extra}

    comm = dict(lane="r0 · stream 20", coll_kind="ddp_bucket", coll_id="0", phase="allreduce", bytes=4096)
    return {
        "windows": [{"rank": 0, "window_ms": 0.2}],
        "lanes": [{"rank": 0, "track_id": 1, "lane": "r0 · stream 7"},
                  {"rank": 0, "track_id": 2, "lane": "r0 · stream 20"}],
        "marks": [mark("compute", 0.0, 0.04), mark("compute", 0.06, 0.1), mark("comm", 0.03, 0.08, **comm)],
        "exposed": [mark("exposed", 0.04, 0.06, **comm)],
    }


def test_timeline_draws_lanes_marks_and_exposed_on_top():
    chart = charts.timeline(_timeline_result())
    assert isinstance(chart, alt.LayerChart)
    background, drawn, exposed = _layers(chart)
    spec = chart.to_dict()
    datasets = spec["datasets"]
    assert [r["kind"] for r in datasets[exposed["data"]["name"]]] == ["exposed"]
    assert [r["kind"] for r in datasets[drawn["data"]["name"]]] == ["compute", "compute", "comm"]
    assert drawn["encoding"]["y"]["sort"] == ["r0 · stream 7", "r0 · stream 20"]
    scale = drawn["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"])) == {"compute": charts.COMPUTE, "comm": charts.COMM,
                                                          "exposed": charts.EXPOSED, "idle": charts.WINDOW}
    # one key: the window is idle, comm left sky blue reads as hidden comm
    assert background["encoding"]["color"]["scale"] == scale
    assert [r["kind"] for r in datasets[background["data"]["name"]]] == ["idle", "idle"]
    key = drawn["encoding"]["color"]["legend"]
    assert '"hidden comm"' in key["labelExpr"] and '"exposed comm"' in key["labelExpr"] and key["labelLimit"] == 0
    tooltip_fields = {t["field"] for t in drawn["encoding"]["tooltip"]}
    assert {"name", "coll_id", "phase", "bytes", "dur_ms"} <= tooltip_fields
    assert datasets[background["data"]["name"]][1]["end_ms"] == 0.2
    assert drawn["encoding"]["x"]["scale"]["domain"] == [0, 0.2]


def test_timeline_of_nothing_is_an_empty_chart():
    chart = charts.timeline({"windows": [], "lanes": [], "marks": [], "exposed": []})
    assert len(_layers(chart)) == 3


def test_bucket_charts():
    groups = shape.group_rows(SUMMARY)
    stacked = charts.exposed_hidden(groups)
    assert {(r["group"], r["part"]) for r in _values(stacked)} == {
        (g["group"], p) for g in groups for p in ("exposed", "hidden")}
    bw = charts.bus_bandwidth(groups, measured_gbps=1.0)
    assert len(_layers(bw)) == 3  # the bars, the run's W as a rule and its label
    assert any(r.get("label") == "run's W = 1 GB/s" for r in _values(bw))
    assert [r["busbw_gbps"] for r in _values(bw) if "busbw_gbps" in r] == [1.2]  # None is left out
    pvm = charts.predicted_vs_measured(groups)
    assert {r["what"] for r in _values(pvm)} == {"comm, measured", "comm, predicted", "exposed, measured",
                                                  "exposed, predicted"}


def test_hide_ratio_chart():
    curve = shape.ratio_curve(1000.0, 500.0)
    with_points = charts.hide_ratio(curve, 1000.0, shape.run_points({"tokens": 500.0, "tokens_to_hide": 1000.0}, 1.5))
    layers = _layers(with_points)
    assert layers[0]["encoding"]["x"]["scale"]["type"] == "log"
    assert len(layers) == 6  # curve, ratio 1 and its label, T_hide and its label, this run
    assert layers[2]["mark"]["type"] == "text" and layers[2]["encoding"]["y"]["field"] == "ratio"
    assert any(r.get("label", "").startswith("ratio 1: ") and r["ratio"] == 1.0 for r in _values(with_points))
    level = charts.hide_ratio(curve, 1000.0, [], measured_ratio=0.5)
    assert len(_layers(level)) == 7 and "measured 0.5" in str(level.to_dict())  # the level and its label
    assert _layers(level)[-1]["mark"]["type"] == "text"
    assert len(_layers(charts.hide_ratio(curve, 1000.0, []))) == 5


def test_memory_chart_picks_a_unit_and_draws_the_limits():
    small = charts.memory(shape.memory_rows(1e6, 2), device_bytes=25e6, peak_bytes=3e6)
    spec = small.to_dict()
    assert "(MB)" in spec["layer"][0]["encoding"]["y"]["title"]
    assert sorted(r["amount"] for r in _values(small) if "what" in r) == [3.0, 25.0]
    bars, lines, text = _layers(small)
    # the two limits differ in colour and dash, and each has its label beside it
    color, dash = lines["encoding"]["color"]["scale"], lines["encoding"]["strokeDash"]["scale"]
    assert color["domain"] == dash["domain"] == ["device memory", "measured peak"]
    assert len(set(color["range"])) == 2 and dash["range"][0] != dash["range"][1]
    assert text["mark"]["type"] == "text" and text["encoding"]["text"]["field"] == "label"
    assert {r["label"] for r in _values(small) if "label" in r} == {"device memory: 25 MB", "measured peak: 3 MB"}
    only_peak = _layers(charts.memory(shape.memory_rows(1e6, 2), peak_bytes=3e6))[1]
    assert only_peak["encoding"]["color"]["scale"]["domain"] == ["measured peak"]
    big = charts.memory(shape.memory_rows(13e9, 32))
    assert len(_layers(big)) == 1 and "(GB)" in str(big.to_dict())


def test_compare_charts():
    rows = shape.compare_steps({"A": {"steps": STEPS}, "B": {"steps": STEPS}})
    spec = charts.compare_steps(rows, "exposed_comm_ms").to_dict()
    assert spec["encoding"]["y"]["field"] == "exposed_comm_ms" and spec["encoding"]["xOffset"]["field"] == "run"
    groups = shape.compare_groups({"A": {"summary": SUMMARY}, "B": {"summary": SUMMARY}})
    spec = charts.compare_groups(groups).to_dict()
    assert spec["encoding"]["yOffset"]["field"] == "run"


def test_history_names_keep_their_colours_and_labels():
    """20 run names draw 20 colours, and the legend shows every name whole, below the chart."""
    rows = [{"run_id": i, "name": f"ci/nightly-ddp-accum-nosync-bucket-{i:02d}", "created_at": "2026-01-01 00:00:00",
             "value": float(i), "tags": "–", "pushed_by": "–", "regression": False, "worse_pct": None}
            for i in range(20)]
    spec = charts.history(rows, "step_ms", "step (ms)").to_dict()
    color = spec["layer"][0]["encoding"]["color"]
    assert len(set(color["scale"]["range"][:20])) == 20 and len(color["scale"]["domain"]) == 20
    assert color["legend"]["labelLimit"] == 0 and color["legend"]["orient"] == "bottom"


def test_readable_rows_round_and_leave_gaps():
    spec = {"rank": ("rank", 0, ""), "comm_ms": ("comm (ms)", 2, ""), "hta_pct": ("HTA (%)", 1, ""),
            "name": ("name", None, ""), "never": ("never (ms)", 2, "")}
    rows = [{"mark": "◀", "rank": 0, "comm_ms": 1.23456, "hta_pct": None, "name": "a"},
            {"mark": "", "rank": 1, "comm_ms": 2.0, "hta_pct": 50.04, "name": None}]
    shown, columns, gaps, empty = shape.readable_rows(rows, spec)
    assert columns == ["rank", "comm_ms", "hta_pct", "name"] and empty == ["never (ms) (no value on any row)"]
    assert gaps == {"hta_pct", "name"}
    assert shown == [{"mark": "◀", "rank": 0, "comm_ms": 1.23, "hta_pct": None, "name": "a"},
                     {"mark": "", "rank": 1, "comm_ms": 2.0, "hta_pct": 50.0, "name": None}]
    steps = [{"rank": 0, "spill_in_ms": 0.0, "spill_out_ms": 0.5}, {"rank": 1, "spill_in_ms": 0.0, "spill_out_ms": 0.0}]
    shown, columns, _, empty = shape.readable_rows(steps, shape.STEP_TABLE)
    assert columns == ["rank", "spill_out_ms"]  # spill in is 0 everywhere: left out and named
    assert "from prev. (ms) (0 on every row)" in empty and "step (ms) (no value on any row)" in empty
    assert shape.with_mb([{"bytes": 2_500_000}, {"bytes": None}]) == [{"bytes": 2_500_000, "size_mb": 2.5},
                                                                      {"bytes": None, "size_mb": None}]


def test_whatif_command_is_a_shell_line():
    assert shape.whatif_command("sample/hsdp_2x2", "--wrap root-only") == \
        "overlapscope whatif --run sample/hsdp_2x2 --wrap root-only"
    assert shape.whatif_command("my run's `name`", "no change", "tokens=0.5x,2x") == \
        "overlapscope whatif --run 'my run'\"'\"'s `name`' --sweep tokens=0.5x,2x"


def test_whatif_sweep_marks_the_run_at_its_own_value():
    points = [{"value": v, "step_ms": s, "exposed_comm_ms": e, "fits": True}
              for v, s, e in (("1", 90.0, 20.0), ("5", 80.0, 10.0), ("100", 85.0, 15.0))]
    measured = {"step_ms": 72.9, "exposed_comm_ms": 7.2}
    spec = charts.whatif_sweep(points, measured, "bucket-mb", "25").to_dict()
    # 25 MiB, the run's own cap, sits between 5 and 100 on the x axis
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"] == ["1", "5", "25", "100"]
    (diamonds,) = [layer for layer in spec["layer"] if layer["mark"].get("shape") == "diamond"]
    marks = spec["datasets"][diamonds["data"]["name"]]
    assert {(m["value"], m["ms"]) for m in marks} == {("25", 72.9), ("25", 7.2)}
    # a value the sweep holds keeps the order given; no known value: the dashed levels only
    assert charts.whatif_sweep(points, measured, "tokens", "5").to_dict()["layer"][0]["encoding"]["x"]["scale"][
        "domain"] == ["1", "5", "100"]
    assert len(_layers(charts.whatif_sweep(points, measured, "bucket-mb"))) == 3
    assert charts._sweep_order(["on", "off"], "maybe") == ["on", "off", "maybe"]
