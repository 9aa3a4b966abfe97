"""The client of the HTTP API (``overlapscope push`` and ``check --server``) against servers that
answer what no overlapscope server would: a real HTTP server (http.server in a thread) serving
malformed JSON, a 500, an HTML page, or objects without the keys the commands read.

What must hold: check exits 0 or 1 only for a verdict it read whole, and 2 with one line
naming the server for anything else; every failure of push exits 2 with one line.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from overlapscope.analyzer import gate
from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog
from overlapscope.cli import main
from conftest import SAMPLES

JSON = "application/json"
HTML = "text/html; charset=utf-8"
PAGE = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>proxy login</body></html>"


class FakeServer:
    """A real HTTP server on a free port answering ``answers[(method, path)]``: a list of
    (status, content type, body) used in turn (the last one repeats). It records each
    request's method, path, headers and body size."""

    def __init__(self, answers: dict):
        self.answers = {key: list(value) for key, value in answers.items()}
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                size = 0
                while size < length:  # read the whole body, as a server does, in blocks
                    block = self.rfile.read(min(1 << 20, length - size))
                    if not block:
                        break
                    size += len(block)
                path = self.path.split("?", 1)[0]
                owner.requests.append({"method": self.command, "path": path, "headers": dict(self.headers),
                                       "body_bytes": size})
                queue = owner.answers.get((self.command, path)) or [(404, JSON, b'{"error": "no such route"}')]
                status, kind, body = queue.pop(0) if len(queue) > 1 else queue[0]
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _serve

            def log_message(self, *args):  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _json(value) -> tuple[int, str, bytes]:
    return 200, JSON, json.dumps(value).encode()


@pytest.fixture(scope="module")
def real_answers(tmp_path_factory):
    """What a real server answers for a run named ``gate`` (ddp, then the straggler): the
    verdict and the list come from a real catalog, as the API computes them."""
    db = tmp_path_factory.mktemp("remote") / "catalog.duckdb"
    con = runs.open_catalog(db)
    try:
        for bundle in ("ddp", "ddp_straggler"):
            runs.ingest(con, [str(SAMPLES / bundle)], "gate")
        stored = catalog.runs(con, "gate")
        verdict = gate.check(con, stored[0]["run_id"])
        pushed = {k: stored[0][k] for k in ("run_id", "name", "tags", "pushed_by", "headline")}
    finally:
        con.close()
    return json.loads(json.dumps({"runs": stored}, default=str)), json.loads(json.dumps(verdict, default=str)), pushed


def _check(url: str, capsys, *extra) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["check", "--run", "gate", "--server", url, *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_error_line(err: str, url: str) -> None:
    assert err.count("\n") == 1 and err.startswith(f"overlapscope: error: {url}: "), err
    assert "Traceback" not in err and "internal error" not in err


def test_check_reads_a_real_verdict_and_exits_1_on_the_regression(real_answers, capsys):
    runs, verdict, _ = real_answers
    assert verdict["regressed"] is True
    with FakeServer({("GET", "/api/v1/runs"): [_json(runs)],
                     ("GET", f"/api/v1/runs/{verdict['run']['run_id']}/check"): [_json(verdict)]}) as server:
        rc, out, err = _check(server.url, capsys)
    assert rc == 1 and out.startswith("REGRESSION: exposed_comm_ms"), out + err


@pytest.mark.parametrize("case", ["empty object", "malformed JSON", "500 with JSON", "500 plain text", "HTML page",
                                  "wrong type", "list of runs missing", "another metric"])
def test_check_exits_2_in_one_line_for_an_answer_it_cannot_read(real_answers, capsys, case):
    runs, verdict, _ = real_answers
    check_route = ("GET", f"/api/v1/runs/{verdict['run']['run_id']}/check")
    bad = {
        "empty object": _json({}),
        "malformed JSON": (200, JSON, json.dumps(verdict).encode()[:-40]),
        "500 with JSON": (500, JSON, b'{"error": "the catalog broke"}'),
        "500 plain text": (500, "text/plain; charset=utf-8", b"Internal Server Error"),
        "HTML page": (200, HTML, PAGE),
        "wrong type": _json({**verdict, "regressed": "yes"}),
        "another metric": _json({**verdict, "metric": "step_ms"}),
    }
    answers = {("GET", "/api/v1/runs"): [_json(runs)], check_route: [bad.get(case, _json(verdict))]}
    if case == "list of runs missing":
        answers[("GET", "/api/v1/runs")] = [_json({"items": runs["runs"]})]
    with FakeServer(answers) as server:
        rc, out, err = _check(server.url, capsys)
    assert rc == 2 and out == "", (case, out, err)
    _one_error_line(err, server.url)
    expected = {"empty object": "missing required field `metric`", "malformed JSON": "not an overlapscope API answer",
                "500 with JSON": "HTTP 500: the catalog broke", "500 plain text": "HTTP 500",
                "HTML page": "not an overlapscope API answer", "wrong type": "`$.regressed`",
                "list of runs missing": "missing required field `runs`", "another metric": "answered for step_ms"}
    assert expected[case] in err, err


def test_check_exits_2_when_no_server_answers(capsys):
    with FakeServer({}) as server:
        url = server.url
    rc, _, err = _check(url, capsys)
    assert rc == 2 and "cannot reach the server" in err
    _one_error_line(err, url)


@pytest.mark.parametrize("case", ["health empty", "health HTML", "push answers 500 HTML", "push answers {}",
                                  "push answers a string id"])
def test_every_failure_of_push_exits_2_in_one_line(real_answers, capsys, monkeypatch, case):
    _, _, pushed = real_answers
    health = _json({"version": "9.9", "runs": 0, "writes": True, "max_upload_bytes": 2**30})
    answers = {
        "health empty": {("GET", "/api/v1/health"): [_json({})]},
        "health HTML": {("GET", "/api/v1/health"): [(200, HTML, PAGE)]},
        "push answers 500 HTML": {("GET", "/api/v1/health"): [health],
                                  ("POST", "/api/v1/runs"): [(500, HTML, PAGE)]},
        "push answers {}": {("GET", "/api/v1/health"): [health], ("POST", "/api/v1/runs"): [(201, JSON, b"{}")]},
        "push answers a string id": {("GET", "/api/v1/health"): [health], ("POST", "/api/v1/runs"): [
            (201, JSON, json.dumps({**pushed, "run_id": "7"}).encode())]},
    }[case]
    monkeypatch.setenv("OVERLAPSCOPE_TOKEN", "a-token-of-no-server-0123")
    with FakeServer(answers) as server:
        capsys.readouterr()
        rc = main(["push", server.url, str(SAMPLES / "ddp"), "--run", "gate"])
        out = capsys.readouterr()
    assert rc == 2 and out.out == "", (case, out)
    _one_error_line(out.err, server.url)
    assert "a-token-of-no-server" not in out.err


def test_push_sends_again_with_the_same_key_after_a_503(real_answers, capsys, monkeypatch):
    """A server stopping answers 503; the push is sent again with the same Idempotency-Key and
    the answer of the server that had stored it (200) is the push's. Another push, another key."""
    from overlapscope.cli import push

    _, _, stored = real_answers
    monkeypatch.setattr(push, "RETRY_WAITS_S", (0.01, 0.01))
    monkeypatch.setenv("OVERLAPSCOPE_TOKEN", "a-token-of-no-server-0123")
    health = _json({"version": "9.9", "runs": 0, "writes": True, "max_upload_bytes": 2**30})
    stopping = (503, JSON, b'{"error": "the server is stopping: the push may have been stored"}')
    with FakeServer({("GET", "/api/v1/health"): [health],
                     ("POST", "/api/v1/runs"): [stopping, (200, JSON, json.dumps(stored).encode())]}) as server:
        capsys.readouterr()
        assert main(["push", server.url, str(SAMPLES / "ddp"), "--run", "gate", "--json"]) == 0
        out = capsys.readouterr()
        assert json.loads(out.out) == stored
        assert "HTTP 503: the server is stopping" in out.err and "same Idempotency-Key" in out.err
        assert main(["push", server.url, str(SAMPLES / "ddp"), "--run", "gate", "--json"]) == 0
    keys = [r["headers"].get("Idempotency-Key") for r in server.requests if r["method"] == "POST"]
    assert len(keys) == 3 and keys[0] == keys[1] != keys[2] and all(len(k) == 36 for k in keys)
    sizes = {r["body_bytes"] for r in server.requests if r["method"] == "POST"}
    assert len(sizes) == 1 and sizes.pop() > 0, "each attempt sent the whole run"


def test_push_gives_up_after_its_retries_with_exit_2(capsys, monkeypatch):
    from overlapscope.cli import push

    monkeypatch.setattr(push, "RETRY_WAITS_S", (0.01, 0.01))
    monkeypatch.setenv("OVERLAPSCOPE_TOKEN", "a-token-of-no-server-0123")
    health = _json({"version": "9.9", "runs": 0, "writes": True, "max_upload_bytes": 2**30})
    busy = (503, JSON, b'{"error": "the catalog is in use by another process on the server"}')
    with FakeServer({("GET", "/api/v1/health"): [health], ("POST", "/api/v1/runs"): [busy]}) as server:
        capsys.readouterr()
        assert main(["push", server.url, str(SAMPLES / "ddp"), "--run", "gate"]) == 2
        err = capsys.readouterr().err.splitlines()
    assert [r["method"] for r in server.requests] == ["GET", "POST", "POST", "POST"]
    assert len(err) == 3 and err[-1].startswith(f"overlapscope: error: {server.url}: HTTP 503: the catalog")


def test_a_large_push_logs_plain_progress_lines_where_stderr_is_no_terminal(real_answers, tmp_path, capsys,
                                                                          monkeypatch):
    """In a CI log (stderr captured here, no terminal) an upload of 8 MiB, sent in 1 MiB blocks,
    prints a line at 25, 50, 75 and 100 %; none with --json, none for a small run."""
    _, _, stored = real_answers
    monkeypatch.setenv("OVERLAPSCOPE_TOKEN", "a-token-of-no-server-0123")
    big = tmp_path / "big.zip"
    big.write_bytes(b"\0" * (8 * 2**20))  # the fake server stores nothing: any bytes do
    health = _json({"version": "9.9", "runs": 0, "writes": True, "max_upload_bytes": 2**30})
    created = (201, JSON, json.dumps(stored).encode())
    with FakeServer({("GET", "/api/v1/health"): [health], ("POST", "/api/v1/runs"): [created]}) as server:
        capsys.readouterr()
        assert main(["push", server.url, str(big), "--run", "gate"]) == 0
        lines = capsys.readouterr().err.splitlines()
        assert lines == [f"overlapscope: uploaded {pct} % ({mib:.1f} / 8.0 MiB)"
                         for pct, mib in ((25, 2), (50, 4), (75, 6), (100, 8))]
        assert main(["push", server.url, str(big), "--run", "gate", "--json"]) == 0
        assert capsys.readouterr().err == ""
        assert main(["push", server.url, str(SAMPLES / "ddp"), "--run", "gate"]) == 0
        assert capsys.readouterr().err == ""
    assert [r["body_bytes"] for r in server.requests if r["method"] == "POST"][:2] == [8 * 2**20] * 2
