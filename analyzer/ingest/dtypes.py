"""Element sizes of the dtype spellings that traces use.

NCCL kernels carry ``dtype`` as c10 ScalarType names (``Float``, ``BFloat16``);
gloo spans and c10d ops carry ``Input type`` as C++ type names (``float``,
``c10::BFloat16``). Both map to bytes per element here.
"""

from __future__ import annotations

_ITEMSIZE_BYTES = {
    # floating point: ScalarType names, torch names, C++ and CUDA type names
    "float": 4, "float32": 4, "single": 4, "fp32": 4,
    "double": 8, "float64": 8, "fp64": 8,
    "half": 2, "float16": 2, "fp16": 2, "c10::half": 2, "at::half": 2, "__half": 2,
    "bfloat16": 2, "bf16": 2, "c10::bfloat16": 2, "at::bfloat16": 2, "__nv_bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "c10::float8_e4m3fnuz": 1, "c10::float8_e5m2fnuz": 1,
    "c10::float8_e8m0fnu": 1,
    # integers: ScalarType names (Int, Long, Short, Char, Byte), C++ spellings, fixed-width names
    "int": 4, "int32": 4, "int32_t": 4, "signed int": 4, "unsigned int": 4, "uint32": 4, "uint32_t": 4,
    "long": 8, "int64": 8, "int64_t": 8, "long int": 8, "long long": 8, "long long int": 8,
    "unsigned long": 8, "unsigned long int": 8, "unsigned long long": 8, "uint64": 8, "uint64_t": 8,
    "short": 2, "int16": 2, "int16_t": 2, "short int": 2, "unsigned short": 2, "uint16": 2, "uint16_t": 2,
    "char": 1, "int8": 1, "signed char": 1, "int8_t": 1,
    "byte": 1, "uint8": 1, "unsigned char": 1, "uint8_t": 1,
    "bool": 1,
    # complex
    "complexhalf": 4, "complexfloat": 8, "complexdouble": 16, "complex32": 4, "complex64": 8, "complex128": 16,
    "c10::complex<c10::half>": 4, "c10::complex<float>": 8, "c10::complex<double>": 16,
}


def itemsize(dtype: str | None) -> int | None:
    """Bytes per element of a trace's dtype spelling, or None when unknown."""
    if dtype is None:
        return None
    name = str(dtype).strip().lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    return _ITEMSIZE_BYTES.get(name)
