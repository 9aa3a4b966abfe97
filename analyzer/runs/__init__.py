"""Runs end to end, the commands' route: a run's traces into the catalog, and the catalog
opened as the commands open it.

``prepare`` maps the ranks into a staging folder of the run store (``analyzer/engine``)
and derives what the catalog keeps (``derive.py``: headline, findings, figures, the
analyses as documents); ``commit`` stores it in one short transaction; ``ingest`` is
both. ``open_catalog`` and ``shared`` open a catalog: one written by an overlapscope
whose catalog held every event is upgraded with today's analyses. The one layer that
ties the map, the store and the analyses together.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from overlapscope.analyzer import sql
from overlapscope.analyzer.errors import CatalogWriteError
from overlapscope.analyzer.store import access, catalog, runstore

# store (and with it duckdb) is imported inside the functions: a command that
# decodes traces forks its workers before duckdb starts any thread.


def open_catalog(path: str | os.PathLike | None = None, read_only: bool = False, wait_s: float = 0.0,
                 on_wait=None):
    """``store.catalog.open_catalog``, an old catalog upgraded with today's analyses."""
    return catalog.open_catalog(path, read_only, wait_s, on_wait, derive=_derive_in_catalog)


def shared(path: str | os.PathLike, keep_open_s: float | None = None) -> access.SharedCatalog:
    """This process's ``store.access.SharedCatalog`` of ``path``, opened as ``open_catalog`` opens."""
    return access.shared(path, keep_open_s, derive=_derive_in_catalog)


@dataclass
class Prepared:
    """A run mapped into a staging folder of the run store and analysed, not committed yet:
    what ``commit`` stores (the slow part, done before and beside the catalog's writer)."""

    staging: runstore.Staging
    results: list  # engine.rank.RankResult per rank: facts and steps (the ranks' tables are on disk)
    inputs: object  # ingest.inputs.Inputs: the manifest
    source: str  # the input paths, space separated
    computed: dict  # derive.compute: headline, findings, figures, clock offsets

    def discard(self) -> None:
        self.staging.discard()


def prepare(catalog_path, paths: list[str], workers: int | None = None, on_decoded=None, limits=None,
            engine: str = "local", ray_address: str | None = None, shown_from: str | None = None,
            staging: runstore.Staging | None = None) -> Prepared:
    """Map the traces at ``paths`` into a staging folder of the catalog's run store (every
    rank's Parquet files, written by the workers) and analyse them (the reduce and what
    ingest stores: ``derive.compute``, the analyses as documents). Nothing touches the
    catalog; on any error the staging folder goes. ``on_decoded(done, total)`` reports
    each rank as it is mapped. ``shown_from``: a folder the files are named from (a server's
    temporary folder of uploads: the run's files, its source and errors never show it).
    ``staging``: a staging folder made (and locked) by the caller (``apart.prepare``), else
    one is made here."""
    from overlapscope.analyzer import engine as engines
    from overlapscope.analyzer.ingest.inputs import resolve, source_text
    from overlapscope.analyzer.ingest.limits import from_env
    from overlapscope.analyzer.runs import derive

    limits = limits or from_env()
    inputs = resolve(paths, limits)
    source = source_text(paths)
    if shown_from:
        inputs.sources = [dataclasses.replace(s, label=_shown(s.display, shown_from)) for s in inputs.sources]
        source = " ".join(_shown(p, shown_from) for p in paths)
    try:
        staging = staging or runstore.stage(catalog_path)
    except OSError as err:  # the disk, not the input: read-only, full, no permission
        inputs.release()
        raise _write_error(catalog_path, err) from None
    try:
        try:
            con, run_id, ranks = engines.map_and_reduce(inputs, "full", workers, engine, ray_address, limits,
                                                        on_decoded, out_dir=str(staging.path), source=source)
        finally:
            inputs.release()  # an export's split files: the ranks are in the staging folder now
        for r in ranks:  # the steps go to the catalog; the rest of each rank's tables are in the store and on disk
            r.tables, r.tables_in = {"steps": r.table("steps")}, None
        try:
            computed = _derive(con, run_id)
        finally:
            con.close()
        runstore.write_derived(staging.path, computed)
    except OSError as err:  # writing the ranks' files: the disk is full
        staging.discard()
        raise _write_error(catalog_path, err) from None
    except BaseException:
        staging.discard()
        raise
    return Prepared(staging, ranks, inputs, source, computed)


def _derive(con, run_id: int) -> dict:
    """``derive.compute`` on the reduce's store with the derive's DuckDB budget (the run's
    collectives are NumPy columns beside it by then: ``engine.rank.DEFAULT_REDUCE_MEMORY_MB``);
    once more with the reduce's where the run's SQL needs more than that."""
    import duckdb

    from overlapscope.analyzer import engine as engines
    from overlapscope.analyzer.runs import derive

    budget, reduce_budget = engines.reduce_memory_bytes("derive"), engines.reduce_memory_bytes("full")
    try:
        _set_budget(con, budget)  # DuckDB spills the store's blocks beyond it, or cannot
        return derive.compute(con, run_id)
    except duckdb.OutOfMemoryException:
        if reduce_budget <= budget:
            raise
    _set_budget(con, reduce_budget)
    return derive.compute(con, run_id)


def _set_budget(con, memory_bytes: int) -> None:
    con.execute(f"SET memory_limit = '{memory_bytes // 2**20}MiB'")


def _derive_in_catalog(con, run_id: int) -> dict:
    """``derive.compute`` on the catalog's own connection (an old catalog's runs upgraded):
    with the catalog's memory setting, which a budget set here would leave behind."""
    from overlapscope.analyzer.runs import derive

    return derive.compute(con, run_id)


def sweep_leftovers(catalog_path) -> list[str]:
    """Remove what killed processes left: their temporary folders and the catalog's staging
    folders (a server's start; any load sweeps the temporary folders too); the names."""
    from overlapscope.analyzer import tempdirs

    return tempdirs.sweep() + runstore.sweep_staging(catalog_path)


def _shown(path: str, folder: str) -> str:
    """``path`` as named from ``folder`` (unchanged when outside it)."""
    prefix = os.path.join(folder, "")
    return path[len(prefix):] if path.startswith(prefix) else path


def _write_error(catalog_path, err: OSError) -> CatalogWriteError:
    why = err.strerror or str(err).splitlines()[0]
    return CatalogWriteError(f"{catalog_path}: cannot store the run, nothing was stored: {why}")


def commit(con, prepared: Prepared, name: str, tags: dict | None = None, pushed_by: str | None = None,
           idempotency_key: str | None = None) -> int:
    """Store a prepared run as ``name`` in one short transaction: its folder moves into the
    run store, its rows (run, ranks, steps, headline, findings, figures) into the catalog.
    A failure leaves neither; a crash between the two leaves an unnamed folder that the
    next writer sweeps. ``idempotency_key``: the push's key, recorded with the run
    (``run_of_key``). Returns the run id."""
    import duckdb

    from overlapscope.analyzer.store import database, results as stored

    name, tags = catalog.check_run_name(name), catalog.check_tags(tags)
    path = database.path_of(con)
    con.execute("BEGIN TRANSACTION")
    try:
        folders = sql.rows(con, "catalog.data_dirs")
        runstore.sweep(path, {f["data_dir"] for f in folders}, {f["data_dir"] for f in folders if f["pruned"]})
        run_id = database.next_run_id(con)
        data_dir = prepared.staging.publish()
    except BaseException:
        database.rollback(con)
        raise
    try:
        database.insert_run_rows(con, run_id, prepared.results, name, prepared.source, prepared.inputs.manifest,
                                 prepared.inputs.manifest_text, tags, pushed_by, data_dir=data_dir,
                                 clock_offsets_ns=prepared.computed["clock_offsets_ns"],
                                 idempotency_key=idempotency_key)
        for r in prepared.results:
            database.insert_arrow(con, "steps", run_id, r.tables["steps"])
        stored.save(con, run_id, prepared.computed)
        con.execute("COMMIT")
    except BaseException as err:
        database.rollback(con)
        prepared.staging.unpublish()
        if isinstance(err, duckdb.Error):  # the disk, not the input: a full or read-only file system
            raise CatalogWriteError(f"{path}: cannot store the run, nothing was stored: "
                                    f"{str(err).splitlines()[0]}") from None
        raise
    return run_id


def ingest(con, paths: list[str], name: str, tags: dict | None = None, workers: int | None = None,
           on_decoded=None, open_con=None, limits=None, engine: str = "local", ray_address: str | None = None,
           path=None) -> int:
    """Store the traces at ``paths`` as run ``name`` with its headline and findings; return its run id.

    The ranks are mapped into the run store first (``prepare``, in parallel, before any
    catalog connection opens: workers are forked only while none is open), then
    committed in one short transaction (``commit``): a failure leaves nothing behind.
    Pass ``con``, or ``con=None`` with ``open_con`` (a function returning the catalog's
    connection, called once the ranks are mapped) and ``path`` (the catalog's file).
    ``on_decoded(done, total)`` reports each mapped rank (from the calling thread).
    """
    name, tags = catalog.check_run_name(name), catalog.check_tags(tags)
    if path is None and con is not None:
        from overlapscope.analyzer.store.database import path_of  # imports DuckDB: only with a connection

        path = path_of(con)
    catalog_path = path or catalog.default_path()
    prepared = prepare(catalog_path, paths, workers, on_decoded, limits, engine, ray_address)
    try:
        return commit(con if con is not None else open_con(), prepared, name, tags)
    except BaseException:
        prepared.discard()  # not committed (commit took back a folder it had published)
        raise


def ensure_samples(con, samples_dir: Path = catalog.SAMPLES_DIR) -> list[int]:
    """Load the sample runs a catalog of samples only lacks (all of them into an empty one):
    a new user sees a real analysis."""
    return [ingest(con, [str(bundle)], name=catalog.sample_name(bundle), tags={"sample": "true"})
            for bundle in catalog.missing_samples(con, samples_dir)]


def prune(path, keep_last: int | None = None, name: str | None = None, older_than_days: float | None = None,
          open_con=None) -> dict:
    """``prune``: drop the raw events of the runs chosen (store.retention.to_prune), keep
    their headline, figures, findings and stored analyses, and give the space back.
    ``open_con(path)`` opens the catalog (``open_catalog`` when None; the CLI's waits for a
    busy file). ``{"pruned": [run ids], "bytes_before", "bytes_after"}``."""
    from overlapscope.analyzer.store import retention

    path = _existing(path)
    con = (open_con or open_catalog)(path)
    before = retention.size_bytes(path)
    try:
        pruned = retention.prune(con, retention.to_prune(con, keep_last, name, older_than_days))
    except BaseException:
        con.close()
        raise
    if pruned:
        retention.rewrite(con, path)  # closes it
    else:
        con.close()
    return {"pruned": pruned, "bytes_before": before, "bytes_after": retention.size_bytes(path)}


def delete(path, run_id: int, open_con=None) -> dict:
    """``delete``: remove a run and everything stored with it, and give the space back
    (``open_con`` as ``prune``'s). ``{"deleted": run id, "bytes_before", "bytes_after"}``."""
    from overlapscope.analyzer.store import retention

    path = _existing(path)
    con = (open_con or open_catalog)(path)
    before = retention.size_bytes(path)
    try:
        retention.delete(con, run_id)
    except BaseException:
        con.close()
        raise
    retention.rewrite(con, path)
    return {"deleted": run_id, "bytes_before": before, "bytes_after": retention.size_bytes(path)}


def _existing(path) -> Path:
    from overlapscope.analyzer.errors import UsageError

    path = catalog.resolve_path(path)
    if not path.exists():
        raise UsageError(f"{path}: no catalog here")
    return path
