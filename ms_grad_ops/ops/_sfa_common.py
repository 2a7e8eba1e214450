"""Argument handling shared by ``sparse_flash_attention`` and ``sparse_flash_attention_grad``."""
from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from mindspore import Tensor

from ._checks import check_tensor, cumulative_lengths

Lengths = Sequence[int] | np.ndarray | Tensor | None


@functools.cache
def _placeholder() -> Tensor:
    """The 1-element int32 tensor passed for the lengths in BSND (the kernel ignores them)."""
    return Tensor(np.zeros(1, np.int32))


def seq_lengths(op: str, arg: str, value: Lengths, layout: str, total: int | None) -> Tensor:
    """The int tensor passed to the kernel for ``actual_seq_lengths_*``.

    TND: required (see ``_checks.cumulative_lengths``). BSND: ignored (a placeholder is passed)."""
    if layout != "TND":
        return _placeholder()
    if value is None:
        raise ValueError(f"{op}: argument '{arg}' is required with layout \"TND\" (cumulative lengths, "
                         "last entry = number of tokens)")
    return cumulative_lengths(op, arg, value, total)


def rope_pair(op: str, query_rope: Tensor | None, key_rope: Tensor | None) -> bool:
    """True when both rope tensors are given, False when neither; ValueError otherwise."""
    if (query_rope is None) != (key_rope is None):
        raise ValueError(f"{op}: arguments 'query_rope' and 'key_rope' must be given together (or both None)")
    if query_rope is not None:
        check_tensor(op, "query_rope", query_rope)
        check_tensor(op, "key_rope", key_rope)
    return query_rope is not None
