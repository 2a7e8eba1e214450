"""Functional ``sparse_lightning_indexer_grad_kl_loss``: the lightning indexer's KL loss against the
main attention and its gradients, in one fused pass (docs/contract.md section 4.2)."""
from __future__ import annotations

from collections.abc import Sequence

import mindspore as ms
from mindspore import Tensor

from .._checks import attributes, check_tensor, validate
from .._custom import primitive
from .._optional import check_lengths_pair, cmp_residual, lengths_pair, optional, rope_pair
from .._specs import OP_SPECS

_OP = "sparse_lightning_indexer_grad_kl_loss"
_INPUTS = OP_SPECS[_OP].inputs


def sparse_lightning_indexer_grad_kl_loss(
        query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor, sparse_indices: Tensor,
        softmax_max: Tensor, softmax_sum: Tensor, query_rope: Tensor | None = None, key_rope: Tensor | None = None,
        actual_seq_lengths_query: Sequence[int] | Tensor | None = None,
        actual_seq_lengths_key: Sequence[int] | Tensor | None = None, sinks: Tensor | None = None,
        cmp_residual_k: Sequence[int] | Tensor | None = None, *, scale_value: float, layout: str = "BSND",
        sparse_mode: int = 3, deterministic: bool = False, cmp_ratio: int = 1) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per query row and its visible selected keys j (``-1`` slots and causally hidden keys skipped):
    teacher ``p_j = (1/N1) sum_h exp(scale*qf_h . kf_j - softmax_max_h) / softmax_sum_h`` (qf, kf =
    the rope-concatenated query/key; not renormalised; with ``sinks``, the statistics include the
    sinks and ``1/N1`` becomes ``1/(N1 - sum_h P_sink,h)``, so p sums to 1 over the row's keys),
    ``I_j = sum_g w_g relu(qi_g . ki_j)``,
    ``y = softmax(I)``, ``loss = sum_t sum_j p_j (ln max(p_j,1e-8) - ln max(y_j,1e-8))``, and the
    gradients of ``dI = y - p`` for d(loss) = 1.

    Args:
        query: ``[T1, N1, D]`` (TND) / ``[B, S1, N1, D]`` (BSND); float16/bfloat16/float32 (dtype X).
        key: ``[T2, 1, D]`` / ``[B, S2, 1, D]``; X.
        query_index: ``[T1, Nidx, Didx]`` / ``[B, S1, Nidx, Didx]``; X.
        key_index: ``[T2, 1, Didx]`` / ``[B, S2, 1, Didx]``; X.
        weights: ``[T1, Nidx]`` / ``[B, S1, Nidx]``; X or float32.
        sparse_indices: int32 ``[T1, 1, K]`` / ``[B, S1, 1, K]``, token indices local to the batch, -1 = unused.
        softmax_max, softmax_sum: float32 ``[1, T1, N1]`` / ``[B, 1, S1, N1]`` of the main attention.
        query_rope, key_rope: ``[T1, N1, Dr]`` and ``[T2, 1, Dr]`` (X), both or neither.
        actual_seq_lengths_query/key: docs/contract.md section 0.3: TND cumulative, both or neither
            (None = one sequence of T1 queries and T2 keys); BSND per batch, either alone (padding
            rows are never read, add nothing and get zero gradients).
        sinks: optional float32 ``[N1]``, the main attention's sinks (those its statistics include).
        cmp_residual_k: compressed keys' residuals per batch (docs/contract.md section 9.1), int32/int64
            ``[B]`` or a sequence; None = 0.
        scale_value, layout, sparse_mode, deterministic, cmp_ratio: the attributes (domains, defaults, meanings:
            docs/ops/sparse_lightning_indexer_grad_kl_loss.md, from the table); scale_value is the
            main attention's logit scale.

    Returns:
        ``(d_query_index, d_key_index, d_weights, loss)``: gradients shaped and typed like their
        inputs, loss float32 ``[1]`` (summed over tokens). Out-of-range sparse indices raise
        RuntimeError naming the op.
    """
    query = check_tensor(_OP, "query", query)
    key = check_tensor(_OP, "key", key)
    query_rope, key_rope = rope_pair(_OP, query_rope, key_rope, query.dtype)
    lens_q, lens_k = lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
    sinks = optional(_OP, "sinks", sinks, ms.float32)
    tensors = (query, key, query_index, key_index, weights, sparse_indices, softmax_max, softmax_sum, query_rope,
               key_rope, lens_q, lens_k, sinks, cmp_residual(_OP, cmp_residual_k))
    attrs = attributes(_OP, scale_value=scale_value, layout=layout, sparse_mode=sparse_mode,
                       deterministic=deterministic, cmp_ratio=cmp_ratio)
    validate(_OP, _INPUTS, tensors, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query, key,
                       attrs["layout"])
    return primitive(_OP, **attrs)(*tensors)
