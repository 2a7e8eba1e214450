"""``nn.RotaryEmbedding``: rope forward whose backward is the fused ``rope_grad(mode="vjp")``."""
from __future__ import annotations

from mindspore import Tensor, nn
from mindspore import ops as msops

from .. import ops
from .._custom import primitive


class RotaryEmbedding(nn.Cell):
    """Rotary embedding of unpadded q and k.

    ``construct(q, k, cos, sin, q_seq_len) -> (q_embed, k_embed)`` with q, k
    ``[n_tokens, hidden]`` (hidden = 128 * heads), cos, sin ``[max_seq_len, 128]`` and q_seq_len
    an int32/int64 tensor of per-sequence lengths. The backward runs the fused ``rope_grad``
    kernel in ``mode="vjp"``; cos, sin and q_seq_len get zero gradients (they are tables, not
    trained).
    """

    def __init__(self) -> None:
        super().__init__()
        # The bprop calls the primitive, not the functional op: its inputs were validated by the
        # forward, and MindSpore cannot parse the forward's Python checks again inside the bprop
        # graph of the same cell.
        self.rope_grad = primitive("rope_grad", mode="vjp")

    def construct(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, q_seq_len: Tensor) -> tuple[Tensor, Tensor]:
        return ops.rope(q, k, cos, sin, q_seq_len)

    def bprop(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, q_seq_len: Tensor, out: tuple, dout: tuple
              ) -> tuple[Tensor, ...]:
        dq, dk = self.rope_grad(dout[0], dout[1], cos, sin, q_seq_len)
        return dq, dk, msops.zeros_like(cos), msops.zeros_like(sin), msops.zeros_like(q_seq_len)
