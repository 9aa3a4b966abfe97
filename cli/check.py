"""``overlapscope check --run NAME``: the CI gate. Exit 0 within bounds (or the name's first
run: no baseline yet), 1 on a regression, 2 on an error (and, with ``--strict``, no baseline).

The latest run of a name is held against its baseline (the previous run of that
name, or a run id) on one headline metric (``analyzer/gate.py``), in a local
catalog (``--db``) or on a dashboard's API (``--server URL``). The verdict prints as
words, as JSON, or as Markdown for a CI job's summary; ``--junit FILE`` also writes it
as JUnit XML for CI systems that collect test reports.
"""

from __future__ import annotations

from overlapscope.analyzer import gate
from overlapscope.analyzer.errors import UsageError
from overlapscope.cli.common import emit, open_catalog, run_ref


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="gate: is the latest run of a name worse than its baseline? (exit 1 if so)",
                       description="Compare the latest run of a name with its baseline on one headline metric. "
                                   "Exit 0 within the bound, 1 on a regression (what regressed, by how much, "
                                   "and the buckets or units that changed most), 2 on an error. The first run "
                                   "of a name has no baseline yet and passes (exit 0) unless --strict.")
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
    p.add_argument("--strict", action="store_true",
                   help="a run with no baseline (its name's first) fails with exit 2 instead of passing")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--db", metavar="FILE", help="a local catalog (default: $OVERLAPSCOPE_DB or the user data dir)")
    where.add_argument("--server", metavar="URL", help="a dashboard's API instead of a local catalog")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the verdict as JSON")
    shown.add_argument("--format", choices=("text", "markdown"), default="text",
                       help="text (default) or markdown: a table for a CI job's summary "
                            "(e.g. >> $GITHUB_STEP_SUMMARY)")
    p.add_argument("--junit", metavar="FILE", help="also write the verdict as JUnit XML (one test case)")
    p.set_defaults(func=run_check, error_status=2)  # 1 means a regression: every other failure is 2


def _local(args) -> dict:
    from overlapscope.analyzer import api

    con = open_catalog(args.db, read_only=True)
    try:
        run_id = api.resolve_run(con, run_ref(args))
        return gate.check(con, run_id, args.baseline, args.metric, args.max_regression_pct, strict=args.strict)
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
    params = [("baseline", str(args.baseline)), ("metric", args.metric),
              ("max_regression_pct", repr(args.max_regression_pct))] + ([("strict", "1")] if args.strict else [])
    verdict = server.get(CHECK.format(run_id=run_id), params, Verdict)
    if verdict["metric"] != args.metric:  # a server that ignored the question answered another one
        raise UsageError(f"{server.url}: asked for {args.metric}, the server answered for {verdict['metric']}")
    verdict["status"] = verdict.get("status") or ("regression" if verdict["regressed"] else "pass")
    return verdict


def _num(value, unit: str) -> str:
    return "-" if value is None else f"{value:,.3f} {unit}".strip()


def _head(v: dict) -> str:
    return {"regression": "REGRESSION", "no_baseline": "PASS (no baseline yet)"}.get(v["status"], "PASS")


def describe(v: dict) -> str:
    """The verdict in a few lines of words."""
    unit = "%" if v["metric"].endswith("_pct") else "ms"
    run, base = v["run"], v["baseline"]
    way = "higher" if v["higher_is_better"] else "lower"
    if base is None:
        return (f"{_head(v)}: {v['metric']} of run {run['run_id']} ({run['name']}) is {_num(v['value'], unit)}; "
                f"it is the first run named {run['name']!r}, so there is nothing to hold it against yet "
                "(the next run of this name is held against it; --strict fails here instead)")
    lines = [f"{_head(v)}: {v['metric']} of run {run['run_id']} ({run['name']}) "
             f"is {_num(v['value'], unit)} against {_num(v['baseline_value'], unit)} in baseline run "
             f"{base['run_id']}: {gate.change_words(v['worse_pct'])} (bound {v['max_regression_pct']:g} % worse; "
             f"{way} is better)"]
    others = [m for m in v["metrics"] if m["metric"] != v["metric"] and m["verdict"] == "worse"]
    if others:
        lines.append("also worse: " + ", ".join(f"{m['metric']} {gate.change_words(m['worse_pct'])}" for m in others))
    changed = [g for g in v["groups"] if g["change_ms"]]
    if changed:
        lines.append("changed most (mean exposed ms per collective, baseline -> run):")
        lines += [f"  {g['label']}: {_num(g['baseline_exposed_ms'], '')} -> {_num(g['exposed_ms'], '')} "
                  f"({g['change_ms']:+,.3f} ms)" for g in changed]
    lines += [f"warning: {w}" for w in v["warnings"]]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(v: dict) -> str:
    """The verdict as Markdown: a heading, the metrics as a table, what changed most."""
    run, base = v["run"], v["baseline"]
    icon = {"regression": "❌", "no_baseline": "⚪"}.get(v["status"], "✅")
    lines = [f"### {icon} overlapscope check: {_head(v)}", ""]
    if base is None:
        lines.append(_cell(describe(v)))
        return "\n".join(lines) + "\n"
    lines += [f"Run {run['run_id']} (`{_cell(run['name'])}`) against baseline run {base['run_id']}, held on "
              f"**{v['metric']}** (bound {v['max_regression_pct']:g} % worse).", "",
              f"| metric | run {run['run_id']} | baseline {base['run_id']} | change |", "|---|---:|---:|---|"]
    for m in v["metrics"]:
        unit = "%" if m["metric"].endswith("_pct") else "ms"
        name = f"**{m['metric']}**" if m["metric"] == v["metric"] else m["metric"]
        lines.append(f"| {name} | {_num(m.get('value'), unit)} | {_num(m.get('baseline_value'), unit)} | "
                     f"{gate.change_words(m['worse_pct']) if m['verdict'] else '-'} |")
    changed = [g for g in v["groups"] if g["change_ms"]]
    if changed:
        lines += ["", "| changed most (mean exposed ms per collective) | baseline | run | change |", "|---|---:|---:|---:|"]
        lines += [f"| {_cell(g['label'])} | {_num(g['baseline_exposed_ms'], '')} | {_num(g['exposed_ms'], '')} | "
                  f"{g['change_ms']:+,.3f} ms |" for g in changed]
    lines += [""] + [f"> warning: {_cell(w)}" for w in v["warnings"]] if v["warnings"] else []
    return "\n".join(lines) + "\n"


def junit(v: dict) -> bytes:
    """The verdict as JUnit XML: one test case, failed on a regression, skipped without a baseline."""
    import xml.etree.ElementTree as ET

    run = v["run"]
    regressed, skipped = v["status"] == "regression", v["status"] == "no_baseline"
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="overlapscope check", tests="1",
                          failures=str(int(regressed)), errors="0", skipped=str(int(skipped)))
    case = ET.SubElement(suite, "testcase", classname=f"overlapscope.check.{v['metric']}",
                         name=f"{run['name']} (run {run['run_id']})")
    text = describe(v)
    if regressed:
        ET.SubElement(case, "failure", message=text.splitlines()[0], type="regression").text = text
    elif skipped:
        ET.SubElement(case, "skipped", message="no baseline yet: the first run of its name")
    ET.SubElement(case, "system-out").text = text
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="utf-8") + b"\n"


def run_check(args) -> int:
    verdict = _remote(args) if args.server else _local(args)
    status = 1 if verdict["regressed"] else 0
    if args.junit:
        try:
            with open(args.junit, "wb") as f:
                f.write(junit(verdict))
        except OSError as err:
            raise UsageError(f"{args.junit}: cannot write the JUnit report: {err.strerror or err}") from None
    try:
        show = (lambda v: print(markdown(v), end="")) if args.format == "markdown" else (lambda v: print(describe(v)))
        emit(verdict, args.json, show)
    except BrokenPipeError:  # a reader that stopped early does not turn a regression into a pass
        _quiet_stdout()
    return status


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush does not fail again."""
    import os
    import sys

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
