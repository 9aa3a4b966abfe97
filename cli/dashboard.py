"""``overlapscope dashboard``: start the Streamlit dashboard on the catalog.

The catalog path and limits reach the app through environment variables
(``dashboard/settings.py`` reads them); Streamlit runs as a child process.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from overlapscope.analyzer.store import catalog
from overlapscope.analyzer.errors import UsageError

DEFAULT_PORT = 8501


def app_path() -> Path:
    """The dashboard's entry script (``dashboard/app.py`` of the installed package)."""
    spec = importlib.util.find_spec("overlapscope.dashboard")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the dashboard package is not installed (pip install overlapscope)")
    return Path(list(spec.submodule_search_locations)[0]) / "app.py"


def add_parser(sub) -> None:
    p = sub.add_parser("dashboard", help="start the Streamlit dashboard on the catalog",
                       description="Start the dashboard (Streamlit) on the catalog. On an empty catalog the "
                                   "sample runs are loaded first.")
    p.add_argument("--db", metavar="FILE", help="the catalog file (default: $OVERLAPSCOPE_DB or the user data dir)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port to serve on (default {DEFAULT_PORT})")
    p.add_argument("--address", default=None, metavar="HOST",
                   help="the address to listen on (default: Streamlit's, all interfaces)")
    p.add_argument("--max-upload-mb", type=int, default=None, metavar="MB",
                   help="largest upload in MiB (default: $OVERLAPSCOPE_MAX_UPLOAD_MB or 2048)")
    p.add_argument("--no-samples", action="store_true", help="do not load the sample runs into an empty catalog")
    p.set_defaults(func=run_dashboard)


def streamlit_command(args, environ=None) -> tuple[list[str], dict]:
    """The ``streamlit run`` command line and environment for ``args``."""
    from overlapscope.dashboard.settings import ENV_DB, ENV_MAX_UPLOAD_MB, ENV_NO_SAMPLES

    env = dict(os.environ if environ is None else environ)
    db = Path(args.db).expanduser() if args.db else catalog.default_path()
    env[ENV_DB] = str(db.resolve())
    if args.max_upload_mb is not None:
        if args.max_upload_mb <= 0:
            raise UsageError(f"--max-upload-mb must be positive, got {args.max_upload_mb}")
        env[ENV_MAX_UPLOAD_MB] = str(args.max_upload_mb)
    if args.no_samples:
        env[ENV_NO_SAMPLES] = "1"
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be 1-65535, got {args.port}")
    upload_mb = settings(env).max_upload_mb
    argv = [sys.executable, "-m", "streamlit", "run", str(app_path()),
            "--server.port", str(args.port),
            "--server.headless", "true",
            # Streamlit's own per-file limit; the app enforces the total
            "--server.maxUploadSize", str(upload_mb),
            "--browser.gatherUsageStats", "false",
            "--server.fileWatcherType", "none",  # no polling of the source files: this is not a dev server
            "--client.toolbarMode", "viewer"]  # no "Deploy" button: this is a local tool
    if args.address:
        argv += ["--server.address", args.address]
    return argv, env


def settings(env: dict):
    """The dashboard's settings as the app will read them from ``env``; a bad one fails in one line."""
    from overlapscope.dashboard.settings import from_env

    try:
        return from_env(env)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _prepare(chosen) -> None:
    """Create the catalog and load the samples now, so the first page opens at once."""
    import duckdb

    try:
        con = catalog.open_catalog(chosen.db)
    except (duckdb.IOException, UsageError) as err:  # another process holds it: the app retries on each page
        print(f"overlapscope: note: {err}", file=sys.stderr)
        return
    try:
        loaded = catalog.ensure_samples(con, chosen.samples_dir) if chosen.load_samples else []
    finally:
        con.close()
    if loaded:
        print(f"loaded {len(loaded)} sample run(s) into {chosen.db}", file=sys.stderr)


def run_dashboard(args) -> int:
    argv, env = streamlit_command(args)
    chosen = settings(env)
    _prepare(chosen)
    print(f"overlapscope dashboard on http://{args.address or 'localhost'}:{args.port} "
          f"(catalog {chosen.db}); Ctrl+C stops it", file=sys.stderr)
    proc = subprocess.Popen(argv, env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:  # Streamlit got the same Ctrl+C and shuts down
        return 0 if proc.wait() in (0, -2) else 130
