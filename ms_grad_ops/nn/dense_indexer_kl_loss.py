"""``nn.DenseIndexerKLLoss``: the lightning indexer's KL loss against the dense main attention (the dense warm-up
stage), whose backward is the fused ``dense_lightning_indexer_grad_kl_loss`` kernel."""
from __future__ import annotations

from mindspore import Tensor
from mindspore import ops as msops

from .. import ops
from .._checks import attributes
from .._optional import Lengths, check_lengths_pair, cmp_residual, lengths_pair, rope_pair
from ._amp import KernelCell
from .indexer_kl_loss import _scaled


class _DenseIndexerKLLossCore(KernelCell):
    """One fused kernel call per step, as ``nn.IndexerKLLoss``'s core: the forward returns the loss and the three
    gradients (for d(loss) = 1), the bprop scales the saved gradients by the incoming ``dout``. All fourteen
    inputs are tensors (absent optional inputs are the placeholders of ``ms_grad_ops/_optional.py``)."""

    def __init__(self, scale_value: float, layout: str, sparse_mode: int, deterministic: bool,
                 cmp_ratio: int) -> None:
        super().__init__()
        self.attrs = attributes("dense_lightning_indexer_grad_kl_loss", scale_value=scale_value, layout=layout,
                                sparse_mode=sparse_mode, deterministic=deterministic, cmp_ratio=cmp_ratio)

    def construct(self, query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor,
                  softmax_max: Tensor, softmax_sum: Tensor, softmax_max_index: Tensor, softmax_sum_index: Tensor,
                  query_rope: Tensor, key_rope: Tensor, actual_seq_lengths_query: Tensor,
                  actual_seq_lengths_key: Tensor, cmp_residual_k: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return ops.dense_lightning_indexer_grad_kl_loss(
            query, key, query_index, key_index, weights, softmax_max, softmax_sum, softmax_max_index,
            softmax_sum_index, query_rope, key_rope, actual_seq_lengths_query, actual_seq_lengths_key, cmp_residual_k,
            **self.attrs)

    def bprop(self, query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor,
              softmax_max: Tensor, softmax_sum: Tensor, softmax_max_index: Tensor, softmax_sum_index: Tensor,
              query_rope: Tensor, key_rope: Tensor, actual_seq_lengths_query: Tensor, actual_seq_lengths_key: Tensor,
              cmp_residual_k: Tensor, out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        # Only the loss output is used downstream (DenseIndexerKLLoss returns out[3]).
        d_loss = dout[3]
        return (msops.zeros_like(query), msops.zeros_like(key), _scaled(out[0], d_loss), _scaled(out[1], d_loss),
                _scaled(out[2], d_loss), msops.zeros_like(softmax_max), msops.zeros_like(softmax_sum),
                msops.zeros_like(softmax_max_index), msops.zeros_like(softmax_sum_index), msops.zeros_like(query_rope),
                msops.zeros_like(key_rope), msops.zeros_like(actual_seq_lengths_query),
                msops.zeros_like(actual_seq_lengths_key), msops.zeros_like(cmp_residual_k))


class DenseIndexerKLLoss(KernelCell):
    """``construct(query, key, query_index, key_index, weights, softmax_max, softmax_sum, softmax_max_index,
    softmax_sum_index, query_rope=None, key_rope=None, actual_seq_lengths_query=None,
    actual_seq_lengths_key=None, cmp_residual_k=None) -> loss``.

    Shapes, dtypes and the lengths rule as in ``ops.dense_lightning_indexer_grad_kl_loss`` (key heads N2 = 1 or
    N1; lengths Python sequences or int32/int64 tensors). Returns the loss float32 ``[1]``, the raw sum over
    tokens as the op and CANN return it, exactly like ``nn.IndexerKLLoss`` (its own Cell, not an
    ``IndexerKLLoss(dense=True)``: one name per op, and the two take different inputs), so the dense warm-up and
    the sparse stage train on one loss scale, and both paths agree at top-k = S. mindformers' ``DSAIndexerLoss``
    divides by the token count instead; a caller wanting that mean scales the loss (and so ``dout``) itself.
    The main-attention tensors and all four statistics are constants (zero gradients); query_index, key_index
    and weights get the fused kernel's gradients scaled by the incoming gradient: one kernel call per
    forward + backward step. The constructor takes the op's attributes
    (docs/ops/dense_lightning_indexer_grad_kl_loss.md).
    """

    def __init__(self, scale_value: float, layout: str = "BSND", sparse_mode: int = 3,
                 deterministic: bool = False, cmp_ratio: int = 1) -> None:
        super().__init__()
        self.core = _DenseIndexerKLLossCore(scale_value, layout, sparse_mode, deterministic, cmp_ratio)

    def construct(self, query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor,
                  softmax_max: Tensor, softmax_sum: Tensor, softmax_max_index: Tensor, softmax_sum_index: Tensor,
                  query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                  actual_seq_lengths_query: Lengths = None, actual_seq_lengths_key: Lengths = None,
                  cmp_residual_k: Lengths = None) -> Tensor:
        op = "DenseIndexerKLLoss"
        query_rope, key_rope = rope_pair(op, query_rope, key_rope, query.dtype)
        lens_q, lens_k = lengths_pair(op, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
        check_lengths_pair(op, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query, key,
                           self.core.attrs["layout"])
        return self.core(query, key, query_index, key_index, weights, softmax_max, softmax_sum, softmax_max_index,
                         softmax_sum_index, query_rope, key_rope, lens_q, lens_k, cmp_residual(op, cmp_residual_k))[3]
