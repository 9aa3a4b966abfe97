"""The pages' tables: rows read through a spec of ``shape.py`` (a header with its unit,
rounding, what the column is and why a row may have no value) into ``st.dataframe``.

A missing value shows as a dash, its column's tooltip says why; a column with no value
on any row is left out and named below the table; a marked row (the slowest) is
flagged in a narrow first column.
"""

from __future__ import annotations

import polars as pl
import streamlit as st

from overlapscope.dashboard import shape

MARK = "◀"
MARK_PX = 28  # the flag column: one glyph wide
DASH = "–"


def show(rows: list[dict], spec: dict, marked=None, mark_help: str = f"{MARK} the slowest") -> None:
    """``rows`` as a table through ``spec``; ``marked(row)`` flags rows (none when None)."""
    if marked is not None:
        rows = [{"mark": MARK if marked(r) else "", **r} for r in rows]
    shown, columns, gaps, empty = shape.readable_rows(rows, spec)
    config: dict = {"mark": st.column_config.TextColumn("", width=MARK_PX, help=mark_help)} if marked else {}
    for k in columns:
        label, digits, why = spec[k]
        if k in gaps and DASH not in why:
            why += f" {DASH}: no value for this row."
        config[k] = (st.column_config.TextColumn(label, help=why) if digits is None else
                     st.column_config.NumberColumn(label, help=why, format=f"%.{digits}f" if digits else "%d"))
    frame = pl.DataFrame(shown, infer_schema_length=None) if shown else pl.DataFrame({k: [] for k in columns})
    st.dataframe(frame, hide_index=True, column_config=config, width="stretch", placeholder=DASH)
    if empty:
        st.caption("Not shown: " + "; ".join(empty) + ".")
