"""``buckets``: per-bucket, per-unit and per-phase communication beside the data-parallel model.

``analysis`` composes the measurement (overlap, collectives, F and W from the
trace) with the model's predictions and verdicts into one typed ``RunAnalysis``,
computed once; ``report`` turns it into the JSON contract of ``buckets``
(``collectives``, ``summary``, ``steps``, ``model``, ``measured``, ``memory``),
and the checklist reads the same object.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from overlapscope.analyzer import sql
from overlapscope.analyzer.ingest.dtypes import itemsize
from overlapscope.analyzer.measure import collectives, overlap, rates, waits
from overlapscope.analyzer.measure.collectives import Collective
from overlapscope.analyzer.model.hide import overlap_verdict, stage_tokens_to_hide
from overlapscope.analyzer.model.memory import model_state_bytes
from overlapscope.analyzer.predict import exposure
from overlapscope.analyzer.predict.comm import CommModel
from overlapscope.analyzer.predict.plan import plans
from overlapscope.analyzer.predict.reconcile import reconcile
from overlapscope.analyzer.store.runinfo import RunInfo, run_info
from overlapscope.analyzer.units import NS_PER_MS

STAGE_OF = {"ddp": "ddp", "fsdp": "zero3", "hsdp": "zero3"}
CPU_CAVEAT = ("CPU-only run: gloo's threads share the CPU cores with compute, so communication overlaps "
              "compute less than the model assumes (on GPUs it runs on NICs and copy engines)")


@dataclass(frozen=True)
class RunAnalysis:
    """Everything the buckets report and the checklist read about one run, computed once."""

    info: RunInfo
    overlap: dict  # measure.overlap.compute: ranks and steps rows (JSON contract of analyze)
    collectives: Sequence[Collective]  # with the model's predictions: a Collectives (columns), or a list
    sources: dict  # F and W from the trace and the calibration, and which ones the model uses
    stage: str | None  # ddp or zero3
    grad_bytes: float  # bytes per reduced gradient element
    steps: list[dict]  # per step: measured comm beside the prediction
    model: list[dict]  # per step: F, W, T, tokens to hide, verdict
    memory: list[dict]  # per rank: measured peak beside the model states
    tokens: float | None  # tokens per GPU per micro-batch (given, or the manifest's)
    weight_bytes: float = 2.0  # bytes per gathered weight element (FSDP)
    comm_model: CommModel | None = None  # the prediction engine's comm model of the run (comm.py)
    # its measured steps as plans (plan.Plans, packed): what every prediction changes
    plans: Sequence = field(default_factory=list)
    forwards: dict = field(default_factory=dict)  # (rank, step) -> the model's forward ranges: micro-batches in a raw trace
    reducer: dict = field(default_factory=dict)  # (rank, step) -> ms of DDP's reducer ops (collectives.sql)
    grads: dict = field(default_factory=dict)  # (rank, step) -> when each gradient was ready (ns, collectives.sql)

    @property
    def device_kind(self) -> str:
        return self.info.device_kind

    @property
    def world(self) -> int | None:
        return self.info.world_size


def _stage(info: RunInfo, rows: list[Collective]) -> str | None:
    if info.parallelism in STAGE_OF:
        return STAGE_OF[info.parallelism]
    kinds = {r.kind for r in rows}
    return "zero3" if "fsdp_unit" in kinds else "ddp" if "ddp_bucket" in kinds else None


def _dtype_bytes(manifest_dtype: str | None, rows: list[Collective], phases: tuple[str, ...]) -> tuple[float, str]:
    """Bytes per element: the manifest's dtype, else the median dtype size of the trace's
    collectives of ``phases``, else bf16's 2; with where it comes from."""
    size = itemsize(manifest_dtype)
    if size:
        return float(size), "manifest"
    sizes = [s for s in (itemsize(r.dtype) for r in rows if r.phase in phases and r.dtype) if s]
    return (float(statistics.median(sizes)), "trace") if sizes else (2.0, "default")


def _grad_bytes(info: RunInfo, rows: list[Collective]) -> float:
    """Bytes per reduced gradient element: the manifest's reduce dtype, else the trace's."""
    return _dtype_bytes(info.manifest.reduce_dtype, rows, ("allreduce", "reduce_scatter"))[0]


def _weight_bytes(info: RunInfo, rows: list[Collective]) -> float:
    """Bytes per gathered weight element (FSDP): the manifest's param dtype, else the trace's gathers."""
    return _dtype_bytes(info.manifest.param_dtype, rows, ("forward_allgather", "backward_allgather"))[0]


# The collective whose W the model's verdict uses, per stage: DDP all-reduces; FSDP
# gathers weights (and reduce-scatters gradients: REDUCE_KIND).
MAIN_KIND = {"ddp": "all_reduce", "zero3": "all_gather"}
REDUCE_KIND = "reduce_scatter"


# W's source where the trace's collectives of a kind are all latency-bound (under
# rates.BANDWIDTH_MIN_BYTES) and nothing calibrated the kind: their bus bandwidth, a lower bound.
LATENCY_BOUND = "trace_latency_bound"


# HSDP's group of each kind (as ``Manifest.group_sizes``): gathers and reduce-scatters in the
# shard group, all-reduces across the replicas. Its calibration times all-reduces in both
# groups, on different links: each kind's W is its own group's.
HSDP_GROUP_OF = {"all_gather": "shard", "reduce_scatter": "shard", "all_reduce": "replicate"}


def _by_kind(rows: list[Collective], cal, hsdp: bool = False) -> dict[str, dict]:
    """W per collective kind: from the trace's large collectives of the kind, else the
    tracer's calibration of the kind (on an HSDP run, of the kind's group); both, and
    which one the model uses."""
    traced = rates.bandwidth_by_kind(rows)
    calibrated = {c.kind for c in cal.collectives} if cal else set()
    out = {}
    for kind in sorted(set(traced) | calibrated):
        mine = traced.get(kind, {})
        t, low = mine.get("bus_bandwidth_bytes_per_s"), mine.get("latency_bound_bytes_per_s")
        c = cal.bus_bandwidth_of(kind, HSDP_GROUP_OF.get(kind) if hsdp else None) if cal else None
        # a kind whose collectives are all latency-bound measures no W: the calibration's, else
        # their figure as the lower bound it is
        out[kind] = {"trace_bytes_per_s": t, "calibration_bytes_per_s": c, "bytes_per_s": t or c or low,
                     "source": "trace" if t else ("calibration" if c else (LATENCY_BOUND if low else None)),
                     "large_collectives": mine.get("large_collectives", 0),
                     "latency_bound": bool(mine.get("latency_bound")),
                     "latency_bound_bytes_per_s": low, "largest_bytes": mine.get("largest_bytes")}
    return out


def _sources(con, info: RunInfo, rows: list[Collective], stage: str | None) -> dict:
    """F and W from the trace and from the tracer's calibration; which ones the model uses.

    W is per collective kind (``bus_bandwidth_by_kind``): the trace's own large
    collectives of the kind, else the calibration of the kind. The top-level W keys
    are the stage's main kind (all-reduce for DDP, all-gather for FSDP), or every
    kind together when the stage is unknown; F prefers the calibration.
    """
    f_trace = rates.flops_per_s(con, info.run_id)
    cal = info.manifest.calibration
    by_kind = _by_kind(rows, cal, info.parallelism == "hsdp")
    main = by_kind.get(MAIN_KIND.get(stage, ""))
    every = rates.sized(rows)  # for W over every kind and for the latency fit
    overall = rates.bandwidth(rows, every)
    w_trace = main["trace_bytes_per_s"] if main else (None if stage in MAIN_KIND else
                                                      overall["bus_bandwidth_bytes_per_s"])
    w_cal = (main["calibration_bytes_per_s"] if main else None) or (cal.bus_bandwidth_bytes_per_s if cal else None)
    low = (main or overall).get("latency_bound_bytes_per_s")
    w_used = w_trace or w_cal or overall["bus_bandwidth_bytes_per_s"] or low
    w_of = {k: v["bytes_per_s"] for k, v in by_kind.items() if v["bytes_per_s"]}
    f_cal = cal.flops_per_s if cal else None
    return {
        "flops_per_s_trace": f_trace["flops_per_s"],
        "flops_per_s_calibration": f_cal,
        "bus_bandwidth_bytes_per_s_trace": w_trace,
        "bus_bandwidth_bytes_per_s_calibration": w_cal,
        # latency term of one collective, fitted on this trace's small collectives given each kind's W
        "latency_s": rates.latency(rows, w_used, w_of, every)["latency_s"],
        # F: the calibration when there is one (measured apart from the run); W: the trace's
        # own collectives of the kind when it has large ones, else the calibration
        "flops_per_s": f_cal or f_trace["flops_per_s"],
        "bus_bandwidth_bytes_per_s": w_used,
        # where the trace's collectives of the main kind are all under rates.BANDWIDTH_MIN_BYTES: their
        # bus bandwidth (a lower bound of W; the bucket and unit rules compare small collectives with it)
        "latency_bound_bytes_per_s": None if w_trace else low,
        "flops_source": "calibration" if f_cal else ("trace" if f_trace["flops_per_s"] else None),
        "bandwidth_source": "trace" if w_trace else ("calibration" if w_cal else (
            "trace" if overall["bus_bandwidth_bytes_per_s"] else (LATENCY_BOUND if w_used else None))),
        "bandwidth_kind": MAIN_KIND.get(stage) if main else None,
        "bus_bandwidth_by_kind": by_kind,
        "matmul_ops": f_trace["matmul_ops"],
        "large_collectives": (main["large_collectives"] if main else overall["large_collectives"]),
    }


@dataclass(frozen=True)
class _Inputs:
    """What the verdict reads: F, W (per kind), T, the stage, the group and the dtypes; for
    HSDP also the replica group (docs/model.md: the replica all-reduce in the backward)."""

    f: float | None
    w: float | None
    w_reduce: float | None  # FSDP: the reduce-scatter's W (None: as w)
    tokens: float | None
    stage: str | None
    gpus: int | None  # ranks a gradient is sharded over (HSDP: the shard group G)
    grad_bytes: float
    weight_bytes: float
    hsdp: bool = False  # an HSDP run: zero3 in the shard group plus the replica all-reduce
    replicas: int | None = None  # HSDP: R, the replica group's size (the mesh's first dimension)
    w_replicate: float | None = None  # HSDP: the replica all-reduce's W

    def missing(self) -> list[str]:
        """What the threshold needs and lacks (T aside: the threshold is known without it)."""
        lacking = [n for n, v in (("F (no FLOP counts or calibration)", self.f),
                                  ("W (no collective sizes or calibration)", self.w),
                                  ("a DDP/FSDP stage", self.stage)) if not v]
        if self.hsdp and not self.replicas:
            lacking.append("the HSDP mesh (the manifest's mesh [replicas, G]: without it the shard group and "
                           "the replica group are unknown)")
        elif self.hsdp and not self.w_replicate:
            lacking.append("W of the replica all-reduce (no sized all-reduces in the trace, no calibration of them)")
        return lacking

    def _args(self) -> dict:
        return dict(gpus=self.gpus, grad_bytes=self.grad_bytes, weight_bytes=self.weight_bytes,
                    reduce_bandwidth_bytes_per_s=self.w_reduce, replicas=self.replicas,
                    replicate_bandwidth_bytes_per_s=self.w_replicate)

    def tokens_to_hide(self) -> float | None:
        if self.missing() or not (self.gpus and self.gpus > 1):
            return None
        return stage_tokens_to_hide("hsdp" if self.hsdp else self.stage, self.f, self.w, **self._args())

    def verdict(self):
        if not (self.tokens and self.tokens_to_hide()):
            return None
        return overlap_verdict(self.tokens, self.f, self.w, stage="hsdp" if self.hsdp else self.stage,
                               **self._args())

    def reason_missing(self) -> str:
        lacking = self.missing() + ([] if self.tokens else ["tokens per micro-batch (use --tokens)"])
        return "cannot judge: missing " + ", ".join(lacking)


def _inputs(sources: dict, info: RunInfo, tokens, stage, grad_bytes: float, weight_bytes: float) -> _Inputs:
    by_kind = sources["bus_bandwidth_by_kind"]
    w_reduce = (by_kind.get(REDUCE_KIND) or {}).get("bytes_per_s") if stage == "zero3" else None
    hsdp = info.parallelism == "hsdp" and stage == "zero3"
    shape = info.manifest.hsdp_shape if hsdp else None
    # without the mesh an HSDP run's shard group is unknown too: no group, rather than the world
    gpus = None if hsdp and not shape else info.manifest.data_parallel_gpus(info.world_size)
    return _Inputs(sources["flops_per_s"], sources["bus_bandwidth_bytes_per_s"], w_reduce, tokens, stage, gpus,
                   grad_bytes, weight_bytes, hsdp, shape[0] if shape else None,
                   (by_kind.get("all_reduce") or {}).get("bytes_per_s") if shape else None)


def _per_step(rows: Sequence[Collective], overlap_steps: list[dict], inputs: _Inputs,
              info: RunInfo) -> tuple[list, list]:
    """Per-step comm beside its prediction, and the per-step model objects (verdicts).

    Read column by column (``Collectives``): grouping a 1,024-rank run's 2.07 million rows
    by step held a view of each (about 68 bytes with its index and list slot: some 140 MB,
    estimated) at once. A step's predicted sums add its
    collectives in row order, as Python's ``sum`` of them did (``np.bincount`` adds in
    index order), so every figure is the same to the bit."""
    import numpy as np

    table = collectives.table_of(rows)
    slots = {(s["rank"], s["step"]): k for k, s in enumerate(overlap_steps)}
    n = len(overlap_steps) + 1  # the last slot: rows of no step listed
    slot = _slots(table, slots, n - 1)
    counts = np.bincount(slot, minlength=n)

    def sums(name: str) -> tuple:
        values = table.numpy(name)
        known = ~np.isnan(values)
        return (np.bincount(slot[known], weights=values[known], minlength=n).tolist(),
                np.bincount(slot[known], minlength=n).tolist())

    (pc_sum, pc_n), (pe_sum, pe_n) = sums("predicted_comm_ms"), sums("predicted_exposed_ms")
    verdict, t_hide = inputs.verdict(), inputs.tokens_to_hide()
    steps, models = [], []
    for s in overlap_steps:
        k = slots[(s["rank"], s["step"])]
        steps.append({
            "rank": s["rank"], "step": s["step"], "step_ms": s["step_ms"], "comm_ms": s["comm_ms"],
            "exposed_comm_ms": s["exposed_comm_ms"], "collectives": int(counts[k]),
            # sums over the collectives that have a prediction (an un-modelled
            # broadcast or all-to-all contributes nothing)
            "predicted_comm_ms": round(pc_sum[k], 6) if pc_n[k] else None,
            "predicted_exposed_ms": round(pe_sum[k], 6) if pe_n[k] else None,
        })
        models.append({
            "rank": s["rank"], "step": s["step"], "stage": inputs.stage, "gpus": inputs.gpus,
            "flops_per_s": inputs.f, "bus_bandwidth_bytes_per_s": inputs.w,
            "reduce_bus_bandwidth_bytes_per_s": inputs.w_reduce, "replicas": inputs.replicas,
            "replicate_bus_bandwidth_bytes_per_s": inputs.w_replicate, "tokens": inputs.tokens,
            "grad_bytes": inputs.grad_bytes, "weight_bytes": inputs.weight_bytes,
            # tokens that hide the comm: known from F, W and the stage even without T
            "tokens_to_hide": round(t_hide, 1) if t_hide else None,
            "comm_to_compute_ratio": round(verdict.ratio, 4) if verdict else None,
            "verdict": verdict.verdict if verdict else None,
            "reason": verdict.reason if verdict else inputs.reason_missing(),
            "caveat": CPU_CAVEAT if info.device_kind == "cpu" else None,
        })
    return steps, models


def _slots(table, slots: dict[tuple, int], none: int):
    """Each row's slot of ``slots`` by its (rank, step), ``none`` where it has none (no
    step, or a step not listed): NumPy's int64 array, built without a list."""
    import numpy as np

    c = table.columns
    return np.fromiter(map(slots.get, zip(c["rank"], c["step"]), itertools.repeat(none)), np.int64, table.size)


def _memory(con, info: RunInfo, stage: str | None) -> list[dict]:
    """Measured peak allocated memory per rank beside the model states of the run's stage."""
    params = info.manifest.params
    model_bytes = None
    shape = info.manifest.hsdp_shape
    if params and stage == "zero3" and shape:  # HSDP shards over its shard group only: (4 + K) Psi / G
        model_bytes = model_state_bytes("hsdp", params, info.world_size, group=shape[1])
    elif params and stage in ("ddp", "zero1", "zero2", "zero3"):
        model_bytes = model_state_bytes(stage, params, info.world_size)
    sql.ensure(con, "rank_facts", run_id=info.run_id)
    return [{**peak, "model_state_bytes": model_bytes, "stage": stage}
            for peak in sql.rows(con, "predict.memory_peaks")]


def _forwards(con) -> dict[tuple[int, int], int]:
    """The model's forward ranges (DDP's, FSDP2's root) per (rank, step) (collectives.sql's step_forwards); none for a run
    stored before they were kept."""
    if not sql.has_table(con, "step_forwards"):
        return {}
    return {(r, s): n for r, s, n in sql.tuples(con, "collectives.forwards")}


def _grads(con) -> dict[tuple[int, int], list[int]]:
    """When each gradient was ready per (rank, step) of a DDP rank, ns (collectives.sql's
    step_grads); none for a run stored before they were kept."""
    if not sql.has_table(con, "step_grads"):
        return {}
    return {(r, s): list(ts) for r, s, ts in sql.tuples(con, "collectives.grads")}


def _reducer(con) -> dict[tuple[int, int], float]:
    """Time of DDP's reducer ops per (rank, step), ms (collectives.sql's step_reducer); none for
    a run stored before it was kept."""
    if not sql.has_table(con, "step_reducer"):
        return {}
    return {(r, s): ns / NS_PER_MS for r, s, ns in sql.tuples(con, "collectives.reducer")}


def analysis(con, run_id: int, tokens: float | None = None) -> RunAnalysis:
    """Measure the run, predict it with the model, and hold both side by side."""
    info = run_info(con, run_id)
    ov = overlap.compute(con, run_id)
    rows = collectives.compute(con, info)
    stage = _stage(info, rows)
    sources = _sources(con, info, rows, stage)
    collectives.release(rows)
    w_of = {k: v["bytes_per_s"] for k, v in sources["bus_bandwidth_by_kind"].items() if v["bytes_per_s"]}
    # the prediction engine, once: its comm model and the measured steps as plans (what the
    # what-if starts from too), and with no change its prediction of every collective
    model = CommModel(info.manifest.calibration, rows, w_of, sources["bus_bandwidth_bytes_per_s"])
    collectives.release(rows)  # each phase's pages of mapped columns handed back (measure.mapped)
    forwards, reducer, grads = _forwards(con), _reducer(con), _grads(con)
    rows = exposure.predict_comm(rows, model)
    collectives.release(rows)
    # each bucket and unit transfer's piece of the comm lane: read by the plans alone, and gone with them
    measured_plans = plans(info, rows, ov["steps"], waits.lanes(con, run_id, rows), model, forwards, reducer, grads)
    collectives.release(rows)
    rows = exposure.predict_exposed(rows, measured_plans)
    collectives.release(rows)
    grad_bytes, weight_bytes = _grad_bytes(info, rows), _weight_bytes(info, rows)
    tokens = tokens or info.manifest.tokens_per_microbatch
    inputs = _inputs(sources, info, tokens, stage, grad_bytes, weight_bytes)
    steps, models = _per_step(rows, ov["steps"], inputs, info)
    collectives.release(rows)
    models = reconcile(con, run_id, rows, steps, models, info.device_kind, stage)
    collectives.release(rows)
    return RunAnalysis(info, ov, rows, sources, stage, grad_bytes, steps, models, _memory(con, info, stage), tokens,
                       weight_bytes, model, measured_plans, forwards, reducer, grads)


def summary(rows: Sequence[Collective]) -> list[dict]:
    """Per (kind, id, phase) over ranks and steps: means and the median bus bandwidth; most exposed first.

    Read column by column (``Collectives``), grouped by its texts' codes: grouping a
    1,024-rank run's rows held a view of each (some 140 MB, as ``_per_step``'s). Means are ``statistics.fmean``'s over a
    group's NumPy values (an exact sum, then one division: no list of them), so the figures
    do not depend on the order they are read in; the median bus bandwidth sorts its group's
    values in NumPy (a list of a 2.07-million-row group's took 64 MB). What it holds beyond
    the columns is a group's copy of one column at a time and the groups' row order (int32:
    8 MiB at 1,024 ranks; none for one group)."""
    import numpy as np

    table = collectives.table_of(rows)
    texts = table.texts
    codes = [table.numpy(n) for n in ("kind", "id", "phase")]
    # each row's group by its texts' codes, the groups numbered in the order first met
    firsts, group = collectives.first_met_groups(codes)
    keys = [tuple(texts[c[i]] for c in codes) for i in firsts]
    del codes
    counts = np.bincount(group, minlength=len(keys))
    # each group's rows in row order, as int32 where they fit (half the run's int64 indexes);
    # none for a run of one group (its rows are the columns themselves)
    order = None
    if len(keys) > 1:
        order = np.argsort(group, kind="stable")
        if len(order) < 2 ** 31:
            order = order.astype(np.int32)
    del group
    ends = np.cumsum(counts)
    floats = {n: table.numpy(n) for n in
              ("comm_ms", "exposed_ms", "busbw_gbps", "predicted_comm_ms", "predicted_exposed_ms")}
    nbytes, inferred = table.numpy("bytes"), table.numpy("inferred")

    def of_group(name: str, index):  # a column's values of the group (every row: the column)
        return floats[name] if index is None else floats[name][index]

    def known(name: str, index):  # the group's values of a column, nulls (NaN) left out
        return collectives.known(of_group(name, index))

    def mean(values) -> float | None:
        return round(statistics.fmean(values), 6) if len(values) else None

    out = []
    for g, (kind, id_, phase) in enumerate(keys):
        index = None if order is None else order[(ends[g - 1] if g else 0):ends[g]]
        bw = collectives.median_known(of_group("busbw_gbps", index))
        comm, exposed = mean(known("comm_ms", index)), mean(known("exposed_ms", index))
        first_bytes = int(nbytes[firsts[g]])
        out.append({
            "kind": kind, "id": id_, "phase": phase, "count": int(counts[g]),
            "bytes": None if first_bytes == collectives.NULL_INT else first_bytes,
            "comm_ms": comm, "exposed_ms": exposed,
            "hidden_ms": round(comm - exposed, 6),
            "busbw_gbps": None if bw is None else round(bw, 4),
            "predicted_comm_ms": mean(known("predicted_comm_ms", index)),
            "predicted_exposed_ms": mean(known("predicted_exposed_ms", index)),
            "inferred": bool((inferred if index is None else inferred[index]).any()),
        })
    return sorted(out, key=lambda s: -(s["exposed_ms"] or 0))


ROWS_PER_CHUNK = 5_000  # collectives encoded at a time when a stored document streams them


def report(a: RunAnalysis, streamed: bool = False, summarized: list[dict] | None = None) -> dict:
    """The ``buckets`` result (the JSON contract, without ``run``); ``streamed``: its
    collectives as a ``runstore.Rows`` that the run store encodes chunk by chunk (ingest:
    a 256-rank run holds half a million of them); ``summarized``: ``summary(a.collectives)``
    where the caller has it (1 s at 1,024 ranks)."""
    if streamed:
        from overlapscope.analyzer.store.runstore import Rows

        rows = a.collectives

        def chunks():
            for i in range(0, len(rows), ROWS_PER_CHUNK):
                yield collectives.as_json(rows, i, i + ROWS_PER_CHUNK)
                collectives.release(rows)  # a chunk's pages of mapped columns (measure.mapped)

        listed = Rows(chunks)
    else:
        listed = collectives.as_json(a.collectives)
    return {"collectives": listed, "summary": summary(a.collectives) if summarized is None else summarized,
            "steps": a.steps, "model": a.model, "measured": a.sources, "memory": a.memory}
