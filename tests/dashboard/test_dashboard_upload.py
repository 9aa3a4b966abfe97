"""Upload: files -> a stored run, one error line per bad file, nothing half-stored, a size limit."""

from __future__ import annotations

import re

import functools
import io
import zipfile
from pathlib import Path

import pytest

from overlapscope.dashboard.text import md, plain
from overlapscope.analyzer import runs
from overlapscope.analyzer.store import catalog
from overlapscope.analyzer.errors import UsageError
from overlapscope.server import uploads
from overlapscope.dashboard import data
from test_dashboard_pages import no_errors, open_app


class Upload:
    """What Streamlit's UploadedFile offers the upload code: a name and the bytes."""

    def __init__(self, name: str, content: bytes):
        self.name, self.content = name, content

    def getbuffer(self) -> memoryview:
        return memoryview(self.content)


def bundle_files(bundle: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(bundle.iterdir()) if p.is_file() and ".json" in p.name]


def stored_runs(db: Path) -> list[dict]:
    if not db.exists():
        return []
    con = runs.open_catalog(db, read_only=True)
    try:
        return catalog.runs(con)
    finally:
        con.close()


# --- the upload code -----------------------------------------------------------------


def test_tags_and_default_names():
    assert uploads.parse_tags("branch=main, gpus=8\nnote = a b") == {"branch": "main", "gpus": "8", "note": "a b"}
    assert uploads.parse_tags("") == {}
    with pytest.raises(UsageError, match="key=value"):
        uploads.parse_tags("branch")
    assert uploads.default_run_name(["llama-rank-0.pt.trace.json.gz", "llama-rank-1.pt.trace.json.gz"]) == "llama"
    assert uploads.default_run_name(["run.zip"]) == "run"
    # a bundle's manifest names no run: the traces' prefix does
    assert uploads.default_run_name(["manifest.json", "llama-rank-0.json.gz", "llama-rank-1.json.gz"]) == "llama"
    # files named only by their rank: a name by the time, never "rank" or "rank-0"
    assert re.fullmatch(r"upload-\d{8}-\d{4}", uploads.default_run_name(["rank-0.pt.trace.json.gz",
                                                                        "rank-1.pt.trace.json.gz"]))


def test_the_name_is_proposed_from_the_files_and_a_typed_one_kept(monkeypatch, tmp_path):
    """Before: the name box stayed empty and the first click said "Give the run a name."."""
    at = open_app(monkeypatch, tmp_path / "catalog.duckdb", "views/upload.py")
    at.file_uploader(key="upload_files").set_value([(f"llama-rank-{r}.pt.trace.json.gz", b"{}", "application/gzip")
                                                    for r in range(2)])
    at.run()
    assert at.text_input(key="upload_name").value == "llama"
    assert any("2,048 MiB for all the files together" in c.value for c in at.caption)
    at.text_input(key="upload_name").input("mine").run()
    at.file_uploader(key="upload_files").set_value([("other.zip", b"PK", "application/zip")])
    at.run()
    assert at.text_input(key="upload_name").value == "mine"


def test_save_keeps_every_file_under_a_safe_name(tmp_path):
    paths = uploads.save([Upload("../../etc/rank-0.json", b"{}"), Upload("rank 0.json", b"[]"),
                          Upload("rank-0.json", b"1")], tmp_path)
    assert [p.name for p in paths] == ["rank-0.json", "rank_0.json", "1-rank-0.json"]
    assert all(p.parent == tmp_path for p in paths)
    assert paths[2].read_bytes() == b"1"


def test_size_limit():
    files = [Upload("a.json", b"x" * 600), Upload("b.json", b"x" * 600)]
    assert uploads.size_error(files, 2000) is None
    assert "more than the limit" in uploads.size_error(files, 1000)


def test_cheap_checks_name_each_bad_file(tmp_path):
    paths = uploads.save([Upload("notes.txt", b"hi"), Upload("broken.zip", b"not a zip"),
                          Upload("rank-0.json", b"{}"), Upload("manifest.json", b"{}")], tmp_path)
    errors = uploads.check_each(paths, tmp_path)
    assert len(errors) == 2
    assert errors[0].startswith("notes.txt: not a trace") and errors[1].startswith("broken.zip: ")
    assert str(tmp_path) not in " ".join(errors), "errors name the uploaded file, not the temp folder"


def test_store_is_all_or_nothing(tmp_path, dashboard_bundles):
    db = str(tmp_path / "catalog.duckdb")
    data.prepare_catalog(db, load_samples=False)
    ingest = functools.partial(data.ingest, db)
    good = [Upload(n, c) for n, c in bundle_files(dashboard_bundles[0])]
    rank0 = next(u for u in good if u.name.startswith("rank-0"))
    bad = [rank0, Upload("rank-1.json", b'{"traceEvents": 5}'), Upload("rank-2.json", b"{oops")]
    seen = []
    outcome = uploads.store(ingest, bad, tmp_path / "up1", "broken", {}, lambda f, s: seen.append(f))
    assert outcome.run_id is None and len(outcome.errors) == 2
    assert outcome.errors[0].startswith(("rank-1.json: ", "rank-2.json: "))
    assert {e.split(":")[0] for e in outcome.errors} == {"rank-1.json", "rank-2.json"}
    assert stored_runs(Path(db)) == []
    outcome = uploads.store(ingest, good, tmp_path / "up2", "good", {"k": "v"}, lambda f, s: seen.append(f))
    assert outcome.errors == [] and outcome.run_id == 1
    assert [r["name"] for r in stored_runs(Path(db))] == ["good"]
    assert seen[-1] == 1.0 and all(0 <= f <= 1 for f in seen)


def test_progress_is_reported_while_the_work_runs():
    import time

    ticks = []
    result = uploads.run_with_progress(lambda: time.sleep(0.6) or 42, lambda f, s: ticks.append((f, s)), 1.0)
    assert result == 42 and len(ticks) >= 2
    assert all(0 < f < 0.96 for f, _ in ticks) and ticks == sorted(ticks)


# --- the page ------------------------------------------------------------------------


def _upload(at, files: list[tuple[str, bytes]], name: str = "uploaded"):
    at.file_uploader(key="upload_files").set_value([(n, c, "application/octet-stream") for n, c in files])
    at.run()
    at.text_input(key="upload_name").input(name)
    at.button(key="upload_go").click()
    return at.run()


def test_upload_page_stores_a_run_and_selects_it(monkeypatch, tmp_path, dashboard_bundles):
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py")
    _upload(at, bundle_files(dashboard_bundles[0]), "my-run")
    no_errors(at)
    assert any("Stored run #1" in s.value for s in at.success)
    assert [(r["name"], r["ranks"]) for r in stored_runs(db)] == [("my-run", 2)]
    at.switch_page("views/overview.py").run()
    no_errors(at)
    assert at.sidebar.selectbox[0].value == 1 and at.title[0].value == f"Overview · {md('my-run')}"


def test_upload_page_takes_a_zip(monkeypatch, tmp_path, dashboard_bundles):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, content in bundle_files(dashboard_bundles[0]):
            zf.writestr(f"run/{name}", content)
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py")
    _upload(at, [("run.zip", buffer.getvalue())], "zipped")
    no_errors(at)
    assert [r["name"] for r in stored_runs(db)] == ["zipped"]


def test_upload_page_names_each_bad_file_and_stores_nothing(monkeypatch, tmp_path, dashboard_bundles):
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py")
    rank0 = next(f for f in bundle_files(dashboard_bundles[0]) if f[0].startswith("rank-0"))
    _upload(at, [rank0, ("rank-7.json", b"not json at all"), ("rank-8.json.gz", b"not gzip")], "bad")
    assert not at.exception
    lines = [plain(e.value) for e in at.error]
    assert {line.split(":")[0] for line in lines} == {"rank-7.json", "rank-8.json.gz"}
    assert stored_runs(db) == []


def test_upload_page_enforces_the_size_limit(monkeypatch, tmp_path):
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py", OVERLAPSCOPE_MAX_UPLOAD_MB="1")
    _upload(at, [("rank-0.json", b" " * (2 * 1024 * 1024))], "big")
    assert [plain(e.value) for e in at.error][0].startswith("the upload holds 2.0 MiB, more than the limit of 1 MiB")
    assert stored_runs(db) == []


def test_upload_page_wants_a_name_and_good_tags(monkeypatch, tmp_path, dashboard_bundles):
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py")
    files = bundle_files(dashboard_bundles[0])
    _upload(at, files, "  ")
    assert [e.value for e in at.error] == ["Give the run a name."]
    at.text_input(key="upload_tags").input("nokey")
    _upload(at, files, "named")
    assert "key=value" in plain(at.error[0].value)
    assert stored_runs(db) == []


def test_with_api_tokens_an_upload_needs_one_and_records_its_name(monkeypatch, tmp_path, dashboard_bundles):
    tokens = tmp_path / "tokens"
    tokens.write_text("page-token-0123456789ab alice\n")
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py", OVERLAPSCOPE_API_TOKENS=str(tokens))
    assert at.text_input(key="upload_token").proto.type == at.text_input(key="upload_token").proto.PASSWORD
    assert not at.get("file_uploader") and any("valid API token" in i.value for i in at.info)  # no chooser yet
    at.text_input(key="upload_token").input("not-the-token-at-all").run()
    assert not at.get("file_uploader") and any("valid API token" in e.value for e in at.error)
    assert "not-the-token" not in " ".join(e.value for e in at.error)
    assert stored_runs(db) == []
    at.text_input(key="upload_token").input("page-token-0123456789ab").run()
    _upload(at, bundle_files(dashboard_bundles[0]), "refused")
    no_errors(at)
    assert [(r["name"], r["pushed_by"]) for r in stored_runs(db)] == [("refused", "alice")]


def test_upload_page_reads_a_lone_surrogate_as_replacement(monkeypatch, tmp_path):
    """The audit's crash through the page: a \\ud800 escape in a kernel name is stored as
    U+FFFD, and the run says so."""
    import json

    from builders import GpuTrace

    text = json.dumps(GpuTrace(rank=0, world_size=1).step(1, 0, 100).kernel(0, 50, step=1).to_json())
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py")
    _upload(at, [("rank-0.json", text.replace('"sm90', '"\\ud800sm90', 1).encode())], "surrogate")
    no_errors(at)
    assert [r["name"] for r in stored_runs(db)] == ["surrogate"]
    at.switch_page("views/overview.py").run()
    no_errors(at)
    assert any("1 invalid UTF-8 sequences or lone surrogate escapes read as U+FFFD" in plain(w.value)
               for w in at.warning)


def test_every_read_of_an_upload_keeps_the_upload_caps(tmp_path):
    """A broken rank-0 beside a bomb (64 MiB of blanks in a small gzip), against an upload
    cap of 8 MiB per trace: the ingest stops at the broken file, and the look at the other
    files that names every bad one reads the bomb within the same cap (under the CLI's caps
    it would inflate all of it, to call it an empty file)."""
    import gzip

    from overlapscope.analyzer.ingest.limits import Limits

    caps = Limits(max_trace_bytes=8 << 20, max_archive_members=4)
    db = str(tmp_path / "catalog.duckdb")
    data.prepare_catalog(db, load_samples=False)
    ingest = functools.partial(data.ingest, db, limits=caps)
    bomb = gzip.compress(b" " * (64 << 20), compresslevel=9)
    files = [Upload("rank-0.json", b"{"), Upload("rank-1.json.gz", bomb)]
    outcome = uploads.store(ingest, files, tmp_path / "up", "bomb", {}, lambda f, s: None, limits=caps)
    assert outcome.run_id is None
    assert any(e.startswith("rank-1.json.gz: decompresses to more than 8 MiB") for e in outcome.errors), outcome.errors
    # the cheap checks too: an archive of more files than the upload allows
    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as zf:
        for r in range(5):
            zf.writestr(f"rank-{r}.json", b"{}")
    paths = uploads.save([Upload("many.zip", many.getvalue())], tmp_path / "up2")
    (error,) = uploads.check_each(paths, tmp_path / "up2", caps)
    assert error.startswith("many.zip: zip archive holds 5 files, more than the limit of 4")
    assert stored_runs(Path(db)) == []


def test_an_internal_error_is_one_line_to_the_visitor(monkeypatch, tmp_path, dashboard_bundles, capfd):
    """A bug while storing (here: the ingest raises) shows one line, without its message or
    traceback (server paths), which go to the server's log; the run name in the status
    label is text, never Markdown."""
    def broken_ingest(*args, **kwargs):
        raise RuntimeError("secret detail at /srv/overlapscope/data")

    import streamlit

    labels = []
    status = streamlit.status

    def recorded_status(label, *args, **kwargs):
        labels.append(label)
        return status(label, *args, **kwargs)

    monkeypatch.setattr(data, "ingest", broken_ingest)
    monkeypatch.setattr(streamlit, "status", recorded_status)
    db = tmp_path / "catalog.duckdb"
    at = open_app(monkeypatch, db, "views/upload.py")
    files = bundle_files(dashboard_bundles[0])
    _upload(at, files, "![x](http://example.invalid/x.png)")
    assert not at.exception
    assert "![" not in labels[0] and "](" not in labels[0]
    assert plain(labels[0]) == f"Storing {len(files)} file(s) as run ![x](http://example.invalid/x.png)..."
    (line,) = [plain(e.value) for e in at.error]
    assert line.startswith("internal error (RuntimeError) while storing the run: nothing was stored")
    assert "secret" not in line and "/srv" not in line
    log = capfd.readouterr().err
    assert "secret detail at /srv/overlapscope/data" in log and "Traceback" in log
    assert stored_runs(db) == []


def test_an_upload_holds_at_most_256_files(tmp_path):
    """Each file of an upload is a decode in the server (1,024 tiny ranks took 114 s): an
    upload's archive holds at most 256, refused in one line before any decode."""
    from overlapscope.analyzer.ingest.limits import for_uploads

    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as zf:
        for r in range(257):
            zf.writestr(f"rank-{r}.json", b"{}")
    paths = uploads.save([Upload("ranks.zip", many.getvalue())], tmp_path / "up")
    (error,) = uploads.check_each(paths, tmp_path / "up", for_uploads(2 << 30))
    assert error.startswith("ranks.zip: zip archive holds 257 files, more than the limit of 256")
