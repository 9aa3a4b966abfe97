"""A run of one rank: its file scanned while the rest of the analyzer loads.

A one-rank ``analyze`` spends about as long importing NumPy, Arrow, DuckDB and the
analyzer and opening its store (0.2-0.3 s) as scanning a 54 MB trace. The C scanner
parses without the GIL and this module imports neither NumPy nor Arrow, so the
scan runs here from the start while a thread does the rest (``scan.scan_beside``;
a large trace's store opens after its decode: ``STORE_BESIDE_MAX_BYTES``); then the
columns are built, checked and stored as ``load.load`` stores them. A run of
more ranks maps them over worker processes instead (``analyzer/engine``).
"""

from __future__ import annotations

from overlapscope.analyzer.ingest import scan
from overlapscope.analyzer.ingest.inputs import Inputs
from overlapscope.analyzer.ingest.limits import Limits


def applies(inputs: Inputs, engine: str) -> bool:
    """Whether ``load_one`` takes this run: one rank on the local engine, the scanner built."""
    return engine == "local" and len(inputs.sources) == 1 and scan._kineto_scan is not None


# A store open while a large trace is decoded raised the decode's peak memory: a 1 GB
# trace's analyze peaked at 1,052 MB against 791 MB with the store opened after its decode
# (measured; the rows and the SQL are the same either way). Up to this size (compressed,
# about 600 MB of JSON) the store opens beside the scan, 0.03-0.04 s off the run; a
# larger trace's store opens after its decode, which dwarfs that.
STORE_BESIDE_MAX_BYTES = 32 * 2**20




def _store_beside(path: str, member: str | None) -> bool:
    from overlapscope.analyzer.ingest import files

    return member is None and not files.is_uri(path) and files.size(path) <= STORE_BESIDE_MAX_BYTES


def load_one(paths: list[str], inputs: Inputs, detail: str, limits: Limits, on_decoded=None):
    """The one rank of ``inputs`` (``applies``) in a new in-memory store: ``load.Loaded``."""
    source = inputs.sources[0]
    beside = _store_beside(source.path, source.member)
    opened: dict = {}

    def open_store() -> None:
        from overlapscope.analyzer.store import database

        opened["con"] = database.connect()

    def prepare() -> None:  # in another thread, while this one scans
        from overlapscope.analyzer.ingest import decode, load  # noqa: F401 (NumPy, Arrow, msgspec, the store)

        if beside:
            open_store()

    try:
        scanned, _ = scan.scan_beside(source.path, source.member, source.display, detail, limits, prepare)
        from overlapscope.analyzer.ingest import load
        from overlapscope.analyzer.ingest.consistency import check_ranks
        from overlapscope.analyzer.ingest.decode import decode_source
        from overlapscope.analyzer.store import database

        data = decode_source(source, detail, True, limits, scanned)
        del scanned
        if on_decoded:
            on_decoded(1, 1)
        if not beside:
            open_store()
        if data.events.num_rows < database.ONE_THREAD_MAX_ROWS:
            opened["con"].execute("SET threads = 1")
        decoded = load.Decoded(inputs, [data], " ".join(paths))
        check_ranks(decoded.ranks, inputs.manifest, inputs.manifest_source)
        run_id = load.store(opened["con"], decoded)
    except BaseException:
        if "con" in opened:
            opened["con"].close()
        raise
    return load.Loaded(opened["con"], run_id, inputs.manifest)
