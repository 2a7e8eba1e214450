"""``nn.SparseFlashAttention``: sparse MLA attention forward whose backward is the fused grad kernel."""
from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn
from mindspore import ops as msops

from .. import ops


class _Core(nn.Cell):
    """Forward with rope, returning ``(out, softmax_max, softmax_sum)`` so bprop gets the statistics."""

    def __init__(self, attrs: dict) -> None:
        super().__init__()
        self.attrs = attrs

    def construct(self, query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor, query_rope: Tensor,
                  key_rope: Tensor, lens_q: Tensor, lens_kv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return ops.sparse_flash_attention(query, key, value, sparse_indices, query_rope, key_rope, lens_q, lens_kv,
                                          **self.attrs)

    def bprop(self, query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor, query_rope: Tensor,
              key_rope: Tensor, lens_q: Tensor, lens_kv: Tensor, out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        dq, dk, dv, dqr, dkr = ops.sparse_flash_attention_grad(
            query, key, value, sparse_indices, dout[0], out[0], out[1], out[2], lens_q, lens_kv, query_rope,
            key_rope, **self.attrs)
        return (dq, dk, dv, msops.zeros_like(sparse_indices), dqr, dkr, msops.zeros_like(lens_q),
                msops.zeros_like(lens_kv))


class _CoreNoRope(nn.Cell):
    """Forward without rope, returning ``(out, softmax_max, softmax_sum)``."""

    def __init__(self, attrs: dict) -> None:
        super().__init__()
        self.attrs = attrs

    def construct(self, query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor, lens_q: Tensor,
                  lens_kv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return ops.sparse_flash_attention(query, key, value, sparse_indices, None, None, lens_q, lens_kv,
                                          **self.attrs)

    def bprop(self, query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor, lens_q: Tensor,
              lens_kv: Tensor, out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        dq, dk, dv, _, _ = ops.sparse_flash_attention_grad(
            query, key, value, sparse_indices, dout[0], out[0], out[1], out[2], lens_q, lens_kv, None, None,
            **self.attrs)
        return dq, dk, dv, msops.zeros_like(sparse_indices), msops.zeros_like(lens_q), msops.zeros_like(lens_kv)


class SparseFlashAttention(nn.Cell):
    """Top-k sparse MLA attention (DeepSeek-V3.2), SPEC section 3.

    ``construct(query, key, value, sparse_indices, query_rope=None, key_rope=None,
    actual_seq_lengths_query=None, actual_seq_lengths_kv=None) -> out``

    Shapes (TND): query ``[T1, N1, D]``, key/value ``[T2, N2, D]`` (may be one tensor),
    sparse_indices int32 ``[T1, N2, K]`` (block indices local to the batch, -1 = unused),
    query_rope ``[T1, N1, Dr]``, key_rope ``[T2, N2, Dr]`` (optional, together), lengths int32/int64
    cumulative tensors (required in TND, ignored in BSND). BSND: ``[B, S, N, D]`` etc. float16,
    bfloat16 or float32; out is shaped/typed like query.

    The backward is one fused ``sparse_flash_attention_grad`` kernel call using the forward's
    softmax statistics; nothing of size ``[T, K, D]`` or ``[T, S2]`` is materialised. Indices and
    lengths get zero gradients.
    """

    def __init__(self, scale_value: float, sparse_block_size: int = 1, layout: str = "BSND",
                 sparse_mode: int = 3) -> None:
        super().__init__()
        attrs = {"scale_value": float(scale_value), "sparse_block_size": int(sparse_block_size), "layout": layout,
                 "sparse_mode": int(sparse_mode)}
        self.tnd = layout == "TND"
        self.core = _Core(attrs)
        self.core_no_rope = _CoreNoRope(attrs)
        # Stands in for the lengths in BSND (the kernel ignores them there).
        self.no_lengths = Tensor(np.zeros(1, np.int32))

    def construct(self, query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor,
                  query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                  actual_seq_lengths_query: Tensor | None = None, actual_seq_lengths_kv: Tensor | None = None
                  ) -> Tensor:
        lens_q = actual_seq_lengths_query
        lens_kv = actual_seq_lengths_kv
        if lens_q is None or lens_kv is None:
            if self.tnd:
                raise ValueError("SparseFlashAttention: layout \"TND\" needs actual_seq_lengths_query and "
                                 "actual_seq_lengths_kv (cumulative int tensors)")
            lens_q = self.no_lengths
            lens_kv = self.no_lengths
        if query_rope is None:
            return self.core_no_rope(query, key, value, sparse_indices, lens_q, lens_kv)[0]
        return self.core(query, key, value, sparse_indices, query_rope, key_rope, lens_q, lens_kv)[0]
