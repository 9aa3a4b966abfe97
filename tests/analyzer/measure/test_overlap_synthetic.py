"""Exposed communication on hand-built traces with hand-computed answers.

Each test draws its intervals (microseconds from the trace start) and states
the expected figures; the analyzer reports milliseconds.
"""

from __future__ import annotations

import pytest

from overlapscope.analyzer.api import analyze
from builders import CpuTrace, GpuTrace, write
from conftest import step_parts_ms

US = 1e-3  # one microsecond in ms


def run(tmp_path, trace):
    return analyze([write(trace, tmp_path / "rank-0.json")], workers=1)


def only_rank(result):
    (rank,) = result["ranks"]
    return rank


def test_full_overlap(tmp_path):
    #   compute s7  |==============================|   0 .. 100
    #   comm    s20        |==========|                20 .. 60
    t = GpuTrace().step(1, 0, 100).kernel(0, 100, step=1).comm(20, 40, step=1)
    r = only_rank(run(tmp_path, t))
    assert r["comm_ms"] == pytest.approx(40 * US)
    assert r["exposed_comm_ms"] == pytest.approx(0)
    assert r["overlap_pct"] == 100.0


def test_no_overlap(tmp_path):
    #   compute  |==========|                0 .. 50
    #   comm                   |========|    60 .. 100
    t = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1).comm(60, 40, step=1)
    r = only_rank(run(tmp_path, t))
    assert r["comm_ms"] == pytest.approx(40 * US)
    assert r["exposed_comm_ms"] == pytest.approx(40 * US)
    assert r["overlap_pct"] == 0.0
    assert r["compute_ms"] == pytest.approx(50 * US)
    # device idle between 50 and 60 only
    assert r["idle_ms"] == pytest.approx(10 * US)


def test_partial_overlap(tmp_path):
    #   compute  |==========|          0 .. 50
    #   comm           |==========|    30 .. 80   -> 20 hidden, 30 exposed
    t = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1).comm(30, 50, step=1)
    r = only_rank(run(tmp_path, t))
    assert r["exposed_comm_ms"] == pytest.approx(30 * US)
    assert r["overlap_pct"] == 40.0


def test_several_compute_streams(tmp_path):
    #   compute s7   |=====|                  0 .. 30
    #   compute s8            |=====|         40 .. 70
    #   comm    s20     |=========|           20 .. 60  -> hidden 20..30 and 40..60 = 30
    t = (GpuTrace().step(1, 0, 100)
         .kernel(0, 30, stream=7, step=1).kernel(40, 30, stream=8, step=1).comm(20, 40, step=1))
    r = only_rank(run(tmp_path, t))
    assert r["comm_ms"] == pytest.approx(40 * US)
    assert r["exposed_comm_ms"] == pytest.approx(10 * US)
    assert r["overlap_pct"] == 75.0
    assert r["compute_ms"] == pytest.approx(60 * US)


def test_overlapping_kernels_on_one_stream(tmp_path):
    # Kernels on one stream may overlap (Kineto does not promise nesting).
    #   compute s7  |========|            0 .. 40
    #   compute s7        |====|          30 .. 50
    #   comm   s20           |====|       45 .. 70
    #   comm   s20               |===|    60 .. 80   -> comm union 45..80 = 35, hidden 45..50 = 5
    t = (GpuTrace().step(1, 0, 100)
         .kernel(0, 40, step=1).kernel(30, 20, step=1).comm(45, 25, step=1).comm(60, 20, step=1))
    r = only_rank(run(tmp_path, t))
    assert r["compute_ms"] == pytest.approx(50 * US)
    assert r["comm_ms"] == pytest.approx(35 * US)
    assert r["exposed_comm_ms"] == pytest.approx(30 * US)


def test_comm_spanning_a_step_boundary(tmp_path):
    # Comm launched in step 1 runs into step 2 and is hidden there by step 2's compute.
    #   step 1 window [0, 100), step 2 window [100, 150)
    #   compute (step 1)  |========|                     0 .. 40
    #   comm    (step 1)        |==================|     30 .. 120
    #   compute (step 2)                      |==========|  100 .. 150
    # step 1 comm 90; hidden 30..40 and 100..120 = 30; exposed 60 (all charged to step 1).
    t = (GpuTrace().step(1, 0, 60).step(2, 60, 60)
         .kernel(0, 40, step=1).comm(30, 90, step=1).kernel(100, 50, step=2))
    res = run(tmp_path, t)
    steps = {s["step"]: s for s in res["steps"]}
    assert steps[1]["comm_ms"] == pytest.approx(90 * US)
    assert steps[1]["exposed_comm_ms"] == pytest.approx(60 * US)
    assert steps[2]["comm_ms"] == pytest.approx(0)
    assert steps[1]["step_ms"] == pytest.approx(100 * US)  # until step 2's first kernel
    assert steps[2]["step_ms"] == pytest.approx(50 * US)
    assert steps[1]["idle_ms"] == pytest.approx(0) and steps[2]["idle_ms"] == pytest.approx(0)
    r = only_rank(res)
    assert r["exposed_comm_ms"] == pytest.approx(60 * US)
    assert r["steps"] == 2


def test_steps_add_up_to_the_rank(tmp_path):
    # Three steps, each: compute 0..60, comm 40..90 (20 hidden, 30 exposed), gap to 100.
    t = GpuTrace()
    for i in range(3):
        t.step(i, 100 * i, 100)
    for i in range(3):
        t.kernel(100 * i, 60, step=i).comm(100 * i + 40, 50, step=i)
    res = run(tmp_path, t)
    r = only_rank(res)
    assert [s["exposed_comm_ms"] for s in res["steps"]] == pytest.approx([30 * US] * 3)
    assert sum(s["exposed_comm_ms"] for s in res["steps"]) == pytest.approx(r["exposed_comm_ms"])
    assert sum(s["comm_ms"] for s in res["steps"]) == pytest.approx(r["comm_ms"])
    # windows: [0,100), [100,200), last [200, 290): idle = 10, 10, 0
    assert [s["idle_ms"] for s in res["steps"]] == pytest.approx([10 * US, 10 * US, 0])
    assert r["step_ms"] == pytest.approx(100 * US)  # median


def test_memcpy_and_sync_are_not_compute(tmp_path):
    #   memcpy        |======================|   0 .. 100
    #   cuda_sync        |=========|             10 .. 50
    #   comm               |=======|             20 .. 60   -> nothing hides it
    t = (GpuTrace().step(1, 0, 100)
         .kernel(0, 100, step=1, cat="gpu_memcpy", name="Memcpy DtoD (Device -> Device)")
         .kernel(10, 40, step=1, cat="cuda_sync", name="Event Sync")
         .comm(20, 40, step=1))
    res = run(tmp_path, t)
    r = only_rank(res)
    assert r["compute_ms"] == 0
    assert r["exposed_comm_ms"] == pytest.approx(40 * US)
    # memcpy alone 0..20 and 60..100: neither compute, comm nor idle
    assert r["other_ms"] == pytest.approx(60 * US)
    assert r["idle_ms"] == pytest.approx(0)
    (s,) = res["steps"]
    assert (s["other_ms"], s["idle_ms"]) == pytest.approx((60 * US, 0))


def test_exposed_comm_that_runs_into_the_next_step(tmp_path):
    # Step 1's comm is still exposed after step 2's first device work (a memcpy).
    #   step 1 window [0, 100), step 2 window [100, 150)
    #   compute (step 1)  |====|                            0 .. 40
    #   comm    (step 1)     |=====================|        30 .. 130
    #   memcpy  (step 2)                  |=|               100 .. 105
    #   compute (step 2)                       |=====|      120 .. 150
    # step 1: comm 100, hidden 30..40 and 120..130 = 20, exposed 80 (40..120), of
    # which 100..120 lies in step 2's window: spill out 20 from step 1, spill in 20 to step 2.
    t = (GpuTrace().step(1, 0, 60).step(2, 60, 60)
         .kernel(0, 40, step=1).comm(30, 100, step=1)
         .kernel(100, 5, step=2, cat="gpu_memcpy", name="Memcpy HtoD (Pageable -> Device)")
         .kernel(120, 30, step=2))
    res = run(tmp_path, t)
    s1, s2 = res["steps"]
    assert (s1["step_ms"], s2["step_ms"]) == pytest.approx((100 * US, 50 * US))
    assert (s1["compute_ms"], s1["comm_ms"], s1["exposed_comm_ms"]) == pytest.approx((40 * US, 100 * US, 80 * US))
    assert (s1["spill_out_ms"], s1["spill_in_ms"], s1["other_ms"], s1["idle_ms"]) == pytest.approx((20 * US, 0, 0, 0))
    assert (s2["compute_ms"], s2["comm_ms"], s2["exposed_comm_ms"]) == pytest.approx((30 * US, 0, 0))
    # the memcpy runs under step 1's comm: not "other"
    assert (s2["spill_out_ms"], s2["spill_in_ms"], s2["other_ms"], s2["idle_ms"]) == pytest.approx((0, 20 * US, 0, 0))
    for s in res["steps"]:
        assert s["step_ms"] == pytest.approx(step_parts_ms(s), abs=1e-9)


def test_late_comm_beside_the_next_steps_own_is_that_steps_own(tmp_path):
    # What one step spills out is not what the next takes in when the two steps' work runs
    # side by side: that time is the window's own step's (docs/definitions.md). A real gloo
    # capture did this (tests/analyzer/measure/test_gloo_ddp.py): step 1's last all-reduce beside step 2's first.
    #   step 1 window [0, 100), step 2 window [100, 200)
    #   compute (step 1)  |=======|                           0 .. 80
    #   comm    (step 1)          |==========|                80 .. 140, stream 20
    #   compute (step 2)            |=|                       100 .. 110
    #   comm    (step 2)               |=====|                120 .. 150, stream 21
    #   compute (step 2)                     |=====|          150 .. 200
    # step 1: exposed 80..100 and 110..140 = 50, 30 of it past its window: spill out 30.
    # step 2: its window is all work (100); its own is 60 of compute and 30 of exposed comm
    # (120..150): spill in 10 (110..120), not 30: 120..140 is step 2's own.
    t = (GpuTrace().step(1, 0, 90).step(2, 100, 90)
         .kernel(0, 80, step=1).comm(80, 60, step=1)
         .kernel(100, 10, step=2).comm(120, 30, stream=21, step=2).kernel(150, 50, step=2))
    res = run(tmp_path, t)
    s1, s2 = res["steps"]
    assert (s1["step_ms"], s2["step_ms"]) == pytest.approx((100 * US, 100 * US))
    assert (s1["exposed_comm_ms"], s1["spill_out_ms"], s1["spill_in_ms"]) == pytest.approx((50 * US, 30 * US, 0))
    assert (s2["compute_ms"], s2["exposed_comm_ms"]) == pytest.approx((60 * US, 30 * US))
    assert (s2["spill_out_ms"], s2["spill_in_ms"], s2["idle_ms"]) == pytest.approx((0, 10 * US, 0))
    for s in res["steps"]:
        assert s["step_ms"] == pytest.approx(step_parts_ms(s), abs=1e-9)


def test_nanosecond_timestamps_are_exact(tmp_path):
    # Fractional microseconds are nanoseconds: 0.001 us of overlap must survive.
    t = GpuTrace().step(1, 0, 10).kernel(0.5, 1.001, step=1).comm(1.5, 1.0, step=1)
    r = only_rank(run(tmp_path, t))
    assert r["comm_ms"] == pytest.approx(1.0 * US, abs=1e-9)
    assert r["exposed_comm_ms"] == pytest.approx(0.999 * US, abs=1e-9)


@pytest.mark.parametrize("name", [
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
    "void ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16(ncclSymkDevWorkArgs4K)",
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
])
def test_nccl_kernel_names_are_comm(tmp_path, name):
    t = GpuTrace().step(1, 0, 100).kernel(0, 10, step=1).kernel(20, 30, stream=20, step=1, name=name)
    r = only_rank(run(tmp_path, t))
    assert r["comm_ms"] == pytest.approx(30 * US)


def test_unknown_kernel_name_with_collective_args_is_comm(tmp_path):
    t = (GpuTrace().step(1, 0, 100)
         .kernel(20, 30, stream=20, step=1, name="some_future_collective_kernel",
                 args={"Collective name": "allreduce", "In msg nelems": 10, "dtype": "Float"}))
    r = only_rank(run(tmp_path, t))
    assert r["comm_ms"] == pytest.approx(30 * US)


def test_cpu_gloo_trace(tmp_path):
    # Training thread 7: aten ops; gloo runloop thread 9: all_reduce spans.
    #   step 1 [0, 100)
    #   aten::mm         |======|        |====|        0 .. 30, 50 .. 70
    #   aten::addmm        |==|                        10 .. 20 (nested: counts once)
    #   c10d::allreduce_      |                        30 .. 31 (a launch: not compute)
    #   gloo:all_reduce         |=============|        35 .. 90 -> hidden 50..70 = 20
    t = (CpuTrace().step(1, 0, 100)
         .op(0, 30).op(10, 10, name="aten::addmm").op(30, 1, name="c10d::allreduce_")
         .op(50, 20).gloo(35, 55))
    res = run(tmp_path, t)
    r = only_rank(res)
    assert r["device_kind"] == "cpu"
    assert r["compute_ms"] == pytest.approx(50 * US)
    assert r["comm_ms"] == pytest.approx(55 * US)
    assert r["exposed_comm_ms"] == pytest.approx(35 * US)
    (s,) = res["steps"]
    assert s["step_ms"] == pytest.approx(100 * US)
    # busy: 0..31 (mm, launch is not busy: 0..30), 35..90 -> idle = 100 - 30 - 55 = 15
    assert s["idle_ms"] == pytest.approx(15 * US)
    assert res["run"]["backend"] == "gloo"


def test_aten_ops_on_the_comm_thread_are_not_compute(tmp_path):
    t = (CpuTrace().step(1, 0, 100).gloo(0, 50).op(10, 20, tid=9))
    r = only_rank(run(tmp_path, t))
    assert r["compute_ms"] == 0
    assert r["exposed_comm_ms"] == pytest.approx(50 * US)


def test_overlapping_step_windows_stop_the_sweep(tmp_path):
    # overlap.sql's sweep gives each elementary segment one window; steps.sql makes windows
    # that tile the timeline, and a store whose windows overlap is refused, never misread
    import duckdb

    from overlapscope.analyzer import sql
    from overlapscope.analyzer.engine.load import load

    t = GpuTrace().step(1, 0, 100).step(2, 100, 100).kernel(0, 150, step=1).kernel(150, 40, step=2)
    loaded = load([write(t, tmp_path / "rank-0.json")], detail="overlap", workers=1)
    sql.ensure(loaded.con, "steps", run_id=loaded.run_id)
    sql.ensure(loaded.con, "overlap", run_id=loaded.run_id)  # as built: fine
    loaded.con.execute("UPDATE steps SET window_end_ns = window_end_ns + 10 WHERE step = 1")
    loaded.con.execute("DELETE FROM _sql_done WHERE script = 'overlap'")  # run it again on these steps
    with pytest.raises(duckdb.Error, match="step windows overlap on rank 0"):
        sql.ensure(loaded.con, "overlap", run_id=loaded.run_id)


def test_compute_inside_transfers_is_the_intersection(tmp_path):
    # instances.sql's comm_compute filters overlap.sql's compute pieces by in_comm: the
    # compute inside the rank's transfers and nothing else (waits and lanes read it)
    #   compute s7   |==========|                  0 .. 50
    #   compute s8                    |======|     60 .. 90
    #   comm    s20        |==========|            30 .. 70   -> inside: 30..50 and 60..70
    from overlapscope.analyzer import sql
    from overlapscope.analyzer.engine.load import load

    t = (GpuTrace().step(1, 0, 100).kernel(0, 50, stream=7, step=1).kernel(60, 30, stream=8, step=1)
         .comm(30, 40, step=1))
    loaded = load([write(t, tmp_path / "rank-0.json")], detail="overlap", workers=1)
    sql.ensure(loaded.con, "instances", run_id=loaded.run_id)
    con = loaded.con
    ((start_ns,),) = con.sql("SELECT min(ts_ns) FROM comm_instance").fetchall()
    pieces = con.sql("SELECT ts_ns - ?, end_ns - ? FROM comm_compute ORDER BY ts_ns",
                     params=[start_ns, start_ns]).fetchall()
    union = []
    for a, b in pieces:  # touching pieces read as one
        if union and union[-1][1] == a:
            union[-1] = (union[-1][0], b)
        else:
            union.append((a, b))
    assert union == [(0, 20_000), (30_000, 40_000)]  # 30..50 and 60..70 us, from the comm's start


def test_a_scripts_private_tables_are_gone_once_it_ran(tmp_path):
    from overlapscope.analyzer import sql
    from overlapscope.analyzer.engine.load import load

    t = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1).comm(30, 40, step=1)
    loaded = load([write(t, tmp_path / "rank-0.json")], detail="attribution", workers=1)
    sql.ensure(loaded.con, "collectives", run_id=loaded.run_id)
    left = loaded.con.sql("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '\\_%\\_%' ESCAPE '\\' "
                          "AND table_name NOT LIKE '\\_sql%' ESCAPE '\\'").fetchall()
    assert left == []
    names = {n for (n,) in loaded.con.sql("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert {"overlap_rank", "overlap_step", "compute_union", "collective_stats"} <= names
