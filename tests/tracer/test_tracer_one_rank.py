"""The Tracer API in one 1-rank gloo process: a user's comm hook, misuse errors.

The scenarios run in a fresh spawned process, not in the pytest worker: a
process group and the profiler leave native threads behind (gloo, Kineto),
and other tests in the same worker may fork.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("one_rank")
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_run_scenarios, str(folder)).result(timeout=180)


def test_users_comm_hook_is_wrapped_and_still_runs(outcomes):
    """The tracer calls the user's hook for every bucket, inside the bucket's range."""
    result = outcomes["user_hook"]
    manifest = result["manifest"]
    n_buckets = len(manifest["buckets"])
    assert n_buckets > 1
    # Iteration 1: DDP's provisional layout, one bucket; then the rebuilt buckets, in index order.
    assert result["hook_calls"] == [0] + list(range(n_buckets)) * 3
    assert sorted(n for n in result["trace_names"] if n.startswith("overlapscope:ddp_bucket#")) == sorted(
        f"overlapscope:ddp_bucket#{i}" for i in range(n_buckets) for _ in range(2))
    assert manifest["world_size"] == 1
    # One rank: no group to measure bandwidth on, but F is measured.
    assert manifest["calibration"]["collectives"] == []
    assert manifest["calibration"]["bus_bandwidth_bytes_per_s"] is None
    assert manifest["calibration"]["flops_per_s"] > 0


def test_the_manifest_says_whether_the_bucket_cap_was_left_unset(outcomes):
    """torch makes its 1 MiB first bucket only for a cap left unset, so the manifest keeps that
    apart from a cap of 25 set (the what-if's run setting `default` against `25`)."""
    unset = outcomes["cap_unset"]
    assert unset["bucket_cap_mb"] == 25.0 and unset["bucket_cap_default"] is True
    assert outcomes["user_hook"]["manifest"]["bucket_cap_default"] is False  # bucket_cap_mb=0.01


def test_a_registered_hook_cannot_be_wrapped(outcomes):
    assert "already registered" in outcomes["hook_registered_first"]


def test_a_run_shorter_than_the_schedule_is_an_error(outcomes):
    assert "the run took 2 steps; the profiler schedule needs 5" in outcomes["short_run"]


# ----------------------------------------------------------------------------- in the spawned process


def _run_scenarios(folder: str) -> dict:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=0, world_size=1)
    try:
        return {
            "user_hook": _user_hook(Path(folder) / "user_hook"),
            "hook_registered_first": _error_of(_hook_registered_first, Path(folder) / "registered"),
            "short_run": _error_of(_short_run, Path(folder) / "short"),
            "cap_unset": _cap_unset(Path(folder) / "cap_unset"),
        }
    finally:
        dist.destroy_process_group()


def _error_of(scenario, out: Path) -> str:
    try:
        scenario(out)
    except Exception as err:  # the message is what the test checks
        return f"{type(err).__name__}: {err}"
    return "no error"


def _train(model, tracer, steps: int) -> None:
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        with tracer.microbatch(0):
            model(torch.randn(8, 16, generator=gen)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        tracer.step()


def _user_hook(out: Path) -> dict:
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from overlapscope.tracer import CalibrationConfig, ProfileConfig, TraceConfig, Tracer

    calls = []

    def counting_hook(state, bucket):
        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 4)),
        bucket_cap_mb=0.01)
    cfg = TraceConfig(out_dir=out, profile=ProfileConfig(active_steps=2),
                      calibration=CalibrationConfig(message_bytes=(1024,), matmul_size=64))
    with Tracer(model, cfg, ddp_comm_hook=counting_hook, ddp_comm_state=None) as tracer:
        _train(model, tracer, steps=4)
    with gzip.open(out / "rank-0.pt.trace.json.gz", "rt") as f:
        names = [e["name"] for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    return {"manifest": json.loads((out / "manifest.json").read_text()), "hook_calls": calls, "trace_names": names}


def _hook_registered_first(out: Path) -> None:
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from overlapscope.tracer import TraceConfig, Tracer

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    model.register_comm_hook(None, allreduce_hook)
    with Tracer(model, TraceConfig(out_dir=out, calibrate=False)):
        pass


def _cap_unset(out: Path) -> dict:
    import torch

    from overlapscope.tracer import TraceConfig, Tracer

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    with Tracer(model, TraceConfig(out_dir=out, calibrate=False)) as tracer:
        _train(model, tracer, steps=6)
    return json.loads((out / "manifest.json").read_text())


def _short_run(out: Path) -> None:
    import torch

    from overlapscope.tracer import TraceConfig, Tracer

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    with Tracer(model, TraceConfig(out_dir=out, calibrate=False)) as tracer:
        _train(model, tracer, steps=2)
