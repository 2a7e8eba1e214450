"""Input preparation shared by the lightning-indexer ops: optional inputs and cumulative lengths.

``ops.Custom`` AOT inputs cannot be None, so an absent optional input is passed as a zero-size
1-D placeholder tensor (verified to work in PyNative, GRAPH and GRAPH with dynamic shapes). A
real rope tensor has rank 3/4 and a real lengths tensor at least one entry, so the kernels and
the shape rules tell a placeholder apart without an extra attribute.
"""
from __future__ import annotations

from collections.abc import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor


def absent(dtype: object = ms.int32) -> Tensor:
    """The zero-size placeholder standing for None (``dtype`` = the dtype the slot expects)."""
    return Tensor(np.zeros(0, np.float32 if dtype != ms.int32 else np.int32), dtype)


def _check_cumulative(op: str, arg: str, lens: np.ndarray, total: int) -> None:
    if lens.ndim != 1 or lens.size == 0:
        raise ValueError(f"{op}: argument '{arg}' must be a non-empty 1-D list of cumulative lengths, "
                         f"got shape {list(lens.shape)}")
    prev = np.concatenate([[0], lens[:-1]])
    bad = np.flatnonzero(lens < prev)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{op}: argument '{arg}' must be non-decreasing cumulative lengths (CANN convention, "
                         f"[3, 5] is written [3, 8]), but {arg}[{i}] = {int(lens[i])} < {int(prev[i])}")
    if total >= 0 and int(lens[-1]) != total:
        raise ValueError(f"{op}: the last entry of '{arg}' ({int(lens[-1])}) must equal the token count {total}")


def cumulative_lengths(op: str, arg: str, value: object, total: int | None) -> Tensor:
    """``value`` (None, a sequence of ints, a NumPy array, or an int tensor of cumulative lengths,
    including the zero-size placeholder) as a kernel input; Python values are checked here."""
    total = -1 if total is None else int(total)
    if value is None:
        return absent()
    if isinstance(value, Tensor):
        # Tensor values are checked by the kernel (RuntimeError naming the op): reading them here
        # would not compile in GRAPH mode (mindspore.get_context/asnumpy are not allowed there).
        return value
    if isinstance(value, (Sequence, np.ndarray)):
        lens = np.asarray(value)
        if lens.dtype.kind not in "iu":
            raise TypeError(f"{op}: argument '{arg}' must hold integers, got {lens.dtype}")
        _check_cumulative(op, arg, lens, total)
        return Tensor(lens.astype(np.int64))
    raise TypeError(f"{op}: argument '{arg}' must be None, a sequence of ints or an int tensor, "
                    f"got {type(value).__name__}")
