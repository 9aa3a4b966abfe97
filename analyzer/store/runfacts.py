"""Facts about a stored run that the model needs and the trace alone may not say.

The parameter count and tokens per micro-batch come from the tracer's manifest;
the device memory from the traces' deviceProperties, else from the manifest's
devices (the tracer records RAM for CPU ranks). Missing facts are None: callers
say what is missing instead of guessing.
"""

from __future__ import annotations

import json


def _manifest_memory(manifest: dict) -> int | None:
    sizes = [d.get("memory_bytes") for d in manifest.get("devices") or [] if isinstance(d, dict)]
    sizes = [int(s) for s in sizes if isinstance(s, (int, float)) and s > 0]
    return min(sizes) if sizes else None


def facts(con, run_id: int) -> dict:
    """Parameters, tokens, mesh and device memory (the smallest over ranks) of one run."""
    raw, world, device_kind = con.execute(
        "SELECT manifest, world_size, device_kind FROM runs WHERE run_id = ?", [run_id]).fetchone()
    manifest = json.loads(raw) if raw else {}
    traced = con.execute("SELECT min(device_memory_bytes) FROM ranks WHERE run_id = ? AND device_memory_bytes > 0",
                         [run_id]).fetchone()[0]
    from_manifest = _manifest_memory(manifest)
    mesh = manifest.get("mesh") if isinstance(manifest.get("mesh"), dict) else None
    return {
        "world_size": world,
        "device_kind": device_kind,
        "parallelism": manifest.get("parallelism"),
        "params": manifest.get("params"),
        "tokens_per_microbatch": manifest.get("tokens_per_microbatch"),
        "accumulation_steps": manifest.get("accumulation_steps"),
        "mesh_shape": mesh.get("shape") if mesh else None,
        "device_memory_bytes": traced or from_manifest,
        "device_memory_source": "trace" if traced else ("manifest" if from_manifest else None),
        "has_manifest": bool(manifest),
    }
