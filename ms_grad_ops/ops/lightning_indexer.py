"""Functional ``lightning_indexer``: top-k key selection by the lightning indexer score
(docs/contract.md section 4.1)."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .._checks import attributes, check_tensor, validate
from .._custom import primitive
from .._optional import check_lengths_pair, cmp_residual, lengths_pair
from .._specs import OP_SPECS

_OP = "lightning_indexer"
_INPUTS = OP_SPECS[_OP].inputs


def lightning_indexer(query_index: Tensor, key_index: Tensor, weights: Tensor,
                      actual_seq_lengths_query: Sequence[int] | Tensor | None = None,
                      actual_seq_lengths_key: Sequence[int] | Tensor | None = None,
                      cmp_residual_k: Sequence[int] | Tensor | None = None, *, sparse_count: int = 2048,
                      layout: str = "BSND", sparse_mode: int = 3, cmp_ratio: int = 1) -> tuple[Tensor, Tensor]:
    """Selects, for every query row, the ``sparse_count`` visible keys with the highest
    ``I_j = sum_g weights[g] * relu(query_index[g] . key_index[j])`` (no scale).

    Args:
        query_index: ``[T1, Nidx, Didx]`` (TND) or ``[B, S1, Nidx, Didx]`` (BSND); float16/bfloat16/float32.
        key_index: ``[T2, 1, Didx]`` or ``[B, S2, 1, Didx]``; the dtype of query_index.
        weights: ``[T1, Nidx]`` or ``[B, S1, Nidx]``; the dtype of query_index, or float32.
        actual_seq_lengths_query, actual_seq_lengths_key: int32/int64 tensors or sequences
            (docs/contract.md section 0.3). TND: cumulative (``[3, 5]`` is written ``[3, 8]``), both
            or neither; None = one sequence of T1 queries and T2 keys. BSND: per batch, the valid
            rows of each padded batch row, either alone; a padding row selects nothing (-1 / -inf).
        cmp_residual_k: int32/int64 ``[B]`` or a sequence, for compressed keys (docs/contract.md section
            8.1): the original tokens of each batch's last incomplete block, in ``[0, cmp_ratio)``; None = 0.
        sparse_count, layout, sparse_mode, cmp_ratio: the attributes, their domains, defaults and backend limits
            as docs/ops/lightning_indexer.md lists them (from the table). sparse_count is K, and
            T1 * K must also stay int32-indexable (T1 = B * S1 in BSND): both outputs are allocated
            before the kernel runs, so a larger K is a ValueError naming the op and sparse_count (in
            GRAPH mode at compile, or when a dynamic T1 becomes known). K above a row's visible keys
            is valid (-1 padding): to select every visible key pass the longest key length.
            sparse_mode 3 (rightDownCausal): local query s1 sees keys ``s2 <= s1 + S2_b - S1_b``; with
            ``cmp_ratio`` r the keys are compressed and s1 sees
            ``j < floor((S2_b * r + residual - S1_b + s1 + 1) / r)``.

    Returns:
        ``(sparse_indices, sparse_values)``, ``[T1, 1, K]`` / ``[B, S1, 1, K]``: int32 key indices local
        to the batch in descending score order (ties to the lower index), and their float32 scores
        (the float32 arithmetic of the kernel). Slots beyond the visible key count hold ``-1`` and
        ``-inf``. NaN scores rank below every number. ``sparse_values`` is differentiable with
        respect to query_index, key_index and weights (bprop: :func:`lightning_indexer_grad`; ``-1``
        slots get none); the indices are a selection and carry no gradient.
    """
    query_index = check_tensor(_OP, "query_index", query_index)
    key_index = check_tensor(_OP, "key_index", key_index)
    lens_q, lens_k = lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
    tensors = (query_index, key_index, weights, lens_q, lens_k, cmp_residual(_OP, cmp_residual_k))
    attrs = attributes(_OP, sparse_count=sparse_count, layout=layout, sparse_mode=sparse_mode, cmp_ratio=cmp_ratio)
    validate(_OP, _INPUTS, tensors, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query_index,
                       key_index, attrs["layout"])
    return primitive(_OP, **attrs)(*tensors)
