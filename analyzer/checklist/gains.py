"""What a failed or warned finding would buy: the what-if of the change its fix names.

A rule whose fix a what-if change can express (``CANDIDATES``) names one or more
candidate changes; each is predicted on the run (analyzer/predict/whatif.py) and the best one
that fits in memory gives the finding its ``predicted_gain_ms`` (step time saved per
step, the slowest rank's median: the headline's definition) and ``whatif`` (its flags,
to run ``overlapscope whatif`` with); for more tokens per micro-batch, the time the
measured step's tokens would take (predicted step / the token ratio). Rules whose fix no change expresses (a straggler,
host-bound steps, clipping) keep None: their ``impact_ms`` says what they cost.
"""

from __future__ import annotations

from dataclasses import replace

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


def _best(f, a, prepared, ranks) -> tuple[float, str] | None:
    """(gain ms, flags) of the best candidate change of ``f`` that fits in memory; None: none applies."""
    from overlapscope.analyzer.predict import whatif

    best = None
    for changes in CANDIDATES[f.id](f, a):
        p = whatif.predict(a, changes, prepared, ranks)
        if not p["predicted"] or (p["memory"] and p["memory"].get("fits") is False):
            continue
        gain = p["predicted"]["gain_ms"]
        if changes.tokens is not None:  # more tokens per step: compare the time of the measured step's tokens
            gain = p["measured"]["step_ms"] - p["predicted"]["step_ms"] / changes.tokens.value
        if best is None or gain > best[0]:
            best = (gain, p["label"])
    return best


def link(findings: list, a) -> list:
    """The findings, the failed and warned ones whose fix a change expresses carrying
    ``predicted_gain_ms`` and ``whatif`` (new values; the input is kept). The run's plans
    are built once; a run of more than 8 ranks replays its 4 slowest."""
    from overlapscope.analyzer.predict import whatif

    def wanted(f) -> bool:
        return f.status in ("fail", "warn") and f.id in CANDIDATES

    if not any(wanted(f) for f in findings):
        return list(findings)
    prepared, ranks = whatif.prepare(a), _slowest(a)
    out = []
    for f in findings:
        best = _best(f, a, prepared, ranks) if wanted(f) else None
        out.append(replace(f, predicted_gain_ms=round(best[0], 4), whatif=best[1]) if best else f)
    return out
