"""``nn.ClaGateMerge``: CLA gate merge forward whose backward is the fused ``cla_gate_backward``."""
from __future__ import annotations

from mindspore import Tensor

from .. import ops
from ._amp import KernelCell


class ClaGateMerge(KernelCell):
    """``construct(global_attn, local_attn, global_gate_logits, local_gate_logits) -> merged``.

    Attention tensors ``[T, N, D]``, gate logits ``[T, N]``, one float dtype;
    ``merged = sigmoid(z_g)*O_g + sigmoid(z_l)*O_l``. The backward is the bprop of the
    ``cla_gate_merge`` primitive: one fused ``cla_gate_backward`` kernel call returning all four
    gradients.
    """

    def construct(self, global_attn: Tensor, local_attn: Tensor, global_gate_logits: Tensor,
                  local_gate_logits: Tensor) -> Tensor:
        return ops.cla_gate_merge(global_attn, local_attn, global_gate_logits, local_gate_logits)
