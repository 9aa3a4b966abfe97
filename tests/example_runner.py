"""The tracer's example, run as from the command line, without importing torch each time.

``run(argv, stderr_path)`` is ``python -m overlapscope.tracer.examples.train ARGV``: a
process that imported torch and the example once (one per test worker) forks a child per
run, which runs the example's main function (its stderr in a file, its exit status sent
back). The example's CPU ranks then fork from that child: a run pays no import of torch
(5 s on this machine) at all.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RUNNER_CODE = r"""
import json, os, sys, traceback
from overlapscope.tracer.examples import train
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        fd = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
        try:
            code = train.main(job["argv"]) or 0
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


def env() -> dict:
    """This environment without a launcher's rank variables (the example spawns its own ranks)."""
    return {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}


class _Runner:
    def __init__(self):
        # its own session: a run past its time is killed with every process it started
        self.proc = subprocess.Popen([sys.executable, "-c", RUNNER_CODE], cwd=ROOT, env=env(), text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)

    def run(self, argv: list[str], stderr: Path, timeout_s: float) -> int | str:
        self.proc.stdin.write(json.dumps({"argv": argv, "stderr": str(stderr)}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            _RUNNER.clear()
            return "timeout" if not ready else "the runner died"
        return int(line)


_RUNNER: list[_Runner] = []


def run(argv: list[str], stderr: Path, timeout_s: float = 240) -> int | str:
    """The example's exit status for ``argv`` (``"timeout"`` past ``timeout_s``, when the
    run is killed with every process it started); its stderr in the file ``stderr``."""
    if not _RUNNER:
        _RUNNER.append(_Runner())
    return _RUNNER[0].run(argv, stderr, timeout_s)


def check(argv: list[str], stderr: Path, timeout_s: float = 240) -> None:
    """``run``, failing with the end of its stderr unless it exits 0."""
    status = run(argv, stderr, timeout_s)
    if status != 0:
        raise AssertionError(f"the example {' '.join(argv)} ended with {status}:\n{stderr.read_text()[-4000:]}")
