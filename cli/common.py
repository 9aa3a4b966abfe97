"""Arguments shared by the analysis commands: trace paths, or a run from the catalog."""

from __future__ import annotations

from overlapscope.analyzer.errors import UsageError


def add_source_arguments(p) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH", help="trace files, directories of per-rank files, or .zip")
    p.add_argument("--run", metavar="NAME|ID", help="a run stored in the catalog instead of paths")
    p.add_argument("--db", metavar="FILE", help="the catalog file (default: $OVERLAPSCOPE_DB or the user data dir)")
    p.add_argument("--workers", type=int, default=None, help="parallel decode processes (default: CPUs)")


def stored_run(args):
    """(connection, run id) for ``--run``, or None when paths were given."""
    if args.run and args.paths:
        raise UsageError("give trace paths or --run, not both")
    if not args.run:
        if not args.paths:
            raise UsageError("give trace paths (files, directories, .zip) or --run NAME")
        return None
    from overlapscope.analyzer.store import catalog

    con = catalog.open_catalog(args.db, read_only=True)
    return con, catalog.resolve_run(con, args.run)


def emit(result: dict, as_json: bool, print_text) -> int:
    """Print a result as JSON (the contract) or as the command's readable text."""
    import json
    import sys

    if as_json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_text(result)
    return 0
