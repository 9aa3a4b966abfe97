"""Exports of a run: ``perfetto`` (one Chrome-trace JSON, every rank on one clock).

``from_paths`` and ``from_run`` gather what the writer needs, the same way for traces
given by path and for a catalog's run: the analysis (collectives with their bucket or
unit, the checklist's findings, clock offsets, step windows) from the reduce, and each
rank's raw events one rank at a time (decoded again in full from its file, or read
from the run store's Parquet).
"""

from __future__ import annotations

import duckdb

from overlapscope.analyzer import sql
from overlapscope.analyzer.errors import UsageError
from overlapscope.analyzer.export import perfetto
from overlapscope.contract.figures import STEP_TIMES

RUN_ID = 1


def _ranks_meta(info) -> list[dict]:
    """Each rank's Kineto facts, written back into its part of the export."""
    out = []
    for r in info.ranks:
        devices = [{"name": n, **({"totalGlobalMem": r["device_memory_bytes"]} if r.get("device_memory_bytes")
                                  else {})} for n in (r.get("device_names") or [])]
        out.append({"rank": r["rank"], "file": r.get("file"), "hostname": r.get("hostname"),
                    "distributedInfo": {"rank": r["rank"], "world_size": info.world_size,
                                        "backend": info.backend},
                    "deviceProperties": devices if info.device_kind == "gpu" else []})
    return out


def _meta(info) -> dict:
    import msgspec

    return {"run": info.describe(), "ranks": _ranks_meta(info),
            "manifest": msgspec.to_builtins(info.manifest) if info.has_manifest else None}


def _windows(con, run_id: int, steps: list[dict]) -> dict:
    figures = {(s["rank"], s["step"]): {k: s.get(k) for k in (*STEP_TIMES, "overlap_pct", "idle_ms")} for s in steps}
    out: dict = {}
    for rank, step, start, end in con.execute(sql.query("export.windows"), {"run_id": run_id}).fetchall():
        out.setdefault(rank, []).append((step, start, end, figures.get((rank, step), {})))
    return out


def _offsets(con, run_id: int, stored: bool) -> dict[int, int]:
    if stored:
        return dict(con.execute(sql.query("export.stored_offsets"), {"run_id": run_id}).fetchall())
    sql.ensure(con, "clocks", run_id=run_id)
    return {r: o or 0 for r, o in con.execute(sql.query("export.computed_offsets")).fetchall()}


def _decoded_rank(source, limits):
    """A store of one rank's raw tables, decoded again in full from its file."""
    def open_store():
        from overlapscope.analyzer.ingest.decode import decode_source

        data = decode_source(source, "full", limits=limits)
        rank = data.meta["rank"]
        con = duckdb.connect()
        sql.setup(con, "intervals")
        con.register("_ev", data.events)
        con.register("_tr", data.tracks)
        con.register("_fl", data.flows)
        for table in ("events", "tracks", "flows"):
            con.execute(sql.query(f"export.load_{table}"), {"run_id": RUN_ID, "rank": rank})
        for name in ("_ev", "_tr", "_fl"):
            con.unregister(name)
        return con, RUN_ID, rank
    return open_store


def _stored_rank(run_dir, rank: int):
    """A store of one rank's raw tables, read from the run store's Parquet files."""
    def open_store():
        from overlapscope.analyzer.store import runstore

        con = duckdb.connect()
        sql.setup(con, "intervals")
        for table in ("events", "tracks"):
            found = runstore.raw_files(run_dir, table, [rank])
            if not found:
                raise UsageError(f"rank {rank}: its raw {table} are not in the run store")
            con.execute(sql.query(f"export.stored_{table}"), {"run_id": RUN_ID, "files": found})
        flows = runstore.raw_files(run_dir, "flows", [rank])
        if flows:
            con.execute(sql.query("export.stored_flows"), {"run_id": RUN_ID, "files": flows})
        else:
            con.execute(sql.query("export.no_flows"))
        return con, RUN_ID, rank
    return open_store


def from_paths(paths: list[str], out: str, workers=None, engine: str = "local", ray_address=None,
               on_rank=None) -> dict:
    """Export the run of trace ``paths`` to ``out`` (.json or .json.gz); the counts written."""
    from overlapscope.analyzer import checklist
    from overlapscope.analyzer.engine import map_run
    from overlapscope.analyzer.ingest.limits import from_env
    from overlapscope.analyzer.predict import buckets as buckets_report

    mapped = map_run(paths, "attribution", workers, engine, ray_address, keep_sources=True)
    try:
        a = buckets_report.analysis(mapped.con, mapped.run_id)
        findings = checklist.diagnose(mapped.con, a)["findings"]
        limits = from_env()
        ranks = [_decoded_rank(s, limits) for s in mapped.inputs.sources]
        return perfetto.write(out, ranks, _meta(a.info), _offsets(mapped.con, mapped.run_id, False),
                              _windows(mapped.con, mapped.run_id, a.overlap["steps"]), a.collectives, findings,
                              on_rank)
    finally:
        mapped.inputs.release()


def from_run(con, run_id: int, out: str, analysis, findings: list[dict], on_rank=None) -> dict:
    """Export a catalog's run (its raw events must still be stored: not pruned), with its
    ``analysis`` (the buckets report's RunAnalysis) and checklist ``findings`` (api gives them)."""
    from overlapscope.analyzer.store import runstore
    from overlapscope.analyzer.store.runinfo import run_info

    info = run_info(con, run_id)
    if not info.stored:
        raise UsageError("export --run: give a run of a catalog")
    if info.pruned_at is not None or not runstore.has_raw(info.run_dir):
        raise UsageError(f"run {run_id} ({info.name}): its raw events were pruned; export needs them "
                         "(ingest the traces again)")
    ranks = [_stored_rank(info.run_dir, r["rank"]) for r in info.ranks]
    return perfetto.write(out, ranks, _meta(info), _offsets(con, run_id, True),
                          _windows(con, run_id, analysis.overlap["steps"]), analysis.collectives, findings, on_rank)
