"""``overlapscope check --run NAME``: the CI gate. Exit 0 within bounds, 1 on a regression, 2 on an error.

The latest run of a name is held against its baseline (the previous run of that
name, or a run id) on one headline metric (``analyzer/gate.py``), in a local
catalog (``--db``) or on a dashboard's API (``--server URL``).
"""

from __future__ import annotations

from overlapscope.analyzer import gate
from overlapscope.analyzer.errors import UsageError
from overlapscope.cli.common import emit, open_catalog, run_ref


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="gate: is the latest run of a name worse than its baseline? (exit 1 if so)",
                       description="Compare the latest run of a name with its baseline on one headline metric. "
                                   "Exit 0 within the bound, 1 on a regression (what regressed, by how much, "
                                   "and the buckets or units that changed most), 2 on an error.")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", metavar="NAME|#ID", help="the run's name (its latest run), or #ID for a run id")
    which.add_argument("--run-id", type=int, metavar="ID", help="a run by its id")
    p.add_argument("--baseline", default="previous", metavar="previous|RUN_ID",
                   help="what to compare with: the previous run of the same name (default) or a run id")
    p.add_argument("--metric", default=gate.DEFAULT_METRIC, choices=gate.METRICS,
                   help=f"the headline metric to hold (default {gate.DEFAULT_METRIC}); overlap_pct regresses "
                        "downwards, the others upwards")
    p.add_argument("--max-regression-pct", type=float, default=gate.DEFAULT_MAX_REGRESSION_PCT, metavar="X",
                   help=f"the largest change for the worse allowed, in %% of the baseline "
                        f"(default {gate.DEFAULT_MAX_REGRESSION_PCT:g})")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="FILE", help="a local catalog (default: $OVERLAPSCOPE_DB or the user data dir)")
    where.add_argument("--server", metavar="URL", help="a dashboard's API instead of a local catalog")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.set_defaults(func=run_check, error_status=2)  # 1 means a regression: every other failure is 2


def _local(args) -> dict:
    from overlapscope.analyzer import api

    con = open_catalog(args.db, read_only=True)
    try:
        run_id = api.resolve_run(con, run_ref(args))
        return gate.check(con, run_id, args.baseline, args.metric, args.max_regression_pct)
    finally:
        con.close()


def _remote(args) -> dict:
    from overlapscope.cli.remote import Server
    from overlapscope.contract.api import CHECK, RUNS, RunList, Verdict

    gate.check_bound(args.max_regression_pct)  # refused here, before the server is asked
    server = Server(args.server)
    ref = run_ref(args)
    if isinstance(ref, str) and ref.startswith("#") and ref[1:].isdigit():
        ref = int(ref[1:])
    if isinstance(ref, int):
        run_id = ref
    else:  # as a local --run: the newest run of the name, else digits are an id
        runs = server.get(RUNS, [("name", ref)], RunList)["runs"]
        if not runs and not ref.isdigit():
            raise UsageError(f"{server.url}: no run {ref!r}")
        run_id = runs[0]["run_id"] if runs else int(ref)
    verdict = server.get(CHECK.format(run_id=run_id), [("baseline", str(args.baseline)), ("metric", args.metric),
                                                    ("max_regression_pct", repr(args.max_regression_pct))], Verdict)
    if verdict["metric"] != args.metric:  # a server that ignored the question answered another one
        raise UsageError(f"{server.url}: asked for {args.metric}, the server answered for {verdict['metric']}")
    return verdict


def _num(value, unit: str) -> str:
    return "-" if value is None else f"{value:,.3f} {unit}".strip()


def _pct(value) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def describe(v: dict) -> str:
    """The verdict in a few lines of words."""
    unit = "%" if v["metric"].endswith("_pct") else "ms"
    run, base = v["run"], v["baseline"]
    worse = _pct(v["worse_pct"])
    way = "higher" if v["higher_is_better"] else "lower"
    lines = [f"{'REGRESSION' if v['regressed'] else 'PASS'}: {v['metric']} of run {run['run_id']} ({run['name']}) "
             f"is {_num(v['value'], unit)} against {_num(v['baseline_value'], unit)} in baseline run "
             f"{base['run_id']}: {worse} worse (bound {v['max_regression_pct']:g} %; {way} is better)"]
    others = [m for m in v["metrics"] if m["metric"] != v["metric"] and m["verdict"] == "worse"]
    if others:
        lines.append("also worse: " + ", ".join(f"{m['metric']} {_pct(m['worse_pct'])}" for m in others))
    changed = [g for g in v["groups"] if g["change_ms"]]
    if changed:
        lines.append("changed most (mean exposed ms per collective, baseline -> run):")
        lines += [f"  {g['label']}: {_num(g['baseline_exposed_ms'], '')} -> {_num(g['exposed_ms'], '')} "
                  f"({g['change_ms']:+,.3f} ms)" for g in changed]
    lines += [f"warning: {w}" for w in v["warnings"]]
    return "\n".join(lines)


def run_check(args) -> int:
    verdict = _remote(args) if args.server else _local(args)
    status = 1 if verdict["regressed"] else 0
    try:
        emit(verdict, args.json, lambda v: print(describe(v)))
    except BrokenPipeError:  # a reader that stopped early does not turn a regression into a pass
        _quiet_stdout()
    return status


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush does not fail again."""
    import os
    import sys

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
