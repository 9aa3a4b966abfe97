"""``buckets.summary`` and the per-step sums of ``buckets._per_step`` read a run's
collectives column by column (``Collectives``: no view per row held while grouping). Their
figures must be those of grouping the rows one by one, written out here in plain Python:
means as ``statistics.fmean``, the median bus bandwidth, a step's predicted sums added in
row order, the first row's bytes, groups in the order first met."""

from __future__ import annotations

import statistics
from collections import defaultdict

from hypothesis import given, settings, strategies as st

from overlapscope.analyzer.measure.collectives import Collective, Collectives
from overlapscope.analyzer.predict import buckets
from overlapscope.analyzer.store.runinfo import RunInfo
from overlapscope.contract.manifest import EMPTY

_MS = st.floats(-1e6, 1e6, allow_nan=False)
ROWS = st.lists(st.builds(
    Collective, rank=st.integers(0, 3), step=st.one_of(st.none(), st.integers(-1, 3)),
    kind=st.sampled_from(["ddp_bucket", "fsdp_unit", "other"]), id=st.sampled_from([None, "0", "1", "", "layers.0"]),
    phase=st.sampled_from(["allreduce", "reduce_scatter", "forward_allgather"]), collective=st.just("all_reduce"),
    bytes=st.one_of(st.none(), st.integers(0, 2**40)), dtype=st.none(), group_size=st.just(2), microbatch=st.none(),
    offset_ms=st.none(), comm_ms=_MS, exposed_ms=_MS, busbw_gbps=st.one_of(st.none(), st.floats(0, 1e3)),
    inferred=st.booleans(), event_id=st.integers(0, 100), predicted_comm_ms=st.one_of(st.none(), _MS),
    predicted_exposed_ms=st.one_of(st.none(), _MS)), max_size=40)


def _mean(values):
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 6) if values else None


def _summary_one_by_one(rows: list[Collective]) -> list[dict]:
    groups = defaultdict(list)
    for r in rows:
        groups[(r.kind, r.id, r.phase)].append(r)
    out = []
    for (kind, id_, phase), items in groups.items():
        bws = [i.busbw_gbps for i in items if i.busbw_gbps is not None]
        comm, exposed = _mean(i.comm_ms for i in items), _mean(i.exposed_ms for i in items)
        out.append({"kind": kind, "id": id_, "phase": phase, "count": len(items), "bytes": items[0].bytes,
                    "comm_ms": comm, "exposed_ms": exposed, "hidden_ms": round(comm - exposed, 6),
                    "busbw_gbps": round(statistics.median(bws), 4) if bws else None,
                    "predicted_comm_ms": _mean(i.predicted_comm_ms for i in items),
                    "predicted_exposed_ms": _mean(i.predicted_exposed_ms for i in items),
                    "inferred": any(i.inferred for i in items)})
    return sorted(out, key=lambda s: -(s["exposed_ms"] or 0))


@settings(max_examples=300, deadline=None)
@given(ROWS)
def test_summary_from_columns_is_the_rows_grouped_one_by_one(rows):
    want = _summary_one_by_one(rows)
    assert buckets.summary(Collectives.of(rows)) == want
    assert buckets.summary(rows) == want  # a list of rows: as columns first
    got = buckets.summary(Collectives.of(rows))
    assert [type(g["bytes"]) for g in got] == [type(w["bytes"]) for w in want]
    assert [type(g["inferred"]) for g in got] == [bool] * len(want)


_INFO = RunInfo(run_id=1, name="r", source=None, world_size=4, backend="gloo", device_kind="cpu", manifest=EMPTY,
                has_manifest=False)
_INPUTS = buckets._Inputs(None, None, None, None, None, None, 2.0, 2.0)


@settings(max_examples=300, deadline=None)
@given(ROWS, st.lists(st.tuples(st.integers(0, 4), st.integers(-1, 4)), max_size=12))
def test_step_sums_from_columns_are_the_rows_added_in_order(rows, keys):
    # the overlap's steps (a key twice, and steps without collectives, included); a row whose
    # step is None or not listed counts nowhere
    overlap_steps = [{"rank": r, "step": s, "step_ms": 1.0, "comm_ms": 0.5, "exposed_comm_ms": 0.25} for r, s in keys]
    got, models = buckets._per_step(Collectives.of(rows), overlap_steps, _INPUTS, _INFO)
    want = []
    for s in overlap_steps:
        items = [r for r in rows if (r.rank, r.step) == (s["rank"], s["step"])]
        pc = [i.predicted_comm_ms for i in items if i.predicted_comm_ms is not None]
        pe = [i.predicted_exposed_ms for i in items if i.predicted_exposed_ms is not None]
        want.append({**s, "collectives": len(items), "predicted_comm_ms": round(sum(pc), 6) if pc else None,
                     "predicted_exposed_ms": round(sum(pe), 6) if pe else None})
    assert got == want
    assert [type(g["collectives"]) for g in got] == [int] * len(want)
    assert [(m["rank"], m["step"]) for m in models] == keys
    assert buckets._per_step(rows, overlap_steps, _INPUTS, _INFO)[0] == want


def test_a_steps_sum_adds_in_row_order():
    # 1e16 + 1 + 1 loses both ones added left to right, keeps them added right to left
    # (exactly as Python's sum of the rows in order did: the JSON of a stored run stays the same)
    rows = [Collective(rank=0, step=0, kind="ddp_bucket", id="0", phase="allreduce", collective="all_reduce",
                       bytes=1, dtype=None, group_size=2, microbatch=None, offset_ms=None, comm_ms=1.0,
                       exposed_ms=0.0, busbw_gbps=None, inferred=False, event_id=i, predicted_comm_ms=v)
            for i, v in enumerate([1e16, 1.0, 1.0])]
    steps = [{"rank": 0, "step": 0, "step_ms": 1.0, "comm_ms": 1.0, "exposed_comm_ms": 0.0}]
    got = buckets._per_step(Collectives.of(rows), steps, _INPUTS, _INFO)[0][0]["predicted_comm_ms"]
    assert got == 1e16 + 1.0 + 1.0 == 1e16
    got = buckets._per_step(Collectives.of(rows[::-1]), steps, _INPUTS, _INFO)[0][0]["predicted_comm_ms"]
    assert got == 1.0 + 1.0 + 1e16 != 1e16


def test_a_groups_mean_is_exact_as_fmean():
    # fmean sums exactly: (1e16 + 1 - 1e16) / 3 is 1/3, where adding left to right gives 0
    rows = [Collective(rank=0, step=0, kind="ddp_bucket", id="0", phase="allreduce", collective="all_reduce",
                       bytes=None, dtype=None, group_size=2, microbatch=None, offset_ms=None, comm_ms=v,
                       exposed_ms=0.0, busbw_gbps=None, inferred=False, event_id=i)
            for i, v in enumerate([1e16, 1.0, -1e16])]
    (group,) = buckets.summary(Collectives.of(rows))
    assert group["comm_ms"] == round(1 / 3, 6) and group["hidden_ms"] == round(1 / 3, 6)
    assert group["bytes"] is None and group["busbw_gbps"] is None and group["count"] == 3
