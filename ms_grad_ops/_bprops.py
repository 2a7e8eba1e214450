"""The backward of each differentiable forward primitive: our fused grad kernel.

``_custom`` attaches ``bprop_of(name, attrs)`` to the ``ops.Custom`` it builds, so ``ms.grad``
works through the functional ops and the Cells alike, in PyNative and GRAPH mode. Every input is
a tensor (absent optional inputs are placeholders, ``ops/_optional.py``), so each bprop returns one
fixed structure: one gradient per input, zeros for indices, lengths and tables. The other ops get
a bprop that raises a RuntimeError saying why they have no gradient (instead of MindSpore's
"Illegal primitive Custom's bprop not defined").
"""
from __future__ import annotations

from collections.abc import Callable

from mindspore import Tensor
from mindspore import ops as msops

from ._specs import OP_SPECS


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
    from ._custom import primitive

    grad = primitive("lightning_indexer_grad", layout=attrs["layout"], sparse_mode=attrs["sparse_mode"])

    def lightning_indexer_bprop(query_index: Tensor, key_index: Tensor, weights: Tensor, lens_q: Tensor,
                                lens_k: Tensor, out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        # Only the values carry a gradient (dout[1]); the selected indices (out[0]) say which keys
        # it flows to. -1 slots are skipped by the kernel, so their -inf values never matter.
        dqi, dki, dw = grad(query_index, key_index, weights, out[0], dout[1], lens_q, lens_k)
        return dqi, dki, dw, msops.zeros_like(lens_q), msops.zeros_like(lens_k)

    return lightning_indexer_bprop


def _no_gradient(name: str, reason: str, n_inputs: int) -> Callable[..., tuple]:
    """A bprop that says why op ``name`` (``n_inputs`` inputs) has no gradient, instead of
    MindSpore's "Illegal primitive Custom's bprop not defined". GRAPH mode needs the exact
    parameter list (no ``*args``), hence one function per input count the ops have."""
    message = f"{name} has no gradient: {reason}"

    def no_gradient_bprop_5(i0: Tensor, i1: Tensor, i2: Tensor, i3: Tensor, i4: Tensor, out: object,
                            dout: object) -> tuple[Tensor, ...]:
        raise RuntimeError(message)

    def no_gradient_bprop_7(i0: Tensor, i1: Tensor, i2: Tensor, i3: Tensor, i4: Tensor, i5: Tensor, i6: Tensor,
                            out: object, dout: object) -> tuple[Tensor, ...]:
        raise RuntimeError(message)

    def no_gradient_bprop_12(i0: Tensor, i1: Tensor, i2: Tensor, i3: Tensor, i4: Tensor, i5: Tensor, i6: Tensor,
                             i7: Tensor, i8: Tensor, i9: Tensor, i10: Tensor, i11: Tensor, out: object,
                             dout: object) -> tuple[Tensor, ...]:
        raise RuntimeError(message)

    return {5: no_gradient_bprop_5, 7: no_gradient_bprop_7, 12: no_gradient_bprop_12}[n_inputs]


# Why the other ops have no gradient of their own.
_NO_GRADIENT = {
    "sparse_lightning_indexer_grad_kl_loss": "it returns the loss together with its gradients; use "
                                             "nn.IndexerKLLoss, whose backward scales them by the incoming gradient",
}


_BPROPS: dict[str, Callable[[dict[str, object]], Callable[..., tuple]]] = {
    "rope": _rope,
    "cla_gate_merge": _cla_gate_merge,
    "sparse_flash_attention": _sparse_flash_attention,
    "lightning_indexer": _lightning_indexer,
}


def bprop_of(name: str, attrs: dict[str, object]) -> Callable[..., tuple]:
    """The bprop of the primitive of op ``name`` with attribute values ``attrs``: our fused grad
    kernel, or for an op without a gradient (a backward op itself, the indexer's KL loss) one that
    raises a RuntimeError saying why."""
    factory = _BPROPS.get(name)
    if factory is not None:
        return factory(attrs)
    reason = _NO_GRADIENT.get(name, "it is a backward op itself; differentiate the forward op or its nn Cell instead")
    return _no_gradient(name, reason, len(OP_SPECS[name].inputs))
