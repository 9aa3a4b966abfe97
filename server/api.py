"""The HTTP API the dashboard's process serves beside its pages, under ``/api/v1``.

- ``GET  /api/v1/health``: the version, the catalog's run count, whether writes are on.
- ``POST /api/v1/runs?name=NAME&tag=K=V...``: the body is a run (a ``.zip`` of
  per-rank traces with or without ``manifest.json``, or one ``.json``/``.json.gz``);
  201 with ``{run_id, name, tags, pushed_by, headline}``; 400 for a bad run (nothing
  stored); 401 without a valid bearer token; 403 when no tokens are configured;
  413 over the upload limit. With an ``Idempotency-Key`` header, a push repeating a
  key that stored a run (same token) gets that run, 200 with the same object, and
  stores nothing (422 when its name or tags differ).
- ``GET /api/v1/runs[?name=NAME]``: the runs as ``history --json`` lists them.
- ``GET /api/v1/runs/{id}``: a run with its per-rank figures and findings.
- ``GET /api/v1/runs/{id}/check?baseline=previous|ID&metric=M&max_regression_pct=X``:
  the gate's verdict (``analyzer/gate.py``).
- ``GET /api/v1/runs/{id}/whatif?bucket-mb=5&sync=off&sweep=tokens=0.5x,2x...``: the
  what-if (``whatif --json``); parameters are the command line's flags without ``--``.
- ``GET /api/v1/runs/{id}/perfetto``: the run as one Chrome-trace JSON (gzip), the
  file ``export --perfetto`` writes, as a download.

A pushed body is spooled to a temporary file as it arrives (never held in
memory) and refused with 413 as soon as it passes the limit; the run is decoded
on a worker thread and stored by the catalog's single writer
(``analyzer/store/access.py``), so concurrent pushes queue and all land and
readers never see a half-stored run. Tokens never reach a log or a response.
Every route answers in JSON, an unexpected error (500) and a request cut short
by the server's stop (503) included: never uvicorn's plain-text 500.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from overlapscope.analyzer import api as library, gate, runs, tempdirs
from overlapscope.analyzer.ingest import limits, memory
from overlapscope.analyzer.runs import apart
from overlapscope.analyzer.errors import CatalogBusy, InputError, RunNotFound, UsageError
from overlapscope.server import audit, auth, uploads
from overlapscope.server.settings import Settings
from overlapscope.contract import api as c
from overlapscope.contract.api import PREFIX
from overlapscope.contract.names import MANIFEST_FILE

ZIP_MAGIC, GZIP_MAGIC = b"PK\x03\x04", b"\x1f\x8b"
READ_THREADS = 4
IDEMPOTENCY_HEADER = c.IDEMPOTENCY_HEADER.lower()  # starlette's headers: any case
MAX_KEY_CHARS = 200
RETRY_AFTER_S = "5"  # a client retrying after a 503 waits this long (Retry-After)


def _pattern(route: str) -> str:
    """A contract route as starlette matches it: under PREFIX, the run id an integer."""
    return PREFIX + route.replace("{run_id}", "{run_id:int}")


def version() -> str:
    from overlapscope.analyzer import version as installed

    return installed()


def _json(value, status: int = 200, headers: dict | None = None) -> Response:
    return Response(msgspec.json.encode(value), status_code=status, media_type="application/json", headers=headers)


def _busy(err: Exception) -> Response:
    """503 for a catalog another process holds; the file's path stays in the server's log."""
    _log(str(err))
    return _error(503, "the catalog is in use by another process on the server; try again in a moment")


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    return _json({"error": message}, status, headers)


def _log(message: str) -> None:
    print(f"overlapscope: {message}", file=sys.stderr, flush=True)


def _stopping(message: str) -> Response:
    return _error(503, f"the server is stopping: {message}", {"Retry-After": RETRY_AFTER_S, "Connection": "close"})


def in_json(route):
    """``route`` answering in JSON whatever happens: a request that uvicorn cancels when
    the server stops (after its grace period) gets a 503, an unexpected error a 500 with
    the traceback in the server's log, instead of uvicorn's plain-text 500."""

    @functools.wraps(route)
    async def answer(request: Request) -> Response:
        try:
            return await route(request)
        except asyncio.CancelledError:  # the stop cut it short: the response is this task's last act
            return _stopping("try again once it is back")
        except Exception as err:
            _log(f"{request.method} {request.url.path} failed:\n{traceback.format_exc()}")
            return _error(500, f"internal error ({type(err).__name__}): the server's log has the details")

    return answer


def idempotency_key(value: str | None) -> str | None:
    """The request's ``Idempotency-Key`` (None without one), or a ``UsageError``."""
    if value is None:
        return None
    key = value.strip()
    if not key or len(key) > MAX_KEY_CHARS or any(not 33 <= ord(ch) < 127 for ch in key):
        raise UsageError(f"the Idempotency-Key header is 1 to {MAX_KEY_CHARS} visible ASCII characters "
                         "(overlapscope push sends a UUID)")
    return key


def pushed(row: dict, status: int) -> Response:
    """A stored run as a push's answer (201 stored now, 200 stored by an earlier push with the key)."""
    return _json({"run_id": row["run_id"], "name": row["name"], "tags": row["tags"], "pushed_by": row["pushed_by"],
                  "headline": row["headline"]}, status)


def repeated(row: dict, name: str, tags: dict) -> Response:
    """The answer to a push whose key stored ``row`` before: that run, unless it asked for another."""
    if row["name"] != name or row["tags"] != tags:
        return _error(422, f"this Idempotency-Key stored run {row['run_id']} under another name or other tags; "
                           "a new push needs a new key")
    return pushed(row, 200)


def parse_tags(values: list[str]) -> dict:
    """``tag=K=V`` query parameters as an object; a bad one is a ``UsageError``."""
    tags = {}
    for pair in values:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"a tag is tag=KEY=VALUE, got {pair!r}")
        tags[key] = value
    return tags


def upload_name(given: str | None, head: bytes) -> str:
    """The spooled file's name: the client's (made safe) when it has a trace or zip suffix,
    else one that the content's first bytes call for."""
    name = uploads.safe_name(given) if given else ""
    if name.lower().endswith(uploads.ACCEPTED) and name != MANIFEST_FILE:
        return name
    stem = Path(name).stem if name else "upload"
    if head.startswith(ZIP_MAGIC):
        return f"{stem}.zip"
    return f"{stem}.json.gz" if head.startswith(GZIP_MAGIC) else f"{stem}.json"


class Api:
    """The routes over one catalog, with the threads that read, decode and spool for them."""

    def __init__(self, settings: Settings, decode_threads: int | None = None):
        self.settings = settings
        self.catalog = runs.shared(settings.db)
        self._reads = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="overlapscope-api-read")
        self._decodes = ThreadPoolExecutor(decode_threads or max(1, min(4, os.cpu_count() or 1)),
                                           thread_name_prefix="overlapscope-api-decode")

    def routes(self) -> list[Route]:
        return [
            Route(_pattern(c.HEALTH), in_json(self.health), methods=["GET"]),
            Route(_pattern(c.RUNS), in_json(self.list_runs), methods=["GET"]),
            Route(_pattern(c.RUNS), in_json(self.push), methods=["POST"]),
            Route(_pattern(c.RUN), in_json(self.get_run), methods=["GET"]),
            Route(_pattern(c.CHECK), in_json(self.check), methods=["GET"]),
            Route(_pattern(c.WHATIF), in_json(self.whatif), methods=["GET"]),
            Route(_pattern(c.PERFETTO), in_json(self.perfetto), methods=["GET"]),
        ]

    def close(self) -> None:
        self._reads.shutdown(wait=False, cancel_futures=True)
        self._decodes.shutdown(wait=False, cancel_futures=True)

    # --- reads -------------------------------------------------------------------------

    def _read_now(self, work):
        with self.catalog.read() as con:
            return work(con)

    async def _read(self, work) -> Response:
        """``work(cursor)`` on a read thread, as JSON; catalog and usage errors as one line."""
        try:
            value = await asyncio.wrap_future(self._reads.submit(self._read_now, work))
        except RunNotFound as err:
            return _error(404, str(err))
        except CatalogBusy as err:
            return _busy(err)
        except UsageError as err:
            return _error(400, str(err))
        return _json(value)

    async def health(self, request: Request) -> Response:
        try:
            runs = await asyncio.wrap_future(self._reads.submit(
                self._read_now, lambda con: library.run_count(con)))
        except CatalogBusy as err:
            return _busy(err)
        return _json({"version": version(), "runs": runs, "writes": self._tokens().configured,
                      "max_upload_bytes": self.settings.max_upload_bytes})

    async def list_runs(self, request: Request) -> Response:
        name = request.query_params.get("name") or None
        return await self._read(lambda con: {"runs": library.runs(con, name)})

    async def get_run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        return await self._read(lambda con: library.run_detail(con, run_id))

    async def check(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        params = request.query_params
        try:
            metric = gate.check_metric(params.get("metric") or gate.DEFAULT_METRIC)
            raw = params.get("max_regression_pct")
            max_pct = gate.check_bound(raw) if raw not in (None, "") else gate.DEFAULT_MAX_REGRESSION_PCT
        except UsageError as err:
            return _error(400, str(err))
        baseline = params.get("baseline") or "previous"
        strict = (params.get("strict") or "").lower() in ("1", "true", "yes")
        return await self._read(lambda con: gate.check(con, run_id, baseline, metric, max_pct, strict))

    async def whatif(self, request: Request) -> Response:
        from overlapscope.analyzer.predict import changes as whatif_changes

        run_id = request.path_params["run_id"]
        flags = {k: v for k, v in request.query_params.items() if k != "sweep"}
        try:
            unknown = sorted(set(flags) - set(whatif_changes.READERS))
            if unknown:
                raise UsageError(f"unknown what-if parameter {unknown[0]!r}: one of {', '.join(whatif_changes.READERS)}")
            if "sync" in flags:
                flags["sync"] = whatif_changes.parse_switch(flags["sync"], "sync")
            base = whatif_changes.read(flags)
            spec = request.query_params.get("sweep")
            sweep = whatif_changes.sweep(spec, base) if spec else None
        except UsageError as err:
            return _error(400, str(err))
        return await self._read(lambda con: library.whatif_run(con, run_id, base, sweep))

    async def perfetto(self, request: Request) -> Response:
        from starlette.background import BackgroundTask
        from starlette.responses import FileResponse


        run_id = request.path_params["run_id"]
        folder = tempdirs.make("export")
        out = os.path.join(folder, f"run-{run_id}.perfetto.json.gz")
        cleanup = BackgroundTask(tempdirs.remove, folder)
        response = await self._read(lambda con: library.export_perfetto_run(con, run_id, out))
        if response.status_code != 200:
            tempdirs.remove(folder)
            return response
        return FileResponse(out, media_type="application/gzip", filename=os.path.basename(out), background=cleanup)

    # --- the one write: a pushed run ------------------------------------------------------

    def _tokens(self) -> auth.Tokens:
        try:
            return auth.current(self.settings.api_tokens)
        except UsageError as err:  # the file went bad while serving: refuse writes, say why in the log
            _log(f"API writes refused: {err}")
            return auth.NONE

    def _who(self, request: Request) -> tuple[str | None, Response | None]:
        tokens = self._tokens()
        if not tokens.configured:
            return None, _error(403, "this server accepts no pushes: it was started without API tokens "
                                     "(overlapscope dashboard --api-tokens FILE)")
        who = tokens.who(auth.bearer(request.headers.get("authorization")))
        if who is None:
            return None, _error(401, "a valid API token is required (Authorization: Bearer TOKEN)",
                                {"WWW-Authenticate": "Bearer"})
        return who, None

    def _too_large(self) -> Response:
        limit_mb = self.settings.max_upload_bytes / 2**20
        return _error(413, f"the upload is larger than this server's limit of {limit_mb:,.0f} MiB "
                           "(overlapscope dashboard --max-upload-mb)")

    async def _spool(self, request: Request, folder: Path) -> Path | Response:
        """Write the body to a file in ``folder`` as it arrives; 413 once it passes the limit."""
        limit = self.settings.max_upload_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            return self._too_large()
        spool = folder / "body"
        size, head = 0, b""
        with open(spool, "wb") as f:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return self._too_large()
                if len(head) < 4:
                    head += chunk[:4]
                f.write(chunk)
        if size == 0:
            return _error(400, "the request has no body: send the run as a .zip, .json or .json.gz")
        path = folder / upload_name(request.query_params.get("file"), head)
        spool.rename(path)
        return path

    def _prepare(self, path: Path):
        """Map the run into the run store and analyse it beside the writer (DuckDB runs on all
        cores), in a child process that exits once it is done (``runs.apart``): none of what
        the decode took stays with the server."""
        return apart.prepare(self.settings.db, [str(path)],
                             limits=limits.for_uploads(self.settings.max_upload_bytes), shown_from=str(path.parent))

    async def push(self, request: Request) -> Response:
        started = time.monotonic()
        client = request.client.host if request.client else None
        name = request.query_params.get("name")

        def refuse(response: Response, who: str | None = None) -> Response:
            reason = msgspec.json.decode(response.body).get("error") if response.body else None
            audit.record("refuse", "api", client, by=who, name=name, status=response.status_code, reason=reason)
            return response

        who, refused = self._who(request)
        if refused is not None:
            return refuse(refused)
        if not (request.query_params.get("name") or "").strip():
            return refuse(_error(400, f"give the run a name: POST {PREFIX}{c.RUNS}?name=NAME"), who)
        try:
            name = library.check_run_name(request.query_params.get("name"))
            tags = library.check_tags(parse_tags(request.query_params.getlist("tag")))
            key = idempotency_key(request.headers.get(IDEMPOTENCY_HEADER))
        except UsageError as err:
            return refuse(_error(400, str(err)), who)
        folder = Path(tempdirs.make("push"))
        try:
            path = await self._spool(request, folder)  # the whole body, even for a repeated key:
            if isinstance(path, Response):  # a client still sending would see its connection reset
                return refuse(path, who)
            if key is not None:  # a repeat (its answer was lost): no decode
                found = await asyncio.wrap_future(self._reads.submit(self._read_now, self._keyed(key, who)))
                if found is not None:
                    audit.record("repeat", "api", client, by=who, run_id=found["run_id"], name=name)
                    return repeated(found, name, tags)
            decoding = self._decodes.submit(self._prepare, path)
            try:
                prepared = await asyncio.wrap_future(decoding)
            except asyncio.CancelledError:
                decoding.add_done_callback(_discard_prepared)  # the decode thread runs on: its files go
                raise
            row, created = await self._store(prepared, name, tags, who, key)
        except asyncio.CancelledError:  # cut short by the server's stop, before the write
            return _stopping("nothing was stored; push again once it is back")
        except _StopDuringWrite:
            return _stopping("the push may have been stored: push again with the same Idempotency-Key "
                             "(overlapscope push does) to get its run")
        except InputError as err:
            return refuse(_error(400, uploads.display_error(err, folder)), who)
        except CatalogBusy as err:
            return refuse(_busy(err), who)
        except UsageError as err:
            return refuse(_error(400, str(err)), who)
        except Exception as err:  # one line to the client; the traceback stays in the server's log
            _log(f"a push of {name!r} failed:\n{traceback.format_exc()}")
            return refuse(_error(500, f"internal error ({type(err).__name__}): the server's log has the details"), who)
        finally:
            tempdirs.remove(str(folder))
            memory.release_freed()  # what the spooled body's buffers left (the decode ran in a child: runs/apart.py)
        if not created:  # two pushes with one key were in flight at once: the first stored it
            audit.record("repeat", "api", client, by=who, run_id=row["run_id"], name=name)
            return repeated(row, name, tags)
        audit.record("store", "api", client, by=who, run_id=row["run_id"], name=name,
                     seconds=round(time.monotonic() - started, 2))
        return pushed(row, 201)

    @staticmethod
    def _keyed(key: str, who: str):
        """A read: the run (as ``api.run`` lists it) that ``key`` stored for ``who``, or None."""
        def work(con):
            run_id = library.run_of_key(con, key, who)
            return None if run_id is None else library.run(con, run_id)
        return work

    async def _store(self, prepared, name: str, tags: dict, who: str, key: str | None) -> tuple[dict, bool]:
        """Commit on the writer thread, unless ``key`` stored a run meanwhile: (the run, stored now)."""
        def store(con):
            try:
                found = library.run_of_key(con, key, who) if key is not None else None
                if found is not None:  # checked on the single writer: no two runs get one key
                    prepared.discard()
                    return library.run(con, found), False
                return library.run(con, runs.commit(con, prepared, name, tags, pushed_by=who,
                                                    idempotency_key=key)), True
            except BaseException:
                prepared.discard()  # not committed: its staging folder goes (commit removed a published one)
                raise

        try:
            writing = self.catalog.submit(store)
        except BaseException:  # the writer stopped: nothing was queued
            prepared.discard()
            raise
        try:
            return await asyncio.wrap_future(writing)
        except asyncio.CancelledError:
            if writing.cancel():  # it never ran: nothing stored, its files go here
                prepared.discard()
                raise
            raise _StopDuringWrite() from None  # it runs on (or ran): stored or not, the key tells


class _StopDuringWrite(Exception):
    """The server's stop cut a push short while the writer stored it."""


def _discard_prepared(future) -> None:
    """A decode that finished after its push was cut short: its staging folder goes."""
    if not future.cancelled() and future.exception() is None:
        future.result().discard()
