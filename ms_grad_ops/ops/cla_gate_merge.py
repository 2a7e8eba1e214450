"""Functional ``cla_gate_merge``: the CLA gate merge forward (docs/contract.md section 2)."""
from __future__ import annotations

from mindspore import Tensor

from .._checks import validate
from .._custom import primitive
from .._specs import OP_SPECS

_OP = "cla_gate_merge"
_INPUTS = OP_SPECS[_OP].inputs


def cla_gate_merge(global_attn: Tensor, local_attn: Tensor, global_gate_logits: Tensor,
                   local_gate_logits: Tensor) -> Tensor:
    """``sigmoid(z_g)[..., None] * O_g + sigmoid(z_l)[..., None] * O_l``.

    Args:
        global_attn, local_attn: ``[T, N, D]``.
        global_gate_logits, local_gate_logits: ``[T, N]``.
        All float16/bfloat16/float32, one dtype.

    Returns:
        merged ``[T, N, D]`` in the input dtype (float32 arithmetic).
    """
    validate(_OP, _INPUTS, (global_attn, local_attn, global_gate_logits, local_gate_logits))
    return primitive(_OP)(global_attn, local_attn, global_gate_logits, local_gate_logits)
