"""``overlapscope export PATH|--run NAME --perfetto OUT.json[.gz]``: the run for Perfetto.

One Chrome-trace JSON (analyzer/export/perfetto.py): every rank as one process on the
run's common clock, plus tracks of exposed comm, collectives (bucket or unit and
phase), step windows and the checklist's findings. Open it at https://ui.perfetto.dev
(Open trace file) or chrome://tracing; ``overlapscope analyze OUT.json.gz`` reads it back.
"""

from __future__ import annotations

from overlapscope.analyzer.api import export_perfetto, export_perfetto_run
from overlapscope.analyzer.errors import UsageError
from overlapscope.cli.common import add_source_arguments, progress, stored_run
from overlapscope.cli.tables import clean


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write the run as one trace for Perfetto / chrome://tracing",
                       description="Write every rank of the run on one clock, with exposed comm, collectives, "
                                   "steps and findings as extra tracks, as one Chrome-trace JSON.")
    add_source_arguments(p)
    p.add_argument("--perfetto", metavar="OUT.json[.gz]", help="the file to write")
    p.set_defaults(func=run)


def run(args) -> int:
    if not args.perfetto:
        raise UsageError("export: give --perfetto OUT.json or OUT.json.gz")
    stored = stored_run(args)
    on_rank = progress("export: rank")
    counts = (export_perfetto_run(*stored, args.perfetto, on_rank=on_rank) if stored
              else export_perfetto(args.paths, args.perfetto, workers=args.workers, engine=args.engine,
                                   ray_address=args.ray_address, on_rank=on_rank))
    print(f"wrote {clean(args.perfetto)}: {counts['ranks']} ranks, {counts['events']:,} events, "
          f"{counts['flows']:,} flow events, {counts['exposed_slices']:,} exposed-comm slices, {counts['collectives']:,} collectives, "
          f"{counts['findings']} findings; open it at https://ui.perfetto.dev")
    return 0
