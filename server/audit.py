"""The server's audit log: one line on stderr for every run stored, every refused write
and every deletion, through the API or the Upload page.

A line reads ``overlapscope: audit: ACTION key=value ...``: ``via`` (api or page), the
client's address, ``by`` (the API token's name; a token itself never appears), the run's
id and name, the answer's status and why it was refused. Values from users (run names)
are quoted with control characters escaped, so one line stays one line.
"""

from __future__ import annotations

import sys

ACTIONS = ("store", "repeat", "refuse")  # a stored run, a repeated push answered with its run, a refused write


def _value(value) -> str:
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return repr(str(value))  # quoted, control characters escaped: one line stays one line


def record(action: str, via: str, client: str | None = None, **fields) -> str:
    """Write one audit line (returned too); fields that are None are left out."""
    assert action in ACTIONS, action
    parts = [f"via={via}", *([f"client={_value(client)}"] if client else [])]
    parts += [f"{k}={_value(v)}" for k, v in fields.items() if v is not None]
    line = f"overlapscope: audit: {action} " + " ".join(parts)
    print(line, file=sys.stderr, flush=True)
    return line
