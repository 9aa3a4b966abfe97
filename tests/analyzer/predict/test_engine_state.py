"""The prediction engine's state stored at ingest (predict/state.py): a what-if with a change
of a catalog's run reads it instead of reducing the run's ranks again, and predicts the
same, to the byte, as the ranks reduced again (the route it replaces, and the route of a
run stored before the state was kept)."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from overlapscope.analyzer import api, runs
from overlapscope.analyzer.predict import state
from overlapscope.analyzer.predict.changes import Changes, Scale, sweep
from overlapscope.analyzer.store import runstore

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
# DDP with one and with several micro-batches, FSDP2 per block, HSDP
RUNS = ("ddp", "ddp_accum_sync", "fsdp_per_block", "hsdp_2x2")
CHANGES = [Changes(bucket_mb=1.0), Changes(bucket_mb="default"), Changes(on_time="late"),
           Changes(sync=False, accum=4), Changes(forward_prefetch=True, backward_prefetch=True),
           Changes(reshard_after_forward=False), Changes(hsdp=2), Changes(gpus=16), Changes(wrap="root-only"),
           Changes(tokens=Scale(2.0, True)), Changes(bandwidth=Scale(0.5, True))]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    path = tmp_path_factory.mktemp("state") / "catalog.duckdb"
    con = runs.open_catalog(path)
    try:
        ids = {name: runs.ingest(con, [str(SAMPLES / name)], f"state/{name}", workers=2) for name in RUNS}
    finally:
        con.close()
    return path, ids


def _answers(con, run_id: int) -> list[bytes]:
    """Every what-if of CHANGES and a bucket sweep, as JSON bytes (a refusal as its message)."""
    out = []
    for changes, swept in [(c, None) for c in CHANGES] + [(Changes(), sweep("bucket-mb=0.5,1,5,25", Changes()))]:
        try:
            out.append(msgspec.json.encode(api.whatif_run(con, run_id, changes, swept)))
        except Exception as err:  # a change the run refuses: the same refusal either way
            out.append(f"{type(err).__name__}: {err}".encode())
    return out


@pytest.mark.parametrize("name", RUNS)
def test_the_stored_state_predicts_what_the_reduced_ranks_predict(catalog, name):
    path, ids = catalog
    con = runs.open_catalog(path, read_only=True)
    try:
        run_dir = _run_dir(con, ids[name])
        a, _ = api.whatif_analysis(con, ids[name])
        assert a.collectives == [] and a.plans, "the stored state was not read"
        from_state = _answers(con, ids[name])
        moved = run_dir / (runstore.ENGINE_STATE + ".away")
        shutil.move(run_dir / runstore.ENGINE_STATE, moved)
        try:
            a, _ = api.whatif_analysis(con, ids[name])
            assert a.collectives, "the ranks were not reduced again"
            reduced = _answers(con, ids[name])
        finally:
            shutil.move(moved, run_dir / runstore.ENGINE_STATE)
    finally:
        con.close()
    assert sum(not b.startswith(b"UsageError") and not b.startswith(b"InputError") for b in reduced) >= 6
    for changes, x, y in zip([*CHANGES, "sweep"], from_state, reduced):
        assert x == y, changes


def _run_dir(con, run_id: int) -> Path:
    from overlapscope.analyzer.store.runinfo import run_info

    return run_info(con, run_id).run_dir


@pytest.mark.parametrize("content", [b"not gzip at all", "other format", "other fields", "truncated"])
def test_a_state_this_version_cannot_read_is_reduced_again(catalog, content):
    """A state of another format (a run stored by another version), damaged or cut short:
    the what-if reduces the ranks again and answers as it does without a state."""
    path, ids = catalog
    con = runs.open_catalog(path, read_only=True)
    try:
        run_id = ids["ddp"]
        run_dir = _run_dir(con, run_id)
        good = (run_dir / runstore.ENGINE_STATE).read_bytes()
        expected = _answers(con, run_id)
        data = runstore.read_engine_state(run_dir)
        if content in ("other format", "other fields"):
            record = msgspec.msgpack.decode(data)
            if content == "other format":
                record["format"] = state.FORMAT + 1
            else:  # a version whose transfers had one more field (its plans decode; defaults fill the rest)
                record["schema"] = record["schema"].replace("Xfer:", "Xfer:extra_ms,")
            runstore.write_engine_state(run_dir, msgspec.msgpack.encode(record))
        elif content == "truncated":
            runstore.write_engine_state(run_dir, data[: len(data) // 2])
        else:
            (run_dir / runstore.ENGINE_STATE).write_bytes(content)
        try:
            a, _ = api.whatif_analysis(con, run_id)
            assert a.collectives, "a state it cannot read was read"
            assert _answers(con, run_id) == expected
        finally:
            (run_dir / runstore.ENGINE_STATE).write_bytes(good)
    finally:
        con.close()


def test_a_state_that_cannot_be_encoded_is_not_stored():
    """Ingest never fails for the state: a value MessagePack cannot hold leaves the run
    without one (its what-if then reduces the ranks again)."""
    import numpy as np

    from overlapscope.analyzer.engine import map_run
    from overlapscope.analyzer.predict import buckets

    mapped = map_run([str(SAMPLES / "ddp")], "attribution", 1)
    a = buckets.analysis(mapped.con, mapped.run_id)
    assert state.encode(a) is not None
    a.sources["odd"] = np.float32(1.0)  # not a type msgspec encodes
    assert state.encode(a) is None
