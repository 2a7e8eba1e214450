"""Harness of the tests of ``ms_grad_ops.cpu_gaps``: a stand-in called the way users call it, its
gradient taken through parameters in front of it.

``forward(fn, *args)`` runs ``fn`` inside a Cell (a compiled graph in GRAPH mode). ``upstream``
computes ``loss = sum(fn(*(x_i * w_i as dtype), *rest).astype(float32) * dy)`` with ``w_i``
float32 Parameters of ones standing for the layers in front, and returns the gradients with
respect to the float32 inputs ``x_i`` and to the parameters ``w_i`` (``dx_i * x_i``).
"""
from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
from _util import MS_DTYPES, Fn, quantize, to_np
from mindspore import Parameter, ParameterTuple, Tensor, nn


def random(rng: np.random.Generator, shape: tuple, dtype: str, scale: float = 1.0) -> np.ndarray:
    """Normal values exact in ``dtype`` (as float64)."""
    return quantize(rng.standard_normal(shape) * scale, dtype)


def forward(fn: Callable[..., object], *args: object) -> object:
    """``fn(*args)`` in a Cell: compiled in GRAPH mode, eager in PyNative."""
    return Fn(fn)(*args)


class _Upstream(nn.Cell):
    def __init__(self, fn: Callable[..., object], shapes: list[tuple], dtype: ms.dtype, n_float: int) -> None:
        super().__init__()
        self.fn = fn
        self.dtype = dtype
        self.n_float = n_float
        self.ws = ParameterTuple([Parameter(Tensor(np.ones(s, np.float32)), name=f"w{i}")
                                  for i, s in enumerate(shapes)])

    def construct(self, dy: Tensor, *args: object) -> Tensor:
        xs = [(args[i] * self.ws[i]).astype(self.dtype) for i in range(self.n_float)]
        out = self.fn(*xs, *args[self.n_float:])
        return (out.astype(ms.float32) * dy).sum()


def upstream(fn: Callable[..., Tensor], floats: list[np.ndarray], rest: list[object], dtype: str, dy: np.ndarray
             ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(gradients w.r.t. the float inputs, gradients w.r.t. the parameters in front of them)."""
    net = _Upstream(fn, [f.shape for f in floats], MS_DTYPES[dtype], len(floats))
    xs = [Tensor(f.astype(np.float32)) for f in floats]
    n = len(floats)
    grad = ms.grad(net, grad_position=tuple(range(1, n + 1)), weights=net.ws)
    g_inputs, g_weights = grad(Tensor(dy.astype(np.float32)), *xs, *rest)
    g_inputs = (g_inputs,) if isinstance(g_inputs, Tensor) else g_inputs  # one position: not a tuple
    return [to_np(g) for g in g_inputs], [to_np(g) for g in g_weights]
