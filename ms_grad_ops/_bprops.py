"""The backward of each differentiable forward primitive: our fused grad kernel.

``_custom`` attaches ``bprop_of(name, grad)`` to the ``ops.Custom`` it builds, handing in the
primitive of the grad op that ``grad_op`` names (this module builds no primitive and imports no
other module of the package but the op table and its generated bprops), so ``ms.grad`` works
through the functional ops and the Cells alike, in PyNative and GRAPH mode. The pairing (grad op,
its attributes, the wiring of inputs and gradients) is the table's ``DERIVATIVES``
(``_specs.py``); the bprops are generated from it into ``_bprop_table.py``.
"""
from __future__ import annotations

from collections.abc import Callable

from ._bprop_table import BPROP_FACTORIES, NO_GRADIENT_BPROPS
from ._specs import DERIVATIVES


def grad_op(name: str, attrs: dict[str, object]) -> tuple[str, dict[str, object]] | None:
    """The grad op of forward op ``name`` and its attribute values for the forward's ``attrs``
    (copied by name or fixed, as the table says; the grad's other attributes keep their defaults),
    or None for an op without a gradient. The caller builds that primitive for :func:`bprop_of`."""
    pairing = DERIVATIVES.get(name)
    if pairing is None:
        return None
    return pairing.grad, {**{n: attrs[n] for n in pairing.copied_attrs}, **pairing.fixed_attrs}


def bprop_of(name: str, grad: Callable[..., tuple] | None) -> Callable[..., tuple]:
    """The bprop of the primitive of op ``name``: our fused grad kernel ``grad`` (the primitive of
    :func:`grad_op`), or for an op without a gradient (a backward op itself, the indexer's KL
    loss; ``grad`` None) one that raises a RuntimeError saying why."""
    factory = BPROP_FACTORIES.get(name)
    if factory is None:
        return NO_GRADIENT_BPROPS[name]
    if grad is None:
        raise ValueError(f"{name}: its bprop needs the primitive of {DERIVATIVES[name].grad}")
    return factory(grad)
