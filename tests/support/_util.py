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


# Unit roundoff u of each storage dtype (half an ulp of 1.0): a round-to-nearest-even store of x
# errs by at most u * |x|.
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def sum_error_bound(n_terms: int, magnitude: np.ndarray | float, dtype: str = "float32",
                    value: np.ndarray | float = 0.0) -> np.ndarray:
    """Largest ``|computed - exact|`` of a value the kernels form as a float32 sum of ``n_terms``
    products (a dot product, or nested sums with ``n_terms`` the total nesting length), in any
    order and blocking, with or without FMA, then stored as ``dtype``: elementwise
    ``(1 + u_dtype) * gamma_n * magnitude + u_dtype * |value| + n_terms * tiny``, where
    ``gamma_n = n u / (1 - n u)`` with u of float32 (Higham, Accuracy and Stability of Numerical
    Algorithms, eq. 3.5 and Lemma 3.1), ``magnitude`` is the float64 sum of the terms' absolute
    values, ``value`` the exact result and ``tiny`` the smallest normal float32 (flushed
    denormals: oneDNN's bf16 dot instructions run with DAZ/FTZ).

    Inputs must be exact in their dtype (the tests quantize them). The bound holds on every path
    of every CPU (oneDNN sgemm or bf16 matmul on AVX2, AVX-512, AVX512-BF16 or AMX, MGO_CPU_ISA
    caps, any thread count) and for the Ascend twin: a comparison with the float64 reference at
    this bound cannot depend on the machine, and two implementations that both meet it agree
    within twice it. Use it where implementations differ only in summation order; it is not a
    bound for kernels that round intermediates to a 16-bit dtype."""
    u = UNIT_ROUNDOFF["float32"]
    nu = n_terms * u
    if not 0 <= nu < 0.5:
        raise ValueError(f"sum_error_bound: {n_terms} terms is outside the bound's range")
    u_out = UNIT_ROUNDOFF[dtype]
    tiny = float(np.finfo(np.float32).tiny)
    return (1 + u_out) * nu / (1 - nu) * np.abs(magnitude) + u_out * np.abs(value) + n_terms * tiny


def sum_error_rms(n_terms: int, magnitude: np.ndarray) -> float:
    """Bound on the root-sum-square of the errors of many values like those of
    :func:`sum_error_bound` (float32 sums of ``n_terms`` terms, ``magnitude`` the sums of the terms'
    absolute values; outputs kept in float32): ``sqrt(n) * u * ||magnitude||_2``. Independent
    roundings add in quadrature (Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019: the error of
    an n-term sum grows like sqrt(n) u, not n u), so this holds for the aggregate of many values
    however the sums are ordered, with a wide margin (measured: 0.002 to 0.05 of it on AVX2, the
    Ascend twin in its order). It is far tighter than the worst case and catches a lost precision
    (an intermediate rounded to 16 bits) that the worst-case bound lets through."""
    return float(np.sqrt(n_terms) * UNIT_ROUNDOFF["float32"] * np.linalg.norm(np.asarray(magnitude, np.float64)))


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


def rel_l2(got: np.ndarray, ref: np.ndarray, scale: float = 0.0) -> float:
    """||got - ref|| / max(||ref||, scale) (absolute norm when both are zero). ``scale``: a larger
    norm to measure against, e.g. the magnitude of the terms a sum cancels
    (``_dsa_oracle.term_magnitude``)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    den = max(np.linalg.norm(ref), scale)
    num = np.linalg.norm(got - ref)
    return float(num / den) if den > 0 else float(num)


def assert_close(got: np.ndarray, ref: np.ndarray, dtype: str, family: str = "elementwise", what: str = "") -> None:
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite values in the kernel output"
    err = rel_l2(got, ref)
    tol = TOLERANCES[family][dtype]
    assert err <= tol, f"{what}: relative L2 error {err:.3g} > {tol:g} ({dtype})"


def assert_within(got: np.ndarray, ref: np.ndarray, bound: np.ndarray, what: str = "") -> None:
    """``|got - ref| <= bound`` elementwise (shapes equal, ``got`` finite), naming the worst element."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite values in the kernel output"
    excess = np.abs(got - ref) - np.broadcast_to(bound, ref.shape)
    i = np.unravel_index(np.argmax(excess), ref.shape) if ref.size else ()
    assert not ref.size or excess[i] <= 0, (f"{what}: |{got[i]:.9g} - {ref[i]:.9g}| at {tuple(int(j) for j in i)} "
                                            f"exceeds its bound {np.broadcast_to(bound, ref.shape)[i]:.3g}")


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
