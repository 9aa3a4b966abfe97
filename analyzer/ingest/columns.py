"""Build Arrow columns from Python lists and NumPy arrays without ``pa.array``.

``pa.array`` on Python objects imports pandas on first use (0.2 s, measured),
more than decoding a whole trace takes; these helpers assemble arrays from
buffers instead. Strings are interned: a column is a dictionary array of small
integer codes over the distinct values, as Perfetto interns its strings.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from overlapscope.analyzer.ingest.kineto import NULL_I64  # noqa: F401 (sentinel for "no value" in int64 columns)


def distinct_codes(keys: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of keys in ``[0, bound)``: the distinct keys in
    order and each key's index among them. Where the bound is small beside the keys (codes
    of codes: a category's and a name's), a presence table numbers them in O(n) instead of
    a sort (216k events' pairs: 0.3 against 7 ms)."""
    if bound > max(4 * len(keys), 1 << 16):
        return np.unique(keys, return_inverse=True)
    present = np.zeros(bound, dtype=bool)
    present[keys] = True
    distinct = np.flatnonzero(present)
    index = np.cumsum(present, dtype=np.int64) - 1
    return distinct, index[keys]


def member(codes: np.ndarray, wanted, bound: int) -> np.ndarray:
    """``np.isin(codes, wanted)`` for codes in ``[0, bound)`` (classes, categories, names): a
    lookup in a table of the bound's size (np.isin sorts: 2-3 ms for 216k events' classes
    against 0.3-0.5 ms)."""
    if bound > max(4 * len(codes), 1 << 16):
        return np.isin(codes, list(wanted))
    table = np.zeros(max(bound, 1), dtype=bool)
    table[np.asarray(list(wanted), dtype=np.int64)] = True
    return table[codes]


def _validity(mask: np.ndarray) -> pa.Buffer | None:
    if mask.all():
        return None
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def int64(values: np.ndarray) -> pa.Array:
    """int64 Arrow array; ``NULL_I64`` entries become nulls."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    valid = values != NULL_I64
    return pa.Array.from_buffers(pa.int64(), len(values), [_validity(valid), pa.py_buffer(values)])


def float64(values: np.ndarray) -> pa.Array:
    """float64 Arrow array; NaN entries become nulls."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    valid = ~np.isnan(values)
    return pa.Array.from_buffers(pa.float64(), len(values), [_validity(valid), pa.py_buffer(values)])


def int32(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(values), [None, pa.py_buffer(values)])


def strings(values: list[str | None]) -> pa.Array:
    """A plain UTF-8 string array (None → null)."""
    values = list(values)
    nones = values.count(None)  # at C speed: the process group columns are often all None
    if nones == len(values):
        return pa.nulls(len(values), pa.string())
    encoded = [b"" if v is None else str(v).encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(list(map(len, encoded)), out=offsets[1:])
    valid = np.array([v is not None for v in values], dtype=bool) if nones else np.ones(len(values), dtype=bool)
    return pa.Array.from_buffers(
        pa.string(), len(values), [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def raw_json(raws: list) -> pa.Array:
    """A string array from raw JSON byte chunks (``msgspec.Raw``); ``{}`` or empty → null."""
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.large_string(), len(raws),
        [_validity(lengths > 2), pa.py_buffer(offsets), pa.py_buffer(b"".join(raws))],
    )


def json_column(lengths: np.ndarray, data: bytes) -> pa.Array:
    """A string array of raw JSON values laid back to back in ``data`` with ``lengths``
    (``raw_json`` without a Python object per value); ``{}`` or empty → null."""
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_string(), len(lengths),
                                 [_validity(lengths > 2), pa.py_buffer(offsets), pa.py_buffer(data)])


def intern(values: list) -> tuple[np.ndarray, list]:
    """Codes (int32) of each value and the list of distinct values, in first-seen order."""
    distinct = list(dict.fromkeys(values))  # C-speed dedup keeps first-seen order
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    return codes, distinct


def dictionary(codes: np.ndarray, values: list[str | None]) -> pa.Array:
    """Dictionary-encoded string column: ``values[codes[i]]``; negative codes → null."""
    codes = np.ascontiguousarray(codes, dtype=np.int32)
    valid = codes >= 0
    indices = pa.Array.from_buffers(pa.int32(), len(codes), [_validity(valid), pa.py_buffer(codes)])
    return pa.DictionaryArray.from_arrays(indices, strings(values))


def optional_ints(values: list) -> np.ndarray:
    """int64 NumPy array from ints (``NULL_I64`` or None for missing) or numeric strings."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # None or strings among the ints: slow path
        return np.array([_to_int(v) for v in values], dtype=np.int64)


def _to_int(v) -> int:
    """An int64 value, or NULL_I64 for what is none (missing, not a number, out of range)."""
    if v is None or isinstance(v, bool):
        return NULL_I64
    if not isinstance(v, int):
        try:
            v = int(float(v))
        except (TypeError, ValueError, OverflowError):
            return NULL_I64
    return v if NULL_I64 < v <= 2**63 - 1 else NULL_I64


def optional_strs(values: list) -> tuple[np.ndarray, list]:
    """Interned codes for optional strings (None → -1), distinct values in first-seen order."""
    distinct = [v for v in dict.fromkeys(values) if v is not None]  # C-speed dedup
    if all(type(v) is str for v in distinct):
        index = {v: i for i, v in enumerate(distinct)}
        index[None] = -1
        return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values)), distinct
    table: dict = {}  # other values among them: interned by their text (1 and "1" are one value)
    codes = np.fromiter(
        (-1 if v is None else table.setdefault(str(v), len(table)) for v in values),
        dtype=np.int32, count=len(values),
    )
    return codes, list(table)
