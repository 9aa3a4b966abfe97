"""Plain-text output for the CLI: tables that fit the terminal, wrapped prose, progress on
stderr; and ``clean`` for every text that reaches the terminal from a trace, a
manifest or a user.

A table keeps to ``DISPLAY.width`` columns (the terminal's, else 100) by leaving out
its last columns, which each command orders least important last, with a line
naming them (``--wide`` shows all), and to ``DISPLAY.top`` rows (``--top N``; the
rows that matter most, e.g. the most exposed, with a line saying how many were left
out; ``--top 0`` shows all).
"""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from dataclasses import dataclass

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


DEFAULT_WIDTH = 100  # what a table keeps to when stdout is no terminal
DEFAULT_TOP = 20  # rows of a long table: a screenful


@dataclass
class Display:
    width: int = DEFAULT_WIDTH
    wide: bool = False  # every column, whatever the width
    top: int = DEFAULT_TOP  # 0: every row


DISPLAY = Display()


def configure(wide: bool = False, top: int | None = None) -> None:
    """Set the output's width (the terminal's when stdout is one) and the row limit."""
    width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns if sys.stdout.isatty() else DEFAULT_WIDTH
    DISPLAY.width, DISPLAY.wide = max(40, width), wide
    DISPLAY.top = DEFAULT_TOP if top is None else max(0, top)


def say(text: str = "", indent: str = "  ") -> None:
    """Print prose wrapped to the output's width (continuation lines indented)."""
    print(textwrap.fill(text, width=DISPLAY.width, subsequent_indent=indent) if text else "")


def _render(cells: list[list[str]], headers: list[str], text: list[bool]) -> list[str]:
    """Text columns left-aligned, numbers right-aligned (their header with them)."""
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]

    def line(values) -> str:
        return "  ".join(v.ljust(w) if t else v.rjust(w) for v, w, t in zip(values, widths, text)).rstrip()
    return [line(headers), "  ".join("-" * w for w in widths)] + [line(row) for row in cells]


def _is_text(values: list) -> bool:
    """A column of text: some value is neither a number nor missing."""
    return any(v is not None and not isinstance(v, (int, float)) for v in values)


def table(rows: list[dict], columns: list[tuple[str, str]], rank_by: str | None = None,
          what: str = "rows") -> str:
    """Render rows as a table; columns are (key, header) pairs, least important last.
    Over ``DISPLAY.top`` rows, the rows with the largest ``rank_by`` are kept (in their
    order), else the first ones."""
    notes = []
    top = DISPLAY.top
    if top and len(rows) > top:
        if rank_by:
            keep = set(sorted(range(len(rows)), key=lambda i: -(rows[i].get(rank_by) or 0))[:top])
            shown = [r for i, r in enumerate(rows) if i in keep]
            notes.append(f"({len(rows) - top} more {what} not shown: the {top} with the most "
                         f"{rank_by.replace('_ms', '').replace('_', ' ')} are; --top 0 shows all)")
        else:
            shown = rows[:top]
            notes.append(f"({len(rows) - top} more {what} not shown; --top 0 shows all)")
    else:
        shown = rows
    # a column with no value in any row says nothing: left out, and named
    empty = [h for k, h in columns if rows and all(r.get(k) is None for r in rows)]
    columns = [(k, h) for k, h in columns if h not in empty] or columns[:1]
    cells = [[_cell(r.get(k)) for k, _ in columns] for r in shown]
    headers = [h for _, h in columns]
    text = [_is_text([r.get(k) for r in shown]) for k, _ in columns]
    lines = _render(cells, headers, text)
    dropped = []
    while not DISPLAY.wide and len(headers) > 2 and max(len(line) for line in lines) > DISPLAY.width:
        dropped.insert(0, headers.pop())
        cells = [c[:len(headers)] for c in cells]
        lines = _render(cells, headers, text)
    if dropped:
        notes.append(f"({', '.join(dropped)} left out to fit {DISPLAY.width} columns; --wide shows them)")
    if empty:
        notes.append(f"({', '.join(empty)}: no value in any row, left out)")
    return "\n".join(lines + notes)
