"""Plain-text tables for the CLI: fixed-width columns, units in the headers."""

from __future__ import annotations


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """Render rows as a table; columns are (key, header) pairs."""
    cells = [[_cell(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h) in enumerate(columns)]
    lines = ["  ".join(h.rjust(w) for (_, h), w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
