"""Argument handling shared by ``sparse_flash_attention`` and ``sparse_flash_attention_grad``."""
from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from mindspore import Tensor

from ._checks import check_tensor

Lengths = Sequence[int] | np.ndarray | Tensor | None


@functools.cache
def _placeholder() -> Tensor:
    """The 1-element int32 tensor passed for the lengths in BSND (the kernel ignores them)."""
    return Tensor(np.zeros(1, np.int32))


def _check_cumulative(op: str, arg: str, lens: np.ndarray, total: int) -> None:
    if lens.ndim != 1 or lens.size == 0:
        raise ValueError(f"{op}: argument '{arg}' must be a non-empty 1-D list of cumulative lengths, "
                         f"got shape {list(lens.shape)}")
    steps = np.diff(np.concatenate([[0], lens.astype(np.int64)]))
    if (steps < 0).any():
        i = int(np.flatnonzero(steps < 0)[0])
        raise ValueError(f"{op}: argument '{arg}' must be cumulative (non-decreasing, >= 0), got {arg}[{i}] = "
                         f"{int(lens[i])}")
    if total >= 0 and int(lens[-1]) != total:
        raise ValueError(f"{op}: the last entry of '{arg}' ({int(lens[-1])}) must equal the number of tokens "
                         f"{total} (lengths are cumulative, without a leading 0)")


def seq_lengths(op: str, arg: str, value: Lengths, layout: str, total: int | None) -> Tensor:
    """The int tensor passed to the kernel for ``actual_seq_lengths_*``.

    TND: required; a Python sequence / NumPy array is checked here (ValueError) and becomes an
    int32 tensor; tensor values are checked by the kernel (RuntimeError).
    BSND: ignored (a placeholder is passed)."""
    if layout != "TND":
        return _placeholder()
    total = -1 if total is None else int(total)
    if value is None:
        raise ValueError(f"{op}: argument '{arg}' is required with layout \"TND\" (cumulative lengths, "
                         "last entry = number of tokens)")
    if isinstance(value, Tensor):
        # Tensor values are checked by the kernel (RuntimeError naming the op): reading them here
        # would need a device sync and is not possible while a graph compiles.
        return value
    if isinstance(value, (Sequence, np.ndarray)):
        lens = np.asarray(value)
        if lens.dtype.kind not in "iu":
            raise TypeError(f"{op}: argument '{arg}' must hold integers, got {lens.dtype}")
        _check_cumulative(op, arg, lens, total)
        return Tensor(lens.astype(np.int32))
    raise TypeError(f"{op}: argument '{arg}' must be a sequence of ints or an int tensor, got {type(value).__name__}")


def rope_pair(op: str, query_rope: Tensor | None, key_rope: Tensor | None) -> bool:
    """True when both rope tensors are given, False when neither; ValueError otherwise."""
    if (query_rope is None) != (key_rope is None):
        raise ValueError(f"{op}: arguments 'query_rope' and 'key_rope' must be given together (or both None)")
    if query_rope is not None:
        check_tensor(op, "query_rope", query_rope)
        check_tensor(op, "key_rope", key_rope)
    return query_rope is not None
