"""Every dashboard page in Streamlit's AppTest: on real runs in a catalog, and on an empty catalog."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from overlapscope.dashboard.text import md
from overlapscope.analyzer import runs
from overlapscope.analyzer.store import runstore
from conftest import ROOT

APP = str(ROOT / "dashboard" / "app.py")
RUN_PAGES = ["views/overview.py", "views/timeline.py", "views/buckets.py", "views/model.py",
             "views/checklist.py", "views/compare.py", "views/history.py"]
PAGES = RUN_PAGES + ["views/upload.py"]
TIMEOUT_S = 60


def open_app(monkeypatch, db: Path, page: str | None = None, **env) -> AppTest:
    """The app on catalog ``db`` (no sample loading unless asked), run once, then on ``page``."""
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(db))
    monkeypatch.setenv("OVERLAPSCOPE_NO_SAMPLES", "1")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.run()
    assert not at.exception, at.exception
    if page:
        at.switch_page(page).run()
    return at


def charts(at: AppTest) -> list[dict]:
    """The Vega-Lite specs of the page's charts (Streamlit ships their data apart, as Arrow)."""
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def chart_rows(at: AppTest, index: int = 0) -> list[dict]:
    """Every row of every dataset of the page's ``index``-th chart."""
    chart = at.get("vega_lite_chart")[index]
    return [row for d in chart.proto.datasets for row in pa.ipc.open_stream(d.data.data).read_all().to_pylist()]


def headers(at: AppTest, index: int) -> dict[str, str]:
    """The ``index``-th table's column headers as the page shows them, by column."""
    config = json.loads(at.dataframe[index].proto.columns or "{}")
    return {key.removeprefix("name:") if key.startswith("name:") else key: c.get("label")
            for key, c in config.items()}


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_on_a_real_run(monkeypatch, dashboard_db, page):
    at = open_app(monkeypatch, dashboard_db, page)
    no_errors(at)
    assert at.title, "every page has a title"
    assert at.sidebar.selectbox[0].value == 2, "the newest run is selected first"


def test_overview_figures_and_highlights(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/overview.py")
    labels = [m.label for m in at.metric]
    assert labels[:5] == ["Exposed comm / step", "Exposed share of the step", "Overlap", "Step time",
                          "Longest median step"]
    assert re.fullmatch(r"Longest single step \(rank \d+\)", labels[5]) and re.fullmatch(r"step \d+", at.metric[5].value)
    exposed, share, step = at.metric[0].value, at.metric[1].value, at.metric[3].value
    assert exposed.endswith(" ms") and share.endswith(" %") and step.endswith(" ms")
    assert any("median over the steps of the slowest rank" in c.value for c in at.caption)
    breakdown, heatmap = charts(at)
    assert "layer" in heatmap  # the cells and the slowest cell's outline
    ranks, steps = at.dataframe[0].value, at.dataframe[-1].value  # between them: the clock table's expander
    assert ranks["mark"].tolist().count("◀") == 1 and steps["mark"].tolist().count("◀") == 1
    assert {"compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms", "overlap_pct"} <= set(steps.columns)


def test_overview_follows_the_run_picker(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/overview.py")
    at.sidebar.selectbox[0].set_value(1).run()
    no_errors(at)
    assert at.title[0].value == f"Overview · {md('sample-a')}"


def test_timeline_draws_lanes_with_exposed_comm(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/timeline.py")
    no_errors(at)
    (spec,) = charts(at)
    kinds = {row["kind"] for row in chart_rows(at) if "kind" in row}
    assert {"compute", "comm"} <= kinds
    assert len(spec["layer"]) == 3
    step_box = at.selectbox(key="tl_step_2")
    other = next(s for s in step_box.options if s != step_box.value)
    step_box.set_value(int(other)).run()
    no_errors(at)
    at.multiselect(key="tl_ranks_2").set_value([0]).run()
    no_errors(at)
    lanes = {row["lane"] for row in chart_rows(at)}
    assert lanes and all(lane.startswith("r0 ") for lane in lanes)


def test_timeline_says_when_it_aggregates(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/timeline.py", OVERLAPSCOPE_TIMELINE_MARKS="20")
    no_errors(at)
    assert any(i.value.startswith("Aggregated:") for i in at.info)


def test_buckets_page_shows_groups_and_predictions(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/buckets.py")
    no_errors(at)
    assert len(charts(at)) >= 2
    groups = at.dataframe[0].value
    assert {"group", "exposed_ms", "busbw_gbps", "predicted_comm_ms"} <= set(groups.columns)
    assert headers(at, 0)["exposed_ms"] == "exposed (ms)" and headers(at, 0)["busbw_gbps"] == "bus GB/s"


def test_model_page_on_both_runs(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/model.py")
    for run_id in (2, 1):
        at.sidebar.selectbox[0].set_value(run_id).run()
        no_errors(at)
        con = runs.open_catalog(dashboard_db, read_only=True)
        manifest = con.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
        con.close()
        manifest = json.loads(manifest) if manifest else {}
        infos = " ".join(i.value for i in at.info)
        if manifest.get("params"):
            assert any("stage" in json.dumps(c) for c in charts(at)), "memory per stage is drawn"
        else:
            assert "parameter count is unknown" in infos
        if not manifest.get("tokens_per_microbatch"):
            assert "tokens per GPU per micro-batch" in infos or "Cannot draw" in infos
            entry = [n for n in at.number_input if n.key == f"model_tokens_{run_id}"]
            if entry:  # the seed's curve is drawn: place this run by entering its tokens
                entry[0].set_value(4096).run()
                no_errors(at)
                assert any(m.value.startswith("Verdict at T = 4,096: **") for m in at.markdown)
        if not manifest.get("params"):
            at.number_input(key=f"model_params_{run_id}").set_value(1_000_000_000).run()
            no_errors(at)
            assert any("stage" in json.dumps(c) for c in charts(at))


def test_checklist_lists_failed_findings_first(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/checklist.py")
    no_errors(at)
    expanders = at.main.expander  # the sidebar holds the run filter's expander
    assert expanders, "one expander per finding"
    order = {":material/cancel:": 0, ":material/warning:": 1, ":material/check_circle:": 2,
             ":material/remove_circle_outline:": 3}
    statuses = [order[e.proto.icon] for e in expanders]
    assert all(e.proto.expanded == (e.proto.icon == ":material/cancel:") for e in expanders)
    assert statuses == sorted(statuses)
    # the n/a rules (the FSDP ones on this DDP run, at least) folded under one last line
    counts = {m.label: int(m.value) for m in at.metric}
    folded = expanders[-1]
    assert counts["not applicable"] >= 4 and folded.label == f"Not applicable to this run ({counts['not applicable']})"
    assert statuses.count(3) == 1 and not folded.proto.expanded
    assert "FSDP wraps only the root" in folded.markdown[0].value
    assert sum(counts.values()) - counts["not applicable"] == len(expanders) - 1


def test_compare_two_runs(monkeypatch, dashboard_db):
    at = open_app(monkeypatch, dashboard_db, "views/compare.py")
    no_errors(at)
    assert at.selectbox(key="cmp_a").value == 2 and at.selectbox(key="cmp_b").value == 1
    runs = {row["run"] for row in chart_rows(at, 0)}
    assert runs == {"A: sample-b #2", "B: sample-a #1"}
    assert len(charts(at)) == 2 and len(at.metric) == 4


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_on_an_empty_catalog(monkeypatch, tmp_path, page):
    at = open_app(monkeypatch, tmp_path / "empty.duckdb", page)
    no_errors(at)
    if page in RUN_PAGES:
        assert any("no runs yet" in i.value for i in at.info)
    else:
        assert at.get("file_uploader")


def test_a_fresh_catalog_gets_the_sample_runs(monkeypatch, tmp_path, dashboard_bundles):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "first").symlink_to(dashboard_bundles[0], target_is_directory=True)
    db = tmp_path / "fresh.duckdb"
    at = open_app(monkeypatch, db, "views/overview.py", OVERLAPSCOPE_NO_SAMPLES="0",
                  OVERLAPSCOPE_SAMPLES_DIR=str(samples))
    no_errors(at)
    assert at.title[0].value == f"Overview · {md('sample/first')}"
    assert at.metric and at.metric[3].value.endswith("ms")


def test_a_catalog_locked_by_another_process_gives_a_message(monkeypatch, tmp_path, dashboard_db):
    """An ingest in another process holds the write lock: the page says so instead of failing,
    and works again once the lock is gone (the dashboard never holds the catalog between renders)."""
    import shutil
    import subprocess
    import sys

    from overlapscope.dashboard import data

    db = tmp_path / "locked.duckdb"
    shutil.copy(dashboard_db, db)
    monkeypatch.setattr(data, "WAIT_S", 0.5)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
                               "print('locked', flush=True); time.sleep(60)", str(db)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"locked"
        monkeypatch.setenv("OVERLAPSCOPE_DB", str(db))
        monkeypatch.setenv("OVERLAPSCOPE_NO_SAMPLES", "1")
        at = AppTest.from_file(APP, default_timeout=TIMEOUT_S).run()
        assert not at.exception
        assert "in use by another process" in at.warning[0].value
    finally:
        holder.kill()
        holder.wait()
    at.run()
    no_errors(at)
    assert at.title[0].value.startswith("Overview · ")


# --- history, the run filter, compare, pruned runs ------------------------------------


@pytest.fixture(scope="module")
def nightly_db(tmp_path_factory):
    """ddp twice, then the straggler (exposed comm ~17x), as 'nightly'; the fsdp sample as 'other'."""
    from conftest import SAMPLES

    db = tmp_path_factory.mktemp("history") / "catalog.duckdb"
    con = runs.open_catalog(db)
    for bundle, name in (("ddp", "nightly"), ("fsdp_per_block", "other"), ("ddp", "nightly"),
                         ("ddp_straggler", "nightly")):
        runs.ingest(con, [str(SAMPLES / bundle)], name, {"branch": "main" if name == "nightly" else "dev"})
    con.close()
    return db


def test_history_marks_the_regression(monkeypatch, nightly_db):
    at = open_app(monkeypatch, nightly_db, "views/history.py")
    no_errors(at)
    (spec,) = charts(at)
    assert len(spec["layer"]) == 3 and spec["layer"][0]["mark"]["type"] == "line"
    rows = [r for r in chart_rows(at) if "run_id" in r]
    assert sorted(r["run_id"] for r in rows) == [1, 2, 3, 4]
    assert {r["run_id"] for r in rows if r["regression"]} == {4}, "only the straggler regressed"
    assert next(r for r in rows if r["run_id"] == 2)["name"] == "other"
    assert any(c.value.startswith("Showing 4 runs of 2 names") for c in at.caption)
    # the caption names the mark the chart draws
    marked = spec["layer"][2]["mark"]
    assert marked["shape"] == "triangle-up" and marked["color"] == "#000000"
    assert any("A black triangle marks a run worse" in c.value for c in at.caption)
    assert any(h.value == "Regressions (1)" for h in at.subheader)
    # exposed comm grew about 17x (1,656 %): a bound of 2,000 % lets it pass
    at.number_input(key="history_bound").set_value(2000.0).run()
    assert any(h.value == "Regressions (0)" for h in at.subheader)
    # overlap % (higher is better) fell from 33 % to 19 %: a regression downwards
    at.segmented_control(key="history_metric").set_value("overlap_pct").run()
    at.number_input(key="history_bound").set_value(10.0).run()
    no_errors(at)
    assert {r["run_id"] for r in chart_rows(at) if r.get("regression")} == {4}


def test_the_run_picker_filters_by_name_and_tag(monkeypatch, nightly_db):
    at = open_app(monkeypatch, nightly_db, "views/overview.py")
    assert len(at.sidebar.selectbox[0].options) == 4
    at.sidebar.multiselect(key="runs_tag_filter").set_value(["branch=dev"]).run()
    no_errors(at)
    assert at.sidebar.selectbox[0].value == 2 and len(at.sidebar.selectbox[0].options) == 1
    at.sidebar.multiselect(key="runs_tag_filter").set_value([]).run()
    at.sidebar.multiselect(key="runs_name_filter").set_value(["nightly"]).run()
    assert len(at.sidebar.selectbox[0].options) == 3
    at.switch_page("views/history.py").run()
    assert any(c.value.startswith("Showing 3 runs of 1 names") for c in at.caption)


def test_compare_colours_by_better_or_worse_and_warns(monkeypatch, nightly_db):
    at = open_app(monkeypatch, nightly_db, "views/compare.py")
    at.selectbox(key="cmp_a").set_value(3).run()
    at.selectbox(key="cmp_b").set_value(4).run()  # B, the straggler, against A
    no_errors(at)
    step, exposed, overlap, _comm = at.metric
    red, green = step.proto.MetricColor.RED, step.proto.MetricColor.GREEN
    up, down = step.proto.MetricDirection.UP, step.proto.MetricDirection.DOWN
    # B is worse on all three: times went up (lower is better), overlap went down (higher is better)
    assert [(m.proto.direction, m.proto.color) for m in (step, exposed, overlap)] == [(up, red), (up, red),
                                                                                       (down, red)]
    at.selectbox(key="cmp_a").set_value(4).run()
    at.selectbox(key="cmp_b").set_value(3).run()  # the other way round: all better
    assert [m.proto.color for m in at.metric[:3]] == [green, green, green]
    at.selectbox(key="cmp_a").set_value(3).run()
    at.selectbox(key="cmp_b").set_value(4).run()
    assert not at.warning, "same world size and parallelism"
    groups = at.dataframe[-1].value
    assert groups["label"][0].startswith("bucket ") and groups["change_ms"][0] > 0
    assert headers(at, -1)["change_ms"] == "B − A (ms)" and headers(at, -1)["baseline_exposed_ms"] == "A exposed (ms)"
    at.selectbox(key="cmp_a").set_value(2).run()  # the fsdp run: another parallelism
    assert any("parallelism differs" in w.value for w in at.warning)


def test_model_page_reconciles_the_straggler(monkeypatch, nightly_db):
    """ddp_straggler (run 4): rank 1 sleeps 100 ms before every backward, so rank 0 waits for it in each of its
    3 profiled steps while the model says "hidden": the page says which term explains the gap, and with what."""
    at = open_app(monkeypatch, nightly_db, "views/model.py")
    at.sidebar.selectbox[0].set_value(4).run()
    no_errors(at)
    assert any("Verdict at T = 512: **hidden**" in m.value for m in at.markdown)
    (warning,) = [w.value for w in at.warning if "disagrees with the model" in w.value]
    assert "of 6 rank-steps" in warning  # 2 ranks x 3 profiled steps
    assert "explained by **late rank**" in warning and "(rank 1)" in warning
    table = at.dataframe[0].value  # the expander's per rank and step table
    rank0 = table[table["rank"] == 0]
    assert len(rank0) == 3 and set(rank0["explained_by"]) == {"late_rank"}
    assert (rank0["term_ms"] > 50).all()  # most of each 100-ms sleep is waiting that no compute covers


def test_overview_names_the_late_rank_apart_from_the_headlines(monkeypatch, nightly_db):
    """ddp_straggler (run 4): rank 1 sleeps before every backward (how the sample was made), so rank 0,
    waiting for it, has the longest median step. The Overview says both, each for what it is, and its
    chart per rank is drawn on the headline's aggregation (the median), as its title says."""
    at = open_app(monkeypatch, nightly_db, "views/overview.py")
    at.sidebar.selectbox[0].set_value(4).run()
    no_errors(at)
    figures = {m.label: m.value for m in at.metric}
    assert figures["Longest median step"] == "rank 0"
    assert figures["Late rank (the others wait)"] == "rank 1"
    assert [h.value for h in at.subheader][:2] == ["Median step per rank", "Per rank and step"]
    # a run with no late rank shows no such figure
    at.sidebar.selectbox[0].set_value(1).run()
    assert "Late rank (the others wait)" not in {m.label for m in at.metric}


def test_a_pruned_run_says_so_where_events_are_needed(monkeypatch, tmp_path, nightly_db):
    import shutil

    from overlapscope.analyzer.store import retention

    db = tmp_path / "pruned.duckdb"
    shutil.copy(nightly_db, db)
    shutil.copytree(runstore.store_dir(nightly_db), runstore.store_dir(db))  # a catalog is its file and its run store
    con = runs.open_catalog(db)
    # an expander per applicable finding, and one for the n/a rules
    findings_before = con.execute("SELECT count(*) FILTER (status <> 'n/a') + (count(*) FILTER (status = 'n/a') > 0)"
                                  "::INT FROM findings WHERE run_id = 1").fetchone()[0]
    retention.prune(con, [1])
    con.close()
    at = open_app(monkeypatch, db, "views/overview.py")
    at.sidebar.selectbox[0].set_value(1).run()
    no_errors(at)
    assert at.metric[3].value.endswith("ms") and any("Pruned on" in c.value for c in at.caption)
    at.switch_page("views/timeline.py").run()  # the one page that draws events
    no_errors(at)
    assert any("was pruned on" in i.value for i in at.info)
    for page in ("views/buckets.py", "views/model.py"):  # from the analyses stored at ingest
        at.switch_page(page).run()
        no_errors(at)
        assert not any("was pruned on" in i.value for i in at.info), page
        assert at.get("vega_lite_chart") or at.get("arrow_vega_lite_chart"), page
    at.switch_page("views/checklist.py").run()
    no_errors(at)
    assert len(at.main.expander) == findings_before
    at.switch_page("views/compare.py").run()
    no_errors(at)
    at.switch_page("views/history.py").run()
    no_errors(at)


def test_model_page_what_if_panel(monkeypatch, dashboard_db, dashboard_bundles):
    """The What if panel: the replay without a change, then a change and a sweep, the same
    figures as ``overlapscope whatif`` gives for the run's files."""
    from overlapscope.analyzer.api import whatif
    from overlapscope.analyzer.predict.changes import Changes, Scale

    at = open_app(monkeypatch, dashboard_db, "views/model.py")
    at.sidebar.selectbox[0].set_value(1).run()
    no_errors(at)
    assert any(s.value.startswith("What if") for s in at.subheader)
    bandwidth = at.number_input(key="wi_1_bw")
    bandwidth.set_value(2.0).run()
    no_errors(at)
    expected = whatif([str(dashboard_bundles[0])], Changes(bandwidth=Scale(2.0, True)), workers=1)["predicted"]
    step = next(m for m in at.metric if m.label == "Step (predicted)")
    assert step.value == f"{expected['step_ms']:,.2f} ms"
    # the sweep's chart: one predicted step and one exposed comm per value
    sweep = next(c for c in charts(at) if "--" in json.dumps(c) and "series" in json.dumps(c))
    assert sweep
    rows = [r for r in chart_rows(at, len(at.get("vega_lite_chart")) - 1) if r.get("value") is not None]
    values = {r["value"] for r in rows}
    assert len(values) == 4 and all(r["ms"] is None or r["ms"] > 0 for r in rows)
    # the run itself is marked at its own value of the swept flag: 1x of the tokens
    measured = whatif([str(dashboard_bundles[0])], workers=1)["measured"]
    marks = [r for r in rows if "(--tokens 1x)" in (r.get("label") or "")]
    assert {(r["value"], r["ms"]) for r in marks} == {("1x", measured["step_ms"]),
                                                      ("1x", measured["exposed_comm_ms"])}
    # HSDP across 4 groups of 2 on 8 GPUs, the links given in GB/s (fsdp_per_block is run 1)
    at.number_input(key="wi_1_bwabs").set_value(50.0)
    at.number_input(key="wi_1_gpus").set_value(8)
    at.number_input(key="wi_1_hsdp").set_value(2)
    at.run()
    at.number_input(key="wi_1_inter").set_value(1.0).run()
    no_errors(at)
    expected = whatif([str(dashboard_bundles[0])], Changes(bandwidth=Scale(50e9, False), gpus=8, hsdp=2,
                                                           inter_bandwidth=1e9), workers=1)["predicted"]
    step = next(m for m in at.metric if m.label == "Step (predicted)")
    assert step.value == f"{expected['step_ms']:,.2f} ms"


def test_overview_names_missing_ranks_and_dropped_events(monkeypatch, tmp_path):
    """Ranks 0, 1 and 3 of 4, rank 1 with a kernel of negative duration: the overview says
    which rank is missing and how many events of which file were left out, as analyze does."""
    from builders import GpuTrace, write
    from overlapscope.dashboard.text import plain

    folder = tmp_path / "run"
    folder.mkdir()
    for r in (0, 1, 3):
        t = GpuTrace(rank=r, world_size=4).step(1, 0, 100).kernel(0, 50, step=1)
        if r == 1:
            t.kernel(60, -5, step=1)
        write(t, folder / f"rank-{r}.json")
    db = tmp_path / "catalog.duckdb"
    con = runs.open_catalog(db)
    runs.ingest(con, [str(folder)], name="gappy")
    con.close()
    at = open_app(monkeypatch, db, "views/overview.py")
    no_errors(at)
    (box,) = [plain(w.value) for w in at.warning]
    assert "1 of 4 ranks missing (2)" in box
    assert f"{folder / 'rank-1.json'}: left out 1 events with negative dur" in box


# --- a team's catalog: 1,000 runs of 50 names ----------------------------------------

TEAM_RUNS, TEAM_NAMES = 1000, 50


def grow_to_a_teams_catalog(db, runs_in_all: int = TEAM_RUNS, names: int = TEAM_NAMES, first_id: int = 2) -> None:
    """Copies of the catalog's run 1 (its rows, not its events: what History, Compare's pickers and
    the API's list read) as runs ``first_id``.. up to ``runs_in_all`` runs in all, of ``names``
    names, an hour apart, each with a commit tag and an exposed comm that moves from run to run
    (every 7th run of a name 30 % worse)."""
    con = runs.open_catalog(db)
    have = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    shift = first_id - 1  # run i of the copies gets id 1 + shift + i
    con.execute("""INSERT INTO runs SELECT r.run_id + $shift + i, 'team/job-' || lpad(CAST(i % $names AS VARCHAR), 2, '0'),
                   r.created_at + to_hours(i), r.source, r.world_size, r.backend, r.device_kind, r.manifest,
                   json_object('commit', substr(md5(CAST(i AS VARCHAR)), 1, 12), 'branch', 'main'), r.parallelism,
                   json_merge_patch(r.headline, json_object('exposed_comm_ms',
                       CAST(r.headline->>'exposed_comm_ms' AS DOUBLE) * (1 + 0.3 * ((i // $names) % 7 = 6)::INT)
                       * (1 + 0.01 * (i % $names)))),
                   'ci', NULL, r.data_dir, NULL FROM runs r, range(0, $n) t(i) WHERE r.run_id = 1""",
                {"names": names, "n": runs_in_all - have, "shift": shift})
    con.execute("INSERT INTO ranks SELECT k.run_id + $shift + i, k.* EXCLUDE (run_id) FROM ranks k, range(0, $n) t(i) "
                "WHERE k.run_id = 1", {"n": runs_in_all - have, "shift": shift})
    con.close()


@pytest.fixture(scope="module")
def team_db(tmp_path_factory):
    from conftest import SAMPLES

    db = tmp_path_factory.mktemp("team") / "catalog.duckdb"
    con = runs.open_catalog(db)
    runs.ingest(con, [str(SAMPLES / "ddp")], "seed")
    con.close()
    grow_to_a_teams_catalog(db)
    return db


def test_history_of_a_teams_catalog_plots_the_recent_names(monkeypatch, team_db):
    """1,000 runs of 50 names: the chart draws the 5 most recently stored names (a line each,
    labelled axes, a time axis), the user picks others; the tables list every name and the
    newest 200 runs, each with its commit."""
    at = open_app(monkeypatch, team_db, "views/history.py")
    no_errors(at)
    picker = at.multiselect(key="history_names")
    # run ids 996..1000 are the newest: copies i = 994..998 (id = 2 + i), names i % 50: job-44..job-48
    assert picker.value == [f"team/job-{i:02d}" for i in (48, 47, 46, 45, 44)]
    assert len(picker.options) == TEAM_NAMES + 1  # and "seed", the first run's
    (spec,) = charts(at)
    x, y = spec["layer"][0]["encoding"]["x"], spec["layer"][0]["encoding"]["y"]
    assert x["type"] == "temporal" and x["title"] and y["title"] == "exposed comm per step (ms)"
    rows = [r for r in chart_rows(at) if "run_id" in r]
    assert {r["name"] for r in rows} == set(picker.value) and len(rows) == 5 * (TEAM_RUNS // TEAM_NAMES)
    assert all(len(r["commit"]) == 12 for r in rows)
    names, runs_table = at.dataframe[0].value, at.dataframe[-1].value
    assert len(names) == TEAM_NAMES + 1
    assert len(runs_table) == 200 and runs_table["run_id"].iloc[0] == TEAM_RUNS  # newest first
    picker.set_value(["team/job-00"]).run()
    no_errors(at)
    assert {r["name"] for r in chart_rows(at) if "run_id" in r} == {"team/job-00"}
