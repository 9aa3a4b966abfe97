"""A small client of a dashboard's HTTP API (``/api/v1``): what ``push`` and ``check --server`` call.

Standard library and msgspec only. A request body is streamed from a file in
blocks (with a progress callback), never read whole into memory. Every answer is
checked against the shape the command reads (contract/api.py's structs) before it is
used. Every failure is a ``UsageError`` of one line naming the server (a
server that cannot be reached: ``Unreachable``); no token ever appears in one.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
from urllib.parse import urlencode, urlsplit

import msgspec

from overlapscope.analyzer.errors import UsageError
from overlapscope.contract.api import PREFIX
TIMEOUT_S = 600.0  # a large run takes a while to decode and store after its upload
BLOCK_BYTES = 1 << 20


class Unreachable(UsageError):
    """No answer: the server could not be reached or dropped the connection before answering."""


class Server:
    """An overlapscope server at ``url`` (``http://host:port`` or ``https://...``, with an optional path prefix)."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = TIMEOUT_S):
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"{url}: not a server URL (http://HOST:PORT or https://HOST)")
        self.url = url.rstrip("/")
        self._parts = parts
        self._token = token
        self._timeout_s = timeout_s

    def _connection(self) -> http.client.HTTPConnection:
        p = self._parts
        if p.scheme == "https":
            return http.client.HTTPSConnection(p.hostname, p.port, timeout=self._timeout_s,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(p.hostname, p.port, timeout=self._timeout_s)

    def _path(self, route: str, params: list[tuple[str, str]] | None) -> str:
        query = f"?{urlencode(params)}" if params else ""
        return f"{self._parts.path}{PREFIX}{route}{query}"

    def _headers(self, extra: dict | None = None) -> dict:
        headers = {"Accept": "application/json", "User-Agent": "overlapscope"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return {**headers, **(extra or {})}

    def _answer(self, response) -> tuple[int, dict]:
        body = response.read()
        try:
            value = json.loads(body) if body else {}
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise UsageError(f"{self.url}: HTTP {response.status} {response.reason}: not an overlapscope API "
                             "answer (is this the dashboard's address?)")
        return response.status, value

    def _send(self, method: str, route: str, params=None, body=None, headers: dict | None = None):
        conn = self._connection()
        try:
            conn.request(method, self._path(route, params), body=body, headers=self._headers(headers))
            return self._answer(conn.getresponse())
        except (OSError, http.client.HTTPException) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
            if isinstance(err, socket.timeout):
                reason = f"no answer within {self._timeout_s:g} s"
            raise Unreachable(f"{self.url}: cannot reach the server ({reason})") from None
        finally:
            conn.close()

    def get(self, route: str, params: list[tuple[str, str]] | None = None, shape: type | None = None) -> dict:
        """GET a route; its JSON, checked against ``shape`` (a msgspec struct) when given; an
        error status is a ``UsageError`` with the server's message."""
        status, value = self._send("GET", route, params)
        if status != 200:
            raise UsageError(self.refusal(status, value))
        return self.checked(value, shape, f"GET {PREFIX}{route}") if shape is not None else value

    def post_file(self, route: str, path: str, params: list[tuple[str, str]], on_progress=None,
                  headers: dict | None = None) -> tuple[int, dict]:
        """POST the file at ``path`` as the body, streamed; (status, JSON answer)."""
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            body = _Progress(f, size, on_progress)
            return self._send("POST", route, params, body=body,
                              headers={"Content-Type": "application/octet-stream", "Content-Length": str(size),
                                       **(headers or {})})

    def checked(self, value: dict, shape: type, what: str) -> dict:
        """``value`` when it has the keys and types of ``shape``, else a ``UsageError`` naming the
        server and the first key that is wrong: what a command reads is never a guess."""
        try:
            msgspec.convert(value, shape)
        except msgspec.ValidationError as err:
            raise UsageError(f"{self.url}: {what} answered JSON that is not an overlapscope API answer "
                             f"({err}; is this the dashboard's address, and of a compatible version?)") from None
        return value

    def refusal(self, status: int, value: dict) -> str:
        """One line for an error answer."""
        message = value.get("error")
        return f"{self.url}: HTTP {status}: {message if isinstance(message, str) and message else 'refused'}"


class _Progress:
    """A file as http.client reads a body (``read(n)``), reporting the bytes sent."""

    def __init__(self, f, size: int, on_progress):
        self._f, self._size, self._sent, self._report = f, size, 0, on_progress

    def read(self, n: int = -1) -> bytes:
        block = self._f.read(BLOCK_BYTES if n is None or n < 0 else max(n, BLOCK_BYTES))
        self._sent += len(block)
        if self._report is not None and block:
            self._report(self._sent, self._size)
        return block
