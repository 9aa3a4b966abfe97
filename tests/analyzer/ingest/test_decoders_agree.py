"""The C scanner and the msgspec decoder give the same tables, on every kind of trace."""

from __future__ import annotations

import re

import pytest

from overlapscope.analyzer.ingest import frames
from overlapscope.analyzer.ingest.decode import DETAILS, decode_source
from overlapscope.analyzer.ingest.inputs import TraceSource
from builders import CpuTrace, GpuTrace, write
from conftest import REFERENCE, SAMPLES

pytestmark = pytest.mark.skipif(frames._kineto_scan is None, reason="the C scanner is not built")

FILES = sorted(p for p in REFERENCE.glob("gpu_*/*.json.gz")) + \
    [REFERENCE / "malformed" / "cpu_only_gloo_rank34.pt.trace.json.gz"] + \
    [SAMPLES / b / "rank-0.pt.trace.json.gz" for b in ("ddp", "fsdp_per_block", "fsdp1_per_block", "hsdp_2x2")]


def _same(a, b):
    assert a.meta == b.meta
    assert a.counts == b.counts
    for table in ("events", "tracks", "collectives", "flows", "memory"):
        ta, tb = getattr(a, table), getattr(b, table)
        assert ta.column_names == tb.column_names, table
        for name in ta.column_names:
            va = [str(x) if name == "args" else x for x in ta.column(name).to_pylist()]
            vb = [str(x) if name == "args" else x for x in tb.column(name).to_pylist()]
            assert va == vb, (table, name)


@pytest.mark.parametrize("path", [p for p in FILES if p.exists()], ids=lambda p: p.parent.name)
@pytest.mark.parametrize("detail", DETAILS)
def test_real_traces(path, detail):
    source = TraceSource(str(path))
    _same(decode_source(source, detail, use_scanner=True), decode_source(source, detail, use_scanner=False))


def test_synthetic_edge_cases(tmp_path):
    t = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1, name='weird "quoted" \\ name \u00e9').comm(20, 40, step=1)
    trace = t.to_json()
    trace["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": "no_args", "pid": "Spans", "tid": "x", "ts": 5, "dur": 1},
        {"ph": "X", "name": "no cat, no dur", "pid": 100, "tid": 100, "ts": 7.25},
        {"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": 100, "tid": 100, "ts": 9,
         "args": {"Bytes": 16, "Total Allocated": 1024, "Total Reserved": 2048, "Device Type": 1, "Device Id": 0}},
        {"ph": "s", "id": 7, "pid": 100, "tid": 100, "ts": 3, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 7, "pid": 0, "tid": 7, "ts": 4, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "C", "name": "counter", "pid": 0, "ts": 1, "args": {"x": [1, {"y": "}]"}]}},
    ]
    path = write(trace, tmp_path / "rank-0.json")
    for detail in DETAILS:
        _same(decode_source(TraceSource(path), detail, use_scanner=True),
              decode_source(TraceSource(path), detail, use_scanner=False))
    cpu = write(CpuTrace().step(1, 0, 100).op(0, 30).gloo(35, 55), tmp_path / "rank-1.json")
    _same(decode_source(TraceSource(cpu), "full", use_scanner=True),
          decode_source(TraceSource(cpu), "full", use_scanner=False))


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_scanner_reads_the_same_in_any_chunks(tmp_path, monkeypatch, chunk):
    """A token, an event or the header cut anywhere by the chunking reads the same:
    the scanner keeps only the unfinished tail of a chunk."""
    from overlapscope.analyzer.ingest import stream

    t = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1, name='k "q" \\ \u00e9').comm(20, 40, step=1)
    path = write(t, tmp_path / "rank-0.json", gz=True)
    whole = decode_source(TraceSource(path), "full")
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    _same(decode_source(TraceSource(path), "full"), whole)


def _outcome(path, detail="full", use_scanner=True):
    from overlapscope.analyzer.errors import InputError

    try:
        return decode_source(TraceSource(str(path)), detail, use_scanner=use_scanner)
    except InputError as err:
        return err.problem


def _read_alike(path) -> None:
    """Both decoders give the same tables of ``path`` at the full detail, or both refuse it."""
    outcomes = [_outcome(path), _outcome(path, use_scanner=False)]
    if isinstance(outcomes[0], str) or isinstance(outcomes[1], str):
        assert isinstance(outcomes[0], str) and isinstance(outcomes[1], str), outcomes
    else:
        _same(*outcomes)


# Spellings of ts and dur as they stand in the JSON text: the scanner reads the common ones in
# one pass (digits, a point, digits), the rest the long way; msgspec reads them all.
NUMBER_SPELLINGS = ["0", "-0", "7", "0.5", "10.25", "-3.5", "12345678901234567", "123456789012345678",
                    "9007199254740993", "1.0000000000000000000000001", "1e3", "2.5E-1", "0123", "1.", ".5", "-",
                    "01.5", "1.2.3", "+1", "0x10", "1e", "00"]


@pytest.mark.parametrize("spelling", NUMBER_SPELLINGS)
def test_numbers_read_alike(tmp_path, spelling):
    """Each spelling of a kernel's ts and dur: the same value from both decoders, or refused by both."""
    t = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1)
    text = __import__("json").dumps(t.to_json())
    kernel = text.index('"cat": "kernel"')
    at = text.index('"ts": ', kernel)
    end = text.index('"dur": 50', at) + len('"dur": 50')
    marked = text[:at] + f'"ts": {spelling}, "dur": {spelling}' + text[end:]
    assert marked != text
    path = tmp_path / "rank-0.json"
    path.write_text(marked)
    _read_alike(path)


def test_strings_read_alike_wherever_their_escapes_fall(tmp_path):
    """The scanner finds a string's end 16 bytes at a time: an escaped quote, an escaped
    backslash or a \\u escape at every offset across those blocks (names, and keys that
    are only ours once unescaped) reads as msgspec reads it."""
    t = GpuTrace().step(1, 0, 100)
    for k in range(40):
        for piece in ('"', "\\", "\u00e9", '"\\'):  # json.dumps writes them as \\", \\\\, \\u00e9
            t = t.kernel(k, 1, step=1, name="a" * k + piece + "b" * (39 - k))
    text = __import__("json").dumps(t.to_json())
    assert '\\"' in text and "\\\\" in text and "\\u00e9" in text
    text = text.replace('"cat": "kernel"', '"c\\u0061t": "kernel"', 3)  # a key of ours, escaped
    path = tmp_path / "rank-0.json"
    path.write_text(text)
    scanned = decode_source(TraceSource(str(path)), "full", use_scanner=True)
    _same(scanned, decode_source(TraceSource(str(path)), "full", use_scanner=False))
    names = set(scanned.events.column("name").to_pylist())
    assert "a" * 5 + '"' + "b" * 34 in names and "a" * 17 + "\\" + "b" * 22 in names


@pytest.mark.parametrize("spelling", ["7", "-7", "0", "-0", "007", "00", "-", "1.0", "1e2", "12345678901234567890"])
def test_integers_read_alike(tmp_path, spelling):
    """An event's pid and an args integer in each spelling (the scanner reads plain digits in
    one look, the rest the long way): the same rows from both decoders, or refused by both."""
    t = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1)
    text = __import__("json").dumps(t.to_json())
    kernel = text.index('"cat": "kernel"')
    pid = text.index('"pid": ', kernel)
    text = text[:pid] + f'"pid": {spelling}, "x_{spelling}": 1, "y": ' + text[pid + len('"pid": '):]
    args = text.index('"args": {', kernel) + len('"args": {')
    text = text[:args] + f'"z": {spelling}, ' + text[args:]
    path = tmp_path / "rank-0.json"
    path.write_text(text)
    _read_alike(path)


def _memory_and_flows(tmp_path, memory: list[dict], flow_ids: list, name: str = "rank-0.json"):
    trace = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1).comm(20, 40, step=1).to_json()
    trace["traceEvents"] += [
        {"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": 100, "tid": 100, "ts": 9 + k,
         "args": a} for k, a in enumerate(memory)]
    for k, flow_id in enumerate(flow_ids):
        trace["traceEvents"] += [
            {"ph": "s", "id": flow_id, "pid": 100, "tid": 100, "ts": 3 + k, "cat": "ac2g", "name": "ac2g"},
            {"ph": "f", "id": flow_id, "pid": 0, "tid": 7, "ts": 4 + k, "cat": "ac2g", "name": "ac2g", "bp": "e"}]
    return write(trace, tmp_path / name)


def test_memory_values_and_flow_ids_read_alike_whatever_their_type(tmp_path):
    """The full detail takes the allocator's values and integer flow ids while scanning; a
    value of another type (a numeric string, a missing key, an integer past int64) is read
    from the args as msgspec reads it: the same tables from both decoders, the values as
    given, and what msgspec refuses (a float where an integer belongs) refused by both."""
    memory = [{"Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2048, "Device Type": 1, "Device Id": 0},
              {"Bytes": -512, "Total Allocated": 512, "Total Reserved": 2048, "Device Type": 1, "Device Id": 0},
              {"Bytes": "4096", "Total Allocated": "8", "Device Id": 0},
              {"Device Id": 3},
              {}]
    path = _memory_and_flows(tmp_path, memory, [7, -3, "abc", "12", 0])
    scanned = _outcome(path)
    _same(scanned, _outcome(path, use_scanner=False))
    assert scanned.memory.column("bytes").to_pylist() == [512, -512, 4096, None, None]
    assert scanned.memory.column("total_allocated_bytes").to_pylist() == [1024, 512, 8, None, None]
    assert scanned.memory.column("device_id").to_pylist() == [0, 0, 0, 3, None]
    assert scanned.flows.column("flow_id").to_pylist() == [7, 7, -3, -3, None, None, 12, 12, 0, 0]
    for k, (odd_memory, odd_ids) in enumerate([([{"Bytes": 4.0}], [1]), ([{"Bytes": None}], [1]),
                                               ([{"Bytes": 2**70}], [1]), ([{}], [2**70]), ([{}], [1.5])]):
        _read_alike(_memory_and_flows(tmp_path, odd_memory, odd_ids, f"odd-{k}.json"))


def test_slices_flows_and_metadata_interleaved_read_alike(tmp_path):
    """The scanner keeps slice rows apart from metadata and flow rows, and reads the slices'
    columns as they are when none is dropped: interleaved in random orders, with and without
    dropped rows of each reason (slices and flows alike), both decoders give the same tables,
    counts and dropped reasons (in the same order), at every detail; events keep their file
    order (event ids, flows, thread names)."""
    import random

    base = GpuTrace().step(1, 0, 1000)
    for k in range(6):
        base = base.kernel(10 + 100 * k, 60 + 100 * k, step=1, name=f"k{k}").comm(70 + 100 * k, 90 + 100 * k, step=1)
    events = base.to_json()["traceEvents"]
    extra = [{"ph": "M", "name": "thread_name", "pid": 100, "tid": t, "args": {"name": f"thread {t}"}} for t in (100, 7)]
    extra += [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]
    for k in range(5):
        extra += [{"ph": "s", "id": k, "pid": 100, "tid": 100, "ts": 3 + k, "cat": "ac2g", "name": "ac2g"},
                  {"ph": "f", "id": k, "pid": 0, "tid": 7, "ts": 4 + k, "cat": "ac2g", "name": "ac2g", "bp": "e"}]
    extra += [{"ph": "i", "s": "t", "name": "mark", "cat": "cpu_instant_event", "pid": 100, "tid": 100, "ts": 11}]
    bad = [{"ph": "X", "cat": "kernel", "name": "neg", "pid": 0, "tid": 7, "ts": 5, "dur": -1},
           {"ph": "X", "cat": "kernel", "name": "nodur", "pid": 0, "tid": 7, "ts": 5},
           {"ph": "X", "cat": "kernel", "name": "huge", "pid": 0, "tid": 7, "ts": 5, "dur": 1e13},
           {"ph": "X", "cat": "kernel", "name": "far", "pid": 0, "tid": 7, "ts": 1e16, "dur": 1},
           {"ph": "s", "id": 99, "pid": 100, "tid": 100, "ts": 1e16, "cat": "ac2g", "name": "ac2g"}]
    rng = random.Random(13)
    for case in range(8):
        mixed = events + extra + (bad[case % len(bad):] if case % 2 else [])
        rng.shuffle(mixed)
        trace = {**base.to_json(), "traceEvents": mixed}
        path = write(trace, tmp_path / f"mixed-{case}.json")
        for detail in DETAILS:
            scanned, decoded = _outcome(path, detail), _outcome(path, detail, use_scanner=False)
            _same(scanned, decoded)
            assert list(scanned.counts["dropped"].items()) == list(decoded.counts["dropped"].items())
            names = [e["name"] for e in mixed if e["ph"] in "Xi" and e["name"] not in ("neg", "nodur", "huge", "far")]
            kept = scanned.events.column("name").to_pylist()
            assert kept == [n for n in names if n in kept], (case, detail)  # file order, whatever was kept
        dropped = _outcome(path, "full").counts["dropped"]
        assert sum(dropped.values()) == (len(bad) - case % len(bad) if case % 2 else 0)


def test_codes_numbered_and_matched_as_numpy_does():
    """columns.distinct_codes and columns.member (presence tables over small codes) give what
    np.unique and np.isin give, at every bound (the table, or the sort past it)."""
    import numpy as np

    from overlapscope.analyzer.ingest import columns as col

    rng = np.random.default_rng(7)
    for n, bound in ((0, 1), (1, 1), (1000, 3), (1000, 50_000), (5000, 10**9)):
        keys = rng.integers(0, bound, n)
        want_distinct, want_inverse = np.unique(keys, return_inverse=True)
        distinct, inverse = col.distinct_codes(keys, bound)
        assert distinct.tolist() == want_distinct.tolist() and inverse.tolist() == want_inverse.ravel().tolist()
        wanted = rng.integers(0, bound, 4).tolist() if n else []
        assert col.member(keys, wanted, bound).tolist() == np.isin(keys, wanted).tolist()


def test_optional_strings_intern_by_text_in_first_seen_order():
    """The interning behind dictionary columns (collective names, dtypes): codes index the
    distinct values in first-seen order, None is -1, and a value given as a number and as
    text is one value (its text)."""
    from overlapscope.analyzer.ingest.columns import optional_strs

    codes, values = optional_strs(["b", None, "a", "b", None])
    assert codes.tolist() == [0, -1, 1, 0, -1] and values == ["b", "a"]
    codes, values = optional_strs([1, "1", None, "x"])
    assert codes.tolist() == [0, 0, -1, 1] and values == ["1", "x"]
    codes, values = optional_strs([])
    assert codes.tolist() == [] and values == []


def test_the_scanner_parses_without_the_gil():
    """feed() releases the GIL while it parses, so a thread runs Python meanwhile (a one-rank
    run imports the analyzer and opens its store while its file is scanned: engine/one.py).
    A thread counting in Python advances during one long feed() call; with the GIL held
    throughout it could run only while keep() is asked (a few times)."""
    import json
    import sys
    import threading

    from overlapscope.analyzer.ingest import scan

    t = GpuTrace().step(1, 0, 2_000_000)
    for i in range(100_000):  # one name: keep() is asked twice (each call takes the GIL back)
        t.kernel(i * 10, 5, step=1)
    text = json.dumps(t.to_json()).encode()
    scanner = frames._kineto_scan.Scanner(scan.scanner_keep("overlap"), take_keys=[])
    count = [0]
    stop = threading.Event()

    def counting() -> None:
        while not stop.is_set():
            count[0] += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # the keep() calls take the GIL back: let them have it soon
    helper = threading.Thread(target=counting)
    helper.start()
    try:
        before = count[0]
        scanner.feed(text)
        during = count[0] - before
    finally:
        stop.set()
        helper.join()
        sys.setswitchinterval(interval)
    assert scanner.finish()["n"] > 100_000
    assert during > 50_000, during  # with the GIL held throughout: 1,842 (measured)


def test_concat_joins_ranges_as_slicing_does():
    """The scanner's concat (the args column where rows were dropped) copies ranges that
    follow each other in one go: the bytes are those of the ranges one after another,
    whatever their order, gaps, overlaps and empty ranges."""
    import random

    import numpy as np

    from overlapscope.analyzer.ingest import _kineto_scan

    rng = random.Random(13)
    data = bytes(rng.randrange(256) for _ in range(4096))
    for _ in range(300):
        starts, lengths, at = [], [], rng.randrange(64)
        for _ in range(rng.randrange(12)):
            if rng.random() < 0.3:  # anywhere: a jump back, a gap or an overlap
                at = rng.randrange(4000)
            n = rng.choice([0, 0, 1, rng.randrange(40)])
            n = min(n, len(data) - at)
            starts.append(at)
            lengths.append(n)
            at += n if rng.random() < 0.8 else rng.randrange(1, 9)  # mostly back to back
            at = min(at, len(data))
        got = _kineto_scan.concat(data, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64))
        assert got == b"".join(data[s:s + n] for s, n in zip(starts, lengths)), (starts, lengths)
    with pytest.raises(ValueError):
        _kineto_scan.concat(data, np.array([4090], dtype=np.int64), np.array([10], dtype=np.int64))


def test_any_mix_of_phases_and_times_reads_alike(tmp_path_factory):
    """Hypothesis draws event lists of every kept phase (slices, instants, metadata, flows)
    in any order, before or after the trace's first kernel, with times and durations of
    every kind (valid, missing, negative, huge, of the wrong type) and args of every kind
    (ids, sizes and the allocator's values as written, as strings, floats, past int64,
    null, nested): both decoders give the same tables, counts and dropped reasons at every
    detail, or refuse the trace with the same problem. It found three disagreements (a
    collective kernel's stream, a row kept without its args, an instant's duration)."""
    from hypothesis import example, given, settings, strategies as st

    times = st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False), st.none(),
                      st.sampled_from([-5, 1e13, 1e16, "7", True]))
    # args values as written, and odd: strings of digits, floats, past int64, null, nested
    ids = st.one_of(st.integers(0, 9), st.sampled_from(["12", "x", 1.5, 2**70, -(2**63), None, [1], {"a": 1}]))
    args = st.fixed_dictionaries({}, optional={
        "correlation": ids, "External id": ids, "stream": ids, "device": ids, "flops": ids,
        "Collective name": st.sampled_from(["all_reduce", "", 5]), "In msg nelems": ids,
        "Group size": ids, "dtype": st.sampled_from(["Float", None]),
        "Input Dims": st.sampled_from([[[4, 4]], [], "x"]),
        "Bytes": ids, "Total Allocated": ids, "Device Id": ids, "Device Type": ids})
    slices = st.fixed_dictionaries(
        {"ph": st.sampled_from(["X", "i"]),
         "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "cpu_instant_event",
                                 "user_annotation"]),
         "name": st.sampled_from(["k", "aten::mm", "cudaLaunchKernel", "ProfilerStep#1", "nccl:all_reduce",
                                  "record_param_comms", "[memory]", "c10d::allreduce_", 'q"\\u00e9']),
         "pid": st.sampled_from([0, 100, "Spans", -1]), "tid": st.sampled_from([7, 100, "x"]), "ts": times,
         "dur": times},
        optional={"args": args})
    metas = st.fixed_dictionaries({"ph": st.just("M"), "name": st.sampled_from(["thread_name", "process_name"]),
                                   "pid": st.sampled_from([0, 100]), "tid": st.sampled_from([7, 100]),
                                   "args": st.fixed_dictionaries({"name": st.sampled_from(["a", "b"])})})
    flows = st.fixed_dictionaries({"ph": st.sampled_from(["s", "f"]), "id": st.integers(0, 3),
                                   "pid": st.sampled_from([0, 100]), "tid": st.sampled_from([7, 100]),
                                   "ts": times, "cat": st.just("ac2g"), "name": st.just("ac2g")})
    folder = tmp_path_factory.mktemp("mix")
    base = GpuTrace().step(1, 0, 100).kernel(0, 50, step=1).to_json()

    kernel = {"ph": "X", "cat": "kernel", "name": "nccl:all_reduce", "pid": 0, "tid": 7, "ts": 0, "dur": 1}
    annotation = {"ph": "X", "cat": "user_annotation", "name": "[memory]", "pid": 0, "tid": 7, "ts": 0, "dur": 0}

    @settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(st.lists(st.one_of(slices, metas, flows), max_size=12), st.booleans())
    @example([{**kernel, "args": {"Collective name": "all_reduce", "stream": 1.5}}], False)  # found by it
    @example([{**annotation, "args": {"Bytes": 0}}], False)  # a row kept without its args: found by it
    @example([{**kernel, "ph": "i", "dur": 1e16}], False)  # an instant's huge dur: found by it
    def check(extra, first):
        # first: the drawn events before the trace's kernel, so that a CPU op is kept on
        # condition (a CPU-only trace's compute) until the kernel shows it a GPU trace
        events = extra + base["traceEvents"] if first else base["traceEvents"] + extra
        path = write({**base, "traceEvents": events}, folder / "rank-0.json")
        for detail in DETAILS:
            scanned, decoded = _outcome(path, detail), _outcome(path, detail, use_scanner=False)
            if isinstance(scanned, str) or isinstance(decoded, str):  # the scanner says where, too
                assert re.sub(r" \(at byte \d+\)$", "", str(scanned)) == decoded, (detail, scanned, decoded)
            else:
                _same(scanned, decoded)
                assert list(scanned.counts["dropped"].items()) == list(decoded.counts["dropped"].items())
                durations = scanned.events.column("dur_ns").to_pylist()
                assert min(durations) >= 0  # an instant's dur, whatever it says, is none (0)

    check()
