"""Uploads through the Upload page kept on disk, and capped while they arrive.

Streamlit's file uploader sends each file to ``PUT /_stcore/upload_file/{session}/{file}``.
Streamlit's own route checks the XSRF token and the session, caps one file at
``server.maxUploadSize`` while it streams, and keeps the file's bytes in memory
until the browser session ends. ``UploadSpool`` wraps the whole ASGI app and, for
those requests only:

- refuses (413) a file that would take the session's uploads past the upload
  limit, or the uploads the server holds past ``SERVER_FACTOR`` times it, from
  the ``Content-Length`` header and again while the body streams in (a
  chunked or lying request is cut at the cap, never read whole);
- after Streamlit has stored the file, writes its bytes to
  ``<spool>/<session>/<file id>`` and leaves an empty record in Streamlit's
  manager, so the memory returns as soon as the request ends;
- deletes the spooled file when the browser removes it, and the files of
  sessions that have ended;
- on a server with API tokens, refuses (403) every file of a browser session that
  has not given the Upload page a valid token (``grant``), before reading a byte.

The Upload page reads the spooled files (``path``); ``release`` drops them once
a run is stored or refused.
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

from overlapscope.analyzer import tempdirs

UPLOAD_ROUTE = re.compile(r"/_stcore/upload_file/(?P<session>[\w-]+)/(?P<file>[\w-]+)$")
SERVER_FACTOR = 4  # the server holds at most this many full uploads at once (all sessions)
FRAMING_BYTES = 1 << 20  # multipart headers and boundaries around one file

_spool: Path | None = None  # set by ``UploadSpool`` (one server per process)
_lock = threading.Lock()
_granted: set[str] = set()  # browser sessions that gave a valid API token (``grant``)


def grant(session_id: str | None) -> None:
    """Let a browser session send files (its visitor gave a valid API token)."""
    if session_id:
        with _lock:
            _granted.add(session_id)


def granted(session_id: str) -> bool:
    with _lock:
        return session_id in _granted


def _runtime():
    from streamlit.runtime import Runtime

    return Runtime.instance() if Runtime.exists() else None


def path(session_id: str, file_id: str) -> Path | None:
    """Where an uploaded file's bytes are, or None when it was not spooled (no server, tests)."""
    if _spool is None or not re.fullmatch(r"[\w-]+", session_id) or not re.fullmatch(r"[\w-]+", file_id):
        return None
    found = _spool / session_id / file_id
    return found if found.is_file() else None


def release(session_id: str, file_ids) -> None:
    """Forget uploaded files: their spooled bytes and Streamlit's records."""
    runtime = _runtime()
    for file_id in file_ids:
        spooled = path(session_id, file_id)
        if spooled is not None:
            spooled.unlink(missing_ok=True)
        if runtime is not None:
            runtime.uploaded_file_mgr.remove_file(session_id=session_id, file_id=file_id)


def _held_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


class UploadSpool:
    """ASGI middleware around Streamlit's app: see the module's docstring."""

    def __init__(self, app, max_upload_bytes: int, folder: Path | None = None, needs_grant=None):
        global _spool
        self.app = app
        self.max_upload_bytes = max_upload_bytes
        self.needs_grant = needs_grant  # () -> whether sessions need ``grant`` (a server with tokens)
        self.folder = folder or Path(tempdirs.make("uploads"))
        self._in_flight: dict[int, int] = {}  # request -> bytes received so far
        _spool = self.folder

    def close(self) -> None:
        tempdirs.remove(str(self.folder))

    async def __call__(self, scope, receive, send):
        match = UPLOAD_ROUTE.search(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None:
            return await self.app(scope, receive, send)
        session_id, file_id = match["session"], match["file"]
        if scope["method"] == "DELETE":
            await self.app(scope, receive, send)
            return release(session_id, [file_id])
        if scope["method"] != "PUT":
            return await self.app(scope, receive, send)
        self._sweep()
        if self.needs_grant is not None and self.needs_grant() and not granted(session_id):
            return await self._refuse(send, 403, "give a valid API token on the Upload page before choosing files")
        room = self._room(session_id, file_id)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > room + FRAMING_BYTES:
            return await self._too_large(send)
        await self._put(scope, receive, send, session_id, file_id, room)

    def _room(self, session_id: str, file_id: str) -> int:
        """Bytes this file may have: what the session and the server have left."""
        with _lock:
            mine = _held_bytes(self.folder / session_id) - _held_bytes(self.folder / session_id / file_id)
            everyone = _held_bytes(self.folder) + sum(self._in_flight.values())
        return max(0, min(self.max_upload_bytes - mine, SERVER_FACTOR * self.max_upload_bytes - everyone))

    async def _put(self, scope, receive, send, session_id: str, file_id: str, room: int) -> None:
        key, state = id(scope), {"received": 0, "over": False, "started": False}
        self._in_flight[key] = 0

        async def capped_receive():
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                self._in_flight[key] = state["received"]
                if state["received"] > room + FRAMING_BYTES:
                    state["over"] = True  # Streamlit's route sees a client that went away and stops reading
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message):
            if state["over"]:
                return  # Streamlit's answer to a cut-off body: the client gets the 413 below instead
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, capped_receive, watched_send)
        except Exception:
            if not state["over"]:
                raise
        finally:
            self._in_flight.pop(key, None)
        if state["over"]:
            release(session_id, [file_id])
            if not state["started"]:
                await self._too_large(send)
            return
        self._move_to_disk(session_id, file_id)

    def _move_to_disk(self, session_id: str, file_id: str) -> None:
        """Write the stored file's bytes to the spool; leave Streamlit an empty record."""
        runtime = _runtime()
        if runtime is None:
            return
        manager = runtime.uploaded_file_mgr
        records = manager.get_files(session_id=session_id, file_ids=[file_id])
        if not records or not records[0].data:
            return
        record = records[0]
        folder = self.folder / session_id
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{file_id}.part"
        partial.write_bytes(record.data)
        partial.replace(folder / file_id)
        manager.add_file(session_id=session_id, file=record._replace(data=b""))

    def _sweep(self) -> None:
        """Drop the spooled files of sessions that have ended."""
        runtime = _runtime()
        if runtime is None or not self.folder.is_dir():
            return
        for folder in self.folder.iterdir():
            if folder.is_dir() and not runtime.is_active_session(folder.name):
                shutil.rmtree(folder, ignore_errors=True)
        with _lock:
            _granted.difference_update([s for s in _granted if not runtime.is_active_session(s)])

    async def _too_large(self, send) -> None:
        limit_mib = self.max_upload_bytes / 2**20
        await self._refuse(send, 413, f"the upload is larger than this server's limit of {limit_mib:,.0f} MiB in "
                                      "all, or the server holds too many uploads")

    @staticmethod
    async def _refuse(send, status: int, text: str) -> None:
        body = text.encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
