"""``overlapscope capture [OPTIONS] -- COMMAND...``: a run bundle of a training job whose
script does not import overlapscope, and ``capture --trigger DIR`` for an armed one.

The command runs with ``tracer/_inject`` first on PYTHONPATH: its ``sitecustomize``
installs the capture (``tracer/capture.py``) in every Python process of the job once it
imports torch (torchrun's workers, ``mp.spawn``'s children, a launcher script's
``python``). The job's output, exit status and signals are its own: this command
passes them through.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime
from importlib.util import find_spec
from pathlib import Path

from overlapscope.analyzer.errors import UsageError
from overlapscope.contract.names import TRIGGER_FILE

ENV = "OVERLAPSCOPE_CAPTURE"  # what tracer/capture.py reads


def add_parser(sub) -> None:
    p = sub.add_parser("capture", help="run a training job and capture a run bundle, no code change",
                       description="Run COMMAND (torchrun ..., python train.py ..., a launcher script) with the "
                                   "capture injected into each of its Python processes: every rank profiles "
                                   "the same optimizer steps and writes its trace, rank 0 the manifest (DDP "
                                   "buckets, FSDP units, accumulation, tokens). The job's output and exit status "
                                   "are its own. With --trigger DIR: make an --armed job capture now.")
    p.add_argument("--out", metavar="DIR", help="the bundle's folder (default: capture-<date>-<time> here)")
    p.add_argument("--steps", type=int, default=3, metavar="N", help="optimizer steps to profile (default 3)")
    p.add_argument("--skip", type=int, default=5, metavar="N",
                   help="optimizer steps to run first (default 5; one more is the profiler's warm-up)")
    p.add_argument("--calibrate", action="store_true", help="measure F and W after the profiled steps")
    p.add_argument("--tokens", type=int, metavar="N", help="tokens per micro-batch (default: read from the "
                                                            "first integer input tensor)")
    p.add_argument("--armed", action="store_true", help="capture nothing until 'capture --trigger DIR'; each "
                                                        "trigger writes a bundle DIR/step-<N>")
    p.add_argument("--poll-steps", type=int, default=10, metavar="N",
                   help="an armed job looks for a trigger every N optimizer steps (default 10)")
    p.add_argument("--trigger", metavar="DIR", help="make the armed job writing to DIR capture its next steps")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the job to run")
    p.set_defaults(func=run, error_status=2)


def run(args) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    for name in ("steps", "skip", "poll_steps"):
        minimum = 0 if name == "skip" else 1
        if getattr(args, name) < minimum:
            raise UsageError(f"--{name.replace('_', '-')} must be at least {minimum}")
    if args.trigger:
        if command:
            raise UsageError("--trigger DIR takes no command: it signals a job that runs already")
        return trigger(Path(args.trigger), args.steps)
    if not command:
        raise UsageError("give the job to run after --, e.g. overlapscope capture -- torchrun --nproc-per-node 2 train.py")
    out = Path(args.out or f"capture-{datetime.now():%Y%m%d-%H%M%S}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = {"out": str(out), "steps": args.steps, "skip": args.skip, "calibrate": args.calibrate,
              "armed": args.armed, "poll_steps": args.poll_steps, "tokens": args.tokens,
              "command": shlex.join(command)}
    stale = out / TRIGGER_FILE
    if args.armed and stale.exists():  # an earlier job's trigger is no request to this one
        stale.unlink()
    env = dict(os.environ)
    env[ENV] = json.dumps(config)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_inject_folder(), env.get("PYTHONPATH")) if p)
    print(f"overlapscope capture: {'armed, bundles go to' if args.armed else 'the bundle goes to'} {out}",
          file=sys.stderr)
    code = _run_job(command, env)
    if not args.armed:
        ranks = sorted(out.glob("rank-*.pt.trace.json.gz"))
        manifest = (out / "manifest.json").is_file()
        what = f"{len(ranks)} rank trace(s){' and the manifest' if manifest else ', no manifest'}"
        print(f"overlapscope capture: {what} in {out}"
              + ("" if ranks else f" (the job took fewer than {args.skip + 1 + args.steps} optimizer steps, or "
                                  "none of its processes imported torch)"), file=sys.stderr)
    return code


def trigger(folder: Path, steps: int) -> int:
    """Write the trigger file into an armed job's folder (on a shared file system, every node sees it)."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder (give the --out of a job started with capture --armed)")
    partial = folder / f".{TRIGGER_FILE}.{os.getpid()}"
    partial.write_text(json.dumps({"steps": steps, "at": time.time()}) + "\n")
    os.replace(partial, folder / TRIGGER_FILE)
    print(f"overlapscope capture: triggered; each rank profiles {steps} steps from its next poll "
          f"into {folder}/step-<N>", file=sys.stderr)
    return 0


def _inject_folder() -> str:
    spec = find_spec("overlapscope.tracer")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the overlapscope tracer is not installed here (pip install 'overlapscope[tracer]')")
    return str(Path(list(spec.submodule_search_locations)[0]) / "_inject")


def _run_job(command: list[str], env: dict) -> int:
    """The job in its own process group; SIGINT and SIGTERM passed on; its exit status back
    (a job killed by a signal: 128 + the signal, as a shell reports it)."""
    try:
        job = subprocess.Popen(command, env=env, start_new_session=True)
    except OSError as err:
        raise UsageError(f"{command[0]}: cannot run it: {err.strerror or err}") from None

    def forward(signum, _frame):
        try:
            os.killpg(job.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = job.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code
