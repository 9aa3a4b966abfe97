"""``overlapscope diagnose PATH...``: the checklist, with evidence from this trace."""

from __future__ import annotations

import textwrap

from overlapscope.analyzer.api import diagnose, diagnose_run, stored_json
from overlapscope.cli.common import add_source_arguments, emit, emit_stored, progress, stored_run
from overlapscope.cli.tables import DISPLAY, clean, say

MARK = {"fail": "FAIL", "warn": "WARN", "pass": "pass", "n/a": " n/a"}


def add_parser(sub) -> None:
    p = sub.add_parser("diagnose", help="the checklist: one finding per rule, with evidence and a fix",
                       description="Why is my data-parallel run slow: every rule of the checklist evaluated on "
                                   "the trace, failed ones first.")
    add_source_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON (run, findings, thresholds)")
    p.add_argument("--tokens", type=float, default=None,
                   help="tokens per GPU per micro-batch (default: the tracer manifest's tokens_per_microbatch)")
    p.add_argument("--all", action="store_true", help="also print the evidence of passed and n/a rules")
    p.set_defaults(func=run, fast_exit=True)  # writes nothing: cli._exit_now


def _gain(ms: float) -> str:
    return f"saves {ms:.2f} ms per step" if ms >= 0 else f"costs {-ms:.2f} ms per step"


def _print_text(result: dict, show_all: bool) -> None:
    run = result["run"]
    print(f"run: {clean(run['name'])} (world size {run['world_size']}, {clean(run['backend'] or '?')})")
    print()
    for f in result["findings"]:
        say(f"{MARK[f['status']]}  {f['id']:26} {f['title']}", indent=" " * 33)
        if f["status"] in ("fail", "warn") or show_all:
            for label, text in (("evidence", clean(f["evidence"])), ("fix", clean(f["fix"]))):
                body = textwrap.fill(text, width=DISPLAY.width, initial_indent=f"      {label}: ",
                                     subsequent_indent=" " * (8 + len(label)))
                print(body)
            if f.get("whatif") and f.get("predicted_gain_ms") is not None:
                say(f"      what if: {clean(f['whatif'])} {_gain(f['predicted_gain_ms'])} "
                    f"(overlapscope whatif ... {clean(f['whatif'])})", indent=" " * 15)
            elif f.get("no_change") and f["status"] in ("fail", "warn"):
                say(f"      what if: {clean(f['no_change'])}", indent=" " * 15)
    counts = {s: sum(f["status"] == s for f in result["findings"]) for s in MARK}
    print()
    print(f"{counts['fail']} fail, {counts['warn']} warn, {counts['pass']} pass, {counts['n/a']} n/a")


def run(args) -> int:
    stored = stored_run(args)
    if stored and args.json and emit_stored(stored_json(*stored, "diagnose", args.tokens)):
        return 0  # what ingest stored, printed as it is
    result = (diagnose_run(*stored, tokens=args.tokens) if stored
              else diagnose(args.paths, workers=args.workers, tokens=args.tokens, engine=args.engine,
                            on_mapped=None if args.json else progress("decoding rank"),
                            ray_address=args.ray_address))
    return emit(result, args.json, lambda r: _print_text(r, args.all))
