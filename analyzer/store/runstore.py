"""The run store: each stored run's per-rank tables as Parquet files beside the catalog.

::

    <name>.duckdb                     the catalog: the run index, per-rank, per-step and
                                      per-bucket figures, findings (schema.sql)
    <name>.runs/                      the run store (``store_dir``)
        run-<token>/                  one stored run (``runs.data_dir``)
            raw/<table>/rank-<r>.parquet    the rank's raw rows (raw.sql: events, tracks,
                                            collectives, flows, memory, annotation_roles)
            rank/<table>/rank-<r>.parquet   its rank scripts' results (steps, overlap_step,
                                            collective_stats, comm_instance, ...)
            <analysis>.json.gz              the reduce's analyses (buckets, diagnose, whatif), each
            <analysis>.facts.json           with its size and what it was made with (tokens);
                                            older runs have <analysis>.json.zst (still read)
        .staging-<token>/             a run being written, locked by its writer

Workers write a rank's files into a staging folder in parallel (zstd Parquet, a
``rank`` column in every file); the writer then renames the folder into place and
commits the run's catalog rows in one short transaction. A crash leaves at most a
folder that no committed run names: ``sweep`` removes those (and staging folders
whose writer is gone) when the catalog is next opened for writing. ``prune``
deletes ``raw/``; ``delete`` the whole folder. Queries read the files in place
(``read_parquet``), only the ranks they show.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec

# pyarrow and numpy are imported where files are read or written: a command that only
# reads the catalog's index (history, analyze --run) starts faster without them.

RAW = "raw"
RANK = "rank"
STAGING_PREFIX = ".staging-"
RUN_PREFIX = "run-"
_LOCK = ".lock"
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3}


def path_of(con) -> str:
    """The catalog file behind a connection (":memory:" for an in-memory store)."""
    from overlapscope.analyzer import sql

    found = sql.one(con, "store.database_path")
    return (found[0] if found else None) or ":memory:"


def store_dir(catalog_path: str | os.PathLike) -> Path:
    """The run store of the catalog at ``catalog_path``: ``<name>.runs`` beside it."""
    path = Path(catalog_path)
    return path.with_name(path.stem + ".runs")


def rank_file(folder: str | os.PathLike, kind: str, table: str, rank: int) -> Path:
    return Path(folder) / kind / table / f"rank-{rank:05d}.parquet"


def with_rank(table, rank: int):
    """``table`` (Arrow) with a ``rank`` column (every stored file carries its rank)."""
    import numpy as np

    from overlapscope.analyzer.ingest import columns

    if "rank" in table.column_names:
        return table
    return table.append_column("rank", columns.int32(np.full(table.num_rows, rank, dtype=np.int32)))


def _write(path: Path, table) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **PARQUET_OPTIONS)


def write_raw(folder: str | os.PathLike, rank: int, tables: dict) -> None:
    """One rank's raw tables into ``folder`` (a staging folder), one file per table."""
    for name, table in tables.items():
        _write(rank_file(folder, RAW, name, rank), with_rank(table, rank))


def write_results(folder: str | os.PathLike, result) -> None:
    """One rank's results (``engine.rank.RankResult``): its rank scripts' tables and its facts."""
    for name, table in result.tables.items():
        _write(rank_file(folder, RANK, name, result.rank), with_rank(table, result.rank))
    facts = rank_file(folder, RANK, "facts", result.rank).with_suffix(".json")
    facts.parent.mkdir(parents=True, exist_ok=True)
    facts.write_bytes(msgspec.json.encode({"meta": result.meta, "counts": result.counts,
                                           "scripts": list(result.scripts)}))


def _read_table(path: Path):
    """One Parquet file as an Arrow table: ``ParquetFile.read``, the same table as
    ``pq.read_table`` without its dataset set-up (a 256-rank run's 3,840 result files in
    1.6 s instead of 4.0 s)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as f:
        return f.read()


def read_result_tables(folder: str | os.PathLike, rank: int, names) -> dict:
    """One rank's results tables ``names`` as ``write_results`` wrote them into ``folder``."""
    return {name: _read_table(rank_file(folder, RANK, name, rank)) for name in names}


def read_results(run_dir: str | os.PathLike) -> list[tuple[dict, dict]]:
    """The stored results of every rank of a run: (facts, Arrow tables) per rank, in rank
    order (facts: meta, counts and scripts, as ``write_results`` wrote them)."""
    facts_dir = Path(run_dir) / RANK / "facts"
    table_dirs = [d for d in sorted((Path(run_dir) / RANK).iterdir()) if d.name != "facts"]
    out = []
    for path in sorted(facts_dir.glob("rank-*.json")):
        facts = msgspec.json.decode(path.read_bytes())
        rank = facts["meta"]["rank"]
        tables = {}
        for table_dir in table_dirs:
            file = table_dir / f"rank-{rank:05d}.parquet"
            if file.is_file():
                tables[table_dir.name] = _read_table(file)
        out.append((facts, tables))
    return out


class Rows:
    """A list of a document encoded chunk by chunk: ``chunks()`` yields lists of JSON-ready
    rows, so that the rows of a large run (every collective) are never all held as dicts."""

    def __init__(self, chunks):
        self.chunks = chunks


def _indented(value) -> bytes:
    """``value`` as ``msgspec.json.format(..., indent=2)`` writes it one level down (a top-level key's value)."""
    return msgspec.json.format(msgspec.json.encode(value), indent=2).replace(b"\n", b"\n  ")


def _formatted(document: dict):
    """The bytes of ``msgspec.json.format(msgspec.json.encode(document), indent=2)``, piece by
    piece, with ``Rows`` values encoded a chunk at a time (JSON text holds no raw newline,
    so re-indenting by lines is exact)."""
    if not document:
        yield b"{}"
        return
    yield b"{\n"
    items = list(document.items())
    for i, (key, value) in enumerate(items):
        yield b"  " + msgspec.json.encode(key) + b": "
        if isinstance(value, Rows):
            wrote = False
            for chunk in value.chunks():
                if not chunk:
                    continue
                inner = msgspec.json.format(msgspec.json.encode(chunk), indent=2)[2:-2]  # without "[\n" and "\n]"
                yield (b",\n  " if wrote else b"[\n  ") + inner.replace(b"\n", b"\n  ")
                wrote = True
            yield b"\n  ]" if wrote else b"[]"
        else:
            yield _indented(value)
        yield b",\n" if i < len(items) - 1 else b"\n"
    yield b"}"


def write_document(folder: str | os.PathLike, name: str, document: dict, **facts) -> None:
    """An analysis of the run (a JSON-ready object; ``Rows`` values streamed) as
    ``<name>.json.gz``, indented as the CLI prints JSON (so that it prints as it is), and
    beside it ``<name>.facts.json``: its size and what it was made with (``facts``, e.g.
    tokens). Written as a gzip stream (isal, level 1): never the whole text in memory.

    gzip through isal rather than zstd through pyarrow: a stored run's ``buckets --json``
    then reads without importing pyarrow (0.15-0.2 s of a command that must answer in
    0.5 s). At 64 ranks (61.6 MB of JSON): 2.36 MB, against 1.85 MB as zstd; 0.14 s
    to inflate, against 0.09 s."""
    from isal import igzip

    size = 0
    with igzip.open(Path(folder) / f"{name}.json.gz", "wb", compresslevel=1) as out:
        for piece in _formatted(document):
            out.write(piece)
            size += len(piece)
    (Path(folder) / f"{name}.facts.json").write_bytes(msgspec.json.encode({"bytes": size, **facts}))


def document_facts(run_dir: str | os.PathLike, name: str) -> dict | None:
    path = Path(run_dir) / f"{name}.facts.json"
    return msgspec.json.decode(path.read_bytes()) if path.is_file() else None


def read_document_bytes(run_dir: str | os.PathLike, name: str) -> bytes | None:
    """The stored analysis ``name`` as JSON bytes, or None when the run has none."""
    facts = document_facts(run_dir, name)
    if facts is None:
        return None
    path = Path(run_dir) / f"{name}.json.gz"
    if path.is_file():
        from isal import igzip, isal_zlib

        data = path.read_bytes()
        # into a buffer of the size the facts give: half the time of a decompress that grows
        # its buffer as it goes (61.6 MB: 39-41 against 72-88 ms); one gzip member, as written
        whole = isal_zlib.decompress(data, wbits=31, bufsize=max(facts.get("bytes") or 0, 1))
        return whole if len(whole) == facts.get("bytes") else igzip.decompress(data)
    path = path.with_suffix(".zst")  # a run stored before the documents were gzip
    if not path.is_file():
        return None
    import pyarrow as pa

    return pa.decompress(path.read_bytes(), decompressed_size=facts["bytes"], codec="zstd", asbytes=True)


# What a stored document is printed in: decompressed a piece at a time, a 61.6 MB document
# (64 ranks' buckets) printed in 11-13 ms, against 81-102 ms decompressed whole (its pages
# faulted in before the first byte is written; measured).
CHUNK_BYTES = 1 << 20


def document_chunks(run_dir: str | os.PathLike, name: str, skip: int = 0) -> Iterator[bytes] | None:
    """The stored analysis ``name`` as JSON bytes in pieces of ``CHUNK_BYTES``, less its first
    ``skip`` bytes (what a caller writes itself); None when the run has none."""
    path = Path(run_dir) / f"{name}.json.gz"
    if document_facts(run_dir, name) is None or not path.is_file():
        data = read_document_bytes(run_dir, name)  # a run stored before the documents were gzip
        return None if data is None else iter([data[skip:]])
    return _chunks(path, skip)


def _chunks(path: Path, skip: int) -> Iterator[bytes]:
    from isal import igzip

    with igzip.open(path, "rb") as f:
        f.read(skip)
        while chunk := f.read(CHUNK_BYTES):
            yield chunk


def read_document(run_dir: str | os.PathLike, name: str, leave_out: tuple[str, ...] = ()):
    """The stored analysis ``name``, decoded, without its top-level keys in ``leave_out``
    (scanned over, never built: a 256-rank run's buckets without its 517,120 collectives in
    0.5 s instead of 1.7 s); None when the run has none."""
    data = read_document_bytes(run_dir, name)
    if data is None or not leave_out:
        return None if data is None else msgspec.json.decode(data)
    raw = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    return {k: msgspec.json.decode(v) for k, v in raw.items() if k not in leave_out}


def write_derived(folder: str | os.PathLike, computed: dict) -> None:
    """What ingest derived beside the catalog's rows (``runs.derive.compute``), taken out of
    ``computed``: its analyses as documents, the prediction engine's state (where it could be
    kept: ``pack_engine_state``'s bytes) and the collectives as the Timeline reads them."""
    for name, document in computed.pop("documents").items():
        write_document(folder, name, document, tokens=computed["tokens"])
    if (engine_state := computed.pop("engine_state", None)) is not None:
        write_packed_engine_state(folder, engine_state)
    write_attribution(folder, computed.pop("attribution"))


ENGINE_STATE = "engine.msgpack.gz"  # the prediction engine's state of the run (predict.state)


def pack_engine_state(data: bytes) -> bytes:
    """The prediction engine's state (opaque bytes, ``predict.state``) as stored: gzip through
    isal as the documents. Ingest packs it as soon as it is encoded: a 64-rank DDP run's state
    is 46 MiB of MessagePack and 4.5 MB packed, and the rest of the derive runs beside it."""
    from isal import isal_zlib

    return isal_zlib.compress(data, level=1, wbits=31)


def write_packed_engine_state(folder: str | os.PathLike, packed: bytes) -> None:
    """``pack_engine_state``'s bytes into the run's folder."""
    (Path(folder) / ENGINE_STATE).write_bytes(packed)


def write_engine_state(folder: str | os.PathLike, data: bytes) -> None:
    """The prediction engine's state (opaque bytes, ``predict.state``) into the run's folder."""
    write_packed_engine_state(folder, pack_engine_state(data))


def read_engine_state(run_dir: str | os.PathLike) -> bytes | None:
    """``write_engine_state``'s bytes; None where the run has none (stored before it was kept)
    or its file does not inflate."""
    path = Path(run_dir) / ENGINE_STATE
    if not path.is_file():
        return None
    from isal import isal_zlib

    try:
        return isal_zlib.decompress(path.read_bytes(), wbits=31)
    except isal_zlib.error:
        return None


ATTRIBUTION = "attribution.parquet"  # the run's collectives as the timeline reads them (measure.timeline)


def write_attribution(folder: str | os.PathLike, chunks) -> None:
    """The run's collectives as columns (Arrow tables of one schema, a row group each, in rank
    order) into one Parquet file, a chunk at a time; nothing written for no chunk."""
    import pyarrow.parquet as pq

    writer = None
    try:
        for chunk in chunks:
            if writer is None:
                writer = pq.ParquetWriter(Path(folder) / ATTRIBUTION, chunk.schema, **PARQUET_OPTIONS)
            writer.write_table(chunk)
    finally:
        if writer is not None:
            writer.close()


def has_attribution(run_dir: str | os.PathLike) -> bool:
    return (Path(run_dir) / ATTRIBUTION).is_file()


def read_attribution(run_dir: str | os.PathLike, ranks: list[int]):
    """``write_attribution``'s rows of ``ranks`` (row groups of other ranks skipped by their
    statistics); None where the run has none (stored before it was kept, or no collective)."""
    import pyarrow.parquet as pq

    if not has_attribution(run_dir):
        return None
    return pq.read_table(Path(run_dir) / ATTRIBUTION, filters=[("rank", "in", list(ranks))])


def raw_files(run_dir: str | os.PathLike, table: str, ranks=None) -> list[str]:
    """The Parquet files of a raw table (of ``ranks``, or all), as paths for read_parquet."""
    folder = Path(run_dir) / RAW / table
    if ranks is None:
        return sorted(str(p) for p in folder.glob("rank-*.parquet"))
    return [str(p) for r in sorted(ranks) if (p := rank_file(run_dir, RAW, table, r)).is_file()]


def has_raw(run_dir: str | os.PathLike) -> bool:
    return (Path(run_dir) / RAW).is_dir()


# --- staging, publishing and sweeping ------------------------------------------------------

class Staging:
    """A folder for one run's files while they are written, locked while its writer lives.

    ``publish`` renames it into the store as ``run-<token>`` and returns that name
    (``runs.data_dir``); ``discard`` removes it. The lock (flock, released by the
    kernel when the process dies) tells ``sweep`` which staging folders are in use.
    """

    def __init__(self, store: Path):
        self.store = store
        self.token = uuid.uuid4().hex[:16]
        self.path = store / f"{STAGING_PREFIX}{self.token}"
        # made and locked under a name sweep does not take, then renamed: a sweep between
        # the mkdir and the flock would see an unlocked staging folder and remove it
        creating = store / f".{STAGING_PREFIX}{self.token}"
        self._made_store = not store.is_dir()  # a refused first run leaves no empty store behind
        creating.mkdir(parents=True)
        self._lock = open(creating / _LOCK, "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(creating, self.path)

    @classmethod
    def at(cls, path: str | os.PathLike) -> "Staging":
        """A staging folder that another process made and holds locked (``runs.apart``: the
        server's process, while a child fills it): written here, never locked here."""
        view = cls.__new__(cls)
        view.path = Path(path)
        view.store = view.path.parent
        view.token = view.path.name[len(STAGING_PREFIX):]
        view._made_store, view._lock = False, None
        return view

    @property
    def name(self) -> str:
        return f"{RUN_PREFIX}{self.token}"

    def publish(self) -> str:
        """Move the folder into place (atomic on one file system); the run's folder name."""
        shutil.rmtree(self.path / ".spill", ignore_errors=True)
        target = self.store / self.name
        os.replace(self.path, target)
        self._unlock()
        (target / _LOCK).unlink(missing_ok=True)
        return self.name

    def unpublish(self) -> None:
        """Undo ``publish`` (the catalog's commit failed): the files go."""
        shutil.rmtree(self.store / self.name, ignore_errors=True)

    def discard(self) -> None:
        self._unlock()
        shutil.rmtree(self.path, ignore_errors=True)
        if self._made_store:
            try:
                self.store.rmdir()  # only while empty: another writer's files keep it
            except OSError:
                pass

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.path.exists():
            self.discard()


def stage(catalog_path: str | os.PathLike) -> Staging:
    return Staging(store_dir(catalog_path))


def _locked(folder: Path) -> bool:
    """Whether a live writer holds the staging folder's lock."""
    try:
        with open(folder / _LOCK, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


CREATING_GRACE_S = 60.0  # a folder still being made and locked is this young at most


def sweep(catalog_path: str | os.PathLike, referenced: set[str], pruned: set[str] = frozenset()) -> list[str]:
    """Remove the store's folders that no committed run names (a crash between the rename
    and the commit), staging folders whose writer is gone, and the raw files of pruned
    runs (a crash after the prune committed); the names removed. Run by the catalog's
    writer (which alone publishes), so no published folder is in flight."""
    store = store_dir(catalog_path)
    if not store.is_dir():
        return []
    removed = []
    for name in pruned:
        if has_raw(store / name):
            drop_raw(store / name)
            removed.append(f"{name}/{RAW}")
    for folder in store.iterdir():
        if not folder.is_dir():
            continue
        orphan = folder.name.startswith(RUN_PREFIX) and folder.name not in referenced
        if orphan or _abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed


def _abandoned(folder: Path) -> bool:
    """A staging folder (or one still being made) whose writer is gone."""
    if folder.name.startswith(STAGING_PREFIX):
        return not _locked(folder)
    return (folder.name.startswith("." + STAGING_PREFIX) and not _locked(folder)
            and time.time() - folder.stat().st_mtime > CREATING_GRACE_S)


def sweep_staging(catalog_path: str | os.PathLike) -> list[str]:
    """Remove the staging folders whose writer is gone (a killed ingest or push), and no other:
    safe for any process, the catalog's writer or not (a server at its start)."""
    store = store_dir(catalog_path)
    if not store.is_dir():
        return []
    removed = []
    for folder in store.iterdir():
        if folder.is_dir() and _abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    return removed


def run_dir(catalog_path: str | os.PathLike, data_dir: str | None) -> Path | None:
    return store_dir(catalog_path) / data_dir if data_dir else None


def drop_raw(folder: Path) -> None:
    """Prune: the raw per-rank files go; results and analyses stay."""
    shutil.rmtree(folder / RAW, ignore_errors=True)


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def size_bytes(catalog_path: str | os.PathLike) -> int:
    store = store_dir(catalog_path)
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) if store.is_dir() else 0
