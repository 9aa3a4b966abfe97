"""Memory per GPU under a what-if: the ZeRO model's states, the gathered weights, activations.

``peak' = model states' + weights gathered at once' + activations x tokens ratio``, where

- model states are the data-parallel model's ZeRO memory (model.memory: DDP (4+K)Psi, ZeRO-3 (4+K)Psi/N,
  HSDP (4+K)Psi/G) at the changed stage and world size;
- weights gathered at once (FSDP): the units kept from forward to backward (the root,
  or every unit without resharding) plus the two largest others (the one computing
  and the one prefetched), less the shard each rank holds anyway;
- activations: the measured peak less the first two at the measured configuration
  (nothing when the trace has no memory events: then only the model states are told).

``fits`` compares with the device memory the manifest records.
"""

from __future__ import annotations

from overlapscope.analyzer.model.memory import model_state_bytes
from overlapscope.analyzer.predict.plan import FsdpPass


class Held:
    """What the memory prediction reads of a run's plans, taken a plan at a time (``add``):
    how many there are, whether any pass is FSDP's, and the most unsharded weight bytes one
    pass holds at once, before the shard a rank keeps anyway (``gathered_bytes``)."""

    def __init__(self):
        self.plans, self.fsdp, self.unsharded_bytes = 0, False, 0.0

    def add(self, plan) -> None:
        self.plans += 1
        for p in plan.passes:
            if not isinstance(p, FsdpPass):
                continue
            self.fsdp = True
            kept = sum(u.bytes for u in p.units if u.regather is None)
            others = sorted((u.bytes for u in p.units if u.regather is not None), reverse=True)[:2]
            self.unsharded_bytes = max(self.unsharded_bytes, kept + sum(others))

    def gathered_bytes(self, shard: int) -> float:
        """The most unsharded weight bytes one rank holds at once, over the plans' passes, less
        its shard. The largest before the shard's share is the largest after: a product with
        the same factor (0 to 1) rounds in the same order."""
        return self.unsharded_bytes * (1 - 1 / max(1, shard))


def _stage(a, c, held: Held) -> tuple[str | None, int | None]:
    shape = a.info.manifest.hsdp_shape
    if not held.plans:
        return None, None
    if not held.fsdp:
        return "ddp", None
    if c.hsdp:
        return "hsdp", c.hsdp
    return ("hsdp", shape[1]) if shape else ("zero3", None)


def _device_bytes(a) -> int | None:
    known = [d.memory_bytes for d in a.info.manifest.devices if d.memory_bytes]
    known += [r.get("device_memory_bytes") for r in a.info.ranks if r.get("device_memory_bytes")]
    return min(known) if known else None


def predict(a, plans: Held, changed: Held, c) -> dict | None:
    """The ``memory`` object of whatif --json (None without a DDP/FSDP plan): ``plans`` what
    the measured plans hold, ``changed`` what the changed ones do."""
    params = a.info.manifest.params
    stage, group = _stage(a, type(c)(), plans)
    new_stage, new_group = _stage(a, c, changed)
    if stage is None:
        return None
    world = int(a.info.world_size or 1)
    gpus = int(c.gpus or world)
    shape = a.info.manifest.hsdp_shape
    shard = group or (world if stage == "zero3" else 1)
    new_shard = new_group or (gpus if new_stage == "zero3" else 1)
    states = model_state_bytes(stage, params, world, group=group) if params else None
    new_states = model_state_bytes(new_stage, params, gpus, group=new_group) if params else None
    gathered, new_gathered = plans.gathered_bytes(shard), changed.gathered_bytes(new_shard)
    peaks = [m["peak_allocated_bytes"] for m in a.memory if m.get("peak_allocated_bytes")]
    peak = max(peaks) if peaks else None
    k = 1.0
    if c.tokens is not None and a.tokens:
        k = (c.tokens.of(a.tokens) or a.tokens) / a.tokens
    elif c.tokens is not None:
        k = c.tokens.value
    activations = max(0.0, peak - (states or 0.0) - gathered) if peak is not None else None
    predicted = None
    if new_states is not None or activations is not None:
        predicted = (new_states or 0.0) + new_gathered + (activations * k if activations is not None else 0.0)
    device = _device_bytes(a)
    return {
        "stage": stage, "predicted_stage": new_stage, "params": params,
        "group": group or (shape[1] if shape else None), "predicted_group": new_group,
        "model_state_bytes": round(states) if states is not None else None,
        "predicted_model_state_bytes": round(new_states) if new_states is not None else None,
        "gathered_weight_bytes": round(gathered), "predicted_gathered_weight_bytes": round(new_gathered),
        "measured_peak_bytes": peak,
        "activation_bytes": round(activations) if activations is not None else None,
        "predicted_peak_bytes": round(predicted) if predicted is not None else None,
        "device_memory_bytes": device,
        "fits": (predicted <= device) if predicted is not None and device else None,
    }
