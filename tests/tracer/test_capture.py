"""``overlapscope capture -- COMMAND``: run bundles of plain training scripts that never
import overlapscope (``tests/tracer/plain/``), launched by torchrun and by ``mp.spawn``
on CPU gloo, as a user runs them. What must hold: every collective of the bundle is
attributed to a DDP bucket or an FSDP unit; the structure the capture finds (buckets,
units, accumulation, no_sync, tokens, the job's own comm hook) is what the script does;
``diagnose`` reads the capture as it reads the ``Tracer``'s bundle of the same script;
the job's exit status is its own; an armed job writes nothing until triggered, and a
trigger during a 4-rank job yields one bundle with the same steps on every rank.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from machine import quiet

pytestmark = pytest.mark.slow

PLAIN = Path(__file__).parent / "plain"
BIN = Path(sys.executable).parent
OVERLAPSCOPE = [str(BIN / "overlapscope")] if (BIN / "overlapscope").exists() else [sys.executable, "-m",
                                                                                      "overlapscope.cli"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def capture(out: Path, job: list[str], *options: str, timeout: int = 180) -> subprocess.CompletedProcess:
    """The capture in a session of its own: on a timeout the whole job goes (torchrun and its
    ranks too, which would otherwise load the rest of the suite), and the test says so."""
    proc = subprocess.Popen([*OVERLAPSCOPE, "capture", "--out", str(out), *options, "--", *job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"the capture ran past {timeout} s and was killed; its stderr ends: {stderr[-1500:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def torchrun(script: str, ranks: int = 2, *args: str) -> list[str]:
    return [*TORCHRUN, "--nproc-per-node", str(ranks), "--master-port", str(_port()), str(PLAIN / script), *args]


def cli_json(*args: str) -> dict:
    done = subprocess.run([*OVERLAPSCOPE, *args, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def statuses(folder: Path) -> dict[str, str]:
    return {f["id"]: f["status"] for f in cli_json("diagnose", str(folder))["findings"]}


def steps_in(trace: Path) -> list[str]:
    import gzip
    import re

    with gzip.open(trace, "rt") as f:
        return sorted(set(re.findall(r"ProfilerStep#\d+", f.read())))


def test_a_ddp_script_under_torchrun_is_captured_as_the_tracer_captures_it(tmp_path):
    with quiet():  # the two runs' times are compared: the machine to themselves
        _compare_with_the_tracer(tmp_path)


def _compare_with_the_tracer(tmp_path):
    done = capture(tmp_path / "cap", torchrun("ddp_train.py", 2, "--steps", "8"), "--steps", "3", "--skip", "3")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 rank trace(s) and the manifest" in done.stderr
    m = manifest(tmp_path / "cap")
    assert m["parallelism"] == "ddp" and m["world_size"] == 2 and m["profiled_steps"] == [4, 5, 6]
    assert m["tokens_per_microbatch"] == 128 and m["micro_batch_size"] == 8  # read from the (8, 16) token ids
    assert m["accumulation_steps"] == 1 and m["no_sync"] is False
    assert m["model"]["capture"]["ddp_buckets"] == "annotated" and m["buckets_verified"] is True
    assert m["command_line"].endswith("ddp_train.py --steps 8")
    rows = cli_json("buckets", str(tmp_path / "cap"))["collectives"]
    assert rows and {r["kind"] for r in rows} == {"ddp_bucket"} and not any(r["inferred"] for r in rows)
    assert len({r["id"] for r in rows}) == len(m["buckets"]) == 3  # bucket_cap_mb 0.25 on a 1.6 MB model

    traced = subprocess.run(torchrun("ddp_train.py", 2, "--steps", "6", "--tracer", str(tmp_path / "tracer")),
                            capture_output=True, text=True, timeout=240)
    assert traced.returncode == 0, traced.stderr[-2000:]
    ours, theirs = statuses(tmp_path / "cap"), statuses(tmp_path / "tracer")
    assert ours.keys() == theirs.keys()
    # the same rules apply (what the structure decides), and the rules read from the
    # structure agree; the rules on measured times (tokens_below_fw, last_bucket_exposed,
    # exposed_backward_comm, straggler) move with a 2-core machine's noise between any two runs
    # of this script, captured or traced (tokens_below_fw passed in one capture, failed in the
    # next; with the other test worker busy, one of two ranks really is late: straggler failed)
    assert {k for k, v in ours.items() if v == "n/a"} == {k for k, v in theirs.items() if v == "n/a"}
    for rule in ("fp32_reduction", "accumulation_comm", "ddp_bucket_size", "uneven_tokens"):
        assert ours[rule] == theirs[rule], (rule, ours, theirs)


def test_an_fsdp2_script_under_torchrun_gets_its_units_and_accumulation(tmp_path):
    # without --calibrate: with it, rank 0 of this job was killed by SIGABRT once (a fresh-clone suite,
    # 2026-12-06), after the bundle was written; 0 of 44 runs alone or beside two CPU hogs (issue 35's note)
    done = capture(tmp_path / "cap", torchrun("fsdp_train.py", 2, "--steps", "7", "--accum", "2"),
                   "--steps", "2", "--skip", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    m = manifest(tmp_path / "cap")
    assert m["parallelism"] == "fsdp" and m["accumulation_steps"] == 2
    assert sorted(u["name"] for u in m["units"]) == ["", "2", "3", "4"]  # three blocks and the root
    rows = cli_json("buckets", str(tmp_path / "cap"))["collectives"]
    assert rows and {r["kind"] for r in rows} == {"fsdp_unit"}
    assert {r["id"] for r in rows} == {"", "2", "3", "4"}


def test_mp_spawn_with_its_own_comm_hook_and_no_sync_accumulation(tmp_path):
    job = [sys.executable, str(PLAIN / "ddp_train.py"), "--spawn", "2", "--port", str(_port()), "--steps", "6",
           "--accum", "4", "--no-sync", "--own-hook"]
    done = capture(tmp_path / "cap", job, "--steps", "2", "--skip", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    m = manifest(tmp_path / "cap")
    assert m["accumulation_steps"] == 4 and m["no_sync"] is True
    assert m["buckets"] == [] and m["model"]["capture"]["ddp_buckets"].startswith("inferred")
    rows = cli_json("buckets", str(tmp_path / "cap"))["collectives"]
    assert rows and {r["kind"] for r in rows} == {"ddp_bucket"} and all(r["inferred"] for r in rows)
    # one synchronizing backward of four: the trace's micro-batches say so
    assert statuses(tmp_path / "cap")["accumulation_comm"] == "pass"


def test_the_jobs_exit_status_is_passed_through(tmp_path):
    for code in (0, 1, 3):
        done = capture(tmp_path / f"exit{code}", [sys.executable, "-c", f"import sys; sys.exit({code})"])
        assert done.returncode == code, done.stderr
    # a rank that dies: torchrun's own status (1), and the capture neither hangs nor hides it
    done = capture(tmp_path / "dies", torchrun("ddp_train.py", 2, "--steps", "8", "--fail-rank", "1"),
                   "--steps", "2", "--skip", "1")
    assert done.returncode == 1
    # a job killed by a signal: 128 + the signal, as a shell says
    done = capture(tmp_path / "killed", [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert done.returncode == 128 + signal.SIGKILL


def test_the_sitecustomize_it_shadows_still_runs(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    env = {**os.environ, "PYTHONPATH": str(own)}
    done = subprocess.run([*OVERLAPSCOPE, "capture", "--out", str(tmp_path / "cap"), "--", sys.executable, "-c",
                           "import os, sys; print(os.environ.get('OWN_SITE')); sys.exit(0)"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ran", (done.stdout, done.stderr)


def test_an_armed_job_captures_nothing_until_triggered(tmp_path):
    out = tmp_path / "armed"
    out.mkdir()
    (out / "TRIGGER").write_text("{}")  # left from an earlier job: no request to this one
    done = capture(out, torchrun("ddp_train.py", 2, "--steps", "30"), "--armed", "--poll-steps", "5")
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(out.iterdir()) == []  # the old trigger removed, nothing written


def test_a_trigger_during_a_4_rank_job_yields_one_bundle_of_the_same_steps(tmp_path):
    out = tmp_path / "armed"
    result: dict = {}

    def job():
        result["done"] = capture(out, torchrun("ddp_train.py", 4, "--steps", "150", "--sleep-ms", "20"),
                                 "--armed", "--poll-steps", "5", "--steps", "2", timeout=400)

    runner = threading.Thread(target=job)
    runner.start()
    # a trigger as soon as the job starts: taken at the ranks' first poll
    deadline = time.monotonic() + 120
    while not out.is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)
    trigger = subprocess.run([*OVERLAPSCOPE, "capture", "--trigger", str(out), "--steps", "3"],
                             capture_output=True, text=True, timeout=60)
    assert trigger.returncode == 0, trigger.stderr
    runner.join(420)
    done = result["done"]
    assert done.returncode == 0, done.stderr[-2000:]
    bundles = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(bundles) == 1, bundles
    (bundle,) = bundles
    traces = sorted(bundle.glob("rank-*.pt.trace.json.gz"))
    assert len(traces) == 4 and (bundle / "manifest.json").is_file()
    first = int(bundle.name.removeprefix("step-"))
    expected = [f"ProfilerStep#{first + k}" for k in (1, 2, 3)]
    assert all(steps_in(t) == sorted(expected) for t in traces)
    assert manifest(bundle)["profiled_steps"] == [first + 1, first + 2, first + 3]
