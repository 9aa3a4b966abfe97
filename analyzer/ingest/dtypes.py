"""Element sizes of the dtype spellings that traces use.

NCCL kernels carry ``dtype`` as c10 ScalarType names (``Float``, ``BFloat16``);
gloo spans and c10d ops carry ``Input type`` as C++ type names (``float``,
``c10::BFloat16``). Both map to bytes per element here.
"""

from __future__ import annotations

_ITEMSIZE_BYTES = {
    "float": 4, "float32": 4, "single": 4,
    "double": 8, "float64": 8,
    "half": 2, "float16": 2, "c10::half": 2,
    "bfloat16": 2, "c10::bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "int": 4, "int32": 4,
    "long": 8, "int64": 8, "long int": 8, "long long": 8,
    "short": 2, "int16": 2,
    "char": 1, "int8": 1, "signed char": 1, "int8_t": 1,
    "byte": 1, "uint8": 1, "unsigned char": 1, "uint8_t": 1,
    "bool": 1,
    "complexfloat": 8, "complexdouble": 16, "c10::complex<float>": 8, "c10::complex<double>": 16,
}


def itemsize(dtype: str | None) -> int | None:
    """Bytes per element of a trace's dtype spelling, or None when unknown."""
    if dtype is None:
        return None
    return _ITEMSIZE_BYTES.get(str(dtype).strip().lower())
