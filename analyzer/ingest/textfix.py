"""Text a trace's JSON may hold that is no Unicode, replaced as the bytes stream in.

JSON text is UTF-8, and a ``\\uD800``-``\\uDFFF`` escape must come in pairs (a high
surrogate, then a low one). Traces from other tools break both: invalid bytes in a
name, or a lone surrogate from a Python string that held undecodable bytes
(``surrogateescape``). Such text cannot be stored or shown (UTF-8 has no encoding
for a lone surrogate), and the two decoders would each fail elsewhere on it. So it
is repaired before either decoder sees it: each invalid UTF-8 sequence becomes
U+FFFD, and each lone surrogate escape ``\\uD800`` becomes ``\\ufffd`` (the same
six bytes), counted; the load states the count as a warning (``text_replaced``).

``TextFix.feed`` takes the file piece by piece and holds back only what the next
piece may complete: the start of a multi-byte UTF-8 sequence, or an escape near
the end (at most a few bytes), so the output is the same however the file is cut.
"""

from __future__ import annotations

import codecs
import re

try:
    from overlapscope.analyzer.ingest._kineto_scan import fix_surrogates as _fix_surrogates_c
except ImportError:  # not built: the regular expression below does it, slower
    _fix_surrogates_c = None

_BACKSLASH = 0x5C
# A surrogate escape \\uD800-\\uDFFF that is one: after an even run of backslashes (pairs,
# each an escaped backslash) or none. Linear: the lookbehind starts a try only at a run's start.
_SURROGATE = re.compile(rb"(?<!\\)(?:\\\\)*\\u([dD][89a-fA-F][0-9a-fA-F]{2})")
_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_REPLACEMENT_ESCAPE = rb"\ufffd"
_ESCAPE_BYTES = 6  # \uXXXX
_WINDOW = 2 * _ESCAPE_BYTES  # a surrogate pair


def _unfinished_utf8(buf: bytes) -> int:
    """Bytes at the end of ``buf`` that begin a multi-byte sequence the next piece may finish."""
    for k in range(1, min(3, len(buf)) + 1):
        byte = buf[-k]
        if byte < 0x80:
            return 0
        if byte >= 0xC0:  # a lead byte: 2, 3 or 4 bytes long
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return k if need > k else 0
    return 0


def _escapes_at(buf: bytes, i: int) -> bool:
    """Whether the backslash at ``i`` starts an escape (an odd place in its run of backslashes;
    ``buf`` never starts inside a run: see ``_held_from``)."""
    return (i - len(buf[:i].rstrip(b"\\"))) % 2 == 0


def _held_from(buf: bytes, end: int) -> int:
    """Where the bytes that the next piece may change begin (``end``: none): the first escape
    that starts in the last 12 bytes before ``end`` (a surrogate there may pair with what
    follows), moved back over a high surrogate escape just before it (whose low half it may
    be). What is emitted therefore never ends inside a run of backslashes that matters."""
    cut = end
    i = buf.find(b"\\", max(0, end - _WINDOW), end)
    if i != -1:
        if _escapes_at(buf, i):
            cut = i
        elif i + 1 < end and buf[i + 1] == _BACKSLASH:  # the next one in the run escapes
            cut = i + 1
        else:  # i closed an escaped backslash: the next backslash starts a run
            j = buf.find(b"\\", i + 1, end)
            cut = end if j == -1 else j
    before = cut - _ESCAPE_BYTES
    if before >= 0 and _HIGH.fullmatch(buf, before, cut) and _escapes_at(buf, before):
        cut = before
    return cut


def _fix_surrogates(body: bytes) -> tuple[bytes, int]:
    """Lone surrogate escapes in ``body`` as ``\\ufffd``; pairs and escaped backslashes stay."""
    if _fix_surrogates_c is not None:
        return _fix_surrogates_c(body)
    out, pos, done, n = [], 0, 0, 0
    while True:
        m = _SURROGATE.search(body, pos)
        if m is None:
            break
        pos = m.end()
        if int(m.group(1), 16) < 0xDC00 and _LOW.match(body, pos):  # a high surrogate and its low half
            pos += _ESCAPE_BYTES
            continue
        out += [body[done:pos - _ESCAPE_BYTES], _REPLACEMENT_ESCAPE]
        done = pos
        n += 1
    if not n:
        return body, 0
    out.append(body[done:])
    return b"".join(out), n


def _fix_utf8(body: bytes) -> tuple[bytes, int]:
    try:
        codecs.utf_8_decode(body, "strict", True)
        return body, 0
    except UnicodeDecodeError:
        text = body.decode("utf-8", "replace")
        # one U+FFFD per invalid sequence, beside any the file held already
        return text.encode(), text.count("\ufffd") - body.count("\ufffd".encode())


class TextFix:
    """Feed a file's bytes piece by piece; get them back as valid JSON text (see the module)."""

    def __init__(self):
        self.replaced = 0
        self._held = b""

    def feed(self, piece: bytes, final: bool = False) -> bytes:
        buf = self._held + piece if self._held else piece
        ascii_only, escapes = buf.isascii(), b"\\" in buf  # both at memory speed
        if ascii_only and not escapes:  # most pieces of most traces
            self._held = b""
            return buf
        end = len(buf)
        if not final:
            end -= 0 if ascii_only else _unfinished_utf8(buf)
            end = _held_from(buf, end) if escapes else end
        body, self._held = (buf, b"") if end == len(buf) else (buf[:end], buf[end:])
        if not ascii_only:
            body, n = _fix_utf8(body)
            self.replaced += n
        if escapes:
            body, n = _fix_surrogates(body)
            self.replaced += n
        return body

    def finish(self) -> bytes:
        """The bytes held back, now that no more come."""
        return self.feed(b"", final=True) if self._held else b""
