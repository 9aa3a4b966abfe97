"""``overlapscope dashboard``: its settings, the catalog it prepares, a real start."""

from __future__ import annotations

import os
import json
import subprocess
import sys
import time
import urllib.request
from argparse import Namespace
from pathlib import Path

import pytest

from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog
from overlapscope import cli
from overlapscope.cli import dashboard as cli_dashboard
from overlapscope.server.settings import from_env
from conftest import ROOT


def args(**kw) -> Namespace:
    base = dict(db=None, port=8501, address=None, max_upload_mb=None, no_samples=False, api_tokens=None)
    return Namespace(**{**base, **kw})


def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["dashboard", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for option in ("--db", "--port", "--max-upload-mb", "--no-samples", "--address", "--api-tokens"):
        assert option in out


def test_server_environment_and_streamlit_options(tmp_path):
    from overlapscope.server import asgi as server

    tokens = tmp_path / "tokens"
    tokens.write_text("0123456789abcdef0123 ci\n")
    env = cli_dashboard.server_environment(args(db=str(tmp_path / "c.duckdb"), port=9123, max_upload_mb=64,
                                                no_samples=True, address="127.0.0.1", api_tokens=str(tokens)),
                                           environ={})
    settings = from_env(env)  # what the pages will read
    assert settings.db_path == (tmp_path / "c.duckdb").resolve()
    assert settings.max_upload_bytes == 64 * 1024 * 1024 and not settings.load_samples
    assert settings.api_tokens == tokens.resolve()
    options = server.streamlit_options(settings, 9123, "127.0.0.1")
    assert options["server.port"] == 9123 and options["server.maxUploadSize"] == 64
    assert options["server.address"] == "127.0.0.1" and options["browser.gatherUsageStats"] is False
    assert options["client.showErrorDetails"] == "none", "no traceback (server paths) reaches a visitor"
    assert server.app_path() == ROOT / "dashboard" / "app.py"


def test_default_catalog_is_the_user_data_dir(tmp_path):
    env = cli_dashboard.server_environment(args(), environ={})
    assert env["OVERLAPSCOPE_DB"] == str(catalog.default_path().resolve())
    assert from_env(env).load_samples and from_env(env).api_tokens is None


@pytest.mark.parametrize("bad", [dict(port=0), dict(port=70000), dict(max_upload_mb=0)])
def test_bad_options_fail_in_one_line(capsys, tmp_path, bad):
    argv = ["dashboard", "--db", str(tmp_path / "c.duckdb")]
    if "port" in bad:
        argv += ["--port", str(bad["port"])]
    else:
        argv += ["--max-upload-mb", str(bad["max_upload_mb"])]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("overlapscope: error: --") and err.count("\n") == 1


def test_bad_setting_in_the_environment_fails_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("OVERLAPSCOPE_TIMELINE_MARKS", "many")
    assert cli.main(["dashboard", "--db", str(tmp_path / "c.duckdb")]) == 2
    assert "OVERLAPSCOPE_TIMELINE_MARKS" in capsys.readouterr().err


def test_it_prepares_the_catalog_and_serves(monkeypatch, tmp_path, dashboard_bundles):
    from overlapscope.server import asgi as server

    for name in ("OVERLAPSCOPE_DB", "OVERLAPSCOPE_MAX_UPLOAD_MB", "OVERLAPSCOPE_NO_SAMPLES", "OVERLAPSCOPE_API_TOKENS"):
        monkeypatch.delenv(name, raising=False)  # the command sets them in this process: undone after the test
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "one").symlink_to(dashboard_bundles[0], target_is_directory=True)
    monkeypatch.setenv("OVERLAPSCOPE_SAMPLES_DIR", str(samples))
    served = {}
    monkeypatch.setattr(server, "serve", lambda settings, port, address: served.update(
        settings=settings, port=port, address=address) or 0)
    db = tmp_path / "new" / "catalog.duckdb"
    assert cli.main(["dashboard", "--db", str(db), "--port", "8765"]) == 0
    assert served["settings"].db_path == db.resolve() and served["port"] == 8765
    assert served["address"] == "127.0.0.1", "without --address it listens on this machine only"
    assert os.environ["OVERLAPSCOPE_DB"] == str(db.resolve()), "the pages read their settings from the process"
    from overlapscope.dashboard import samples as loading

    assert loading.wait(120), "the samples load in the background while the server serves"
    con = runs.open_catalog(db, read_only=True)
    assert [r["name"] for r in catalog.runs(con)] == ["sample/one"]
    con.close()


def test_a_bad_token_file_stops_the_start_in_one_line(capsys, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("# the team's tokens\nshort ci\n")
    assert cli.main(["dashboard", "--db", str(tmp_path / "c.duckdb"), "--api-tokens", str(tokens)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tokens}:2: the token is shorter than 16 characters" in err
    assert "short" not in err.replace("shorter", ""), "the token itself is never printed"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"the dashboard did not answer at {url} within {timeout_s} s")


def start_server(db: Path, *extra: str, env: dict | None = None, tries: int = 3):
    """``overlapscope dashboard`` as a user starts it (``env``: more environment); returns (process, url).

    The port is one the system had free a moment before: another test's server can take it
    first (two test processes start servers side by side), and then this one exits at once.
    Such a start is tried again on another port; a start that fails ``tries`` times fails
    with what the server printed."""
    exe = Path(sys.executable).parent / "overlapscope"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "overlapscope.cli"]
    for attempt in range(tries):
        port = _free_port()
        proc = subprocess.Popen([*command, "dashboard", "--db", str(db), "--port", str(port),
                                 "--address", "127.0.0.1", *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OVERLAPSCOPE_NO_SAMPLES": "1", **(env or {})})
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc)
        except AssertionError as err:
            stop_server(proc)
            exited = proc.returncode is not None and "exited" in str(err)
            if exited and attempt + 1 < tries:
                continue
            printed = proc.stdout.read().decode(errors="replace")[-2000:] if proc.stdout else ""
            raise AssertionError(f"{err}; it printed: {printed}") from None
        return proc, url


def stop_server(proc) -> None:
    """Stop the process group this test started (the CLI and its Streamlit child)."""
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_the_server_starts_and_serves(tmp_path):
    proc, url = start_server(tmp_path / "catalog.duckdb")
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and b"<html" in r.read().lower()
    finally:
        stop_server(proc)


def test_the_samples_load_while_the_server_already_answers(tmp_path, dashboard_bundles):
    samples = tmp_path / "samples"
    samples.mkdir()
    for i, bundle in enumerate(dashboard_bundles):
        (samples / f"s{i}").symlink_to(bundle, target_is_directory=True)
    started = time.monotonic()
    proc, url = start_server(tmp_path / "catalog.duckdb", env={"OVERLAPSCOPE_NO_SAMPLES": "0",
                                                               "OVERLAPSCOPE_SAMPLES_DIR": str(samples)})
    try:
        healthy_s = time.monotonic() - started
        deadline = time.monotonic() + 120
        runs = 0
        while time.monotonic() < deadline and runs < 2:
            with urllib.request.urlopen(f"{url}/api/v1/health", timeout=10) as r:
                runs = json.loads(r.read())["runs"]
            time.sleep(0.5)
        assert runs == 2, "both samples stored"
        print(f"healthy after {healthy_s:.1f} s, samples in after {time.monotonic() - started:.1f} s")
    finally:
        stop_server(proc)
    output = proc.stdout.read().decode(errors="replace")
    assert "loading 2 sample runs" in output and "Traceback" not in output


def test_a_stopped_first_load_of_the_samples_finishes_on_the_next_start(tmp_path):
    """A first start stopped after one of three samples: the next start loads the two missing
    ones (not the stored one again); once the user stores a run of their own, none load."""
    from conftest import SAMPLES
    from overlapscope.analyzer.store import retention
    from overlapscope.analyzer import runs
    from overlapscope.dashboard import samples as loading

    folder = tmp_path / "samples"
    folder.mkdir()
    for bundle in ("ddp", "ddp_straggler", "ddp_tiny_buckets"):
        (folder / bundle).symlink_to(SAMPLES / bundle, target_is_directory=True)
    db = tmp_path / "catalog.duckdb"
    con = runs.open_catalog(db)
    runs.ingest(con, [str(folder / "ddp")], name="sample/ddp", tags={"sample": "true"})  # then stopped
    con.close()
    try:
        assert loading.start(str(db), folder, quiet=True) is not None
        assert loading.PROGRESS.total == 2
        assert loading.wait(240) and loading.PROGRESS.error is None
    finally:
        runs.shared(db).stop()
    con = runs.open_catalog(db)
    assert sorted(r["name"] for r in catalog.runs(con)) == ["sample/ddp", "sample/ddp_straggler",
                                                           "sample/ddp_tiny_buckets"]
    assert catalog.missing_samples(con, folder) == []
    # the user's own run, and a sample deleted: it stays deleted
    runs.ingest(con, [str(folder / "ddp")], name="mine")
    retention.delete(con, next(r["run_id"] for r in catalog.runs(con, "sample/ddp_straggler")))
    assert catalog.missing_samples(con, folder) == []
    con.close()
    assert loading.start(str(db), folder, quiet=True) is None
    runs.shared(db).stop()
