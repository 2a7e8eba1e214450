"""Functional ``sparse_flash_attention_grad``: fused backward of sparse MLA attention (docs/contract.md section 3)."""
from __future__ import annotations

from mindspore import Tensor

from .._checks import attributes, validate
from .._custom import primitive
from .._optional import Lengths, check_lengths_pair
from .._specs import OP_SPECS
from .sparse_flash_attention import sfa_inputs

_OP = "sparse_flash_attention_grad"
_INPUTS = OP_SPECS[_OP].inputs


def sparse_flash_attention_grad(query: Tensor, key: Tensor, value: Tensor | None, sparse_indices: Tensor,
                                d_out: Tensor, out: Tensor, softmax_max: Tensor, softmax_sum: Tensor,
                                actual_seq_lengths_query: Lengths = None, actual_seq_lengths_kv: Lengths = None,
                                query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                                sinks: Tensor | None = None, *,
                                scale_value: float, sparse_block_size: int = 1, layout: str = "BSND",
                                sparse_mode: int = 3, pre_tokens: int = 2147483647, next_tokens: int = 2147483647,
                                deterministic: bool = False) -> tuple[Tensor | None, ...]:
    """Gradients of ``sparse_flash_attention`` for upstream ``d_out``, P recomputed from the statistics.

    Args:
        query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_*, sinks, attributes:
            as in ``sparse_flash_attention`` (same shapes, dtypes and rules).
        d_out, out: ``[T1, N1, D]`` / ``[B, S1, N1, D]``, query's dtype.
        softmax_max, softmax_sum: float32 statistics from the forward, ``[N2, T1, G]`` /
            ``[B, N2, S1, G]`` (with sinks: the forward's with the same sinks, which they include).
        pre_tokens, next_tokens, deterministic: the grad's other attributes (docs/ops/
            sparse_flash_attention_grad.md, from the table).

    Returns:
        ``(d_query, d_key, d_value, d_query_rope, d_key_rope, d_sinks)`` shaped/typed like their inputs.
        With ``value`` given, d_key and d_value are separate (as CANN's; if key is value the caller
        adds them). With ``value=None`` (key is value), d_key is the fused ``dK + dV``, summed in
        float32 inside the kernel and rounded once, and d_value is None. The rope gradients are
        None when the rope inputs are None. d_sinks (float32 ``[N1]``, ``-sum over rows of P_sink *
        (d_out . out)``, reduced in a fixed order) is None when sinks is None.
    """
    q, k, v, idx, qr, kr, lq, lkv, sk = sfa_inputs(_OP, query, key, value, sparse_indices, query_rope, key_rope,
                                                   actual_seq_lengths_query, actual_seq_lengths_kv, sinks)
    inputs = (q, k, v, idx, d_out, out, softmax_max, softmax_sum, lq, lkv, qr, kr, sk)
    attrs = attributes(_OP, scale_value=scale_value, sparse_block_size=sparse_block_size, layout=layout,
                       sparse_mode=sparse_mode, pre_tokens=pre_tokens, next_tokens=next_tokens,
                       deterministic=deterministic)
    validate(_OP, _INPUTS, inputs, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_kv", actual_seq_lengths_query, actual_seq_lengths_kv, q, k,
                       attrs["layout"])
    d_query, d_key, d_value, d_query_rope, d_key_rope, d_sinks = primitive(_OP, **attrs)(*inputs)
    rope = query_rope is not None
    return (d_query, d_key, d_value if value is not None else None, d_query_rope if rope else None,
            d_key_rope if rope else None, d_sinks if sinks is not None else None)
