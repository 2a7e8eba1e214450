"""``RmsNorm`` (``ops.rms_norm``) on CPU: a composite of ops with CPU kernels; autodiff gives the
gradient."""
from __future__ import annotations

import mindspore as ms
from mindspore import Tensor

from ._standin import PrimitiveStandIn, upcast


@ms.jit_class
class RmsNorm(PrimitiveStandIn):
    """``RmsNorm(epsilon)(x, gamma) -> (y, rstd)``, MindSpore's semantics: the mean of squares is
    taken over the last ``gamma.ndim`` dimensions of ``x``;
    ``rstd = 1 / sqrt(mean(x^2) + epsilon)`` (float32, shape ``x.shape[:-gamma.ndim] + (1,) *
    gamma.ndim``); ``y = x * rstd * gamma`` in ``x``'s dtype. float16/bfloat16/float32 ``x`` and
    ``gamma``, computed in float32."""

    def __init__(self, epsilon: float = 1e-6) -> None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon <= 1:
            raise ValueError(f"RmsNorm: epsilon must be a float in (0, 1], got {epsilon!r}")
        self.epsilon = float(epsilon)

    def __call__(self, x: Tensor, gamma: Tensor) -> tuple[Tensor, Tensor]:
        axes = tuple(range(x.ndim - gamma.ndim, x.ndim))
        x32 = upcast(x)
        rstd = ((x32 * x32).mean(axes, keep_dims=True) + self.epsilon).rsqrt()
        y = x32 * rstd * upcast(gamma)
        return y.astype(x.dtype), rstd


def rms_norm(x: Tensor, gamma: Tensor, epsilon: float = 1e-6) -> tuple[Tensor, Tensor]:
    """``mindspore.ops.rms_norm`` on :class:`RmsNorm`."""
    return RmsNorm(epsilon)(x, gamma)
