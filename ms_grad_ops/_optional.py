"""Optional inputs of the attention and indexer ops, made in one way for every op.

``ops.Custom`` AOT inputs cannot be None, so an absent optional input (value, the rope pair, the
lengths) is passed as :func:`absent`, a zero-size 1-D tensor, and ``infer_shape/`` and ``cpu/``
recognise that one shape (``is_absent`` in ``infer_shape/common.h``). Every op therefore has one
primitive with a fixed list of inputs and outputs, whatever is given, so a bprop always returns
the same structure.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor

from ._checks import check_cumulative_values, check_tensor, cumulative_lengths

Lengths = Sequence[int] | np.ndarray | Tensor | None


@functools.cache
def absent(dtype: ms.dtype = ms.int32) -> Tensor:
    """The placeholder standing for an absent optional input whose slot expects ``dtype``."""
    return Tensor(np.zeros(0, np.int32 if dtype == ms.int32 else np.float32), dtype)


def optional(op: str, arg: str, value: Tensor | None, dtype: ms.dtype) -> Tensor:
    """``value`` (checked to be a tensor), or the placeholder of a ``dtype`` slot for None."""
    return absent(dtype) if value is None else check_tensor(op, arg, value)


def rope_pair(op: str, query_rope: Tensor | None, key_rope: Tensor | None, dtype: ms.dtype) -> tuple[Tensor, Tensor]:
    """The rope pair as kernel inputs: both tensors, or both placeholders; ValueError for one alone."""
    if (query_rope is None) != (key_rope is None):
        raise ValueError(f"{op}: arguments 'query_rope' and 'key_rope' must be given together (or both be None)")
    return optional(op, "query_rope", query_rope, dtype), optional(op, "key_rope", key_rope, dtype)


def lengths_pair(op: str, kv_arg: str, lens_q: Lengths, lens_kv: Lengths) -> tuple[Tensor, Tensor]:
    """``actual_seq_lengths_query`` and ``kv_arg`` as kernel inputs: None is the placeholder, a
    Python sequence becomes an int32 tensor, a tensor is passed as is. The rule itself (TND
    without lengths = one sequence; BSND takes none) is checked once, in ``infer_shape/seq_lengths_rules.h``;
    the values of Python lengths by :func:`check_lengths_pair` after it."""
    q = absent() if lens_q is None else cumulative_lengths(op, "actual_seq_lengths_query", lens_q)
    kv = absent() if lens_kv is None else cumulative_lengths(op, kv_arg, lens_kv)
    return q, kv


def check_lengths_pair(op: str, kv_arg: str, lens_q: Lengths, lens_kv: Lengths, query: Tensor, key: Tensor) -> None:
    """Values of Python lengths (``_checks.check_cumulative_values``): the last entries must be the
    token counts of query and key (their first dim). Call it after the shape rules, so a wrong
    rank is reported as such (a rank-0 query or key only skips the token-count check)."""
    check_cumulative_values(op, "actual_seq_lengths_query", lens_q, query.shape[0] if query.shape else None)
    check_cumulative_values(op, kv_arg, lens_kv, key.shape[0] if key.shape else None)
