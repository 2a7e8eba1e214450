"""Functional ``lightning_indexer_grad``: the gradient of ``lightning_indexer``'s ``sparse_values``
with respect to the indexer tensors (docs/contract.md section 5)."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .._checks import attributes, check_tensor, validate
from .._custom import primitive
from .._optional import check_lengths_pair, cmp_residual, lengths_pair
from .._specs import OP_SPECS

_OP = "lightning_indexer_grad"
_INPUTS = OP_SPECS[_OP].inputs


def lightning_indexer_grad(query_index: Tensor, key_index: Tensor, weights: Tensor, sparse_indices: Tensor,
                           d_values: Tensor, actual_seq_lengths_query: Sequence[int] | Tensor | None = None,
                           actual_seq_lengths_key: Sequence[int] | Tensor | None = None,
                           cmp_residual_k: Sequence[int] | Tensor | None = None, *, layout: str = "BSND",
                           sparse_mode: int = 3, cmp_ratio: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """Backward of the selected index scores ``sparse_values[t, 0, k] = I[t, j]``,
    ``I[t, j] = sum_g weights[t, g] * relu(query_index[t, g] . key_index[j])`` (float32, no scale),
    ``j = sparse_indices[t, 0, k]``, for the incoming gradient ``d_values``. With
    ``Sx[g] = query_index[t, g] . key_index[j]`` and ``dI = d_values[t, 0, k]``, over every slot:

    - ``d_weights[t, g] += dI * relu(Sx[g])``
    - ``d_query_index[t, g] += dI * weights[t, g] * [Sx[g] > 0] * key_index[j]``
    - ``d_key_index[j] += dI * weights[t, g] * [Sx[g] > 0] * query_index[t, g]`` (summed over g, t, k)

    A ``-1`` slot and a key hidden by ``sparse_mode`` are skipped (their ``d_values`` entry is never
    read: a NaN there does not propagate); duplicate indices each count. The key gradient is
    bitwise the same for any thread count.

    Args:
        query_index: ``[T1, Nidx, Didx]`` (TND) or ``[B, S1, Nidx, Didx]`` (BSND); float16/bfloat16/float32.
        key_index: ``[T2, 1, Didx]`` or ``[B, S2, 1, Didx]``; the dtype of query_index.
        weights: ``[T1, Nidx]`` or ``[B, S1, Nidx]``; the dtype of query_index, or float32.
        sparse_indices: int32 ``[T1, 1, K]`` / ``[B, S1, 1, K]``, key indices local to the batch, ``-1`` = unused.
        d_values: float32, the shape of sparse_indices.
        actual_seq_lengths_query, actual_seq_lengths_key: int32/int64 tensors or sequences
            (docs/contract.md section 0.3). TND: cumulative (``[3, 5]`` is written ``[3, 8]``), both
            or neither; None = one sequence of T1 queries and T2 keys. BSND: per batch, the valid
            rows of each padded batch row, either alone; padding rows are never read and get zero
            gradients.
        cmp_residual_k: compressed keys' residuals per batch (docs/contract.md section 9.1), as the forward's.
        layout, sparse_mode, cmp_ratio: the attributes (domains, defaults, meanings:
            docs/ops/lightning_indexer_grad.md, from the table), as the forward's.

    Returns:
        ``(d_query_index, d_key_index, d_weights)``, shaped and typed like query_index, key_index and
        weights. An index ``< -1`` or ``>= S2_b`` raises RuntimeError naming the op (never read out
        of bounds). This op has no gradient itself.
    """
    query_index = check_tensor(_OP, "query_index", query_index)
    key_index = check_tensor(_OP, "key_index", key_index)
    lens_q, lens_k = lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
    tensors = (query_index, key_index, weights, sparse_indices, d_values, lens_q, lens_k,
               cmp_residual(_OP, cmp_residual_k))
    attrs = attributes(_OP, layout=layout, sparse_mode=sparse_mode, cmp_ratio=cmp_ratio)
    validate(_OP, _INPUTS, tensors, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query_index,
                       key_index, attrs["layout"])
    return primitive(_OP, **attrs)(*tensors)
