"""Who may write to the catalog through the dashboard: API tokens.

A token file (``--api-tokens FILE`` or ``$OVERLAPSCOPE_API_TOKENS``) holds one
``token name`` line per client (blank lines and ``#`` comments are skipped);
the name is recorded with each run the token pushes. Presented tokens are
compared against every entry in constant time (HMAC-compare of SHA-256
digests: neither the content nor the length of a token leaks through timing),
and no token is ever printed: errors name the file and the line number only.
The file is read again when it changes, so tokens can be rotated without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from overlapscope.analyzer.errors import UsageError

MIN_TOKEN_CHARS = 16  # shorter ones are guessable


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class Tokens:
    """The tokens of one file (none: writes through the API are refused)."""

    entries: tuple[tuple[bytes, str], ...] = ()  # (SHA-256 of the token, name)

    @property
    def configured(self) -> bool:
        return bool(self.entries)

    def who(self, presented: str | None) -> str | None:
        """The name of the presented token, or None; every entry is compared, in constant time."""
        if not presented:
            return None
        given = _digest(presented)
        found = None
        for digest, name in self.entries:
            if hmac.compare_digest(digest, given) and found is None:
                found = name
        return found


NONE = Tokens()


def parse(text: str, where: str) -> Tokens:
    """Tokens from the text of a token file; a bad line fails naming ``where`` and its number."""
    entries, seen = [], set()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        token, _, name = line.partition(" ")
        name = name.strip()
        if not name:
            raise UsageError(f"{where}:{number}: a line is 'TOKEN NAME' (the name is missing)")
        if len(token) < MIN_TOKEN_CHARS:
            raise UsageError(f"{where}:{number}: the token is shorter than {MIN_TOKEN_CHARS} characters")
        digest = _digest(token)
        if digest in seen:
            raise UsageError(f"{where}:{number}: this token is already on an earlier line")
        seen.add(digest)
        entries.append((digest, name))
    if not entries:
        raise UsageError(f"{where}: no tokens in the file (one 'TOKEN NAME' per line)")
    return Tokens(tuple(entries))


def load(path: str | os.PathLike) -> Tokens:
    """The tokens of the file at ``path``."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: cannot read the token file ({type(err).__name__})") from None
    return parse(text, str(path))


_CACHE: dict[str, tuple[tuple, Tokens]] = {}
_GUARD = threading.Lock()


def current(path: str | os.PathLike | None) -> Tokens:
    """The tokens of ``path`` as the file reads now (re-read when it changes); none for None."""
    if path is None:
        return NONE
    key = str(path)
    try:
        stat = os.stat(key)
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    except OSError:
        stamp = None
    with _GUARD:
        cached = _CACHE.get(key)
        if cached and cached[0] == stamp:
            return cached[1]
    tokens = load(key)
    with _GUARD:
        _CACHE[key] = (stamp, tokens)
    return tokens


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
