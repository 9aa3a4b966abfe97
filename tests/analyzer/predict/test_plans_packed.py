"""The run's measured plans packed (``plan.Plans``): read back, plan by plan and by index,
they are the plans the analysis built. (What they hold is the scaling benchmark's to
measure: ``benchmarks/bench_scale.py --ddp-ranks``.)

Expected values: the plans built unpacked from the same run (``plan._plan`` over its steps),
compared field by field (dataclass equality)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from conftest import SAMPLES
from overlapscope.analyzer.engine import map_run
from overlapscope.analyzer.measure import waits
from overlapscope.analyzer.predict import buckets as buckets_report, plan as plan_mod


def _unpacked(con, run_id, a) -> list:
    """The run's plans built one by one, never packed: the steps' bucket and unit rows grouped
    as the analysis groups them."""
    rows = a.collectives
    blocking = plan_mod.blocking_families(rows)
    by_step = defaultdict(list)
    for r in rows:
        if r.step is not None and r.kind in ("ddp_bucket", "fsdp_unit") and r.collective:
            by_step[(r.rank, r.step)].append(r)
    lanes = waits.lanes(con, run_id, rows)
    built = (plan_mod._plan(s, by_step.get((s["rank"], s["step"])), a.info, lanes, a.comm_model, blocking,
                            a.forwards, a.reducer, a.grads) for s in a.overlap["steps"])
    return [p for p in built if p is not None]


@pytest.mark.parametrize("name", ["ddp_tiny_buckets", "fsdp_per_block", "hsdp_2x2", "ddp_accum_sync"])
def test_packed_plans_read_back_as_built(name, monkeypatch):
    monkeypatch.setattr(plan_mod, "XFERS_PER_BLOCK", 5)  # many blocks, and plans across their edges
    mapped = map_run([str(SAMPLES / name)], "attribution", workers=1)
    a = buckets_report.analysis(mapped.con, mapped.run_id)
    expected = _unpacked(mapped.con, mapped.run_id, a)
    packed = a.plans
    assert isinstance(packed, plan_mod.Plans) and len(packed.blocks) > 1
    assert len(packed) == len(expected) == sum(packed.counts)
    assert list(packed) == expected
    assert list(packed) == expected, "a second pass reads the same plans"
    for i in (0, 1, len(expected) // 2, len(expected) - 1, -1, -len(expected)):
        assert packed[i] == expected[i]
    with pytest.raises(IndexError):
        packed[len(expected)]
    assert packed[1:3] == expected[1:3]


def test_plans_appended_and_not_yet_packed_are_read_too():
    mapped = map_run([str(SAMPLES / "ddp")], "attribution", workers=1)
    a = buckets_report.analysis(mapped.con, mapped.run_id)
    plans = list(a.plans)
    partial = plan_mod.Plans()
    for p in plans:
        partial.append(p)
    assert list(partial) == plans and partial[-1] == plans[-1] and len(partial) == len(plans)
    partial.close()
    assert partial.blocks and list(partial) == plans
    assert list(plan_mod.Plans.of([])) == [] and len(plan_mod.Plans.of([])) == 0
