"""Gradient accumulation's what-if (``--sync`` / ``--no-sync`` / ``--accum``) on plans built
by hand: which measured pass each micro-batch replays, and what reducing costs the compute.

Expected values come from the plans' own numbers, worked by hand in each test. The
analysis the changes read is two facts of the run (the manifest's ``no_sync``, the device
kind), given here as the record they are.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from overlapscope.analyzer.predict.apply import _accumulate
from overlapscope.analyzer.predict.changes import Changes
from overlapscope.analyzer.predict.plan import DdpPass, FsdpPass, StepPlan, Unit, Xfer

from conftest import SAMPLES
from test_whatif import _predict


def _x(phase: str, id_: str, wait_ms: float = 0.0, dur_ms: float = 5.0, exposed_ms: float | None = None) -> Xfer:
    collective = {"reduce_scatter": "reduce_scatter", "allreduce": "all_reduce"}.get(phase, "all_gather")
    return Xfer(phase=phase, id=id_, collective=collective, bytes=1e6, group_size=2, dur_ms=dur_ms, model_ms=dur_ms,
                measured_ms=wait_ms + dur_ms, measured_exposed_ms=exposed_ms, wait_ms=wait_ms)


def _fsdp_pass(mb: int, gather_wait_ms: float, reduces: bool) -> FsdpPass:
    units = [Unit(name=f"layers.{k}", bytes=1e6, forward_ms=3.0, backward_ms=6.0,
                  gather=_x("forward_allgather", f"layers.{k}", gather_wait_ms), regather=None,
                  reduce=[_x("reduce_scatter", f"layers.{k}", 1.0 + mb)] if reduces else []) for k in range(2)]
    return FsdpPass(microbatch=mb, units=units, forward_prefetch=False, backward_prefetch=False)


def _ddp_pass(mb: int) -> DdpPass:
    # two buckets, each 5 ms on the lane of which 1 ms exposed: 4 ms hidden, 8 ms a pass
    buckets = [_x("allreduce", str(b), dur_ms=5.0, exposed_ms=1.0) for b in range(2)]
    return DdpPass(microbatch=mb, buckets=buckets, backward_ms=20.0, ready_curve=[(0.0, 0.0), (2e6, 20.0)])


def _plan(passes: list, microbatches: int, reducer_ms: float = 0.0) -> StepPlan:
    return StepPlan(rank=0, step=1, step_ms=200.0, compute_ms=170.0, comm_ms=40.0, exposed_ms=10.0,
                    optimizer_ms=10.0, passes=passes, microbatches=microbatches, reducer_ms=reducer_ms)


def _run(device_kind: str = "cuda", no_sync: bool | None = None):
    return SimpleNamespace(info=SimpleNamespace(manifest=SimpleNamespace(no_sync=no_sync)), device_kind=device_kind)


def test_no_sync_keeps_each_micro_batchs_own_gathers():
    """Before, every micro-batch but the last replayed the last one's gathers: a last pass whose
    peers were late (50 ms at each gather here) copied that wait into all four, and --no-sync
    read as a loss on a loaded capture (-25.8 ms of 440 ms)."""
    waits = [0.0, 1.0, 2.0, 50.0]
    measured = _plan([_fsdp_pass(i, w, reduces=True) for i, w in enumerate(waits)], microbatches=4)
    changed = _accumulate(measured, Changes(sync=False), _run(), [])
    assert [[u.gather.wait_ms for u in p.units] for p in changed.passes] == [[w, w] for w in waits]
    assert [[len(u.reduce) for u in p.units] for p in changed.passes] == [[0, 0], [0, 0], [0, 0], [1, 1]]
    assert [x.wait_ms for u in changed.passes[-1].units for x in u.reduce] == [4.0, 4.0]  # the last pass's own
    # copies: a later change that edits the new plan leaves the measured one as it was
    old = {id(x) for x in measured.xfers}
    assert not any(id(x) in old for x in changed.xfers)
    assert changed.compute_ms == measured.compute_ms  # no reducer ops, nothing hidden on a GPU run


def test_sync_on_a_run_measured_inside_no_sync_gives_every_pass_the_last_ones_reductions():
    """FSDP gathers in every micro-batch, so a run measured inside no_sync has all its passes, only
    the last reducing. --sync reduces in each: before, the passes were replayed as measured, without
    reductions, and --sync predicted no change."""
    measured = _plan([_fsdp_pass(i, 0.5 * i, reduces=i == 3) for i in range(4)], microbatches=4)
    changed = _accumulate(measured, Changes(sync=True), _run(no_sync=True), [])
    for i, p in enumerate(changed.passes):
        assert [u.gather.wait_ms for u in p.units] == [0.5 * i, 0.5 * i]
        assert [(x.phase, x.id, x.wait_ms) for u in p.units for x in u.reduce] == \
            [("reduce_scatter", "layers.0", 4.0), ("reduce_scatter", "layers.1", 4.0)]
    assert len({id(x) for x in changed.xfers}) == len(changed.xfers) == 4 * 4


def test_each_pass_that_reduces_pays_one_share_of_the_reducers_ops_and_hidden_comm():
    """A CPU DDP run, 4 micro-batches that all reduce, 12 ms of reducer ops in the step, 8 ms of
    each pass's buckets hidden by its compute (paid in compute: gloo shares the cores). A share
    per reducing pass: (12 + 4 x 8) / 4 = 11 ms."""
    share_ms = (12.0 + 4 * 8.0) / 4
    synced = _plan([_ddp_pass(i) for i in range(4)], microbatches=4, reducer_ms=12.0)
    cpu = _run("cpu")
    assert _accumulate(synced, Changes(sync=False), cpu, []).compute_ms == pytest.approx(170.0 - 3 * share_ms)
    assert _accumulate(synced, Changes(sync=True), cpu, []).compute_ms == pytest.approx(170.0)
    # 8 micro-batches inside no_sync: twice the passes' compute (160 ms each 4), one pass reducing of
    # the 8 that the doubled compute pays for
    assert _accumulate(synced, Changes(accum=8, sync=False), cpu, []).compute_ms == \
        pytest.approx(10.0 + 2 * 160.0 - 7 * share_ms)
    # on a GPU the hidden comm costs the compute nothing: the reducer's ops alone, 3 ms a pass
    assert _accumulate(synced, Changes(sync=False), _run("cuda"), []).compute_ms == pytest.approx(170.0 - 3 * 3.0)


def test_a_run_measured_inside_no_sync_gains_nothing_from_no_sync():
    """A DDP run measured inside no_sync has one reducing pass (the last) of 4 micro-batches. Before,
    --no-sync took a share off for each of the 3 quiet passes, which had never reduced."""
    share_ms = 12.0 + 8.0  # the one reducing pass's reducer ops and hidden buckets
    quiet = _plan([_ddp_pass(3)], microbatches=4, reducer_ms=12.0)
    cpu = _run("cpu", no_sync=True)
    assert _accumulate(quiet, Changes(sync=False), cpu, []).compute_ms == pytest.approx(170.0)
    assert _accumulate(quiet, Changes(sync=True), cpu, []).compute_ms == pytest.approx(170.0 + 3 * share_ms)
    # 8 micro-batches: the doubled compute pays for 2 reducing passes, 1 reduces
    assert _accumulate(quiet, Changes(accum=8), cpu, []).compute_ms == pytest.approx(10.0 + 2 * 160.0 - share_ms)


def test_no_sync_on_the_no_sync_sample_predicts_its_own_step():
    """The committed DDP sample measured inside no_sync (2 micro-batches): --no-sync changes nothing,
    so its prediction is its measured step (it read 138.00 -> 130.59 ms before)."""
    p = _predict([SAMPLES / "ddp_accum_nosync"], sync=False)
    assert p["predicted"]["step_ms"] == pytest.approx(p["measured"]["step_ms"], abs=1e-3)
