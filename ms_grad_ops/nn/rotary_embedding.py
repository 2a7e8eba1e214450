"""``nn.RotaryEmbedding``: rope forward whose backward is the fused ``rope_grad(mode="vjp")``."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .. import ops
from ._amp import KernelCell


class RotaryEmbedding(KernelCell):
    """Rotary embedding of unpadded q and k.

    ``construct(q, k, cos, sin, q_seq_len) -> (q_embed, k_embed)`` with q, k
    ``[n_tokens, hidden]`` (hidden = 128 * heads), cos, sin ``[max_seq_len, 128]`` and q_seq_len
    the per-sequence lengths (int32/int64 tensor or Python sequence). The backward is the bprop of
    the ``rope`` primitive: one fused ``rope_grad`` kernel call in ``mode="vjp"``; cos, sin and
    q_seq_len get zero gradients (they are tables, not trained).
    """

    def construct(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, q_seq_len: Sequence[int] | Tensor
                  ) -> tuple[Tensor, Tensor]:
        return ops.rope(q, k, cos, sin, q_seq_len)
