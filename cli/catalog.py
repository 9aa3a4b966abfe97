"""``overlapscope ingest`` and ``overlapscope history``: runs in the catalog."""

from __future__ import annotations

from overlapscope.analyzer import api, runs
from overlapscope.contract.figures import HISTORY_FIGURES
from overlapscope.analyzer.errors import UsageError
from overlapscope.cli.common import add_engine_arguments, describe, emit, note, open_catalog, progress
from overlapscope.cli.tables import clean, table

HISTORY_COLUMNS = [  # the metrics a team tracks before the run's facts: narrow terminals drop the facts
    ("run_id", "id"), ("name", "name"), ("created", "created (UTC)"), ("exposed_comm_ms", "exposed_ms"),
    ("overlap_pct", "overlap_%"), ("step_ms", "step_ms"), ("commit", "commit"), ("ranks", "ranks"),
    ("parallelism", "parallelism"), ("pushed_by", "pushed by"), ("pruned", "pruned"),
]


def parse_tags(pairs: list[str]) -> dict:
    tags = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--tag wants KEY=VALUE, got {pair!r}")
        tags[key] = value
    return tags


def add_parser(sub) -> None:
    p = sub.add_parser("ingest", help="store a run in the catalog",
                       description="Store per-rank traces as one run in the catalog (all of it or nothing). When "
                                   "another process holds the catalog, wait for it (up to "
                                   "$OVERLAPSCOPE_CATALOG_WAIT_S seconds, default 120).")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--run", required=True, metavar="NAME", help="the run's name (runs may share a name)")
    p.add_argument("--tag", action="append", metavar="KEY=VALUE", help="a tag (repeatable)")
    p.add_argument("--db", metavar="FILE", help="the catalog file (default: $OVERLAPSCOPE_DB or the user data dir)")
    p.add_argument("--workers", type=int, default=None)
    add_engine_arguments(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_ingest)

    h = sub.add_parser("history", help="runs over time with their headline metrics")
    h.add_argument("--run", metavar="NAME", help="only runs of this name")
    h.add_argument("--db", metavar="FILE")
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=run_history)


def run_ingest(args) -> int:
    opened = []

    def open_con():  # after the decode workers have forked
        note(f"storing run {clean(name)}", quiet=args.json)
        opened.append(open_catalog(args.db))
        return opened[0]

    name, tags = api.check_run_name(args.run), api.check_tags(parse_tags(args.tag))  # before any decoding
    run_id = runs.ingest(None, args.paths, name, tags, workers=args.workers, open_con=open_con,
                         path=api.catalog_path(args.db), engine=args.engine, ray_address=args.ray_address,
                         on_decoded=None if args.json else progress("decoding rank"))
    row = next(r for r in api.runs(opened[0], name) if r["run_id"] == run_id)
    # the run object, as analyze prints it: its warnings (missing ranks, events left out) go to stderr
    result = {"run_id": run_id, "name": name, **{k: row[k] for k in HISTORY_FIGURES},
              "headline": row["headline"], "run": api.describe_run(opened[0], run_id)}
    return emit(result, args.json, lambda r: print(f"stored run {run_id} ({clean(name)}): {describe(r['headline'])}"))


def _commit(tags: dict) -> str | None:
    """A run's commit tag (``commit=`` or ``sha=``), cut to 12 characters as git prints it."""
    value = tags.get("commit") or tags.get("sha")
    return str(value)[:12] if value else None


def run_history(args) -> int:
    con = open_catalog(args.db, read_only=True) if args.db or api.catalog_path().exists() else None
    rows = api.runs(con, args.run) if con is not None else []
    shown = [{**r, "pruned": str(r["pruned_at"])[:10] if r["pruned_at"] else None,
              "created": str(r["created_at"] or "")[:16] or None,  # to the minute, not the microsecond
              "commit": _commit(r.get("tags") or {})} for r in rows]
    return emit({"runs": rows}, args.json,
                lambda r: print(table(shown, HISTORY_COLUMNS) if shown else "no runs in the catalog"))
