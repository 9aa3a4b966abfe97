"""End to end in a real headless browser: start ``overlapscope dashboard``, upload a
run, see the overview figures, the timeline and the checklist.

Playwright's Python package drives Debian's chromium (``apt-get install chromium``;
``make test`` tries to install it); the test skips when either is missing.
Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from test_dashboard_cli import start_server, stop_server
from conftest import ROOT

ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000
CHART = "[data-testid='stVegaLiteChart']"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")]


def _settle(page) -> None:
    """Wait until Streamlit has finished running the page script."""
    page.wait_for_selector("[data-testid='stApp']", timeout=WAIT_MS)
    page.wait_for_function("!document.querySelector(\"[data-testid='stStatusWidget']\")", timeout=WAIT_MS)
    page.wait_for_timeout(300)  # charts draw after the script ends


# Streamlit scrolls inside its main container, not the document: Playwright's full_page
# stops at the viewport. The tallest scrolling container's content is the page's height.
_PAGE_HEIGHT = ("() => Math.max(window.innerHeight, ...[...document.querySelectorAll("
                "\"[data-testid='stMain'], [data-testid='stSidebarContent']\")].map(e => e.scrollHeight))")
MAX_SHOT_PX = 16_000  # Chromium's limit for one capture is 16,384 px


def shoot(page, path) -> None:
    """A screenshot of the whole page: the viewport made as tall as the page's content, then
    set back (the warm timings and the next page see the usual 1000 px)."""
    size = page.viewport_size
    for _ in range(3):  # a taller viewport may lay out a little differently: measure again
        height = min(MAX_SHOT_PX, page.evaluate(_PAGE_HEIGHT))
        if height <= page.viewport_size["height"]:
            break
        page.set_viewport_size({"width": size["width"], "height": height})
        page.wait_for_timeout(300)
    page.screenshot(path=str(path))
    page.set_viewport_size(size)


# What a reader cannot read, found in the drawn page: a chart's text cut with an ellipsis
# (Vega shortens legend and axis labels past their labelLimit; SVG charts only), a chart's
# text drawn outside its frame or over another text (their bounding boxes), a table wider
# than its frame (its right columns hidden behind a scroll bar) and a row of buttons wider
# than its place (the last ones cut off).
_CUT = r"""() => {
  const charts = [...document.querySelectorAll("[data-testid='stVegaLiteChart'] svg text")]
    .map(t => t.textContent).filter(t => t.includes("\u2026")).map(t => "chart text cut: " + t);
  const tables = [...document.querySelectorAll("[data-testid='stDataFrame'] .dvn-scroller")]
    .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
    .map(e => `table wider than its frame: ${e.scrollWidth} px in ${e.clientWidth} px`);
  const buttons = [...document.querySelectorAll("[data-testid='stButtonGroup'] div")]
    .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
    .map(e => `buttons cut: ${e.innerText.replace(/\s+/g, " ")}`);
  // each chart's text by its drawn boxes: outside the chart's frame (clipped), or two texts
  // overlapping by more than 2 px each way (labels drawn over each other)
  const drawn = [];
  const shown = t => { for (let e = t; e && e.tagName !== "svg"; e = e.parentElement)
    if (e.getAttribute("opacity") === "0" || getComputedStyle(e).opacity === "0") return false; return true; };
  for (const chart of document.querySelectorAll("[data-testid='stVegaLiteChart']")) {
    const svg = chart.querySelector("svg.marks");
    if (!svg) continue;
    const frame = chart.getBoundingClientRect();  // what the reader sees of the chart
    // Vega keeps the labels it hides for overlap (labelOverlap) in the drawing, transparent
    const boxes = [...svg.querySelectorAll("text")].filter(t => t.textContent.trim() && shown(t))
      .map(t => [t.textContent.trim(), t.getBoundingClientRect()]).filter(([, b]) => b.width > 0);
    for (const [text, b] of boxes) {
      const out = Math.max(frame.left - b.left, b.right - frame.right, frame.top - b.top, b.bottom - frame.bottom);
      // a glyph's box runs 2 px past its ink: the top tick label and the axis title at the edges
      if (out > 3) drawn.push(`chart text outside its frame by ${Math.round(out)} px: ${text}`);
    }
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [ta, a] = boxes[i], [tb, b] = boxes[j];
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 2 && h > 2) drawn.push(`chart texts overlap (${Math.round(w)} x ${Math.round(h)} px): ${ta} / ${tb}`);
    }
  }
  return [...charts, ...tables, ...buttons, ...drawn];
}"""


def unreadable(page) -> list[str]:
    """Cut chart labels and tables wider than the page (see ``_CUT``)."""
    return page.evaluate(_CUT)


def _no_exception(page) -> None:
    shown = page.locator("[data-testid='stException']").all_inner_texts()  # no waiting: what is there now
    if shown:
        shoot(page, ARTIFACTS / "dashboard-exception.png")
    assert not shown, shown[0]


def _charts_drawn(page, at_least: int) -> None:
    """At least ``at_least`` Vega-Lite charts, each drawn (a canvas or an svg inside)."""
    page.wait_for_function(
        f"document.querySelectorAll(\"{CHART} canvas, {CHART} svg.marks\").length >= {at_least}", timeout=WAIT_MS)


# Done drawing: no script running, nothing stale, every chart drawn, and the page's height and
# element count unchanged for ``quiet`` ms (a page switch may start its script after a click
# returns, and the charts draw after the script ends).
_QUIET = """(quiet) => {
  const main = document.querySelector("[data-testid='stMain']");
  const busy = !main || document.querySelector("[data-testid='stStatusWidget'], [data-stale='true']") ||
    [...document.querySelectorAll("[data-testid='stVegaLiteChart']")].some(c => !c.querySelector("canvas, svg.marks"));
  const sig = busy ? null : main.scrollHeight + ":" + main.getElementsByTagName("*").length;
  if (sig === null || sig !== window.__osSig) { window.__osSig = sig; window.__osSince = Date.now(); return false; }
  return Date.now() - window.__osSince >= quiet;
}"""


def open_page(page, title: str, quiet_ms: int = 500) -> float:
    """Click a page in the menu and wait until its heading shows and it is done drawing
    (``_QUIET``); returns the seconds until it was done, the quiet time not counted."""
    import time

    started = time.monotonic()
    page.locator("[data-testid='stSidebarNav']").get_by_text(title, exact=True).click()
    page.wait_for_function("(h) => [...document.querySelectorAll('h1')].some(e => e.textContent.startsWith(h))",
                           arg=title.split()[0], timeout=WAIT_MS)
    page.evaluate("() => { window.__osSig = undefined; }")
    page.wait_for_function(_QUIET, arg=quiet_ms, timeout=WAIT_MS, polling=100)
    return time.monotonic() - started - quiet_ms / 1000


def expand_all(page, quiet_ms: int = 500) -> int:
    """Open every closed expander of the page (the tables inside draw only when open), then wait
    until it is done drawing; how many were opened."""
    closed = page.locator("[data-testid='stMain'] [data-testid='stExpander'] details:not([open]) > summary")
    count = closed.count()
    for _ in range(count):
        closed.first.click()
    if count:
        page.evaluate("() => { window.__osSig = undefined; }")
        page.wait_for_function(_QUIET, arg=quiet_ms, timeout=WAIT_MS, polling=100)
    return count


def _open(page, title: str) -> None:
    """Click a page in the menu; the callers wait for what the page shows (Playwright's expect
    retries), as the script may not have started when the click returns."""
    page.locator("[data-testid='stSidebarNav']").get_by_text(title, exact=True).click()
    _settle(page)


def test_upload_then_overview_timeline_and_checklist(tmp_path, dashboard_bundles):
    sync_api = pytest.importorskip("playwright.sync_api")
    expect = sync_api.expect
    ARTIFACTS.mkdir(exist_ok=True)
    files = [str(p) for p in sorted(dashboard_bundles[0].iterdir()) if p.is_file() and ".json" in p.name]
    proc, url = start_server(tmp_path / "catalog.duckdb")
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(
                tempfile.mkdtemp(dir=tmp_path), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                viewport={"width": 1400, "height": 1000})
            page = browser.new_page()
            page.goto(url)
            _settle(page)
            expect(page.get_by_text("The catalog holds no runs yet")).to_be_visible()

            _open(page, "Upload")
            page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(files)
            expect(page.locator("[data-testid='stFileChipName']")).to_have_count(len(files), timeout=WAIT_MS)
            name = page.get_by_label("Run name")
            # the page proposes a name once the files have reached it (the traces' prefix, never the
            # manifest's); a name typed after that is the user's
            expect(name).not_to_have_value("", timeout=WAIT_MS)
            assert name.input_value() != "manifest"
            name.fill("browser-run")
            name.press("Enter")
            _settle(page)
            page.get_by_role("button", name="Analyze and store").click()
            expect(page.get_by_text("Stored run #1 (browser-run)")).to_be_visible(timeout=WAIT_MS)
            shoot(page, ARTIFACTS / "dashboard-upload.png")

            _open(page, "Overview")
            expect(page.get_by_role("heading", name="Overview · browser-run")).to_be_visible()
            figures = page.locator("[data-testid='stMetric']")
            expect(figures.first).to_contain_text("Exposed comm")
            expect(figures.first).to_contain_text("ms")
            expect(figures.nth(1)).to_contain_text("%")
            expect(figures.nth(3)).to_contain_text("Step time")
            _charts_drawn(page, 2)
            _no_exception(page)
            shoot(page, ARTIFACTS / "dashboard-overview.png")

            _open(page, "Timeline")
            expect(page.get_by_role("heading", name="Timeline · browser-run")).to_be_visible()
            _charts_drawn(page, 1)
            expect(page.get_by_text("orange-red comm exposed")).to_be_visible()
            _no_exception(page)
            shoot(page, ARTIFACTS / "dashboard-timeline.png")

            _open(page, "Checklist")
            expect(page.get_by_role("heading", name="Checklist · browser-run")).to_be_visible()
            expect(page.locator("[data-testid='stExpander']").first).to_be_visible()
            expect(page.get_by_text("not applicable", exact=True)).to_be_visible()
            expect(page.get_by_text(re.compile(r"^Not applicable to this run \(\d+\)$"))).to_be_visible()
            _no_exception(page)
            shoot(page, ARTIFACTS / "dashboard-checklist.png")
            browser.close()
    finally:
        stop_server(proc)
    for shot in ("upload", "overview", "timeline", "checklist"):
        assert (ARTIFACTS / f"dashboard-{shot}.png").stat().st_size > 10_000


def test_history_draws_one_line_per_name_and_marks_the_regression(tmp_path):
    """Three runs of one name (ddp, ddp, then the straggler: exposed comm grows ~17x) and two of
    another: the History page draws two lines, one black triangle on the straggler's run, and a
    click on that run opens its Overview."""
    sync_api = pytest.importorskip("playwright.sync_api")
    expect = sync_api.expect
    from conftest import SAMPLES
    from overlapscope.analyzer import runs

    db = tmp_path / "catalog.duckdb"
    con = runs.open_catalog(db)
    for bundle in ("ddp", "ddp", "ddp_straggler"):
        runs.ingest(con, [str(SAMPLES / bundle)], "nightly", {"branch": "main"})
    for _ in range(2):
        runs.ingest(con, [str(SAMPLES / "ddp_tiny_buckets")], "tiny")
    con.close()
    ARTIFACTS.mkdir(exist_ok=True)
    proc, url = start_server(db)  # without API tokens: reads only
    try:
        from test_api import push_raw, request, zipped

        assert request(url, "GET", "/health")[1]["writes"] is False
        status, answer = push_raw(url, zipped(SAMPLES / "ddp"), "refused", token="any-token-at-all-12345")
        assert status == 403 and "--api-tokens" in answer["error"]
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(
                tempfile.mkdtemp(dir=tmp_path), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                viewport={"width": 1400, "height": 1000})
            page = browser.new_page()
            page.goto(f"{url}/history")
            _settle(page)
            expect(page.get_by_role("heading", name="History")).to_be_visible(timeout=WAIT_MS)
            _charts_drawn(page, 1)
            _no_exception(page)
            chart = page.locator(CHART).first
            # the chart is SVG: one path per line, one symbol per run, one triangle per regression
            expect(chart.locator("g.mark-line path")).to_have_count(2)
            symbols = chart.locator("g.mark-symbol")
            points, marks = symbols.nth(0), symbols.nth(1)
            expect(points.locator("path")).to_have_count(5)
            expect(marks.locator("path")).to_have_count(1)
            expect(page.get_by_text("Showing 5 runs of 2 names")).to_be_visible()
            expect(page.get_by_role("heading", name="Regressions (1)")).to_be_visible()
            shoot(page, ARTIFACTS / "dashboard-history.png")
            marks.locator("path").first.click(force=True)
            expect(page.get_by_role("heading", name="Overview · nightly")).to_be_visible(timeout=WAIT_MS)
            expect(page.get_by_role("combobox", name="Run")).to_have_value(re.compile(r"^nightly · #3 "))
            browser.close()
    finally:
        stop_server(proc)
    assert (ARTIFACTS / "dashboard-history.png").stat().st_size > 10_000
