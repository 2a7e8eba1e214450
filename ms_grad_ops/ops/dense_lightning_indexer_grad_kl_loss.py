"""Functional ``dense_lightning_indexer_grad_kl_loss``: the lightning indexer's KL loss against the dense main
attention and its gradients, over every visible key, in one fused pass (docs/contract.md section 4.4)."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .._checks import attributes, check_tensor, validate
from .._custom import primitive
from .._optional import check_lengths_pair, cmp_residual, lengths_pair, rope_pair
from .._specs import OP_SPECS

_OP = "dense_lightning_indexer_grad_kl_loss"
_INPUTS = OP_SPECS[_OP].inputs


def dense_lightning_indexer_grad_kl_loss(
        query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor, softmax_max: Tensor,
        softmax_sum: Tensor, softmax_max_index: Tensor, softmax_sum_index: Tensor, query_rope: Tensor | None = None,
        key_rope: Tensor | None = None, actual_seq_lengths_query: Sequence[int] | Tensor | None = None,
        actual_seq_lengths_key: Sequence[int] | Tensor | None = None,
        cmp_residual_k: Sequence[int] | Tensor | None = None, *, scale_value: float, layout: str = "BSND",
        sparse_mode: int = 3, deterministic: bool = False, cmp_ratio: int = 1) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per query row and each of its visible keys j (no indices): teacher
    ``p_j = (1/N1) sum_h exp(scale*qf_h . kf_j - softmax_max_h) / softmax_sum_h`` (qf, kf = the
    rope-concatenated query/key, kf of key head ``h // G``), ``I_j = sum_g w_g relu(qi_g . ki_j)``,
    ``y_j = exp(I_j - softmax_max_index) / softmax_sum_index``,
    ``loss = sum_t sum_j p_j (ln max(p_j,1e-8) - ln max(y_j,1e-8))`` (a raw sum, as CANN returns it),
    and the gradients of ``dI = y - p`` for d(loss) = 1. CANN's ``DenseLightningIndexerGradKLLoss``;
    :func:`sparse_lightning_indexer_grad_kl_loss` with every visible key selected.

    Args:
        query: ``[T1, N1, D]`` (TND) / ``[B, S1, N1, D]`` (BSND); float16/bfloat16/float32 (dtype X).
        key: ``[T2, N2, D]`` / ``[B, S2, N2, D]``, N2 = 1 (MLA-absorbed MQA, as sparse_flash_attention)
            or N2 = N1 (plain MHA, CANN's); X.
        query_index: ``[T1, Nidx, Didx]`` / ``[B, S1, Nidx, Didx]``; X.
        key_index: ``[T2, 1, Didx]`` / ``[B, S2, 1, Didx]``; X.
        weights: ``[T1, Nidx]`` / ``[B, S1, Nidx]``; X or float32.
        softmax_max, softmax_sum: float32 ``[N2, T1, G]`` / ``[B, N2, S1, G]`` (G = N1 / N2) of the dense main
            attention over the same visible keys (sparse_flash_attention's layout).
        softmax_max_index, softmax_sum_index: float32 ``[1, T1]`` / ``[B, 1, S1]``, from
            :func:`dense_lightning_indexer_softmax_lse`.
        query_rope, key_rope: ``[T1, N1, Dr]`` and ``[T2, N2, Dr]`` (X), both or neither.
        actual_seq_lengths_query/key: docs/contract.md section 0.3: TND cumulative, both or neither;
            BSND per batch, either alone (padding rows add nothing and get zero gradients).
        cmp_residual_k: compressed keys' residuals per batch (docs/contract.md section 9.1), int32/int64
            ``[B]`` or a sequence; None = 0.
        scale_value, layout, sparse_mode, deterministic, cmp_ratio: the attributes (domains, defaults, meanings:
            docs/ops/dense_lightning_indexer_grad_kl_loss.md, from the table); scale_value is the main
            attention's logit scale.

    Returns:
        ``(d_query_index, d_key_index, d_weights, loss)``: gradients shaped and typed like their inputs,
        loss float32 ``[1]`` (summed over tokens, not normalised; ``nn.DenseIndexerKLLoss`` says how it
        is scaled for training).
    """
    query = check_tensor(_OP, "query", query)
    key = check_tensor(_OP, "key", key)
    query_rope, key_rope = rope_pair(_OP, query_rope, key_rope, query.dtype)
    lens_q, lens_k = lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
    tensors = (query, key, query_index, key_index, weights, softmax_max, softmax_sum, softmax_max_index,
               softmax_sum_index, query_rope, key_rope, lens_q, lens_k, cmp_residual(_OP, cmp_residual_k))
    attrs = attributes(_OP, scale_value=scale_value, layout=layout, sparse_mode=sparse_mode,
                       deterministic=deterministic, cmp_ratio=cmp_ratio)
    validate(_OP, _INPUTS, tensors, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query, key,
                       attrs["layout"])
    return primitive(_OP, **attrs)(*tensors)
