"""Hostile inputs, one row each: the one-line refusal (exit 2, the file named, nothing
stored) or a documented warning with a correct analysis, never an internal error.
Each input goes through both decoders (the C scanner and msgspec), which must agree."""

from __future__ import annotations

import json
import time
import zipfile

import pytest

from builders import BASE_US, CpuTrace, GpuTrace, write
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import frames
from overlapscope.analyzer.ingest.decode import DETAILS, decode_source
from overlapscope.analyzer.ingest.inputs import TraceSource
from overlapscope.cli import main


def _gpu(rank=0, world_size=2) -> dict:
    return GpuTrace(rank=rank, world_size=world_size).step(1, 0, 100).kernel(0, 50, step=1).comm(30, 40, step=1).to_json()


def _with_event(**changes) -> dict:
    """A GPU trace whose first kernel has ``changes`` (None deletes a field)."""
    t = _gpu()
    kernel = next(e for e in t["traceEvents"] if e.get("cat") == "kernel")
    for k, v in changes.items():
        if v is None:
            kernel.pop(k, None)
        else:
            kernel[k] = v
    return t


DEEP = "__deep__"


def _deep(trace: dict, n: int = 20000) -> str:
    """The trace's JSON with the string DEEP replaced by a value nested n lists deep
    (json.dumps itself cannot write one)."""
    return json.dumps(trace).replace(json.dumps(DEEP), "[" * n + "1" + "]" * n)


def _raw(text):
    return text  # written as given (str, or bytes for text that is no UTF-8)


def _gpu_text(old: str, new: str, count: int = 1) -> str:
    """The GPU trace's JSON with ``old`` replaced by ``new`` (raw JSON text) ``count`` times."""
    text = json.dumps(_gpu())
    assert text.count(old) >= count, old
    return text.replace(old, new, count)


def _with_events(*events: dict) -> dict:
    """The GPU trace with ``events`` added."""
    t = _gpu()
    t["traceEvents"] += list(events)
    return t


# (id, trace (dict or raw text), expected: a substring of the refusal, or None for success)
REFUSED = [
    ("step_past_int64", lambda: _gpu_text('"ProfilerStep#1"', '"ProfilerStep#9223372036854775808"'),
     "ProfilerStep#9223372036854775808: a step number past"),
    ("step_of_40_digits", lambda: _gpu_text('"ProfilerStep#1"', '"ProfilerStep#' + "9" * 40 + '"'), "a step number past"),
    ("world_size_2_62", lambda: {**_gpu(), "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2**62}},
     "world size"),
    ("world_size_0", lambda: {**_gpu(), "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 0}},
     "world size 0"),
    ("rank_2_40", lambda: {**_gpu(), "distributedInfo": {"backend": "nccl", "rank": 2**40, "world_size": 2}},
     "rank"),
    ("rank_1e30", lambda: _raw(json.dumps(_gpu()).replace('"rank": 0', '"rank": 1e30')), "not a Kineto trace"),
    ("base_time_1e30_float", lambda: {**_gpu(), "baseTimeNanoseconds": 1e30}, "not a Kineto trace"),
    ("base_time_10_30_int", lambda: {**_gpu(), "baseTimeNanoseconds": 10**30}, "baseTimeNanoseconds"),
    ("deep_args", lambda: _deep(_with_event(args={"x": DEEP})), "nested deeper"),
    ("deep_header", lambda: _deep({**_gpu(), "extra": DEEP}), "nested deeper"),
    ("deep_distributed_info", lambda: _deep({**_gpu(), "distributedInfo": {"rank": 0, "pg_config": DEEP}}),
     "nested deeper"),
    ("trailing_garbage", lambda: _raw(json.dumps(_gpu()) + " garbage"), "invalid JSON"),
    ("second_document", lambda: _raw(json.dumps(_gpu()) + json.dumps(_gpu())), "invalid JSON"),
    ("nan_token", lambda: _raw(json.dumps(_gpu()).replace('"dur": 50', '"dur": NaN', 1)), "invalid JSON"),
    ("unknown_phase", lambda: _with_event(ph="Q"), "not a Kineto trace"),
    ("no_phase", lambda: _with_event(ph=None), "not a Kineto trace"),
    ("name_is_a_number", lambda: _with_event(name=12), "not a Kineto trace"),
    ("pid_is_a_float", lambda: _with_event(pid=1.5), "not a Kineto trace"),
    ("ts_is_a_string", lambda: _with_event(ts="soon"), "not a Kineto trace"),
    ("args_not_an_object", lambda: _with_event(args=[1, 2]), "not a Kineto trace"),
    ("correlation_is_a_float", lambda: _with_event(args={"correlation": 1.5}), "args"),
    ("events_not_objects", lambda: {**_gpu(), "traceEvents": [1, 2]}, "not a Kineto trace"),
    ("only_bad_timestamps", lambda: {**_gpu(), "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k",
                                                                 "pid": 0, "tid": 7, "dur": 5}]}, "no usable events"),
    # numbers beyond a double (JSON has no infinity): msgspec refuses them, so does the scanner
    ("dur_1e400", lambda: _gpu_text('"dur": 50', '"dur": 1e400'), "timestamp or duration out of range"),
    ("dur_minus_1e400", lambda: _gpu_text('"dur": 50', '"dur": -1e400'), "timestamp or duration out of range"),
    ("ts_1e400_on_a_flow", lambda: _raw(json.dumps(_with_events({"ph": "s", "id": 1, "pid": 100, "tid": 100,
                                                                  "ts": "big"})).replace('"big"', "1e400")),
     "timestamp or duration out of range"),
    ("ph_given_twice_differently", lambda: _gpu_text('"ph": "X", "cat": "kernel"', '"ph": "X", "ph": "i", "cat": "kernel"'),
     "ph given twice, differently"),
    ("unknown_ph_given_second", lambda: _gpu_text('"ph": "X", "cat": "kernel"', '"ph": "X", "ph": "Q", "cat": "kernel"'),
     "events of unknown phase Q"),
    ("trace_events_given_twice", lambda: _raw(json.dumps(_gpu())[:-1] + ', "traceEvents": []}'),
     "traceEvents given twice"),
    ("flow_id_is_a_float", lambda: _with_events({"ph": "s", "id": 1.5, "pid": 100, "tid": 100, "ts": BASE_US + 1}),
     "pid, tid or id is not an integer"),
    ("name_is_an_object", lambda: _with_event(name={"a": 1}), "cat or name is not a string"),
    ("pid_is_true", lambda: _with_event(pid=True), "pid, tid or id is not an integer"),
    ("args_not_an_object_on_an_op_no_detail_keeps",
     lambda: _with_events({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 100, "tid": 100,
                           "ts": BASE_US + 1, "dur": 1, "args": [1]}), "args is not an object"),
    ("args_not_an_object_on_a_thread_name",
     lambda: _with_events({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": "stream 7"}),
     "args is not an object"),
    ("pid_not_json", lambda: _gpu_text('"pid": 0', '"pid": 12abc'), "invalid JSON"),
]

ACCEPTED = [
    # (id, trace, what the analysis must show)
    ("int_beyond_int64_in_args", lambda: _with_event(args={"correlation": 2**64, "External id": 10**30,
                                                             "stream": 7, "device": 0})),
    ("negative_dur", lambda: _with_event(dur=-5)),
    ("missing_ts", lambda: _with_event(ts=None)),
    ("missing_dur", lambda: _with_event(dur=None)),
    ("ts_1e30", lambda: _with_event(ts=1e30)),
    ("null_name_and_pid", lambda: {**_gpu(), "traceEvents": _gpu()["traceEvents"] + [
        {"ph": "X", "cat": "cpu_op", "name": None, "pid": None, "tid": None, "ts": BASE_US + 1, "dur": 1}]}),
    ("escaped_keys", lambda: _raw(json.dumps(_gpu()).replace('"ph"', '"\\u0070h"'))),
    # text that is no Unicode reads as U+FFFD, counted (run.text_replaced)
    ("lone_surrogate_in_a_name", lambda: _gpu_text('"sm90', '"\\ud800sm90')),
    ("lone_surrogates_everywhere", lambda: _raw(json.dumps(_with_events(
        {"ph": "X", "cat": "\ud800cpu_op", "name": "\udfffop", "pid": "\udc00", "tid": 1, "ts": BASE_US + 1,
         "dur": 1, "args": {"x": "\ud800"}, "extra": "\udbff"},
        {"ph": "M", "name": "thread_name", "pid": "\udc00", "tid": 1, "args": {"name": "\ud800"}}))
        .replace('"NVIDIA', '"\\ud800NVIDIA'))),
    ("a_surrogate_pair_and_escaped_backslashes", lambda: _with_events(
        {"ph": "X", "cat": "cpu_op", "name": "\U0001f600 \\ud800", "pid": 100, "tid": 100, "ts": BASE_US + 1,
         "dur": 1})),
    ("invalid_utf8_in_a_name_and_args", lambda: _raw(_gpu_text('"sm90', '"sm90\udcff').encode(
        "utf-8", "surrogateescape").replace(b'"stream": 7', b'"stream": 7, "x": "\xc3\x28"', 1))),
    # fields of phases no decoder reads are not judged: a counter's, a metadata event's
    ("wrong_types_in_a_counter_event", lambda: _with_events(
        {"ph": "C", "name": {"a": 1}, "cat": 5, "pid": 1.5, "ts": "soon", "dur": [1], "args": [1]})),
    ("wrong_types_in_a_thread_name", lambda: _with_events(
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "cat": 5, "ts": "x", "args": {"name": "s"}})),
    ("out_of_range_ts_in_a_counter_event", lambda: _raw(json.dumps(_with_events(
        {"ph": "C", "name": "c", "pid": 0, "ts": 1, "args": {}})).replace('"ts": 1,', '"ts": 1e400,'))),
    ("a_float_id_on_a_complete_event", lambda: _with_event(id=1.5)),
    ("ph_given_twice_alike", lambda: _gpu_text('"ph": "X", "cat": "kernel"', '"ph": "X", "ph": "X", "cat": "kernel"')),
]


def _write(case, tmp_path, name="rank-0.json") -> str:
    value = case()
    path = tmp_path / name
    if isinstance(value, bytes):
        path.write_bytes(value)
    else:
        path.write_text(value if isinstance(value, str) else json.dumps(value))
    return str(path)


def _outcome(path: str, detail: str, use_scanner: bool):
    try:
        decode_source(TraceSource(path), detail, use_scanner=use_scanner)
        return "ok"
    except InputError as err:
        assert "\n" not in str(err) and str(err).startswith(path), str(err)
        return f"refused: {err.problem}"


both = pytest.mark.skipif(frames._kineto_scan is None, reason="the C scanner is not built")


@both
@pytest.mark.parametrize("case_id, case, expected", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_by_both_decoders(tmp_path, case_id, case, expected):
    path = _write(case, tmp_path)
    for detail in DETAILS:
        scanned, decoded = _outcome(path, detail, True), _outcome(path, detail, False)
        if expected is None:
            assert scanned == decoded == "ok", (scanned, decoded)
        else:
            assert scanned.startswith("refused") and decoded.startswith("refused"), (scanned, decoded)
            assert expected in scanned and expected in decoded, (scanned, decoded)


@pytest.mark.parametrize("case_id, case, expected", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_in_one_line_by_the_cli(tmp_path, capsys, case_id, case, expected):
    path = _write(case, tmp_path)
    code = main(["analyze", path])
    out, err = capsys.readouterr()
    if expected is None:
        assert code == 0, err
        return
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and path in err and expected in err


@both
@pytest.mark.parametrize("case_id, case", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted_alike_by_both_decoders(tmp_path, case_id, case):
    from test_decoders_agree import _same

    path = _write(case, tmp_path)
    for detail in DETAILS:
        _same(decode_source(TraceSource(path), detail, use_scanner=True),
              decode_source(TraceSource(path), detail, use_scanner=False))


@pytest.mark.parametrize("field, value, reason", [("dur", -5, "negative dur"), ("ts", None, "missing or invalid ts"),
                                                  ("dur", None, "missing dur"), ("ts", 1e30, "missing or invalid ts"),
                                                  ("ts", -5, "negative ts")])
def test_broken_timings_are_dropped_counted_and_said(tmp_path, capsys, field, value, reason):
    """The broken kernel leaves the analysis (comm is the all-reduce alone: 40 us, none of
    it hidden), and the run says how many events it left out and why."""
    path = _write(lambda: _with_event(**{field: value}), tmp_path)
    assert main(["analyze", path, "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["run"]["dropped_events"] == {reason: 1}
    assert any(reason in w for w in result["run"]["warnings"])
    (rank,) = result["ranks"]
    assert rank["comm_ms"] == pytest.approx(0.040) and rank["exposed_comm_ms"] == pytest.approx(0.040)
    assert main(["analyze", path]) == 0
    assert reason in capsys.readouterr().err  # the table's reader hears it too


def test_huge_integers_in_args_become_nulls(tmp_path):
    path = _write(ACCEPTED[0][1], tmp_path)
    rank = decode_source(TraceSource(path), "full")
    kernel = next(e for e in rank.events.to_pylist() if e["cat"] == "kernel")
    assert kernel["correlation"] is None and kernel["external_id"] is None and kernel["stream"] == 7


def test_missing_ranks_are_named(tmp_path, capsys):
    for r in (0, 1, 3):
        write(GpuTrace(rank=r, world_size=4).step(1, 0, 100).kernel(0, 50, step=1), tmp_path / f"rank-{r}.json")
    assert main(["analyze", str(tmp_path), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["ranks_loaded"] == [0, 1, 3] and run["missing_ranks"] == [2]
    assert any("1 of 4 ranks missing (2)" in w for w in run["warnings"])


def test_a_file_name_that_disagrees_with_distributed_info_is_reported(tmp_path, capsys):
    write(GpuTrace(rank=1).step(1, 0, 100).kernel(0, 50, step=1), tmp_path / "rank-3.json")
    assert main(["analyze", str(tmp_path), "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["run"]["warnings"]
    assert any("the file name says rank 3, distributedInfo says 1" in w for w in warnings)


def _with_groups(trace: dict, *groups: tuple) -> dict:
    """``trace`` whose distributedInfo lists process groups (name, description, ranks)."""
    trace["distributedInfo"]["pg_config"] = [{"pg_name": n, "pg_desc": d, "backend_config": "cuda:nccl",
                                              "pg_size": len(r), "ranks": r} for n, d, r in groups]
    return trace


@pytest.mark.parametrize("make_other, what", [
    (lambda: CpuTrace(rank=1).step(1, 0, 100).op(0, 30).gloo(35, 20).to_json(), "device kind"),
    (lambda: _with_groups(_gpu(rank=1), ("0", "default_pg", [0, 1]), ("1", "mesh_shard", [1, 3])),
     "process group 1 is mesh_shard of ranks [1, 3] here, mesh_shard of ranks [0, 1]"),
    (lambda: {**_gpu(rank=1), "distributedInfo": {"backend": "gloo", "rank": 1, "world_size": 2}}, "backend"),
    (lambda: {**_gpu(rank=1), "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 8}}, "world size"),
])
def test_files_of_different_runs_are_refused(tmp_path, capsys, make_other, what):
    a = write(_with_groups(_gpu(rank=0), ("0", "default_pg", [0, 1]), ("1", "mesh_shard", [0, 1])),
              tmp_path / "rank-0.json")
    b = write(make_other(), tmp_path / "rank-1.json")
    code = main(["analyze", a, b])
    err = capsys.readouterr().err
    assert code == 2 and "a different run" in err and what in err and a in err and b in err


@pytest.mark.parametrize("shift", ["events", "base time"])
def test_ranks_33_hours_apart_are_different_runs(tmp_path, capsys, shift):
    """Rank 0 of one run and rank 1 of another, 33 h later: by their events' epoch clock, or by
    Kineto's baseTimeNanoseconds where the events are on a machine's own clock."""
    hours_ns = 33 * 3600 * 10**9
    a, b = _gpu(rank=0), _gpu(rank=1)
    if shift == "events":
        for e in b["traceEvents"]:
            if "ts" in e:
                e["ts"] += hours_ns / 1000
    else:
        a["baseTimeNanoseconds"], b["baseTimeNanoseconds"] = 1790857026000000000, 1790857026000000000 + hours_ns
    pa, pb = write(a, tmp_path / "rank-0.json"), write(b, tmp_path / "rank-1.json")
    assert main(["analyze", pa, pb]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{pb}: a different run" in err and "33.0 h after" in err and pa in err, err
    a, b = _gpu(rank=0), _gpu(rank=1)  # 20 minutes apart: one run (ranks start at one step, not one instant)
    for e in b["traceEvents"]:
        if "ts" in e:
            e["ts"] += 20 * 60 * 1e6
    write(a, tmp_path / "rank-0.json")
    write(b, tmp_path / "rank-1.json")
    assert main(["analyze", pa, pb]) == 0


def test_a_ddp_rank_and_an_fsdp_rank_are_different_runs(tmp_path, capsys):
    ddp = GpuTrace(rank=0).step(1, 0, 100).annotation("DistributedDataParallel.forward", 1, 10).kernel(0, 50, step=1)
    fsdp = GpuTrace(rank=1).step(1, 0, 100).annotation("FSDP::all_gather (layers.0)", 1, 10).kernel(0, 50, step=1)
    a, b = write(ddp, tmp_path / "rank-0.json"), write(fsdp, tmp_path / "rank-1.json")
    assert main(["analyze", a, b]) == 2
    err = capsys.readouterr().err
    assert "a different run: parallelism" in err


def test_a_manifest_of_another_job_is_refused(tmp_path, capsys):
    write(_gpu(rank=0), tmp_path / "rank-0.json")
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 1, "world_size": 16}))
    assert main(["analyze", str(tmp_path)]) == 2
    assert "the manifest says world size 16" in capsys.readouterr().err


# --- archives ---------------------------------------------------------------------------


def test_an_encrypted_member_is_refused(tmp_path, capsys):
    path = tmp_path / "run.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("rank-0.json", json.dumps(_gpu()))
    # set the "encrypted" flag a password-protected zip carries (zipfile writes none):
    # general purpose bit 0 in the local header (offset 6) and the central directory (8)
    data = bytearray(path.read_bytes())
    local, central = data.index(b"PK\x03\x04"), data.index(b"PK\x01\x02")
    data[local + 6] |= 0x1
    data[central + 8] |= 0x1
    path.write_bytes(bytes(data))
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert "encrypted zip member" in err and "rank-0.json" in err and len(err.strip().splitlines()) == 1


def test_an_archive_inside_the_archive_is_refused(tmp_path, capsys):
    inner = tmp_path / "inner.zip"
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("rank-0.json", json.dumps(_gpu()))
    outer = tmp_path / "outer.zip"
    with zipfile.ZipFile(outer, "w") as zf:
        zf.write(inner, "inner.zip")
        zf.writestr("rank-1.json", json.dumps(_gpu(rank=1)))
    assert main(["analyze", str(outer)]) == 2
    assert "an archive inside the archive" in capsys.readouterr().err


def test_ten_thousand_members_are_refused_fast(tmp_path, capsys):
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(10_000):
            zf.writestr(f"rank-{i}.json", "{}")
    start = time.perf_counter()
    assert main(["analyze", str(path)]) == 2
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err
    assert "10,000 files, more than the limit" in err and elapsed < 30


def test_member_names_are_never_paths(tmp_path, capsys):
    """A member named ../../x.json is read from the archive, never written anywhere."""
    path = tmp_path / "run.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("../../evil/rank-0.json", json.dumps(_gpu()))
    assert main(["analyze", str(path), "--json"]) == 0
    capsys.readouterr()
    assert not (tmp_path.parent.parent / "evil").exists()


# --- untrusted text in the terminal ------------------------------------------------------


def test_control_characters_never_reach_the_terminal(tmp_path, capsys):
    """An ANSI escape in a device name, or a newline and an escape in a file name, reach
    the terminal as visible escapes: no colour, no cleared screen, no broken line."""
    t = _gpu()
    t["deviceProperties"][0]["name"] = "\x1b[31mEVIL\x1b[0m"
    good_path = tmp_path / "rank-0.json"
    good_path.write_text(json.dumps(t))
    assert main(["analyze", str(good_path)]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\\x1b[31mEVIL" in out
    bad = tmp_path / "rank-1\x1b[2J\nx.json"
    bad.write_text("{broken")
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\n") == 1 and "\\x1b[2J\\nx.json" in err


# --- names and manifests --------------------------------------------------------------------


def test_a_23_digit_rank_in_a_file_name_is_one_line(tmp_path, capsys):
    trace = _gpu()
    trace.pop("distributedInfo")  # the rank must come from the name
    path = tmp_path / f"rank-{'9' * 23}.json"
    path.write_text(json.dumps(trace))
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and str(path) in err and "rank" in err


def test_a_manifest_nested_20000_deep_is_one_line(tmp_path, capsys):
    write(_gpu(rank=0), tmp_path / "rank-0.json")
    (tmp_path / "manifest.json").write_text('{"schema_version": 1, "extra": ' + "[" * 20000 + "]" * 20000 + "}")
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "manifest.json" in err


def test_a_300_character_upload_name_is_saved_and_analysed(tmp_path):
    """An upload keeps a file name the file system accepts (255 bytes at most), distinct for
    two long names that differ only in the middle, with its rank and suffix kept."""
    from overlapscope.server import uploads

    class Upload:
        def __init__(self, name: str, data: bytes):
            self.name, self._data = name, data

        def getbuffer(self):
            return memoryview(self._data)

    data = json.dumps(_gpu()).encode()
    long_a = "a" * 150 + "x" + "b" * 140 + "-rank-0.json"
    long_b = "a" * 150 + "y" + "b" * 140 + "-rank-0.json"
    paths = uploads.save([Upload(long_a, data), Upload(long_b, data)], tmp_path / "up")
    assert len({p.name for p in paths}) == 2
    assert all(len(p.name.encode()) <= 255 and p.name.endswith("rank-0.json") for p in paths)
    assert uploads.check_each(paths[:1], tmp_path / "up") == []


# --- text that is no Unicode -----------------------------------------------------------------


def test_a_lone_surrogate_reads_as_replacement_and_is_counted(tmp_path, capsys, monkeypatch):
    """The audit's crash (a \\ud800 escape in a kernel name): analyze and ingest read it as
    U+FFFD and say so, with the count of replacements (eight made below, one per string)."""
    path = _write(ACCEPTED[[c[0] for c in ACCEPTED].index("lone_surrogates_everywhere")][1], tmp_path)
    assert main(["analyze", path, "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["text_replaced"] == 8
    assert f"{path}: 8 invalid UTF-8 sequences or lone surrogate escapes read as U+FFFD" in run["warnings"]
    assert "\ufffdNVIDIA H100 80GB HBM3" in run["devices"]
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "catalog.duckdb"))
    assert main(["ingest", path, "--run", "surrogates"]) == 0
    out, err = capsys.readouterr()
    assert "stored run 1" in out and "8 invalid UTF-8 sequences or lone surrogate escapes" in err
    assert main(["analyze", "--run", "surrogates", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["text_replaced"] == 8


# (text as written, as repaired, replacements): JSON text, so backslashes are JSON's
TEXT_REPAIRS = [
    (rb'"\ud800"', rb'"\ufffd"', 1),
    (rb'"\uDFFF x"', rb'"\ufffd x"', 1),
    (rb'"\ud83d\ude00"', rb'"\ud83d\ude00"', 0),  # a pair: one character
    (rb'"\udc00\ud800"', rb'"\ufffd\ufffd"', 2),  # low then high: no pair
    (rb'"\ud800\ud800\udc00"', rb'"\ufffd\ud800\udc00"', 1),
    (rb'"\\ud800"', rb'"\\ud800"', 0),  # an escaped backslash, then plain text
    (rb'"\\\ud800"', rb'"\\\ufffd"', 1),
    (rb'"\\\\ud800"', rb'"\\\\ud800"', 0),
    (b'"a\xffb"', '"a\ufffdb"'.encode(), 1),
    (b'"\xc3\x28"', '"\ufffd("'.encode(), 1),
    (b'"\xe2\x82"', '"\ufffd"'.encode(), 1),  # a sequence cut short
    (b'"\xed\xa0\x80"', '"\ufffd\ufffd\ufffd"'.encode(), 3),  # a surrogate encoded in UTF-8
    ('"\u00e9\ufffd"'.encode(), '"\u00e9\ufffd"'.encode(), 0),  # valid text, U+FFFD included
]


@pytest.fixture(params=["C", "Python"])
def textfix(request, monkeypatch):
    """The text repair, with the extension's surrogate pass and with the pure Python one."""
    from overlapscope.analyzer.ingest import textfix as module

    if request.param == "Python":
        monkeypatch.setattr(module, "_fix_surrogates_c", None)
    elif module._fix_surrogates_c is None:
        pytest.skip("the C extension is not built")
    return module


@pytest.mark.parametrize("written, repaired, n", TEXT_REPAIRS)
def test_text_repairs(textfix, written, repaired, n):
    fix = textfix.TextFix()
    assert fix.feed(written) + fix.finish() == repaired and fix.replaced == n


def test_text_repair_is_the_same_however_the_file_is_cut(textfix):
    """Cut anywhere (inside an escape, a pair, a run of backslashes or a UTF-8 sequence),
    the pieces repair to what the whole repairs to, with the same count."""
    from hypothesis import given, settings, strategies as st

    TextFix = textfix.TextFix

    atoms = st.sampled_from([rb"\ud800", rb"\udc00", rb"\ud83d\ude00", b"\\\\", b"\\", b"u", b"d8", b"00", b"a",
                             b'"', b"\xff", b"\xc3", b"\xa9", "\u00e9".encode(), "\U0001f600".encode(), b" " * 13])

    def repaired(pieces: list[bytes]) -> tuple[bytes, int]:
        fix = TextFix()
        out = b"".join(fix.feed(p) for p in pieces) + fix.finish()
        return out, fix.replaced

    @settings(max_examples=400, deadline=None, derandomize=True, database=None)
    @given(text=st.lists(atoms, max_size=40).map(b"".join), cuts=st.lists(st.integers(min_value=0), max_size=6))
    def check(text, cuts):
        points = sorted({c % (len(text) + 1) for c in cuts})
        pieces = [text[a:b] for a, b in zip([0] + points, points + [len(text)])]
        assert repaired(pieces) == repaired([text])

    check()


# --- what a load lacked, said by every command --------------------------------------------------


def test_ingest_prints_the_warnings_analyze_prints(tmp_path, capsys, monkeypatch):
    """Ranks 0, 1 and 3 of 4, rank 1 with a kernel of negative duration: ingest says what
    analyze says, on stderr, one line each; --json carries them in run.warnings."""
    for r in (0, 1, 3):
        t = GpuTrace(rank=r, world_size=4).step(1, 0, 100).kernel(0, 50, step=1)
        if r == 1:
            t.kernel(60, -5, step=1)
        write(t, tmp_path / f"rank-{r}.json")
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "catalog.duckdb"))
    assert main(["analyze", str(tmp_path)]) == 0
    said = capsys.readouterr().err.splitlines()
    expected = [f"overlapscope: warning: 1 of 4 ranks missing (2): the figures cover the 3 loaded",
                f"overlapscope: warning: {tmp_path / 'rank-1.json'}: left out 1 events with negative dur"]
    assert said == expected
    assert main(["ingest", str(tmp_path), "--run", "gappy"]) == 0
    assert capsys.readouterr().err.splitlines() == expected
    assert main(["ingest", str(tmp_path), "--run", "gappy", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["missing_ranks"] == [2] and run["dropped_events"] == {"negative dur": 1}


@pytest.mark.parametrize("length", [243, 255])
def test_a_trace_whose_name_is_near_the_file_system_limit_is_stored(tmp_path, capsys, monkeypatch, length):
    """ingest looks for <trace>.overlapscope beside each trace (reduced in place): a name of
    243 to 255 bytes leaves no room for that suffix, which is no reason to refuse the trace."""
    path = tmp_path / ("r" * (length - len(".json")) + ".json")
    path.write_text(json.dumps(_gpu()))
    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "catalog.duckdb"))
    assert main(["ingest", str(path), "--run", "long"]) == 0, capsys.readouterr().err
    assert "stored run 1" in capsys.readouterr().out


# --- caps on what a trace may cost ------------------------------------------------------------


@both
@pytest.mark.parametrize("detail", DETAILS)
def test_the_events_kept_are_capped_alike_by_both_decoders(tmp_path, detail):
    """2,000 kernels (kept at every detail) against a cap of 64 KiB of kept events: more
    than 64 bytes each, so both decoders refuse, with the same line."""
    from overlapscope.analyzer.ingest.limits import Limits

    t = GpuTrace(rank=0, world_size=1).step(1, 0, 10_000)
    for i in range(2000):
        t.kernel(i * 4, 2)
    path = write(t, tmp_path / "rank-0.json")
    caps = Limits(max_kept_bytes=64 << 10)
    for use_scanner in (True, False):
        with pytest.raises(InputError, match=r"the events it keeps take more than 0 MiB \(.* events so far\), the "
                                             r"limit for one trace \(\$OVERLAPSCOPE_MAX_KEPT_MB raises it\)"):
            decode_source(TraceSource(path), detail, use_scanner=use_scanner, limits=caps)
    decode_source(TraceSource(path), detail, limits=Limits(max_kept_bytes=64 << 20))  # room enough


def test_a_dropped_flow_costs_no_token(tmp_path):
    """Each flow's id is a token of its own (a third of a real trace's events are flows). At
    the details that drop flows the scanner keeps none of their ids (the reference trace:
    155 tokens instead of 42,528, its scan 11 % faster at analyze's detail): 5,000 flows
    with distinct ids pass a cap of 1,000 distinct tokens there and are refused at the
    full detail, which keeps them; kept, every flow keeps its id, as msgspec reads it."""
    from overlapscope.analyzer.ingest import scan
    from overlapscope.analyzer.ingest.limits import Limits

    t = GpuTrace(rank=0, world_size=1).step(1, 0, 100_000)
    t.kernel(10, 5)
    trace = t.to_json()
    trace["traceEvents"] += [{"ph": ph, "id": 1_000_000 + i, "pid": 1, "tid": 100, "ts": BASE_US + 20 + i,
                              "cat": "ac2g", "name": "ac2g", **({"bp": "e"} if ph == "f" else {})}
                             for i in range(5000) for ph in ("s", "f")]
    path = write(trace, tmp_path / "rank-0.json")
    few = Limits(max_tokens=1000)
    for detail in ("overlap", "attribution"):
        assert len(scan.scan(path, None, "rank-0.json", detail, few).columns["tokens"]) < 50
        decode_source(TraceSource(path), detail, limits=few)
    with pytest.raises(InputError, match="more distinct names than the limit"):
        decode_source(TraceSource(path), "full", limits=few)
    flows = [decode_source(TraceSource(path), "full", use_scanner=u).flows for u in (True, False)]
    assert flows[0].to_pylist() == flows[1].to_pylist() and flows[0].num_rows == 10_000
    assert sorted(set(flows[0].column("flow_id").to_pylist())) == list(range(1_000_000, 1_005_000))


def test_the_token_cap_counts_distinct_names_exactly(tmp_path):
    """The scanner's cap on distinct tokens (the names it interns: cat, name, pid, tid and
    kept ids, as their JSON texts) passes a trace that holds exactly as many and refuses it
    one below, wherever the chunks of the stream end. The count comes from the JSON itself."""
    from overlapscope.analyzer.ingest import scan
    from overlapscope.analyzer.ingest.limits import Limits

    t = GpuTrace(rank=0, world_size=1).step(1, 0, 100_000)
    for i in range(300):
        t.kernel(10 + 20 * i, 5, name=f"kernel_{i}")
    trace = t.to_json()
    path = write(trace, tmp_path / "rank-0.json")
    names = set()
    for e in trace["traceEvents"]:
        for key in ("cat", "name", "pid", "tid", "id"):
            v = e.get(key)
            if isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool) and key not in ("cat", "name")):
                names.add(json.dumps(v))
    for chunk in (None, 64, 4096):  # chunks that end inside events: their retries count nothing twice
        scanned = scan.scan(path, None, "rank-0.json", "full", Limits(max_tokens=len(names)), chunk)
        assert len(scanned.columns["tokens"]) == len(names)
        with pytest.raises(InputError, match="more distinct names than the limit"):
            scan.scan(path, None, "rank-0.json", "full", Limits(max_tokens=len(names) - 1), chunk)
    with pytest.raises(InputError, match="more distinct names than the limit"):
        decode_source(TraceSource(path), "full", limits=Limits(max_tokens=len(names) - 1))


def test_a_file_that_inflates_like_no_trace_is_refused(tmp_path, capsys):
    """80 MiB of blanks in a gzip of about 80 KiB (1,000x) passes the 64 MiB every file may
    inflate to and is refused there, as a zip member too; a plain file of blanks inflates
    nothing and is read to its end (an empty file)."""
    import gzip

    blanks = b" " * (80 << 20)
    packed = tmp_path / "rank-0.json.gz"
    packed.write_bytes(gzip.compress(blanks, compresslevel=9))
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("rank-0.json", blanks)
    plain = tmp_path / "plain" / "rank-0.json"
    plain.parent.mkdir()
    plain.write_bytes(blanks)
    for path in (packed, archive):
        assert main(["analyze", str(path)]) == 2
        err = capsys.readouterr().err
        assert "decompresses to more than 64x its" in err and "a compression bomb" in err, err
    assert main(["analyze", str(plain)]) == 2
    assert "empty file" in capsys.readouterr().err


def test_a_refused_first_ingest_leaves_no_run_store_behind(tmp_path, capsys):
    """The run store beside a new catalog is made for the run's files: when the run is
    refused, the empty folder goes too (a store that held files before stays)."""
    from overlapscope.analyzer.store import runstore

    db = tmp_path / "catalog.duckdb"
    bad = tmp_path / "rank-0.json"
    bad.write_text("{")
    assert main(["ingest", str(bad), "--run", "refused", "--db", str(db)]) == 2
    assert "invalid JSON" in capsys.readouterr().err
    assert not runstore.store_dir(db).exists()
    (tmp_path / "good").mkdir()
    good = write(_gpu(rank=0, world_size=1), tmp_path / "good" / "rank-0.json")
    assert main(["ingest", good, "--run", "kept", "--db", str(db)]) == 0
    assert main(["ingest", str(bad), "--run", "refused", "--db", str(db)]) == 2
    assert runstore.store_dir(db).is_dir()


def test_ranks_list_the_groups_they_are_in(tmp_path, capsys):
    """Each rank lists only its own groups (an HSDP mesh: rank 0 shards with 1, replicates
    with 2); groups named alike agree, so the files make one run."""
    a = write(_with_groups(_gpu(rank=0, world_size=4), ("0", "default_pg", [0, 1, 2, 3]),
                           ("1", "mesh_replicate", [0, 2]), ("3", "mesh_shard", [0, 1])), tmp_path / "rank-0.json")
    b = write(_with_groups(_gpu(rank=1, world_size=4), ("0", "default_pg", [0, 1, 2, 3]),
                           ("2", "mesh_replicate", [1, 3]), ("3", "mesh_shard", [0, 1])), tmp_path / "rank-1.json")
    assert main(["analyze", a, b]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", ["analyze", "ingest"])
def test_devices_fifos_and_links_to_them_are_refused_before_any_read(tmp_path, capsys, command):
    """/dev/zero never ends and a FIFO blocks its reader: refused from the file's mode, in one
    line, before a byte is read (a link is judged by what it points to)."""
    import os

    (tmp_path / "urandom.json").symlink_to("/dev/urandom")
    os.mkfifo(tmp_path / "rank-0.json")
    before, after = {"ingest": ([], ["--run", "x", "--db", str(tmp_path / "c.duckdb")])}.get(command, ([], []))
    for path, what in (("/dev/zero", "a character device"), (tmp_path / "urandom.json", "a character device"),
                       (tmp_path / "rank-0.json", "a FIFO")):
        start = time.monotonic()
        assert main([command, *before, str(path), *after]) == 2
        err = capsys.readouterr().err
        assert time.monotonic() - start < 1.0
        assert err.count("\n") == 1 and f"{path}: {what}, not a file" in err, err
    assert not (tmp_path / "c.duckdb").exists()


def test_a_device_is_refused_in_bounded_memory():
    import subprocess
    import sys

    # VmHWM: this process's peak (ru_maxrss would carry the forking test worker's across exec)
    code = ("import re, sys; from overlapscope.cli import main; rc = main(['analyze', '/dev/zero']); "
            "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "a character device" in done.stderr
    assert int(done.stdout.split()[-1]) < 200 * 1024  # KiB: the process's peak, imports included


def _piped(args: list[str], data: bytes, env: dict | None = None):
    """The CLI in its own process with ``data`` on a real pipe as its standard input."""
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "overlapscope.cli", *args], input=data, capture_output=True,
                          timeout=120, env={**os.environ, **(env or {})})


def _stdin_folders() -> set[str]:
    import glob
    import tempfile

    return set(glob.glob(f"{tempfile.gettempdir()}/overlapscope-stdin-*"))


def test_standard_input_reads_a_trace_a_zip_and_an_export_like_their_files(tmp_path):
    """``-`` takes a gzip trace, a .zip of ranks or a Perfetto export on a pipe: the same
    figures as the files themselves, named (stdin), and no spooled copy left afterwards."""
    a = write(GpuTrace(rank=0, world_size=2).step(1, 0, 1000).kernel(0, 600, step=1).comm(500, 400, step=1),
              tmp_path / "rank-0.json.gz", gz=True)
    b = write(GpuTrace(rank=1, world_size=2).step(1, 0, 1000).kernel(0, 400, step=1).comm(500, 400, step=1),
              tmp_path / "rank-1.json.gz", gz=True)
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(a, "rank-0.json.gz")
        zf.write(b, "rank-1.json.gz")
    before = _stdin_folders()
    for data, files, expected in ((open(a, "rb").read(), [a], ["(stdin)"]),
                                  (archive.read_bytes(), [a, b], ["(stdin):rank-0.json.gz", "(stdin):rank-1.json.gz"])):
        piped = _piped(["analyze", "-", "--json"], data)
        assert piped.returncode == 0, piped.stderr
        direct = _piped(["analyze", *files, "--json"], b"")
        got, want = json.loads(piped.stdout), json.loads(direct.stdout)
        assert got["run"]["files"] == expected
        assert (got["headline"], got["ranks"], got["steps"]) == (want["headline"], want["ranks"], want["steps"])
    export = tmp_path / "run.perfetto.json"
    assert _piped(["export", a, b, "--perfetto", str(export)], b"").returncode == 0
    piped = _piped(["analyze", "-", "--json"], export.read_bytes())
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["headline"] == want["headline"]
    assert _stdin_folders() == before


@pytest.mark.parametrize("case, data, env, problem", [
    ("empty", b"", {}, "empty: nothing was piped in"),
    ("over the cap", b"{" + b" " * (2 << 20), {"OVERLAPSCOPE_MAX_TRACE_MB": "1"}, "more than the limit of 1 MiB"),
    ("not json", b"hello\n" * 10, {}, "not a Kineto trace"),
    ("cut json", b'{"traceEvents": [' + b" " * 30, {}, "invalid JSON"),
    ("twice", b"{}", {}, "given twice: standard input can be read once"),
])
def test_standard_input_is_refused_in_one_line_like_a_file(case, data, env, problem):
    """The pipe goes through the door a file does: capped, refused in one line, nothing left."""
    before = _stdin_folders()
    done = _piped(["analyze", "-", *(["-"] if case == "twice" else [])], data, env)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and err.startswith("overlapscope: error: (stdin): "), err
    assert problem in err, err
    assert _stdin_folders() == before


def test_standard_input_from_a_device_is_refused_before_any_read():
    """``- < /dev/zero`` would never end: the descriptor's mode is checked as a path's is."""
    import subprocess
    import sys

    with open("/dev/zero", "rb") as zero:
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "overlapscope.cli", "analyze", "-"], stdin=zero,
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "(stdin): a character device, not a file" in done.stderr, done.stderr
    assert time.monotonic() - start < 10


def test_ingest_from_standard_input_stores_the_run(tmp_path):
    db = tmp_path / "c.duckdb"
    a = write(GpuTrace(rank=0, world_size=1).step(1, 0, 1000).kernel(0, 600, step=1), tmp_path / "rank-0.json")
    done = _piped(["ingest", "-", "--run", "piped", "--db", str(db), "--json"], open(a, "rb").read())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["name"] == "piped"
    listed = _piped(["history", "--db", str(db), "--json"], b"")
    assert [r["name"] for r in json.loads(listed.stdout)["runs"]] == ["piped"]
