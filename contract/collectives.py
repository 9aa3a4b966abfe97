"""Collective kinds and their bus-bandwidth factors (nccl-tests), one definition.

Traces and launches name one operation many ways: ``allreduce``, ``all_reduce``,
``AllReduce``, ``_allgather_base``, ``nccl:_reduce_scatter_base``,
``all_gather_into_tensor_coalesced``. ``collective_kind`` maps each to one of
``COLLECTIVE_KINDS``. The bus factor turns a collective's full buffer size (the
all-reduced buffer, an all-gather's output, a reduce-scatter's input) into the
bytes one rank puts on the wire of a ring: ``busbw = algbw x factor``
(nccl-tests, PERFORMANCE.md), ``wire bytes = message bytes x factor``.
"""

from __future__ import annotations

import numbers
import re

COLLECTIVE_KINDS = (
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "gather", "scatter",
    "send_recv", "barrier",
)

# Name fragments (letters only, lower case) in the order they are tried: the
# compound names before "reduce", "gather" and "scatter" alone.
_FRAGMENTS = (
    ("allreduce", "all_reduce"),
    ("reducescatter", "reduce_scatter"),
    ("allgather", "all_gather"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)
_NOT_LETTERS = re.compile(r"[^a-z]")


def collective_kind(name: str | None) -> str | None:
    """The canonical kind of a collective's name, or None when it names none."""
    if not name:
        return None
    letters = _NOT_LETTERS.sub("", str(name).lower())
    for fragment, kind in _FRAGMENTS:
        if fragment in letters:
            return kind
    return None


def bus_factor(kind: str, group_size: int) -> float:
    """busbw / algbw of nccl-tests for a collective of ``kind`` over ``group_size`` ranks.

    - all_reduce: 2(n-1)/n (a reduce-scatter plus an all-gather);
    - reduce_scatter, all_gather, all_to_all, gather, scatter: (n-1)/n (each rank
      keeps or owns 1/n of the buffer and moves the rest);
    - broadcast, reduce, send_recv: 1 (on a pipelined ring every rank but one
      forwards the whole buffer once).

    ``kind`` may be any spelling ``collective_kind`` reads. Raises ``ValueError``
    for a name that is no collective, a barrier (no payload) or a group size < 1.
    """
    canonical = collective_kind(kind)
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral) or group_size < 1:
        raise ValueError(f"the group size must be a positive integer, got {group_size!r}")
    share = (group_size - 1) / group_size
    if canonical == "all_reduce":
        return 2.0 * share
    if canonical in ("reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"):
        return share
    if canonical in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise ValueError(f"no bus bandwidth for {kind!r} (not a collective with a payload)")
