"""Arguments shared by the analysis commands: trace paths, or a run from the catalog."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from overlapscope.analyzer.errors import UsageError
from overlapscope.cli.tables import clean

ENV_WAIT_S = "OVERLAPSCOPE_CATALOG_WAIT_S"
DEFAULT_WAIT_S = 120.0  # a CI job should not fail over a catalog another process holds for seconds


def catalog_wait_s() -> float:
    """How long a command waits for a catalog another process holds (``$OVERLAPSCOPE_CATALOG_WAIT_S``)."""
    raw = os.environ.get(ENV_WAIT_S, "")
    try:
        wait_s = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        raise UsageError(f"${ENV_WAIT_S} must be a number of seconds, got {raw!r}") from None
    if wait_s < 0:
        raise UsageError(f"${ENV_WAIT_S} must be 0 or more seconds, got {raw!r}")
    return wait_s


def open_catalog(db, read_only: bool = False):
    """The catalog for a command: when another process holds it, say so once and wait (bounded)."""
    from overlapscope.analyzer import runs

    return runs.open_catalog(db, read_only=read_only, wait_s=catalog_wait_s(),
                             on_wait=lambda message: print(f"overlapscope: {message}", file=sys.stderr,
                                                           flush=True))


def add_engine_arguments(p) -> None:
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="where the per-rank work runs: local processes (default) or Ray tasks (pip install "
                        "'overlapscope[ray]'), one per rank")
    p.add_argument("--ray-address", metavar="ADDR", help="the Ray cluster to use (default: start a local Ray)")


def add_source_arguments(p) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH", help="trace files, directories of per-rank files, or .zip "
                   "(- reads one from standard input)")
    p.add_argument("--run", metavar="NAME|#ID", help="a run stored in the catalog instead of paths: the newest run "
                   "of that name, or #ID for a run id (digits that no run is named are an id)")
    p.add_argument("--run-id", type=int, metavar="ID", help="a stored run by its id")
    p.add_argument("--db", metavar="FILE", help="the catalog file (default: $OVERLAPSCOPE_DB or the user data dir)")
    p.add_argument("--workers", type=int, default=None, help="parallel decode processes (default: CPUs)")
    add_engine_arguments(p)
    add_display_arguments(p)


def add_display_arguments(p) -> None:
    p.add_argument("--wide", action="store_true",
                   help="print every column of a table (default: fit the terminal, else 100 columns)")
    p.add_argument("--top", type=int, metavar="N", default=None,
                   help="rows of a long table (default 20, the ones that matter most; 0: all)")


def progress(label: str):
    """A callback ``(done, total)`` drawing one line on stderr, only on a terminal."""
    if not sys.stderr.isatty():
        return None

    def report(done: int, total: int) -> None:
        print(f"\r{label} {done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)
    return report


def note(line: str, quiet: bool = False) -> None:
    """One line of progress on stderr (a stage that takes a while), only on a terminal; none when ``quiet``."""
    if not quiet and sys.stderr.isatty():
        print(line, file=sys.stderr, flush=True)


def stored_run(args):
    """(connection, run id) for ``--run``, or None when paths were given."""
    ref = run_ref(args)
    if ref is not None and args.paths:
        raise UsageError("give trace paths or --run, not both")
    if ref is None:
        if not args.paths:
            raise UsageError("give trace paths (files, directories, .zip) or --run NAME")
        return None
    from overlapscope.analyzer import api

    con = open_catalog(args.db, read_only=True)
    try:
        return con, api.resolve_run(con, ref)
    except BaseException:
        con.close()
        raise


def run_ref(args) -> str | int | None:
    """What ``--run NAME|#ID`` or ``--run-id ID`` names (an int is an id); None for neither."""
    if args.run is not None and args.run_id is not None:
        raise UsageError("give --run or --run-id, not both")
    return args.run_id if args.run_id is not None else args.run


def to_json(result) -> bytes:
    """The JSON of a result (msgspec: structs, datetimes as ISO 8601, NaN as null), indented."""
    import msgspec

    return msgspec.json.format(msgspec.json.encode(result), indent=2)


def emit_stored(pieces: Iterable[bytes] | None) -> bool:
    """Print indented JSON as it was stored (``api.stored_json``'s pieces); False for None."""
    import sys

    if pieces is None:
        return False
    sys.stdout.flush()
    for piece in pieces:
        sys.stdout.buffer.write(piece)
    sys.stdout.buffer.write(b"\n")
    sys.stdout.flush()
    return True


def emit(result: dict, as_json: bool, print_text) -> int:
    """Print a result as JSON (the contract) or as the command's readable text."""
    import sys

    if as_json:  # warnings are in the JSON (run.warnings)
        sys.stdout.flush()
        sys.stdout.buffer.write(to_json(result) + b"\n")
        sys.stdout.flush()
    else:
        for line in (result.get("run") or {}).get("warnings") or []:
            print(f"overlapscope: warning: {clean(line)}", file=sys.stderr)
        print_text(result)
    return 0


def _fmt(value, unit: str) -> str:
    return "-" if value is None else f"{value:,.2f} {unit}"


def describe(head: dict) -> str:
    """A headline in one line of words."""
    return (f"step {_fmt(head['step_ms'], 'ms')}, exposed comm {_fmt(head['exposed_comm_ms'], 'ms')} "
            f"({_fmt(head['exposed_pct'], '%')} of the step), overlap {_fmt(head['overlap_pct'], '%')}; "
            f"{head['aggregation']} (rank {head['slowest_rank']})")

