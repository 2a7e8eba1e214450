"""The backward of each differentiable forward primitive: our fused grad kernel.

``_custom`` attaches ``bprop_of(name, grad)`` to the ``ops.Custom`` it builds, handing in the
primitive of the grad op that ``grad_op`` names (this module builds no primitive and imports no
other module of the package but the op table), so ``ms.grad`` works through the functional ops and
the Cells alike, in PyNative and GRAPH mode. Every input is
a tensor (absent optional inputs are placeholders, ``ms_grad_ops/_optional.py``), so each bprop returns one
fixed structure: one gradient per input, zeros for indices, lengths and tables. The other ops get
a bprop that raises a RuntimeError saying why they have no gradient (instead of MindSpore's
"Illegal primitive Custom's bprop not defined").
"""
from __future__ import annotations

import functools
import linecache
from collections.abc import Callable
from dataclasses import dataclass

from mindspore import Tensor
from mindspore import ops as msops

from ._specs import OP_SPECS


def _rope(rope_grad: Callable[..., tuple]) -> Callable[..., tuple]:
    def rope_bprop(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, q_seq_len: Tensor, out: tuple, dout: tuple
                   ) -> tuple[Tensor, ...]:
        dq, dk = rope_grad(dout[0], dout[1], cos, sin, q_seq_len)
        return dq, dk, msops.zeros_like(cos), msops.zeros_like(sin), msops.zeros_like(q_seq_len)

    return rope_bprop


def _cla_gate_merge(backward: Callable[..., tuple]) -> Callable[..., tuple]:
    def cla_gate_merge_bprop(global_attn: Tensor, local_attn: Tensor, global_gate_logits: Tensor,
                             local_gate_logits: Tensor, out: Tensor, dout: Tensor) -> tuple[Tensor, ...]:
        return backward(dout, global_attn, local_attn, global_gate_logits, local_gate_logits)

    return cla_gate_merge_bprop


def _sparse_flash_attention(grad: Callable[..., tuple]) -> Callable[..., tuple]:
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


def _lightning_indexer(grad: Callable[..., tuple]) -> Callable[..., tuple]:
    def lightning_indexer_bprop(query_index: Tensor, key_index: Tensor, weights: Tensor, lens_q: Tensor,
                                lens_k: Tensor, out: tuple, dout: tuple) -> tuple[Tensor, ...]:
        # Only the values carry a gradient (dout[1]); the selected indices (out[0]) say which keys
        # it flows to. -1 slots are skipped by the kernel, so their -inf values never matter.
        dqi, dki, dw = grad(query_index, key_index, weights, out[0], dout[1], lens_q, lens_k)
        return dqi, dki, dw, msops.zeros_like(lens_q), msops.zeros_like(lens_k)

    return lightning_indexer_bprop


def _no_gradient(name: str, reason: str) -> Callable[..., tuple]:
    """A bprop that says why op ``name`` has no gradient, instead of MindSpore's "Illegal primitive
    Custom's bprop not defined". GRAPH mode parses a bprop's source and needs its exact parameter
    list (no ``*args``): one input parameter per input of the op in ``OP_SPECS``, then out, dout."""
    n_inputs = len(OP_SPECS[name].inputs)
    return _no_gradient_factory(n_inputs)(f"{name} has no gradient: {reason}")


@functools.cache
def _no_gradient_factory(n_inputs: int) -> Callable[[str], Callable[..., tuple]]:
    # The source is registered in linecache under a file name of its own, so inspect.getsource
    # (which MindSpore's GRAPH-mode parser uses) finds it as it finds a function of a file.
    params = "".join(f"i{i}, " for i in range(n_inputs))
    source = (f"def make(message):\n"
              f"    def no_gradient_bprop_{n_inputs}({params}out, dout):\n"
              f"        raise RuntimeError(message)\n"
              f"    return no_gradient_bprop_{n_inputs}\n")
    filename = f"<ms_grad_ops._bprops.no_gradient_bprop_{n_inputs}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, object] = {"__name__": __name__}  # the module MindSpore resolves names in
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - a fixed template, n_inputs is an int
    return namespace["make"]  # type: ignore[return-value]


# Why the other ops have no gradient of their own.
_NO_GRADIENT = {
    "sparse_lightning_indexer_grad_kl_loss": "it returns the loss together with its gradients; use "
                                             "nn.IndexerKLLoss, whose backward scales them by the incoming gradient",
}


@dataclass(frozen=True)
class _GradPairing:
    """The fused grad kernel of a forward op: its op name, its attributes from the forward's, and
    the bprop factory that receives its primitive."""

    grad: str
    grad_attrs: Callable[[dict[str, object]], dict[str, object]]
    bprop: Callable[[Callable[..., tuple]], Callable[..., tuple]]


_PAIRINGS: dict[str, _GradPairing] = {
    "rope": _GradPairing("rope_grad", lambda attrs: {"mode": "vjp"}, _rope),
    "cla_gate_merge": _GradPairing("cla_gate_backward", lambda attrs: {"input_attn_layout": "TND"}, _cla_gate_merge),
    "sparse_flash_attention": _GradPairing("sparse_flash_attention_grad", dict, _sparse_flash_attention),
    "lightning_indexer": _GradPairing(
        "lightning_indexer_grad", lambda attrs: {"layout": attrs["layout"], "sparse_mode": attrs["sparse_mode"]},
        _lightning_indexer),
}


def grad_op(name: str, attrs: dict[str, object]) -> tuple[str, dict[str, object]] | None:
    """The grad op of forward op ``name`` and its attribute values for the forward's ``attrs``,
    or None for an op without a gradient. The caller builds that primitive for :func:`bprop_of`."""
    pairing = _PAIRINGS.get(name)
    return None if pairing is None else (pairing.grad, pairing.grad_attrs(attrs))


def bprop_of(name: str, grad: Callable[..., tuple] | None) -> Callable[..., tuple]:
    """The bprop of the primitive of op ``name``: our fused grad kernel ``grad`` (the primitive of
    :func:`grad_op`), or for an op without a gradient (a backward op itself, the indexer's KL
    loss; ``grad`` None) one that raises a RuntimeError saying why."""
    pairing = _PAIRINGS.get(name)
    if pairing is not None:
        if grad is None:
            raise ValueError(f"{name}: its bprop needs the primitive of {pairing.grad}")
        return pairing.bprop(grad)
    reason = _NO_GRADIENT.get(name, "it is a backward op itself; differentiate the forward op or its nn Cell instead")
    return _no_gradient(name, reason)
