"""The ``run`` object of the JSON contract: what was loaded, from where."""

from __future__ import annotations

import json


def manifest(con, run_id: int) -> dict:
    """The tracer manifest stored with a run ({} for foreign traces)."""
    raw = con.execute("SELECT manifest FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    return json.loads(raw) if raw else {}


def describe(con, run_id: int) -> dict:
    """World size, backend, device names and loaded ranks of one stored run."""
    name, source, world, backend, device_kind, manifest = con.execute(
        "SELECT name, source, world_size, backend, device_kind, manifest FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()
    ranks = con.execute(
        "SELECT rank, file, device_names, hostname FROM ranks WHERE run_id = ? ORDER BY rank", [run_id]
    ).fetchall()
    devices = sorted({d for _, _, names, _ in ranks for d in (names or [])})
    manifest = json.loads(manifest) if manifest else None
    return {
        "run_id": run_id,
        "name": name,
        "world_size": world,
        "backend": backend,
        "device_kind": device_kind,
        "devices": devices or (["cpu"] if device_kind == "cpu" else []),
        "ranks_loaded": [r[0] for r in ranks],
        "files": [r[1] for r in ranks],
        "hostnames": sorted({r[3] for r in ranks if r[3]}),
        "parallelism": manifest.get("parallelism") if manifest else None,
        "has_manifest": manifest is not None,
    }
