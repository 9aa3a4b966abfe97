"""``overlapscope push URL PATH... --run NAME``: send a run to a team's dashboard (what a CI job runs).

A single ``.zip``, ``.json`` or ``.json.gz`` goes as it is; a run folder (or
several files) is zipped first, with its ``manifest.json``. The upload streams
from disk with a progress bar on a terminal (elsewhere, a CI log: a plain line
at each quarter of a large upload); the server decodes and stores the run and answers
with its id and headline. Any refusal (no token, a bad run, too large) exits 2
with one line.

Each invocation sends one ``Idempotency-Key`` (a fresh UUID) with every attempt:
when a server stopping or busy answers 503, or the connection drops before the
answer, the push is sent again with the same key, and a server that had stored
it answers with that run instead of storing it twice.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
import zipfile
from pathlib import Path

from overlapscope.analyzer import tempdirs
from overlapscope.analyzer.errors import UsageError
from overlapscope.cli.catalog import parse_tags
from overlapscope.cli.common import describe, emit
from overlapscope.contract.names import MANIFEST_FILE

ENV_TOKEN = "OVERLAPSCOPE_TOKEN"
SINGLE = (".zip", ".json", ".json.gz")
STORED = (".gz", ".zip")  # already compressed: zipped as they are
PLAIN_PROGRESS_MIN_BYTES = 4 * 2**20  # smaller uploads take a moment: no lines in a CI log
RETRY_WAITS_S = (2.0, 5.0)  # waits before the 2nd and 3rd attempt (a server restarting, a catalog held)


def add_parser(sub) -> None:
    p = sub.add_parser("push", help="send a run to a dashboard's API (a CI job's step)",
                       description="Upload a run (a folder of per-rank traces, trace files, or a .zip) to a "
                                   "dashboard's HTTP API, which stores it in its catalog. The token comes from "
                                   "--token-file or $OVERLAPSCOPE_TOKEN.")
    p.add_argument("url", metavar="URL", help="the dashboard, e.g. https://overlap.example.com")
    p.add_argument("paths", nargs="+", metavar="PATH", help="a run folder, trace files, or one .zip "
                   "(- reads one from standard input)")
    p.add_argument("--run", required=True, metavar="NAME", help="the run's name (runs of one name form a history)")
    p.add_argument("--tag", action="append", metavar="KEY=VALUE", help="a tag (repeatable), e.g. commit=abc123")
    p.add_argument("--token-file", metavar="FILE", help="a file holding the API token (default: $OVERLAPSCOPE_TOKEN)")
    p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
    p.set_defaults(func=run_push, error_status=2)  # any failure of a push is 2, as a refusal


def read_token(token_file: str | None) -> str | None:
    """The token: the first non-empty line of ``token_file``, else ``$OVERLAPSCOPE_TOKEN``."""
    if token_file:
        try:
            lines = [line.strip() for line in Path(token_file).read_text().splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(f"{token_file}: cannot read the token file ({type(err).__name__})") from None
        if not lines:
            raise UsageError(f"{token_file}: the token file is empty")
        return lines[0].split()[0]
    return os.environ.get(ENV_TOKEN) or None


def bundle(paths: list[str], folder: Path) -> Path:
    """The file to upload: a single .zip or trace file as it is (``-``: what standard input
    holds, spooled into ``folder``), else a zip of the run's files."""
    from overlapscope.analyzer.ingest.inputs import STDIN, resolve, spool_stdin

    if paths == [STDIN]:
        from overlapscope.analyzer.ingest.limits import from_env

        return Path(spool_stdin(str(folder), from_env()))
    if STDIN in paths:
        raise UsageError("give - (standard input) on its own")
    if len(paths) == 1 and os.path.isfile(paths[0]) and paths[0].lower().endswith(SINGLE):
        return Path(paths[0])
    for path in paths:
        if os.path.isfile(path) and not path.lower().endswith(SINGLE) and os.path.basename(path) != MANIFEST_FILE:
            raise UsageError(f"{path}: not a trace (.json, .json.gz) or a .zip of traces")
    inputs = resolve(paths)  # missing paths and folders without traces fail here, in one line
    inputs.release()  # only the names are read here
    if any(s.member for s in inputs.sources):
        raise UsageError("give one .zip on its own, or folders and trace files (not a mix)")
    files = [s.path for s in inputs.sources] + ([inputs.manifest_source] if inputs.manifest_source else [])
    target = folder / "run.zip"
    used: set[str] = set()
    with zipfile.ZipFile(target, "w") as zf:
        for i, path in enumerate(files):
            name = os.path.basename(path)
            arcname = name if name not in used else f"{i}-{name}"
            used.add(arcname)
            compress = zipfile.ZIP_STORED if name.lower().endswith(STORED) else zipfile.ZIP_DEFLATED
            zf.write(path, arcname, compress_type=compress)
    return target


def _bar():
    """A progress callback drawing one line on stderr (a terminal), redrawn at most every 0.1 s."""
    state = {"last": 0.0}

    def report(sent: int, total: int) -> None:
        now = time.monotonic()
        if now - state["last"] < 0.1 and sent < total:
            return
        state["last"] = now
        width = 30
        done = int(width * sent / max(total, 1))
        print(f"\ruploading [{'#' * done}{'.' * (width - done)}] {sent / 2**20:,.1f} / {total / 2**20:,.1f} MiB",
              end="" if sent < total else "\n", file=sys.stderr, flush=True)

    return report


def _lines():
    """A progress callback for a log (stderr no terminal): one plain line each time the upload
    passes a quarter, for uploads of ``PLAIN_PROGRESS_MIN_BYTES`` or more."""
    state = {"quarter": 0, "sent": 0}

    def report(sent: int, total: int) -> None:
        if sent < state["sent"]:  # sent again (a retry): count from the start
            state["quarter"] = 0
        state["sent"] = sent
        if total < PLAIN_PROGRESS_MIN_BYTES or 4 * sent < (state["quarter"] + 1) * total:
            return
        state["quarter"] = 4 * sent // total
        print(f"overlapscope: uploaded {100 * sent / total:.0f} % ({sent / 2**20:,.1f} / {total / 2**20:,.1f} MiB)",
              file=sys.stderr, flush=True)

    return report


def progress(as_json: bool):
    """How the upload reports: a bar on a terminal, plain lines in a log, nothing with --json."""
    if sys.stderr.isatty():
        return _bar()
    return None if as_json else _lines()


def upload(server, path: Path, params: list, on_progress) -> tuple[int, dict]:
    """POST the run, again (same key) after a 503 or a connection lost before the answer; the
    last (status, answer)."""
    from overlapscope.cli.remote import Unreachable
    from overlapscope.contract.api import IDEMPOTENCY_HEADER, RUNS

    headers = {IDEMPOTENCY_HEADER: str(uuid.uuid4())}
    for wait_s in (*RETRY_WAITS_S, None):
        try:
            status, answer = server.post_file(RUNS, str(path), params, on_progress, headers)
            if status != 503 or wait_s is None:
                return status, answer
            why = server.refusal(status, answer)
        except Unreachable as err:
            if wait_s is None:
                raise
            why = str(err)
        print(f"overlapscope: {why}; trying again in {wait_s:g} s with the same Idempotency-Key",
              file=sys.stderr, flush=True)
        time.sleep(wait_s)
    raise AssertionError("the last attempt returns or raises")


def run_push(args) -> int:
    from overlapscope.analyzer import api

    name, tags = api.check_run_name(args.run), api.check_tags(parse_tags(args.tag))  # the server checks again
    from overlapscope.cli.remote import Server  # http.client: only a push needs it
    from overlapscope.contract.api import HEALTH, PREFIX, RUNS, Health, Pushed

    server = Server(args.url, read_token(args.token_file))
    health = server.get(HEALTH, shape=Health)
    if not health.get("writes"):
        raise UsageError(f"{server.url}: this server accepts no pushes (it was started without --api-tokens)")
    with tempdirs.folder("push") as tmp:
        path = bundle(args.paths, Path(tmp))
        size, limit = path.stat().st_size, health.get("max_upload_bytes")
        if limit and size > limit:
            shown = "(stdin)" if args.paths == ["-"] else path
            raise UsageError(f"{shown}: {size / 2**20:,.1f} MiB is more than {server.url} accepts "
                             f"({limit / 2**20:,.0f} MiB)")
        params = [("name", name), ("file", path.name)] + [("tag", f"{k}={v}") for k, v in tags.items()]
        status, answer = upload(server, path, params, progress(args.json))
    if status not in (200, 201):  # 200: an earlier attempt stored it
        raise UsageError(server.refusal(status, answer))
    server.checked(answer, Pushed, f"POST {PREFIX}{RUNS}")
    return emit(answer, args.json, lambda r: print(
        f"stored run {r['run_id']} ({r['name']}) on {server.url}: {describe(r['headline'])}"))
