"""analyzer.timeline: lanes, marks, exposed comm and aggregation of one step."""

from __future__ import annotations

import pytest

from overlapscope.analyzer import api
from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog
from overlapscope.analyzer.measure import timeline
from overlapscope.analyzer.engine.load import load
from builders import CpuTrace, GpuTrace, write_bundle

US = 1e-3  # ms


def _load(tmp_path, traces):
    loaded = load([write_bundle(tmp_path / "run", traces)], detail="full", workers=1)
    return loaded.con, loaded.run_id


def _two_ranks() -> list[GpuTrace]:
    """Step 1 of two ranks (us from the trace start; the window starts at the first kernel, 10):

        rank 0  stream 7   compute  [10 ------ 50)      [70 ------ 110)
                stream 20  comm               [40 ------------ 90)
                exposed                            [50 -- 70)
        rank 1  stream 7   compute  [10 ------ 50)      [70 ------ 110)
                stream 20  comm          [20 -- 40)                      (hidden)

    Step 2 starts its device work at 210: step 1's window is [10, 210), 200 us.
    """
    traces = []
    for rank, (comm_start, comm_dur) in enumerate(((40, 50), (20, 20))):
        t = GpuTrace(rank=rank).step(1, 0, 200).step(2, 200, 100)
        t.kernel(10, 40, step=1).kernel(70, 40, step=1).comm(comm_start, comm_dur, step=1)
        t.kernel(210, 50, step=2)
        traces.append(t)
    return traces


def test_exposed_comm_is_comm_minus_compute(tmp_path):
    con, run_id = _load(tmp_path, _two_ranks())
    tl = timeline.timeline(con, run_id, step=1)
    assert tl["ranks"] == [0, 1]
    w0, w1 = tl["windows"]
    assert (w0["window_ms"], w0["compute_ms"], w0["comm_ms"], w0["exposed_ms"]) == pytest.approx(
        (200 * US, 80 * US, 50 * US, 20 * US))
    assert w1["exposed_ms"] == 0
    (piece,) = tl["exposed"]
    assert (piece["rank"], piece["start_ms"], piece["end_ms"]) == (0, pytest.approx(40 * US), pytest.approx(60 * US))
    assert piece["lane"] == "r0 · stream 20 (NCCL)"  # the stream running NCCL kernels says so


def test_exposed_comm_matches_the_step_analysis(tmp_path):
    con, run_id = _load(tmp_path, _two_ranks())
    tl = timeline.timeline(con, run_id, step=1)
    steps = {(s["rank"], s["step"]): s for s in api.analyze_run(con, run_id)["steps"]}
    for w in tl["windows"]:
        assert w["exposed_ms"] == pytest.approx(steps[(w["rank"], 1)]["exposed_comm_ms"])
        assert w["window_ms"] == pytest.approx(steps[(w["rank"], 1)]["step_ms"])


def test_marks_carry_the_collective_attribution(tmp_path):
    con, run_id = _load(tmp_path, _two_ranks())
    tl = timeline.timeline(con, run_id, step=1)
    comm = [m for m in tl["marks"] if m["kind"] == "comm" and m["rank"] == 0]
    assert len(comm) == 1
    c = comm[0]
    assert (c["start_ms"], c["dur_ms"]) == (pytest.approx(30 * US), pytest.approx(50 * US))
    assert c["phase"] == "allreduce" and c["bytes"] == (1 << 20) * 4 and c["collective"] == "all_reduce"
    assert c["coll_exposed_ms"] == pytest.approx(20 * US)
    assert tl["exposed"][0]["bytes"] == c["bytes"]  # the exposed piece names its collective too
    assert [m["kind"] for m in tl["marks"] if m["rank"] == 0].count("compute") == 2


def test_lanes_put_compute_first_and_ranks_filter(tmp_path):
    con, run_id = _load(tmp_path, _two_ranks())
    tl = timeline.timeline(con, run_id, step=1, ranks=[1])
    assert [lane["lane"] for lane in tl["lanes"]] == ["r1 · stream 7", "r1 · stream 20 (NCCL)"]
    assert {m["rank"] for m in tl["marks"]} == {1}
    assert tl["exposed"] == [] and not tl["aggregated"]


def test_attribution_given_by_the_caller_is_used(tmp_path):
    from overlapscope.analyzer.measure import collectives

    import msgspec

    from overlapscope.analyzer.store.runinfo import run_info

    con, run_id = _load(tmp_path, _two_ranks())
    rows = collectives.compute(con, run_info(con, run_id))
    rows = [msgspec.structs.replace(r, id="b7") for r in rows.materialized()]
    tl = timeline.timeline(con, run_id, step=1, attribution=rows)
    assert {m["coll_id"] for m in tl["marks"] if m["kind"] == "comm"} == {"b7"}


def _busy_rank(kernels: int) -> GpuTrace:
    """One rank with ``kernels`` 1-us kernels 1 us apart, a 20-us gap after every 100th,
    and one all-reduce after them (exposed whole)."""
    t = GpuTrace(rank=0, world_size=1).step(1, 0, 10_000).step(2, 10_000, 100)
    at = 0.0
    for k in range(kernels):
        t.kernel(at, 1.0, step=1)
        at += 2.0 + (20.0 if k % 100 == 99 else 0.0)
    t.comm(at + 10, 30, step=1)
    t.kernel(10_000, 5, step=2)
    return t


def test_too_many_marks_merge_into_busy_blocks(tmp_path):
    con, run_id = _load(tmp_path, [_busy_rank(1500)])
    full = timeline.timeline(con, run_id, step=1, max_marks=5000)
    assert not full["aggregated"] and full["drawn_marks"] == full["raw_marks"]
    tl = timeline.timeline(con, run_id, step=1, max_marks=50)
    assert tl["aggregated"] and tl["drawn_marks"] <= 50 and tl["raw_marks"] == full["raw_marks"]
    compute = [m for m in tl["marks"] if m["kind"] == "compute"]
    assert sum(m["marks"] for m in compute) == 1500
    # blocks keep the busy time exactly: their busy_ms add up to the compute union
    assert sum(m["busy_ms"] for m in compute) == pytest.approx(tl["windows"][0]["compute_ms"])
    assert max(m["marks"] for m in compute) > 1
    # the small groups are drawn whole: the one all-reduce keeps its attribution
    (comm,) = [m for m in tl["marks"] if m["kind"] == "comm"]
    assert comm["marks"] == 1 and comm["phase"] == "allreduce"


def test_blocks_use_the_longest_gaps_first(tmp_path):
    """15 groups of 100 kernels with 20-us gaps between groups: a budget of 15 blocks
    for the compute lane gives exactly the 15 groups."""
    con, run_id = _load(tmp_path, [_busy_rank(1500)])
    tl = timeline.timeline(con, run_id, step=1, max_marks=17)  # 1 comm + 1 exposed + 15 compute
    assert len(tl["exposed"]) == 1
    compute = [m for m in tl["marks"] if m["kind"] == "compute"]
    assert len(compute) == 15
    assert {m["marks"] for m in compute} == {100}


def test_nested_cpu_ops_draw_the_outer_one(tmp_path):
    """CPU (gloo): aten::linear [10, 50) holds aten::addmm [15, 45); a gloo span [40, 70)
    is exposed from 50 to 70."""
    traces = []
    for rank in (0, 1):
        t = CpuTrace(rank=rank).step(1, 0, 100)
        t.op(10, 40, name="aten::linear").op(15, 30, name="aten::addmm").gloo(40, 30)
        traces.append(t)
    con, run_id = _load(tmp_path, traces)
    tl = timeline.timeline(con, run_id, step=1, ranks=[0])
    compute = [m for m in tl["marks"] if m["kind"] == "compute"]
    assert [m["name"] for m in compute] == ["aten::linear"]
    assert [(p["start_ms"], p["end_ms"]) for p in tl["exposed"]] == [(pytest.approx(50 * US), pytest.approx(70 * US))]
    assert {lane["track_kind"] for lane in tl["lanes"]} == {"cpu_thread", "comm_thread"}
    # named for what each thread does (the builder's thread 7 is its process's, pid 7), not "thread 7 (python)"
    assert [lane["lane"] for lane in tl["lanes"]] == ["r0 · main thread", "r0 · comm thread"]


def test_cpu_lanes_of_one_role_are_told_apart_by_tid():
    lanes = [{"rank": 0, "track_id": i, "track_kind": kind, "track": name, "pid": "7", "tid": tid, "has_comm": False}
             for i, (kind, name, tid) in enumerate([("cpu_thread", "thread 7 (python)", "7"),
                                                    ("cpu_thread", "thread 8 (pt_autograd_0)", "8"),
                                                    ("comm_thread", "thread 9 (pt_gloo_runloop)", "9"),
                                                    ("comm_thread", "thread 10 (pt_gloo_runloop)", "10"),
                                                    ("cpu_thread", "thread 11 (python)", "11")])]
    assert list(timeline._lane_labels(lanes).values()) == [
        "r0 · main thread", "r0 · autograd thread", "r0 · comm thread (tid 9)", "r0 · comm thread (tid 10)",
        "r0 · thread 11 (python)"]


def test_steps_and_missing_step(tmp_path):
    con, run_id = _load(tmp_path, _two_ranks())
    assert [(s["step"], s["ranks"]) for s in timeline.steps(con, run_id)] == [(1, 2), (2, 2)]
    assert timeline.steps(con, run_id)[0]["window_ms"] == pytest.approx(200 * US)
    empty = timeline.timeline(con, run_id, step=99)
    assert empty["windows"] == [] and empty["marks"] == [] and empty["lanes"] == []
    with pytest.raises(ValueError):
        timeline.timeline(con, run_id, step=1, max_marks=0)


def test_real_runs_stay_within_the_budget(dashboard_db):
    con = runs.open_catalog(dashboard_db, read_only=True)
    for run in catalog.runs(con):
        for step in timeline.steps(con, run["run_id"]):
            tl = timeline.timeline(con, run["run_id"], step["step"], max_marks=300)
            assert tl["drawn_marks"] <= 300 + len(tl["lanes"]) * 4  # a share is at least 1 per group
            assert tl["lanes"] and tl["marks"]
            for w in tl["windows"]:
                assert 0 <= w["exposed_ms"] <= w["comm_ms"] + 1e-6
                assert w["compute_ms"] <= w["window_ms"] + 1e-6
            assert min(w["start_ms"] for w in tl["windows"]) == 0  # the earliest window starts the chart
            for m in tl["marks"] + tl["exposed"]:
                w = next(w for w in tl["windows"] if w["rank"] == m["rank"])  # its window, on the common clock
                assert w["end_ms"] - w["start_ms"] == pytest.approx(w["window_ms"], abs=1e-6)
                assert w["start_ms"] - 1e-9 <= m["start_ms"] <= m["end_ms"] <= w["end_ms"] + 1e-6
    con.close()


def test_a_stored_run_reads_its_ranks_attribution_as_columns(dashboard_db, tmp_path):
    """Ingest keeps the run's collectives as the timeline reads them (one Parquet file, a row
    group per few ranks): the timeline of a stored run reads the rows of the ranks it draws,
    and draws what it draws from the collectives of the stored buckets document."""
    import shutil

    from overlapscope.analyzer.store import runstore
    from overlapscope.analyzer.store.runinfo import run_info

    con = runs.open_catalog(dashboard_db, read_only=True)
    try:
        for run in catalog.runs(con):
            info = run_info(con, run["run_id"])
            assert runstore.has_attribution(info.run_dir)
            assert api.attribution(con, run["run_id"]) is None  # nothing for the dashboard to hold
            from_document = timeline.stored_attribution(info)
            assert from_document
            for rank in sorted({r.rank for r in from_document}):
                table = runstore.read_attribution(info.run_dir, [rank])
                assert table.column("rank").to_pylist() == [r.rank for r in from_document if r.rank == rank]
                assert table.column("event_id").to_pylist() == [r.event_id for r in from_document if r.rank == rank]
            ranks = sorted({r.rank for r in from_document})
            for step in timeline.steps(con, run["run_id"]):
                for shown in ([ranks[0]], ranks):
                    columns = timeline.timeline(con, run["run_id"], step["step"], shown)
                    rows = timeline.timeline(con, run["run_id"], step["step"], shown, attribution=from_document)
                    assert columns == rows
                    assert any(m["coll_kind"] for m in columns["marks"] + columns["exposed"])
    finally:
        con.close()
    # a run stored before the columns were kept: the document's rows, through the dashboard's call
    copy = tmp_path / "old.duckdb"
    shutil.copy(dashboard_db, copy)
    shutil.copytree(runstore.store_dir(dashboard_db), runstore.store_dir(copy))
    for path in runstore.store_dir(copy).glob(f"*/{runstore.ATTRIBUTION}"):
        path.unlink()
    con = runs.open_catalog(copy, read_only=True)
    try:
        run_id = catalog.runs(con)[0]["run_id"]
        rows = api.attribution(con, run_id)
        assert rows and rows == timeline.stored_attribution(run_info(con, run_id))
        step = timeline.steps(con, run_id)[0]["step"]
        assert timeline.timeline(con, run_id, step)["marks"]
    finally:
        con.close()
