"""Whether a family's collectives block compute, read from the measurement (plan.blocking_families).

A DDP pass's last bucket starts when the backward has no compute left: it is exposed whether or
not collectives block compute. Before, a run of one 25 MB bucket per pass read as "the run's
collectives block compute", and the bucket what-if exposed every new bucket in full (+41-45 %
on a 0.05 MB prediction)."""

from __future__ import annotations

from types import SimpleNamespace

from overlapscope.analyzer.predict.plan import blocking_families


def _bucket(rank, step, launch_ms, comm_ms, exposed_ms, kind="ddp_bucket", microbatch=None):
    ns = int(launch_ms * 1e6)
    return SimpleNamespace(kind=kind, rank=rank, step=step, microbatch=microbatch, launch_ts_ns=ns, start_ns=ns,
                           comm_ms=comm_ms, exposed_ms=exposed_ms)


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
