"""Input preparation shared by the lightning-indexer ops: optional inputs.

``ops.Custom`` AOT inputs cannot be None, so an absent optional input is passed as a zero-size
1-D placeholder tensor (verified to work in PyNative, GRAPH and GRAPH with dynamic shapes). A
real rope tensor has rank 3/4 and a real lengths tensor at least one entry, so the kernels and
the shape rules tell a placeholder apart without an extra attribute.
"""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Tensor

from ._checks import cumulative_lengths


def absent(dtype: object = ms.int32) -> Tensor:
    """The zero-size placeholder standing for None (``dtype`` = the dtype the slot expects)."""
    return Tensor(np.zeros(0, np.float32 if dtype != ms.int32 else np.int32), dtype)


def lengths_or_absent(op: str, arg: str, value: object, total: int | None) -> Tensor:
    """``value`` as a kernel input (see ``_checks.cumulative_lengths``), or the placeholder for None."""
    return absent() if value is None else cumulative_lengths(op, arg, value, total)
