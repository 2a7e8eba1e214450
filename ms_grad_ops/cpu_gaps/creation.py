"""``mint.arange``, ``mint.full``, ``mint.ones_like`` and ``mint.zeros_like`` on CPU.

MindSpore 2.10's PyNative mode runs them on primitives without a CPU kernel (``Arange``,
``FillScalar``, ``OnesLikeExt``, ``ZerosLikeExt``: "The kernel Arange unregistered."). GRAPH mode
folds most calls into constants, but not all (``FillScalar`` for bfloat16: "Unsupported op"), so
the stand-ins serve both modes: ``arange`` is a constant computed when called (PyNative) or
compiled (GRAPH); the others are older ops with CPU kernels (``Fill``, ``Ones``, ``Zeros``),
``Fill`` in float32 and cast for 16-bit floats (it has no bfloat16 kernel; one rounding, the
cast's). None has a gradient with respect to a value (MindSpore's neither).
"""
from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore.ops import constexpr

Number = int | float | bool


def _scalar_dtype(value: Number) -> ms.dtype:
    """MindSpore's dtype for a Python scalar: bool, int64, float32."""
    if isinstance(value, bool):
        return ms.bool_
    return ms.int64 if isinstance(value, int) else ms.float32


@constexpr
def _arange(start: Number, end: Number | None, step: Number, dtype: ms.dtype | None) -> Tensor:
    """``arange``'s values as a constant: ``start + i * step`` for ``i < ceil((end - start) / step)``,
    in float64 for a float64 result, float32 for other floats (as Arange), exact for integers."""
    if end is None:
        start, end = 0, start
    for name, value in (("start", start), ("end", end), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"arange: '{name}' must be an int or a float, got {value!r}")
    if step == 0 or (end - start) * step <= 0:
        raise ValueError(f"arange: no sequence goes from start {start} to end {end} by step {step}")
    all_int = all(isinstance(v, int) for v in (start, end, step))
    out_dtype = dtype if dtype is not None else (ms.int64 if all_int else ms.float32)
    index = np.arange(math.ceil((end - start) / step))
    if all_int:
        return Tensor(index * step + start, ms.int64).astype(out_dtype)
    compute = np.float64 if out_dtype == ms.float64 else np.float32
    values = index.astype(compute) * compute(step) + compute(start)
    return Tensor(values).astype(out_dtype)


def arange_ext(start: Number = 0, end: Number | None = None, step: Number = 1, *,
               dtype: ms.dtype | None = None) -> Tensor:
    """``mindspore.mint.arange``: ``start + i * step`` for ``i = 0 .. ceil((end - start) / step) - 1``
    (``arange(n)`` is ``0 .. n-1``); int64 when all three are integers, float32 otherwise, or
    ``dtype``. A constant (no op runs; no gradient, as MindSpore's)."""
    return _arange(start, end, step, dtype)


def full_ext(size: tuple | list, fill_value: Number | Tensor, *, dtype: ms.dtype | None = None) -> Tensor:
    """``mindspore.mint.full``: a tensor of shape ``size`` filled with ``fill_value`` (a scalar or a
    one-element Tensor); dtype ``dtype``, else the value's (bool, int64 or float32 for scalars)."""
    if not isinstance(size, (tuple, list)) or any(isinstance(n, bool) or not isinstance(n, int) or n < 0
                                                  for n in size):
        raise ValueError(f"full: 'size' must be a tuple or list of non-negative ints, got {size!r}")
    if isinstance(fill_value, Tensor):
        if fill_value.size != 1:
            raise ValueError(f"full: a Tensor 'fill_value' must have one element, got shape {fill_value.shape}")
        out_dtype = fill_value.dtype if dtype is None else dtype
        return ops.broadcast_to(fill_value.reshape(()), tuple(size)).astype(out_dtype)
    out_dtype = _scalar_dtype(fill_value) if dtype is None else dtype
    # Fill has no bfloat16/float16 kernel on every CPU: fill float32 (exact for the value's
    # rounding to 16 bits, which the cast does once) and cast.
    fill_dtype = ms.float32 if out_dtype in (ms.float16, ms.bfloat16) else out_dtype
    return ops.fill(fill_dtype, tuple(size), fill_value).astype(out_dtype)


def ones_like_ext(input: Tensor, *, dtype: ms.dtype | None = None) -> Tensor:  # noqa: A002
    """``mindspore.mint.ones_like``: ones shaped like ``input``, in ``dtype`` or ``input``'s."""
    return ops.ones(input.shape, input.dtype if dtype is None else dtype)


def zeros_like_ext(input: Tensor, *, dtype: ms.dtype | None = None) -> Tensor:  # noqa: A002
    """``mindspore.mint.zeros_like``: zeros shaped like ``input``, in ``dtype`` or ``input``'s."""
    return ops.zeros(input.shape, input.dtype if dtype is None else dtype)
