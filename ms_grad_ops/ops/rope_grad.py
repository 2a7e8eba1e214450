"""Functional ``rope_grad``: ATB RopeGradOperation, plus the exact VJP of ``rope`` (docs/contract.md section 1)."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .._checks import attributes, check_seq_length_values, seq_lengths, validate
from .._custom import primitive
from .._specs import OP_SPECS

_OP = "rope_grad"
_INPUTS = OP_SPECS[_OP].inputs


def rope_grad(q_grad: Tensor, k_grad: Tensor, cos: Tensor, sin: Tensor, q_seq_len: Sequence[int] | Tensor,
              *, mode: str = "atb") -> tuple[Tensor, Tensor]:
    """RoPE backward on unpadded tokens.

    ``mode="atb"`` reproduces ATB's RopeGradOperation exactly: ``g * (cos + cat(sin[:, 64:],
    -sin[:, :64]))`` per 128-wide head. That is not the gradient of rotary embedding in general
    (only when both halves of g are equal); it exists for parity with ATB. ``mode="vjp"`` is the
    exact gradient of :func:`ms_grad_ops.ops.rope`.

    Args:
        q_grad, k_grad: ``[n_tokens, hidden]``, hidden a multiple of 128; float16/bfloat16/float32.
        cos, sin: ``[max_seq_len, 128]``, one float dtype.
        q_seq_len: per-sequence lengths (not cumulative), ``sum == n_tokens``,
            ``0 < len <= max_seq_len``; a sequence of ints or an int32/int64 tensor.
        mode: the attribute (its choices: docs/ops/rope_grad.md, from the table).

    Returns:
        ``(q_grad_out, k_grad_out)``, shaped and typed like q_grad.
    """
    attrs = attributes(_OP, mode=mode)
    lens = seq_lengths(_OP, "q_seq_len", q_seq_len)
    validate(_OP, _INPUTS, (q_grad, k_grad, cos, sin, lens), attrs)
    check_seq_length_values(_OP, "q_seq_len", q_seq_len, q_grad.shape[0], cos.shape[0])
    return primitive(_OP, **attrs)(q_grad, k_grad, cos, sin, lens)
