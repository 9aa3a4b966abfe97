"""The prediction engine's state of a run, stored at ingest: what every what-if starts from.

The what-if of a run (``whatif.predict``) reads its measured steps as plans, its comm
model, its measured step rows, memory and tokens, never its collectives one by one.
Ingest stores exactly that (``runstore.ENGINE_STATE`` beside the run's documents), so that a
what-if with a change of a catalog's run reads a few megabytes instead of reducing the
run's ranks again and building one object per collective (a 256-rank run: 517,120 of
them, 8.7 s before its first prediction).

The plans are kept as the analysis packs them (``plan.Plans``: compressed MessagePack
blocks, 63 bytes a collective, read a block at a time), so neither ingest nor a what-if
holds the run's plans as objects at once.

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
from overlapscope.analyzer.predict.plan import DdpPass, FsdpPass, Plans, StepPlan
from overlapscope.analyzer.store import runstore
from overlapscope.analyzer.store.runinfo import RunInfo

FORMAT = 2  # bump when what a field of the plans or the fits means changes (2: the plans as Plans' packed blocks)


def _schema() -> str:
    """The names of the stored classes' fields, in order: a state written with other fields
    (another version's plans) is not read, even where msgspec could fill in defaults."""
    from dataclasses import fields

    from overlapscope.analyzer.predict.plan import Unit, Xfer

    return ";".join(f"{c.__name__}:" + ",".join(f.name for f in fields(c))
                    for c in (StepPlan, DdpPass, FsdpPass, Unit, Xfer, Fit))


class _State(msgspec.Struct):
    format: int
    schema: str  # _schema() of the version that wrote it
    fits: dict[str, Fit]
    plan_blocks: list[bytes]  # the plans as Plans packs them (plan.Plans: compressed MessagePack blocks)
    plan_counts: list[int]  # plans per block
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


def encode(a: RunAnalysis) -> bytes | None:
    """The what-if's state of analysis ``a`` as bytes; None where it cannot be stored as
    it is (a plan already carrying a prediction's terms, a value MessagePack cannot hold):
    then the what-if reduces the run's ranks again, and ingest never fails for it."""
    if a.comm_model is None:
        return None
    plans = a.plans
    if not isinstance(plans, Plans):  # plans built some other way: checked, then packed
        if any(x.terms is not None for p in plans for x in p.xfers):
            return None
        if any(not isinstance(x, DdpPass | FsdpPass) for p in plans for x in p.passes):
            return None
        plans = Plans.of(plans)
    state = _State(FORMAT, _schema(), a.comm_model.fits, plans.blocks, plans.counts, a.overlap, a.sources, a.stage,
                   a.grad_bytes, a.weight_bytes, a.steps, a.model, a.memory, a.tokens,
                   [(r, s, n) for (r, s), n in a.forwards.items()], [(r, s, ms) for (r, s), ms in a.reducer.items()])
    try:
        return msgspec.msgpack.encode(state)
    except (TypeError, msgspec.EncodeError):  # a value MessagePack cannot hold: the run is stored without
        return None


def decode(data: bytes, info: RunInfo) -> RunAnalysis | None:
    """The RunAnalysis that the what-if reads, from ``encode``'s bytes (None: another format).
    It holds no collectives or gradient ready times (per collective or per
    gradient: the plans carry what the what-if reads of them)."""
    written = msgspec.msgpack.decode(data, type=_Format)
    if (written.format, written.schema) != (FORMAT, _schema()):
        return None
    s = msgspec.msgpack.decode(data, type=_State)
    model = CommModel.of_fits(s.fits)
    plans = Plans(s.plan_blocks, s.plan_counts)
    plans.check()  # a damaged block fails here, and the what-if reduces the run again
    return RunAnalysis(info, s.overlap, [], s.sources, s.stage, s.grad_bytes, s.steps, s.model, s.memory, s.tokens,
                       s.weight_bytes, model, plans,
                       {(r, st): n for r, st, n in s.forwards}, {(r, st): ms for r, st, ms in s.reducer})


def read(run_dir: str | Path, info: RunInfo) -> RunAnalysis | None:
    """The stored state of a catalog's run as a RunAnalysis; None where the run has none
    (stored before it was kept) or one this version does not read."""
    data = runstore.read_engine_state(run_dir)
    if data is None:
        return None
    from isal import isal_zlib

    try:
        return decode(data, info)
    except (msgspec.DecodeError, msgspec.ValidationError, isal_zlib.error):
        return None  # not what this version writes, or damaged: reduce the run instead
