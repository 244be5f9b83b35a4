"""``cudnn.data_type`` and its lazy mappings to torch and cutlass dtypes (neither is imported here)."""

from __future__ import annotations

import enum
from typing import Any


class data_type(enum.Enum):  # noqa: N801 - upstream's spelling
    NOT_SET = "not_set"
    FLOAT = "float32"
    DOUBLE = "float64"
    HALF = "float16"
    BFLOAT16 = "bfloat16"
    FP8_E4M3 = "float8_e4m3fn"
    FP8_E5M2 = "float8_e5m2"
    INT8 = "int8"
    UINT8 = "uint8"
    INT32 = "int32"
    INT64 = "int64"
    BOOLEAN = "bool"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def short(self) -> str:
        return _SHORT[self]


_ITEMSIZE = {
    data_type.NOT_SET: 0,
    data_type.FLOAT: 4,
    data_type.DOUBLE: 8,
    data_type.HALF: 2,
    data_type.BFLOAT16: 2,
    data_type.FP8_E4M3: 1,
    data_type.FP8_E5M2: 1,
    data_type.INT8: 1,
    data_type.UINT8: 1,
    data_type.INT32: 4,
    data_type.INT64: 8,
    data_type.BOOLEAN: 1,
}
_SHORT = {
    data_type.NOT_SET: "unset",
    data_type.FLOAT: "fp32",
    data_type.DOUBLE: "fp64",
    data_type.HALF: "fp16",
    data_type.BFLOAT16: "bf16",
    data_type.FP8_E4M3: "e4m3",
    data_type.FP8_E5M2: "e5m2",
    data_type.INT8: "int8",
    data_type.UINT8: "uint8",
    data_type.INT32: "int32",
    data_type.INT64: "int64",
    data_type.BOOLEAN: "bool",
}
_CUTLASS_NAMES = {
    data_type.FLOAT: "Float32",
    data_type.DOUBLE: "Float64",
    data_type.HALF: "Float16",
    data_type.BFLOAT16: "BFloat16",
    data_type.FP8_E4M3: "Float8E4M3FN",
    data_type.FP8_E5M2: "Float8E5M2",
    data_type.INT8: "Int8",
    data_type.UINT8: "Uint8",
    data_type.INT32: "Int32",
    data_type.INT64: "Int64",
    data_type.BOOLEAN: "Boolean",
}


def to_data_type(dtype: Any) -> data_type:
    """Accept a ``data_type``, a torch dtype, a cutlass numeric type or a name like ``"bfloat16"``."""
    if isinstance(dtype, data_type):
        return dtype
    name = str(dtype)
    if name.startswith("torch."):
        name = name[len("torch.") :]
    for member in data_type:
        if name in (member.value, member.name, member.short):
            return member
    for member, cname in _CUTLASS_NAMES.items():
        if getattr(dtype, "__name__", None) == cname or name == cname:
            return member
    aliases = {"float": data_type.FLOAT, "half": data_type.HALF, "double": data_type.DOUBLE}
    if name in aliases:
        return aliases[name]
    raise ValueError(f"unknown data type {dtype!r}; accepted: {', '.join(m.name for m in data_type)}")


def to_torch_dtype(dtype: Any):
    import torch

    dt = to_data_type(dtype)
    if dt is data_type.NOT_SET:
        raise ValueError("data type is NOT_SET; set it before asking for a torch dtype")
    return getattr(torch, dt.value)


def to_cutlass_dtype(dtype: Any):
    import cutlass

    dt = to_data_type(dtype)
    if dt not in _CUTLASS_NAMES:
        raise ValueError(f"{dt.name} has no CuTe DSL numeric type")
    return getattr(cutlass, _CUTLASS_NAMES[dt])
