"""``overlapscope dashboard``: serve the dashboard and its HTTP API on the catalog.

The pages and the API run in this process (``server/asgi.py``): stopping
it (Ctrl+C, SIGTERM) stops everything it started. The catalog path and limits
reach the pages through environment variables (``server/settings.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer import api
from overlapscope.cli.common import open_catalog

DEFAULT_PORT = 8501
DEFAULT_ADDRESS = "127.0.0.1"


def add_parser(sub) -> None:
    p = sub.add_parser("dashboard", help="serve the dashboard and its HTTP API on the catalog",
                       description="Serve the dashboard (Streamlit) and the HTTP API (/api/v1) on the catalog, "
                                   "in one process on one port. On an empty catalog the sample runs are loaded "
                                   "first.")
    p.add_argument("--db", metavar="FILE", help="the catalog file (default: $OVERLAPSCOPE_DB or the user data dir)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port to serve on (default {DEFAULT_PORT})")
    p.add_argument("--address", default=None, metavar="HOST",
                   help=f"the address to listen on (default {DEFAULT_ADDRESS}: this machine only; "
                        "0.0.0.0 or :: for every interface)")
    p.add_argument("--max-upload-mb", type=int, default=None, metavar="MB",
                   help="largest upload or push in MiB (default: $OVERLAPSCOPE_MAX_UPLOAD_MB or 2048)")
    p.add_argument("--api-tokens", metavar="FILE", default=None,
                   help="the file of 'TOKEN NAME' lines whose tokens may push runs (default: "
                        "$OVERLAPSCOPE_API_TOKENS; none: the API refuses writes)")
    p.add_argument("--no-samples", action="store_true", help="do not load the sample runs into an empty catalog")
    p.set_defaults(func=run_dashboard)


def server_environment(args, environ=None) -> dict:
    """The environment the pages read their settings from (``server/settings.py``)."""
    from overlapscope.server.settings import ENV_API_TOKENS, ENV_DB, ENV_MAX_UPLOAD_MB, ENV_NO_SAMPLES

    env = dict(os.environ if environ is None else environ)
    db = Path(args.db).expanduser() if args.db else api.catalog_path()
    env[ENV_DB] = str(db.resolve())
    if args.max_upload_mb is not None:
        if args.max_upload_mb <= 0:
            raise UsageError(f"--max-upload-mb must be positive, got {args.max_upload_mb}")
        env[ENV_MAX_UPLOAD_MB] = str(args.max_upload_mb)
    if args.no_samples:
        env[ENV_NO_SAMPLES] = "1"
    if args.api_tokens:
        env[ENV_API_TOKENS] = str(Path(args.api_tokens).expanduser().resolve())
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be 1-65535, got {args.port}")
    return env


def settings(env: dict):
    """The dashboard's settings as the pages will read them from ``env``; a bad one fails in one line."""
    from overlapscope.server import auth
    from overlapscope.server.settings import from_env

    try:
        chosen = from_env(env)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if chosen.api_tokens is not None:
        auth.load(chosen.api_tokens)  # a bad token file stops the start, naming the line
    return chosen


def _prepare(chosen) -> None:
    """Create the catalog; into an empty one, load the samples in the background while the
    server already answers (dashboard/samples.py): the first page opens at once."""
    from overlapscope.analyzer.errors import CatalogBusy
    from overlapscope.dashboard import samples

    try:
        con = open_catalog(chosen.db)
    except CatalogBusy as err:  # the pages and the API wait for it on each use
        print(f"overlapscope: note: {err}", file=sys.stderr)
        return
    con.close()
    if chosen.load_samples and samples.start(chosen.db, chosen.samples_dir) is not None:
        print(f"loading {samples.PROGRESS.total} sample runs into {chosen.db} while the dashboard starts",
              file=sys.stderr, flush=True)
    # the pages never load them a second time
    os.environ["OVERLAPSCOPE_NO_SAMPLES"] = "1"


def run_dashboard(args) -> int:
    from overlapscope.contract.api import PREFIX
    from overlapscope.server import asgi as server

    env = server_environment(args)
    chosen = settings(env)
    address = args.address or DEFAULT_ADDRESS
    os.environ.update(env)  # the pages run in this process and read their settings from it
    server.preload()  # before the sample loader's thread and the pages' threads start
    _prepare(chosen)
    url = f"http://{f'[{address}]' if ':' in address else address}:{args.port}"
    writes = ("pushes need a token from " + str(chosen.api_tokens)) if chosen.api_tokens else \
        "no API tokens: the API refuses writes"
    print(f"overlapscope dashboard on {url} (catalog {chosen.db}); API at {url}{PREFIX}, {writes}; "
          "Ctrl+C stops it", file=sys.stderr, flush=True)
    if not chosen.api_tokens and not server.is_loopback(address):
        print(f"overlapscope: warning: listening on {address} without API tokens: anyone who reaches it can read "
              "the catalog; the Upload page is off (give --api-tokens FILE)", file=sys.stderr, flush=True)
    return server.serve(chosen, args.port, address)
