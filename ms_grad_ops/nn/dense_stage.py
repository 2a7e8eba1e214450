"""``DenseStage``: the kernels of ``nn.DSAttention``'s dense warm-up (DeepSeek-V3.2's stage 1): the main attention
over every causal key and the indexer's KL loss through the dense pair, without the indexer's top-k."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor
from mindspore import ops as msops

from .. import ops
from ._amp import KernelCell
from .dense_indexer_kl_loss import DenseIndexerKLLoss
from .sparse_flash_attention import SparseFlashAttention


def causal_indices(positions: Tensor, lead: tuple, width: int) -> Tensor:
    """int32 ``lead + (1, width)``: row t holds its causal keys ``0 .. positions[t]`` in order, then ``-1``
    (``positions`` int32 ``[N]``, each token's position in its own sequence; ``width`` >= the longest sequence)."""
    keys = msops.arange(width).astype(ms.int32).reshape(1, width)
    rows = msops.where(keys <= positions.reshape(-1, 1), keys, msops.full_like(keys, -1))
    return rows.reshape(lead + (1, width))


class DenseStage(KernelCell):
    """``construct(q_lat, q_pe, latent, k_pe, q_idx, k_idx, weights, lengths, positions, lead, width)
    -> (o, indexer_loss, indices)``: ``SparseStage``'s inputs and outputs (self-attention: the queries are the
    keys), for the dense warm-up.

    - main attention: ``nn.SparseFlashAttention`` over every causal key, its indices built directly
      (``causal_indices``, ``width`` slots per row). This index tensor remains (``[T, 1, width]`` int32): CANN's
      warm-up uses a dense FlashAttention there, and MindSpore 2.10's CPU backend has no FlashAttentionScore;
    - indexer statistics: ``ops.dense_lightning_indexer_softmax_lse`` (no top-k, no ``S x S`` indexer values);
    - ``indexer_loss``: ``nn.DenseIndexerKLLoss`` (``dense_lightning_indexer_grad_kl_loss``), the same raw sum
      as ``nn.IndexerKLLoss`` at top-k = S.
    """

    def __init__(self, scale: float, layout: str, dtype: ms.dtype) -> None:
        super().__init__()
        self.dtype, self.layout = dtype, layout
        self.attention = SparseFlashAttention(scale, layout=layout, return_softmax_lse=True)
        self.indexer_loss = DenseIndexerKLLoss(scale, layout=layout)

    def _shape(self, t: Tensor, lead: tuple) -> Tensor:
        return t.reshape(lead + t.shape[1:]).astype(self.dtype)

    def construct(self, q_lat: Tensor, q_pe: Tensor, latent: Tensor, k_pe: Tensor, q_idx: Tensor, k_idx: Tensor,
                  weights: Tensor, lengths: Tensor | None, positions: Tensor, lead: tuple, width: int
                  ) -> tuple[Tensor, Tensor, Tensor]:
        q_idx, k_idx, weights = q_idx.astype(self.dtype), k_idx.astype(self.dtype), weights.astype(ms.float32)
        indices = causal_indices(positions, lead, width)
        query, key = self._shape(q_lat, lead), self._shape(latent, lead)
        query_rope, key_rope = self._shape(q_pe, lead), self._shape(k_pe, lead)
        o, softmax_max, softmax_sum = self.attention(query, key, None, indices, query_rope, key_rope, lengths,
                                                     lengths)
        stop = msops.stop_gradient
        # The indexer's statistics are constants of the KL loss (its kernel differentiates through them).
        max_index, sum_index = ops.dense_lightning_indexer_softmax_lse(stop(q_idx), stop(k_idx), stop(weights),
                                                                       lengths, lengths, layout=self.layout)
        # As in SparseStage: the main attention enters as constants recast from detached float32 tensors.
        loss = self.indexer_loss(
            self._shape(stop(q_lat), lead), self._shape(stop(latent), lead), q_idx, k_idx, weights, softmax_max,
            softmax_sum, stop(max_index), stop(sum_index), self._shape(stop(q_pe), lead),
            self._shape(stop(k_pe), lead), lengths, lengths)
        return o, loss, indices
