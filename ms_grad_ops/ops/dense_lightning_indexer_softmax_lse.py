"""Functional ``dense_lightning_indexer_softmax_lse``: the lightning indexer's softmax statistics over each
query row's full visible key row (docs/contract.md section 4.3)."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .._checks import attributes, check_tensor, validate
from .._custom import primitive
from .._optional import check_lengths_pair, cmp_residual, lengths_pair
from .._specs import OP_SPECS

_OP = "dense_lightning_indexer_softmax_lse"
_INPUTS = OP_SPECS[_OP].inputs


def dense_lightning_indexer_softmax_lse(query_index: Tensor, key_index: Tensor, weights: Tensor,
                                        actual_seq_lengths_query: Sequence[int] | Tensor | None = None,
                                        actual_seq_lengths_key: Sequence[int] | Tensor | None = None,
                                        cmp_residual_k: Sequence[int] | Tensor | None = None, *,
                                        layout: str = "BSND", sparse_mode: int = 3, cmp_ratio: int = 1
                                        ) -> tuple[Tensor, Tensor]:
    """Per query row t, over its visible keys j: ``softmax_max_index[t] = max_j I_j`` and
    ``softmax_sum_index[t] = sum_j exp(I_j - softmax_max_index[t])``, with
    ``I_j = sum_g weights[g] * relu(query_index[g] . key_index[j])`` exactly as :func:`lightning_indexer`
    computes it (no scale: the weights carry it). CANN's ``DenseLightningIndexerSoftmaxLse``.

    Args:
        query_index: ``[T1, Nidx, Didx]`` (TND) or ``[B, S1, Nidx, Didx]`` (BSND); float16/bfloat16/float32.
        key_index: ``[T2, 1, Didx]`` or ``[B, S2, 1, Didx]``; the dtype of query_index.
        weights: ``[T1, Nidx]`` or ``[B, S1, Nidx]``; the dtype of query_index, or float32.
        actual_seq_lengths_query, actual_seq_lengths_key: docs/contract.md section 0.3 (TND cumulative,
            both or neither; BSND per batch, either alone).
        cmp_residual_k: compressed keys' residuals per batch (docs/contract.md section 9.1), int32/int64
            ``[B]`` or a sequence; None = 0.
        layout, sparse_mode, cmp_ratio: the attributes (domains, defaults, Ascend limits:
            docs/ops/dense_lightning_indexer_softmax_lse.md, from the table).

    Returns:
        ``(softmax_max_index, softmax_sum_index)``, float32 ``[1, T1]`` (TND) or ``[B, 1, S1]`` (BSND).
        A row without a visible key (and a BSND padding row) gets ``0`` / ``0`` (section 0.6). No
        gradient: the statistics are a constant of the dense KL loss.
    """
    query_index = check_tensor(_OP, "query_index", query_index)
    key_index = check_tensor(_OP, "key_index", key_index)
    lens_q, lens_k = lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
    tensors = (query_index, key_index, weights, lens_q, lens_k, cmp_residual(_OP, cmp_residual_k))
    attrs = attributes(_OP, layout=layout, sparse_mode=sparse_mode, cmp_ratio=cmp_ratio)
    validate(_OP, _INPUTS, tensors, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query_index,
                       key_index, attrs["layout"])
    return primitive(_OP, **attrs)(*tensors)
