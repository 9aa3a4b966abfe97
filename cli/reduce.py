"""``overlapscope reduce-rank TRACE...``: reduce ranks' traces in place, for ingest to collect.

What the tracer's ``TraceConfig(reduce_in_place=True)`` runs on each rank at the end
of profiling (``analyzer/engine/inplace.py``): each trace's per-rank tables go next
to it, into ``<trace>.overlapscope/``; ``ingest`` then copies them instead of
decoding the trace.
"""

from __future__ import annotations

from overlapscope.cli.common import emit


def add_parser(sub) -> None:
    p = sub.add_parser("reduce-rank", help="write each trace's per-rank tables next to it (ingest collects them)",
                       description="Reduce each rank's trace to its per-rank tables (the map of ingest) and write "
                                   "them next to it, as <trace>.overlapscope/, so that ingest only collects them. "
                                   "Run it on the node that holds the trace (the tracer does, with "
                                   "reduce_in_place=True).")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="per-rank trace files (.json, .json.gz)")
    p.add_argument("--parallelism", choices=("ddp", "fsdp", "hsdp"),
                   help="the run's parallelism (default: the manifest.json beside the traces, if any)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from overlapscope.analyzer.engine import inplace

    done = inplace.reduce_paths(args.traces, args.parallelism)
    return emit({"reduced": [str(p) for p in done]}, args.json,
                lambda r: print("\n".join(f"reduced in place: {p}" for p in r["reduced"])))
