"""``nn.IndexerKLLoss``: the lightning indexer's KL loss against the main attention, whose backward is
the fused ``sparse_lightning_indexer_grad_kl_loss`` kernel."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor
from mindspore import ops as msops

from .. import ops
from .._checks import attributes
from .._optional import Lengths, check_lengths_pair, cmp_residual, lengths_pair, optional, rope_pair
from ._amp import KernelCell


def _scaled(grad: Tensor, dout: Tensor) -> Tensor:
    # CPU Mul has no bfloat16 kernel: scale in float32 and round back once.
    return (grad.astype(ms.float32) * dout.astype(ms.float32)).astype(grad.dtype)


class _IndexerKLLossCore(KernelCell):
    """One fused kernel call per step: the forward returns the loss *and* the three gradients
    (for d(loss) = 1); the bprop only scales the saved gradients by the incoming ``dout``.

    All fourteen inputs are tensors (absent optional inputs are the placeholders of
    ``ms_grad_ops/_optional.py``, lengths given as Python sequences are converted before), so the bprop
    always returns the same structure.
    """

    def __init__(self, scale_value: float, layout: str, sparse_mode: int, deterministic: bool,
                 cmp_ratio: int) -> None:
        super().__init__()
        self.attrs = attributes("sparse_lightning_indexer_grad_kl_loss", scale_value=scale_value, layout=layout,
                                sparse_mode=sparse_mode, deterministic=deterministic, cmp_ratio=cmp_ratio)

    def construct(self, query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor,
                  sparse_indices: Tensor, softmax_max: Tensor, softmax_sum: Tensor, query_rope: Tensor,
                  key_rope: Tensor, actual_seq_lengths_query: Tensor, actual_seq_lengths_key: Tensor, sinks: Tensor,
                  cmp_residual_k: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        # Zero-size placeholders are accepted by the functional op as "absent".
        return ops.sparse_lightning_indexer_grad_kl_loss(
            query, key, query_index, key_index, weights, sparse_indices, softmax_max, softmax_sum, query_rope,
            key_rope, actual_seq_lengths_query, actual_seq_lengths_key, sinks, cmp_residual_k, **self.attrs)

    def bprop(self, query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor,
              sparse_indices: Tensor, softmax_max: Tensor, softmax_sum: Tensor, query_rope: Tensor, key_rope: Tensor,
              actual_seq_lengths_query: Tensor, actual_seq_lengths_key: Tensor, sinks: Tensor, cmp_residual_k: Tensor,
              out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        # Only the loss output is used downstream (IndexerKLLoss returns out[3]), so dout[3] is
        # the incoming gradient and the gradient outputs carry none of their own.
        d_loss = dout[3]
        return (msops.zeros_like(query), msops.zeros_like(key), _scaled(out[0], d_loss), _scaled(out[1], d_loss),
                _scaled(out[2], d_loss), msops.zeros_like(sparse_indices), msops.zeros_like(softmax_max),
                msops.zeros_like(softmax_sum), msops.zeros_like(query_rope), msops.zeros_like(key_rope),
                msops.zeros_like(actual_seq_lengths_query), msops.zeros_like(actual_seq_lengths_key),
                msops.zeros_like(sinks), msops.zeros_like(cmp_residual_k))


class IndexerKLLoss(KernelCell):
    """``construct(query, key, query_index, key_index, weights, sparse_indices, softmax_max, softmax_sum,
    query_rope=None, key_rope=None, actual_seq_lengths_query=None, actual_seq_lengths_key=None, sinks=None,
    cmp_residual_k=None) -> loss``.

    Shapes, dtypes and the lengths rule as in ``ops.sparse_lightning_indexer_grad_kl_loss`` (lengths
    may be Python sequences or int32/int64 tensors); loss float32 ``[1]``,
    summed over tokens. ``sinks`` (float32 ``[N1]``) are the main attention's sinks, which its
    statistics include: the target is then renormalised (docs/contract.md section 4.2).
    The main-attention tensors (query, key, ropes, statistics, sinks) are constants
    for the indexer loss (DeepSeek-V3.2 trains the indexer detached): their gradients are zero.
    Gradients of query_index, key_index and weights come from one fused kernel call scaled by the
    incoming gradient. The forward runs the fused kernel once, keeping its gradients for the
    backward (the main cost, recomputing the attention probabilities, is shared by loss and
    gradients), so a forward+backward step costs one kernel call. The constructor takes the op's
    attributes (docs/ops/sparse_lightning_indexer_grad_kl_loss.md); ``deterministic`` changes nothing
    (every backend is deterministic).
    """

    def __init__(self, scale_value: float, layout: str = "BSND", sparse_mode: int = 3,
                 deterministic: bool = False, cmp_ratio: int = 1) -> None:
        super().__init__()
        self.core = _IndexerKLLossCore(scale_value, layout, sparse_mode, deterministic, cmp_ratio)

    def construct(self, query: Tensor, key: Tensor, query_index: Tensor, key_index: Tensor, weights: Tensor,
                  sparse_indices: Tensor, softmax_max: Tensor, softmax_sum: Tensor, query_rope: Tensor | None = None,
                  key_rope: Tensor | None = None, actual_seq_lengths_query: Lengths = None,
                  actual_seq_lengths_key: Lengths = None, sinks: Tensor | None = None,
                  cmp_residual_k: Lengths = None) -> Tensor:
        op = "IndexerKLLoss"
        query_rope, key_rope = rope_pair(op, query_rope, key_rope, query.dtype)
        lens_q, lens_k = lengths_pair(op, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key)
        check_lengths_pair(op, "actual_seq_lengths_key", actual_seq_lengths_query, actual_seq_lengths_key, query, key,
                           self.core.attrs["layout"])
        sinks = optional(op, "sinks", sinks, ms.float32)
        return self.core(query, key, query_index, key_index, weights, sparse_indices, softmax_max, softmax_sum,
                         query_rope, key_rope, lens_q, lens_k, sinks, cmp_residual(op, cmp_residual_k))[3]
