"""Functional ``cla_gate_backward``: the fused gradient of the CLA gate merge (docs/contract.md section 2)."""
from __future__ import annotations

from mindspore import Tensor

from .._checks import attributes, validate
from .._custom import primitive
from .._specs import OP_SPECS

_OP = "cla_gate_backward"
_INPUTS = OP_SPECS[_OP].inputs


def cla_gate_backward(grad_merged: Tensor, global_attn: Tensor, local_attn: Tensor, global_gate_logits: Tensor,
                      local_gate_logits: Tensor, *, input_attn_layout: str = "TND"
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of ``merged = sigmoid(z_g)*O_g + sigmoid(z_l)*O_l`` for upstream ``grad_merged``.

    ``s = sigmoid(z)`` is recomputed in float32; ``dO_g = G*s_g``, ``dO_l = G*s_l``,
    ``dz_g = (sum_d G*O_g) * s_g * (1 - s_g)`` (likewise dz_l), the D-sum in float32 per row.

    Args:
        grad_merged, global_attn, local_attn: ``[T, N, D]``.
        global_gate_logits, local_gate_logits: ``[T, N]``.
        All float16/bfloat16/float32, one dtype.
        input_attn_layout: the attribute (its choices: docs/ops/cla_gate_backward.md, from the table).

    Returns:
        ``(grad_global_attn, grad_local_attn, grad_global_gate_logits, grad_local_gate_logits)``:
        two ``[T, N, D]`` and two ``[T, N]`` tensors in the input dtype.
    """
    attrs = attributes(_OP, input_attn_layout=input_attn_layout)
    validate(_OP, _INPUTS, (grad_merged, global_attn, local_attn, global_gate_logits, local_gate_logits), attrs)
    return primitive(_OP, **attrs)(
        grad_merged, global_attn, local_attn, global_gate_logits, local_gate_logits)
