"""The bundles shipped in sample_traces/: complete, documented, small, and what their names say."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

# name -> what its manifest must say (beyond being a complete bundle)
BUNDLES = {
    "ddp": {"parallelism": "ddp", "accumulation_steps": 1},
    "ddp_accum_nosync": {"parallelism": "ddp", "accumulation_steps": 2, "no_sync": True},
    "ddp_accum_sync": {"parallelism": "ddp", "accumulation_steps": 2, "no_sync": False},
    "ddp_tiny_buckets": {"parallelism": "ddp"},
    "ddp_straggler": {"parallelism": "ddp"},
    "fsdp_per_block": {"parallelism": "fsdp", "wrapping": "per-block"},
    "fsdp_no_reshard": {"parallelism": "fsdp", "wrapping": "per-block"},
    "fsdp_root_only": {"parallelism": "fsdp", "wrapping": "root-only"},
    "fsdp_bf16_fp32_reduce": {"parallelism": "fsdp", "param_dtype": "bfloat16", "reduce_dtype": "float32"},
    "fsdp1_per_block": {"parallelism": "fsdp", "wrapping": "per-block"},
    "hsdp_2x2": {"parallelism": "hsdp", "world_size": 4, "mesh": {"shape": [2, 2], "dim_names": ["replicate", "shard"]}},
}
LIMIT_BYTES = 25 * 10**6


def _manifest(samples_dir: Path, name: str) -> dict:
    return json.loads((samples_dir / name / "manifest.json").read_text())


@pytest.mark.parametrize("name", BUNDLES)
def test_bundle_is_complete(samples_dir, name):
    folder = samples_dir / name
    manifest = _manifest(samples_dir, name)
    assert manifest["schema_version"] == 1
    for key, value in BUNDLES[name].items():
        assert manifest[key] == value, key
    expected = {"manifest.json", *(f"rank-{r}.pt.trace.json.gz" for r in range(manifest["world_size"]))}
    assert {p.name for p in folder.iterdir()} == expected
    with gzip.open(folder / "rank-0.pt.trace.json.gz", "rt") as f:
        info = json.load(f)["distributedInfo"]
    assert (info["rank"], info["world_size"], info["backend"]) == (0, manifest["world_size"], "gloo")


def test_bundles_are_what_their_names_say(samples_dir):
    def m(name):
        return _manifest(samples_dir, name)

    assert len(m("ddp_tiny_buckets")["buckets"]) > 5 * len(m("ddp")["buckets"])
    assert m("ddp_straggler")["command_line"].count("--slow-rank") == 1
    units = {u["name"]: u["reshard_after_forward"] for u in m("fsdp_no_reshard")["units"]}
    assert not any(units.values())
    assert len(m("fsdp_root_only")["units"]) == 1
    assert m("fsdp1_per_block")["model"]["fsdp_version"] == 1


def test_every_bundle_is_documented_and_listed(samples_dir):
    folders = {p.name for p in samples_dir.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert set(BUNDLES) <= folders
    readme = (samples_dir / "README.md").read_text()
    script = (samples_dir / "regenerate.sh").read_text()
    for name in folders:
        assert f"`{name}/`" in readme, f"{name} is not described in sample_traces/README.md"
    for name in BUNDLES:
        assert f"\n{name} " in script, f"regenerate.sh does not rebuild {name}"


def test_samples_are_small(samples_dir):
    total_bytes = sum(p.stat().st_size for p in samples_dir.rglob("*") if p.is_file())
    assert total_bytes < LIMIT_BYTES
