"""The Ray engine gives the local engine's tables: a real local Ray (2 CPUs), the map over
ranks as Ray tasks, on every sample run and reference trace; traces read through a
pyarrow file system URI; a bad rank is the input's one line, as locally."""

from __future__ import annotations

import pytest

from conftest import REFERENCE, SAMPLES
from overlapscope.analyzer.engine import map_ranks
from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest.inputs import resolve

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

BUNDLES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob("rank-*")))
REFERENCES = sorted(str(p) for p in REFERENCE.glob("gpu_*/*.json.gz")) if REFERENCE.is_dir() else []
INPUTS = [[str(SAMPLES / b)] for b in BUNDLES] + [[r] for r in REFERENCES]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _tables(results) -> dict:
    return {(r.rank, name): sorted(tuple(row.values()) for row in table.to_pylist())
            for r in results for name, table in r.tables.items()}


@pytest.mark.parametrize("paths", INPUTS, ids=[p[0].split("/")[-1] for p in INPUTS])
def test_ray_and_local_give_identical_per_rank_tables(paths):
    inputs = resolve(paths)
    by_ray = map_ranks(inputs, "full", engine="ray")
    local = map_ranks(inputs, "full", workers=2)
    assert [r.rank for r in by_ray] == [r.rank for r in local]
    assert [r.meta for r in by_ray] == [r.meta for r in local]
    assert _tables(by_ray) == _tables(local)


def test_traces_are_read_where_they_are_through_a_file_system_uri():
    uri = (SAMPLES / "hsdp_2x2").resolve().as_uri()  # file:///...: pyarrow's file system, as s3:// would be
    by_uri = map_ranks(resolve([uri]), "overlap", engine="ray")
    local = map_ranks(resolve([str(SAMPLES / "hsdp_2x2")]), "overlap", workers=2)
    assert len(by_uri) == 4 and _tables(by_uri) == _tables(local)


def test_a_bad_rank_stops_the_map_with_its_one_line(tmp_path):
    good = (SAMPLES / "ddp" / "rank-0.pt.trace.json.gz").read_bytes()
    (tmp_path / "rank-0.pt.trace.json.gz").write_bytes(good)
    (tmp_path / "rank-1.json").write_text('{"traceEvents": [')
    with pytest.raises(InputError) as err:
        map_ranks(resolve([str(tmp_path)]), "overlap", engine="ray")
    assert str(err.value).startswith(str(tmp_path / "rank-1.json")) and "\n" not in str(err.value)
