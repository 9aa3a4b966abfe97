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

import array
from collections.abc import Sequence

from overlapscope.analyzer.measure.blocks import EVENT_ID_BITS, ROWS_PER_BLOCK, key_index
from overlapscope.analyzer.measure.collectives import NULL_INT, Collective, Collectives, table_of
from overlapscope.analyzer.predict.comm import CommModel
from overlapscope.analyzer.predict.plan import StepPlan
from overlapscope.analyzer.predict.replay import replay_plan

_NAN = float("nan")  # no prediction (Collectives holds a missing number as NaN)


def predict_comm(rows: list[Collective], model: CommModel) -> Collectives:
    """Each row with predicted_comm_ms: the model's time of its kind, bytes and group, one
    prediction per distinct (kind, bytes, group) (rows share a few), read from the columns
    a block of rows at a time (listing the three columns' values held 33 MiB for a moment at
    256 ranks)."""
    import numpy as np

    rows = table_of(rows)
    texts, known = rows.texts, {}
    columns = [rows.numpy(n) for n in ("collective", "bytes", "group_size")]
    out = rows.numpy("predicted_comm_ms")
    for start in range(0, len(rows), ROWS_PER_BLOCK):
        block = np.stack([c[start:start + ROWS_PER_BLOCK].astype(np.int64) for c in columns])
        distinct, inverse = np.unique(block, axis=1, return_inverse=True)
        predicted = []
        for code, b, g in distinct.T.tolist():
            t = known.get((code, b, g))
            if t is None:  # the first of its kind, bytes and group (a NaN for none is kept too)
                kind, nbytes, group = texts[code], None if b == NULL_INT else b, None if g == NULL_INT else g
                t = model.model_ms(kind, nbytes, group) if kind and nbytes and group and group > 1 else None
                t = known[(code, b, g)] = _NAN if t is None else round(t, 6)
            predicted.append(t)
        out[start:start + ROWS_PER_BLOCK] = np.array(predicted, np.float64)[inverse.reshape(-1)]
    return rows


def predict_exposed(rows: list[Collective], plans: Sequence[StepPlan]) -> Collectives:
    """Each row with predicted_exposed_ms: its exposure in the model's replay of its step.

    The replays' figures are kept by key (rank << EVENT_ID_BITS | event_id) in two arrays and
    found for the rows by the keys' sorted order (``blocks.key_index``): a dict of (rank,
    event_id) took about 200 bytes a bucket or unit collective. Where two of the plans'
    collectives share a key the last one replayed holds, as the dict's last write did."""
    import numpy as np

    keys, exposed = array.array("q"), array.array("d")
    for plan in plans:
        replay = replay_plan(plan, "transfer")
        for x in plan.xfers:
            span = replay.spans.get(id(x))
            if span is not None and x.key is not None:
                keys.append((x.key[0] << EVENT_ID_BITS) | x.key[1])
                exposed.append(round(span.exposed_ms, 6))
    rows = table_of(rows)
    column = rows.numpy("predicted_exposed_ms")
    if not keys:
        column[:] = _NAN
        return rows
    keys, exposed = np.frombuffer(keys, np.int64), np.frombuffer(exposed, np.float64)
    order = np.argsort(keys, kind="stable")  # equal keys in the order replayed: the last of each holds
    keys, exposed = keys[order], exposed[order]
    last = np.append(keys[1:] != keys[:-1], True)
    keys, exposed = keys[last], exposed[last]
    found = key_index(keys, rows.numpy("rank"), rows.numpy("event_id"))
    column[:] = np.where(found >= 0, exposed[found], _NAN)
    return rows
