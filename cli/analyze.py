"""``overlapscope analyze PATH...``: exposed communication per rank and per step."""

from __future__ import annotations


from overlapscope.analyzer.api import analyze, analyze_run
from overlapscope.cli.common import add_source_arguments, describe, emit, progress, stored_run
from overlapscope.cli.tables import clean, say, table

RANK_COLUMNS = [
    ("rank", "rank"), ("steps", "steps"), ("step_ms", "step_ms(median)"), ("compute_ms", "compute_ms"),
    ("comm_ms", "comm_ms"), ("exposed_comm_ms", "exposed_ms"), ("overlap_pct", "overlap_%"),
    ("idle_ms", "idle_ms"), ("hta_overlap_pct", "hta_overlap_%"),
]
STEP_COLUMNS = [
    ("rank", "rank"), ("step", "step"), ("step_ms", "step_ms"), ("compute_ms", "compute_ms"),
    ("comm_ms", "comm_ms"), ("exposed_comm_ms", "exposed_ms"), ("overlap_pct", "overlap_%"),
    ("idle_ms", "idle_ms"), ("other_ms", "other_ms"), ("spill_in_ms", "spill_in_ms"),
    ("spill_out_ms", "spill_out_ms"),
]


def add_parser(sub) -> None:
    p = sub.add_parser("analyze", help="compute, comm, exposed comm and overlap per rank and step",
                       description="Exposed communication per rank and per step of per-rank Kineto traces.")
    add_source_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON (run, ranks, steps)")
    p.set_defaults(func=run, fast_exit=True)  # writes nothing: cli._exit_now


def _print_text(result: dict) -> None:
    run = result["run"]
    say(f"run: {clean(run['name'])}")
    say(f"world size {run['world_size']}, backend {clean(run['backend'] or '?')}, "
        f"devices {clean(', '.join(run['devices']) or '?')}, ranks loaded {len(run['ranks_loaded'])}")
    say(f"headline: {describe(result['headline'])}")
    print()
    say("per rank: totals over the profiled steps (step_ms: the median step)")
    print(table(result["ranks"], RANK_COLUMNS, rank_by="exposed_comm_ms", what="ranks"))
    if result["steps"]:
        print()
        say("per step")
        print(table(result["steps"], STEP_COLUMNS, rank_by="exposed_comm_ms", what="steps"))
    worst = max(result["ranks"], key=lambda r: r["exposed_comm_ms"] or 0, default=None)
    if worst and worst["comm_ms"]:
        print()
        print(f"most exposed: rank {worst['rank']}, {worst['exposed_comm_ms']:.2f} ms of "
              f"{worst['comm_ms']:.2f} ms comm not hidden by compute ({worst['overlap_pct']:.1f}% overlap)")


def run(args) -> int:
    stored = stored_run(args)
    result = analyze_run(*stored) if stored else analyze(args.paths, workers=args.workers, engine=args.engine,
                                                         ray_address=args.ray_address,
                                                         on_mapped=None if args.json else progress("decoding rank"))
    return emit(result, args.json, _print_text)
