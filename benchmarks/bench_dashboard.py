"""Benchmark: every page of the dashboard on an ingested run of many ranks.

Target: each page renders in under 2 seconds on its first visit. Pages render
through Streamlit's AppTest (the whole script: sidebar, analysis, charts, tables).
Each page is timed on a direct link from cleared caches (nothing this process
read before: "first visit"), then in the order a user visits them, then again
(cached).

Input (built once under ``.bench/inputs/dashboard<N>``): the reference GPU trace
``df_index_resolver.json.gz`` (V100, 216k events, 2,020 all-reduces) copied to N
ranks (default 64) with ``distributedInfo`` rewritten: 13.8M events at 64 ranks,
about 4,000 marks per step and rank before the timeline merges them. Without the
reference traces, a sample bundle from ``sample_traces/`` is copied instead.

``--browser``: the same in Chromium against a real server (``overlapscope dashboard``), each
page until it is drawn, charts included; a fresh server for each first visit.

Usage: python benchmarks/bench_dashboard.py [--ranks N] [--repeat N] [--keep-db] [--browser]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference_traces" / "gpu_allreduce_v100_rank1_of2" / "df_index_resolver.json.gz"
BENCH = ROOT / ".bench"
DB = BENCH / "dashboard.duckdb"
TARGET_S = 2.0
PAGES = ("views/overview.py", "views/timeline.py", "views/buckets.py", "views/model.py", "views/checklist.py",
         "views/history.py", "views/compare.py")
RANKS, INPUT = 64, BENCH / "inputs" / "dashboard64"  # main() sets them from --ranks


def _read_trace(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return json.load(f)


def _source_trace() -> tuple[Path, str]:
    if REFERENCE.is_file():
        return REFERENCE, "reference GPU trace df_index_resolver (V100, NCCL)"
    samples = sorted((ROOT / "sample_traces").glob("*/rank-0*.json*"))
    if samples:
        return samples[0], f"sample bundle {samples[0].parent.name} (rank 0)"
    sys.exit("no input: neither ../shared/reference_traces nor sample_traces/ is present")


def build_input() -> str:
    """RANKS per-rank files from one trace (rank and world size rewritten)."""
    source, label = _source_trace()
    marker = INPUT / "SOURCE"
    if marker.is_file() and marker.read_text() == str(source) and len(list(INPUT.glob("rank-*.json.gz"))) == RANKS:
        return label
    shutil.rmtree(INPUT, ignore_errors=True)
    INPUT.mkdir(parents=True)
    trace = _read_trace(source)
    for rank in range(RANKS):
        info = trace.setdefault("distributedInfo", {})
        info.update(rank=rank, world_size=RANKS)
        with gzip.open(INPUT / f"rank-{rank}.json.gz", "wb", compresslevel=1) as f:
            f.write(json.dumps(trace).encode())
    marker.write_text(str(source))
    return label


def ingest() -> tuple[int, float, int]:
    """The run stored twice (Compare and History want two), as ``overlapscope ingest`` does."""
    import subprocess

    from overlapscope.analyzer.store import catalog, runstore
    from overlapscope.analyzer import runs

    DB.unlink(missing_ok=True)
    Path(f"{DB}.wal").unlink(missing_ok=True)
    shutil.rmtree(runstore.store_dir(DB), ignore_errors=True)
    start = time.perf_counter()
    for _ in range(2):
        subprocess.run([sys.executable, "-m", "overlapscope.cli", "ingest", str(INPUT), "--run", f"bench/{RANKS}-ranks",
                        "--db", str(DB)], check=True, capture_output=True)
    con = runs.open_catalog(DB, read_only=True)
    run_id = catalog.resolve_run(con, f"bench/{RANKS}-ranks")
    events = con.execute("SELECT sum(events) FROM ranks WHERE run_id = ?", [run_id]).fetchone()[0]
    con.close()
    return run_id, (time.perf_counter() - start) / 2, events


def render_times(repeat: int) -> dict[str, dict[str, list[float]]]:
    """Seconds per page render: each page first from cleared caches, then all in order, then again."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ.update(OVERLAPSCOPE_DB=str(DB), OVERLAPSCOPE_NO_SAMPLES="1")
    times: dict[str, dict[str, list[float]]] = {p: {} for p in PAGES}

    def timed(at, page: str, label: str) -> None:
        start = time.perf_counter()
        at.switch_page(page).run()
        times[page].setdefault(label, []).append(time.perf_counter() - start)
        if at.exception:
            sys.exit(f"{page} raised: {at.exception[0].value}")

    for _ in range(repeat):
        for page in PAGES:  # a direct link, nothing cached
            st.cache_data.clear()
            st.cache_resource.clear()
            at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
            at.switch_page("views/upload.py").run()  # the app and the run list, no analysis
            timed(at, page, "first visit")
        st.cache_data.clear()
        st.cache_resource.clear()
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
        at.switch_page("views/upload.py").run()
        for page in PAGES:
            timed(at, page, "in order")
        for page in PAGES:
            timed(at, page, "again")
    return times


def browser_times(run_id: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    """Seconds until each page is drawn in Chromium, its charts included (the target as a
    user sees it): for each page a fresh server (nothing cached), the Upload page first (the
    app and the run list, no analysis), then the page; then every page in order in one
    session, and again. Uses the browser tests' helpers (tests/dashboard)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "server"), str(ROOT / "tests" / "dashboard")]
    from playwright import sync_api
    from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, _settle, open_page
    from test_dashboard_cli import start_server, stop_server

    from overlapscope.dashboard.app import PAGES as MENU  # the menu's titles, which open_page clicks

    titles = {path: title for pages in MENU.values() for path, title, _ in pages if path in PAGES}

    if CHROMIUM is None:
        sys.exit("--browser needs chromium (apt-get install chromium)")
    times: dict[str, dict[str, list[float]]] = {p: {} for p in PAGES}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        for _ in range(repeat):
            for page_path, title in titles.items():
                proc, url = start_server(DB)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 1000})
                    page.goto(f"{url}/upload?run={run_id}")
                    _settle(page)
                    times[page_path].setdefault("first visit", []).append(open_page(page, title))
                    page.close()
                finally:
                    stop_server(proc)
            proc, url = start_server(DB)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{url}/upload?run={run_id}")
                _settle(page)
                for label in ("in order", "again"):
                    for page_path, title in titles.items():
                        times[page_path].setdefault(label, []).append(open_page(page, title))
                page.close()
            finally:
                stop_server(proc)
        browser.close()
    return times


def timeline_size() -> dict:
    """What the timeline page draws for the slowest step on its default ranks."""
    from overlapscope.analyzer import api
    from overlapscope.analyzer.store import catalog
    from overlapscope.analyzer import runs
    from overlapscope.analyzer.measure import timeline
    from overlapscope.dashboard import shape

    con = runs.open_catalog(DB, read_only=True)
    run_id = catalog.resolve_run(con, f"bench/{RANKS}-ranks")
    result = api.analyze_run(con, run_id)
    step = result["headline"]["slowest_step"]["step"]
    tl = timeline.timeline(con, run_id, step, shape.default_ranks(result["ranks"], result["headline"]["slowest_rank"]))
    all_ranks = timeline.timeline(con, run_id, step)
    con.close()
    return {"default": (len(tl["ranks"]), tl["raw_marks"], tl["drawn_marks"]),
            "all": (len(all_ranks["ranks"]), all_ranks["raw_marks"], all_ranks["drawn_marks"])}


def main() -> int:
    global RANKS, INPUT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep-db", action="store_true", help="keep .bench/dashboard.duckdb afterwards")
    parser.add_argument("--browser", action="store_true", help="time the pages in Chromium (a real server) "
                        "instead of AppTest")
    args = parser.parse_args()
    RANKS, INPUT = args.ranks, BENCH / "inputs" / f"dashboard{args.ranks}"
    label = build_input()
    run_id, ingest_s, events = ingest()
    print(f"input: {RANKS} ranks from the {label}; {events:,} events; ingest {ingest_s:.1f} s")
    sizes = timeline_size()
    for what, (ranks, raw, drawn) in sizes.items():
        print(f"timeline, {what} ranks ({ranks}): {raw:,} marks in the step window, {drawn:,} drawn")
    load_before = os.getloadavg()[0]
    times = browser_times(run_id, args.repeat) if args.browser else render_times(args.repeat)
    how = "Chromium, drawn" if args.browser else "AppTest"
    print(f"\npage render ({how}, median of {args.repeat}; target < {TARGET_S:.0f} s; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} CPUs)")
    labels = ["first visit", "in order", "again"]
    print(f"{'page':<20}" + "".join(f"{label + ' (s)':>17}" for label in labels) + "  verdict")
    worst = 0.0
    for page, runs in times.items():
        medians = {label: statistics.median(v) for label, v in runs.items()}
        worst = max(worst, *medians.values())
        cells = "".join(f"{medians[label]:>17.3f}" if label in medians else f"{'-':>17}" for label in labels)
        print(f"{page:<20}{cells}  {'ok' if max(medians.values()) < TARGET_S else 'SLOW'}")
    if not args.keep_db:
        from overlapscope.analyzer.store import runstore

        DB.unlink(missing_ok=True)
        shutil.rmtree(runstore.store_dir(DB), ignore_errors=True)
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
