"""analyzer.headline: one definition of a run's headline (the median step of the slowest rank)."""

from __future__ import annotations

from overlapscope.analyzer.headline import AGGREGATION, AGGREGATION_NO_STEPS, failed, headline


def _step(rank, step, step_ms, compute, comm, exposed, idle=0.0):
    return {"rank": rank, "step": step, "step_ms": step_ms, "compute_ms": compute, "comm_ms": comm,
            "exposed_comm_ms": exposed, "idle_ms": idle}


# Rank 1 is slower (median step 13 vs 11); four steps each: an even count, so the
# median is the mean of the two middle steps, not the upper one.
STEPS = [
    _step(0, 1, 10.0, 6.0, 4.0, 1.0), _step(0, 2, 11.0, 6.0, 4.0, 1.0),
    _step(0, 3, 11.0, 6.0, 4.0, 2.0), _step(0, 4, 12.0, 6.0, 4.0, 3.0),
    _step(1, 1, 12.0, 5.0, 2.0, 2.0), _step(1, 2, 12.0, 5.0, 4.0, 2.0),
    _step(1, 3, 14.0, 5.0, 6.0, 4.0, idle=1.0), _step(1, 4, 20.0, 5.0, 8.0, 6.0, idle=3.0),
]
RANKS = [{"rank": 0, "exposed_comm_ms": 7.0, "comm_ms": 16.0, "compute_ms": 24.0, "idle_ms": 0.0},
         {"rank": 1, "exposed_comm_ms": 14.0, "comm_ms": 20.0, "compute_ms": 20.0, "idle_ms": 4.0}]


def test_every_figure_is_the_slowest_ranks_median_step():
    head = headline({"ranks": RANKS, "steps": STEPS})
    assert head["aggregation"] == AGGREGATION
    assert head["slowest_rank"] == 1 and head["ranks"] == 2 and head["steps"] == 4
    # rank 1's sorted steps 12, 12, 14, 20: median (12 + 14) / 2 = 13
    assert head["step_ms"] == 13.0
    assert head["comm_ms"] == 5.0  # 2, 4, 6, 8 -> 5
    assert head["exposed_comm_ms"] == 3.0  # 2, 2, 4, 6 -> 3
    assert head["compute_ms"] == 5.0 and head["idle_ms"] == 0.5
    # overlap and the exposed share come from the same medians: they agree with them
    assert head["overlap_pct"] == 40.0  # 100 x (5 - 3) / 5
    assert head["exposed_pct"] == round(100 * 3 / 13, 2)
    assert head["slowest_step"] == {"rank": 1, "step": 4, "step_ms": 20.0, "exposed_comm_ms": 6.0}
    assert head["failed_findings"] is None


def test_ties_go_to_more_exposed_comm_then_the_lower_rank():
    steps = [_step(0, 1, 10.0, 5.0, 4.0, 1.0), _step(1, 1, 10.0, 5.0, 4.0, 3.0), _step(2, 1, 10.0, 5.0, 4.0, 3.0)]
    assert headline({"ranks": [], "steps": steps})["slowest_rank"] == 1


def test_without_steps_the_most_exposed_ranks_whole_trace():
    head = headline({"ranks": RANKS, "steps": []})
    assert head["aggregation"] == AGGREGATION_NO_STEPS
    assert head["slowest_rank"] == 1 and head["step_ms"] is None and head["exposed_pct"] is None
    assert head["exposed_comm_ms"] == 14.0 and head["overlap_pct"] == 30.0
    assert head["slowest_step"] is None and head["steps"] == 0


def test_failed_findings_in_the_checklists_order():
    findings = [{"id": "b", "status": "fail"}, {"id": "a", "status": "warn"}, {"id": "c", "status": "fail"}]
    assert failed(findings) == ["b", "c"]
    assert headline({"ranks": RANKS, "steps": STEPS}, failed(findings))["failed_findings"] == ["b", "c"]
