"""``overlapscope whatif PATH|--run NAME [changes...]``: the run predicted under another configuration.

The measured step replayed with the changed communication (analyzer/predict/whatif.py): measured,
replayed as it is (how well the replay reproduces the run), predicted, and the model's
pure prediction, side by side; memory per GPU; the terms of each collective. Several
changes combine; ``--sweep NAME=V1,V2,...`` prints one prediction per value.
"""

from __future__ import annotations

from overlapscope.analyzer.api import whatif, whatif_run
from overlapscope.analyzer.predict import changes as changes_mod
from overlapscope.cli.common import add_source_arguments, emit, progress, stored_run
from overlapscope.cli.tables import clean, say, table

FIGURE_COLUMNS = [
    ("figure", ""), ("slowest_rank", "rank"), ("step_ms", "step_ms"), ("compute_ms", "compute_ms"), ("comm_ms", "comm_ms"),
    ("exposed_comm_ms", "exposed_ms"), ("overlap_pct", "overlap_%"),
]
COLLECTIVE_COLUMNS = [
    ("phase", "phase"), ("id", "id"), ("bytes", "bytes"), ("group_size", "group"), ("measured_ms", "measured_ms"),
    ("predicted_ms", "pred_ms"), ("model_ms", "model_ms"), ("exposed_ms", "exposed_ms"), ("hidden_by", "hidden by"),
]
SWEEP_COLUMNS = [
    ("value", "value"), ("step_ms", "step_ms"), ("comm_ms", "comm_ms"), ("exposed_comm_ms", "exposed_ms"),
    ("overlap_pct", "overlap_%"), ("gain_ms", "gain_ms"), ("model_step_ms", "model_step_ms"),
    ("peak_gb", "peak_GB"), ("fits", "fits"),
]


def add_parser(sub) -> None:
    p = sub.add_parser("whatif", help="predict the step under another configuration (buckets, sync, FSDP, HSDP, ...)",
                       description="Replay the measured compute with the changed communication and predict step "
                                   "time, comm, exposed comm, overlap and memory per GPU.")
    add_source_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON (changes, measured, replayed, predicted, model, "
                                                       "memory, collectives, steps, sweep)")
    g = p.add_argument_group("changes (they combine)")
    g.add_argument("--bucket-mb", metavar="X", help="DDP bucket_cap_mb set to X (every bucket up to X); 'default': left unset (25, first bucket 1 MiB)")
    g.add_argument("--sync", dest="sync", action="store_const", const=True, default=None,
                   help="gradient accumulation: all-reduce in every micro-batch")
    g.add_argument("--no-sync", dest="sync", action="store_const", const=False,
                   help="gradient accumulation: reduce only in the last micro-batch (no_sync)")
    g.add_argument("--accum", metavar="M", help="micro-batches per optimizer step")
    g.add_argument("--reshard-after-forward", metavar="on|off")
    g.add_argument("--forward-prefetch", metavar="on|off")
    g.add_argument("--backward-prefetch", metavar="on|off")
    g.add_argument("--wrap", metavar="per-block|root-only", help="FSDP units")
    g.add_argument("--hsdp", metavar="G", help="shard within groups of G ranks, replicate across them")
    g.add_argument("--intra-bandwidth", metavar="W", help="bus bandwidth inside a shard group, bytes/s (e.g. 150G)")
    g.add_argument("--inter-bandwidth", metavar="W", help="bus bandwidth across shard groups, bytes/s (e.g. 25G)")
    g.add_argument("--tokens", metavar="T|Nx", help="tokens per GPU per micro-batch, or a multiple (2x)")
    g.add_argument("--bandwidth", metavar="W|Nx", help="bus bandwidth of every collective, bytes/s, or a multiple")
    g.add_argument("--gpus", metavar="N", help="data-parallel world size")
    g.add_argument("--reduce-dtype", metavar="bf16|fp32")
    g.add_argument("--on-time", metavar="RANK|late", help="this rank (late: the one the others wait for) arrives "
                   "with the others: a straggler removed; the step is the other ranks'")
    p.add_argument("--sweep", metavar="NAME=V1,V2,...", help="one prediction per value of one change, e.g. "
                   "bucket-mb=1,5,25,100 or tokens=0.5x,1x,2x,4x (on top of the other changes)")
    p.set_defaults(func=run, fast_exit=True)  # writes nothing: cli._exit_now


def read_changes(args) -> changes_mod.Changes:
    return changes_mod.read({name: getattr(args, name.replace("-", "_")) for name in changes_mod.READERS})


def _fig(name: str, f: dict | None, extra: str = "") -> dict:
    return {"figure": name + extra, **(f or {})}


def _print_sweep(s: dict) -> None:
    print()
    say(f"sweep over --{s['name']} (measured step {s['measured']['step_ms']:.2f} ms, "
        f"replayed {s['replayed']['step_ms']:.2f} ms)" if s.get("replayed") else
        f"sweep over --{s['name']} (measured step {s['measured']['step_ms']:.2f} ms)")
    rows = [{"value": pt["value"], **pt["predicted"], "model_step_ms": (pt["model"] or {}).get("step_ms"),
             "peak_gb": ((pt["memory"] or {}).get("predicted_peak_bytes") or 0) / 1e9 or None,
             "fits": (pt["memory"] or {}).get("fits")} for pt in s["points"] if pt["predicted"]]
    print(table(rows, SWEEP_COLUMNS))
    # each point's notes once, with the values they hold for: a caveat of some points (no latency
    # fitted, so smaller buckets flattered) must reach a reader who only reads the table
    values: dict[str, list[str]] = {}
    for pt in s["points"]:
        for line in pt.get("warnings") or []:
            values.setdefault(line, []).append(str(pt["value"]))
    for line, where in values.items():
        say(f"note ({', '.join(where)}): {clean(line)}")


def _print_text(result: dict) -> None:
    run = result["run"]
    say(f"run: {clean(run['name'])} (world size {run['world_size']}, {run['parallelism'] or 'parallelism from the trace'})")
    say(f"what if: {clean(result['label'])}")
    for line in result["warnings"]:
        say(f"note: {clean(line)}")
    if result["measured"] is None:
        return
    if result.get("sweep") and result["label"] == "no change":
        # a sweep alone: its table is the answer (the no-change block would only repeat the measured step)
        _print_sweep(result["sweep"])
        print()
        say("assumes: " + "; ".join(result["assumptions"]))
        return
    print()
    r, p = result["replayed"], result["predicted"]
    print("the slowest rank's median step (the headline's; a change may make another rank the slowest)")
    print(table([_fig("measured", result["measured"]),
                 _fig("replayed", r, f" ({r['error_pct_of_step']:+.1f}%)" if r.get("error_pct_of_step") is not None
                      else ""),
                 _fig("predicted", p), _fig("model", result["model"])], FIGURE_COLUMNS))
    print(f"predicted gain: {p['gain_ms']:+.2f} ms per step" if p.get("gain_ms") is not None else "")
    m = result["memory"]
    if m and m.get("predicted_peak_bytes") is not None:
        fits = {True: "fits", False: "DOES NOT FIT", None: "device memory unknown"}[m["fits"]]
        say(f"memory per GPU: {m['predicted_peak_bytes'] / 1e9:.3f} GB predicted peak "
              f"(model states {(m['predicted_model_state_bytes'] or 0) / 1e9:.3f} GB, {m['predicted_stage']}) "
              f"against {((m['measured_peak_bytes'] or 0) / 1e9):.3f} GB measured: {fits}")
    if result["collectives"]:
        c = result["collectives_of"]
        print()
        say(f"collectives of rank {c['rank']} step {c['step']} as predicted")
        print(table(result["collectives"], COLLECTIVE_COLUMNS, rank_by="exposed_ms", what="collectives"))
    if result.get("sweep"):
        _print_sweep(result["sweep"])
    print()
    say("assumes: " + "; ".join(result["assumptions"]))


def run(args) -> int:
    changes = read_changes(args)
    sweep = changes_mod.sweep(args.sweep, changes) if args.sweep else None
    stored = stored_run(args)
    result = (whatif_run(*stored, changes=changes, sweep=sweep) if stored
              else whatif(args.paths, changes, sweep, workers=args.workers, engine=args.engine,
                          ray_address=args.ray_address, on_mapped=None if args.json else progress("decoding rank")))
    return emit(result, args.json, _print_text)
