"""What a stored run is: its rows in ``runs`` and ``ranks`` and its manifest (typed).

``run_info`` reads them once; the analyses take the result instead of querying
single columns here and there. ``describe`` is the ``run`` object of the JSON
contract; ``facts`` what the model needs that the trace alone may not say
(parameters and tokens from the manifest, device memory from the traces'
deviceProperties, else from the manifest's devices). Missing facts are None:
callers say what is missing instead of guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from overlapscope.analyzer import sql
from overlapscope.analyzer.errors import RunNotFound, UsageError
from overlapscope.contract import manifest as contract
from overlapscope.contract.manifest import Manifest


@dataclass(frozen=True)
class RunInfo:
    run_id: int
    name: str
    source: str | None
    world_size: int | None
    backend: str | None
    device_kind: str  # 'gpu' or 'cpu'
    manifest: Manifest  # contract.manifest.EMPTY for foreign traces
    has_manifest: bool
    tags: dict = field(default_factory=dict)
    created_at: object = None
    ranks: list[dict] = field(default_factory=list)  # rank, file, device_names, hostname, device_memory_bytes
    pruned_at: object = None  # when prune dropped the raw events (None: complete)
    run_dir: Path | None = None  # its folder in the catalog's run store (None: a one-shot store)

    @property
    def stored(self) -> bool:
        """A run of a catalog: its analyses were made at ingest (``runstore``), never redone here."""
        return self.run_dir is not None

    @property
    def parallelism(self) -> str | None:
        """ddp, fsdp or hsdp as the manifest says (None for foreign traces)."""
        return self.manifest.parallelism

    def describe(self) -> dict:
        """The ``run`` object of the JSON contract."""
        devices = sorted({d for r in self.ranks for d in (r["device_names"] or [])})
        return {
            "run_id": self.run_id,
            "name": self.name,
            "world_size": self.world_size,
            "backend": self.backend,
            "device_kind": self.device_kind,
            "devices": devices or (["cpu"] if self.device_kind == "cpu" else []),
            "ranks_loaded": [r["rank"] for r in self.ranks],
            "files": [r["file"] for r in self.ranks],
            "hostnames": sorted({r["hostname"] for r in self.ranks if r["hostname"]}),
            "parallelism": self.parallelism,
            "has_manifest": self.has_manifest,
            "missing_ranks": self.missing_ranks(),
            "dropped_events": self.dropped_events(),
            "text_replaced": sum(r.get("text_replaced") or 0 for r in self.ranks),
            "warnings": self.warnings(),
            "pruned_at": self.pruned_at,
        }

    def missing_ranks(self) -> list[int]:
        """Ranks of the job whose traces were not given (the analyses cover the others)."""
        loaded = {r["rank"] for r in self.ranks}
        return [r for r in range(self.world_size or 0) if r not in loaded]

    def dropped_events(self) -> dict:
        """Events left out for their timestamps or durations, by reason, over the ranks."""
        total: dict[str, int] = {}
        for r in self.ranks:
            for reason, n in json.loads(r["dropped_events"] or "{}").items():
                total[reason] = total.get(reason, 0) + n
        return total

    def warnings(self) -> list[str]:
        """What the user should know about the input, one line each."""
        out = []
        missing = self.missing_ranks()
        if missing:
            shown = ", ".join(map(str, missing[:16])) + (f" and {len(missing) - 16:,} more" if len(missing) > 16 else "")
            out.append(f"{len(missing):,} of {self.world_size:,} ranks missing ({shown}): the figures cover the "
                       f"{len(self.ranks):,} loaded")
        for r in self.ranks:
            dropped = json.loads(r["dropped_events"] or "{}")
            if dropped:
                out.append(f"{r['file']}: left out " + ", ".join(f"{n:,} events with {why}" for why, n in dropped.items()))
            if r.get("text_replaced"):
                out.append(f"{r['file']}: {r['text_replaced']:,} invalid UTF-8 sequences or lone surrogate escapes "
                           "read as U+FFFD")
            if r["name_rank"] is not None:
                out.append(f"{r['file']}: the file name says rank {r['name_rank']}, distributedInfo says {r['rank']}")
        return out

    def require_events(self) -> None:
        """Stop an analysis that reads raw events when prune dropped them, in one line."""
        if self.pruned_at is not None:
            raise UsageError(f"run {self.run_id} ({self.name}) was pruned on {str(self.pruned_at)[:10]}: its raw "
                             "events are gone; its headline, per-rank and per-step figures and findings remain "
                             "(analyze --run, history, check)")

    def device_memory_bytes(self) -> tuple[int | None, str | None]:
        """The smallest device memory over the ranks and where it comes from (trace, manifest)."""
        traced = [r["device_memory_bytes"] for r in self.ranks if r["device_memory_bytes"]]
        if traced:
            return min(traced), "trace"
        from_manifest = self.manifest.device_memory_bytes
        return from_manifest, ("manifest" if from_manifest else None)

    def facts(self) -> dict:
        """Parameters, tokens, mesh and device memory of the run."""
        memory, source = self.device_memory_bytes()
        return {
            "world_size": self.world_size,
            "device_kind": self.device_kind,
            "parallelism": self.parallelism,
            "params": self.manifest.params,
            "tokens_per_microbatch": self.manifest.tokens_per_microbatch,
            "accumulation_steps": self.manifest.accumulation_steps,
            "mesh_shape": list(self.manifest.mesh.shape) if self.manifest.mesh else None,
            # HSDP's shard group: the model states are sharded over it (contract.manifest)
            "hsdp_group": self.manifest.hsdp_shape[1] if self.manifest.hsdp_shape else None,
            "device_memory_bytes": memory,
            "device_memory_source": source,
            "has_manifest": self.has_manifest,
        }


def run_info(con, run_id: int) -> RunInfo:
    """The stored run ``run_id`` (RunNotFound, a UsageError, when there is none)."""
    found = sql.one(con, "run.run", run_id=run_id)
    if found is None:
        raise RunNotFound(f"no run {run_id} in the store")
    run_id, name, source, world, backend, device_kind, manifest_text, _parallelism, tags, created, pruned, data_dir = found
    try:
        manifest = contract.decode(manifest_text.encode()) if manifest_text else contract.EMPTY
    except contract.ManifestError:  # stored by an older version that did not check it
        manifest = contract.EMPTY
    run_dir = None
    if data_dir:
        from overlapscope.analyzer.store import runstore

        run_dir = runstore.run_dir(runstore.path_of(con), data_dir)
    return RunInfo(run_id, name, source, world, backend, device_kind, manifest, manifest_text is not None,
                   json.loads(tags) if tags else {}, created, sql.rows(con, "run.ranks", run_id=run_id), pruned,
                   run_dir)
