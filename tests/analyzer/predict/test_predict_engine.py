"""One prediction engine (analyzer/predict/): the buckets report's predictions are the
engine's with no change, the what-if is the same engine with changes, and a wait for a
late peer is never predicted as transfer.

Expected values come from the run itself through another route (the same collective in
the other command's answer; the measured waits of the reference SQL), and from the
sample's induced cause (ddp_straggler: rank 1 sleeps 100 ms before every backward)."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

from conftest import REFERENCE, SAMPLES
from overlapscope.analyzer import api
from overlapscope.analyzer.engine import map_run
from overlapscope.analyzer.predict import buckets as buckets_report, whatif

SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob("*.json*")))
REFERENCE_FILES = sorted(str(p.relative_to(REFERENCE)) for p in REFERENCE.glob("gpu_*/*.json.gz")) \
    if REFERENCE.is_dir() else []


def _inputs():
    return [pytest.param(str(SAMPLES / n), id=n) for n in SAMPLE_NAMES] + \
           [pytest.param(str(REFERENCE / f), id=f.split("/")[0]) for f in REFERENCE_FILES]


@pytest.mark.parametrize("path", _inputs())
def test_buckets_and_whatif_give_each_collective_the_same_predicted_time(path):
    """``buckets --json``'s predicted_comm_ms of a collective is ``whatif --json``'s model_ms
    of it (no change), for every collective the what-if lists (its typical step)."""
    b = api.buckets([path], workers=1)
    w = api.whatif([path], workers=1)
    if not w["collectives"]:  # nothing to replay (no buckets or units): nothing to compare
        assert w["warnings"]
        return
    where = w["collectives_of"]
    predicted = defaultdict(set)
    for r in b["collectives"]:
        if (r["rank"], r["step"]) == (where["rank"], where["step"]) and r["predicted_comm_ms"] is not None:
            predicted[(r["phase"], r["id"])].add(r["predicted_comm_ms"])
    compared = 0
    for c in w["collectives"]:
        if c["model_ms"] is None or c["group_size"] <= 1:
            continue
        # whatif prints 4 decimals of a ms, buckets 6: the same number to whatif's precision
        found = predicted[(c["phase"], c["id"])]
        assert found and all(abs(p - c["model_ms"]) <= 5e-5 + 1e-9 for p in found), (c["phase"], c["id"], found)
        compared += 1
    assert compared == len([c for c in w["collectives"] if c["model_ms"] is not None and c["group_size"] > 1]) > 0


@pytest.mark.parametrize("name", ["ddp", "fsdp_per_block", "hsdp_2x2"])
def test_every_collective_of_every_step_is_predicted_by_the_plans(name):
    """Across every rank and step (not only the what-if's typical one): each replayed
    collective's predicted comm is its plan's model time, and each has a predicted exposed
    time no longer than its predicted comm."""
    mapped = map_run([str(SAMPLES / name)], "attribution", workers=1)
    a = buckets_report.analysis(mapped.con, mapped.run_id)
    model, plans = whatif.prepare(a)
    assert model is a.comm_model and plans is a.plans and plans
    rows = {(r.rank, r.event_id): r for r in a.collectives}
    seen = 0
    for plan in plans:
        for x in plan.xfers:
            r = rows[x.key]
            assert r.predicted_comm_ms == pytest.approx(x.model_ms, abs=1e-6)
            assert r.predicted_exposed_ms is not None
            assert 0.0 <= r.predicted_exposed_ms <= r.predicted_comm_ms + 1e-6
            seen += 1
    assert seen == sum(1 for r in a.collectives if r.kind in ("ddp_bucket", "fsdp_unit") and r.step is not None
                       and r.collective)


def test_a_late_peers_wait_is_not_predicted_as_transfer():
    """ddp_straggler: rank 1 sleeps 100 ms before every backward, so rank 0's all-reduces
    wait for it (about 75-100 ms of exposed comm per step). The model predicts rank 0's
    transfers, not that wait: its predicted exposed comm per step stays a small part of
    the measured one, and the measured waits (the ranks' comm_wait_ms) hold the rest."""
    b = api.buckets([str(SAMPLES / "ddp_straggler")], workers=1)
    a = api.analyze([str(SAMPLES / "ddp_straggler")], workers=1)
    rank0 = [s for s in b["steps"] if s["rank"] == 0]
    measured = statistics.median(s["exposed_comm_ms"] for s in rank0)
    predicted = statistics.median(s["predicted_exposed_ms"] for s in rank0)
    assert measured > 30.0  # the straggler's wait, exposed
    assert predicted < 0.25 * measured
    waited = next(r for r in a["ranks"] if r["rank"] == 0)["exposed_wait_ms"]
    assert waited > 0.5 * sum(s["exposed_comm_ms"] for s in rank0)  # the wait is measured apart
