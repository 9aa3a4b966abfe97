"""FLOPs of matmul ops from their input shapes, when the profiler wrote no count.

Only the ops that do the multiply themselves are counted (``aten::linear`` and
``aten::matmul`` dispatch to these, so counting them too would count twice).
A multiply-add is 2 FLOPs.
"""

from __future__ import annotations

import json
import math


def _mkn(a: list[int], b: list[int]) -> float | None:
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


# op -> positions of the two matrix operands in Input Dims
_OPERANDS = {
    "aten::mm": (0, 1),
    "aten::bmm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::baddbmm": (1, 2),
    "aten::_scaled_mm": (0, 1),
    "aten::_addmm_activation": (1, 2),
}
FLOP_OPS = frozenset(_OPERANDS)


def matmul_flops(name: str, input_dims_json: bytes) -> float | None:
    """FLOPs of one matmul op from its ``Input Dims`` (raw JSON), or None."""
    where = _OPERANDS.get(name)
    if where is None or not input_dims_json:
        return None
    try:
        dims = json.loads(input_dims_json)
        return _mkn(dims[where[0]], dims[where[1]])
    except (ValueError, IndexError, TypeError):
        return None
