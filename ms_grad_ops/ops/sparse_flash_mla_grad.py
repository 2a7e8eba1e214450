"""Functional ``sparse_flash_mla_grad``: the backward of ``sparse_flash_mla`` (CANN's SparseFlashMlaGrad,
docs/contract.md section 8)."""
from __future__ import annotations

from mindspore import Tensor

from .._checks import attributes, validate
from .._custom import primitive
from .._specs import OP_SPECS
from .sparse_flash_mla import IntInput, smla_inputs

_OP = "sparse_flash_mla_grad"
_INPUTS = OP_SPECS[_OP].inputs


def sparse_flash_mla_grad(query: Tensor, d_out: Tensor, out: Tensor, softmax_lse: Tensor, ori_kv: Tensor,
                          cmp_kv: Tensor | None = None, ori_sparse_indices: Tensor | None = None,
                          cmp_sparse_indices: Tensor | None = None, cu_seqlens_q: IntInput = None,
                          cu_seqlens_ori_kv: IntInput = None, cu_seqlens_cmp_kv: IntInput = None,
                          seqused_q: IntInput = None, seqused_ori_kv: IntInput = None,
                          seqused_cmp_kv: IntInput = None, cmp_residual_kv: IntInput = None,
                          sinks: Tensor | None = None, *, softmax_scale: float = 1.0, cmp_ratio: int = 1,
                          ori_mask_mode: int = 4, cmp_mask_mode: int = 3, ori_win_left: int = 127,
                          ori_win_right: int = 0, layout: str = "BSND") -> tuple[Tensor | None, ...]:
    """Gradients of ``sparse_flash_mla`` and the softmax L1 norms of the index slots (the indexer's target).

    Args:
        query, ori_kv, cmp_kv, the indices, lengths, sinks and attributes: as in ``sparse_flash_mla``.
        d_out, out: ``[T1, N1, D]`` / ``[B, S1, N1, D]``, query's dtype (out: the forward's attn_out).
        softmax_lse: the forward's float32 softmax_lse (with the same sinks, which it includes).

    Returns:
        ``(d_query, d_ori_kv, d_cmp_kv, d_sinks, ori_softmax_l1_norm, cmp_softmax_l1_norm)``: the gradients
        shaped/typed like their inputs (d_ori_kv and d_cmp_kv each one gradient of the shared key and value;
        d_cmp_kv None without cmp_kv; d_sinks float32 ``[N1]``, ``-sum over rows of P_sink * (d_out . out)``,
        None without sinks); the L1 norms float32, shaped like ori/cmp_sparse_indices (None without them):
        per slot the head mean ``sum_h P[h, slot] / G`` of the attention probabilities (0 for a -1 or masked
        slot), so a row sums to less than 1 where the band and the sink take the rest.
    """
    q, ori, cmp, ori_idx, cmp_idx, *rest = smla_inputs(
        _OP, query, ori_kv, cmp_kv, ori_sparse_indices, cmp_sparse_indices,
        (cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv, seqused_cmp_kv,
         cmp_residual_kv), sinks)
    inputs = (q, d_out, out, softmax_lse, ori, cmp, ori_idx, cmp_idx, *rest)
    attrs = attributes(_OP, softmax_scale=softmax_scale, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
                       cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left, ori_win_right=ori_win_right,
                       layout=layout)
    validate(_OP, _INPUTS, inputs, attrs)
    d_query, d_ori_kv, d_cmp_kv, d_sinks, ori_l1, cmp_l1 = primitive(_OP, **attrs)(*inputs)
    return (d_query, d_ori_kv, d_cmp_kv if cmp_kv is not None else None, d_sinks if sinks is not None else None,
            ori_l1 if ori_sparse_indices is not None else None, cmp_l1 if cmp_sparse_indices is not None else None)
