"""``nn.SparseFlashAttention``: sparse MLA attention forward whose backward is the fused grad kernel."""
from __future__ import annotations

from mindspore import Tensor
from mindspore import ops as msops

from .. import ops
from .._checks import attributes
from .._optional import Lengths
from ._amp import KernelCell


class SparseFlashAttention(KernelCell):
    """Top-k sparse MLA attention (DeepSeek-V3.2), docs/contract.md section 3.

    ``construct(query, key, value, sparse_indices, query_rope=None, key_rope=None,
    actual_seq_lengths_query=None, actual_seq_lengths_kv=None)`` returns ``out``, or
    ``(out, softmax_max, softmax_sum)`` with ``return_softmax_lse=True`` (the statistics that
    ``IndexerKLLoss`` takes; they carry no gradient).

    Shapes (TND): query ``[T1, N1, D]``, key ``[T2, N2, D]``, value like key or None,
    sparse_indices int32 ``[T1, N2, K]`` (block indices local to the batch, -1 = unused),
    query_rope ``[T1, N1, Dr]``, key_rope ``[T2, N2, Dr]`` (optional, together). BSND:
    ``[B, S, N, D]`` etc. float16, bfloat16 or float32; out is shaped/typed like query.
    Lengths (int32/int64 tensors or Python sequences, docs/contract.md section 0.3): TND cumulative,
    both or neither, none = one sequence of T1 queries and T2 keys; BSND per batch (the valid rows
    of each padded batch row), either alone.

    ``value=None`` means key is value (DeepSeek's shared latent KV): the backward returns one
    gradient for key, ``dK + dV`` summed in float32 inside the kernel and rounded once. Passing one
    tensor as both key and value also works; then MindSpore adds the two gradients (in float32
    for bfloat16, see ``ops.sparse_flash_attention``, so the gradient reaching a bfloat16
    key/value is float32).

    The backward is one fused ``sparse_flash_attention_grad`` kernel call (the bprop of the
    forward primitive) using the forward's softmax statistics; nothing of size ``[T, K, D]`` or
    ``[T, S2]`` is materialised. Indices and lengths get zero gradients.
    """

    def __init__(self, scale_value: float, sparse_block_size: int = 1, layout: str = "BSND",
                 sparse_mode: int = 3, return_softmax_lse: bool = False) -> None:
        super().__init__()
        self.attrs = attributes("sparse_flash_attention", scale_value=scale_value, sparse_block_size=sparse_block_size,
                                layout=layout, sparse_mode=sparse_mode)
        if not isinstance(return_softmax_lse, bool):
            raise TypeError("SparseFlashAttention: argument 'return_softmax_lse' must be a bool, got "
                            f"{type(return_softmax_lse).__name__} {return_softmax_lse!r}")
        self.return_softmax_lse = return_softmax_lse

    def construct(self, query: Tensor, key: Tensor, value: Tensor | None, sparse_indices: Tensor,
                  query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                  actual_seq_lengths_query: Lengths = None, actual_seq_lengths_kv: Lengths = None
                  ) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        out, softmax_max, softmax_sum = ops.sparse_flash_attention(
            query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query,
            actual_seq_lengths_kv, **self.attrs)
        if self.return_softmax_lse:
            return out, msops.stop_gradient(softmax_max), msops.stop_gradient(softmax_sum)
        return out
