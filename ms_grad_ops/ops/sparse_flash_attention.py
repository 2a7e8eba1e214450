"""Functional ``sparse_flash_attention``: top-k sparse MLA attention forward (docs/contract.md section 3)."""
from __future__ import annotations

import functools

import mindspore as ms
from mindspore import Tensor
from mindspore import ops as msops

from .._checks import attributes, check_tensor, validate
from .._custom import primitive
from .._optional import Lengths, check_lengths_pair, lengths_pair, optional, rope_pair
from .._specs import OP_SPECS

_OP = "sparse_flash_attention"
_INPUTS = OP_SPECS[_OP].inputs


def _to_float32(dout: Tensor) -> Tensor:
    return msops.cast(dout, ms.float32)


@functools.cache
def _float32_grad() -> msops.InsertGradientOf:
    """Identity whose backward hands the gradient on in float32.

    Applied to key and value when both are given in bfloat16: if they are one tensor, MindSpore's
    autodiff adds their two gradients with AddN, which its CPU backend has no bfloat16 kernel for
    (GRAPH compile fails: "Select CPU operator[AddN] fail! ... BFloat16"); float32 gradients add
    there. ``value=None`` avoids the addition altogether (fused in the kernel, one rounding)."""
    return msops.InsertGradientOf(_to_float32)


def sfa_inputs(op: str, query: Tensor, key: Tensor, value: Tensor | None, sparse_indices: Tensor,
               query_rope: Tensor | None, key_rope: Tensor | None, lens_q: Lengths, lens_kv: Lengths,
               sinks: Tensor | None) -> tuple[Tensor, ...]:
    """The nine kernel inputs in the forward's order (absent ones as placeholders), as shared by
    ``sparse_flash_attention`` and ``sparse_flash_attention_grad``."""
    query = check_tensor(op, "query", query)
    key = check_tensor(op, "key", key)
    value = optional(op, "value", value, query.dtype)
    query_rope, key_rope = rope_pair(op, query_rope, key_rope, query.dtype)
    lq, lkv = lengths_pair(op, "actual_seq_lengths_kv", lens_q, lens_kv)
    sinks = optional(op, "sinks", sinks, ms.float32)
    return query, key, value, sparse_indices, query_rope, key_rope, lq, lkv, sinks


def sparse_flash_attention(query: Tensor, key: Tensor, value: Tensor | None, sparse_indices: Tensor,
                           query_rope: Tensor | None = None, key_rope: Tensor | None = None,
                           actual_seq_lengths_query: Lengths = None, actual_seq_lengths_kv: Lengths = None,
                           sinks: Tensor | None = None, *, scale_value: float, sparse_block_size: int = 1,
                           layout: str = "BSND", sparse_mode: int = 3) -> tuple[Tensor, Tensor, Tensor]:
    """Attention of every query row over its selected key blocks.

    For query row t, head h (group n2 = h // G) and the visible selected keys j:
    ``S_j = scale_value * cat(q, q_rope)[t,h] . cat(key, key_rope)[j]``, ``out = softmax(S) @ value[j]``;
    with ``sinks``, the softmax has one more logit ``sinks[h]`` (not scaled) whose value is zero
    (docs/contract.md section 0.7).
    Differentiable (``ms.grad``, PyNative and GRAPH): the backward is one
    ``sparse_flash_attention_grad`` kernel call; the statistics carry no gradient. With a
    bfloat16 ``value`` given, the gradients reaching key and value are float32 (so MindSpore can
    add them on CPU when key and value are one tensor).

    Args:
        query: ``[T1, N1, D]`` (TND) or ``[B, S1, N1, D]`` (BSND); float16/bfloat16/float32.
        key: ``[T2, N2, D]`` / ``[B, S2, N2, D]``, query's dtype.
        value: like key, or None: key is value (DeepSeek's shared latent KV; the backward then
            returns one fused gradient for key).
        sparse_indices: int32 ``[T1, N2, K]`` / ``[B, S1, N2, K]``: block indices local to the
            batch, block i = keys ``[i*bs, (i+1)*bs)``; -1 = unused slot, anywhere in a row.
        query_rope, key_rope: optional ``[T1, N1, Dr]`` / ``[T2, N2, Dr]`` (both or neither).
        actual_seq_lengths_query, actual_seq_lengths_kv: int32/int64 tensors or Python sequences
            (docs/contract.md section 0.3). TND: cumulative lengths without a leading 0, both or
            neither; None = one sequence of T1 queries and T2 keys. BSND: per batch, the valid rows
            of each padded batch row (0 <= len <= S), either alone (None = all S); padding rows are
            never read and give out 0 and statistics 0.
        sinks: optional float32 ``[N1]``, the learnable sink logit of each query head (CANN's V2
            ``sinksOptional``; DeepSeek-V4's ``attn_sink``). Differentiable (``d_sinks``).
        scale_value, sparse_block_size, layout, sparse_mode: the attributes (domains, defaults,
            backend limits, meanings: docs/ops/sparse_flash_attention.md, from the table).

    Returns:
        ``(out, softmax_max, softmax_sum)``: out shaped/typed like query; float32 statistics
        ``[N2, T1, G]`` (TND) or ``[B, N2, S1, G]`` (BSND), G = N1 / N2. Rows with no visible key
        give out 0, softmax_max 0, softmax_sum 0 (docs/contract.md section 0.6); with a sink
        ``sigma`` > -inf, out 0, softmax_max ``sigma``, softmax_sum 1. The statistics include the sink.
    """
    inputs = sfa_inputs(_OP, query, key, value, sparse_indices, query_rope, key_rope, actual_seq_lengths_query,
                        actual_seq_lengths_kv, sinks)
    if value is not None and inputs[0].dtype == ms.bfloat16:
        inputs = (inputs[0], _float32_grad()(inputs[1]), _float32_grad()(inputs[2]), *inputs[3:])
    attrs = attributes(_OP, scale_value=scale_value, sparse_block_size=sparse_block_size, layout=layout,
                       sparse_mode=sparse_mode)
    validate(_OP, _INPUTS, inputs, attrs)
    check_lengths_pair(_OP, "actual_seq_lengths_kv", actual_seq_lengths_query, actual_seq_lengths_kv, query, key,
                       attrs["layout"])
    return primitive(_OP, **attrs)(*inputs)
