"""The prediction engine with no change: the model's time and exposure of every collective.

What the ``buckets`` report shows beside the measurement, and the what-if's ``model``
figures of an unchanged run, from one engine:

- predicted comm: the comm model's time of the collective (``comm.py``: the ring model
  of its kind, bytes and group, fitted to the run), None for a group of one rank;
- predicted exposed: its exposed time when its measured step (``plan.py``) is
  replayed with every DDP bucket or FSDP unit collective at the model's transfer time
  and no wait for peers (``replay.py``, ``which="transfer"``): ready times and the
  compute around the comm as measured. That is what the F/W model expects of this
  run's layout and timing; waiting for a late peer is measured apart (the ranks'
  ``comm_wait_ms``, the reconciliation's ``late_rank``), never read as transfer. None
  for a collective that no replay covers (a step without buckets or units, a
  collective of another family).

A run's ``measure.collectives.Collectives`` gets its prediction columns filled in place and
is returned (a list of rows is made columns first, ``collectives.table_of``): the rows are
never held twice (two million of them at 1,024 ranks).
"""

from __future__ import annotations

from overlapscope.analyzer.measure.collectives import Collective, Collectives, table_of
from overlapscope.analyzer.predict.comm import CommModel
from overlapscope.analyzer.predict.plan import StepPlan
from overlapscope.analyzer.predict.replay import replay_plan

def predict_comm(rows: list[Collective], model: CommModel) -> Collectives:
    """Each row with predicted_comm_ms: the model's time of its kind, bytes and group."""
    known: dict[tuple, float | None] = {}  # one prediction per kind, size and group: rows share a few

    def predicted(collective, nbytes, group) -> float | None:
        key = (collective, nbytes, group)
        if key not in known:
            known[key] = None
            if collective and nbytes and group and group > 1:
                t = model.model_ms(collective, nbytes, group)
                known[key] = None if t is None else round(t, 6)
        return known[key]

    rows = table_of(rows)
    rows.set("predicted_comm_ms", list(map(predicted, rows.values("collective"), rows.values("bytes"),
                                            rows.values("group_size"))))
    return rows


def predict_exposed(rows: list[Collective], plans: list[StepPlan]) -> Collectives:
    """Each row with predicted_exposed_ms: its exposure in the model's replay of its step."""
    exposed: dict[tuple[int, int], float] = {}
    for plan in plans:
        replay = replay_plan(plan, "transfer")
        for x in plan.xfers:
            span = replay.spans.get(id(x))
            if span is not None and x.key is not None:
                exposed[x.key] = round(span.exposed_ms, 6)
    rows = table_of(rows)
    rows.set("predicted_exposed_ms", [exposed.get(k) for k in zip(rows.values("rank"), rows.values("event_id"))]
             if exposed else [None] * len(rows))
    return rows
