"""Wall time and peak memory of a command's whole process tree (a parent and its workers).

Shared by the benchmarks. Time and memory are measured in separate runs: sampling a
tree's memory costs CPU that the command would otherwise have (the first sampler here
listed every process in /proc: 3.3 ms of CPU every 10 ms, a third of a core, which
slowed an 8-rank ``analyze`` that keeps both cores busy by 10 to 25 % and a
single-threaded HTA hardly at all). So ``run`` times a command unsampled, and
``peak_mb`` samples a run of it; the sampler reads only the tree's own /proc files.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and its descendants (/proc/PID/task/TID/children, Linux)."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE_BYTES
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):  # the process ended meanwhile
            continue
    return total


def run(cmd: list[str], env: dict | None = None, cwd: str | None = None, limit_s: float | None = None,
        sample_s: float | None = None) -> tuple[float | None, float, str]:
    """(wall seconds, peak tree MB, stdout) of one run of ``cmd``.

    ``sample_s``: sample the tree's memory at this interval (else the peak is 0 and the
    run is undisturbed). Past ``limit_s`` the command is killed and the time is None.
    """
    peak = [0]
    # stdout goes to a file, not a pipe: reading a pipe here (32 KiB a read, in Python) held
    # back a command that prints a lot (buckets --run at 64 ranks, 62 MB: 0.49 s through the
    # pipe, 0.30 s to a file or through `| cat`)
    with tempfile.TemporaryFile() as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
        done = threading.Event()

        def sample():
            while not done.is_set():
                peak[0] = max(peak[0], tree_rss_bytes(proc.pid))
                done.wait(sample_s)

        sampler = threading.Thread(target=sample, daemon=True) if sample_s else None
        if sampler:
            sampler.start()
        try:
            _, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            done.set()
            return None, peak[0] / 1e6, ""
        wall = time.perf_counter() - start
        done.set()
        if sampler:
            sampler.join()
        sink.seek(0)
        out = sink.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-500:]}")
    return wall, peak[0] / 1e6, out
