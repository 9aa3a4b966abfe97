"""Scaling benchmark: overlapscope's time, peak memory and bytes on disk against the
number of ranks and against the size of one rank's trace; HTA beside it where it
finishes within its time limit.

Inputs are built from the real 54 MB reference trace (``df_index_resolver.json.gz``):
copies with the rank renumbered (ranks), or its events repeated with shifted
timestamps, correlation ids and step numbers (size). A rank's file is written as
gzip members (header, the shared events, tail), so 256 ranks cost seconds to write.

``--ddp-ranks`` adds a run of DDP bucket all-reduces at those ranks: the sample
``ddp_tiny_buckets``'s rank 0 (19 buckets a step) repeated ``DDP_COPIES`` times (60
steps, 1,140 bucket collectives, 115 MB a rank), with a manifest of that many ranks.
The reference trace's collectives are all of kind ``other``; this is the input on which
the prediction engine's plans, one per rank and step, and the checklist's bucket rules
run at scale.

Every figure is a whole process (its workers included), measured in this run:
``analyze``, ``ingest``, and the stored-run queries ``analyze|buckets|diagnose|whatif --run``
and ``whatif --run --bandwidth 2x`` (a change: predicted from the engine's stored state).
The script prints a table and writes ``benchmarks/scale.svg`` (time and memory
against ranks and size) and ``benchmarks/scale.json`` (a full run only: one with
``--ranks`` or ``--sizes-mb`` given prints its table and leaves them as they are).

Usage: python benchmarks/bench_scale.py [--ranks 1,8,64,256] [--sizes-mb 50,200,1000]
       [--ddp-ranks 16,64,256] [--hta-python PY] [--hta-limit-s 300] [--engine local|ray]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import proctree  # noqa: E402 (beside this script)

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference_traces" / "gpu_allreduce_v100_rank1_of2" / "df_index_resolver.json.gz"
BENCH = ROOT / ".bench" / "scale"
REFERENCE_BYTES = 47_000_000  # the reference trace's decompressed size, about (a copy of its events)
CLI = [sys.executable, "-m", "overlapscope.cli"]

HTA_SCRIPT = """
import sys
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False)
"""


def _ints(listed: str) -> list[int]:
    """``--ranks``/``--sizes-mb``: comma-separated integers; an empty list runs none."""
    return [int(x) for x in listed.split(",") if x.strip()]


# --- inputs -------------------------------------------------------------------------------

def _member(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def load_reference() -> dict:
    if not REFERENCE.is_file():
        sys.exit(f"benchmark input not found: {REFERENCE}")
    with gzip.open(REFERENCE, "rb") as f:
        return json.load(f)


def _events_blob(trace: dict, copies: int) -> bytes:
    """The reference events repeated ``copies`` times, shifted in time, as JSON array items."""
    events = trace["traceEvents"]
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    out = [e for e in events if e.get("ph") == "M"]
    for k in range(copies):
        for e in timed:
            c = dict(e, ts=e["ts"] + k * (span + 1000))
            args = c.get("args")
            if k and args and ("correlation" in args or "External id" in args):
                c["args"] = {**args, **{key: args[key] + k * 10_000_000 for key in ("correlation", "External id")
                                        if isinstance(args.get(key), int)}}
            if k and "id" in c and isinstance(c["id"], int):
                c["id"] += k * 10_000_000
            if k and c.get("name", "").startswith("ProfilerStep#"):
                c["name"] = f"ProfilerStep#{int(c['name'].split('#')[1]) + 100 * k}"
            out.append(c)
    return json.dumps(out)[1:-1].encode()


def build(folder: Path, ranks: int, copies: int, trace: dict, blobs: dict) -> Path:
    """``ranks`` files of the reference repeated ``copies`` times (cached under .bench/)."""
    if (folder / f"rank-{ranks - 1}.json.gz").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    if copies not in blobs:
        blobs[copies] = _member(_events_blob(trace, copies))
    events = blobs[copies]
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    for rank in range(ranks):
        head["distributedInfo"] = dict(trace["distributedInfo"], rank=rank, world_size=ranks)
        text = json.dumps(head)
        with open(folder / f"rank-{rank}.json.gz", "wb") as f:
            f.write(_member(text[:-1].encode() + b', "traceEvents": ['))
            f.write(events)
            f.write(_member(b"]}"))
    return folder


DDP_SAMPLE = ROOT / "sample_traces" / "ddp_tiny_buckets"
DDP_COPIES = 20  # its 3 steps repeated: 60 steps a rank


def build_ddp(folder: Path, ranks: int, blobs: dict) -> Path:
    """``ranks`` files of the DDP sample's rank 0 repeated ``DDP_COPIES`` times, and its manifest
    made for ``ranks`` ranks (cached under .bench/)."""
    if (folder / f"rank-{ranks - 1}.pt.trace.json.gz").exists():
        return folder
    with gzip.open(DDP_SAMPLE / "rank-0.pt.trace.json.gz", "rb") as f:
        trace = json.load(f)
    folder.mkdir(parents=True, exist_ok=True)
    if "ddp" not in blobs:
        blobs["ddp"] = _member(_events_blob(trace, DDP_COPIES))
    head, names = {k: v for k, v in trace.items() if k != "traceEvents"}, []
    for rank in range(ranks):
        info = dict(trace["distributedInfo"], rank=rank, world_size=ranks)
        info["pg_config"] = [dict(pg, pg_size=ranks, ranks=list(range(ranks))) for pg in info.get("pg_config", [])]
        head["distributedInfo"] = info
        names.append(f"rank-{rank}.pt.trace.json.gz")
        with open(folder / names[-1], "wb") as f:
            f.write(_member(json.dumps(head)[:-1].encode() + b', "traceEvents": ['))
            f.write(blobs["ddp"])
            f.write(_member(b"]}"))
    manifest = json.loads((DDP_SAMPLE / "manifest.json").read_text())
    manifest.update(world_size=ranks, trace_files=names, hostnames=manifest["hostnames"][:1] * ranks,
                    devices=[dict(manifest["devices"][0], rank=r) for r in range(ranks)],
                    profiled_steps=[s + 100 * k for k in range(DDP_COPIES) for s in manifest["profiled_steps"]])
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return folder


def decompressed_mb(folder: Path) -> float:
    one = next(folder.glob("*.json.gz"))
    with gzip.open(one, "rb") as g:
        size = sum(len(c) for c in iter(lambda: g.read(1 << 24), b""))
    return size * len(list(folder.glob("*.json.gz"))) / 1e6


# --- measuring ------------------------------------------------------------------------------

def measure(cmd: list[str], limit_s: float | None = None, env: dict | None = None) -> tuple[float | None, float]:
    """Wall seconds (None past the limit) and peak tree RSS (MB) of one command, sampled
    every 20 ms (proctree: at these sizes the sampler's CPU is a small part of the run)."""
    wall, peak_mb, _ = proctree.run(cmd, {**os.environ, **(env or {})}, limit_s=limit_s, sample_s=0.02)
    return wall, peak_mb


def disk_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def run_point(label: str, folder: Path, engine: str, hta: list[str] | None, hta_limit: float) -> dict:
    db_dir = BENCH / "catalogs" / label
    shutil.rmtree(db_dir, ignore_errors=True)
    db_dir.mkdir(parents=True)
    db = db_dir / "catalog.duckdb"
    engine_args = ["--engine", engine] if engine != "local" else []
    row = {"input": label, "ranks": len(list(folder.glob("*.json.gz"))), "mb": decompressed_mb(folder)}
    row["analyze_s"], row["analyze_mb"] = measure(CLI + ["analyze", str(folder), "--json"] + engine_args)
    row["ingest_s"], row["ingest_mb"] = measure(CLI + ["ingest", str(folder), "--run", "bench", "--db", str(db)]
                                                + engine_args)
    row["catalog_mb"] = disk_mb(db_dir)
    for command in ("analyze", "buckets", "diagnose", "whatif"):
        row[f"{command}_run_s"], row[f"{command}_run_mb"] = measure(
            CLI + [command, "--run", "bench", "--db", str(db), "--json"])
    # a what-if with a change: predicted from the engine's state stored at ingest (predict/state.py)
    row["whatif_change_s"], row["whatif_change_mb"] = measure(
        CLI + ["whatif", "--run", "bench", "--db", str(db), "--bandwidth", "2x", "--json"])
    if hta:
        row["hta_s"], row["hta_mb"] = measure(hta + [str(folder)], limit_s=hta_limit)
        if row["hta_s"] is None:  # killed at the limit: its peak so far is no figure
            row["hta_mb"] = None
    shutil.rmtree(db_dir, ignore_errors=True)
    return row


# --- the plot ---------------------------------------------------------------------------------

def svg(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str, x: int, y: int,
        w: int = 420, h: int = 260) -> str:
    """One log-log panel of lines (a few lines of SVG; no plotting library needed)."""
    import math

    pts = [p for s in series.values() for p in s if p[1]]
    if not pts:
        return ""
    lx = [math.log10(p[0]) for p in pts]
    ly = [math.log10(p[1]) for p in pts]
    x0, x1 = min(lx), max(lx) + 1e-9
    y0, y1 = min(ly) - 0.1, max(ly) + 0.1
    colors = ["#3b82f6", "#8b5cf6", "#22d3ee", "#f59e0b", "#dc2626", "#64748b"]
    out = [f'<g transform="translate({x},{y})"><rect width="{w}" height="{h}" fill="white" stroke="#cbd5e1"/>',
           f'<text x="{w / 2}" y="16" text-anchor="middle" font-size="13">{title}</text>',
           f'<text x="{w / 2}" y="{h - 4}" text-anchor="middle" font-size="11">{xlabel}</text>',
           f'<text x="10" y="{h / 2}" font-size="11" transform="rotate(-90 10 {h / 2})" text-anchor="middle">'
           f'{ylabel}</text>']

    def px(v):
        return 40 + (math.log10(v) - x0) / (x1 - x0) * (w - 60)

    def py(v):
        return h - 30 - (math.log10(v) - y0) / (y1 - y0) * (h - 60)

    for i, (name, s) in enumerate(series.items()):
        s = [p for p in s if p[1]]
        if not s:
            continue
        c = colors[i % len(colors)]
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="'
                   + " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in s) + '"/>')
        for a, b in s:
            out.append(f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="3" fill="{c}"><title>{name}: {b:.3g} at '
                       f'{a:g}</title></circle>')
        out.append(f'<text x="{w - 150}" y="{32 + 14 * i}" font-size="11" fill="{c}">{name}</text>')
    for v in sorted({p[0] for p in pts}):
        out.append(f'<text x="{px(v):.1f}" y="{h - 18}" font-size="10" text-anchor="middle">{v:.0f}</text>')
    for v in (min(p[1] for p in pts), max(p[1] for p in pts)):
        out.append(f'<text x="4" y="{py(v):.1f}" font-size="10">{v:.3g}</text>')
    out.append("</g>")
    return "\n".join(out)


def write_outputs(rows: list[dict]) -> None:
    """``benchmarks/scale.json`` and the plot ``benchmarks/scale.svg`` of ``rows``."""
    (ROOT / "benchmarks" / "scale.json").write_text(json.dumps(rows, indent=1))
    by_ranks = [r for r in rows if r["input"].endswith("x54MB")]
    by_size = [r for r in rows if r["input"].startswith("1x") and not r["input"].endswith("54MB")]
    panels = []
    for i, (rs, xkey, xl) in enumerate(((by_ranks, "ranks", "ranks (54 MB each)"), (by_size, "mb", "MB of one trace"))):
        panels.append(svg({"analyze": [(r[xkey], r["analyze_s"]) for r in rs],
                           "ingest": [(r[xkey], r["ingest_s"]) for r in rs],
                           "diagnose --run": [(r[xkey], r["diagnose_run_s"]) for r in rs],
                           "HTA": [(r[xkey], r.get("hta_s")) for r in rs]},
                          f"time against {xkey}", xl, "seconds", 440 * i, 0))
        panels.append(svg({"analyze": [(r[xkey], r["analyze_mb"]) for r in rs],
                           "ingest": [(r[xkey], r["ingest_mb"]) for r in rs],
                           "HTA": [(r[xkey], r.get("hta_mb")) for r in rs]},
                          f"peak memory against {xkey}", xl, "MB", 440 * i, 280))
    (ROOT / "benchmarks" / "scale.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="880" height="540" font-family="sans-serif">\n'
        + "\n".join(panels) + "\n</svg>\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1,8,64,256")
    parser.add_argument("--sizes-mb", default="50,200,1000", help="decompressed MB of one rank's trace")
    parser.add_argument("--ddp-ranks", default="", help="ranks of the DDP bucket run (none by default)")
    parser.add_argument("--engine", default="local")
    parser.add_argument("--hta-python", default=str(ROOT / ".bench" / "hta-venv" / "bin" / "python"))
    parser.add_argument("--hta-limit-s", type=float, default=300)
    args = parser.parse_args()
    trace = load_reference()
    blobs: dict = {}
    hta = [args.hta_python, "-c", HTA_SCRIPT] if Path(args.hta_python).exists() else None
    rows = []
    header = (f"{'input':>12} {'ranks':>5} {'MB':>8} | {'analyze':>8} {'MB':>6} | {'ingest':>7} {'MB':>6} "
              f"{'disk MB':>8} | {'an --run':>8} {'bk --run':>8} {'dg --run':>8} {'wi --run':>8} {'wi 2x':>8} | "
              f"{'HTA s':>7} {'HTA MB':>6}")
    print(header)
    points = [(f"{r}x54MB", BENCH / f"ranks-{r}", r, 1) for r in _ints(args.ranks)]
    points += [(f"1x{s}MB", BENCH / f"size-{s}", 1, max(1, round(s * 1_000_000 / REFERENCE_BYTES))) for s in _ints(args.sizes_mb)]
    points += [(f"{r}xDDP", BENCH / f"ddp-{r}", r, None) for r in _ints(args.ddp_ranks)]
    for label, folder, ranks, copies in points:
        if copies is None:
            build_ddp(folder, ranks, blobs)
        else:
            build(folder, ranks, copies, trace, blobs)
        row = run_point(label, folder, args.engine, hta if ranks <= 64 else None, args.hta_limit_s)
        rows.append(row)

        def f(v, fmt="8.2f"):
            return format(v, fmt) if v is not None else "-".rjust(int(fmt.split(".")[0]))
        print(f"{label:>12} {row['ranks']:>5} {row['mb']:>8.0f} | {f(row['analyze_s'])} {row['analyze_mb']:>6.0f} | "
              f"{f(row['ingest_s'], '7.2f')} {row['ingest_mb']:>6.0f} {row['catalog_mb']:>8.1f} | "
              f"{f(row['analyze_run_s'])} {f(row['buckets_run_s'])} {f(row['diagnose_run_s'])} "
              f"{f(row['whatif_run_s'])} {f(row['whatif_change_s'])} | "
              f"{f(row.get('hta_s'), '7.1f')} {row.get('hta_mb') or 0:>6.0f}", flush=True)
    defaults = {a.dest: a.default for a in parser._actions}
    if (args.ranks, args.sizes_mb, args.ddp_ranks) != (defaults["ranks"], defaults["sizes_mb"], defaults["ddp_ranks"]):
        print("a partial run (--ranks, --sizes-mb or --ddp-ranks given): benchmarks/scale.svg and scale.json "
              "left as they are")
        return 0
    write_outputs(rows)
    print("wrote benchmarks/scale.svg and benchmarks/scale.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
