"""``MoeTokenPermute`` and ``MoeTokenUnpermute`` on CPU: composites of ``Sort``, ``Gather`` and sums;
autodiff gives the gradients."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor, ops
from mindspore.ops import constexpr
from mindspore.ops import operations as P

from ._standin import PrimitiveStandIn, upcast


@constexpr
def _permute_plan(tokens_shape: tuple, indices_shape: tuple, num_out_tokens: int | None, padded_mode: bool) -> tuple:
    """(topk, number of permuted rows kept)."""
    op = "MoeTokenPermute"
    if padded_mode:
        raise ValueError(f"{op}: padded_mode=True is not supported (MindSpore supports only False)")
    if len(tokens_shape) != 2 or len(indices_shape) not in (1, 2) or indices_shape[0] != tokens_shape[0]:
        raise ValueError(f"{op}: needs tokens [T, H] and indices [T] or [T, topk]; got {tokens_shape} and "
                         f"{indices_shape}")
    topk = indices_shape[1] if len(indices_shape) == 2 else 1
    total = tokens_shape[0] * topk
    if num_out_tokens is None or num_out_tokens == 0:
        return topk, total
    kept = num_out_tokens if num_out_tokens > 0 else total + num_out_tokens  # a Python slice's stop
    return topk, min(max(kept, 0), total)


@ms.jit_class
class MoeTokenPermute(PrimitiveStandIn):
    """``MoeTokenPermute()(tokens, indices, num_out_tokens=None, padded_mode=False) ->
    (permuted_tokens, sorted_indices)``: the ``T * topk`` (token, expert) slots ordered by expert
    (a stable sort of the flattened ``indices``); ``permuted_tokens[r]`` is the token of the slot in
    row ``r`` (``[kept, H]``, ``tokens``' dtype; ``num_out_tokens`` != 0 keeps that many rows, a
    negative one counts from the end, as CANN documents); ``sorted_indices[s]`` (int32,
    ``[T * topk]``) is the row slot ``s`` went to."""

    def __init__(self) -> None:
        pass

    def __call__(self, tokens: Tensor, indices: Tensor, num_out_tokens: int | None = None,
                 padded_mode: bool = False) -> tuple[Tensor, Tensor]:
        topk, kept = _permute_plan(tokens.shape, indices.shape, num_out_tokens, padded_mode)
        _, order = P.Sort(-1, False)(indices.reshape(-1))  # slot of each row
        _, rank = P.Sort(-1, False)(order)  # row of each slot: the inverse permutation
        rows = ops.gather(upcast(tokens), order[:kept] // topk, 0)
        return rows.astype(tokens.dtype), rank.astype(ms.int32)


def moe_token_permute(tokens: Tensor, indices: Tensor, num_out_tokens: int | None = None,
                      padded_mode: bool = False) -> tuple[Tensor, Tensor]:
    """``mindspore.ops.moe_token_permute`` on :class:`MoeTokenPermute`."""
    return MoeTokenPermute()(tokens, indices, num_out_tokens, padded_mode)


@constexpr
def _unpermute_plan(permuted_shape: tuple, sorted_shape: tuple, probs_shape: tuple | None, padded_mode: bool) -> int:
    """topk."""
    op = "MoeTokenUnpermute"
    if padded_mode:
        raise ValueError(f"{op}: padded_mode=True is not supported (MindSpore supports only False)")
    if len(permuted_shape) != 2 or len(sorted_shape) != 1:
        raise ValueError(f"{op}: needs permuted_tokens [N, H] and sorted_indices [T * topk]; got {permuted_shape} and "
                         f"{sorted_shape}")
    if probs_shape is None:
        return 1
    if len(probs_shape) != 2 or probs_shape[0] * probs_shape[1] != sorted_shape[0]:
        raise ValueError(f"{op}: probs must be [T, topk] with T * topk = {sorted_shape[0]} (sorted_indices), "
                         f"got {probs_shape}")
    return probs_shape[1]


@ms.jit_class
class MoeTokenUnpermute(PrimitiveStandIn):
    """``MoeTokenUnpermute()(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
    restore_shape=None) -> [T, H]``: ``out[t] = sum_j probs[t, j] * permuted_tokens[sorted_indices[t *
    topk + j]]`` (``topk = probs.shape[1]``, 1 without ``probs``); slots whose row was dropped
    (``sorted_indices >= N``) add nothing. Computed in float32, returned in ``permuted_tokens``'
    dtype."""

    def __init__(self) -> None:
        pass

    def __call__(self, permuted_tokens: Tensor, sorted_indices: Tensor, probs: Tensor | None = None,
                 padded_mode: bool = False, restore_shape: tuple | None = None) -> Tensor:
        topk = _unpermute_plan(permuted_tokens.shape, sorted_indices.shape,
                               None if probs is None else probs.shape, padded_mode)
        n_rows, hidden = permuted_tokens.shape
        slots = sorted_indices.astype(ms.int32)
        kept = (slots < n_rows).reshape(-1, 1)
        rows = ops.gather(upcast(permuted_tokens), ops.minimum(slots, n_rows - 1), 0)
        rows = ops.select(ops.broadcast_to(kept, rows.shape), rows, ops.zeros_like(rows))
        rows = rows.reshape(-1, topk, hidden)
        if probs is not None:
            rows = rows * upcast(probs).reshape(-1, topk, 1)
        return rows.sum(1).astype(permuted_tokens.dtype)


def moe_token_unpermute(permuted_tokens: Tensor, sorted_indices: Tensor, probs: Tensor | None = None,
                        padded_mode: bool = False, restore_shape: tuple | None = None) -> Tensor:
    """``mindspore.ops.moe_token_unpermute`` on :class:`MoeTokenUnpermute`."""
    return MoeTokenUnpermute()(permuted_tokens, sorted_indices, probs, padded_mode, restore_shape)
