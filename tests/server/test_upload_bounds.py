"""Uploads through the dashboard are capped while they arrive and kept on disk, not in
the server's memory; a decompression bomb uploaded through the page stays bounded.

The browser part drives a real ``overlapscope dashboard`` with Playwright and
chromium (skips without them); the streaming cap is also checked on the ASGI
middleware itself, with a chunked body that declares no size.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import threading
import time
from pathlib import Path

import pytest

from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, WAIT_MS, _open, _settle
from test_dashboard_cli import start_server, stop_server
from test_memory_bounds import _gzip_repeated

from overlapscope.server.spool import FRAMING_BYTES, UploadSpool

MB = 1 << 20


def _spooled(root: Path) -> list[Path]:
    return [p for p in root.glob("overlapscope-uploads-*/*/*") if p.is_file()]


class _Peak:
    """The largest RSS of a process, sampled every 20 ms while in use."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _wait_for(condition, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _upload(page, paths: list[Path]) -> None:
    page.locator("[data-testid='stFileUploader'] input[type='file']").first.set_input_files([str(p) for p in paths])


def _analyze(page, name: str) -> None:
    field = page.get_by_label("Run name")
    field.fill(name)
    field.press("Enter")
    _settle(page)
    from playwright.sync_api import expect

    button = page.get_by_role("button", name="Analyze and store")
    # enabled once the files have reached the server; a locator, found again after each
    # re-render (a query of the first primary button could hold a replaced element)
    expect(button).to_be_enabled(timeout=WAIT_MS)
    button.click()
    _settle(page)


def _refused_and_emptied(page) -> None:
    """Wait for a refused upload's rerun: the page shows why and a new, empty uploader. Files
    chosen before that rerun has drawn go to the uploader it replaces, and are lost (a person
    never picks files within those milliseconds; a test does)."""
    from playwright.sync_api import expect

    expect(page.locator("[data-testid='stAlert']").first).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("[data-testid='stFileChipName']")).to_have_count(0, timeout=WAIT_MS)
    _settle(page)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_uploads_are_capped_spooled_and_released(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    expect = sync_api.expect
    spool_root = tmp_path / "tmp"
    spool_root.mkdir()
    junk = []
    for i, size_mb in enumerate((12, 12, 9)):  # random bytes: not a trace, refused after the upload
        path = tmp_path / f"junk-{i}.json.gz"
        path.write_bytes(os.urandom(size_mb * MB))
        junk.append(path)
    bomb = tmp_path / "bomb" / "rank-0.json.gz"  # 3 GB of blanks in a few MB
    bomb.parent.mkdir()
    _gzip_repeated(bomb, b" " * (64 * MB), 48)
    proc, url = start_server(tmp_path / "catalog.duckdb",
                             env={"TMPDIR": str(spool_root), "OVERLAPSCOPE_MAX_UPLOAD_MB": "20"})
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(
                tempfile.mkdtemp(dir=tmp_path), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page()
            page.goto(url)
            _settle(page)
            _open(page, "Upload")
            with _Peak(proc.pid) as watch:
                start_rss = watch.rss()
                # one file under the 20 MiB limit: on disk, not in the server's memory
                _upload(page, junk[:1])
                expect(page.locator("[data-testid='stFileChipName']")).to_have_count(1, timeout=WAIT_MS)
                _wait_for(lambda: [p.stat().st_size for p in _spooled(spool_root)] == [12 * MB])
                # a second one would take the upload past 20 MiB in all: refused while it arrives
                _upload(page, junk[1:2])
                page.wait_for_timeout(1500)
                assert [p.stat().st_size for p in _spooled(spool_root)] == [12 * MB]
                _analyze(page, "junk")
                _refused_and_emptied(page)
                assert _spooled(spool_root) == [], "the refused upload's files are gone from the server"
                after_rss = watch.rss()
                # rounds of uploads leave nothing behind
                for _ in range(3):
                    _upload(page, junk[2:3])
                    expect(page.locator("[data-testid='stFileChipName']")).to_have_count(1, timeout=WAIT_MS)
                    _analyze(page, "junk")
                    _refused_and_emptied(page)
                assert _spooled(spool_root) == []
                rounds_rss = watch.rss()
                # a 3 GB bomb through the page: refused at the upload cap, in bounded memory
                _upload(page, [bomb])
                expect(page.locator("[data-testid='stFileChipName']")).to_have_count(1, timeout=WAIT_MS)
                _analyze(page, "bomb")
                # the ratio cap (64x its 3 MB) or the upload's 200 MiB (10x the limit), whichever comes first
                expect(page.get_by_text(re.compile(r"decompresses to more than (64x its|200 MiB)"))).to_be_visible(
                    timeout=WAIT_MS)
            browser.close()
    finally:
        stop_server(proc)
    print(f"server RSS: start {start_rss / MB:,.0f} MiB, after 12 MiB upload {after_rss / MB:,.0f} MiB, "
          f"after 3 rounds {rounds_rss / MB:,.0f} MiB, peak {watch.peak / MB:,.0f} MiB (3 GB bomb included)")
    assert rounds_rss - start_rss < 60 * MB, "memory returns after uploads"
    assert not (tmp_path / "catalog.duckdb").exists() or _runs(tmp_path / "catalog.duckdb") == 0
    assert watch.peak < 1024 * MB, "a 3 GB bomb stays under 1 GiB in the server"


def _runs(db: Path) -> int:
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT count(*) FROM runs").fetchone()[0]


def _asgi_put(app, chunks: list[bytes], headers: list[tuple[bytes, bytes]]):
    """One PUT to the upload route through ``app``; the response's status and how much was read."""
    sent = {"status": None}
    read = {"chunks": 0}

    async def receive():
        if read["chunks"] < len(chunks):
            read["chunks"] += 1
            return {"type": "http.request", "body": chunks[read["chunks"] - 1],
                    "more_body": read["chunks"] < len(chunks)}
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            sent["status"] = message["status"]

    scope = {"type": "http", "method": "PUT", "path": "/_stcore/upload_file/session-1/file-1", "headers": headers,
             "query_string": b"", "root_path": ""}
    asyncio.run(app(scope, receive, send))
    return sent["status"], read["chunks"]


def _reader_app():
    """A Starlette route that reads the whole body (as Streamlit's upload route does)."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def put(request: Request):
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
        except ClientDisconnect:
            raise
        return Response(str(size), status_code=204)

    return Starlette(routes=[Route("/_stcore/upload_file/{session}/{file}", put, methods=["PUT"])])


def test_a_body_without_a_size_is_cut_at_the_cap(tmp_path):
    limit = 4 * MB
    spool = UploadSpool(_reader_app(), limit, folder=tmp_path / "spool")
    chunk = b"x" * MB
    # chunked, no Content-Length: read only until the cap, then 413
    status, read = _asgi_put(spool, [chunk] * 64, [])
    assert status == 413 and read <= (limit + FRAMING_BYTES) // MB + 1
    # a declared size over the cap: refused before one byte is read
    status, read = _asgi_put(spool, [chunk] * 64, [(b"content-length", str(64 * MB).encode())])
    assert status == 413 and read == 0
    # under the cap: through to the app
    status, read = _asgi_put(spool, [chunk] * 3, [(b"content-length", str(3 * MB).encode())])
    assert status == 204 and read == 3
    spool.close()


def test_a_server_with_tokens_takes_no_file_before_a_token(tmp_path):
    """With API tokens, a browser session sends files only once the Upload page took its valid
    token (``spool.grant``): before, a file is refused (403) without a byte read, whatever its
    size or session."""
    from overlapscope.server import spool as spool_module

    spool = UploadSpool(_reader_app(), 4 * MB, folder=tmp_path / "spool", needs_grant=lambda: True)
    chunk = b"x" * MB
    for headers in ([], [(b"content-length", str(MB).encode())]):
        assert _asgi_put(spool, [chunk], headers) == (403, 0)
    spool_module.grant("session-1")
    try:
        assert _asgi_put(spool, [chunk], [(b"content-length", str(MB).encode())]) == (204, 1)
    finally:
        spool_module._granted.discard("session-1")
    open_spool = UploadSpool(_reader_app(), 4 * MB, folder=tmp_path / "open", needs_grant=lambda: False)
    assert _asgi_put(open_spool, [chunk], []) == (204, 1)  # no tokens (a loopback server): as before
    spool.close()
    open_spool.close()
