"""The one dtype table: the name ``infer_shape/common.h`` and ``_specs.py`` give each dtype, its
MindSpore dtype and, for the dtypes a kernel can declare, its ``CustomRegOp`` ``DataType``.

Imports nothing of the package, so every module may use it.
"""
from __future__ import annotations

import mindspore as ms
from mindspore.ops import DataType

# (name, attribute of mindspore, attribute of DataType or None). Every number dtype is listed, so a
# wrong one is reported by its name; anything else becomes "an unsupported dtype" in infer_shape.
_TABLE = (
    ("bool", "bool_", "BOOL_Default"), ("int8", "int8", None), ("int16", "int16", None),
    ("int32", "int32", "I32_Default"), ("int64", "int64", "I64_Default"), ("uint8", "uint8", None),
    ("uint16", "uint16", None), ("uint32", "uint32", None), ("uint64", "uint64", None),
    ("float16", "float16", "F16_Default"), ("bfloat16", "bfloat16", "BF16_Default"),
    ("float32", "float32", "F32_Default"), ("float64", "float64", None), ("complex64", "complex64", None),
    ("complex128", "complex128", None), ("float8_e4m3fn", "float8_e4m3fn", None),
    ("float8_e5m2", "float8_e5m2", None), ("hifloat8", "hifloat8", None), ("int4", "qint4x2", None),
)
_ROWS = tuple(row for row in _TABLE if hasattr(ms, row[1]))
_NAME_OF = {getattr(ms, attr): name for name, attr, _ in _ROWS}
_MS_DTYPE = {name: getattr(ms, attr) for name, attr, _ in _ROWS}
_REG_TYPE = {name: getattr(DataType, reg) for name, _, reg in _ROWS if reg is not None}


def dtype_name(dtype: object) -> str:
    """The name ``infer_shape`` uses for a MindSpore dtype ("float16", "bfloat16", ...)."""
    return _NAME_OF.get(dtype, str(dtype).lower())


def ms_dtype(name: str) -> ms.dtype:
    """The MindSpore dtype of an ``infer_shape`` dtype name (``KeyError`` for an unknown name)."""
    return _MS_DTYPE[name]


def reg_data_type(name: str) -> object:
    """The ``CustomRegOp`` ``DataType`` (default format) of a dtype name a kernel declares in
    ``_specs.py`` (``KeyError`` for a dtype no kernel can take)."""
    return _REG_TYPE[name]
