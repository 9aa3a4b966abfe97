"""Benchmark: the served catalog (issue #11).

1. Pushes per second: ``overlapscope dashboard`` on a fresh catalog; ``--pushes``
   raw HTTP pushes of the ``ddp`` sample (2 ranks, 636 kB zipped) from
   ``--clients`` concurrent clients; the rate is pushes over the wall time, every
   push answered 201.
2. ``GET /api/v1/runs`` with 1,000 runs: the catalog is filled by copying stored
   run rows in SQL (their headline, metrics and rank rows; no events, as pruned
   runs), then the median of ``--repeat`` requests (all runs, and ``?name=``).
3. Catalog bytes per run before and after ``prune``: ``--copies`` ingests of the
   ``ddp`` sample, the file size, then ``prune --keep-last 0`` and the size again
   (the marginal bytes per run, the empty catalog's fixed size apart).

Usage: python benchmarks/bench_catalog.py [--pushes N] [--clients N] [--repeat N] [--copies N]
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_traces" / "ddp"
TOKEN = "bench-token-0123456789abcdef"
EXE = Path(sys.executable).parent / "overlapscope"
COMMAND = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "overlapscope.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _zipped(bundle: Path) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for p in sorted(bundle.iterdir()):
            if p.is_file() and ".json" in p.name:
                zf.write(p, p.name)
    return out.getvalue()


def _request(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {TOKEN}"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _serve(db: Path, folder: Path):
    tokens = folder / "tokens"
    tokens.write_text(f"{TOKEN} bench\n")
    port = _free_port()
    proc = subprocess.Popen([*COMMAND, "dashboard", "--db", str(db), "--port", str(port), "--no-samples",
                             "--api-tokens", str(tokens)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if _request(url, "GET", "/api/v1/health")[0] == 200:
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the dashboard did not start")


def _stop(proc) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(30)


def pushes(folder: Path, n: int, clients: int) -> None:
    proc, url = _serve(folder / "push.duckdb", folder)
    body = _zipped(SAMPLE)
    statuses, lock, todo = [], threading.Lock(), list(range(n))

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            statuses.append(_request(url, "POST", f"/api/v1/runs?name=bench&tag=i={i}", body)[0])

    try:
        started = time.monotonic()
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall_s = time.monotonic() - started
    finally:
        _stop(proc)
    assert statuses == [201] * n, statuses
    print(f"pushes: {n} pushes of the ddp sample ({len(body) / 1e3:.0f} kB) from {clients} clients in "
          f"{wall_s:.1f} s: {n / wall_s:.2f} pushes/s ({wall_s / n * 1e3:.0f} ms each, all 201)")


def list_latency(folder: Path, runs: int, repeat: int) -> None:
    from overlapscope.analyzer import runs

    db = folder / "list.duckdb"
    con = runs.open_catalog(db)
    runs.ingest(con, [str(SAMPLE)], "seed")
    # copies of the seed's rows (runs, ranks, metrics: what GET /api/v1/runs reads), 10 names
    con.execute("""INSERT INTO runs SELECT r.run_id + i, 'name-' || (i % 10), r.created_at + to_seconds(i), r.source,
                   r.world_size, r.backend, r.device_kind, r.manifest, '{"copy": "' || i || '"}', r.parallelism,
                   r.headline, 'bench', r.created_at FROM runs r, range(1, ?) t(i)""", [runs])
    con.execute("INSERT INTO ranks SELECT k.run_id + i, k.* EXCLUDE (run_id) FROM ranks k, range(1, ?) t(i)", [runs])
    con.execute("INSERT INTO metrics SELECT m.run_id + i, m.name, m.value FROM metrics m, range(1, ?) t(i)", [runs])
    count = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    con.close()
    proc, url = _serve(db, folder)
    try:
        timings = {}
        for label, path in (("all", "/api/v1/runs"), ("?name=", "/api/v1/runs?name=name-3")):
            _request(url, "GET", path)  # warm
            seconds = []
            for _ in range(repeat):
                started = time.perf_counter()
                status, body = _request(url, "GET", path)
                seconds.append(time.perf_counter() - started)
                assert status == 200
            timings[label] = (statistics.median(seconds), len(json.loads(body)["runs"]), len(body))
    finally:
        _stop(proc)
    for label, (s, n, size) in timings.items():
        print(f"GET /api/v1/runs {label}: {count} runs in the catalog, {n} returned ({size / 1e3:.0f} kB): "
              f"median {s * 1e3:.1f} ms over {repeat}")


def sizes(folder: Path, copies: int) -> None:
    from overlapscope.analyzer.store import retention
    from overlapscope.analyzer import runs

    db = folder / "size.duckdb"
    con = runs.open_catalog(db)
    con.execute("CHECKPOINT")
    empty = retention.size_bytes(db)
    ids = [runs.ingest(con, [str(SAMPLE)], "size") for _ in range(copies)]
    con.execute("CHECKPOINT")
    full = retention.size_bytes(db)
    retention.prune(con, ids)
    retention.rewrite(con, db)
    pruned = retention.size_bytes(db)
    print(f"size: {copies} runs of the ddp sample (2 ranks): {full / 1e6:.1f} MB, "
          f"{(full - empty) / copies / 1e6:.2f} MB per run, {(full - empty) / copies / 2 / 1e6:.2f} MB per rank; "
          f"after prune {pruned / 1e6:.2f} MB, {(pruned - empty) / copies / 1e3:.1f} kB per run "
          f"(empty catalog {empty / 1e6:.2f} MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=32)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--copies", type=int, default=40)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="overlapscope-bench-catalog-"))
    try:
        pushes(folder, args.pushes, args.clients)
        list_latency(folder, args.runs, args.repeat)
        sizes(folder, args.copies)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
