"""``overlapscope buckets PATH...``: which bucket, unit and phase the exposed comm is in."""

from __future__ import annotations


from overlapscope.analyzer.api import buckets, buckets_run, stored_json
from overlapscope.cli.common import add_source_arguments, emit, emit_stored, progress, stored_run
from overlapscope.cli.tables import clean, say, table

SUMMARY_COLUMNS = [  # least important last: a narrow terminal leaves them out
    ("kind", "kind"), ("id", "id"), ("phase", "phase"), ("count", "n"),
    ("comm_ms", "comm_ms"), ("exposed_ms", "exposed_ms"), ("predicted_comm_ms", "pred_comm_ms"),
    ("predicted_exposed_ms", "pred_exposed_ms"), ("busbw_gbps", "busbw_GB/s"), ("bytes", "bytes"),
    ("inferred", "inferred"),
]
STEP_COLUMNS = [
    ("rank", "rank"), ("step", "step"), ("comm_ms", "comm_ms"), ("exposed_comm_ms", "exposed_ms"),
    ("predicted_comm_ms", "pred_comm_ms"), ("predicted_exposed_ms", "pred_exposed_ms"),
]


def add_parser(sub) -> None:
    p = sub.add_parser("buckets", help="per bucket / unit / phase: comm, exposed, bytes, bus bandwidth, predicted",
                       description="Attribute every collective to its DDP bucket or FSDP unit and phase, "
                                   "and put the data-parallel model (F, W, T) beside the measurement.")
    add_source_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON (collectives, summary, steps, model, ...)")
    p.add_argument("--tokens", type=float, default=None,
                   help="tokens per GPU per micro-batch (default: the tracer manifest's tokens_per_microbatch)")
    p.set_defaults(func=run, fast_exit=True)  # writes nothing: cli._exit_now


def _print_text(result: dict) -> None:
    run = result["run"]
    say(f"run: {clean(run['name'])} (world size {run['world_size']}, {clean(run['backend'] or '?')}, "
          f"{run['parallelism'] or 'parallelism from the trace'})")
    print()
    say("per bucket / unit / phase (means over ranks and steps; most exposed first)")
    print(table([{**s, "id": s["id"] if s["id"] != "" else "<root>"} for s in result["summary"]], SUMMARY_COLUMNS,
                what="groups"))
    print()
    say("per step: measured beside the model's prediction")
    print(table(result["steps"], STEP_COLUMNS, rank_by="exposed_comm_ms", what="steps"))
    m = result["measured"]
    print()
    f, w = m["flops_per_s"], m["bus_bandwidth_bytes_per_s"]
    say(f"F = {f / 1e12:.4g} TFLOP/s ({m['flops_source']})" if f else "F = unknown (no FLOP counts, no calibration)")
    say(f"W = {w / 1e9:.4g} GB/s bus bandwidth ({m['bandwidth_source']})" if w else "W = unknown")
    if result["model"]:
        first = result["model"][0]
        if first["verdict"]:
            say(f"model: {first['stage']}, {first['tokens']:.0f} tokens per micro-batch against "
                  f"{first['tokens_to_hide']:.0f} needed to hide the comm: {first['verdict']}")
        else:
            say(f"model: {first['reason']}")
        if first.get("caveat"):
            say(f"note: {first['caveat']}")
    if any(s["inferred"] for s in result["summary"]):
        say("inferred: buckets or units read from the order of the collectives (no annotations in the trace)")


def run(args) -> int:
    stored = stored_run(args)
    if stored and args.json and emit_stored(stored_json(*stored, "buckets", args.tokens)):
        return 0  # what ingest stored, printed as it is
    result = (buckets_run(*stored, tokens=args.tokens) if stored
              else buckets(args.paths, workers=args.workers, tokens=args.tokens, engine=args.engine,
                           ray_address=args.ray_address, on_mapped=None if args.json else progress("decoding rank")))
    return emit(result, args.json, _print_text)
