"""Element-wise ops without a CPU kernel: ``Swiglu`` (the MoE experts' activation) and
``FmodScalar`` (mindformers' token permutation), composites of ops with CPU kernels; autodiff
gives the gradients."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor, ops
from mindspore.ops import constexpr
from mindspore.ops import operations as P

from ._standin import PrimitiveStandIn, upcast

_FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)


@constexpr
def _check_swiglu(shape: tuple, dim: int) -> int:
    if not -len(shape) <= dim < len(shape):
        raise ValueError(f"Swiglu: dim {dim} is out of range for an input of shape {shape}")
    dim %= len(shape)
    if shape[dim] % 2:
        raise ValueError(f"Swiglu: the size of dim {dim} of {shape} must be even")
    return dim


@ms.jit_class
class Swiglu(PrimitiveStandIn):
    """``Swiglu()(input, dim=-1)``: ``a * sigmoid(a) * b`` with ``a``, ``b`` the first and second
    halves of ``input`` along ``dim``; computed in float32, returned in ``input``'s dtype."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
        axis = _check_swiglu(input.shape, dim)
        a, b = ops.split(upcast(input), input.shape[axis] // 2, axis)
        return (a * ops.sigmoid(a) * b).astype(input.dtype)


def swiglu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """``mindspore.ops.swiglu`` on :class:`Swiglu`."""
    return Swiglu()(input, dim)


@ms.jit_class
class FmodScalar(PrimitiveStandIn):
    """``FmodScalar()(input, other)``: the remainder of ``input / other`` with the sign of ``input``
    (C's ``fmod``; integer inputs stay integer, a float ``other`` makes the result float32),
    16-bit floats computed in float32 and returned in their dtype."""

    def __init__(self) -> None:
        pass

    def __call__(self, input: Tensor, other: float) -> Tensor:  # noqa: A002
        if isinstance(other, float) and input.dtype not in _FLOATS:
            return P.Mod()(input.astype(ms.float32), ops.scalar_to_tensor(other, ms.float32))
        x = upcast(input)
        return P.Mod()(x, ops.scalar_to_tensor(other, x.dtype)).astype(input.dtype)
