"""The model's reconciliation: transfer time beyond what W predicts, per rank and step
(``predict.reconcile._slow_transfers``), against a plain recomputation from the waits
table, on every sample run with sizes and at two W (the faster W leaves most transfers
slower than predicted), and the same read a block of ranks at a time."""

from __future__ import annotations

from collections import defaultdict

import pytest

from conftest import SAMPLES
from overlapscope.analyzer.engine import map_run
from overlapscope.analyzer.measure import collectives, overlap
from overlapscope.analyzer.predict import exposure
from overlapscope.analyzer.predict.comm import CommModel
from overlapscope.analyzer.predict.reconcile import _slow_transfers
from overlapscope.analyzer.store.runinfo import run_info


def _plain(con, rows) -> dict:
    """Per (rank, step): sum over its transfers of max(0, comm - wait - predicted), in ms."""
    waited = {(r, e): w for r, e, w in con.execute("SELECT rank, event_id, wait_ns FROM comm_wait").fetchall()}
    out: dict = defaultdict(float)
    for r in rows:
        if r.step is not None and r.predicted_comm_ms is not None:
            out[(r.rank, r.step)] += max(0.0, r.comm_ms - waited.get((r.rank, r.event_id), 0) / 1e6
                                         - r.predicted_comm_ms)
    return out


@pytest.mark.parametrize("bundle", ["ddp_tiny_buckets", "fsdp_per_block", "hsdp_2x2"])
def test_slow_transfers_are_the_excess_over_the_prediction(bundle):
    mapped = map_run([str(SAMPLES / bundle)], "attribution", workers=1)
    con, info = mapped.con, run_info(mapped.con, mapped.run_id)
    overlap.compute(con, mapped.run_id)  # the waits (comm_wait)
    for w_bytes_per_s in (1e8, 1e10):
        rows = collectives.compute(con, info)
        # the engine's comm model at one W for every kind, no latency (no rows to fit on)
        model = CommModel(None, [], {r.collective: w_bytes_per_s for r in rows if r.collective})
        rows = exposure.predict_comm(rows, model)
        expected = _plain(con, rows)
        assert sum(1 for v in expected.values() if v > 0) >= 2, (bundle, w_bytes_per_s)
        assert _slow_transfers(con, rows) == pytest.approx(expected, abs=1e-9), (bundle, w_bytes_per_s)
        # a block of whole ranks at a time (a rank alone where it has more rows): the same sums
        for rows_per_block in (1, len(rows) // 3):
            assert _slow_transfers(con, rows, rows_per_block) == _slow_transfers(con, rows), rows_per_block
