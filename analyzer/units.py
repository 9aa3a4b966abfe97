"""Units of the JSON contract, defined once: times in ms from int64 ns, percentages."""

from __future__ import annotations

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
MS_DIGITS = 6  # milliseconds keep every nanosecond


def ms(ns) -> float | None:
    """int64 nanoseconds -> milliseconds (None stays None)."""
    return None if ns is None else round(ns / NS_PER_MS, MS_DIGITS)


def pct(part, whole, digits: int = 2) -> float | None:
    """100 x part / whole, rounded; None when whole is 0 or unknown."""
    return round(100.0 * part / whole, digits) if whole and part is not None else None
