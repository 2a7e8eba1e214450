"""``nn.LightningIndexer``: top-k key selection by the lightning indexer; its scores are differentiable."""
from __future__ import annotations

from mindspore import Tensor
from mindspore import ops as msops

from .. import ops
from .._checks import attributes, check_attribute_rules
from ._amp import KernelCell


class LightningIndexer(KernelCell):
    """``construct(query_index, key_index, weights, actual_seq_lengths_query=None,
    actual_seq_lengths_key=None) -> (sparse_indices, sparse_values)``.

    query_index ``[B, S1, Nidx, Didx]`` (BSND) or ``[T1, Nidx, Didx]`` (TND), key_index
    ``[B, S2, 1, Didx]`` / ``[T2, 1, Didx]``, weights ``[B, S1, Nidx]`` / ``[T1, Nidx]``; returns int32
    indices and float32 scores ``[B, S1, 1, K]`` / ``[T1, 1, K]`` (see ``ops.lightning_indexer``).
    The selection (the indices) carries no gradient and is wrapped in ``stop_gradient``; the scores
    are differentiable with respect to query_index, key_index and weights (bprop:
    ``ops.lightning_indexer_grad``), so the indexer trains through a loss on ``sparse_values`` as
    well as through ``IndexerKLLoss``.

    The attributes' domains and backend limits are the table's (docs/ops/lightning_indexer.md): a
    value outside is a ``ValueError`` here; the size rule's T1 * K part when the Cell is called.
    """

    def __init__(self, sparse_count: int = 2048, layout: str = "BSND", sparse_mode: int = 3,
                 cmp_ratio: int = 1) -> None:
        super().__init__()
        attrs = attributes("lightning_indexer", sparse_count=sparse_count, layout=layout, sparse_mode=sparse_mode,
                           cmp_ratio=cmp_ratio)
        check_attribute_rules("lightning_indexer", attrs)
        self.sparse_count, self.layout, self.sparse_mode = attrs["sparse_count"], attrs["layout"], attrs["sparse_mode"]
        self.cmp_ratio = attrs["cmp_ratio"]

    def construct(self, query_index: Tensor, key_index: Tensor, weights: Tensor,
                  actual_seq_lengths_query: Tensor | None = None, actual_seq_lengths_key: Tensor | None = None,
                  cmp_residual_k: Tensor | None = None) -> tuple[Tensor, Tensor]:
        idx, val = ops.lightning_indexer(query_index, key_index, weights, actual_seq_lengths_query,
                                         actual_seq_lengths_key, cmp_residual_k, sparse_count=self.sparse_count,
                                         layout=self.layout, sparse_mode=self.sparse_mode, cmp_ratio=self.cmp_ratio)
        return msops.stop_gradient(idx), val
