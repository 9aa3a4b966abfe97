"""``overlapscope prune`` and ``overlapscope delete``: bound the catalog's growth.

``prune`` drops old runs' raw events and keeps their headline, per-rank and
per-step figures, findings and history; ``delete`` removes a run whole. Both
then rewrite the file so the space goes back to the disk (``analyzer.runs``' ``prune`` and
``delete``, over ``analyzer/store/retention.py``).
"""

from __future__ import annotations

from overlapscope.analyzer import runs
from overlapscope.cli.common import emit, open_catalog


def add_parser(sub) -> None:
    p = sub.add_parser("prune", help="drop old runs' raw events, keep their headline, figures and findings",
                       description="Drop the raw events of old runs (events, tracks, collectives, flows, memory, "
                                   "annotation ranges); keep their headline, per-rank and per-step figures, "
                                   "per-bucket/unit figures, findings, stored analyses and history (every "
                                   "page but the Timeline). Then give the space back.")
    p.add_argument("--keep-last", type=int, metavar="N", help="keep the newest N runs of each name complete")
    p.add_argument("--run", metavar="NAME", help="only runs of this name")
    p.add_argument("--older-than", type=float, metavar="DAYS", help="only runs stored more than DAYS days ago")
    p.add_argument("--db", metavar="FILE", help="the catalog file (default: $OVERLAPSCOPE_DB or the user data dir)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_prune)

    d = sub.add_parser("delete", help="remove a run from the catalog", description="Remove a run and everything "
                       "stored with it, then give the space back.")
    d.add_argument("run_id", type=int, metavar="RUN_ID")
    d.add_argument("--db", metavar="FILE", help="the catalog file (default: $OVERLAPSCOPE_DB or the user data dir)")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=run_delete)


def run_prune(args) -> int:
    result = runs.prune(args.db, args.keep_last, args.run, args.older_than, open_con=open_catalog)
    return emit(result, args.json, lambda r: print(
        f"pruned {len(r['pruned'])} run(s){' (' + ', '.join(map(str, r['pruned'])) + ')' if r['pruned'] else ''}; "
        f"catalog {r['bytes_before'] / 1e6:,.1f} MB -> {r['bytes_after'] / 1e6:,.1f} MB"))


def run_delete(args) -> int:
    result = runs.delete(args.db, args.run_id, open_con=open_catalog)
    return emit(result, args.json, lambda r: print(
        f"deleted run {r['deleted']}; catalog {r['bytes_before'] / 1e6:,.1f} MB -> {r['bytes_after'] / 1e6:,.1f} MB"))
