"""The what-if engine: a measured run replayed under another configuration.

``predict(a, changes)`` takes the buckets report's ``RunAnalysis`` of a run and a
``Changes`` and answers, per rank and step and for the run, with four figures of
step, compute, comm, exposed comm and overlap %:

- ``measured``: what the trace says;
- ``replayed``: the plan of the measured step (whatif.plan) replayed as it is
  (whatif.replay): how well the replay reproduces the run (``error_pct_of_step``);
- ``predicted``: the measurement plus what the change moves in the replay:
  ``step' = step + (compute' - compute) + (exposed'_replay - exposed_replay)``, so the
  part of the step the replay does not model (host gaps, waits on peers outside the
  modelled collectives) is carried over as measured;
- ``model``: the model's pure prediction: the same replay with every collective
  at the fitted ring model's time (no level taken from the run).

Run figures are the headline's (analyzer/headline.py, ``slowest``): the medians over
the steps of the slowest rank, for each of the four its own slowest rank (a change
may make another rank the slowest), so that ``measured`` is the run's headline. A
step without DDP buckets or FSDP units has nothing to replay: it counts as measured.
The changes are applied by whatif.apply; memory per GPU by whatif.memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from overlapscope.analyzer.headline import overlap_pct, slowest
from overlapscope.analyzer.units import MS_DIGITS
from overlapscope.contract.figures import STEP_TIMES, overlap_pct as overlap_of
from overlapscope.analyzer.predict import apply, memory
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.predict.changes import BUCKET_DEFAULT, LATE, READERS, REDUCE_DTYPES, WRAPS, Changes, Scale
from overlapscope.analyzer.predict.comm import CommModel
from overlapscope.analyzer.predict.plan import StepPlan
from overlapscope.analyzer.predict.replay import replay_plan

KEYS = (*STEP_TIMES, "overlap_pct")


def _figures(step_ms: float, compute_ms: float, comm_ms: float, exposed_ms: float) -> dict:
    """One step's figures, to the ns as the measurement's (an unchanged replay rounds to it)."""
    comm_ms = max(0.0, comm_ms)
    exposed_ms = min(max(0.0, exposed_ms), comm_ms)
    return {"step_ms": round(step_ms, MS_DIGITS), "compute_ms": round(compute_ms, MS_DIGITS),
            "comm_ms": round(comm_ms, MS_DIGITS), "exposed_comm_ms": round(exposed_ms, MS_DIGITS),
            "overlap_pct": overlap_of(comm_ms, exposed_ms)}


def _step(plan: StepPlan, changed: StepPlan) -> dict:
    """The four figures of one rank's step."""
    base, new, pure = replay_plan(plan), replay_plan(changed), replay_plan(changed, "model")
    measured_modeled_ms = sum(x.measured_exposed_ms or 0.0 for x in plan.xfers)
    measured_comm_ms = sum(x.lane_ms for x in plan.xfers)  # lane pieces: their union
    d_compute = changed.compute_ms - plan.compute_ms
    other_comm = plan.comm_ms - measured_comm_ms  # collectives the replay does not model
    return {
        "rank": plan.rank, "step": plan.step,
        "measured": _figures(plan.step_ms, plan.compute_ms, plan.comm_ms, plan.exposed_ms),
        "replayed": _figures(plan.step_ms - measured_modeled_ms + base.exposed_ms, plan.compute_ms,
                             other_comm + base.comm_ms, plan.exposed_ms - measured_modeled_ms + base.exposed_ms),
        "predicted": _figures(plan.step_ms + d_compute + new.exposed_ms - base.exposed_ms, changed.compute_ms,
                              other_comm + new.comm_ms, plan.exposed_ms + new.exposed_ms - base.exposed_ms),
        "model": _figures(plan.step_ms + d_compute - measured_modeled_ms + pure.exposed_ms, changed.compute_ms,
                          other_comm + pure.comm_ms, plan.exposed_ms - measured_modeled_ms + pure.exposed_ms),
    }


def _run_figures(rows: list[dict]) -> dict:
    """The headline's figures of step rows (``rank`` and the figures): the slowest rank's medians."""
    rank, figures = slowest(rows, KEYS[:-1])
    return {"slowest_rank": rank, **figures, "overlap_pct": overlap_pct(figures)}


def _figure_rows(a, steps: list[dict], ranks: set[int]) -> dict[str, list[dict]]:
    """Per figure set, one row per step of the replayed ranks: the measurement's own rows
    for ``measured`` (so that it is the headline), the replay's where a step has a plan,
    the measured step where it has none."""
    measured = [s for s in a.overlap["steps"] if s["rank"] in ranks]
    replayed = {(s["rank"], s["step"]): s for s in steps}
    out = {"measured": measured}
    for key in ("replayed", "predicted", "model"):
        out[key] = [{"rank": s["rank"], "step": s["step"],
                     **(replayed[(s["rank"], s["step"])][key] if (s["rank"], s["step"]) in replayed else s)}
                    for s in measured]
    return out


def _collectives(plan: StepPlan, changed: StepPlan, new) -> list[dict]:
    """The terms of each predicted collective of one step (the slowest rank's median step)."""
    rows = []
    for x in changed.xfers:
        span = new.spans.get(id(x))
        rows.append({
            "phase": x.phase, "id": x.id, "collective": x.collective, "bytes": round(x.bytes),
            "group_size": x.group_size, "link": x.link,
            "measured_ms": round(x.measured_ms, 4) if x.measured_ms is not None else None,
            "predicted_ms": round(x.dur_ms, 4),
            "wait_ms": round(max(0.0, span.end_ms - span.start_ms - x.dur_ms if span else x.wait_ms), 4),
            "model_ms": round(x.model_ms, 4) if x.model_ms is not None else None,
            "exposed_ms": round(span.exposed_ms, 4) if span else None,
            "hidden_by": span.hidden_by if span else None,
            **({"ready_ms": round(x.ready_ms, 4)} if x.phase == "allreduce" and x.id.isdigit() else {}),
            **(x.terms.as_json() if x.terms else {}),
        })
    return rows


def prepare(a) -> tuple[CommModel, Sequence[StepPlan]]:
    """The run's comm model and measured plans: what every prediction of it starts from
    (``predict``'s ``prepared``, to predict many changes of one run at the cost of one).
    The buckets report's analysis made them (``buckets.analysis``): its predicted columns
    are this engine's prediction with no change."""
    return a.comm_model, a.plans


def predict(a, changes: Changes = Changes(), prepared: tuple | None = None, ranks: set[int] | None = None) -> dict:
    """The what-if of one run (the JSON of ``whatif --json``, without ``run``); ``prepared``
    from ``prepare``; ``ranks``: replay only these ranks (the run figures are then the
    slowest of them: the checklist's gains replay the slowest ranks of a large run)."""
    model, measured_plans = prepared if prepared is not None else prepare(a)
    if ranks is not None:
        measured_plans = [p for p in measured_plans if p.rank in ranks]
    notes: list[str] = []
    late = None
    if changes.on_time is not None:
        late = late_rank(measured_plans) if changes.on_time == LATE else changes.on_time
        if late is None:
            notes.append("--on-time: no rank waits for another in the replayed collectives: nothing to put on time")
        else:
            notes.append(f"rank {late}" + (" (the late rank: the others wait for it most)" if changes.on_time == LATE
                                            else "") + " on time; its step taken as the others'")
    # a plan at a time (the run's plans are packed: plan.Plans): each step's figures are kept,
    # and what the memory and the assumptions read of the plans, not the plans or their replays
    steps, held, held_changed, blocking = [], memory.Held(), memory.Held(), False
    for k, plan in enumerate(measured_plans):
        changed = apply.apply(plan, changes, a, model, notes, late)
        steps.append(_step(plan, changed) | {"_index": k})
        held.add(plan)
        held_changed.add(changed)
        blocking = blocking or plan.blocking
    if not steps:
        return {"changes": changes.as_json(), "label": changes.label(), "measured": None, "replayed": None,
                "predicted": None, "model": None, "memory": None, "collectives": [], "steps": [],
                "assumptions": [], "warnings": ["no DDP buckets or FSDP units in this trace: nothing to replay"]}
    ranks = {s["rank"] for s in steps}
    rows = _figure_rows(a, steps, ranks)
    if late is not None and len(ranks) > 1:  # the rank on time keeps up: what it takes is the others' step
        for key in ("predicted", "model"):
            rows[key] = [r for r in rows[key] if r["rank"] != late]
    result = {k: _run_figures(v) for k, v in rows.items()}
    unplanned = len(rows["measured"]) - len(steps)
    if unplanned > 0:
        notes.append(f"{unplanned} step(s) without DDP buckets or FSDP units: taken as measured")
    m, r, p = result["measured"], result["replayed"], result["predicted"]
    # "or 0.0": no -0.0 where the replay is the measurement
    result["replayed"]["error_pct_of_step"] = (round(100.0 * (r["step_ms"] - m["step_ms"]) / m["step_ms"], 2)
                                               or 0.0) if m["step_ms"] else None
    result["predicted"]["gain_ms"] = round(m["step_ms"] - p["step_ms"], 4) or 0.0
    mine = sorted((s for s in steps if s["rank"] == m["slowest_rank"]), key=lambda s: s["measured"]["step_ms"])
    typical = mine[len(mine) // 2] if mine else steps[0]
    # its collectives' terms: the change applied to its plan once more (apply is a function of the
    # plan, the change and the run; its notes were taken the first time)
    plan = measured_plans[typical["_index"]]
    changed = apply.apply(plan, changes, a, model, [], late)
    return {
        "changes": changes.as_json(),
        "label": changes.label(),
        **result,
        "memory": memory.predict(a, held, held_changed, changes),
        "collectives": _collectives(plan, changed, replay_plan(changed)),
        "collectives_of": {"rank": typical["rank"], "step": typical["step"]},
        "steps": [{k: v for k, v in s.items() if not k.startswith("_")} for s in steps],
        "assumptions": apply.assumptions(blocking, changes, a.device_kind == "cpu"),
        "warnings": list(dict.fromkeys(notes)),
    }


def late_rank(plans: list[StepPlan]) -> int | None:
    """The rank the others wait for: the one whose late arrivals alone cost the others the
    most wait in the replayed collectives (None: no rank arrived after every other)."""
    caused: dict[int, float] = {}
    for p in plans:
        for x in p.xfers:
            if x.last_rank is not None and x.lead_ms > 0:
                caused[x.last_rank] = caused.get(x.last_rank, 0.0) + x.lead_ms
    return max(caused, key=lambda r: (caused[r], -r)) if caused else None


def run_setting(a, name: str):
    """The run's own setting of flag ``name`` (``bucket-mb``, ``sync``, ``wrap``, ...) as the
    flag's reader gives it; None where the trace and the manifest do not tell."""
    return _setting(a, name, False)


def _setting(a, name: str, ratio: bool):
    """The run's own setting of flag ``name``, as the flag's reader gives it (None: the
    trace and manifest do not tell). ``ratio``: the sweep's values are multiples (``2x``)."""
    m = a.info.manifest
    dtype = str(m.reduce_dtype or "").lower().replace("torch.", "")
    known = {
        "bucket-mb": BUCKET_DEFAULT if m.bucket_cap_default else m.bucket_cap_mb,
        "accum": m.accumulation_steps,
        "sync": None if m.no_sync is None else not m.no_sync,
        "reshard-after-forward": m.reshard_after_forward if m.units else None,
        "wrap": m.wrapping if m.wrapping in WRAPS else None,
        "hsdp": m.hsdp_shape[1] if m.hsdp_shape else None,
        "tokens": Scale(1.0, True) if ratio else (Scale(float(a.tokens), False) if a.tokens else None),
        "bandwidth": Scale(1.0, True) if ratio else None,
        "gpus": a.info.world_size,
        "reduce-dtype": ("bf16" if REDUCE_DTYPES[dtype] == 2 else "fp32") if dtype in REDUCE_DTYPES else None,
        "on-time": None,
    }
    return known.get(name)


def measured_value(a, name: str, values: list[str]) -> str | None:
    """Where the run itself sits on a sweep over ``name``: the value among ``values`` that
    means its own setting, else that setting written as a value (``1x``, ``25``, ``on``);
    None where the run does not tell (the sweep's ``measured_value``)."""
    setting = _setting(a, name, any(v.strip().lower().endswith("x") for v in values))
    if setting is None:
        return None
    _, reader = READERS[name]
    for v in values:
        try:
            if reader(v, name) == setting:
                return v
        except UsageError:
            continue
    if isinstance(setting, bool):
        return "on" if setting else "off"
    return f"{setting:g}" if isinstance(setting, float) else str(setting)


def sweep(a, name: str, points: list[tuple[str, Changes]], prepared: tuple | None = None) -> dict:
    """One prediction per point of a sweep (``whatif --sweep``): the JSON's ``sweep``; the
    run prepared once for all of them (``prepare``), or ``prepared``."""
    prepared = prepared if prepared is not None else prepare(a)
    rows = []
    for value, changes in points:
        p = predict(a, changes, prepared)
        rows.append({"value": value, "label": p["label"], "predicted": p["predicted"], "model": p["model"],
                     "memory": p["memory"], "warnings": p["warnings"]})
    base = predict(a, Changes(), prepared)
    return {"name": name, "measured": base["measured"], "replayed": base["replayed"],
            "measured_value": measured_value(a, name, [v for v, _ in points]), "points": rows}
