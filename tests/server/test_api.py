"""The served catalog: a real ``overlapscope dashboard`` with a temporary catalog and a token
file, pushed to with ``overlapscope push`` and with raw HTTP.

What must hold: concurrent pushes all land while the API and the History page are read
in a loop, and no reader sees a half-stored run; a push without a valid token (401), a
bad run (400) or an oversized one (413) stores nothing; the token never reaches the
server's output; SIGTERM stops everything the command started within 5 s.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest

from conftest import SAMPLES
from test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, WAIT_MS
from test_dashboard_cli import start_server, stop_server

from overlapscope.analyzer.checklist import RULES

RULE_IDS = set(RULES)  # every registered rule reports a finding (pass, warn, fail or n/a)

pytestmark = pytest.mark.slow

TOKEN = "ci-token-0123456789abcdef"
OTHER_TOKEN = "laptop-token-0123456789abcdef"
LIMIT_MB = 3
EXE = Path(sys.executable).parent / "overlapscope"
COMMAND = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "overlapscope.cli"]


def zipped(bundle: Path) -> bytes:
    """A run folder as a .zip in memory (what a client would send)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for p in sorted(bundle.iterdir()):
            if p.is_file() and ".json" in p.name:
                zf.write(p, p.name)
    return out.getvalue()


def request(url: str, method: str, route: str, params=None, body: bytes | None = None,
            token: str | None = None, headers: dict | None = None) -> tuple[int, dict]:
    """One raw HTTP request to the API; (status, JSON answer: a body that is no JSON fails here)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    try:
        conn.request(method, f"/api/v1{route}{'?' + urlencode(params) if params else ''}", body=body,
                     headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def push_raw(url: str, body: bytes, name: str, token: str | None = TOKEN, tags=(), file: str | None = None,
             key: str | None = None):
    params = [("name", name)] + [("tag", t) for t in tags] + ([("file", file)] if file else [])
    return request(url, "POST", "/runs", params, body, token, {"Idempotency-Key": key} if key else None)


def runs(url: str, name: str | None = None) -> list[dict]:
    status, answer = request(url, "GET", "/runs", [("name", name)] if name else None)
    assert status == 200, answer
    return answer["runs"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server on a fresh catalog with two tokens; yields (url, catalog, output lines so far)."""
    folder = tmp_path_factory.mktemp("served")
    tokens = folder / "tokens"
    tokens.write_text(f"# who may push\n{TOKEN} ci-bot\n{OTHER_TOKEN} alice\n")
    db = folder / "catalog.duckdb"
    proc, url = start_server(db, "--api-tokens", str(tokens), "--max-upload-mb", str(LIMIT_MB))
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(line.decode(errors="replace")
                                                           for line in proc.stdout), daemon=True)
    reader.start()  # the pipe never fills up
    yield url, db, output
    stop_server(proc)
    reader.join(10)
    log = "".join(output)
    assert TOKEN not in log and OTHER_TOKEN not in log, "a token reached the server's output"


def test_health_names_the_version_and_the_run_count(server):
    url, _, _ = server
    status, health = request(url, "GET", "/health")
    assert status == 200
    from importlib.metadata import version

    assert health["version"] == version("overlapscope")
    assert health["writes"] is True and health["max_upload_bytes"] == LIMIT_MB * 2**20
    assert health["runs"] == len(runs(url))


def test_push_with_the_cli_stores_the_run_and_its_headline(server, tmp_path):
    url, _, _ = server
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    done = subprocess.run([*COMMAND, "push", url, str(SAMPLES / "ddp"), "--run", "cli-push", "--tag", "commit=abc",
                           "--token-file", str(token_file), "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["name"] == "cli-push" and answer["tags"] == {"commit": "abc"} and answer["pushed_by"] == "ci-bot"
    # the same headline as a local analysis of the same files (the checklist runs only at ingest)
    local = subprocess.run([*COMMAND, "analyze", str(SAMPLES / "ddp"), "--json"], capture_output=True, text=True,
                           timeout=120)
    expected = json.loads(local.stdout)["headline"]
    assert {k: v for k, v in answer["headline"].items() if k != "failed_findings"} == \
           {k: v for k, v in expected.items() if k != "failed_findings"}
    (listed,) = runs(url, "cli-push")
    assert listed["run_id"] == answer["run_id"] and listed["pushed_by"] == "ci-bot"
    status, detail = request(url, "GET", f"/runs/{answer['run_id']}")
    assert status == 200 and [r["rank"] for r in detail["rank_figures"]] == [0, 1]
    assert len(detail["findings"]) == len(RULE_IDS) and detail["headline"] == answer["headline"]
    # the same run piped in as a zip (push -): the same headline
    archive = tmp_path / "ddp.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in sorted((SAMPLES / "ddp").iterdir()):
            zf.write(f, f.name)
    with open(archive, "rb") as piped:
        done = subprocess.run([*COMMAND, "push", url, "-", "--run", "cli-piped", "--token-file", str(token_file),
                               "--json"], stdin=piped, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["headline"] == answer["headline"]


def test_push_with_raw_http_single_file_and_zip(server):
    url, _, _ = server
    status, answer = push_raw(url, zipped(SAMPLES / "ddp_straggler"), "raw-zip", token=OTHER_TOKEN,
                              tags=["gpu=cpu", "commit=def"])
    assert status == 201, answer
    assert answer["pushed_by"] == "alice" and answer["tags"] == {"gpu": "cpu", "commit": "def"}
    assert answer["headline"]["ranks"] == 2
    rank0 = (SAMPLES / "ddp" / "rank-0.pt.trace.json.gz").read_bytes()
    status, answer = push_raw(url, rank0, "raw-file")  # no file name: the content says .json.gz
    assert status == 201 and answer["headline"]["ranks"] == 1


def test_refused_pushes_store_nothing(server, tmp_path):
    url, _, _ = server
    before = runs(url)
    body = zipped(SAMPLES / "ddp")
    assert push_raw(url, body, "no-token", token=None)[0] == 401
    status, answer = push_raw(url, body, "wrong-token", token="not-a-token-of-this-server")
    assert status == 401 and "token" in answer["error"] and "not-a-token" not in answer["error"]
    # a bad run: one rank's file is cut short; the error names the member and the problem
    broken = io.BytesIO()
    with zipfile.ZipFile(broken, "w") as zf:
        zf.write(SAMPLES / "ddp" / "rank-0.pt.trace.json.gz", "rank-0.pt.trace.json.gz")
        zf.writestr("rank-1.pt.trace.json.gz", (SAMPLES / "ddp" / "rank-1.pt.trace.json.gz").read_bytes()[:5000])
    status, answer = push_raw(url, broken.getvalue(), "bad-run", file="nightly.zip")
    assert status == 400 and answer["error"].startswith("nightly.zip:rank-1.pt.trace.json.gz: "), answer
    assert "\n" not in answer["error"] and tempfile.gettempdir() not in answer["error"]
    assert push_raw(url, b"", "empty")[0] == 400
    assert push_raw(url, b"not json at all", "not-json")[0] == 400
    assert push_raw(url, body, "")[0] == 400, "a run needs a name"
    assert push_raw(url, body, "bad-tag", tags=["novalue"])[0] == 400
    # over the limit: refused while it arrives (the body is streamed, not buffered)
    status, answer = push_raw(url, os.urandom((LIMIT_MB + 1) * 2**20), "too-big")
    assert status == 413 and f"{LIMIT_MB} MiB" in answer["error"]
    assert runs(url) == before
    # the CLI says why in one line, exit 2
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    done = subprocess.run([*COMMAND, "push", url, str(bad), "--run", "cli-bad"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "OVERLAPSCOPE_TOKEN": TOKEN})
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "HTTP 400: bad.json: " in done.stderr
    done = subprocess.run([*COMMAND, "push", url, str(SAMPLES / "ddp"), "--run", "cli-no-token"],
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "OVERLAPSCOPE_TOKEN"})
    assert done.returncode == 2 and "HTTP 401" in done.stderr
    assert runs(url) == before


def test_a_repeated_idempotency_key_gets_the_run_it_stored(server):
    """A push sent again with its key (its answer was lost) is answered with the run the first
    stored, 200 and the same object, and stores nothing; the key is the pushing token's."""
    url, _, _ = server
    body, key = zipped(SAMPLES / "ddp"), "0b6f2a8e-5d1c-4a55-9b0e-3c1f7d2e9a10"
    status, first = push_raw(url, body, "keyed", tags=["commit=abc"], key=key)
    assert status == 201, first
    stored = runs(url, "keyed")
    status, again = push_raw(url, body, "keyed", tags=["commit=abc"], key=key)
    assert status == 200 and again == first
    assert runs(url, "keyed") == stored and len(stored) == 1
    # the same key asking for another run is refused, nothing stored
    status, answer = push_raw(url, body, "keyed-other", tags=["commit=abc"], key=key)
    assert status == 422 and f"run {first['run_id']}" in answer["error"]
    status, answer = push_raw(url, body, "keyed", tags=["commit=def"], key=key)
    assert status == 422
    assert push_raw(url, body, "keyed", key="a key with spaces")[0] == 400
    assert push_raw(url, body, "keyed", key="x" * 201)[0] == 400
    assert runs(url, "keyed") == stored and runs(url, "keyed-other") == []
    # another token's push with the same key is another client's: stored
    status, other = push_raw(url, body, "keyed", token=OTHER_TOKEN, tags=["commit=abc"], key=key)
    assert status == 201 and other["run_id"] != first["run_id"] and other["pushed_by"] == "alice"


def test_a_server_without_tokens_refuses_every_push(tmp_path):
    """Started without --api-tokens, the API reads but refuses writes: 403 with or without a
    token, the CLI says why in one line (exit 2), and nothing is stored."""
    proc, url = start_server(tmp_path / "catalog.duckdb")
    try:
        status, health = request(url, "GET", "/health")
        assert status == 200 and health["writes"] is False and health["runs"] == 0
        body = zipped(SAMPLES / "ddp")
        for token in ("any-token-at-all-12345", None):
            status, answer = push_raw(url, body, "refused", token=token)
            assert status == 403 and "--api-tokens" in answer["error"], answer
        done = subprocess.run([*COMMAND, "push", url, str(SAMPLES / "ddp"), "--run", "refused"], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "OVERLAPSCOPE_TOKEN": TOKEN})
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "accepts no pushes" in done.stderr
        assert runs(url) == []
    finally:
        stop_server(proc)


def test_every_key_the_api_answers_is_documented(server):
    from test_docs import documented_gaps

    url, _, _ = server
    status, pushed = push_raw(url, zipped(SAMPLES / "ddp"), "documented", tags=["k=v"])
    assert status == 201
    push_raw(url, zipped(SAMPLES / "ddp"), "documented")
    answers = [request(url, "GET", "/health")[1], pushed, request(url, "GET", "/runs")[1],
               request(url, "GET", f"/runs/{pushed['run_id']}")[1],
               request(url, "GET", f"/runs/{pushed['run_id'] + 1}/check")[1], request(url, "GET", "/runs/99999")[1]]
    assert [documented_gaps(a, own=("k", "gpu", "commit", "job")) for a in answers] == [[]] * len(answers)


def test_reads_answer_with_errors_in_one_line(server):
    url, _, _ = server
    assert request(url, "GET", "/runs/99999")[0] == 404
    assert request(url, "GET", "/runs/99999/check")[0] == 404
    status, answer = request(url, "GET", "/runs", [("name", "no-such-name")])
    assert status == 200 and answer == {"runs": []}


def _history_loop(url: str, stop: threading.Event, seen: dict) -> None:
    """Reload the History page until ``stop``; record what each render drew."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(tempfile.mkdtemp(), executable_path=CHROMIUM,
                                                       args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page()
        while not stop.is_set() or seen["renders"] == 0:
            page.goto(f"{url}/history")
            page.wait_for_selector("[data-testid='stApp']", timeout=WAIT_MS)
            page.wait_for_function("!document.querySelector(\"[data-testid='stStatusWidget']\")", timeout=WAIT_MS)
            # the runs' chart, or (before the first push lands) the empty catalog's message
            page.wait_for_selector("[data-testid='stCaptionContainer']:has-text('Showing'), "
                                   "[data-testid='stAlert']:has-text('no runs yet')", timeout=WAIT_MS)
            assert page.locator("[data-testid='stException']").count() == 0
            shown = page.locator("[data-testid='stCaptionContainer']:has-text('Showing')")
            if shown.count():
                seen["captions"].append(shown.first.inner_text())
                seen["renders"] += 1
        browser.close()


def test_concurrent_pushes_all_land_while_readers_read(server):
    """8 pushes at once (raw HTTP), while GET /api/v1/runs and the History page are read in a
    loop: all 8 land, each whole, and no reader ever sees a run without its ranks or headline."""
    url, _, _ = server
    before = {r["run_id"] for r in runs(url)}
    bodies = [zipped(SAMPLES / ("ddp" if i % 2 else "ddp_straggler")) for i in range(8)]
    stop, answers, bad_reads, reads = threading.Event(), {}, [], [0]

    def push(i: int) -> None:
        answers[i] = push_raw(url, bodies[i], "concurrent", tags=[f"job={i}"])

    def read_api() -> None:
        while not stop.is_set():
            for r in runs(url, "concurrent"):  # each run pushed here has 2 ranks
                if r["headline"] is None or r["ranks"] != 2:
                    bad_reads.append(r)
            reads[0] += 1

    seen = {"renders": 0, "captions": []}
    page_reader = threading.Thread(target=_history_loop, args=(url, stop, seen), daemon=True) if CHROMIUM else None
    api_reader = threading.Thread(target=read_api, daemon=True)
    pushers = [threading.Thread(target=push, args=(i,)) for i in range(8)]
    started = time.monotonic()
    api_reader.start()
    if page_reader:
        page_reader.start()
    for t in pushers:
        t.start()
    for t in pushers:
        t.join(300)
    elapsed_s = time.monotonic() - started
    stop.set()
    api_reader.join(60)
    if page_reader:
        page_reader.join(120)
    assert all(status == 201 for status, _ in answers.values()), answers
    assert len(answers) == 8
    landed = [r for r in runs(url, "concurrent") if r["run_id"] not in before]
    assert sorted(r["tags"]["job"] for r in landed) == [str(i) for i in range(8)]
    assert sorted(a["run_id"] for _, a in answers.values()) == sorted(r["run_id"] for r in landed)
    assert not bad_reads and reads[0] > 1
    for r in landed:  # each whole: its ranks' figures and its checklist are there
        status, detail = request(url, "GET", f"/runs/{r['run_id']}")
        assert len(detail["rank_figures"]) == 2 and len(detail["findings"]) == len(RULE_IDS)
    if page_reader:
        assert seen["renders"] >= 1, "the History page rendered during the pushes"
    print(f"8 concurrent pushes in {elapsed_s:.1f} s; {reads[0]} API reads, {seen['renders']} page renders")


def test_check_against_the_server(server):
    url, _, _ = server
    for bundle in ("ddp", "ddp"):
        assert push_raw(url, zipped(SAMPLES / bundle), "gate")[0] == 201
    check = [*COMMAND, "check", "--run", "gate", "--server", url]
    same = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert same.returncode == 0 and same.stdout.startswith("PASS"), same.stdout + same.stderr
    assert push_raw(url, zipped(SAMPLES / "ddp_straggler"), "gate")[0] == 201
    worse = subprocess.run([*check, "--json"], capture_output=True, text=True, timeout=60)
    assert worse.returncode == 1, worse.stderr
    verdict = json.loads(worse.stdout)
    assert verdict["status"] == "regression" and verdict["metric"] == "exposed_comm_ms"
    status, via_http = request(url, "GET", f"/runs/{verdict['run']['run_id']}/check")
    assert status == 200 and via_http == verdict
    for bound in ("nan", "NaN", "inf", "-1", "x"):  # a NaN bound would pass any regression
        status, answer = request(url, "GET", f"/runs/{verdict['run']['run_id']}/check", [("max_regression_pct", bound)])
        assert status == 400 and ("0 % or more" in answer["error"] or "a number" in answer["error"]), (bound, answer)


def _session_processes(sid: int) -> list[int]:
    """Processes in session ``sid`` (the dashboard command was started in a session of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # after pid (comm): state, ppid, pgrp, session
                found.append(int(entry.name))
    return found


def _port_free(port: int) -> bool:
    """Nothing listens on the port: a connection is refused and a new server can bind it
    (SO_REUSEADDR, as servers do: connections of the stopped one may linger in TIME_WAIT)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            return True
        except OSError:
            return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_everything_within_5_s(tmp_path, sig):
    """SIGTERM or SIGINT to the dashboard's process only (not its group): 5 s later nothing it
    started runs, the port is free and the catalog is not locked, even with a push in flight.
    That push gets a JSON answer or none (never a plain-text 500); sent again with its
    Idempotency-Key to the restarted server, it ends as exactly one run, whether the stop
    stored it or not."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} ci\n")
    db = tmp_path / "catalog.duckdb"
    proc, url = start_server(db, "--api-tokens", str(tokens))
    port = urlsplit(url).port
    key, outcome = "5e0c1d4a-7f1b-4c2a-8f3e-2b9d6a1c0e77", {}
    try:
        assert push_raw(url, zipped(SAMPLES / "ddp"), "before")[0] == 201
        body = zipped(SAMPLES / "hsdp_2x2")
        inflight = threading.Thread(target=_push_recording, args=(outcome, url, body, "inflight", key), daemon=True)
        inflight.start()
        time.sleep(0.3)
        os.kill(proc.pid, sig)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (proc.poll() is None or _session_processes(proc.pid)):
            time.sleep(0.05)
        assert proc.poll() is not None, f"the dashboard still runs 5 s after {sig.name}"
        assert _session_processes(proc.pid) == [], "a process it started outlived it"
        assert _port_free(port)
    finally:
        stop_server(proc)
    inflight.join(30)
    assert "not JSON" not in outcome, outcome["not JSON"]
    first = outcome.get("answer")
    assert first is None or first[0] in (201, 503), first
    print(f"{sig.name}: the push in flight got {first or outcome}")
    from overlapscope.analyzer.store import catalog
    from overlapscope.analyzer import runs as library_runs

    con = library_runs.open_catalog(db)  # not locked; and never half a run
    names = [r["name"] for r in catalog.runs(con)]
    assert "before" in names and set(names) <= {"before", "inflight"}
    assert all(r["ranks"] == r["world_size"] and r["headline"] for r in catalog.runs(con))
    con.close()
    proc, url = start_server(db, "--api-tokens", str(tokens))  # the push again, as overlapscope push retries
    try:
        status, again = push_raw(url, body, "inflight", key=key)
        assert status in (200, 201), again
        if first is not None and first[0] == 201:
            assert status == 200 and again == first[1]
        assert [r["run_id"] for r in runs(url, "inflight")] == [again["run_id"]]
    finally:
        stop_server(proc)


def _push_recording(outcome: dict, url: str, body: bytes, name: str, key: str) -> None:
    """A push whose server may stop under it: its (status, answer), or how it failed."""
    try:
        outcome["answer"] = push_raw(url, body, name, key=key)
    except (OSError, http.client.HTTPException) as err:  # the connection closed without an answer
        outcome["no answer"] = err
    except ValueError as err:  # an answer that is not JSON (uvicorn's plain-text 500)
        outcome["not JSON"] = err


def test_whatif_and_the_perfetto_download(server):
    import gzip as gz

    url, _, _ = server
    status, pushed = push_raw(url, zipped(SAMPLES / "ddp"), "whatif-api")
    assert status == 201
    run_id = pushed["run_id"]
    status, answer = request(url, "GET", f"/runs/{run_id}/whatif", [("bucket-mb", "5"), ("sweep", "tokens=0.5x,2x")])
    assert status == 200 and answer["label"] == "--bucket-mb 5"
    assert [p["value"] for p in answer["sweep"]["points"]] == ["0.5x", "2x"]
    from overlapscope.analyzer.api import whatif
    from overlapscope.analyzer.predict.changes import Changes
    from test_docs import documented_gaps

    assert answer["predicted"] == pytest.approx(whatif([str(SAMPLES / "ddp")], Changes(bucket_mb=5.0))["predicted"])
    assert documented_gaps(answer) == []
    for bad in ([("colour", "red")], [("bucket-mb", "lots")], [("sync", "maybe")]):
        status, answer = request(url, "GET", f"/runs/{run_id}/whatif", bad)
        assert status == 400 and "\n" not in answer["error"]
    # the Perfetto export as a download: the file `export --perfetto` writes
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request("GET", f"/api/v1/runs/{run_id}/perfetto")
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, body[:200]
        assert f"run-{run_id}.perfetto.json.gz" in response.getheader("content-disposition")
    finally:
        conn.close()
    trace = json.loads(gz.decompress(body))
    assert trace["overlapscope_export"]["format"] == "overlapscope-perfetto/1"
    assert {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"} >= {
        "overlapscope: exposed comm", "overlapscope: collectives", "overlapscope: steps", "overlapscope: findings"}
    assert request(url, "GET", "/runs/99999/perfetto")[0] == 404


def test_no_answer_names_the_servers_folders(server, tmp_path):
    """A pushed run's files are named as sent (the body's name and its members), never by the
    server's temporary folder: in the run, its what-if, its check and its errors."""
    import tempfile

    url, _, _ = server
    single = (SAMPLES / "ddp" / "rank-0.pt.trace.json.gz").read_bytes()
    status, first = push_raw(url, zipped(SAMPLES / "ddp"), "paths")
    assert status == 201
    assert push_raw(url, zipped(SAMPLES / "ddp"), "paths")[0] == 201
    run_id = first["run_id"]
    answers = [request(url, "GET", f"/runs/{run_id}")[1], request(url, "GET", f"/runs/{run_id}/whatif")[1],
               request(url, "GET", f"/runs/{run_id}/whatif", [("bucket-mb", "5")])[1],
               request(url, "GET", f"/runs/{run_id + 1}/check")[1]]
    bad = tmp_path / "rank-0.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": 7}]}')
    answers.append(push_raw(url, bad.read_bytes(), "bad", file="rank-0.json")[1])
    answers.append(push_raw(url, single, "single", file="rank-0.pt.trace.json.gz")[1])
    text = json.dumps(answers)
    assert tempfile.gettempdir() not in text and "overlapscope-push-" not in text, text[:2000]
    files = answers[1]["run"]["files"]
    assert files and all(not f.startswith("/") for f in files), files


def _peak_rss_mib(pid: int) -> float:
    """The process's own peak resident memory (VmHWM): its children's never count."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def _server_pid(db: Path) -> int:
    (pid,) = [int(p) for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).count(str(db)) == 1]
    return pid


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _busy_trace(path: Path) -> bytes:
    """A one-rank trace of 48,000 kernels (15 MB of JSON, 1.1 MB gzipped)."""
    import random

    from builders import GpuTrace, write

    trace, rnd = GpuTrace(rank=0, world_size=1), random.Random(7)
    for s in range(40):
        trace.step(s, s * 100_000, 99_000)
        at = s * 100_000 + 10
        for k in range(1200):
            dur = rnd.uniform(5, 60)
            if k % 10 == 9:
                trace.comm(at, dur, nelems=rnd.randrange(1 << 16, 1 << 22))
            else:
                trace.kernel(at, dur)
            at += dur + rnd.uniform(0.5, 5)
    return Path(write(trace, path, gz=True)).read_bytes()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_pushes_leave_the_servers_memory_as_it_was(server, tmp_path):
    """Each push is decoded in a child process that exits (analyzer/runs/apart.py), so the
    server's own peak does not move with what pushes decode, stored or refused (decoded in the
    server, these four pushes raised its peak by 191 MiB; eight bombs at once by 5 GiB)."""
    url, db, _ = server
    body = _busy_trace(tmp_path / "busy.json.gz")
    assert len(body) < LIMIT_MB * 2**20
    pid = _server_pid(db)
    assert push_raw(url, zipped(SAMPLES / "ddp"), "warm-up")[0] == 201  # the server's own first-push costs
    before_mib = _peak_rss_mib(pid)
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(push_raw(url, body, f"busy-{i}", file="rank-0.json.gz")))
               for i in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert [status for status, _ in results] == [201] * 3, results
    assert results[0][1]["headline"]["step_ms"] > 90  # the run was decoded and stored, not refused
    refused = push_raw(url, body[: len(body) // 2], "cut", file="rank-0.json.gz")
    assert refused[0] == 400, refused
    grew_mib = _peak_rss_mib(pid) - before_mib
    assert grew_mib < 30, f"the server's peak grew by {grew_mib:.0f} MiB over 4 pushes"


def test_the_first_run_of_a_name_has_no_baseline_through_the_api(server):
    """The API gives the CLI's verdict on a name's first run: it passes with no baseline, and
    ``strict=1`` refuses it in one line."""
    url, _, _ = server
    status, answer = push_raw(url, zipped(SAMPLES / "ddp"), "first-of-its-name")
    assert status == 201, answer
    status, verdict = request(url, "GET", f"/runs/{answer['run_id']}/check")
    assert status == 200 and verdict["status"] == "no_baseline" and verdict["baseline"] is None
    assert verdict["regressed"] is False and verdict["value"] == answer["headline"]["exposed_comm_ms"]
    status, refused = request(url, "GET", f"/runs/{answer['run_id']}/check", [("strict", "1")])
    assert status == 400 and "nothing to compare" in refused["error"]


def test_every_store_and_refusal_has_an_audit_line_without_the_token(server):
    """One line per stored run and per refused write, with the client, the token's name (never
    the token) and why; names are quoted (a name is printable text: no newline to break a line)."""
    url, _, output = server
    status, answer = push_raw(url, zipped(SAMPLES / "ddp"), "audited 'run' ✓", tags=["commit=abc"])
    assert status == 201
    assert push_raw(url, b"{}", "audited-refused", token="not-a-token-of-this-server")[0] == 401
    assert push_raw(url, b"not json at all", "audited-bad")[0] == 400
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum("audit" in line for line in output) < 3:
        time.sleep(0.1)
    lines = [line for line in output if line.startswith("overlapscope: audit: ")]
    stored = [line for line in lines if f"run_id={answer['run_id']} " in line]
    assert len(stored) == 1 and stored[0].startswith("overlapscope: audit: store via=api client='127.0.0.1' ")
    assert "by='ci-bot'" in stored[0] and "name=\"audited 'run' ✓\"" in stored[0]
    (unknown,) = [line for line in lines if "name='audited-refused'" in line]
    assert "refuse" in unknown and "status=401" in unknown and "by=" not in unknown
    (bad,) = [line for line in lines if "name='audited-bad'" in line]
    assert "status=400" in bad and "by='ci-bot'" in bad and "reason=" in bad
    assert all(TOKEN not in line and OTHER_TOKEN not in line for line in output)
