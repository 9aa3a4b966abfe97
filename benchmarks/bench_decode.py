"""Benchmark: one core's end-to-end decode of a trace against the floor of its two
native parts, isal's gunzip and the C scanner, measured in the same run.

For each detail (what a load keeps: overlap for analyze, attribution for buckets and
diagnose, full for ingest): the floor is gunzip plus the scanner as the decode
configures it (the args keys it keeps, the ids it reads while scanning); the scanner
alone without reading ids is printed beside it; end to end is ``decode_source`` (the
floor, then the columns, classification and the few args decoded whole). Best of N
runs each, alternating. Input: a copy of the 54 MB reference trace
(``.bench/scale/ranks-1``, written by bench_scale.py), else the trace itself.

Usage: python benchmarks/bench_decode.py [--repeat N] [TRACE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from overlapscope.analyzer.ingest import frames, scan, stream
from overlapscope.analyzer.ingest.decode import DETAILS, decode_source
from overlapscope.analyzer.ingest.inputs import TraceSource
from overlapscope.analyzer.ingest.kineto import ARGS_KEYS
from overlapscope.analyzer.ingest.limits import from_env

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / ".bench" / "scale" / "ranks-1" / "rank-0.json.gz"
REFERENCE = ROOT.parent / "shared" / "reference_traces" / "gpu_allreduce_v100_rank1_of2" / "df_index_resolver.json.gz"


def _floor(path: str, detail: str, limits, take: bool) -> float:
    scanner = frames._kineto_scan.Scanner(
        scan.scanner_keep(detail), max_value_bytes=limits.max_value_bytes, max_depth=limits.max_depth,
        max_tokens=limits.max_tokens, args_keys=ARGS_KEYS[detail],
        take_keys=[(k.encode(), t) for _, k, t in scan.take_keys(detail)] if take else None)
    start = time.perf_counter()
    for piece in stream.chunks(path, None, path, limits):
        scanner.feed(piece)
    scanner.finish()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    path = args.trace or str(DEFAULT if DEFAULT.is_file() else REFERENCE)
    if frames._kineto_scan is None:
        sys.exit("the C scanner is not built: there is no floor to compare with")
    limits = from_env()
    size = sum(len(c) for c in stream.chunks(path, None, path, limits))
    print(f"{path}: {size / 1e6:.0f} MB decompressed; best of {args.repeat}")
    print(f"{'detail':<12} {'scan only (s)':>14} {'floor (s)':>10} {'decode (s)':>11} {'MB/s':>6} {'ratio':>6}")
    for detail in DETAILS:
        bare, floor, decode = [], [], []
        for _ in range(args.repeat):
            bare.append(_floor(path, detail, limits, take=False))
            floor.append(_floor(path, detail, limits, take=True))
            start = time.perf_counter()
            decode_source(TraceSource(path), detail, limits=limits)
            decode.append(time.perf_counter() - start)
        print(f"{detail:<12} {min(bare):>14.3f} {min(floor):>10.3f} {min(decode):>11.3f} "
              f"{size / 1e6 / min(decode):>6.0f} {min(decode) / min(floor):>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
