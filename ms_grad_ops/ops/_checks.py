"""Eager argument checks shared by the functional ops.

Shape/dtype/attribute rules are not written here: they live in ``infer_shape/`` and are called
through the ``_validate`` pybind11 module, so Python, GRAPH-mode infer and the kernels agree.
"""
from __future__ import annotations

from collections.abc import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor
from mindspore import ops as msops
from mindspore.ops import constexpr

from .. import _validate
from .._custom import reads_int64

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1

_DTYPE_NAMES = {
    ms.float16: "float16",
    ms.bfloat16: "bfloat16",
    ms.float32: "float32",
    ms.float64: "float64",
    ms.int32: "int32",
    ms.int64: "int64",
    ms.bool_: "bool",
}


def dtype_name(dtype: object) -> str:
    """The name ``infer_shape`` uses for a MindSpore dtype ("float16", "bfloat16", ...)."""
    return _DTYPE_NAMES.get(dtype, str(dtype).lower())


def check_tensor(op: str, arg: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: argument '{arg}' must be a mindspore Tensor, got {type(value).__name__}")
    return value


@constexpr
def _run_rules(op: str, shapes: tuple, dtypes: tuple, attrs: tuple) -> bool:
    # constexpr: in GRAPH mode this runs in Python at compile time on the (possibly dynamic,
    # None/-1) shapes, so errors are ValueError/TypeError before the graph runs.
    dims = [[-1 if d is None else int(d) for d in s] for s in shapes]
    getattr(_validate, op)(dims, [dtype_name(t) for t in dtypes], *attrs)
    return True


def validate(op: str, names: tuple[str, ...], tensors: tuple[Tensor, ...], attrs: tuple = ()) -> bool:
    """Runs the C++ rules of ``op`` on ``tensors`` (input order, argument ``names``) with the
    attribute values ``attrs`` (all of the op's spec attributes, in spec order); raises
    ``ValueError``/``TypeError`` naming the op, the argument and the shapes. Works eagerly and
    inside a GRAPH-mode construct or bprop."""
    for name, value in zip(names, tensors):
        check_tensor(op, name, value)
    return _run_rules(op, tuple(t.shape for t in tensors), tuple(t.dtype for t in tensors), attrs)


def _check_length_values(op: str, arg: str, lens: np.ndarray, n_tokens: int, max_seq_len: int) -> None:
    bad = np.flatnonzero((lens <= 0) | (lens > max_seq_len))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{op}: {arg}[{i}] = {int(lens[i])} must be in [1, max_seq_len = {max_seq_len}]")
    if int(lens.sum()) != n_tokens:
        raise ValueError(f"{op}: sum({arg}) = {int(lens.sum())} must equal n_tokens = {n_tokens}")


def kernel_lengths(op: str, arg: str, value: Tensor) -> Tensor:
    """An int lengths tensor as the kernel of ``op`` reads it. int64 passes unchanged where the
    kernel reads int64 (CPU), so it sees every value as given. Where it reads int32 only (the
    Ascend OpDefs), int64 is saturated to the int32 range before the cast: a plain cast would wrap
    2**32 + 2 into a valid 2, a saturated value stays outside every valid range."""
    if value.dtype == ms.int64 and not reads_int64(op, arg):
        low, high = Tensor(INT32_MIN, ms.int64), Tensor(INT32_MAX, ms.int64)
        return msops.minimum(msops.maximum(value, low), high).astype(ms.int32)
    return value


def seq_lengths(op: str, arg: str, value: object, n_tokens: int, max_seq_len: int) -> Tensor:
    """``value`` (a Python sequence, NumPy array or int tensor of per-sequence lengths) as an
    int tensor input. Python values are checked here (``ValueError``); tensor values are checked
    by the kernel when it runs (``RuntimeError`` naming the op), since inside a compiled graph
    they are not known before."""
    if isinstance(value, Tensor):
        return kernel_lengths(op, arg, value)
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)):
        lens = np.asarray(value)
        if lens.ndim != 1 or lens.size == 0:
            raise ValueError(f"{op}: argument '{arg}' must be a non-empty 1-D list of lengths, "
                             f"got shape {list(lens.shape)}")
        if lens.dtype.kind not in "iu":
            raise TypeError(f"{op}: argument '{arg}' must hold integers, got {lens.dtype}")
        _check_length_values(op, arg, lens, n_tokens, max_seq_len)
        return Tensor(lens.astype(np.int32))
    raise TypeError(f"{op}: argument '{arg}' must be a sequence of ints or an int tensor, got {type(value).__name__}")


def _check_cumulative_values(op: str, arg: str, lens: np.ndarray, total: int) -> None:
    if lens.ndim != 1 or lens.size == 0:
        raise ValueError(f"{op}: argument '{arg}' must be a non-empty 1-D list of cumulative lengths, "
                         f"got shape {list(lens.shape)}")
    steps = np.diff(np.concatenate([[0], lens.astype(np.int64)]))
    if (steps < 0).any():
        i = int(np.flatnonzero(steps < 0)[0])
        raise ValueError(f"{op}: argument '{arg}' must be non-decreasing cumulative lengths (>= 0; CANN convention: "
                         f"lengths [3, 5] are written [3, 8]), got {arg}[{i}] = {int(lens[i])}")
    if total >= 0 and int(lens[-1]) != total:
        raise ValueError(f"{op}: the last entry of '{arg}' ({int(lens[-1])}) must equal the number of tokens "
                         f"{total} (lengths are cumulative, without a leading 0)")


def cumulative_lengths(op: str, arg: str, value: object, total: int | None) -> Tensor:
    """``actual_seq_lengths_*`` (cumulative, no leading 0) as a kernel input. A Python sequence or
    NumPy array is checked here (``ValueError``/``TypeError``) and becomes an int32 tensor; an int
    tensor is passed as is and its values are checked by the kernel (``RuntimeError``), since
    inside a compiled graph they are not known before. ``total``: the token count, or None."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)):
        lens = np.asarray(value)
        if lens.size and lens.dtype.kind not in "iu":
            raise TypeError(f"{op}: argument '{arg}' must hold integers, got {lens.dtype}")
        _check_cumulative_values(op, arg, lens, -1 if total is None else int(total))
        return Tensor(lens.astype(np.int32))
    raise TypeError(f"{op}: argument '{arg}' must be a sequence of ints or an int tensor, got {type(value).__name__}")
