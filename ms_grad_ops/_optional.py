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

from ._checks import check_batch_lengths, check_cumulative_values, check_tensor, lengths_input

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
        # The one given checked first: a number in query_rope's slot (MindSpore's positional
        # scale_value) is a TypeError naming it, not a missing key_rope.
        given = "key_rope" if query_rope is None else "query_rope"
        check_tensor(op, given, key_rope if query_rope is None else query_rope)
        raise ValueError(f"{op}: arguments 'query_rope' and 'key_rope' must be given together (or both be None)")
    return optional(op, "query_rope", query_rope, dtype), optional(op, "key_rope", key_rope, dtype)


def lengths_pair(op: str, kv_arg: str, lens_q: Lengths, lens_kv: Lengths) -> tuple[Tensor, Tensor]:
    """``actual_seq_lengths_query`` and ``kv_arg`` as kernel inputs: None is the placeholder, a
    Python sequence becomes an int32 tensor, a tensor is passed as is. The rule itself (cumulative
    in TND, both or neither; per batch in BSND) is checked once, in ``infer_shape/seq_lengths_rules.h``;
    the values of Python lengths by :func:`check_lengths_pair` after it."""
    q = absent() if lens_q is None else lengths_input(op, "actual_seq_lengths_query", lens_q)
    kv = absent() if lens_kv is None else lengths_input(op, kv_arg, lens_kv)
    return q, kv


def cmp_residual(op: str, value: Lengths) -> Tensor:
    """``cmp_residual_k`` (compressed keys, docs/contract.md section 9.1) as a kernel input: None is the
    placeholder (all residuals 0), a Python sequence an int32 tensor, a tensor passed as is. Its count
    is the shape rules'; its values (``[0, cmp_ratio)``) the kernel's."""
    return absent() if value is None else lengths_input(op, "cmp_residual_k", value)


def check_lengths_pair(op: str, kv_arg: str, lens_q: Lengths, lens_kv: Lengths, query: Tensor, key: Tensor,
                       layout: str) -> None:
    """Values of Python lengths: TND, cumulative, the last entries the token counts of query and key
    (their first dim, ``_checks.check_cumulative_values``); BSND, per batch, each in [0, S] of the
    padded rows (query's and key's second dim, ``_checks.check_batch_lengths``). Call it after the
    shape rules, so a wrong rank is reported as such (an unknown dim only skips its check)."""
    if (lens_q is None or isinstance(lens_q, Tensor)) and (lens_kv is None or isinstance(lens_kv, Tensor)):
        return  # tensor values are the kernel's to check
    if layout == "BSND":
        check_batch_lengths(op, "actual_seq_lengths_query", lens_q, _dim(query, 1))
        check_batch_lengths(op, kv_arg, lens_kv, _dim(key, 1))
        return
    check_cumulative_values(op, "actual_seq_lengths_query", lens_q, _dim(query, 0))
    check_cumulative_values(op, kv_arg, lens_kv, _dim(key, 0))


def _dim(x: Tensor, i: int) -> int | None:
    """Dim ``i`` of ``x``, None when ``x`` has no such dim or it is not known."""
    d = x.shape[i] if len(x.shape) > i else None
    return d if d is not None and d >= 0 else None
