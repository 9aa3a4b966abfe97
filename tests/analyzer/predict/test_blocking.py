"""Whether a family's collectives block compute, read from the measurement (plan.blocking_families).

A DDP pass's last bucket starts when the backward has no compute left: it is exposed whether or
not collectives block compute. Before, a run of one 25 MB bucket per pass read as "the run's
collectives block compute", and the bucket what-if exposed every new bucket in full (+41-45 %
on a 0.05 MB prediction)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from overlapscope.analyzer.predict.plan import blocking_families


_EVENT_IDS = itertools.count(1)  # a collective is (rank, event id), as in a run's rows


def _bucket(rank, step, launch_ms, comm_ms, exposed_ms, kind="ddp_bucket", microbatch=None):
    ns = int(launch_ms * 1e6)
    return SimpleNamespace(kind=kind, rank=rank, step=step, microbatch=microbatch, launch_ts_ns=ns, start_ns=ns,
                           comm_ms=comm_ms, exposed_ms=exposed_ms, event_id=next(_EVENT_IDS))


def test_one_exposed_bucket_per_pass_is_no_evidence_of_blocking():
    rows = [_bucket(r, s, 10.0 * s, 5.0, 5.0) for r in (0, 1) for s in (1, 2, 3)]
    assert blocking_families(rows) == {}


def test_buckets_exposed_while_the_backward_computes_block():
    rows = [_bucket(0, s, 10.0 * s + i, 2.0, 2.0) for s in (1, 2) for i in range(3)]
    assert blocking_families(rows) == {"ddp_bucket": True}


def test_hidden_buckets_before_an_exposed_last_one_do_not_block():
    rows = [_bucket(0, s, 10.0 * s + i, 2.0, 0.0 if i < 2 else 2.0) for s in (1, 2) for i in range(3)]
    assert blocking_families(rows) == {"ddp_bucket": False}


def test_each_micro_batch_has_its_own_last_bucket():
    rows = [_bucket(0, 1, 10.0 * mb + i, 2.0, 0.0 if i == 0 else 2.0, microbatch=mb) for mb in range(4) for i in range(2)]
    assert blocking_families(rows) == {"ddp_bucket": False}


def test_fsdp_units_count_whole():
    rows = [_bucket(0, 1, float(i), 2.0, 1.9, kind="fsdp_unit") for i in range(4)]
    assert blocking_families(rows) == {"fsdp_unit": True}


def test_a_runs_rows_as_columns_read_alike():
    """A run's rows come as columns read through views made as read (measure.collectives):
    the last bucket of a pass is known by its key, not by the object (before, every view was a
    new object, so no last bucket was left out and a one-bucket run read as blocking)."""
    from overlapscope.analyzer.measure.collectives import Collective, Collectives

    rows = [Collective(rank=r, step=s, kind="ddp_bucket", id="0", phase="allreduce", collective="all_reduce",
                       bytes=1 << 20, dtype="float32", group_size=2, microbatch=None, offset_ms=10.0, comm_ms=5.0,
                       exposed_ms=5.0, busbw_gbps=None, inferred=False, event_id=s, start_ns=s * 10**7,
                       launch_ts_ns=s * 10**7)
            for r in (0, 1) for s in (1, 2, 3)]
    assert blocking_families(rows) == {}  # one exposed bucket per pass: no evidence
    assert blocking_families(Collectives.of(rows)) == {}
