"""The prediction engine's state of a run, stored at ingest: what every what-if starts from.

The what-if of a run (``whatif.predict``) reads its measured steps as plans, its comm
model, its measured step rows, memory and tokens, never its collectives one by one.
Ingest stores exactly that (``runstore.ENGINE_STATE`` beside the run's documents), so that a
what-if with a change of a catalog's run reads a few megabytes instead of reducing the
run's ranks again and building one object per collective (a 256-rank run: 517,120 of
them, 8.7 s before its first prediction).

Encoded with msgspec's MessagePack: floats and ints keep their type and bits, so a
prediction from the stored state is the prediction from the fresh analysis, to the byte
(``tests/analyzer/predict/test_engine_state.py``). A state of another ``FORMAT`` or with
other fields (a run stored by another version) is not read: the what-if then reduces
the run's ranks again, as for a run stored before the state was kept.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from overlapscope.analyzer.predict.buckets import RunAnalysis
from overlapscope.analyzer.predict.comm import CommModel, Fit
from overlapscope.analyzer.predict.plan import DdpPass, FsdpPass, StepPlan
from overlapscope.analyzer.store import runstore
from overlapscope.analyzer.store.runinfo import RunInfo

FORMAT = 1  # bump when what a field of the plans or the fits means changes


def _schema() -> str:
    """The names of the stored classes' fields, in order: a state written with other fields
    (another version's plans) is not read, even where msgspec could fill in defaults."""
    from dataclasses import fields

    from overlapscope.analyzer.predict.plan import Unit, Xfer

    return ";".join(f"{c.__name__}:" + ",".join(f.name for f in fields(c))
                    for c in (StepPlan, DdpPass, FsdpPass, Unit, Xfer, Fit))


class _Plan(msgspec.Struct, array_like=True):
    """A StepPlan with its passes split by kind (msgspec decodes one dataclass per list)."""

    plan: StepPlan  # its passes empty
    ddp: list[DdpPass]
    fsdp: list[FsdpPass]
    order: str  # "d" or "f" per pass, in the plan's order


class _State(msgspec.Struct):
    format: int
    schema: str  # _schema() of the version that wrote it
    fits: dict[str, Fit]
    plans: list[_Plan]
    overlap: dict  # measure.overlap.compute's rows, as the analysis read them
    sources: dict
    stage: str | None
    grad_bytes: float | int
    weight_bytes: float | int
    steps: list
    model: list
    memory: list
    tokens: float | int | None
    forwards: list[tuple[int, int, int]]  # (rank, step, the model's forward ranges)
    reducer: list[tuple[int, int, float]]  # (rank, step, ms of DDP's reducer ops)


class _Format(msgspec.Struct):
    format: int
    schema: str


def _plan(p: StepPlan) -> _Plan:
    ddp = [x for x in p.passes if isinstance(x, DdpPass)]
    fsdp = [x for x in p.passes if isinstance(x, FsdpPass)]
    order = "".join("d" if isinstance(x, DdpPass) else "f" for x in p.passes)
    bare = StepPlan(p.rank, p.step, p.step_ms, p.compute_ms, p.comm_ms, p.exposed_ms, p.optimizer_ms, [],
                    p.microbatches, p.blocking, p.reducer_ms)
    return _Plan(bare, ddp, fsdp, order)


def _step_plan(rec: _Plan) -> StepPlan:
    ddp, fsdp = iter(rec.ddp), iter(rec.fsdp)
    rec.plan.passes = [next(ddp) if k == "d" else next(fsdp) for k in rec.order]
    return rec.plan


def encode(a: RunAnalysis) -> bytes | None:
    """The what-if's state of analysis ``a`` as bytes; None where it cannot be stored as
    it is (a plan already carrying a prediction's terms, a value MessagePack cannot hold):
    then the what-if reduces the run's ranks again, and ingest never fails for it."""
    if a.comm_model is None or any(x.terms is not None for p in a.plans for x in p.xfers):
        return None
    if any(not isinstance(x, DdpPass | FsdpPass) for p in a.plans for x in p.passes):
        return None
    state = _State(FORMAT, _schema(), a.comm_model.fits, [_plan(p) for p in a.plans], a.overlap, a.sources, a.stage,
                   a.grad_bytes, a.weight_bytes, a.steps, a.model, a.memory, a.tokens,
                   [(r, s, n) for (r, s), n in a.forwards.items()], [(r, s, ms) for (r, s), ms in a.reducer.items()])
    try:
        return msgspec.msgpack.encode(state)
    except (TypeError, msgspec.EncodeError):  # a value MessagePack cannot hold: the run is stored without
        return None


def decode(data: bytes, info: RunInfo) -> RunAnalysis | None:
    """The RunAnalysis that the what-if reads, from ``encode``'s bytes (None: another format).
    It holds no collectives, lanes or gradient ready times (per collective or per
    gradient: the plans carry what the what-if reads of them)."""
    written = msgspec.msgpack.decode(data, type=_Format)
    if (written.format, written.schema) != (FORMAT, _schema()):
        return None
    s = msgspec.msgpack.decode(data, type=_State)
    model = CommModel.of_fits(s.fits)
    return RunAnalysis(info, s.overlap, [], s.sources, s.stage, s.grad_bytes, s.steps, s.model, s.memory, s.tokens,
                       s.weight_bytes, {}, model, [_step_plan(p) for p in s.plans],
                       {(r, st): n for r, st, n in s.forwards}, {(r, st): ms for r, st, ms in s.reducer})


def read(run_dir: str | Path, info: RunInfo) -> RunAnalysis | None:
    """The stored state of a catalog's run as a RunAnalysis; None where the run has none
    (stored before it was kept) or one this version does not read."""
    data = runstore.read_engine_state(run_dir)
    if data is None:
        return None
    try:
        return decode(data, info)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # not what this version writes: reduce the run instead
