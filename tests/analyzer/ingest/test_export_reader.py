"""An export read back (``ingest/exported.py``) goes through the same capped stream as a
trace: malformed headers and events are one-line refusals, rank files are named from
validated integers only, its temporary folder goes when the load ends (or after a
kill, with the next load's sweep), and Hypothesis mutations of a real export load or
are refused in one line, never an internal error."""

from __future__ import annotations

import copy
import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import SAMPLES
from overlapscope.analyzer import tempdirs
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import exported
from overlapscope.analyzer.ingest.inputs import resolve
from overlapscope.analyzer.ingest.limits import Limits
from overlapscope.cli import main

MAGIC = '{"overlapscope_export":'


@pytest.fixture(scope="module")
def export_text(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("export") / "ddp.json"
    assert main(["export", str(SAMPLES / "ddp"), "--perfetto", str(out)]) == 0
    return out.read_text()


def _parts(text: str) -> tuple[dict, str]:
    """The export's header (parsed) and the text after it."""
    end = text.index(',"displayTimeUnit"')
    return json.loads(text[len(MAGIC):end]), text[end:]


def _ours() -> set[str]:
    """The export folders this process holds (other test processes make theirs meanwhile)."""
    return {f for f in tempdirs.held() if os.path.basename(f).startswith("overlapscope-export-")}


HEADERS = [  # (case, change to the header, what the one line says)
    ("rank missing", lambda h: [r.pop("rank") for r in h["ranks"]], "missing required field `rank`"),
    ("rank a list", lambda h: h["ranks"][0].update(rank=[1]), "Expected `int`, got `array`"),
    ("rank a path", lambda h: h["ranks"][0].update(rank="../EXPPWN2"), "Expected `int`, got `str`"),
    ("rank an object", lambda h: h["ranks"][0].update(rank={"a": 1}), "Expected `int`, got `object`"),
    ("rank negative", lambda h: h["ranks"][0].update(rank=-1), "rank -1, out of range"),
    ("rank past int64", lambda h: h["ranks"][0].update(rank=2**70), "out of range"),
    ("rank twice", lambda h: h["ranks"][1].update(rank=0), "rank 0 twice"),
    ("ranks an object", lambda h: h.update(ranks={"a": 1}), "Expected `array`, got `object`"),
    ("no ranks", lambda h: h.update(ranks=[]), "lists no rank"),
    ("20,000 ranks", lambda h: h.update(ranks=[{"rank": i} for i in range(20_000)]), "20,000 ranks, more than"),
    ("format a number", lambda h: h.update(format=7), "Expected `str`, got `int`"),
    ("another format", lambda h: h.update(format="x"), "an export of another format"),
    ("manifest of wrong types", lambda h: h.update(manifest={"world_size": "x"}), "manifest does not match"),
    ("manifest a list", lambda h: h.update(manifest=[1]), "manifest does not match"),
    ("distributedInfo a list", lambda h: h["ranks"][0].update(distributedInfo=[1]), "distributedInfo"),
    ("deviceProperties an object", lambda h: h["ranks"][0].update(deviceProperties={"a": 1}), "deviceProperties"),
]


def _events_changed(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


BODIES = [  # (case, the export's text from the original, what the one line says)
    ("a pid that is an object", lambda t: _events_changed(t, '"pid":0', '"pid":{"a":1}'), "got `object` - at `$.pid`"),
    ("a pid that is true", lambda t: _events_changed(t, '"pid":0', '"pid":true'), "got `bool`"),
    ("a pid of no rank", lambda t: _events_changed(t, '"pid":0', '"pid":"../x"'), "which is no rank"),
    ("a pid of rank 9", lambda t: _events_changed(t, '"pid":0', '"pid":9'), "has pid 9, which is no rank"),
    ("cut in half", lambda t: t[:len(t) // 2], "the file ends inside"),
    ("data after the end", lambda t: t + "xx", "data after the export's end"),
    ("traceEvents twice", lambda t: _events_changed(t, '"traceEvents":[', '"traceEvents":[],"traceEvents":['),
     "traceEvents given twice"),
    ("no traceEvents", lambda t: t[:t.index(',"traceEvents"')] + "}", "no traceEvents"),
    ("traceEvents an object", lambda t: _events_changed(t, '"traceEvents":[', '"traceEvents":{"a":['), "as a list"),
    ("header cut", lambda t: t[:200], "the file ends inside the export's header"),
]


@pytest.mark.parametrize("case, change, words", HEADERS, ids=[c[0] for c in HEADERS])
def test_a_malformed_header_is_one_line(tmp_path, capsys, export_text, case, change, words):
    header, rest = _parts(export_text)
    change(header)
    path = tmp_path / "run.json"
    path.write_text(MAGIC + json.dumps(header) + rest)
    before = _ours()
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and words in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert _ours() <= before  # nothing left in the temporary folder
    assert not any("EXPPWN" in n for n in os.listdir(tmp_path.parent))  # no rank became a path


@pytest.mark.parametrize("case, change, words", BODIES, ids=[c[0] for c in BODIES])
def test_malformed_events_are_one_line(tmp_path, capsys, export_text, case, change, words):
    path = tmp_path / "run.json"
    path.write_text(change(export_text))
    before = _ours()
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and words in err, err
    assert _ours() <= before


def test_the_export_reads_back_whatever_its_layout(tmp_path, export_text):
    """Pretty-printed (events over many lines, '}' before ',' inside them) and compact alike:
    the same ranks and events as the original."""
    doc = json.loads(export_text)
    indented = json.dumps(doc, indent=2)
    indented = MAGIC + indented[indented.index(": ") + 2:]  # the first bytes name an export: the rest is free
    layouts = {"compact": json.dumps(doc, separators=(",", ":")), "indented": indented,
               "spaced": json.dumps(doc).replace("},", "} ,")}
    want = {r: sum(1 for e in doc["traceEvents"] if e["pid"] == r) for r in (0, 1)}
    for name, text in layouts.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        split = exported.split(str(path), Limits())
        try:
            got = {r: len(json.load(open(os.path.join(split.bundle, f"rank-{r}.json")))["traceEvents"]) for r in (0, 1)}
            assert got == want, name
            assert sorted(os.listdir(split.bundle)) == ["manifest.json", "rank-0.json", "rank-1.json"]
        finally:
            tempdirs.remove(split.folder)


def test_small_windows_split_events_at_their_ends(tmp_path, export_text, monkeypatch):
    """Windows much smaller than the file (and smaller than some events): every event once."""
    monkeypatch.setattr(exported, "WINDOW_BYTES", 300)
    monkeypatch.setattr(exported, "FLUSH_BYTES", 1000)
    doc = json.loads(export_text)
    path = tmp_path / "run.json"
    path.write_text(export_text)
    split = exported.split(str(path), Limits())
    try:
        got = [e for r in (0, 1) for e in json.load(open(os.path.join(split.bundle, f"rank-{r}.json")))["traceEvents"]]
    finally:
        tempdirs.remove(split.folder)
    key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
    assert sorted(map(key, got)) == sorted(map(key, doc["traceEvents"]))


def test_the_split_goes_when_the_load_ends(tmp_path, export_text):
    path = tmp_path / "run.json.gz"
    path.write_bytes(gzip.compress(export_text.encode()))
    before = _ours()
    assert main(["analyze", str(path)]) == 0
    assert main(["ingest", str(path), "--run", "x", "--db", str(tmp_path / "c.duckdb")]) == 0
    assert _ours() <= before
    inputs = resolve([str(path)])  # held by the caller until it releases them
    (folder,) = inputs.temporary
    assert os.path.isdir(folder) and inputs.manifest is not None and inputs.manifest_source == f"{path}#manifest"
    inputs.release()
    assert not os.path.exists(folder)


def test_a_killed_loads_split_is_swept_by_the_next(tmp_path, export_text):
    """kill -9 while the split is held: the folder stays until a later load sweeps it."""
    path = tmp_path / "run.json"
    path.write_text(export_text)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from overlapscope.analyzer.ingest.inputs import resolve\n"
        "i = resolve([sys.argv[1]]); print(i.temporary[0], flush=True); sys.stdin.read()"), str(path)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True)
    folder = holder.stdout.readline().strip()
    try:
        assert os.path.isdir(folder)
        assert os.path.basename(folder) not in tempdirs.sweep()  # held by a live process: kept
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        time.sleep(tempdirs.LOCK_GRACE_S)  # (a load in another process may sweep it first)
        resolve([str(SAMPLES / "ddp")])  # any load sweeps
        assert not os.path.exists(folder)
    finally:
        if holder.poll() is None:
            holder.kill()


# --- fuzzing ---------------------------------------------------------------------------------

LIMITS = Limits(max_trace_bytes=32 << 20, max_archive_bytes=32 << 20, max_value_bytes=1 << 20,
                max_tokens=200_000, max_archive_members=64)
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)


@pytest.fixture(scope="module")
def small_export(export_text) -> dict:
    """The export parsed once with its first 200 events (parsing the 10 MB text for each fuzzed
    example took most of the test's time)."""
    doc = json.loads(export_text)
    doc["traceEvents"] = doc["traceEvents"][:200]
    return doc


def _outcome(path) -> None:
    """Loads, or is refused in one line naming the file; never a folder left behind."""
    before = _ours()
    try:
        inputs = resolve([str(path)], LIMITS)
    except InputError as err:
        assert "\n" not in str(err) and str(path) in str(err), str(err)
    else:
        inputs.release()
    assert _ours() <= before


@pytest.mark.slow
@FUZZ
@given(where=st.sampled_from(["header", "rank", "event", "top"]), key=st.sampled_from(
    ["rank", "distributedInfo", "deviceProperties", "hostname", "format", "ranks", "manifest", "pid", "ph", "ts",
     "traceEvents", "displayTimeUnit"]), value=json_values, index=st.integers(min_value=0, max_value=10_000))
def test_fuzzed_export_values(tmp_path, small_export, where, key, value, index):
    doc = copy.deepcopy(small_export)
    target = {"header": doc["overlapscope_export"], "top": doc,
              "rank": doc["overlapscope_export"]["ranks"][index % 2],
              "event": doc["traceEvents"][index % len(doc["traceEvents"])]}[where]
    target[key] = value
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))  # the header first: still an export
    _outcome(path)


@pytest.mark.slow
@FUZZ
@given(edits=st.lists(st.tuples(st.integers(min_value=0), st.binary(min_size=0, max_size=4)), min_size=1,
                      max_size=6), gz=st.booleans())
def test_fuzzed_export_bytes(tmp_path, export_text, edits, gz):
    data = bytearray(export_text[:60_000].encode() + b"]}")  # the header and the first events
    for at, new in edits:
        at = len(MAGIC) + at % (len(data) - len(MAGIC))  # the magic stays: it is what makes it an export
        data[at:at + len(new)] = new
    path = tmp_path / ("fuzz.json.gz" if gz else "fuzz.json")
    path.write_bytes(gzip.compress(bytes(data)) if gz else bytes(data))
    _outcome(path)


def test_an_exports_events_before_the_first_step_are_kept(tmp_path, capsys, export_text):
    """An export counts ts from the run's first step (its header's zero_ns): events before it
    are negative there and kept, where a Kineto trace's negative ts are left out."""
    doc = json.loads(export_text)
    assert doc["overlapscope_export"]["zero_ns"] and any(e.get("ts", 0) < 0 for e in doc["traceEvents"])
    path = tmp_path / "run.json"
    path.write_text(export_text)
    assert main(["analyze", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["run"]["dropped_events"] == {} and "negative ts" not in err
