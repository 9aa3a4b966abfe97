"""The dashboard's server: Streamlit's pages and the HTTP API in one process, on one port.

``serve`` builds Streamlit's ASGI app (``st.App``) on ``app.py`` with the API's
routes (``api.py``) beside the pages and runs it with uvicorn in this process:
no child process, so SIGTERM or SIGINT stops everything it started. uvicorn
stops accepting, gives open requests ``GRACEFUL_S`` seconds, and the lifespan
then stops the catalog's writer and closes the file.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import socket
import sys
from contextlib import asynccontextmanager
from pathlib import Path

from overlapscope.analyzer import runs
from overlapscope.analyzer.runs import apart
from overlapscope.analyzer.errors import UsageError
from overlapscope.server import auth
from overlapscope.server.settings import Settings

# The server keeps the catalog open this long after its last use (reads then cost a
# cursor, not an open); after that another process (an ingest) can take the file.
KEEP_OPEN_S = 2.0
GRACEFUL_S = 2  # seconds open requests get after SIGTERM; the whole stop stays under 5 s


def app_path() -> Path:
    """The dashboard's entry script (``dashboard/app.py`` of the installed package)."""
    spec = importlib.util.find_spec("overlapscope.dashboard")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the dashboard package is not installed (pip install overlapscope)")
    return Path(list(spec.submodule_search_locations)[0]) / "app.py"


def is_loopback(address: str) -> bool:
    """Whether ``address`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def streamlit_options(settings: Settings, port: int, address: str) -> dict:
    """Streamlit's configuration for this server."""
    return {
        "server.port": port,
        "server.address": address,
        "server.headless": True,
        # Streamlit's own per-file cap; spool.UploadSpool caps the total while it arrives
        "server.maxUploadSize": settings.max_upload_mb,
        "browser.gatherUsageStats": False,
        "server.fileWatcherType": "none",  # no polling of the source files: this is not a dev server
        "client.toolbarMode": "viewer",  # no "Deploy" button
        # an unexpected error shows visitors a generic line; its type, message and traceback
        # (server paths) go to the server's log only
        "client.showErrorDetails": "none",
    }


def listen(address: str, port: int) -> socket.socket:
    """The listening socket, or one line saying why there is none."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        return socket.create_server((address.strip("[]"), port), family=family, backlog=2048)
    except OSError as err:
        raise UsageError(f"cannot listen on {address}:{port}: {err.strerror or err}") from None


def build(settings: Settings):
    """Streamlit's ASGI app on ``app.py`` with the API's routes, its uploads spooled to disk
    (``spool.py``), and the API object."""
    import streamlit as st

    from overlapscope.server.api import Api
    from overlapscope.server.spool import UploadSpool

    runs.sweep_leftovers(settings.db)  # what a killed server, load or push left behind
    apart.start()  # the fork server of the pushes' and uploads' decodes, its imports done now
    api = Api(settings)
    shared = runs.shared(settings.db, keep_open_s=KEEP_OPEN_S)
    spool = None

    @asynccontextmanager
    async def lifespan(_app):
        try:
            yield None
        finally:
            api.close()
            shared.stop(timeout_s=1.5)
            spool.close()

    def needs_grant() -> bool:  # read as the Upload page reads it: a token file that went bad refuses too
        try:
            return auth.current(settings.api_tokens).configured
        except UsageError:
            return True

    spool = UploadSpool(st.App(str(app_path()), routes=api.routes(), lifespan=lifespan), settings.max_upload_bytes,
                        needs_grant=needs_grant)
    return spool, api


def preload() -> None:
    """Import the pages' data-frame libraries once, here, before any script thread runs.

    Streamlit runs each page in a thread of its own, and a page left mid-import keeps
    importing while the next one starts. Altair (through narwhals) looks pandas up in
    ``sys.modules`` without importing it, so a thread that draws a chart while another
    is inside pandas' first import sees a half-initialised module ("partially
    initialized module 'pandas' has no attribute 'Timestamp'", seen in CI). Imported
    before the threads start, every thread finds them whole.
    """
    import altair  # noqa: F401
    import pandas  # noqa: F401
    import polars  # noqa: F401
    import pyarrow  # noqa: F401


def _end_now(status: int) -> None:
    """End the process at once, as SIGTERM's default action does after the same stop. A normal
    exit joins every worker thread, so a push's decode cut short by the stop (it runs in a
    thread and cannot be interrupted) would hold the exit for as long as it takes, minutes for
    a large run; its staging folder is swept by the next writer."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def serve(settings: Settings, port: int, address: str) -> int:
    """Run the dashboard and its API until SIGTERM or SIGINT; the exit status."""
    import uvicorn
    from streamlit import config as st_config
    from streamlit.web import bootstrap
    from streamlit.web.server.starlette import starlette_server

    sock = listen(address, port)
    options = streamlit_options(settings, port, address)
    bootstrap.load_config_options(options)
    st_config._server_mode = "starlette-app-direct"
    app, _api = build(settings)
    kwargs = starlette_server._get_uvicorn_config_kwargs()  # Streamlit's websocket and TLS settings
    kwargs.update(log_level="warning", access_log=False, timeout_graceful_shutdown=GRACEFUL_S)
    server = uvicorn.Server(uvicorn.Config(app, host=address, port=port, **kwargs))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stopped on SIGINT (requests, lifespan: all done) and raised it again
        _end_now(130)
    finally:
        sock.close()
    if not server.started:
        print("overlapscope: error: the dashboard did not start (see above)", file=sys.stderr)
        return 1
    return 0
