"""Real 2-rank CPU (gloo) runs of the tracer's example: DDP, FSDP2, FSDP1, HSDP.

Each run happens once per test session, shared by every test that reads it
(also across pytest-xdist workers, through a file lock). Expected values come
from sources other than the code under test: parameter sizes summed from the
model itself, range names counted in the JSON traces, tensor sizes that gloo
reports for the collectives it ran.
"""

from __future__ import annotations

import collections
import fcntl
import gzip
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import example_runner

torch = pytest.importorskip("torch")

from overlapscope.tracer.examples.model import MODEL_SIZES, TinyLM  # noqa: E402
from conftest import ROOT

pytestmark = pytest.mark.slow

TIMEOUT_S = 240
EXAMPLE = [sys.executable, "-m", "overlapscope.tracer.examples.train"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "overlapscope.tracer.examples.train"]

# name -> (launcher, example options); every run uses 2 ranks, the tiny model and gloo.
RUNS = {
    "ddp": (EXAMPLE, ["--parallel", "ddp", "--bucket-cap-mb", "0.1"]),
    "ddp_plain": (EXAMPLE, ["--parallel", "ddp", "--bucket-cap-mb", "0.1", "--no-trace"]),
    "ddp_accum_nosync": (EXAMPLE, ["--parallel", "ddp", "--bucket-cap-mb", "0.1", "--accumulation-steps", "2",
                                   "--no-sync", "--no-calibrate"]),
    "ddp_accum_sync": (EXAMPLE, ["--parallel", "ddp", "--bucket-cap-mb", "0.1", "--accumulation-steps", "2",
                                 "--no-calibrate"]),
    "fsdp": (EXAMPLE, ["--parallel", "fsdp"]),
    "fsdp_plain": (EXAMPLE, ["--parallel", "fsdp", "--no-trace"]),
    "fsdp_no_reshard": (EXAMPLE, ["--parallel", "fsdp", "--reshard-after-forward", "false", "--no-calibrate"]),
    "fsdp_root_only_torchrun": (TORCHRUN, ["--parallel", "fsdp", "--wrapping", "root-only", "--no-calibrate"]),
    "fsdp1": (EXAMPLE, ["--parallel", "fsdp", "--fsdp-version", "1", "--no-calibrate"]),
    "hsdp": (EXAMPLE, ["--parallel", "hsdp", "--replicate", "2"]),
}

CONTRACT_KEYS = {
    "schema_version", "world_size", "backend", "devices", "parallelism", "params", "param_dtype", "reduce_dtype",
    "tokens_per_microbatch", "accumulation_steps", "buckets", "units", "mesh", "calibration", "torch_version",
    "nccl_version", "hostnames", "start_time", "command_line", "model", "micro_batch_size", "no_sync", "wrapping",
    "bucket_cap_mb", "bucket_cap_default", "profiled_steps", "gradient_bytes",
}


# ----------------------------------------------------------------------------- running


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker has its own basetemp; their parent is shared by
    # the session's workers and by no other session.
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "tracer-runs"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session")
def run(runs_root):
    """``run(name)`` -> the run's folder (``bundle/``, ``losses.json``), made once per session."""

    def get(name: str) -> Path:
        folder = runs_root / name
        with open(runs_root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / "exit_status").exists():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                _run_example(name, folder)
        # A failed run fails every test that reads it, with the same output (no reruns).
        if (folder / "exit_status").read_text() != "0":
            pytest.fail(f"{name} failed:\n{(folder / 'stderr.txt').read_text()[-4000:]}")
        return folder

    return get


def _run_example(name: str, folder: Path) -> None:
    launcher, options = RUNS[name]
    argv = [*options, "--loss-file", str(folder / "losses.json")]
    if "--no-trace" not in options:
        argv += ["--out", str(folder / "bundle")]
    if launcher is EXAMPLE:  # the example's own launcher, forked from a runner that imported torch
        status = example_runner.run(argv, folder / "stderr.txt", TIMEOUT_S)
    else:  # torchrun starts its own processes
        proc = subprocess.run([*launcher, *argv], cwd=ROOT, env=example_runner.env(), capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        (folder / "stderr.txt").write_text(proc.stderr)
        status = proc.returncode
    (folder / "exit_status").write_text(str(status))


def bundle(run, name: str) -> Path:
    return run(name) / "bundle"


def manifest(run, name: str) -> dict:
    return json.loads((bundle(run, name) / "manifest.json").read_text())


def trace(run, name: str, rank: int) -> dict:
    with gzip.open(bundle(run, name) / f"rank-{rank}.pt.trace.json.gz", "rt") as f:
        return json.load(f)


def losses(run, name: str) -> list[list[float]]:
    return json.loads((run(name) / "losses.json").read_text())["losses"]


# ----------------------------------------------------------------------------- trace reading


def complete_events(tr: dict) -> list[dict]:
    return [e for e in tr["traceEvents"] if e.get("ph") == "X"]


def profiler_steps(tr: dict) -> list[dict]:
    return sorted((e for e in complete_events(tr) if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])


def names_per_step(tr: dict, prefix: str) -> list[collections.Counter]:
    """For each ProfilerStep span: how often each range starting with ``prefix`` begins inside it."""
    events = [e for e in complete_events(tr) if e["name"].startswith(prefix)]
    return [
        collections.Counter(e["name"] for e in events if step["ts"] <= e["ts"] <= step["ts"] + step["dur"])
        for step in profiler_steps(tr)
    ]


# ----------------------------------------------------------------------------- the model, independently


def model_params() -> dict[str, torch.nn.Parameter]:
    with torch.device("meta"):  # shapes only: no compute, no thread pools in the test process
        return dict(TinyLM(MODEL_SIZES["tiny"]).named_parameters())


def total_params() -> int:
    return sum(p.numel() for p in model_params().values())


def params_under(prefix: str) -> int:
    return sum(p.numel() for name, p in model_params().items() if name.startswith(prefix))


# ----------------------------------------------------------------------------- every traced run


TRACED = [name for name, (_, options) in RUNS.items() if "--no-trace" not in options]


@pytest.mark.parametrize("name", TRACED)
def test_bundle_has_one_trace_per_rank_and_a_manifest(run, name):
    files = sorted(p.name for p in bundle(run, name).iterdir())
    assert files == ["manifest.json", "rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"]
    for rank in (0, 1):
        info = trace(run, name, rank)["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, 2, "gloo")


@pytest.mark.parametrize("name", TRACED)
def test_manifest_contract(run, name):
    m = manifest(run, name)
    assert CONTRACT_KEYS <= m.keys()
    assert m["schema_version"] == 1
    assert (m["world_size"], m["backend"], m["nccl_version"]) == (2, "gloo", None)
    assert [d["rank"] for d in m["devices"]] == [0, 1]
    assert all(d["device"] == "cpu" and d["memory_bytes"] > 0 for d in m["devices"])
    assert len(m["hostnames"]) == 2
    assert m["params"] == total_params()
    assert m["param_dtype"] == m["reduce_dtype"] == "float32"
    assert m["tokens_per_microbatch"] == 4 * MODEL_SIZES["tiny"].seq_len
    assert m["micro_batch_size"] == 4
    assert m["torch_version"] == torch.__version__
    assert datetime.fromisoformat(m["start_time"]).utcoffset().total_seconds() == 0
    assert "tracer.examples.train" in m["command_line"]
    assert m["model"]["layers"] == MODEL_SIZES["tiny"].layers


@pytest.mark.parametrize("name", TRACED)
def test_profiled_steps_are_the_traces_steps(run, name):
    m = manifest(run, name)
    for rank in (0, 1):
        steps = [int(e["name"].split("#")[1]) for e in profiler_steps(trace(run, name, rank))]
        assert steps == m["profiled_steps"] == [2, 3, 4]  # wait 1 (DDP's provisional buckets), warmup 1


@pytest.mark.parametrize("name", TRACED)
def test_each_microbatch_is_marked_once_per_step(run, name):
    accumulation = manifest(run, name)["accumulation_steps"]
    expected = collections.Counter(f"overlapscope:microbatch#{i}" for i in range(accumulation))
    for rank in (0, 1):
        assert names_per_step(trace(run, name, rank), "overlapscope:microbatch#") == [expected] * 3


# ----------------------------------------------------------------------------- DDP


@pytest.mark.parametrize("name", ["ddp", "ddp_accum_nosync", "ddp_accum_sync"])
def test_ddp_buckets_add_up_to_the_gradients(run, name):
    m = manifest(run, name)
    buckets = m["buckets"]
    assert m["parallelism"] == "ddp" and m["units"] == [] and m["mesh"] is None
    assert len(buckets) > 1  # 0.1 MiB buckets split the 0.5 MB of gradients
    assert [b["index"] for b in buckets] == list(range(len(buckets)))
    grads_bytes = sum(p.numel() * p.element_size() for p in model_params().values())
    assert sum(b["bytes"] for b in buckets) == m["gradient_bytes"] == grads_bytes
    assert sum(b["params"] for b in buckets) == total_params()
    names = [n for b in buckets for n in b["param_names"]]
    assert sorted(names) == sorted(model_params())
    sizes = {name: p.numel() for name, p in model_params().items()}
    assert all(b["params"] == sum(sizes[n] for n in b["param_names"]) for b in buckets)
    assert m["bucket_cap_mb"] == pytest.approx(0.1) and m["bucket_cap_default"] is False
    assert m["buckets_verified"] is True


@pytest.mark.parametrize(("name", "syncs_per_step"), [("ddp", 1), ("ddp_accum_nosync", 1), ("ddp_accum_sync", 2)])
def test_each_bucket_is_marked_once_per_synchronizing_backward(run, name, syncs_per_step):
    buckets = manifest(run, name)["buckets"]
    expected = collections.Counter({f"overlapscope:ddp_bucket#{b['index']}": syncs_per_step for b in buckets})
    for rank in (0, 1):
        assert names_per_step(trace(run, name, rank), "overlapscope:ddp_bucket#") == [expected] * 3


@pytest.mark.parametrize("name", ["ddp", "ddp_accum_sync"])
def test_bucket_annotation_wraps_the_launch_of_its_all_reduce(run, name):
    for rank in (0, 1):
        events = complete_events(trace(run, name, rank))
        launches = [e for e in events if e["name"] == "c10d::allreduce_"]
        marks = [e for e in events if e["name"].startswith("overlapscope:ddp_bucket#")]
        assert marks
        for mark in marks:
            inside = [e for e in launches
                      if e["tid"] == mark["tid"] and mark["ts"] <= e["ts"] and e["ts"] + e["dur"] <= mark["ts"] + mark["dur"]]
            assert len(inside) == 1, mark


def test_bucket_sizes_are_what_gloo_reduced(run):
    """gloo reports each all-reduce's tensor size; they are the buckets, every step."""
    buckets = manifest(run, "ddp")["buckets"]
    for rank in (0, 1):
        reduced = [e["args"]["Input Dims"][0][0] for e in complete_events(trace(run, "ddp", rank))
                   if e["name"] == "gloo:all_reduce"]
        assert sorted(reduced) == sorted([b["bytes"] // 4 for b in buckets] * 3)  # float32: 4 bytes


def test_accumulation_facts(run):
    nosync, sync = manifest(run, "ddp_accum_nosync"), manifest(run, "ddp_accum_sync")
    assert (nosync["accumulation_steps"], nosync["no_sync"]) == (2, True)
    assert (sync["accumulation_steps"], sync["no_sync"]) == (2, False)
    assert nosync["calibration"] is None


def test_ddp_losses_identical_with_and_without_tracer(run):
    traced, plain = losses(run, "ddp"), losses(run, "ddp_plain")
    assert len(traced) == 2 and len(traced[0]) == 5
    assert traced == plain  # exact: the annotated hook reduces like DDP's built-in one
    assert traced[0] != traced[1]  # the ranks saw different data


# ----------------------------------------------------------------------------- calibration


@pytest.mark.parametrize("name", ["ddp", "fsdp"])
def test_calibration_uses_nccl_tests_formulas(run, name):
    cal = manifest(run, name)["calibration"]
    assert cal["flops_per_s"] > 1e8
    assert cal["matmul"]["flops_per_s"] == cal["flops_per_s"]
    assert cal["matmul"]["dtype"] == "float32"
    size = cal["matmul"]["size"]
    assert cal["matmul"]["seconds"] == pytest.approx(2 * size**3 / cal["flops_per_s"])
    kinds = {c["kind"] for c in cal["collectives"]}
    assert kinds == {"all_reduce", "all_gather", "reduce_scatter"}
    assert len({c["bytes"] for c in cal["collectives"]}) >= 2  # a few sizes
    for c in cal["collectives"]:
        n = c["group_size"]
        assert n == 2
        assert c["algbw_bytes_per_s"] == pytest.approx(c["bytes"] / c["seconds"])
        factor = 2 * (n - 1) / n if c["kind"] == "all_reduce" else (n - 1) / n
        assert c["busbw_bytes_per_s"] == pytest.approx(c["algbw_bytes_per_s"] * factor)
    largest = max(c["bytes"] for c in cal["collectives"])
    at_largest = sorted(c["busbw_bytes_per_s"] for c in cal["collectives"] if c["bytes"] == largest)
    assert cal["bus_bandwidth_bytes_per_s"] == pytest.approx(at_largest[len(at_largest) // 2])


# ----------------------------------------------------------------------------- FSDP


def _units(m: dict) -> dict[str, dict]:
    return {u["name"]: u for u in m["units"]}


@pytest.mark.parametrize("name", ["fsdp", "fsdp_no_reshard", "fsdp1", "hsdp"])
def test_fsdp_units_cover_all_parameters(run, name):
    m = manifest(run, name)
    units = _units(m)
    assert set(units) == {"", "blocks.0", "blocks.1"} and m["buckets"] == []
    assert sum(u["params"] for u in units.values()) == total_params() == m["params"]
    for block in ("blocks.0", "blocks.1"):
        assert units[block]["params"] == params_under(block + ".")
    assert units[""]["params"] == total_params() - params_under("blocks.")
    assert all(u["bytes"] == 4 * u["params"] for u in units.values())  # float32
    names = sorted(n for u in units.values() for n in u["param_names"])
    assert names == sorted(model_params())
    assert m["gradient_bytes"] == 4 * total_params()
    assert m["wrapping"] == "per-block"


@pytest.mark.parametrize(("name", "blocks_reshard", "gathers_per_step"), [("fsdp", True, 2), ("fsdp_no_reshard", False, 1)])
def test_reshard_after_forward_is_the_effective_value(run, name, blocks_reshard, gathers_per_step):
    units = _units(manifest(run, name))
    assert units[""]["reshard_after_forward"] is False  # FSDP2 keeps the root unsharded for backward
    assert units["blocks.0"]["reshard_after_forward"] is blocks_reshard
    # The trace agrees: a unit resharded after forward is gathered again in backward.
    for rank in (0, 1):
        counts = names_per_step(trace(run, name, rank), "FSDP::all_gather (")
        assert all(c["FSDP::all_gather (blocks.1)"] == gathers_per_step for c in counts)


@pytest.mark.parametrize("name", ["fsdp", "hsdp"])
def test_unit_names_are_the_names_in_fsdp_ranges(run, name):
    tr_names = {e["name"] for e in complete_events(trace(run, name, 0))}
    for unit in manifest(run, name)["units"]:
        label = f"FSDP::pre_forward ({unit['name']})" if unit["name"] else "FSDP::pre_forward"
        assert label in tr_names


def test_fsdp_root_only_under_torchrun(run):
    m = manifest(run, "fsdp_root_only_torchrun")
    assert m["wrapping"] == "root-only"
    [unit] = m["units"]
    assert (unit["name"], unit["params"], unit["reshard_after_forward"]) == ("", total_params(), False)


def test_fsdp1_is_recorded_as_fsdp(run):
    m = manifest(run, "fsdp1")
    assert m["parallelism"] == "fsdp" and m["model"]["fsdp_version"] == 1
    assert _units(m)["blocks.0"]["reshard_after_forward"] is True
    assert "FullyShardedDataParallel.forward" in {e["name"] for e in complete_events(trace(run, "fsdp1", 0))}


def test_hsdp_records_its_mesh_and_replicate_group(run):
    m = manifest(run, "hsdp")
    assert m["parallelism"] == "hsdp"
    assert m["mesh"] == {"shape": [2, 1], "dim_names": ["replicate", "shard"]}
    # Shard groups of one rank have nothing to measure; the replicate group does.
    assert {(c["group"], c["kind"]) for c in m["calibration"]["collectives"]} == {("replicate", "all_reduce")}


def test_fsdp_losses_identical_with_and_without_tracer(run):
    assert losses(run, "fsdp") == losses(run, "fsdp_plain")
