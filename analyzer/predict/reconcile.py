"""The model beside the measurement, reconciled: where they disagree, which term explains it.

The model's expectation for a step is nothing exposed where its verdict is hidden
or marginal; otherwise (an exposed verdict, or none for want of T) the replay's
predicted exposed time (the run's own bucket or unit order and timing, collectives
at W). Where the
measured exposed comm differs from it by more than the warn share of the step
(3%, the checklist's ``exposed_warn``), each term the model leaves out gets its
figure in ms per step, and the largest explains the gap:

- ``order`` (against a hidden or marginal verdict): what the replay exposes from the
  run's own bucket or unit order and timing (the verdict assumes the comm can run
  beside all compute; the last bucket's tail cannot);
- ``late_rank``: waiting for a late rank that no compute covers (measure.waits);
- ``slow_transfers``: transfers longer than W predicts (contention, a slower path);
- ``host_bound``: on GPU runs, the rest of the gap as far as the device waited for
  launches in the step at least as long (measure.idle: no compute to hide comm
  behind);
- ``cpu_sharing``: the rest, on CPU-only runs: gloo's threads share the cores with
  compute, so comm and compute do not run side by side as the model assumes;
- ``model_inputs``: the run hides more than the model expects (W or F understated).
"""

from __future__ import annotations

from collections import defaultdict

from overlapscope.analyzer import sql
from overlapscope.analyzer.measure import idle, waits
from overlapscope.analyzer.measure.blocks import EVENT_ID_BITS, ROWS_PER_BLOCK, key_index, rank_blocks
from overlapscope.analyzer.measure.collectives import NULL_INT, Collective, rank_steps, table_of
from overlapscope.analyzer.units import NS_PER_MS

# the checklist's exposed_warn (analyzer/checklist/findings.py): a gap above 3% of the step
# is above run-to-run noise; repeated here because predict must not import the checklist
WARN_SHARE = 0.03

_TEXT = {
    "order": "the run's own {what} order and timing: the replay exposes {ms} even at W",
    "late_rank": "waiting for a late rank{late}: {ms} of waiting that no compute covers",
    "slow_transfers": "transfers {ms} longer than W predicts (contention or a slower path)",
    "host_bound": "the device waits {ms} for launches in the step (host-bound: no compute to hide comm behind)",
    "cpu_sharing": "CPU threads sharing cores: gloo's threads and compute take turns on the cores, {ms} the "
                   "model expects to run side by side",
    "model_inputs": "the run hides {ms} more than the model expects: W or F understate this run",
}


def _fmt(value_ms: float) -> str:
    return f"{value_ms:.3g} ms"


def _slow_transfers(con, rows: list[Collective], rows_per_block: int = ROWS_PER_BLOCK) -> dict[tuple, float]:
    """Per (rank, step): transfer time beyond the predicted comm time, summed (ms) in row order.

    Read from the columns a block of whole ranks at a time (``rank_blocks``): each transfer's
    wait found by key in the block's sorted keys (a dict of (rank, event_id) tuples took 350 MB
    for the two million transfers of a 1,024-rank run; the run's keys and copies of its columns
    at once 50 MiB more than a block's), the sums by ``np.bincount``, which adds in index order
    as a loop over the rows did. A (rank, step) is never split between blocks, so each sum is
    the same whatever the blocks."""
    import numpy as np

    table = table_of(rows)
    ranks, steps_col, predicted_col = table.numpy("rank"), table.numpy("step"), table.numpy("predicted_comm_ms")
    event_ids, comm_col = table.numpy("event_id"), table.numpy("comm_ms")
    query = sql.query("waits.transfer_waits")
    out: dict[tuple, float] = {}
    for start, stop in rank_blocks(ranks, rows_per_block):
        step, predicted_ms = steps_col[start:stop], predicted_col[start:stop]
        picked = np.flatnonzero((step != NULL_INT) & ~np.isnan(predicted_ms))
        if not len(picked):
            continue
        rank = ranks[start:stop][picked]
        found = con.execute(query, {"event_id_bits": EVENT_ID_BITS, "first_rank": int(ranks[start]),
                                    "last_rank": int(ranks[stop - 1])}).fetchnumpy()
        wait_ns = found["wait_ns"]
        at = key_index(found["key"], rank, event_ids[start:stop][picked], len(picked))  # one block
        waited_ns = np.where(at >= 0, wait_ns[at], 0) if len(wait_ns) else np.zeros(len(picked), np.int64)
        excess_ms = np.maximum(0.0, (comm_col[start:stop][picked] - waited_ns / NS_PER_MS) - predicted_ms[picked])
        pairs, slot = rank_steps(rank, step[picked])
        out.update(zip(pairs, np.bincount(slot, weights=excess_ms).tolist()))
    return out


def _late_ranks(step_waits: list[dict]) -> dict[int, list[int]]:
    """Per step: the ranks that arrived last at any collective, most often first."""
    by_step: dict[int, list[tuple]] = defaultdict(list)
    for w in step_waits:
        if w["last_arrivals"]:
            by_step[w["step"]].append((-w["last_arrivals"], w["rank"]))
    return {s: [r for _, r in sorted(v)] for s, v in by_step.items()}


def reconcile(con, run_id: int, rows: list[Collective], steps: list[dict], models: list[dict],
              device_kind: str, stage: str | None) -> list[dict]:
    """The model rows, each with ``disagreement`` (None where model and measurement agree)."""
    step_waits = waits.steps(con, run_id)
    exposed_wait = {(w["rank"], w["step"]): w["exposed_wait_ms"] for w in step_waits}
    late = _late_ranks(step_waits)
    slow = _slow_transfers(con, rows)
    host = {(r["rank"], r["step"]): r["host_idle_ns"] / NS_PER_MS for r in idle.per_step(con, run_id)} \
        if device_kind == "gpu" else {}
    predicted = {(s["rank"], s["step"]): s["predicted_exposed_ms"] for s in steps}
    what = "bucket" if stage == "ddp" else "unit"
    out = []
    for m, s in zip(models, steps):
        key = (s["rank"], s["step"])
        # a hidden (or marginal) verdict expects nothing exposed, and the run's own order and
        # timing (the replay) is one of the terms; otherwise the replay is the expectation
        by_verdict = m["verdict"] in ("hidden", "marginal")
        expected = 0.0 if by_verdict else predicted[key]
        gap = None if expected is None else s["exposed_comm_ms"] - expected
        if gap is None or not s["step_ms"] or abs(gap) / s["step_ms"] <= WARN_SHARE:
            out.append({**m, "disagreement": None})
            continue
        terms = {"order": predicted[key] or 0.0} if by_verdict else {}
        terms.update(late_rank=exposed_wait.get(key, 0.0), slow_transfers=slow.get(key, 0.0))
        rest = max(0.0, s["exposed_comm_ms"] - sum(terms.values()))
        if device_kind == "gpu":  # the rest, as far as the device waited for launches in the step
            terms["host_bound"] = min(rest, host.get(key, 0.0))
        else:
            terms["cpu_sharing"] = rest
        if gap < 0:
            terms = {"model_inputs": -gap}
        term = max(terms, key=terms.get)
        # the rank this one waited for: the step's most frequent last arrival other than itself
        late_rank = next((r for r in late.get(s["step"], []) if r != s["rank"]), None)
        text = _TEXT[term].format(ms=_fmt(terms[term]), what=what,
                                  late=f" (rank {late_rank})" if late_rank is not None else "")
        out.append({**m, "disagreement": {
            "measured_exposed_ms": s["exposed_comm_ms"], "predicted_exposed_ms": round(expected, 6),
            "gap_ms": round(gap, 6), "term": term, "term_ms": round(terms[term], 6),
            "terms": {k: round(v, 6) for k, v in terms.items()},
            "late_rank": late_rank if term == "late_rank" else None,
            "explanation": (f"measured {_fmt(s['exposed_comm_ms'])} exposed against the model's {_fmt(expected)} "
                            f"({'verdict ' + m['verdict'] if by_verdict else 'replay'}): explained by {text}"),
        }})
    return out
