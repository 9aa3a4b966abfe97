"""``overlapscope analyze``: the JSON contract and the readable table, in-process."""

from __future__ import annotations

import json

from overlapscope.cli import main
from builders import GpuTrace, write
from conftest import SAMPLES

RANK_KEYS = {"rank", "comm_ms", "exposed_comm_ms", "overlap_pct", "compute_ms", "step_ms"}
STEP_KEYS = {"rank", "step", "step_ms", "comm_ms", "exposed_comm_ms", "compute_ms", "overlap_pct"}


def two_ranks(tmp_path):
    for r in range(2):
        t = GpuTrace(rank=r).step(1, 0, 100).step(2, 100, 100)
        for s in (1, 2):
            t.kernel(100 * (s - 1), 60, step=s).comm(100 * (s - 1) + 40, 40 + 10 * r, step=s)
        write(t, tmp_path / f"rank-{r}.pt.trace.json.gz", gz=True)
    return str(tmp_path)


def test_json_contract(tmp_path, capsys):
    assert main(["analyze", two_ranks(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"run", "ranks", "steps"}
    assert {"world_size", "backend", "devices"} <= set(out["run"])
    assert out["run"]["world_size"] == 2 and out["run"]["backend"] == "nccl"
    assert out["run"]["devices"] == ["NVIDIA H100 80GB HBM3"]
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for r in out["ranks"]:
        assert RANK_KEYS <= set(r)
    assert len(out["steps"]) == 4
    for s in out["steps"]:
        assert STEP_KEYS <= set(s)
    # rank 1's comm is 50 us per step, 30 of it after compute ends at 60
    r1 = {(s["rank"], s["step"]): s for s in out["steps"]}[(1, 2)]
    assert r1["exposed_comm_ms"] == 0.03 and r1["comm_ms"] == 0.05


def test_table(tmp_path, capsys):
    assert main(["analyze", two_ranks(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "world size 2" in out and "exposed_ms" in out and "overlap_%" in out
    assert "most exposed: rank 1" in out


def test_help_lists_every_command(capsys):
    try:
        main(["--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    for command in ("analyze", "model"):
        assert command in out


def test_the_command_ends_without_teardown_and_loses_nothing(tmp_path):
    """As its own process, a command that writes nothing ends at once (``cli._exit_now``):
    its whole output still arrives, its status is kept, a reader that stops early gets no
    traceback, and exit handlers still run."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "overlapscope.cli"]
    full = subprocess.run([*command, "buckets", "--json", str(SAMPLES / "ddp")], capture_output=True, timeout=300)
    assert full.returncode == 0, full.stderr[-2000:]
    assert json.loads(full.stdout)["run"]["ranks_loaded"] == [0, 1]  # all of it (tens of kB), parsed whole

    bad = subprocess.run([*command, "analyze", str(tmp_path / "missing.json")], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.json" in bad.stderr

    # a reader that takes one line and closes the pipe
    reader = subprocess.Popen([*command, "analyze", str(SAMPLES / "ddp")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    first = reader.stdout.readline()
    reader.stdout.close()
    reader.wait(timeout=300)
    assert first.startswith(b"run:") and b"Traceback" not in reader.stderr.read()

    # exit handlers run (a user's sitecustomize, Ray's shutdown): one registered before main
    probe = ("import atexit, sys; atexit.register(lambda: print('handler ran', file=sys.stderr)); "
             "sys.argv = ['overlapscope', 'analyze', '--json', sys.argv[1]]; "
             "from overlapscope.cli import main; main()")
    ran = subprocess.run([sys.executable, "-c", probe, str(SAMPLES / "ddp")], capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0 and "handler ran" in ran.stderr and json.loads(ran.stdout)["ranks"]
