"""Analysis results -> the rows the charts and tables draw. Pure functions, no Streamlit.

Rows are per rank, step, bucket or unit (tens to thousands), never per event.
"""

from __future__ import annotations

import math
import shlex
import statistics
from collections import defaultdict

from overlapscope.analyzer import api, headline
from overlapscope.analyzer.checklist.findings import STATUS_ORDER
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.model import hide, memory
from overlapscope.analyzer.model.hide import BACKWARD_SHARE
from overlapscope.contract import figures
from overlapscope.contract.figures import group_label
# Material icons ship with Streamlit's frontend (emoji need a system font).
STATUS_ICON = {"fail": ":material/cancel:", "warn": ":material/warning:", "pass": ":material/check_circle:",
               "n/a": ":material/remove_circle_outline:"}
MEMORY_STAGES = ("ddp", "zero1", "zero2", "zero3")


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


# --- overview ----------------------------------------------------------------------


def rank_medians(steps: list[dict]) -> list[dict]:
    """Per rank, its median step as the headline takes it (analyzer/headline.py: each figure's
    median over the rank's steps): compute, comm, exposed and hidden comm, idle, other,
    overlap %."""
    per_rank = headline.rank_medians(steps, (*headline.FIGURES, "other_ms"))
    counts: dict[int, int] = defaultdict(int)
    for s in steps:
        counts[s["rank"]] += 1
    out = []
    for rank, m in sorted(per_rank.items()):
        comm, exposed = m["comm_ms"], m["exposed_comm_ms"]
        out.append({**m, "rank": rank, "steps": counts[rank],
                    "hidden_comm_ms": None if comm is None or exposed is None else max(0.0, comm - exposed),
                    "overlap_pct": figures.overlap_pct(comm, exposed)})
    return out


def default_ranks(ranks: list[dict], slowest: int | None, limit: int = 4) -> list[int]:
    """Ranks to show first on the timeline: the slowest (the headline's), the least exposed,
    then in order."""
    if len(ranks) <= limit:
        return [r["rank"] for r in ranks]
    picked = [slowest if slowest is not None else ranks[0]["rank"]]
    calm = min(ranks, key=lambda r: (r["exposed_comm_ms"] or 0, r["rank"]))["rank"]
    picked += [calm] if calm not in picked else []
    picked += [r["rank"] for r in ranks if r["rank"] not in picked][: limit - len(picked)]
    return sorted(picked)


# --- buckets and units ---------------------------------------------------------------


def group_rows(summary: list[dict], top: int = 40) -> list[dict]:
    """The ``top`` groups by exposed time, with a label and the predicted figures."""
    rows = sorted(summary, key=lambda s: -(s["exposed_ms"] or 0))[:top]
    return [{**s, "group": group_label(s)} for s in rows]


# --- model -------------------------------------------------------------------------


def hide_threshold(model_rows: list[dict]) -> dict:
    """Tokens per GPU at which comm time equals the backward time that hides it (T_hide).

    From the buckets analysis' model (the model's stage-aware threshold); where a
    stored analysis lacks it but has F, W and the stage, the library computes it from
    them (``api.model_tokens_to_hide``). ``missing`` names what stops it.
    """
    m = model_rows[0] if model_rows else {}
    f, w, stage, gpus = m.get("flops_per_s"), m.get("bus_bandwidth_bytes_per_s"), m.get("stage"), m.get("gpus")
    t_hide = m.get("tokens_to_hide")
    missing = [name for name, value in (("F (achieved FLOP/s)", f), ("W (bus bandwidth)", w),
                                        ("a DDP or FSDP stage", stage)) if not value]
    if t_hide is None and not missing and gpus and gpus > 1:
        try:
            t_hide = api.model_tokens_to_hide(m)
        except UsageError as err:
            missing.append(str(err))
    if gpus is not None and gpus <= 1:
        missing.append("more than one data-parallel rank")
    if t_hide is None and not missing:  # what the analysis itself found missing (an HSDP run without its mesh)
        missing.append((m.get("reason") or "the model's inputs").removeprefix("cannot judge: missing "))
    return {"tokens_to_hide": t_hide, "tokens": m.get("tokens"), "stage": stage, "gpus": gpus,
            "replicas": m.get("replicas"),
            "flops_per_s": f, "bus_bandwidth_bytes_per_s": w, "grad_bytes": m.get("grad_bytes"),
            "verdict": m.get("verdict"), "missing": missing if t_hide is None else []}


def verdict_at(threshold: dict, tokens: float | None) -> str | None:
    """The model's verdict (hidden, marginal, exposed) at ``tokens`` for a ``hide_threshold``."""
    if not tokens or threshold["tokens_to_hide"] is None:
        return None
    return hide.verdict_of(threshold["tokens_to_hide"] / tokens)[0]


def disagreements(model_rows: list[dict]) -> dict | None:
    """Where the model and the measurement disagree (buckets' ``disagreement``): the rows as a
    table, the term that explains most of them and the explanation of the median such row;
    None where they agree everywhere."""
    rows = [m for m in model_rows if m.get("disagreement")]
    if not rows:
        return None
    table = [{"rank": m["rank"], "step": m["step"], "verdict": m["verdict"],
              "measured_exposed_ms": m["disagreement"]["measured_exposed_ms"],
              "model_exposed_ms": m["disagreement"]["predicted_exposed_ms"],
              "explained_by": m["disagreement"]["term"], "term_ms": m["disagreement"]["term_ms"]} for m in rows]
    counts: dict[str, int] = {}
    for r in table:
        counts[r["explained_by"]] = counts.get(r["explained_by"], 0) + 1
    term = max(counts, key=lambda k: (counts[k], k))
    mine = sorted((m for m in rows if m["disagreement"]["term"] == term), key=lambda m: m["disagreement"]["gap_ms"])
    return {"rows": table, "of": len(model_rows), "term": term, "count": counts[term],
            "example": mine[len(mine) // 2]["disagreement"]["explanation"],
            "example_at": (mine[len(mine) // 2]["rank"], mine[len(mine) // 2]["step"])}


def ratio_curve(t_hide: float, tokens: float | None = None, points: int = 60) -> list[dict]:
    """ratio(T) = T_hide / T (comm over the backward that hides it) on a log grid of T."""
    low, high = t_hide / 30, t_hide * 30
    if tokens:
        low, high = min(low, tokens / 3), max(high, tokens * 3)
    step = (math.log(high) - math.log(low)) / (points - 1)
    return [{"tokens": (t := math.exp(math.log(low) + i * step)), "ratio": t_hide / t} for i in range(points)]


def measured_ratio(steps: list[dict]) -> float | None:
    """Measured comm / backward compute: the median step's comm over the model's
    backward share (4 of 6 FLOPs) of its compute (the trace does not mark the backward)."""
    ratios = [s["comm_ms"] / (s["compute_ms"] * BACKWARD_SHARE)
              for s in steps if s["comm_ms"] is not None and s["compute_ms"]]
    return statistics.median(ratios) if ratios else None


def run_points(threshold: dict, measured: float | None) -> list[dict]:
    """This run on the ratio chart: the model's point and the measured one."""
    tokens, t_hide = threshold["tokens"], threshold["tokens_to_hide"]
    if not tokens:
        return []
    points = [{"tokens": tokens, "ratio": t_hide / tokens, "source": "model (F, W)"}] if t_hide else []
    if measured is not None:
        points.append({"tokens": tokens, "ratio": measured, "source": "measured"})
    return points


def memory_rows(params: float, gpus: int, hsdp_group: int | None = None, k: float = memory.ADAM_K) -> list[dict]:
    """Model-state bytes per GPU for each ZeRO stage (and HSDP on a 2-D mesh), by kind."""
    stages = [(s, None) for s in MEMORY_STAGES]
    if hsdp_group and gpus % hsdp_group == 0:
        stages.append(("hsdp", hsdp_group))
    rows = []
    for stage, group in stages:
        b = memory.model_state_breakdown(stage, params, gpus, k=k, group=group)
        for part, value in (("weights", b.weights_bytes), ("gradients", b.grads_bytes),
                            ("optimizer", b.optimizer_bytes)):
            rows.append({"stage": stage, "part": part, "bytes": value, "total_bytes": b.total_bytes})
    return rows


def on_scale(value: float | None, reference: float, factor: float = 20.0) -> bool:
    """Whether ``value`` fits a chart scaled to ``reference`` (within ``factor``): a CPU run's
    25 GB of RAM beside 2 MB of model states would flatten the bars to nothing."""
    return value is not None and value <= factor * reference


# --- checklist and compare -----------------------------------------------------------


def sorted_findings(findings: list[dict]) -> list[dict]:
    """Failed first, then warnings, passes, not applicable; worse severity first within each."""
    return sorted(findings, key=lambda f: (STATUS_ORDER.get(f.get("status"), 9), -(f.get("severity") or 0)))


def finding_counts(findings: list[dict]) -> dict:
    counts = {s: 0 for s in STATUS_ORDER}
    for f in findings:
        counts[f.get("status")] = counts.get(f.get("status"), 0) + 1
    return counts


def compare_steps(results: dict[str, dict]) -> list[dict]:
    """Per run and profiled step (by position: runs number steps differently), mean over ranks."""
    rows = []
    for run, result in results.items():
        by_step: dict[int, list[dict]] = defaultdict(list)
        for s in result["steps"]:
            by_step[s["step"]].append(s)
        for index, (step, items) in enumerate(sorted(by_step.items())):
            rows.append({"run": run, "step_index": index, "step": step,
                         "step_ms": _mean(i["step_ms"] for i in items),
                         "exposed_comm_ms": _mean(i["exposed_comm_ms"] for i in items),
                         "comm_ms": _mean(i["comm_ms"] for i in items),
                         "compute_ms": _mean(i["compute_ms"] for i in items)})
    return rows


def compare_groups(results: dict[str, dict], top: int = 30) -> list[dict]:
    """Per run and bucket/unit/phase: mean comm and exposed ms; the groups most exposed in either run."""
    rows = [{"run": run, "group": group_label(s), "comm_ms": s["comm_ms"], "exposed_ms": s["exposed_ms"],
             "hidden_ms": s["hidden_ms"], "busbw_gbps": s["busbw_gbps"]}
            for run, result in results.items() for s in result["summary"]]
    worst: dict[str, float] = defaultdict(float)
    for r in rows:
        worst[r["group"]] = max(worst[r["group"]], r["exposed_ms"] or 0)
    keep = set(sorted(worst, key=lambda g: -worst[g])[:top])
    return [r for r in rows if r["group"] in keep]


# --- history -------------------------------------------------------------------------


def history_rows(runs: list[dict], metric: str, regressions: dict[int, float | None]) -> list[dict]:
    """One row per run (oldest first) with the headline ``metric``, its tags and who pushed it,
    and whether it regressed against the previous run of its name (``gate.regressions``)."""
    rows = []
    for r in sorted(runs, key=lambda r: r["run_id"]):
        tags = r.get("tags") or {}
        rows.append({"run_id": r["run_id"], "name": r["name"], "created_at": str(r["created_at"] or "")[:19],
                     "commit": tags.get("commit") or tags.get("sha") or "–",
                     "value": (r.get("headline") or {}).get(metric),
                     "tags": ", ".join(f"{k}={v}" for k, v in sorted(tags.items())) or "–",
                     "pushed_by": r.get("pushed_by") or "–", "pruned": bool(r.get("pruned_at")),
                     "regression": r["run_id"] in regressions, "worse_pct": regressions.get(r["run_id"])})
    return rows


HISTORY_NAMES_SHOWN = 5  # lines in the History chart before the user picks others
HISTORY_TABLE_ROWS = 200  # the newest runs listed under it


def names_by_recency(runs: list[dict]) -> list[str]:
    """Run names, the most recently stored first (by their newest run's id)."""
    newest: dict[str, int] = {}
    for r in runs:
        newest[r["name"]] = max(newest.get(r["name"], r["run_id"]), r["run_id"])
    return sorted(newest, key=lambda n: -newest[n])


def history_names(rows: list[dict]) -> list[dict]:
    """Per run name: its runs, the latest value and the regressions marked."""
    out: dict[str, dict] = {}
    for r in rows:
        entry = out.setdefault(r["name"], {"name": r["name"], "runs": 0, "latest_run": None, "latest": None,
                                           "regressions": 0})
        entry.update(runs=entry["runs"] + 1, latest_run=r["run_id"], latest=r["value"])
        entry["regressions"] += r["regression"]
    return sorted(out.values(), key=lambda e: e["name"])


def whatif_command(name: str, label: str, sweep: str | None = None) -> str:
    """The ``overlapscope whatif`` line that predicts what the panel shows (quoted for a shell)."""
    return (f"overlapscope whatif --run {shlex.quote(name)}" + ("" if label == "no change" else f" {label}")
            + (f" --sweep {shlex.quote(sweep)}" if sweep else ""))


def whatif_points(sweep: dict) -> list[dict]:
    """The rows of the What if chart: one per swept value (``whatif`` JSON's ``sweep``)."""
    rows = []
    for p in sweep["points"]:
        pred = p.get("predicted") or {}
        rows.append({"value": p["value"], "step_ms": pred.get("step_ms"),
                     "exposed_comm_ms": pred.get("exposed_comm_ms"), "gain_ms": pred.get("gain_ms"),
                     "fits": (p.get("memory") or {}).get("fits")})
    return rows


# --- readable tables ---------------------------------------------------------------
# The names of the figures on buttons, axes and legends (the JSON keys stay the contract's).
FIGURE_LABELS = {**{m.name: m.label for m in figures.METRICS}, "exposed_ms": "exposed comm (ms)"}


def figure_label(key: str) -> str:
    """``exposed_comm_ms`` -> ``exposed comm (ms)``; a key without a label reads as words."""
    return FIGURE_LABELS.get(key, key.replace("_", " "))


# key -> (header with its unit, decimals (None: text), what the column is; why a row may have none).
# Headers stay short: a table fits the page at 1400 px with the menu open.
RANK_TABLE = {
    "rank": ("rank", 0, "The rank (distributedInfo)."),
    "steps": ("steps", 0, "Profiled steps of the rank."),
    "step_ms": ("median step (ms)", 2, "The median of the rank's step times."),
    # "total" is the table's title: headers as short as the step table's keep 9 columns in the
    # frame beside a 64-rank table's scroll bar
    "compute_ms": ("compute (ms)", 2, "Union of compute kernels (or CPU ops), over all profiled events: the total."),
    "comm_ms": ("comm (ms)", 2, "Union of communication, over all profiled events: the total."),
    "exposed_comm_ms": ("exposed comm (ms)", 2, "Comm not covered by any compute of the rank, over all profiled "
                        "steps: the total."),
    "overlap_pct": ("overlap (%)", 1, "100 x (comm - exposed) / comm. –: the rank has no comm."),
    "idle_ms": ("idle (ms)", 2, "Time in the steps with neither compute nor comm: the total."),
    "hta_overlap_pct": ("HTA overlap (%)", 1, "Holistic Trace Analysis' comm/compute overlap, computed the same "
                        "way as HTA. –: HTA's figure needs GPU kernels."),
}
RANK_CLOCK_TABLE = {
    "rank": ("rank", 0, "The rank (distributedInfo)."),
    "clock_offset_ms": ("clock offset (ms)", 3, "Added to the rank's times to put the ranks on one clock."),
    "comm_wait_ms": ("waiting in comm (ms)", 2, "Comm time spent waiting for the last rank to arrive."),
    "comm_transfer_ms": ("transfer (ms)", 2, "Comm time after every rank arrived: the transfer itself."),
    "exposed_wait_ms": ("exposed waiting (ms)", 2, "Exposed comm that is waiting for another rank."),
}
STEP_TABLE = {
    "rank": ("rank", 0, "The rank."),
    "step": ("step", 0, "The ProfilerStep number."),
    "step_ms": ("step (ms)", 2, "The step's window: ProfilerStep on the host, the device work it launched."),
    "compute_ms": ("compute (ms)", 2, "Union of compute in the step."),
    "comm_ms": ("comm (ms)", 2, "Union of comm the step launched."),
    "exposed_comm_ms": ("exposed (ms)", 2, "Exposed comm: comm not covered by compute."),
    "overlap_pct": ("overlap (%)", 1, "100 x (comm - exposed) / comm. –: no comm in the step."),
    "idle_ms": ("idle (ms)", 2, "Neither compute nor comm."),
    "other_ms": ("copies (ms)", 2, "Time with only memcpy or memset running."),
    "spill_in_ms": ("from prev. (ms)", 2, "Device work of the previous step still running in this one."),
    "spill_out_ms": ("into next (ms)", 2, "Device work of this step still running in the next one."),
}
GROUP_TABLE = {  # Buckets & units: per bucket, unit or collective and phase (shape.group_rows)
    "group": ("bucket or unit · phase", None, "The DDP bucket, FSDP unit or other collective, and its phase."),
    "count": ("count", 0, "Collectives of the group over all ranks and profiled steps."),
    "size_mb": ("MB", 2, "Bytes per collective, in MB (10^6 bytes). –: the trace gives no size."),
    "comm_ms": ("comm (ms)", 3, "Mean time of one collective."),
    "exposed_ms": ("exposed (ms)", 3, "Mean exposed time of one collective (no compute of the rank runs)."),
    "busbw_gbps": ("bus GB/s", 2, "Median bus bandwidth (nccl-tests). –: the trace gives no size."),
    "predicted_comm_ms": ("model comm (ms)", 3, "Predicted from the bytes, W and the latency term. "
                          "–: the model needs W."),
    "predicted_exposed_ms": ("model exposed (ms)", 3, "Predicted by the model's overlap timeline. "
                             "–: the model needs W."),
}
BUCKET_STEP_TABLE = {  # Buckets & units: per rank and step, measured beside predicted
    "rank": ("rank", 0, "The rank."),
    "step": ("step", 0, "The ProfilerStep number."),
    "step_ms": ("step (ms)", 2, "The step's window."),
    "collectives": ("collectives", 0, "Collectives the step launched."),
    "comm_ms": ("comm (ms)", 2, "Union of the step's comm."),
    "exposed_comm_ms": ("exposed (ms)", 2, "Comm not covered by compute."),
    "predicted_comm_ms": ("model comm (ms)", 2, "The model's comm for the step's collectives. "
                          "–: no collective of the step has a prediction (W unknown)."),
    "predicted_exposed_ms": ("model exposed (ms)", 2, "The model's exposed comm for the step. "
                             "–: no collective of the step has a prediction (W unknown)."),
}
WINDOW_TABLE = {  # Timeline: each rank's window of the drawn step
    "rank": ("rank", 0, "The rank."),
    "start_ms": ("starts at (ms)", 3, "The rank's step start on the chart's time axis."),
    "window_ms": ("window (ms)", 2, "The rank's step window."),
    "compute_ms": ("compute (ms)", 2, "Union of compute in the window."),
    "comm_ms": ("comm (ms)", 2, "Union of comm in the window."),
    "exposed_ms": ("exposed comm (ms)", 2, "Comm in the window not covered by compute."),
    "clock_offset_ms": ("clock offset (ms)", 3, "Added to the rank's times to put the ranks on one clock "
                        "(0 with the clocks apart)."),
}
SIDE_BY_SIDE_TABLE = {  # Compare: every headline metric of both runs
    "metric": ("metric", None, "A headline figure: the median step of the slowest rank."),
    "baseline_value": ("run A", 2, "Run A's figure. –: not measured (no comm, no steps)."),
    "value": ("run B", 2, "Run B's figure. –: not measured (no comm, no steps)."),
    "change": ("B − A", 2, "Run B's figure minus run A's. –: one of them has none."),
    "change_words": ("B against A", None, "How much better or worse B is than A, in % of A, for this metric's "
                     "direction (lower step and exposed comm is better, higher overlap). –: one has none."),
}
COMPARE_GROUP_TABLE = {  # Compare: buckets and units that changed most
    "label": ("bucket or unit · phase", None, "The DDP bucket, FSDP unit or other collective, and its phase."),
    "baseline_exposed_ms": ("A exposed (ms)", 3, "Mean exposed time per collective in run A. "
                            "–: run A has no such group."),
    "exposed_ms": ("B exposed (ms)", 3, "Mean exposed time per collective in run B. –: run B has no such group."),
    "change_ms": ("B − A (ms)", 3, "Change of the exposed time (a group only one run has counts from 0)."),
    "baseline_comm_ms": ("A comm (ms)", 3, "Mean time per collective in run A. –: run A has no such group."),
    "comm_ms": ("B comm (ms)", 3, "Mean time per collective in run B. –: run B has no such group."),
}
DISAGREEMENT_TABLE = {  # Model: where the model and the measurement disagree
    "rank": ("rank", 0, "The rank."),
    "step": ("step", 0, "The ProfilerStep number."),
    "verdict": ("model's verdict", None, "hidden, marginal or exposed, from F, W and the tokens."),
    "measured_exposed_ms": ("measured exposed (ms)", 2, "Exposed comm measured in the step."),
    "model_exposed_ms": ("model exposed (ms)", 2, "Exposed comm the model's overlap timeline predicts."),
    "explained_by": ("explained by", None, "The term that explains most of the gap (see below)."),
    "term_ms": ("term (ms)", 2, "That term's figure per step."),
}
WHATIF_COLLECTIVE_TABLE = {  # Model, What if: the predicted collectives of one step
    "id": ("bucket or unit", None, "The DDP bucket index or FSDP unit name."),
    "phase": ("phase", None, "The collective's phase."),
    "size_mb": ("MB", 2, "Bytes per collective, in MB (10^6 bytes)."),
    "link": ("link", None, "intra, or inter for HSDP's replicas."),
    "measured_ms": ("measured (ms)", 3, "As measured. –: a collective the change created."),
    "predicted_ms": ("predicted (ms)", 3, "The replay's time for it under the changes."),
    "model_ms": ("model (ms)", 3, "The comm model's time from the bytes and W."),
    "exposed_ms": ("exposed (ms)", 3, "Exposed in the replay."),
    "hidden_by": ("hidden by", None, "The compute that hides it. –: nothing hides it."),
}


def history_name_table(metric_label: str) -> dict:
    """History's table of run names; the latest value is of the chosen metric."""
    return {"name": ("run name", None, "Runs of one name make one line."),
            "runs": ("runs", 0, "Runs of this name the filter shows."),
            "latest_run": ("latest run", 0, "The id of the newest run of this name."),
            "latest": (f"latest {metric_label}", 2, "The newest run's figure. –: it has none (no comm, no steps)."),
            "regressions": ("regressions", 0, "Runs worse than the run before them by more than the bound.")}


def history_run_table(metric_label: str) -> dict:
    """History's table of runs, newest first."""
    return {"run_id": ("run", 0, "The run's id (click a point in the chart, or pick it in the sidebar, to open it)."),
            "name": ("run name", None, "The run's name."),
            "created_at": ("stored (UTC)", None, "When the run was stored."),
            "value": (metric_label, 2, "The run's figure. –: it has none (no comm, no steps)."),
            "worse_pct": ("worse by (%)", 1, "Worse than the previous run of its name by more than the bound, "
                          "in % of that run's figure. –: not a regression."),
            "commit": ("commit", None, "The run's commit tag (commit=... or sha=...). –: none."),
            "tags": ("tags", None, "The run's tags. –: none."),
            "pushed_by": ("pushed by", None, "The API token's name that pushed it. –: stored locally.")}


def regression_table(metric_label: str) -> dict:
    """History's table of the runs that regressed."""
    return {"run_id": ("run", 0, "The run's id."),
            "name": ("run name", None, "The run's name."),
            "created_at": ("stored (UTC)", None, "When the run was stored."),
            "value": (metric_label, 2, "The run's figure."),
            "worse_pct": ("worse by (%)", 1, "Worse than the previous run of its name, in % of that run's."),
            "tags": ("tags", None, "The run's tags. –: none."),
            "pushed_by": ("pushed by", None, "The API token's name that pushed it. –: stored locally.")}


def with_mb(rows: list[dict], key: str = "bytes") -> list[dict]:
    """Rows with ``size_mb``: ``key`` in MB (10^6 bytes), None where unknown."""
    return [{**r, "size_mb": None if r.get(key) is None else r[key] / 1e6} for r in rows]


# Columns that are 0 on every row of most runs (no copies on a CPU run, no work across step
# boundaries): left out then, and named, so the figures that matter fit the page.
QUIET_WHEN_ZERO = frozenset({"other_ms", "spill_in_ms", "spill_out_ms"})


def readable_rows(rows: list[dict], spec: dict) -> tuple[list[dict], list[str], set[str], list[str]]:
    """``rows`` read through ``spec``: numbers rounded as the spec says, a column with no
    value anywhere left out (its header among the ``empty``; one of ``QUIET_WHEN_ZERO`` too
    when 0 on every row), None kept where a row has no value (the table shows a dash; its
    column is among the ``gaps``). A row's ``mark`` (the slowest row's flag) comes first.
    Returns (rows, columns shown, the columns with gaps, the headers left out)."""
    columns = [k for k in spec if any(r.get(k) is not None for r in rows)
               and not (k in QUIET_WHEN_ZERO and all(not r.get(k) for r in rows))]
    empty = [spec[k][0] + (" (0 on every row)" if any(r.get(k) is not None for r in rows) else
                           " (no value on any row)") for k in spec if k not in columns]
    gaps = {k for k in columns if any(r.get(k) is None for r in rows)}
    out = []
    for r in rows:
        row = {"mark": r["mark"]} if "mark" in r else {}
        for k in columns:
            v, digits = r.get(k), spec[k][1]
            row[k] = round(v, digits) if isinstance(v, float) and digits is not None else v
        out.append(row)
    return out, columns, gaps, empty
