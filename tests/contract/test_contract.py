"""overlapscope.contract: names, manifest and bus factors shared by the tracer and the analyzer."""

from __future__ import annotations

import json

import pytest

from conftest import SAMPLES
from overlapscope.contract import collectives, manifest, names


def test_annotation_patterns_come_from_the_templates():
    assert names.BUCKET_PATTERN.match(names.bucket_annotation(12)).group(1) == "12"
    assert names.MICROBATCH_PATTERN.match(names.microbatch_annotation(0)).group(1) == "0"
    assert names.TRACE_FILE_PATTERN.match(names.trace_file_name(7)).group(1) == "7"
    assert names.BUCKET_PATTERN.match("overlapscope:ddp_bucket#3x") is None
    assert names.BUCKET_PATTERN.match("xoverlapscope:ddp_bucket#3") is None


@pytest.mark.parametrize(("name", "kind"), [
    ("allreduce", "all_reduce"), ("AllReduce", "all_reduce"), ("nccl:all_reduce", "all_reduce"),
    ("_allgather_base", "all_gather"), ("all_gather_into_tensor_coalesced", "all_gather"),
    ("_reduce_scatter_base", "reduce_scatter"), ("ReduceScatter", "reduce_scatter"),
    ("SendRecv", "send_recv"), ("recv", "send_recv"), ("alltoall_base", "all_to_all"),
    ("broadcast", "broadcast"), ("reduce", "reduce"), ("gather", "gather"), ("barrier", "barrier"),
    ("aten::mm", None), ("", None), (None, None),
])
def test_collective_kind_reads_every_spelling(name, kind):
    assert collectives.collective_kind(name) == kind


@pytest.mark.parametrize(("kind", "n", "factor"), [
    # nccl-tests PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n,
    # broadcast, reduce and send/recv 1
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 4, 0.75), ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("_allgather_base", 2, 0.5),
])
def test_bus_factors_are_nccl_tests(kind, n, factor):
    assert collectives.bus_factor(kind, n) == pytest.approx(factor)


@pytest.mark.parametrize(("kind", "n"), [("barrier", 2), ("aten::mm", 2), ("all_reduce", 0), ("all_reduce", 1.5)])
def test_bus_factor_refuses_what_has_none(kind, n):
    with pytest.raises(ValueError):
        collectives.bus_factor(kind, n)


def test_every_sample_manifest_reads_as_the_contract():
    for path in sorted(SAMPLES.glob("*/manifest.json")):
        m = manifest.decode(path.read_bytes())
        raw = json.loads(path.read_text())
        assert m.schema_version == raw["schema_version"] == manifest.SCHEMA_VERSION
        assert m.parallelism == raw["parallelism"] and m.params == raw["params"]
        assert [u.name for u in m.units] == [u["name"] for u in raw["units"]]
        # a round trip through the struct keeps every key and value
        assert json.loads(manifest.encode(m)) == raw


def test_hsdp_mesh_is_read_in_one_place():
    m = manifest.decode((SAMPLES / "hsdp_2x2" / "manifest.json").read_bytes())
    assert m.hsdp_shape == (2, 2)
    assert m.group_sizes() == {"all_gather": 2, "reduce_scatter": 2, "all_reduce": 2}
    assert manifest.decode(b'{"parallelism": "fsdp", "mesh": {"shape": [2, 2]}}').hsdp_shape is None


def test_a_newer_major_version_is_refused_in_one_line():
    with pytest.raises(manifest.ManifestError, match="schema_version 2 is newer") as err:
        manifest.decode(b'{"schema_version": 2, "params": "a string in a future version"}')
    assert "\n" not in str(err.value)


def test_unknown_keys_are_accepted_and_wrong_types_refused():
    assert manifest.decode(b'{"schema_version": 1, "a_key_from_later": [1, 2]}').params is None
    with pytest.raises(manifest.ManifestError, match=r"params"):
        manifest.decode(b'{"schema_version": 1, "params": "many"}')
    with pytest.raises(manifest.ManifestError, match="not valid JSON"):
        manifest.decode(b'{"schema_version": 1,')


def test_calibrated_bandwidth_per_kind():
    cal = manifest.Calibration(collectives=[
        manifest.CalibratedCollective(kind="all_reduce", group_size=2, bytes=1 << 20, seconds=1.0,
                                      busbw_bytes_per_s=1.0e9),
        manifest.CalibratedCollective(kind="all_reduce", group_size=2, bytes=1 << 22, seconds=1.0,
                                      busbw_bytes_per_s=2.0e9),
        manifest.CalibratedCollective(kind="all_gather", group_size=2, bytes=1 << 22, seconds=1.0,
                                      busbw_bytes_per_s=0.5e9),
    ])
    assert cal.bus_bandwidth_of("all_reduce") == 2.0e9  # the largest message only
    assert cal.bus_bandwidth_of("all_gather") == 0.5e9
    assert cal.bus_bandwidth_of("reduce_scatter") is None
    # HSDP calibrates all-reduces in both groups: each group's own W, where it has one
    cal.collectives.append(manifest.CalibratedCollective(kind="all_reduce", group="replicate", group_size=2,
                                                         bytes=1 << 22, seconds=1.0, busbw_bytes_per_s=0.4e9))
    assert cal.bus_bandwidth_of("all_reduce", "replicate") == 0.4e9
    assert cal.bus_bandwidth_of("all_reduce") == (2.0e9 + 0.4e9) / 2  # every group: the median of both
    assert cal.bus_bandwidth_of("all_gather", "shard") == 0.5e9  # no shard-group entry: every group's


def test_the_contract_imports_neither_torch_nor_duckdb():
    import subprocess
    import sys

    code = ("import sys, overlapscope.contract.manifest, overlapscope.contract.names, "
            "overlapscope.contract.collectives; print(sorted(m for m in ('torch', 'duckdb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
