"""``nn.SparseFlashAttention``: sparse MLA attention forward whose backward is the fused grad kernel."""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor
from mindspore import ops as msops

from .. import ops
from .._checks import attributes
from .._optional import Lengths
from ._amp import KernelCell


class SparseFlashAttention(KernelCell):
    """Top-k sparse MLA attention (DeepSeek-V3.2), docs/contract.md section 3.

    ``construct(query, key, value, sparse_indices, query_rope=None, key_rope=None,
    actual_seq_lengths_query=None, actual_seq_lengths_kv=None, sinks=None)`` returns ``out``, or
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

    Sinks (docs/contract.md section 0.7): ``sinks=N1`` (an int) makes the Cell learn a float32
    Parameter ``sinks [N1]`` initialised to 0, ``sinks=<[N1] array or Tensor>`` one initialised to
    those values; the default None has none. ``construct``'s ``sinks`` (float32 ``[N1]``) passes
    sinks owned elsewhere (``DSAttention`` shares its ``attn_sink`` with the indexer loss); giving
    both is a ValueError.
    """

    def __init__(self, scale_value: float, sparse_block_size: int = 1, layout: str = "BSND",
                 sparse_mode: int = 3, return_softmax_lse: bool = False,
                 sinks: int | np.ndarray | Tensor | None = None) -> None:
        super().__init__()
        self.attrs = attributes("sparse_flash_attention", scale_value=scale_value, sparse_block_size=sparse_block_size,
                                layout=layout, sparse_mode=sparse_mode)
        if not isinstance(return_softmax_lse, bool):
            raise TypeError("SparseFlashAttention: argument 'return_softmax_lse' must be a bool, got "
                            f"{type(return_softmax_lse).__name__} {return_softmax_lse!r}")
        self.return_softmax_lse = return_softmax_lse
        self.sinks = None if sinks is None else Parameter(_initial_sinks(sinks), name="sinks")

    def construct(self, query: Tensor, key: Tensor, value: Tensor | None, sparse_indices: Tensor,
                  query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                  actual_seq_lengths_query: Lengths = None, actual_seq_lengths_kv: Lengths = None,
                  sinks: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor, Tensor]:
        if self.sinks is not None:
            if sinks is not None:
                raise ValueError("SparseFlashAttention: argument 'sinks' must be None when the Cell learns its own "
                                 "sinks (constructed with sinks=...)")
            sinks = self.sinks
        out, softmax_max, softmax_sum = ops.sparse_flash_attention(
            query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query,
            actual_seq_lengths_kv, sinks, **self.attrs)
        if self.return_softmax_lse:
            return out, msops.stop_gradient(softmax_max), msops.stop_gradient(softmax_sum)
        return out


def _initial_sinks(sinks: int | np.ndarray | Tensor) -> Tensor:
    """The initial value of a learnt ``sinks`` Parameter: N1 zeros for an int N1, else the given
    ``[N1]`` values in float32."""
    if isinstance(sinks, bool) or not isinstance(sinks, (int, np.ndarray, Tensor)):
        raise TypeError("SparseFlashAttention: argument 'sinks' must be None, an int N1 or a [N1] array/Tensor, "
                        f"got {type(sinks).__name__}")
    if isinstance(sinks, int):
        if sinks < 1:
            raise ValueError(f"SparseFlashAttention: argument 'sinks' (the head count N1) must be >= 1, got {sinks}")
        return Tensor(np.zeros(sinks, np.float32))
    values = sinks.asnumpy() if isinstance(sinks, Tensor) else np.asarray(sinks)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"SparseFlashAttention: argument 'sinks' must have shape [N1], got {list(values.shape)}")
    return Tensor(values.astype(np.float32), ms.float32)
