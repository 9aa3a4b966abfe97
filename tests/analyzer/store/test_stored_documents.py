"""Stored analyses are written as a gzip stream (analyzer/store/runstore.py): byte for byte the
JSON the CLI prints, with the collectives encoded a chunk at a time; those of older runs,
zstd, still read."""

from __future__ import annotations

import gzip

import msgspec
import pytest

from overlapscope.analyzer.store import runstore


@pytest.mark.parametrize("document", [
    {}, {"a": []}, {"a": {}}, {"a": 1, "b": [1, {"c": [2, 3]}], "d": None, "e": "x\ny"},
    {"rows": [{"k": i, "v": [i, {"w": i}]} for i in range(5)], "tail": {"t": [1]}},
])
def test_streamed_documents_are_the_formatted_json(tmp_path, document):
    whole = msgspec.json.format(msgspec.json.encode(document), indent=2)
    assert b"".join(runstore._formatted(document)) == whole
    if "rows" in document:  # the same rows as a stream of chunks of 2
        rows = document["rows"]
        streamed = {**document, "rows": runstore.Rows(lambda: (rows[i:i + 2] for i in range(0, len(rows), 2)))}
        assert b"".join(runstore._formatted(streamed)) == whole
        empty = {**document, "rows": runstore.Rows(lambda: iter([[], []]))}
        assert b"".join(runstore._formatted(empty)) == msgspec.json.format(
            msgspec.json.encode({**document, "rows": []}), indent=2)
    runstore.write_document(tmp_path, "doc", document, tokens=7)
    assert runstore.read_document_bytes(tmp_path, "doc") == whole
    assert runstore.document_facts(tmp_path, "doc") == {"bytes": len(whole), "tokens": 7}
    assert gzip.decompress((tmp_path / "doc.json.gz").read_bytes()) == whole  # plain gzip: any tool reads it
    for skip in (0, 2):  # printed a piece at a time (stored_json skips the opening brace)
        assert b"".join(runstore.document_chunks(tmp_path, "doc", skip=skip)) == whole[skip:]
    assert runstore.document_chunks(tmp_path, "other") is None


def test_a_stored_document_is_printed_in_pieces(tmp_path, monkeypatch):
    """A document larger than a piece is read a piece at a time (never whole in memory: a
    64-rank run's buckets hold 61.6 MB of JSON), and the pieces make the document."""
    document = {"rows": [{"k": i, "v": "x" * 50} for i in range(400)]}
    whole = msgspec.json.format(msgspec.json.encode(document), indent=2)
    runstore.write_document(tmp_path, "doc", document)
    monkeypatch.setattr(runstore, "CHUNK_BYTES", 4096)
    pieces = list(runstore.document_chunks(tmp_path, "doc", skip=2))
    assert len(pieces) == -(-(len(whole) - 2) // 4096) > 5 and max(map(len, pieces)) == 4096
    assert b"".join(pieces) == whole[2:]


def test_a_document_stored_as_zstd_by_an_older_version_still_reads(tmp_path):
    import pyarrow as pa

    whole = msgspec.json.format(msgspec.json.encode({"summary": [{"kind": "ddp_bucket", "id": "0"}]}), indent=2)
    with pa.CompressedOutputStream(str(tmp_path / "buckets.json.zst"), "zstd") as out:  # as 0.1.0 wrote it
        out.write(whole)
    (tmp_path / "buckets.facts.json").write_bytes(msgspec.json.encode({"bytes": len(whole), "tokens": None}))
    assert runstore.read_document_bytes(tmp_path, "buckets") == whole
    assert runstore.read_document(tmp_path, "buckets") == {"summary": [{"kind": "ddp_bucket", "id": "0"}]}
    assert runstore.read_document_bytes(tmp_path, "diagnose") is None
    assert b"".join(runstore.document_chunks(tmp_path, "buckets", skip=2)) == whole[2:]


def test_a_stored_buckets_document_is_what_buckets_json_prints(tmp_path, monkeypatch, capsys):
    from overlapscope.analyzer.predict import buckets
    from overlapscope.cli import main
    from conftest import SAMPLES

    monkeypatch.setenv("OVERLAPSCOPE_DB", str(tmp_path / "c.duckdb"))
    monkeypatch.setattr(buckets, "ROWS_PER_CHUNK", 7)  # many chunks on a sample
    assert main(["ingest", str(SAMPLES / "fsdp_per_block"), "--run", "s"]) == 0
    capsys.readouterr()
    assert main(["buckets", "--run", "s", "--json"]) == 0
    stored = msgspec.json.decode(capsys.readouterr().out)
    assert main(["buckets", str(SAMPLES / "fsdp_per_block"), "--json"]) == 0
    fresh = msgspec.json.decode(capsys.readouterr().out)
    assert len(stored["collectives"]) == len(fresh["collectives"]) > 7  # more than one chunk
    assert stored["collectives"] == fresh["collectives"] and stored["summary"] == fresh["summary"]


def test_a_document_in_several_gzip_members_reads_whole(tmp_path):
    """A document's gzip recompressed by another tool as several members still reads whole
    (the sized decompress reads one member; a length other than the facts' reads them all)."""
    document = {"rows": [{"k": i} for i in range(100)]}
    whole = msgspec.json.format(msgspec.json.encode(document), indent=2)
    runstore.write_document(tmp_path, "doc", document)
    half = len(whole) // 2
    (tmp_path / "doc.json.gz").write_bytes(gzip.compress(whole[:half]) + gzip.compress(whole[half:]))
    assert runstore.read_document_bytes(tmp_path, "doc") == whole
    assert b"".join(runstore.document_chunks(tmp_path, "doc")) == whole
