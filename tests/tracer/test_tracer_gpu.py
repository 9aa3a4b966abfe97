"""The tracer's example with NCCL on the GPUs of this machine (skipped without a GPU)."""

from __future__ import annotations

import collections
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]



def _run(tmp_path: Path, parallel: str) -> tuple[dict, list[dict]]:
    nproc = min(2, torch.cuda.device_count())
    out = tmp_path / parallel
    cmd = [sys.executable, "-m", "overlapscope.tracer.examples.train", "--parallel", parallel, "--nproc", str(nproc),
           "--backend", "nccl", "--model-size", "small", "--out", str(out)]
    if parallel == "ddp":
        cmd += ["--bucket-cap-mb", "1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    traces = []
    for rank in range(nproc):
        with gzip.open(out / f"rank-{rank}.pt.trace.json.gz", "rt") as f:
            traces.append(json.load(f))
    return manifest, traces


def test_ddp_with_nccl(tmp_path):
    manifest, traces = _run(tmp_path, "ddp")
    assert manifest["backend"] == "nccl" and manifest["nccl_version"]
    assert all(d["device"].startswith("cuda:") and d["memory_bytes"] > 0 for d in manifest["devices"])
    assert manifest["calibration"]["flops_per_s"] > 1e11
    n_buckets = len(manifest["buckets"])
    assert sum(b["bytes"] for b in manifest["buckets"]) == manifest["gradient_bytes"]
    for tr in traces:
        assert tr["distributedInfo"]["backend"] == "nccl"
        names = collections.Counter(e["name"] for e in tr["traceEvents"] if e.get("ph") == "X")
        for index in range(n_buckets):
            assert names[f"overlapscope:ddp_bucket#{index}"] == len(manifest["profiled_steps"])
        assert any(e.get("cat") == "kernel" for e in tr["traceEvents"])  # GPU activity recorded
        if manifest["world_size"] > 1:
            assert any(n.startswith(("ncclKernel", "ncclDevKernel")) for n in names)


def test_fsdp_with_nccl(tmp_path):
    manifest, traces = _run(tmp_path, "fsdp")
    assert manifest["parallelism"] == "fsdp" and manifest["nccl_version"]
    assert sum(u["params"] for u in manifest["units"]) == manifest["params"]
    names = {e["name"] for e in traces[0]["traceEvents"] if e.get("ph") == "X"}
    assert {f"FSDP::pre_forward ({u['name']})" for u in manifest["units"] if u["name"]} <= names
