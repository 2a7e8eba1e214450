"""``Swiglu`` and ``FmodScalar`` on CPU (ms_grad_ops.cpu_gaps.elementwise) against the float64
reference, PyNative and GRAPH, float32/float16/bfloat16 (and integers for fmod)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, random, upstream
from _util import DTYPES, MS_DTYPES, assert_close, to_np
from mindspore import Tensor, ops
from mindspore.ops import auto_generate as gen

from ms_grad_ops.reference import cpu_gaps as ref


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 1])
def test_swiglu(exec_mode: str, dtype: str, dim: int) -> None:
    rng = np.random.default_rng(dim + 2)
    x = random(rng, (3, 4, 10), dtype, 2.0)
    got = forward(ops.swiglu, Tensor(x.astype(np.float32), MS_DTYPES[dtype]), dim)
    assert got.dtype == MS_DTYPES[dtype]
    assert_close(to_np(got), ref.swiglu(x, dim), dtype)

    def swiglu(a: Tensor) -> Tensor:
        return gen.Swiglu()(a, dim)

    dy = random(rng, got.shape, dtype)
    (dx,), (ux,) = upstream(swiglu, [x], [], dtype, dy)
    assert_close(dx, ref.swiglu_vjp(x, dy, dim), dtype, what="dx")
    assert_close(ux, ref.swiglu_vjp(x, dy, dim) * x, dtype, what="upstream")


def test_swiglu_odd_size() -> None:
    with pytest.raises(ValueError, match=r"Swiglu: the size of dim 1 of \(2, 5\) must be even"):
        forward(gen.Swiglu(), Tensor(np.ones((2, 5), np.float32)))


@pytest.mark.parametrize(("values", "other"), [
    (np.array([-7, 7, 5, -5, 0, 12], np.int64), 3),  # mindformers: expert slot -> token, int by int
    (np.array([-7, 7, 5, -5, 0, 12], np.int32), -4),
    (np.array([-7.5, 7.25, 5.0, -0.5, 3.0], np.float32), 2.0),
    (np.array([-7, 7, 5], np.int32), 2.5),  # a float divisor makes the result float32
])
def test_fmod_scalar(exec_mode: str, values: np.ndarray, other: float) -> None:
    got = forward(gen.FmodScalar(), Tensor(values), other)
    want = ref.fmod(values.astype(np.float64), other)
    assert got.dtype == (ms.float32 if isinstance(other, float) else ms.tensor(values).dtype)
    assert np.array_equal(got.asnumpy().astype(np.float64), want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fmod_scalar_half(exec_mode: str, dtype: str) -> None:
    x = np.array([-7.5, 7.25, 5.0, -0.5, 3.0])
    got = forward(gen.FmodScalar(), Tensor(x.astype(np.float32), MS_DTYPES[dtype]), 2.0)
    assert got.dtype == MS_DTYPES[dtype] and np.array_equal(to_np(got), ref.fmod(x, 2.0))
