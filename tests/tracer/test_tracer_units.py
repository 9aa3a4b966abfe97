"""Fast in-process tests of the tracer: configs, formulas, CLI errors (no process group here)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from overlapscope.tracer import (  # noqa: E402
    BUCKET_ANNOTATION,
    MANIFEST_FILE,
    MICROBATCH_ANNOTATION,
    SCHEMA_VERSION,
    TRACE_FILE_TEMPLATE,
    CalibrationConfig,
    ProfileConfig,
    RunFacts,
    TraceConfig,
    Tracer,
)
from overlapscope.tracer.examples.train import main  # noqa: E402
from conftest import ROOT



def test_contract_strings():
    assert BUCKET_ANNOTATION.format(index=3) == "overlapscope:ddp_bucket#3"
    assert MICROBATCH_ANNOTATION.format(index=0) == "overlapscope:microbatch#0"
    assert TRACE_FILE_TEMPLATE.format(rank=7) == "rank-7.pt.trace.json.gz"
    assert MANIFEST_FILE == "manifest.json"
    assert SCHEMA_VERSION == 1


def test_profile_config_keeps_ddps_first_iteration_out():
    with pytest.raises(ValueError, match="wait_steps"):
        ProfileConfig(wait_steps=0)
    cfg = ProfileConfig(wait_steps=2, warmup_steps=1, active_steps=2)
    assert cfg.total_steps == 5
    assert cfg.profiled_steps() == [3, 4]


@pytest.mark.parametrize(
    "kwargs",
    [{"active_steps": 0}, {"warmup_steps": -1}],
)
def test_profile_config_rejects_bad_schedules(kwargs):
    with pytest.raises(ValueError):
        ProfileConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"message_bytes": ()}, {"message_bytes": (1 << 20, 1 << 10)}, {"iterations": 0}, {"matmul_size": 4},
     {"time_budget_s": 0}],
)
def test_calibration_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        CalibrationConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"accumulation_steps": 0}, {"tokens_per_microbatch": 0}, {"wrapping": "sideways"}, {"reduce_dtype": "float99"}],
)
def test_run_facts_reject_bad_values(kwargs):
    with pytest.raises(ValueError):
        RunFacts(**kwargs)


def test_tracer_needs_a_process_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="process group"):
        Tracer(torch.nn.Linear(2, 2), TraceConfig(out_dir="unused"))


def test_tracer_imports_nothing_from_the_analyzer():
    for path in (ROOT / "tracer").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith(("analyzer", "overlapscope.analyzer")), path
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith(("analyzer", "overlapscope.analyzer")) for a in node.names), path


# ----------------------------------------------------------------------------- CLI errors


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--parallel", "pp"], "--parallel"),
        (["--parallel", "ddp", "--wrapping", "root-only", "--out", "x"], "--wrapping does not apply"),
        (["--parallel", "fsdp", "--bucket-cap-mb", "1", "--out", "x"], "--bucket-cap-mb does not apply"),
        (["--out", "x", "--no-sync"], "--no-sync needs --accumulation-steps"),
        (["--out", "x", "--steps", "2"], "--steps must be >="),
        (["--parallel", "ddp"], "--out DIR is required"),
        (["--parallel", "hsdp", "--nproc", "4", "--replicate", "3", "--out", "x"], "must divide"),
        (["--out", "x", "--nproc", "0"], "--nproc must be >= 1"),
        (["--out", "x", "--reshard-after-forward", "maybe", "--parallel", "fsdp"], "true or false"),
        (["--out", "x", "--slow-rank", "5"], "--slow-rank"),
        (["--out", "x", "--param-dtype", "bfloat16"], "--param-dtype applies"),
        (["--out", "x", "--model-size", "huge"], "--model-size"),
    ],
)
def test_bad_options_give_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_nccl_without_gpu_is_an_option_error(capsys):
    assert main(["--backend", "nccl", "--out", "x"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_bad_option_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "overlapscope.tracer.examples.train", "--accumulation-steps", "zero"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--accumulation-steps" in proc.stderr
