"""The ``overlapscope`` command: a thin layer over the analyzer's functions.

Each subcommand lives in its own module and exposes ``add_parser(subparsers)``;
the parser's ``func`` takes the parsed arguments and returns the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys

# NumPy's OpenBLAS starts a thread per core at import that spins for about 50 ms of CPU
# (measured: import 153 against 97 ms of CPU). No command multiplies matrices; a one-rank
# analyze imports NumPy beside its scan, and that thread took the scan's core. Before
# anything imports NumPy; a user's own setting stands.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from overlapscope.analyzer.errors import InputError, UsageError  # noqa: E402
from overlapscope.cli.tables import clean  # noqa: E402


# Each subcommand and the module that adds its parser, in the order --help lists them.
COMMANDS = {
    "analyze": "analyze", "buckets": "buckets", "diagnose": "diagnose", "whatif": "whatif", "model": "model",
    "ingest": "catalog", "history": "catalog", "check": "check", "prune": "retention", "delete": "retention",
    "push": "push", "reduce-rank": "reduce", "export": "export", "dashboard": "dashboard", "capture": "capture",
}


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command's parser: every subcommand, or only ``command``'s when it names one (the
    other subcommands' modules are not imported: a command starts sooner)."""
    import importlib

    parser = argparse.ArgumentParser(
        prog="overlapscope",
        description="How much of your data-parallel communication is exposed, where, and why.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"overlapscope.cli.{name}").add_parser(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is no option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    own_process = argv is None  # the ``overlapscope`` command, not a caller in Python
    argv = sys.argv[1:] if argv is None else argv
    parser = _build_parser(_command(argv))
    args = parser.parse_args(argv)
    code = _run(args)
    if own_process and getattr(args, "fast_exit", False) and getattr(args, "engine", "local") == "local":
        _exit_now(code)
    return code


def _run(args) -> int:
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


def _exit_now(code: int) -> None:
    """End the process without tearing down its modules and in-memory stores (0.1 s of a
    0.9 s ``analyze``): for commands that write nothing (``fast_exit``), whose only state
    is an in-memory store or a catalog opened read-only. Exit handlers still run."""
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass
    os._exit(code)
