"""Functional ``cla_gate_merge``: the CLA gate merge forward (docs/contract.md section 2)."""
from __future__ import annotations

from mindspore import Tensor

from .._checks import validate
from .._custom import primitive


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
    validate("cla_gate_merge", ("global_attn", "local_attn", "global_gate_logits", "local_gate_logits"),
             (global_attn, local_attn, global_gate_logits, local_gate_logits))
    return primitive("cla_gate_merge")(global_attn, local_attn, global_gate_logits, local_gate_logits)
