"""A run of one rank: its file scanned while the rest of the analyzer loads.

A one-rank ``analyze`` spends about as long importing NumPy, Arrow, DuckDB and the
analyzer (0.2 s, holding the GIL) as scanning a 54 MB trace. The C scanner parses
without the GIL and this module imports neither NumPy nor Arrow, so the scan runs
here from the start while a thread imports the rest (``scan.scan_beside``). Then the
columns are built here while that thread opens the store (DuckDB opens it without the
GIL), and they are checked and stored as ``load.load`` stores them. A run of more ranks
maps them over worker processes instead (``analyzer/engine``).

A store opened during the scan once raised a large trace's peak (a 1 GB trace: 828-890
MB against 585 MB with the store opened after the decode), and only traces under
32 MiB had it opened beside. The cause was glibc keeping the scan's freed buffers
(``memory.py``): with them given back after the decode, the store opens beside at any
size, for the same peak (544-623 MB, measured).
"""

from __future__ import annotations

from overlapscope.analyzer.ingest import scan
from overlapscope.analyzer.ingest.inputs import Inputs, source_text
from overlapscope.analyzer.ingest.limits import Limits


def applies(inputs: Inputs, engine: str) -> bool:
    """Whether ``load_one`` takes this run: one rank on the local engine, the scanner built."""
    return engine == "local" and len(inputs.sources) == 1 and scan._kineto_scan is not None


def load_one(paths: list[str], inputs: Inputs, detail: str, limits: Limits, on_decoded=None):
    """The one rank of ``inputs`` (``applies``) in a new in-memory store: ``load.Loaded``."""
    source = inputs.sources[0]
    opened: dict = {}

    def prepare(imported) -> None:  # in another thread, while this one scans
        from overlapscope.analyzer.engine import load  # noqa: F401
        from overlapscope.analyzer.ingest import decode  # noqa: F401 (NumPy, Arrow, msgspec)
        from overlapscope.analyzer.store import database  # DuckDB

        imported()  # the columns can be built: the store opens beside them
        opened["con"] = database.connect()

    def columns(scanned):
        from overlapscope.analyzer.ingest.decode import decode_source

        return decode_source(source, detail, True, limits, scanned)

    try:
        data, _ = scan.scan_beside(source.path, source.member, source.display, detail, limits, prepare, columns)
        from overlapscope.analyzer.engine import load
        from overlapscope.analyzer.ingest import memory
        from overlapscope.analyzer.ingest.consistency import check_ranks
        from overlapscope.analyzer.store import database

        memory.release_freed()  # the scan's buffers, before the store's own allocator fills
        if on_decoded:
            on_decoded(1, 1)
        if data.events.num_rows < database.ONE_THREAD_MAX_ROWS:
            opened["con"].execute("SET threads = 1")
        decoded = load.Decoded(inputs, [data], source_text(paths))
        check_ranks(decoded.ranks, inputs.manifest, inputs.manifest_source)
        run_id = load.store(opened["con"], decoded)
    except BaseException:
        if "con" in opened:
            opened["con"].close()
        raise
    return load.Loaded(opened["con"], run_id, inputs.manifest)
