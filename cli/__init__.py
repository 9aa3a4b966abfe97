"""The ``overlapscope`` command: a thin layer over the analyzer's functions.

Each subcommand lives in its own module and exposes ``add_parser(subparsers)``;
the parser's ``func`` takes the parsed arguments and returns the exit status.
"""

from __future__ import annotations

import argparse
import sys

from overlapscope.analyzer.errors import InputError, UsageError
from overlapscope.cli.tables import clean


def _build_parser() -> argparse.ArgumentParser:
    from overlapscope.cli import (analyze as cli_analyze, buckets as cli_buckets, catalog as cli_catalog,
                                  check as cli_check, dashboard as cli_dashboard, diagnose as cli_diagnose, export as cli_export,
                                  model as cli_model, push as cli_push, reduce as cli_reduce,
                                  retention as cli_retention, whatif as cli_whatif)

    parser = argparse.ArgumentParser(
        prog="overlapscope",
        description="How much of your data-parallel communication is exposed, where, and why.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in (cli_analyze, cli_buckets, cli_diagnose, cli_whatif, cli_model, cli_catalog, cli_check,
                   cli_retention, cli_push, cli_reduce, cli_export, cli_dashboard):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _build_parser()
    args = parser.parse_args(argv)
    from overlapscope.cli import tables

    tables.configure(getattr(args, "wide", False), getattr(args, "top", None))
    try:
        return int(args.func(args) or 0)
    except (InputError, UsageError) as err:
        if args.debug:
            raise
        print(f"overlapscope: error: {clean(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # an unexpected failure still gets one line without --debug
        if args.debug:
            raise
        print(f"overlapscope: internal error: {type(err).__name__}: {clean(err)} (rerun with --debug)",
              file=sys.stderr)
        # 1 by default; a command whose 1 means something else (check: a regression) says which
        return getattr(args, "error_status", 1)

