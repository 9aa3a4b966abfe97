"""What a failed or warned finding would buy: the what-if of the change its fix names.

A rule whose fix a what-if change can express (``CANDIDATES``) names one or more
candidate changes; each is predicted on the run (analyzer/predict/whatif.py) and the best one
that fits in memory gives the finding its ``predicted_gain_ms`` (step time saved per
step, the slowest rank's median: the headline's definition) and ``whatif`` (its flags,
to run ``overlapscope whatif`` with); for more tokens per micro-batch, the time the
measured step's tokens would take (predicted step / the token ratio). The straggler rule runs its
what-if itself (the late rank on time, ``--on-time RANK``: its gain is the finding's ``impact_ms``)
and links it where it grades. Rules whose fix no change expresses (host-bound steps, clipping) keep
None: their ``impact_ms`` says what they cost.

A change is linked only when it is not the run's own setting (``--bucket-mb 25`` on a run
at 25 MB buys nothing) and the what-if predicts it saves at least the ``gain_floor``
threshold of the measured step; a finding whose candidates all fall short links none and
says why (``no_change``), with the best candidate's predicted gain.
"""

from __future__ import annotations

from dataclasses import replace

from overlapscope.analyzer.checklist.findings import THRESHOLDS
from overlapscope.analyzer.predict.apply import NO_LATENCY
from overlapscope.analyzer.predict.changes import Changes, Scale

BUCKET_CAPS_MB = (1.0, 5.0, 25.0, 100.0)  # the sweep a DDP bucket finding tries


def _buckets(f, a) -> list[Changes]:
    return [Changes(bucket_mb=mb) for mb in BUCKET_CAPS_MB]


def _backward(f, a) -> list[Changes]:
    if a.info.parallelism in ("fsdp", "hsdp"):
        return [Changes(backward_prefetch=True)]
    return _buckets(f, a)


def _bandwidth(f, a) -> list[Changes]:
    ratio = f.details.get("ratio")
    return [Changes(bandwidth=Scale(1.0 / ratio, True))] if ratio and 0 < ratio < 1 else []


def _tokens(f, a) -> list[Changes]:
    have, need = f.details.get("tokens"), f.details.get("tokens_to_hide")
    return [Changes(tokens=Scale(need / have, True))] if have and need and need > have else []


def _hsdp(f, a) -> list[Changes]:
    world = a.info.world_size or 0
    return [Changes(hsdp=g) for g in range(2, world // 2 + 1) if world % g == 0]


CANDIDATES = {
    "accumulation_comm": lambda f, a: [Changes(sync=False)],
    "ddp_bucket_size": _buckets,
    "last_bucket_exposed": _buckets,
    "exposed_backward_comm": _backward,
    "exposed_forward_allgather": lambda f, a: [Changes(forward_prefetch=True)],
    "root_only_wrap": lambda f, a: [Changes(wrap="per-block")],
    "unit_size": lambda f, a: [Changes(wrap="per-block"), Changes(wrap="root-only")],
    "reshard_after_forward": lambda f, a: [Changes(reshard_after_forward=False)],
    "fp32_reduction": lambda f, a: [Changes(reduce_dtype="bf16")],
    "low_bus_bandwidth": _bandwidth,
    "tokens_below_fw": _tokens,
    "hsdp_candidate": _hsdp,
}


SLOWEST_RANKS = 4  # a run of more ranks replays only its slowest ones for the gains (the headline's rank among them)


def _slowest(a) -> set[int] | None:
    ranks = [r for r in a.overlap["ranks"] if r.get("step_ms") is not None]
    if len(ranks) <= 2 * SLOWEST_RANKS:
        return None
    return {r["rank"] for r in sorted(ranks, key=lambda r: -r["step_ms"])[:SLOWEST_RANKS]}


# Changes' fields that set a flag of the run's own (whatif.run_setting), by flag
_FLAGS = {"bucket_mb": "bucket-mb", "sync": "sync", "reshard_after_forward": "reshard-after-forward",
          "wrap": "wrap", "hsdp": "hsdp", "reduce_dtype": "reduce-dtype"}


def _is_current(changes: Changes, a) -> bool:
    """Whether ``changes`` only sets flags to the run's own settings (where the run tells them)."""
    from overlapscope.analyzer.predict import whatif

    set_fields = list(changes.as_json())  # the fields it sets
    if not set_fields or any(k not in _FLAGS for k in set_fields):
        return False
    return all(getattr(changes, k) == whatif.run_setting(a, _FLAGS[k]) for k in set_fields)


UNPRICED = ("smaller buckets cannot be priced: no per-collective latency could be fitted (no calibration, and "
            "collectives of one size)")


def _best(f, a, prepared, ranks) -> tuple[tuple[float, str, float] | None, str | None]:
    """The best candidate change of ``f`` that fits in memory and is not the run's own setting,
    as (gain ms, flags, measured step ms); else None and why none applies. ``prepared`` and
    ``ranks`` as ``whatif.predict`` takes them."""
    from overlapscope.analyzer.predict import whatif

    candidates = CANDIDATES[f.id](f, a)
    if not candidates:
        return None, "the what-if cannot express its fix on this run (what the change needs is not known)"
    best, current, unfit, unpriced = None, 0, 0, 0
    for changes in candidates:
        if _is_current(changes, a):
            current += 1
            continue
        p = whatif.predict(a, changes, prepared, ranks)
        if not p["predicted"]:
            continue
        if p["memory"] and p["memory"].get("fits") is False:
            unfit += 1
            continue
        if any(NO_LATENCY in w for w in p["warnings"]):
            # more buckets with no latency known cost only their bytes: a gain the run cannot back
            # (one 25 MB bucket on gloo: 1 MB predicted 12 % faster, measured within its noise; 0.05 MB
            # predicted 17 % faster, measured 1.7-3.4x slower)
            unpriced += 1
            continue
        gain = p["predicted"]["gain_ms"]
        if changes.tokens is not None:  # more tokens per step: compare the time of the measured step's tokens
            gain = p["measured"]["step_ms"] - p["predicted"]["step_ms"] / changes.tokens.value
        if best is None or gain > best[0]:
            best = (gain, p["label"], p["measured"]["step_ms"])
    if best is not None:
        return best, UNPRICED if unpriced else None
    why = [w for n, w in ((current, "the run's own setting"), (unfit, "does not fit in memory"),
                          (unpriced, UNPRICED)) if n]
    return None, "no change its fix names applies to this run: " + (" or ".join(why) or "nothing to replay")


def _linked(f, best, why: str | None = None):
    """``f`` with the change it links, or with why it links none (``why``: also what was left
    out beside a best change)."""
    floor = THRESHOLDS["gain_floor"].value
    if best is None:
        return replace(f, no_change=why)
    gain, label, step_ms = best
    if step_ms and gain >= floor * step_ms:
        return replace(f, predicted_gain_ms=round(gain, 4), whatif=label)
    return replace(f, no_change=f"no change its fix names is predicted to save {100 * floor:g}% of the step "
                                f"(best: {label}, {gain:+.2f} ms of {step_ms:.2f} ms)" + (f"; {why}" if why else ""))


def link(findings: list, a) -> list:
    """The findings, the failed and warned ones whose fix a change expresses carrying
    ``predicted_gain_ms`` and ``whatif`` (new values; the input is kept), or ``no_change``.
    The run's plans are built once; a run of more than 8 ranks replays its 4 slowest."""
    from overlapscope.analyzer.predict import whatif

    def wanted(f) -> bool:
        return f.status in ("fail", "warn") and f.id in CANDIDATES

    if not any(wanted(f) for f in findings):
        return list(findings)
    model, plans = whatif.prepare(a)
    ranks = _slowest(a)
    if ranks is not None:  # the slowest ranks' plans read once (the run's are packed), not once per change
        plans = [p for p in plans if p.rank in ranks]
    return [_linked(f, *_best(f, a, (model, plans), None)) if wanted(f) else f for f in findings]
