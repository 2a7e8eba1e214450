"""Functional ``sparse_lightning_indexer_kl_loss_grad``: DeepSeek-V4's indexer KL gradient against a
target given per selected slot (CANN's ``SparseLightningIndexerKLLossGrad``, docs/contract.md section 9.2)."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .._checks import attributes, check_tensor, validate
from .._custom import primitive
from .._optional import check_lengths_pair, cmp_residual, lengths_pair
from .._specs import OP_SPECS

_OP = "sparse_lightning_indexer_kl_loss_grad"
_INPUTS = OP_SPECS[_OP].inputs


def sparse_lightning_indexer_kl_loss_grad(
        query_index: Tensor, key_index: Tensor, weights: Tensor, sparse_indices: Tensor,
        attn_softmax_l1_norm: Tensor, actual_seq_lengths_query: Sequence[int] | Tensor | None = None,
        actual_seq_lengths_key: Sequence[int] | Tensor | None = None,
        cmp_residual_k: Sequence[int] | Tensor | None = None, *, layout: str = "BSND", sparse_mode: int = 3,
        cmp_ratio: int = 1) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Per query row, over its valid slots s (index >= 0 and visible under ``sparse_mode`` and
    ``cmp_ratio``; ``-1`` and hidden slots are skipped and their target never read):
    ``I_s = sum_g w_g relu(qi_g . ki_{j_s})``, ``y = softmax(I)``, ``dI_s = y_s * sum(p) - p_s`` with
    ``p = attn_softmax_l1_norm`` (the exact gradient of the loss below for a target of any sum), and
    the gradients of I for it (d(loss) = 1).

    Args:
        query_index: ``[T1, Nidx, Didx]`` (TND) / ``[B, S1, Nidx, Didx]`` (BSND); float16/bfloat16/float32 (X).
        key_index: ``[T2, 1, Didx]`` / ``[B, S2, 1, Didx]`` (the compressed indexer keys); X.
        weights: ``[T1, Nidx]`` / ``[B, S1, Nidx]``; X or float32.
        sparse_indices: int32 ``[T1, 1, K]`` / ``[B, S1, 1, K]``, key indices local to the batch, -1 = unused.
        attn_softmax_l1_norm: float32, shaped like sparse_indices: the target per slot (the
            ``cmp_softmax_l1_norm`` of the main attention's backward).
        actual_seq_lengths_query/key: docs/contract.md section 0.3: TND cumulative (no leading 0),
            both or neither (None = one sequence); BSND per batch, either alone.
        cmp_residual_k: int32/int64 ``[B]`` (one per sequence; a Python sequence is accepted): the
            original tokens of each batch's last incomplete block, in ``[0, cmp_ratio)``; None = 0.
        layout, sparse_mode, cmp_ratio: the attributes (docs/ops/sparse_lightning_indexer_kl_loss_grad.md).

    Returns:
        ``(d_query_index, d_key_index, d_weights, softmax_out, loss)``: gradients shaped and typed like
        their inputs, ``softmax_out`` float32 like sparse_indices (y per slot, 0 in unused slots), and
        ``loss`` float32 ``[1]``: ``sum_rows sum_s p_s (ln max(p_s, 1e-8) - ln max(y_s, 1e-8))`` (no
        mean; CANN's op returns no loss). Out-of-range indices or residuals raise RuntimeError
        naming the op.
    """
    query_index = check_tensor(_OP, "query_index", query_index)
    key_index = check_tensor(_OP, "key_index", key_index)
    lens_q, lens_k = lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
    residual = cmp_residual(_OP, cmp_residual_k)
    tensors = (query_index, key_index, weights, sparse_indices, attn_softmax_l1_norm, lens_q, lens_k, residual)
    attrs = attributes(_OP, layout=layout, sparse_mode=sparse_mode, cmp_ratio=cmp_ratio)
    validate(_OP, _INPUTS, tensors, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query_index,
                       key_index, attrs["layout"])
    return primitive(_OP, **attrs)(*tensors)
