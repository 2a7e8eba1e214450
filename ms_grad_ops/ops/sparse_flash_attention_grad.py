"""Functional ``sparse_flash_attention_grad``: fused backward of sparse MLA attention (SPEC section 3)."""
from __future__ import annotations

from mindspore import Tensor

from .._custom import primitive
from ._checks import check_tensor, validate
from ._sfa_common import Lengths, rope_pair, seq_lengths

_OP = "sparse_flash_attention_grad"


def sparse_flash_attention_grad(query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor, d_out: Tensor,
                                out: Tensor, softmax_max: Tensor, softmax_sum: Tensor,
                                actual_seq_lengths_query: Lengths = None, actual_seq_lengths_kv: Lengths = None,
                                query_rope: Tensor | None = None, key_rope: Tensor | None = None, *,
                                scale_value: float, sparse_block_size: int = 1, layout: str = "BSND",
                                sparse_mode: int = 3, pre_tokens: int = 2147483647, next_tokens: int = 2147483647,
                                deterministic: bool = False) -> tuple[Tensor | None, ...]:
    """Gradients of ``sparse_flash_attention`` for upstream ``d_out``, P recomputed from the statistics.

    Args:
        query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_*, attributes:
            as in ``sparse_flash_attention`` (same shapes, dtypes and rules).
        d_out, out: ``[T1, N1, D]`` / ``[B, S1, N1, D]``, query's dtype.
        softmax_max, softmax_sum: float32 statistics from the forward, ``[N2, T1, G]`` /
            ``[B, N2, S1, G]``.
        pre_tokens, next_tokens: must keep their defaults. deterministic: accepted for API parity
            (the CPU kernel is always deterministic).

    Returns:
        ``(d_query, d_key, d_value, d_query_rope, d_key_rope)`` shaped/typed like their inputs;
        the rope gradients are None when the rope inputs are None. d_key and d_value are separate
        even when key is value (the caller adds them).
    """
    query = check_tensor(_OP, "query", query)
    rope = rope_pair(_OP, query_rope, key_rope)
    key = check_tensor(_OP, "key", key)
    lq = seq_lengths(_OP, "actual_seq_lengths_query", actual_seq_lengths_query, layout, query.shape[0])
    lkv = seq_lengths(_OP, "actual_seq_lengths_kv", actual_seq_lengths_kv, layout, key.shape[0])
    scale, bs, mode = float(scale_value), int(sparse_block_size), int(sparse_mode)
    pre, nxt = int(pre_tokens), int(next_tokens)
    names = ("query", "key", "value", "sparse_indices", "d_out", "out", "softmax_max", "softmax_sum",
             "actual_seq_lengths_query", "actual_seq_lengths_kv")
    attrs = (scale, bs, layout, mode, pre, nxt, bool(deterministic))
    if rope:
        validate(_OP, names + ("query_rope", "key_rope"), (query, key, value, sparse_indices, d_out, out, softmax_max,
                                                           softmax_sum, lq, lkv, query_rope, key_rope), attrs)
        prim = primitive(_OP, scale_value=scale, sparse_block_size=bs, layout=layout, sparse_mode=mode,
                         pre_tokens=pre, next_tokens=nxt, deterministic=bool(deterministic))
        return prim(query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum, lq, lkv, query_rope,
                    key_rope)
    validate(_OP, names, (query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum, lq, lkv), attrs)
    prim = primitive(_OP + "_no_rope", scale_value=scale, sparse_block_size=bs, layout=layout, sparse_mode=mode,
                     pre_tokens=pre, next_tokens=nxt, deterministic=bool(deterministic))
    d_query, d_key, d_value = prim(query, key, value, sparse_indices, d_out, out, softmax_max, softmax_sum, lq, lkv)
    return d_query, d_key, d_value, None, None
