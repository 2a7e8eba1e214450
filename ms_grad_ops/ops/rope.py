"""Functional ``rope``: rotary position embedding of unpadded q and k (docs/contract.md section 1)."""
from __future__ import annotations

from collections.abc import Sequence

from mindspore import Tensor

from .._checks import check_seq_length_values, seq_lengths, validate
from .._custom import primitive
from .._specs import OP_SPECS

_OP = "rope"
_INPUTS = OP_SPECS[_OP].inputs


def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, q_seq_len: Sequence[int] | Tensor) -> tuple[Tensor, Tensor]:
    """``y = x*cos + rotate_half(x)*sin`` per 128-wide head, ``rotate_half(x) = cat(-x[64:], x[:64])``.

    Args:
        q, k: ``[n_tokens, hidden]``, hidden a multiple of 128; float16/bfloat16/float32, one dtype.
        cos, sin: ``[max_seq_len, 128]``, one float dtype (may differ from q's).
        q_seq_len: lengths of the packed sequences (not cumulative), a sequence of ints or an
            int32/int64 tensor; token i of a sequence uses row i of cos/sin.

    Returns:
        ``(q_embed, k_embed)``, shaped and typed like q.
    """
    lens = seq_lengths(_OP, "q_seq_len", q_seq_len)
    validate(_OP, _INPUTS, (q, k, cos, sin, lens))
    check_seq_length_values(_OP, "q_seq_len", q_seq_len, q.shape[0], cos.shape[0])
    return primitive(_OP)(q, k, cos, sin, lens)
