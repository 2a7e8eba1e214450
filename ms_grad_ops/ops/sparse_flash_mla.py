"""Functional ``sparse_flash_mla``: DeepSeek-V4's sparse attention over original and compressed keys
(CANN's SparseFlashMla, docs/contract.md section 8)."""
from __future__ import annotations

from collections.abc import Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor

from .._checks import attributes, check_tensor, lengths_input, validate
from .._custom import primitive
from .._optional import absent, optional
from .._specs import OP_SPECS

_OP = "sparse_flash_mla"
_INPUTS = OP_SPECS[_OP].inputs
IntInput = Sequence[int] | np.ndarray | Tensor | None
# The int32 inputs after the indices: lengths per source and the compression residual.
LENGTHS = ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_ori_kv", "seqused_cmp_kv",
           "cmp_residual_kv")


def smla_inputs(op: str, query: Tensor, ori_kv: Tensor, cmp_kv: Tensor | None, ori_sparse_indices: Tensor | None,
                cmp_sparse_indices: Tensor | None, lengths: tuple[IntInput, ...], sinks: Tensor | None
                ) -> tuple[Tensor, ...]:
    """The thirteen kernel inputs the forward and the grad share, in the forward's order: absent ones as
    placeholders, Python lengths as int32 tensors (their values are checked by the kernel)."""
    query = check_tensor(op, "query", query)
    ori_kv = check_tensor(op, "ori_kv", ori_kv)
    cmp_kv = optional(op, "cmp_kv", cmp_kv, query.dtype)
    ori_idx = optional(op, "ori_sparse_indices", ori_sparse_indices, ms.int32)
    cmp_idx = optional(op, "cmp_sparse_indices", cmp_sparse_indices, ms.int32)
    lens = tuple(absent() if v is None else lengths_input(op, name, v) for name, v in zip(LENGTHS, lengths))
    return (query, ori_kv, cmp_kv, ori_idx, cmp_idx, *lens, optional(op, "sinks", sinks, ms.float32))


def sparse_flash_mla(query: Tensor, ori_kv: Tensor, cmp_kv: Tensor | None = None,
                     ori_sparse_indices: Tensor | None = None, cmp_sparse_indices: Tensor | None = None,
                     cu_seqlens_q: IntInput = None, cu_seqlens_ori_kv: IntInput = None,
                     cu_seqlens_cmp_kv: IntInput = None, seqused_q: IntInput = None, seqused_ori_kv: IntInput = None,
                     seqused_cmp_kv: IntInput = None, cmp_residual_kv: IntInput = None, sinks: Tensor | None = None,
                     *, softmax_scale: float = 1.0, cmp_ratio: int = 1, ori_mask_mode: int = 4,
                     cmp_mask_mode: int = 3, ori_win_left: int = 127, ori_win_right: int = 0,
                     layout: str = "BSND") -> tuple[Tensor, Tensor]:
    """One shared-KV softmax with a sink over the original tokens and the compressed entries of each query row.

    For query row t, head h and its keys j (the band of ``ori_kv``, or the ``ori_sparse_indices`` it selects,
    masked by ``ori_mask_mode``; then the compressed entries below the causal limit ``floor((L - S1 + t + 1) /
    cmp_ratio)``, all of them (HCA) or those ``cmp_sparse_indices`` select (CSA)):
    ``S_j = softmax_scale * q[t, h] . kv_j``; ``P_j = exp(S_j - lse) `` with the sink ``sinks[h]`` (not scaled,
    value zero) in the normaliser; ``attn_out = sum_j P_j kv_j``. Differentiable (``ms.grad``, PyNative and
    GRAPH) with respect to query, ori_kv, cmp_kv and sinks: the backward is one ``sparse_flash_mla_grad`` call.

    Args:
        query: ``[T1, N1, D]`` (TND) or ``[B, S1, N1, D]`` (BSND); float16/bfloat16/float32.
        ori_kv: the original tokens, key and value at once, ``[T2, N2, D]`` / ``[B, S2, N2, D]``, query's dtype.
        cmp_kv: the compressed entries ``[T3, N2, D]`` / ``[B, S3, N2, D]``, or None (SWA).
        ori_sparse_indices: optional int32 ``[T1, N2, K1]`` / ``[B, S1, N2, K1]``: original tokens selected
            instead of the band (the mask still applies); -1 = unused slot.
        cmp_sparse_indices: optional int32 ``[T1, N2, K]`` / ``[B, S1, N2, K]``: the compressed entries each row
            attends (CSA, the indexer's top-k); None with cmp_kv: every visible entry (HCA). -1 = unused slot.
        cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv: TND, int32 ``[B + 1]`` cumulative lengths with the
            leading 0 (CANN's); None: one sequence.
        seqused_q, seqused_ori_kv, seqused_cmp_kv: int32 ``[B]``, the rows of each batch used (the rest are
            padding: never read, zero output); None: all.
        cmp_residual_kv: int32 ``[B]``, the original length mod cmp_ratio: L = len(cmp) * cmp_ratio + residual;
            None: L = the batch's original length (ori_kv holds the whole sequence).
        sinks: optional float32 ``[N1]``, each head's sink logit (DeepSeek-V4's ``attn_sink``).
        softmax_scale, cmp_ratio, ori_mask_mode, cmp_mask_mode, ori_win_left, ori_win_right, layout: the
            attributes (domains, defaults, Ascend limits: docs/ops/sparse_flash_mla.md, from the table).

    Returns:
        ``(attn_out, softmax_lse)``: attn_out shaped/typed like query; float32 softmax_lse ``[N2, T1, G]`` /
        ``[B, N2, S1, G]`` (G = N1 / N2) **including the sink** (CANN's convention; FlashMLA's excludes it).
        A row without keys: out 0, lse the sink's logit (-inf without sinks); a padding row: out 0, lse 0.
    """
    inputs = smla_inputs(_OP, query, ori_kv, cmp_kv, ori_sparse_indices, cmp_sparse_indices,
                         (cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_ori_kv,
                          seqused_cmp_kv, cmp_residual_kv), sinks)
    attrs = attributes(_OP, softmax_scale=softmax_scale, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode,
                       cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left, ori_win_right=ori_win_right,
                       layout=layout)
    validate(_OP, _INPUTS, inputs, attrs)
    return primitive(_OP, **attrs)(*inputs)
