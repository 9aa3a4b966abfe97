"""Hypothesis mutates real traces (bytes, JSON values and structure, gzip and zip
framing): every mutant loads or is refused with the one-line input error, never an
internal error, within the caps; a refused ingest leaves the catalog as it was."""

from __future__ import annotations

import gzip
import io
import json
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from builders import CpuTrace, GpuTrace
from conftest import REFERENCE, SAMPLES
from overlapscope.analyzer import runs
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest.decode import decode_source
from overlapscope.analyzer.ingest.inputs import TraceSource
from overlapscope.analyzer.ingest.limits import Limits
from overlapscope.analyzer.store import runstore

pytestmark = pytest.mark.slow

# Small caps: a mutant that inflates is refused long before it costs memory.
LIMITS = Limits(max_trace_bytes=32 << 20, max_value_bytes=4 << 20, max_tokens=200_000, max_archive_members=64)
FUZZ = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _seeds() -> list[dict]:
    """Real traces to mutate: a synthetic GPU and CPU trace, the first events of a
    sample run (a real gloo DDP capture), and a real reference file when present."""
    gpu = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1).comm(30, 40, step=1).memory(5, 4096).to_json()
    cpu = CpuTrace().step(1, 0, 100).op(0, 30).gloo(35, 20).to_json()
    sample = json.load(gzip.open(SAMPLES / "ddp" / "rank-0.pt.trace.json.gz"))
    sample["traceEvents"] = sample["traceEvents"][:300] + [e for e in sample["traceEvents"]
                                                            if e.get("name", "").startswith("ProfilerStep")]
    seeds = [gpu, cpu, sample]
    ref = REFERENCE / "malformed" / "cpu_only_gloo_rank34.pt.trace.json.gz"
    if ref.exists():
        seeds.append(json.load(gzip.open(ref)))
    return seeds


SEEDS = _seeds()

# Text with lone surrogates too (json.dumps writes them as \ud800 escapes), which no
# UTF-8 can hold: the decoders read them as U+FFFD.
texts = st.text(st.characters(exclude_categories=()), max_size=20) | st.sampled_from(
    ["\ud800", "a\udfffb", "\udbff\udc00", "\\ud800", "\udc00\ud800"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12)
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"]
HEADER = ["distributedInfo", "deviceProperties", "baseTimeNanoseconds", "traceEvents", "schemaVersion"]


def _check(path, tmp_path) -> None:
    """Loads, or is refused in one line naming the file; a refused ingest stores nothing."""
    try:
        decode_source(TraceSource(str(path)), "attribution", limits=LIMITS)
    except InputError as err:
        assert "\n" not in str(err) and str(path) in str(err)
    db = tmp_path / "fuzz.duckdb"
    con = runs.open_catalog(db)
    try:
        before = _stored(con, db)
        try:
            runs.ingest(con, [str(path)], "fuzz", workers=1, limits=LIMITS)
        except InputError:
            assert _stored(con, db) == before
    finally:
        con.close()


def _stored(con, db) -> tuple:
    """What the catalog holds: its runs and ranks, and the folders of its run store."""
    store = runstore.store_dir(db)
    return (con.execute("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM ranks)").fetchone(),
            sorted(p.name for p in store.iterdir()) if store.is_dir() else [])


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), where=st.integers(min_value=0), field=st.sampled_from(FIELDS),
       value=json_values, drop=st.booleans())
def test_json_values_and_structure(tmp_path_factory, seed, where, field, value, drop):
    trace = json.loads(json.dumps(SEEDS[seed]))
    events = trace["traceEvents"]
    event = events[where % len(events)]
    if drop:
        event.pop(field, None)
    else:
        event[field] = value
    tmp = tmp_path_factory.mktemp("v")
    path = tmp / "rank-0.json"
    path.write_text(json.dumps(trace, allow_nan=True))
    _check(path, tmp)


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), key=st.sampled_from(HEADER), value=json_values)
def test_header_values(tmp_path_factory, seed, key, value):
    trace = json.loads(json.dumps(SEEDS[seed]))
    trace[key] = value
    tmp = tmp_path_factory.mktemp("h")
    path = tmp / "rank-0.json"
    path.write_text(json.dumps(trace, allow_nan=True))
    _check(path, tmp)


@FUZZ
@given(seed=st.sampled_from(range(len(SEEDS))), edits=st.lists(
    st.tuples(st.integers(min_value=0), st.sampled_from(["flip", "insert", "delete"]), st.binary(min_size=1, max_size=4)),
    min_size=1, max_size=6), gz=st.booleans())
def test_bytes(tmp_path_factory, seed, edits, gz):
    data = bytearray(json.dumps(SEEDS[seed]).encode())
    if gz:
        data = bytearray(gzip.compress(bytes(data)))
    for at, how, blob in edits:
        i = at % max(len(data), 1)
        if how == "flip":
            data[i] ^= blob[0] or 1
        elif how == "insert":
            data[i:i] = blob
        else:
            del data[i:i + len(blob)]
    tmp = tmp_path_factory.mktemp("b")
    path = tmp / ("rank-0.json.gz" if gz else "rank-0.json")
    path.write_bytes(bytes(data))
    _check(path, tmp)


@FUZZ
# member names without NUL (zipfile cuts a name there, to nothing) or "/" (a folder, not a member)
@given(seed=st.sampled_from(range(len(SEEDS))),
       names=st.lists(st.text(st.characters(blacklist_characters="\x00/"), min_size=1, max_size=40), min_size=1,
                      unique=True, max_size=3),
       cut=st.one_of(st.none(), st.integers(min_value=0)), gz=st.booleans())
def test_zip_framing(tmp_path_factory, seed, names, cut, gz):
    data = json.dumps(SEEDS[seed]).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for n in names:
            zf.writestr(n + (".json.gz" if gz else ".json"), gzip.compress(data) if gz else data)
    raw = buf.getvalue()
    if cut is not None:
        raw = raw[: cut % max(len(raw), 1)]
    tmp = tmp_path_factory.mktemp("z")
    path = tmp / "run.zip"
    path.write_bytes(raw)
    from overlapscope.analyzer.engine.load import load  # an archive is resolved as the CLI does

    try:
        load([str(path)], workers=1, detail="attribution", limits=LIMITS)
    except InputError as err:
        assert "\n" not in str(err)
