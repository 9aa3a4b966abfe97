"""Text from traces, manifests and visitors is shown as text on every page.

A run whose name, backend, device name and FSDP unit name carry Markdown image
syntax pointing at a local "attacker" server is stored, then every page of a
real ``overlapscope dashboard`` is opened in headless chromium: the attacker's
server must see no request, the title must show the name literally, and no page
shows the server's catalog path. ``md`` itself is checked on the characters that
start Markdown.
"""

from __future__ import annotations

import http.server
import tempfile
import threading

import pytest

from builders import GpuTrace, write
from overlapscope.cli import main
from overlapscope.dashboard.text import WORD_JOINER, code, md, plain
from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, WAIT_MS, _no_exception, _open, _settle
from test_dashboard_cli import start_server, stop_server

PAGES = ("Overview", "Timeline", "Buckets & units", "Model", "Checklist", "History", "Compare", "Upload")


def test_md_escapes_every_character_that_starts_markdown():
    hostile = "![x](http://a/b.png) **b** _i_ `c` <img src=x> [l](u) $x$ # h | t ~s~ :red[r]\nline"
    escaped = md(hostile)
    assert "\n" not in escaped
    # every ASCII punctuation character is escaped, so none can open a Markdown construct
    unescaped = [ch for i, ch in enumerate(escaped)
                 if not ch.isalnum() and not ch.isspace() and ch != "\\" and ord(ch) < 128
                 and (i == 0 or escaped[i - 1] != "\\")]
    assert unescaped == []
    assert plain(escaped) == hostile.replace("\n", " ")  # a reader sees the text itself
    assert md("plain run 42") == "plain run 42"
    for link in ("https://evil.example/login?token=x", "HTTP://x.y", "www.evil.example/path", "WWW.x.y", "a@b.example"):
        assert WORD_JOINER in md(link) and plain(md(link)) == link  # GFM's autolink patterns broken, invisibly
    assert md("名前") == "名前"


def test_code_spans_show_their_text_without_backslashes():
    """A code span shows its text as it is (CommonMark: no escapes inside), so ``code`` escapes
    nothing; backticks inside take a longer fence, a leading or trailing one a space of padding."""
    assert code("--wrap root-only") == "`--wrap root-only`"
    assert code("overlapscope whatif --run sample/hsdp_2x2") == "`overlapscope whatif --run sample/hsdp_2x2`"
    assert code("a `b` c") == "``a `b` c``"
    assert code("`x``") == "``` `x`` ```"
    assert code("![x](http://a/b.png)\nnext") == "`![x](http://a/b.png) next`"  # literal, on one line


class _Attacker(http.server.BaseHTTPRequestHandler):
    hits: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        _Attacker.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def attacker():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    _Attacker.hits = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _hostile_run(folder, url: str) -> None:
    folder.mkdir()
    for rank in range(2):
        tr = GpuTrace(rank=rank).step(1, 0, 200)
        tr.annotation(f"FSDP::all_gather (![unit]({url}/unit.png))", 5, 20)
        tr.kernel(0, 120, step=1).comm(100, 60, step=1)
        trace = tr.to_json()
        trace["distributedInfo"]["backend"] = f"![backend]({url}/backend.png)"
        trace["deviceProperties"][0]["name"] = f"![device]({url}/device.png) <img src='{url}/html.png'>"
        write(trace, folder / f"rank-{rank}.json")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_no_page_renders_markdown_from_a_trace_or_a_name(tmp_path, attacker, monkeypatch, capsys):
    sync_api = pytest.importorskip("playwright.sync_api")
    expect = sync_api.expect
    db = tmp_path / "catalog.duckdb"
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(db))
    _hostile_run(tmp_path / "run", attacker)
    # GFM would link the last three by their pattern, whatever escapes they carry
    links = "https://evil.example/login?token=x www.evil.example/path someone@evil.example"
    name = f"![name]({attacker}/name.png) **bold** {links}"
    assert main(["ingest", str(tmp_path / "run"), "--run", name, "--tag", f"k=![tag]({attacker}/tag.png)"]) == 0
    assert main(["ingest", str(tmp_path / "run"), "--run", "second"]) == 0
    capsys.readouterr()
    proc, url = start_server(db)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(
                tempfile.mkdtemp(dir=tmp_path), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page()
            page.goto(url)
            _settle(page)
            # pick the hostile run (the newest is "second")
            page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").click()
            page.get_by_role("option").filter(has_text="bold").click()
            _settle(page)
            for title in PAGES:
                _open(page, title)
                page.wait_for_timeout(500)
                _no_exception(page)
                assert str(db) not in page.content(), f"{title} shows the server's catalog path"
                assert page.locator("a[href*='evil.example'], a[href^='mailto:']").count() == 0, \
                    f"{title} made a link of the run's name"
                if title in ("Overview", "Checklist", "Model", "Timeline", "Buckets & units"):
                    expect(page.locator("h1").first).to_contain_text("**bold**", timeout=WAIT_MS)
                    shown = page.locator("h1").first.inner_text().replace(WORD_JOINER, "")  # invisible
                    assert name in shown, shown
            browser.close()
    finally:
        stop_server(proc)
    assert _Attacker.hits == [], f"the pages made the browser fetch {_Attacker.hits}"
