"""``TopkExt``, ``SortExt`` and ``CumsumExt`` on CPU (ms_grad_ops.cpu_gaps.sorting) against the
float64 reference: values, int64 indices with ties in ascending index order, gradients through
parameters in front, PyNative and GRAPH, float32/float16/bfloat16 (and integers)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, random, upstream
from _util import DTYPES, MS_DTYPES, assert_close, quantize, to_np
from mindspore import Tensor, mint
from mindspore.ops import auto_generate as gen

from ms_grad_ops.reference import cpu_gaps as ref


def _with_ties(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """Values from a small set (many ties), exact in ``dtype``."""
    return quantize(rng.integers(-3, 4, shape) * 0.75 + rng.standard_normal(shape) * (rng.random(shape) < 0.3), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("k", "dim", "largest"), [(3, -1, True), (2, 0, False), (5, 1, True)])
def test_topk_ext(exec_mode: str, dtype: str, k: int, dim: int, largest: bool) -> None:
    rng = np.random.default_rng(k)
    x = _with_ties(rng, (4, 6, 5), dtype)
    values, indices = forward(mint.topk, Tensor(x.astype(np.float32), MS_DTYPES[dtype]), k, dim, largest)
    want_values, want_indices = ref.topk(x, k, dim, largest)
    assert values.dtype == MS_DTYPES[dtype] and indices.dtype == ms.int64
    assert np.array_equal(indices.asnumpy(), want_indices)
    assert np.array_equal(to_np(values), want_values)

    def topk_values(a: Tensor) -> Tensor:
        return gen.TopkExt()(a, k, dim, largest)[0]

    dy = random(rng, want_values.shape, dtype)
    (dx,), (ux,) = upstream(topk_values, [x], [], dtype, dy)
    want_dx = ref.take_along_vjp(x.shape, want_indices, dim, dy)
    assert np.array_equal(dx, want_dx)
    assert_close(ux, want_dx * x, dtype, what="upstream")


def test_topk_ext_integers_and_errors() -> None:
    x = np.array([[3, 1, 3, 2], [0, 5, 5, 5]], np.int32)
    values, indices = forward(gen.TopkExt(), Tensor(x), 2)
    assert values.dtype == ms.int32 and np.array_equal(values.asnumpy(), [[3, 3], [5, 5]])
    assert np.array_equal(indices.asnumpy(), [[0, 2], [1, 2]])
    with pytest.raises(ValueError, match=r"TopkExt: k must be in \[0, 4\]"):
        forward(gen.TopkExt(), Tensor(x), 5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("dim", "descending"), [(-1, False), (0, True)])
def test_sort_ext(exec_mode: str, dtype: str, dim: int, descending: bool) -> None:
    rng = np.random.default_rng(int(descending))
    x = _with_ties(rng, (5, 7), dtype)

    def sort(a: Tensor) -> tuple:
        return mint.sort(a, dim=dim, descending=descending)

    values, indices = forward(sort, Tensor(x.astype(np.float32), MS_DTYPES[dtype]))
    want_values, want_indices = ref.sort(x, dim, descending)
    assert values.dtype == MS_DTYPES[dtype] and indices.dtype == ms.int64
    assert np.array_equal(indices.asnumpy(), want_indices)
    assert np.array_equal(to_np(values), want_values)

    def sort_values(a: Tensor) -> Tensor:
        return gen.SortExt()(a, dim, descending)[0]

    dy = random(rng, x.shape, dtype)
    (dx,), _ = upstream(sort_values, [x], [], dtype, dy)
    assert np.array_equal(dx, ref.take_along_vjp(x.shape, want_indices, dim, dy))


def test_sort_ext_integers_stable() -> None:
    """mindformers sorts expert ids (as float32 and int): equal keys keep their order."""
    x = np.random.default_rng(0).integers(0, 4, (2, 300)).astype(np.int64)
    values, indices = forward(gen.SortExt(), Tensor(x), -1, False, True)
    want_values, want_indices = ref.sort(x)
    assert values.dtype == ms.int64 and np.array_equal(values.asnumpy(), want_values)
    assert np.array_equal(indices.asnumpy(), want_indices)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, -1])
def test_cumsum_ext(exec_mode: str, dtype: str, dim: int) -> None:
    rng = np.random.default_rng(dim + 7)
    x = random(rng, (6, 9), dtype)
    got = forward(mint.cumsum, Tensor(x.astype(np.float32), MS_DTYPES[dtype]), dim)
    assert got.dtype == MS_DTYPES[dtype]
    assert_close(to_np(got), ref.cumsum(x, dim), dtype)

    def cumsum(a: Tensor) -> Tensor:
        return gen.CumsumExt()(a, dim)

    dy = random(rng, x.shape, dtype)
    (dx,), (ux,) = upstream(cumsum, [x], [], dtype, dy)
    assert_close(dx, ref.cumsum_vjp(dy, dim), dtype, what="dx")
    assert_close(ux, ref.cumsum_vjp(dy, dim) * x, dtype, what="upstream")


def test_cumsum_ext_dtypes() -> None:
    """Integer sums (mindformers' tokens per expert), ``dtype`` casting first, bool needs ``dtype``."""
    counts = np.array([[3, 0, 2], [1, 4, 0]], np.int32)
    got = forward(gen.CumsumExt(), Tensor(counts), 1)
    assert got.dtype == ms.int32 and np.array_equal(got.asnumpy(), np.cumsum(counts, 1))
    got = forward(gen.CumsumExt(), Tensor(counts), 0, ms.int64)
    assert got.dtype == ms.int64 and np.array_equal(got.asnumpy(), np.cumsum(counts, 0))
    got = forward(gen.CumsumExt(), Tensor(counts > 0), 1, ms.float32)
    assert got.dtype == ms.float32 and np.array_equal(got.asnumpy(), np.cumsum(counts > 0, 1))
    with pytest.raises(TypeError, match="CumsumExt: a bool input needs 'dtype'"):
        forward(gen.CumsumExt(), Tensor(counts > 0), 1)
