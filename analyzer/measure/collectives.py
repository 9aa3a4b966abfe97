"""Per-collective attribution: runs ``sql/collectives.sql`` after ``sql/overlap.sql``.

The SQL reads three small tables made here from the distinct names of the run,
so that every name pattern stays in ``classify.py``: the role of each range
name, the family and kind of each collective name, and the group size and bus
factor (nccl-tests) of each collective kind.
"""

from __future__ import annotations


from overlapscope.analyzer.ingest import classify
from overlapscope.analyzer.model.ring import bus_factor
from overlapscope.analyzer.store.runinfo import manifest as manifest_of
from overlapscope.analyzer.store.database import run_script

NS_PER_MS = 1e6


def _register(con, name: str, columns: str, rows: list[tuple]) -> None:
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} ({columns})")
    if rows:
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def _is_ddp(con, run_id: int, manifest: dict) -> bool:
    """DDP when the manifest says so, or when the trace shows DDP's forward range."""
    if manifest.get("parallelism"):
        return manifest["parallelism"] == "ddp"
    found = con.execute("SELECT count(*) FROM events WHERE run_id = ? AND name = 'DistributedDataParallel.forward'",
                        [run_id]).fetchone()[0]
    return found > 0


def group_sizes(manifest: dict, world_size: int) -> dict[str, int]:
    """Ranks taking part in each collective kind when the trace does not say (gloo).

    HSDP shards over the mesh's last dimension and replicates over the first:
    gathers and reduce-scatters run in the shard group, the gradient
    all-reduce across replicas.
    """
    mesh = manifest.get("mesh") or {}
    shape = mesh.get("shape") if isinstance(mesh, dict) else None
    if manifest.get("parallelism") == "hsdp" and shape and len(shape) == 2:
        replicate, shard = int(shape[0]), int(shape[1])
        return {"all_gather": shard, "reduce_scatter": shard, "all_reduce": replicate}
    return {}


def prepare(con, run_id: int) -> None:
    """Register the lookup tables the SQL reads."""
    manifest = manifest_of(con, run_id)
    names = [r[0] for r in con.execute(
        "SELECT DISTINCT name FROM events WHERE run_id = ? AND kind IN ('annotation', 'cpu_op', 'comm_launch')",
        [run_id]).fetchall()]
    roles = [(n, *role) for n in names if (role := classify.annotation_role(n))]
    _register(con, "_co_roles", "name VARCHAR, role VARCHAR, arg VARCHAR", roles)
    colls = [r[0] for r in con.execute(
        "SELECT DISTINCT collective FROM collectives WHERE run_id = ? AND collective IS NOT NULL", [run_id]).fetchall()]
    colls = sorted(set(colls) | {arg for _, role, arg in roles if role == "launch"})
    _register(con, "_co_families", "collective VARCHAR, family VARCHAR, kind VARCHAR",
              [(c, classify.collective_family(c), classify.collective_kind(c)) for c in colls])
    _register(con, "_co_settings", "ddp BOOLEAN", [(_is_ddp(con, run_id, manifest),)])


def _bus_factors(rows: list[dict], manifest: dict, world_size: int) -> None:
    """Group size and bus bandwidth (GB/s, nccl-tests) of each collective, in place."""
    defaults = group_sizes(manifest, world_size)
    cache: dict[tuple[str, int], float | None] = {}
    for r in rows:
        n = r["group_size"] or defaults.get(r["collective"] or "", world_size)
        r["group_size"] = n
        if r.pop("shard_only", False) and r["bytes"] and n:
            r["bytes"] *= n  # nccl-tests' all-gather size is the gathered output
        key = (r["collective"] or "", n or 0)
        if key not in cache:
            try:
                cache[key] = bus_factor(key[0], key[1]) if key[1] and key[1] > 1 else None
            except ValueError:
                cache[key] = None
        factor = cache[key]
        seconds = r["comm_ns"] / 1e9
        r["busbw_gbps"] = (round(r["bytes"] / seconds * factor / 1e9, 4)
                           if r["bytes"] and factor and seconds > 0 else None)


def _name_inferred_units(rows: list[dict], manifest: dict) -> None:
    """FSDP1 does not name its units: read the k-th collective of each phase as the
    k-th unit in the manifest's order (forward gathers), its reverse among the
    resharded units (backward gathers) or its reverse (reduce-scatters and the
    HSDP all-reduces). The rows stay marked inferred."""
    units = manifest.get("units") or []
    if not units:
        return
    orders = {
        "forward_allgather": [u["name"] for u in units],
        "backward_allgather": [u["name"] for u in reversed(units) if u.get("reshard_after_forward", True)],
        "reduce_scatter": [u["name"] for u in reversed(units)],
        "allreduce": [u["name"] for u in reversed(units)],
    }
    for r in rows:
        if r["kind"] == "fsdp_unit" and r["inferred"] and str(r["id"]).startswith("unit#"):
            order = orders.get(r["phase"], [])
            k = int(r["id"][5:])
            if k < len(order):
                r["id"] = order[k]


def compute(con, run_id: int, overlap_done: bool = False) -> list[dict]:
    """One row per collective transfer, times in ms (JSON contract of ``buckets``)."""
    if not overlap_done:
        run_script(con, "overlap.sql", run_id=run_id)
    prepare(con, run_id)
    run_script(con, "collectives.sql", run_id=run_id)
    cur = con.execute("SELECT * FROM collective_stats ORDER BY rank, ts_ns, event_id")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, row)) for row in cur.fetchall()]
    manifest = manifest_of(con, run_id)
    world = con.execute("SELECT world_size FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    _bus_factors(rows, manifest, world)
    _name_inferred_units(rows, manifest)
    out = []
    for r in rows:
        out.append({
            "rank": r["rank"],
            "step": r["step"],
            "kind": r["kind"],
            "id": r["id"],
            "phase": r["phase"],
            "collective": r["collective"],
            "bytes": r["bytes"],
            "dtype": r["dtype"],
            "group_size": r["group_size"],
            "microbatch": int(r["microbatch"]) if r["microbatch"] is not None else None,
            "offset_ms": round(r["offset_ns"] / NS_PER_MS, 6) if r["offset_ns"] is not None else None,
            "comm_ms": round(r["comm_ns"] / NS_PER_MS, 6),
            "exposed_ms": round(r["exposed_ns"] / NS_PER_MS, 6),
            "busbw_gbps": r["busbw_gbps"],
            "inferred": bool(r["inferred"]),
            "event_id": r["event_id"],
            # internal (not in the JSON): times on the trace clock for the model replays
            "start_ns": r["ts_ns"],
            "launch_ts_ns": r["cpu_launch_ts_ns"],
        })
    return out
