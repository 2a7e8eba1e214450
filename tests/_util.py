"""Helpers shared by the tests: dtype round trips, error metrics, tolerances, graph wrappers."""
from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

DTYPES = ("float32", "float16", "bfloat16")
MS_DTYPES = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}

# Relative L2 error bounds against the float64 reference, per op family (from the issues).
TOLERANCES = {
    "elementwise": {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3},
    "attention": {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2},
}


def quantize(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` (round-to-nearest-even), returned as float64."""
    x32 = np.asarray(x, np.float32)
    if dtype == "float32":
        return x32.astype(np.float64)
    if dtype == "float16":
        return x32.astype(np.float16).astype(np.float64)
    u = x32.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def to_ms(x: np.ndarray, dtype: str) -> Tensor:
    """A MindSpore tensor of ``dtype`` holding ``x`` (float inputs go through float32)."""
    return Tensor(np.asarray(x, np.float32), MS_DTYPES[dtype])


def to_np(t: Tensor) -> np.ndarray:
    """Tensor values as float64 (bfloat16 included)."""
    a = t.asnumpy()
    return a.astype(np.float32).astype(np.float64) if a.dtype.kind not in "fiub" or a.dtype.itemsize == 2 \
        else a.astype(np.float64)


def rel_l2(got: np.ndarray, ref: np.ndarray) -> float:
    """||got - ref|| / ||ref|| (absolute norm when ref is all zero)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    den = np.linalg.norm(ref)
    num = np.linalg.norm(got - ref)
    return float(num / den) if den > 0 else float(num)


def assert_close(got: np.ndarray, ref: np.ndarray, dtype: str, family: str = "elementwise", what: str = "") -> None:
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite values in the kernel output"
    err = rel_l2(got, ref)
    tol = TOLERANCES[family][dtype]
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > {tol:g} ({dtype})"


class Fn(nn.Cell):
    """Wraps a function so it runs inside a compiled graph in GRAPH mode."""

    def __init__(self, fn: Callable[..., object]) -> None:
        super().__init__()
        self.fn = fn

    def construct(self, *args: object) -> object:
        return self.fn(*args)


class OpCell(nn.Cell):
    """``op(*tensors, **kwargs)`` inside a compiled graph: the tensors are graph inputs, the keyword
    arguments (attributes, Python lengths, None) constants."""

    def __init__(self, op: Callable[..., object], kwargs: dict) -> None:
        super().__init__()
        self.op = op
        self.kw = kwargs

    def construct(self, *tensors: object) -> object:
        return self.op(*tensors, **self.kw)
