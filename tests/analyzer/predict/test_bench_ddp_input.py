"""The scaling benchmark's DDP bucket run (benchmarks/bench_scale.py ``build_ddp``) is a run
overlapscope reads whole: every rank, every repeated step, every bucket of the sample."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from overlapscope.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_the_ddp_bucket_run_has_every_bucket_of_every_repeated_step(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_scale
    finally:
        sys.path.pop(0)
    folder = bench_scale.build_ddp(tmp_path / "ddp", 3, {})
    # the sample: 2 ranks, 3 profiled steps, 19 bucket all-reduces a step
    assert main(["buckets", str(ROOT / "sample_traces" / "ddp_tiny_buckets"), "--json"]) == 0
    sample = json.loads(capsys.readouterr().out)
    per_step = len(sample["collectives"]) // len(sample["steps"])
    assert main(["buckets", str(folder), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    steps = collections.Counter(s["rank"] for s in run["steps"])
    assert steps == {0: 3 * bench_scale.DDP_COPIES, 1: 3 * bench_scale.DDP_COPIES, 2: 3 * bench_scale.DDP_COPIES}
    kinds = collections.Counter((c["rank"], c["kind"]) for c in run["collectives"])
    assert kinds == {(r, "ddp_bucket"): per_step * 3 * bench_scale.DDP_COPIES for r in range(3)}
    assert json.loads((folder / "manifest.json").read_text())["world_size"] == 3
