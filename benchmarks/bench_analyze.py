"""Benchmark: whole-process ``overlapscope analyze`` against Holistic Trace Analysis.

Both tools run as separate processes on the same inputs in one run, in turns (pairs of
runs, each tool first in every other pair: the machine drifts by 5-20 % over minutes,
and a ratio of two medians taken minutes apart drifted with it); the script prints wall
time and the peak memory of each process tree (a parent and its workers together), the
median of the pairs' time ratios and their lowest and highest. Time is the median of
undisturbed runs, memory is sampled in one more run (``proctree.py``: the sampler's CPU
would slow a tool that keeps every core busy more than one that keeps one busy). HTA runs
from its own virtual environment (``--hta-python``, default ``.bench/hta-venv/bin/python``;
``make bench`` creates it) and is skipped when that is absent.

Inputs (built once under ``.bench/scale`` by bench_scale.py's builder, which its own
points share, from the reference trace ``df_index_resolver.json.gz``, 47 MB
decompressed, 216k events):
  one    1 rank (ranks-1)
  four   4 ranks (ranks-4: copies with the rank rewritten in distributedInfo)
  eight  8 ranks (ranks-8: the same)
  large  8 ranks of about 200 MB each (large-8x200MB: the reference events repeated
         with shifted timestamps, correlation ids, flow ids and step numbers)

``--before DIR`` also times an earlier overlapscope in the same run: a checkout of
it (``git worktree add DIR <commit>``, its C scanner built in place), run from DIR
as the package ``overlapscope`` (a link to DIR in ``.bench/before-path``, ahead of this
checkout on the path). Every process runs with Python's
bytecode cache (as an installed package does; PYTHONDONTWRITEBYTECODE is unset).

Usage: python benchmarks/bench_analyze.py [--repeat N] [--skip-large] [--hta-python PY] [--before DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale  # noqa: E402 (beside this script: the inputs' builder)
import proctree  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / ".bench"
LARGE_RANKS, LARGE_BYTES = 8, 200_000_000

HTA_SCRIPT = """
import sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
overlap = analysis.get_comm_comp_overlap(visualize=False)
t2 = time.perf_counter()
print("HTA_RESULT", overlap["comp_comm_overlap_pctg"].round(2).tolist(), round(t1 - t0, 3), round(t2 - t1, 3))
"""


# --- inputs -------------------------------------------------------------------------

def build_inputs() -> dict[str, Path]:
    """The inputs, built once by bench_scale's builder (the same files as its own points:
    one copy of the reference per rank, or its events repeated for the large ranks)."""
    trace, blobs = bench_scale.load_reference(), {}
    paths = {name: bench_scale.BENCH / f"ranks-{ranks}" for name, ranks in (("one", 1), ("four", 4), ("eight", 8))}
    paths["large"] = bench_scale.BENCH / f"large-{LARGE_RANKS}x{LARGE_BYTES // 1_000_000}MB"
    for name, path in paths.items():
        ranks = LARGE_RANKS if name == "large" else int(path.name.split("-")[1])
        copies = max(1, round(LARGE_BYTES / bench_scale.REFERENCE_BYTES)) if name == "large" else 1
        bench_scale.build(path, ranks, copies, trace, blobs)
    return paths


def uncompressed_mb(path: Path) -> float:
    total = 0
    for f in sorted(path.glob("*.json.gz")):
        with gzip.open(f, "rb") as g:
            while chunk := g.read(1 << 24):
                total += len(chunk)
    return total / 1e6


# --- measuring a process tree -----------------------------------------------------------

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def bench_pairs(ours: list[str], theirs: list[str], repeat: int) -> tuple[float, float, list, float, float, str, str]:
    """Both tools in turns: ``repeat`` pairs, each tool first in every other pair, so that
    the machine's drift (one run to the next varies by 5-20 %, over minutes more) falls on
    both alike. Returns the median wall seconds of each, the pairs' ratios (theirs / ours),
    each one's peak tree MB from one more sampled run, and each one's last stdout."""
    env = dict(ENV)
    proctree.run(ours, env)  # first runs fill the bytecode caches
    proctree.run(theirs, env)
    walls_ours, walls_theirs = [], []
    for i in range(repeat):
        if i % 2:
            walls_theirs.append(proctree.run(theirs, env)[0])
            walls_ours.append(proctree.run(ours, env)[0])
        else:
            walls_ours.append(proctree.run(ours, env)[0])
            walls_theirs.append(proctree.run(theirs, env)[0])
    _, ours_mb, out = proctree.run(ours, env, sample_s=0.01)
    _, theirs_mb, tout = proctree.run(theirs, env, sample_s=0.01)
    ratios = [t / o for o, t in zip(walls_ours, walls_theirs)]
    return (statistics.median(walls_ours), statistics.median(walls_theirs), ratios, ours_mb, theirs_mb, out, tout)


def bench(cmd: list[str], repeat: int, env: dict | None = None, cwd: str | None = None) -> tuple[float, float, str]:
    """Median wall seconds of ``repeat`` undisturbed runs, the peak tree MB of one more
    run sampled every 10 ms (proctree: sampling costs CPU), and the last stdout."""
    env = {**ENV, **(env or {})}
    proctree.run(cmd, env, cwd)  # a first run fills the bytecode caches
    walls = [proctree.run(cmd, env, cwd)[0] for _ in range(repeat)]
    _, peak_mb, out = proctree.run(cmd, env, cwd, sample_s=0.01)
    return statistics.median(walls), peak_mb, out


# --- main -------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="pairs of runs (ours, HTA's) per input")
    parser.add_argument("--skip-large", action="store_true", help="leave out the 8 x 200 MB input")
    parser.add_argument("--hta-python", default=str(BENCH / "hta-venv" / "bin" / "python"))
    parser.add_argument("--before", metavar="DIR", help="a checkout of an earlier overlapscope to time beside")
    args = parser.parse_args()

    paths = build_inputs()
    names = ["one", "four", "eight"] + ([] if args.skip_large else ["large"])
    before = [sys.executable, "-m", "overlapscope.cli", "analyze", "--json"] if args.before else None
    if before:  # the checkout as the package overlapscope, ahead of this one (the editable finder comes last)
        before_path = BENCH / "before-path"
        before_path.mkdir(parents=True, exist_ok=True)
        link = before_path / "overlapscope"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(args.before).resolve())
    overlapscope = [sys.executable, "-m", "overlapscope.cli", "analyze", "--json"]
    hta = [args.hta_python, "-c", HTA_SCRIPT] if Path(args.hta_python).exists() else None
    if hta is None:
        print(f"HTA not found at {args.hta_python}: measuring overlapscope only (make bench creates it)")

    print(f"{'input':6} {'ranks':>5} {'MB':>7} | {'ours s':>7} {'ours MB':>8} | {'HTA s':>7} {'HTA MB':>7} "
          f"| {'speedup':>7} {'pairs':>9} {'mem ratio':>9} |" + (f" {'before s':>8} {'before MB':>9} |" if before else "")
          + " overlap % ours / HTA")
    for name in names:
        path = paths[name]
        ranks = len(list(path.glob("*.json.gz")))
        repeat = 1 if name == "large" else args.repeat
        if hta:
            ours_s, hta_s, ratios, ours_mb, hta_mb, out, hout = bench_pairs(overlapscope + [str(path)],
                                                                           hta + [str(path)], repeat)
            hta_pct = next(l for l in hout.splitlines() if l.startswith("HTA_RESULT")).split("[")[1].split("]")[0]
            theirs = (f"{hta_s:>7.2f} {hta_mb:>7.0f} | {statistics.median(ratios):>6.1f}x "
                      f"{f'{min(ratios):.1f}-{max(ratios):.1f}':>9} {ours_mb / hta_mb:>9.2f} | ")
        else:
            ours_s, ours_mb, out = bench(overlapscope + [str(path)], repeat)
            theirs, hta_pct = f"{'-':>7} {'-':>7} | {'-':>7} {'-':>9} {'-':>9} | ", None
        ours_pct = [r["overlap_pct"] for r in json.loads(out)["ranks"]]
        line = (f"{name:6} {ranks:>5} {uncompressed_mb(path):>7.0f} | {ours_s:>7.2f} {ours_mb:>8.0f} | {theirs}"
                f"{ours_pct}" + (f" / [{hta_pct}]" if hta_pct is not None else ""))
        if before:
            before_s, before_mb, _ = bench(before + [str(path.resolve())], repeat,
                                           {"PYTHONPATH": str(BENCH / "before-path")}, cwd=args.before)
            head, _, tail = line.rpartition("| ")
            line = f"{head}| {before_s:>8.2f} {before_mb:>9.0f} | {tail}"
        print(line, flush=True)
    print("speedup = the median of the pairs' HTA wall time / overlapscope wall time (whole processes, the two run"
          " in turns), pairs = the lowest and highest pair; mem ratio = our peak / HTA's peak (process trees).\n"
          "HTA drops work launched after the last ProfilerStep starts; on these inputs both figures are 0.00.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
