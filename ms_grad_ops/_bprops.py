"""The backward of each differentiable forward primitive: our fused grad kernel.

``_custom`` attaches ``bprop_of(name, attrs)`` to the ``ops.Custom`` it builds, so ``ms.grad``
works through the functional ops and the Cells alike, in PyNative and GRAPH mode. Every input is
a tensor (absent optional inputs are placeholders, ``ops/_optional.py``), so each bprop returns one
fixed structure: one gradient per input, zeros for indices, lengths and tables.
"""
from __future__ import annotations

from collections.abc import Callable

from mindspore import Tensor
from mindspore import ops as msops


def _rope(attrs: dict[str, object]) -> Callable[..., tuple]:
    from ._custom import primitive

    rope_grad = primitive("rope_grad", mode="vjp")

    def rope_bprop(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, q_seq_len: Tensor, out: tuple, dout: tuple
                   ) -> tuple[Tensor, ...]:
        dq, dk = rope_grad(dout[0], dout[1], cos, sin, q_seq_len)
        return dq, dk, msops.zeros_like(cos), msops.zeros_like(sin), msops.zeros_like(q_seq_len)

    return rope_bprop


def _cla_gate_merge(attrs: dict[str, object]) -> Callable[..., tuple]:
    from ._custom import primitive

    backward = primitive("cla_gate_backward", input_attn_layout="TND")

    def cla_gate_merge_bprop(global_attn: Tensor, local_attn: Tensor, global_gate_logits: Tensor,
                             local_gate_logits: Tensor, out: Tensor, dout: Tensor) -> tuple[Tensor, ...]:
        return backward(dout, global_attn, local_attn, global_gate_logits, local_gate_logits)

    return cla_gate_merge_bprop


def _sparse_flash_attention(attrs: dict[str, object]) -> Callable[..., tuple]:
    from ._custom import primitive

    grad = primitive("sparse_flash_attention_grad", **attrs)

    def sparse_flash_attention_bprop(query: Tensor, key: Tensor, value: Tensor, sparse_indices: Tensor,
                                     query_rope: Tensor, key_rope: Tensor, lens_q: Tensor, lens_kv: Tensor,
                                     out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        # The statistics (out[1], out[2]) carry no gradient: only dout[0] is used. An absent
        # value/rope input gets its absent (zero-size) gradient; with value absent d_key is the
        # fused dK + dV.
        dq, dk, dv, dqr, dkr = grad(query, key, value, sparse_indices, dout[0], out[0], out[1], out[2], lens_q,
                                    lens_kv, query_rope, key_rope)
        return (dq, dk, dv, msops.zeros_like(sparse_indices), dqr, dkr, msops.zeros_like(lens_q),
                msops.zeros_like(lens_kv))

    return sparse_flash_attention_bprop


def _lightning_indexer(attrs: dict[str, object]) -> Callable[..., tuple]:
    def lightning_indexer_bprop(query_index: Tensor, key_index: Tensor, weights: Tensor, lens_q: Tensor,
                                lens_k: Tensor, out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        raise RuntimeError("lightning_indexer has no gradient (top-k selection is not differentiable): wrap its "
                           "outputs in mindspore.ops.stop_gradient (nn.LightningIndexer does) and train the indexer "
                           "with nn.IndexerKLLoss")

    return lightning_indexer_bprop


_BPROPS: dict[str, Callable[[dict[str, object]], Callable[..., tuple]]] = {
    "rope": _rope,
    "cla_gate_merge": _cla_gate_merge,
    "sparse_flash_attention": _sparse_flash_attention,
    "lightning_indexer": _lightning_indexer,
}


def bprop_of(name: str, attrs: dict[str, object]) -> Callable[..., tuple] | None:
    """The bprop of the primitive of op ``name`` with attribute values ``attrs``, or None (the
    grad ops themselves and the indexer loss, whose Cell supplies its own)."""
    factory = _BPROPS.get(name)
    return factory(attrs) if factory is not None else None
