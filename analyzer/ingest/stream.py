"""Read one trace file as decompressed chunks, within the caps of ``limits``.

A file on disk or a zip member, plain JSON or gzip (isal's igzip, 3-4x faster than
zlib): the bytes are decompressed piece by piece and counted, and the read stops
with one line naming the file as soon as the count passes the cap. Nothing here
holds more than one chunk.
"""

from __future__ import annotations

import zipfile
import zlib
from contextlib import contextmanager
from typing import Iterator

from overlapscope.analyzer.errors import InputError
from overlapscope.analyzer.ingest import files
from overlapscope.analyzer.ingest.textfix import TextFix
from overlapscope.analyzer.ingest.limits import ENV_MAX_RATIO, ENV_MAX_TRACE_MB, MB, RATIO_FLOOR_BYTES, Limits, mb

try:  # igzip is 3-4x faster than zlib on trace files; the standard gzip is the fallback
    from isal import igzip as _gzip
    from isal.isal_zlib import error as _GzipError
except ImportError:  # pragma: no cover - isal is a dependency, but stay usable without it
    import gzip as _gzip
    _GzipError = zlib.error

CHUNK_BYTES = 1 << 20  # small: the scanner keeps the unparsed tail of one chunk (and a server's
# allocator keeps what a chunk's text repairs took: 4 MiB chunks left 22 MiB more behind 4
# refused uploads); scan.scan_beside asks for larger ones
GZIP_MAGIC = b"\x1f\x8b"


@contextmanager
def _opened(path: str, member: str | None):
    """The raw bytes of a file or of a zip member (on disk or behind a URI: files.py), and a
    member's size in the archive (None for a file)."""
    if member is None:
        with files.open_binary(path) as f:
            yield f, None
        return
    with files.open_binary(path) as raw, zipfile.ZipFile(raw) as zf:
        info = zf.getinfo(member)
        if info.flag_bits & 0x1:
            raise InputError(f"{path}:{member}", "encrypted zip member: store traces unencrypted")
        with zf.open(info) as f:
            yield f, info.compress_size


def _magic(raw) -> bytes:
    """The first two bytes, leaving the stream where it was."""
    if hasattr(raw, "peek"):
        return raw.peek(2)[:2]
    head = raw.read(2)
    raw.seek(0)
    return head


def chunks(path: str, member: str | None, where: str, limits: Limits, fixed: dict | None = None,
           chunk_bytes: int | None = None) -> Iterator[bytes]:
    """The decompressed bytes of one trace file, chunk by chunk; at most ``limits.max_trace_bytes``.
    Text that is no Unicode is repaired on the way (``textfix``); ``fixed["text_replaced"]``
    counts the replacements. ``chunk_bytes``: the chunks' size (``CHUNK_BYTES`` when None)."""
    total = 0
    text = TextFix()
    try:
        with _opened(path, member) as (raw, packed):
            gzipped = _magic(raw) == GZIP_MAGIC
            stream = _gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            if packed is None and gzipped:  # what the ratio cap compares with; plain JSON inflates nothing
                packed = files.size(path)
            ratio_cap = None if packed is None else max(RATIO_FLOOR_BYTES, limits.max_ratio * packed)
            while True:
                piece = stream.read(chunk_bytes or CHUNK_BYTES)
                if not piece:
                    break
                total += len(piece)
                if total > limits.max_trace_bytes:
                    raise InputError(where, f"decompresses to more than {mb(limits.max_trace_bytes)}, the limit "
                                            f"for one trace (${ENV_MAX_TRACE_MB} raises it)")
                if ratio_cap is not None and total > ratio_cap:
                    raise InputError(where, f"decompresses to more than {limits.max_ratio}x its "
                                            f"{packed / MB:,.1f} MiB: a compression bomb, not a trace (traces "
                                            f"inflate 15-25x; ${ENV_MAX_RATIO} raises the limit)")
                yield text.feed(piece)
            tail = text.finish()
            if tail:
                yield tail
            if fixed is not None:
                fixed["text_replaced"] = text.replaced
    except InputError:
        raise
    except (EOFError, zlib.error, _GzipError) as err:
        raise InputError(where, f"truncated or corrupt gzip data ({err})") from None
    except zipfile.BadZipFile as err:
        raise InputError(where, f"corrupt zip member ({err})") from None
    except NotImplementedError as err:  # a zip compression method zipfile does not read
        raise InputError(where, f"cannot read this zip member: {err}") from None
    except OSError as err:
        if getattr(err, "errno", None) is None:  # gzip's BadGzipFile and friends
            raise InputError(where, f"truncated or corrupt gzip data ({err})") from None
        raise InputError(where, f"cannot read: {err.strerror or err}") from None


def read_all(path: str, member: str | None, where: str, limits: Limits, fixed: dict | None = None) -> bytes:
    """The whole decompressed file (the msgspec decoder's input), within the cap."""
    return b"".join(chunks(path, member, where, limits, fixed))
