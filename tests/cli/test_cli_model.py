"""``overlapscope model memory|comm|hide``, run in-process through ``overlapscope.cli.main``.

Expected values come from the lesson the model is built on ("the seed"; docs/model.md
restates its worked example and check answers);
see tests/analyzer/model/test_model.py for the rounding rule. The JSON keys checked here are the
contract of issue #4: they may gain siblings, never be renamed.
"""

from __future__ import annotations

import argparse
import json

import pytest

from overlapscope.cli import model as cli_model
from overlapscope.cli import main
from overlapscope.analyzer.errors import UsageError


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def run_json(capsys, *argv: str) -> dict:
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0, err
    return json.loads(out)


# --- memory -------------------------------------------------------------------------------


def test_memory_worked_example_13b_on_32_gpus(capsys):
    """Seed section 4, step 1: 208 / 56.9 / 31.7 / 6.5 / 26 GB (G = 8)."""
    data = run_json(capsys, "model", "memory", "--params", "13B", "--gpus", "32", "--group", "8")
    assert data["ddp_gb"] == 208
    assert round(data["zero1_gb"], 1) == 56.9
    assert round(data["zero2_gb"], 1) == 31.7
    assert data["zero3_gb"] == 6.5
    assert data["hsdp_gb"] == 26
    for stage in ("ddp", "zero1", "zero2", "zero3", "hsdp"):
        assert data[f"{stage}_bytes"] == pytest.approx(data[f"{stage}_gb"] * 1e9)


def test_memory_without_group_has_no_hsdp(capsys):
    data = run_json(capsys, "model", "memory", "--params", "70B", "--gpus", "128")
    assert "hsdp_gb" not in data and "hsdp_bytes" not in data
    assert data["zero3_gb"] == 8.75  # seed section 8 Q1


def test_memory_k_option(capsys):
    data = run_json(capsys, "model", "memory", "--params", "1B", "--gpus", "4", "--k", "4")
    assert data["ddp_gb"] == 8  # (4 + K) Psi


def test_memory_table(capsys):
    status, out, err = run(capsys, "model", "memory", "--params", "13e9", "--gpus", "32")
    assert status == 0 and err == ""
    assert "zero3" in out and "6.500" in out and "208.000" in out


# --- comm ---------------------------------------------------------------------------------


def test_comm_zero3_worked_example(capsys):
    """Seed section 4, step 4: 3 x 2Psi x 31/32 = 75.6 GB per GPU; 1.51 s at 50 GB/s."""
    data = run_json(capsys, "model", "comm", "--params", "13B", "--gpus", "32", "--stage", "zero3",
                    "--bandwidth", "50e9")
    assert data["elements_per_gpu"] == 39e9
    assert round(data["bytes_per_gpu"] / 1e9, 1) == 75.6
    assert round(data["comm_ms"]) == 1511
    assert [c["kind"] for c in data["collectives"]] == ["all_gather", "reduce_scatter"]


def test_comm_zero2_with_accumulation(capsys):
    """Seed accumulation table: ZeRO-2 sends m Psi + Psi."""
    data = run_json(capsys, "model", "comm", "--params", "1000", "--gpus", "8", "--stage", "zero2",
                    "--accum", "4")
    assert data["elements_per_gpu"] == 5000
    assert data["bytes_per_gpu"] == pytest.approx(5000 * 2 * 7 / 8)


def test_comm_hsdp_worked_example(capsys):
    """Seed section 4, step 4: 68.3 GB inside the node, 4.9 GB across nodes."""
    data = run_json(capsys, "model", "comm", "--params", "13B", "--gpus", "32", "--stage", "hsdp",
                    "--group", "8")
    assert round(data["intra_bytes_per_gpu"] / 1e9, 2) == 68.25
    assert round(data["inter_bytes_per_gpu"] / 1e9, 3) == 4.875


def test_comm_hsdp_check_yourself_q5(capsys):
    """Seed section 8 Q5: 1.875 GB across nodes, 75 ms at 25 GB/s."""
    data = run_json(capsys, "model", "comm", "--params", "2B", "--gpus", "64", "--stage", "hsdp",
                    "--group", "4", "--bandwidth", "25G")
    assert data["inter_bytes_per_gpu"] == pytest.approx(1.875e9)
    assert data["inter_ms"] == pytest.approx(75)


def test_comm_fp32_gradients_double_ddp_bytes(capsys):
    bf16 = run_json(capsys, "model", "comm", "--params", "1B", "--gpus", "8", "--stage", "ddp")
    fp32 = run_json(capsys, "model", "comm", "--params", "1B", "--gpus", "8", "--stage", "ddp",
                    "--grad-bytes", "4")
    assert fp32["bytes_per_gpu"] == pytest.approx(2 * bf16["bytes_per_gpu"])
    assert fp32["elements_per_gpu"] == bf16["elements_per_gpu"] == 2e9


def test_comm_no_reshard(capsys):
    data = run_json(capsys, "model", "comm", "--params", "1000", "--gpus", "8", "--stage", "zero3",
                    "--no-reshard")
    assert data["elements_per_gpu"] == 2000  # seed section 8 Q4


def test_comm_table(capsys):
    status, out, _ = run(capsys, "model", "comm", "--params", "13B", "--gpus", "32", "--stage", "hsdp",
                         "--group", "8")
    assert status == 0
    assert "all_reduce" in out and "inter" in out and "68.250" in out


# --- hide ---------------------------------------------------------------------------------


def test_hide_large_n_limit_and_exact(capsys):
    """Seed section 3: T >= F/W (N-1)/N ≈ F/W = 8,000 at 400 TFLOP/s and 50 GB/s."""
    limit = run_json(capsys, "model", "hide", "--flops", "400e12", "--bandwidth", "50e9")
    exact = run_json(capsys, "model", "hide", "--flops", "400T", "--bandwidth", "50G", "--gpus", "32")
    assert limit["tokens_to_hide"] == pytest.approx(8000)
    assert exact["tokens_to_hide"] == pytest.approx(8000 * 31 / 32)


def test_hide_check_yourself_q3(capsys):
    """Seed section 8 Q3: 6,000 tokens; 12,000 with fp32 gradient reduction."""
    bf16 = run_json(capsys, "model", "hide", "--flops", "150e12", "--bandwidth", "25e9")
    fp32 = run_json(capsys, "model", "hide", "--flops", "150e12", "--bandwidth", "25e9",
                    "--grad-bytes", "4")
    assert bf16["tokens_to_hide"] == pytest.approx(6000)
    assert fp32["tokens_to_hide"] == pytest.approx(12000)


def test_hide_verdict(capsys):
    """Seed section 4: ZeRO-3, 4,096 tokens on 50 GB/s is communication-limited."""
    data = run_json(capsys, "model", "hide", "--flops", "400T", "--bandwidth", "50G", "--gpus", "32",
                    "--tokens", "4096", "--stage", "zero3")
    assert data["verdict"] == "exposed"
    assert data["ratio"] == pytest.approx(data["stage_tokens_to_hide"] / 4096)
    assert data["reason"]


def test_hide_table(capsys):
    status, out, _ = run(capsys, "model", "hide", "--flops", "400T", "--bandwidth", "50G",
                         "--tokens", "16384")
    assert status == 0
    assert "8,000" in out and "hidden" in out


# --- numbers and errors -------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("13e9", 13e9), ("13B", 13e9), ("13b", 13e9), ("13G", 13e9), ("70B", 70e9),
    ("1.5M", 1.5e6), ("400e12", 400e12), ("400T", 400e12), ("50e9", 50e9), ("2K", 2000),
    ("13_000_000_000", 13e9), ("8,000", 8000), ("1P", 1e15), (" 12 ", 12), ("0.5", 0.5),
])
def test_parse_quantity(text, value):
    assert cli_model.parse_quantity(text, "--x") == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "13X", "abc", "-1", "1e", "B", "13BB", "nan", "inf", "0"])
def test_parse_quantity_rejects(text):
    with pytest.raises(UsageError):
        cli_model.parse_quantity(text, "--x")


def test_parse_count():
    assert cli_model.parse_count("32", "--gpus") == 32
    assert cli_model.parse_count("1K", "--gpus") == 1000
    with pytest.raises(UsageError, match="whole"):
        cli_model.parse_count("2.5", "--gpus")


@pytest.mark.parametrize("argv", [
    ["model", "memory", "--params", "13X", "--gpus", "32"],
    ["model", "memory", "--params", "13B", "--gpus", "0"],
    ["model", "memory", "--params", "13B", "--gpus", "2.5"],
    ["model", "memory", "--params", "13B", "--gpus", "32", "--group", "5"],
    ["model", "memory", "--params", "13B", "--gpus", "32", "--k", "x"],
    ["model", "comm", "--params", "13B", "--gpus", "32", "--stage", "hsdp"],
    ["model", "comm", "--params", "13B", "--gpus", "32", "--stage", "ddp", "--accum", "0"],
    ["model", "hide", "--flops", "fast", "--bandwidth", "50G"],
    ["model", "hide", "--flops", "400T", "--bandwidth", "50G", "--tokens", "0"],
])
def test_bad_value_exits_2_with_one_line(capsys, argv):
    status, out, err = run(capsys, *argv, "--json")
    assert status == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("overlapscope: error: ")
    assert "Traceback" not in err


def test_every_option_is_documented():
    parser = argparse.ArgumentParser()
    cli_model.add_parser(parser.add_subparsers())
    model = parser._subparsers._group_actions[0].choices["model"]
    commands = model._subparsers._group_actions[0].choices
    assert set(commands) == {"memory", "comm", "hide"}
    for name, sub in commands.items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help, f"model {name} {action.option_strings} has no help"


def test_help_explains_number_syntax(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["model", "memory", "--help"])
    assert exit_info.value.code == 0
    assert "13B" in capsys.readouterr().out


@pytest.mark.parametrize("written", ["3", "ZeRO-3", "zero_3", "fsdp"])
def test_a_stage_is_taken_as_users_write_it(written, capsys):
    """Before: ``--stage 3`` was refused (it wanted ``zero3``, and the help did not list the values)."""
    from overlapscope.cli import main

    assert main(["model", "comm", "--params", "13B", "--gpus", "32", "--stage", written, "--json"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert main(["model", "comm", "--params", "13B", "--gpus", "32", "--stage", "zero3", "--json"]) == 0
    assert given == json.loads(capsys.readouterr().out) and given["stage"] == "zero3"


def test_text_output_names_its_figures_in_words(capsys):
    from overlapscope.cli import main

    assert main(["model", "comm", "--params", "13B", "--gpus", "32", "--stage", "hsdp", "--group", "8",
                 "--bandwidth", "50G", "--intra-bandwidth", "200G"]) == 0
    out = capsys.readouterr().out
    assert "_ms" not in out and "time per step inside the shard groups (--intra-bandwidth): " in out
    assert main(["model", "hide", "--flops", "400T", "--bandwidth", "50G", "--gpus", "32", "--tokens", "4096",
                 "--stage", "3"]) == 0
    out = capsys.readouterr().out
    assert "stage_tokens_to_hide" not in out and "tokens to hide (zero3)" in out
