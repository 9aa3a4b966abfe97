"""Plain-text tables for the CLI: fixed-width columns, units in the headers; and
``clean`` for every text that reaches the terminal from a trace, a manifest or a user."""

from __future__ import annotations

import re

# C0 and C1 control characters (ANSI escapes start with one; a newline would break a row)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(value) -> str:
    """Text as the terminal may show it: control characters become visible escapes."""
    text = str(value)
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return clean(value)


def table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """Render rows as a table; columns are (key, header) pairs."""
    cells = [[_cell(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h) in enumerate(columns)]
    lines = ["  ".join(h.rjust(w) for (_, h), w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
