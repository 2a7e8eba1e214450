"""``mint.arange``, ``mint.full``, ``mint.ones_like``, ``mint.zeros_like`` on CPU
(ms_grad_ops.cpu_gaps.creation) against NumPy float64, PyNative (the stand-ins) and GRAPH (MindSpore's
own, which the stand-ins call there), on fresh random sizes and values; without the stand-ins
PyNative has no kernel for them (nor for ``mint.stack``/``mint.roll``: test_gap_joining.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, upstream
from _util import DTYPES, MS_DTYPES, quantize, to_np
from mindspore import Tensor, mint


@pytest.fixture
def rng() -> np.random.Generator:
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed {seed}")  # shown when a test fails
    return np.random.default_rng(seed)


# MindSpore's error for one call in a fresh process: a missing kernel's error in PyNative also
# surfaces on the next ops of the process, so each is probed alone.
_PROBE = """
import mindspore as ms, numpy as np
from mindspore import mint, Tensor
ms.set_device("CPU")
x = Tensor(np.ones((2, 3), np.float32))
try:
    ({call}).asnumpy()
    print("RAN")
except RuntimeError as e:
    print(str(e).splitlines()[0])
"""


def mindspore_alone(call: str) -> str:
    """The first line of what MindSpore (without ms_grad_ops) says to ``call`` in PyNative on CPU."""
    done = subprocess.run([sys.executable, "-c", _PROBE.format(call=call)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("call", "kernel"), [
    ("mint.arange(4)", "Arange"), ("mint.full((2,), 1.0)", "FillScalar"), ("mint.ones_like(x)", "OnesLikeExt"),
    ("mint.zeros_like(x)", "ZerosLikeExt"), ("mint.stack([x, x])", "StackExt"), ("mint.roll(x, 1, 0)", "Roll")])
def test_mindspore_pynative_lacks_the_kernel(call: str, kernel: str) -> None:
    """What the stand-ins are for (when MindSpore gains a kernel, this test says so)."""
    assert mindspore_alone(call) == f"The kernel {kernel} unregistered."


def _arange_cases(rng: np.random.Generator) -> list[tuple]:
    """Integer and float ranges (a float ``end`` half a step past the last value: the count is not
    a matter of rounding)."""
    start, n = int(rng.integers(-20, 20)), int(rng.integers(1, 40))
    step = float(rng.choice([0.25, 0.3, 1.5, -0.7]))
    return [((n,), {}), ((start, start + n), {}), ((start, start - 3 * n, -3), {}),
            ((start, start + n, 2), {"dtype": ms.int32}), ((0.5, 0.5 + (n - 0.5) * abs(step), abs(step)), {}),
            ((float(start), start + (n - 0.5) * step, step), {"dtype": ms.float64}),
            ((1, n + 1), {"dtype": ms.float32})]


def _arange_of(args: tuple, kwargs: dict) -> Callable[[], Tensor]:
    def arange() -> Tensor:
        return mint.arange(*args, **kwargs)
    return arange


def test_arange(exec_mode: str, rng: np.random.Generator) -> None:
    for args, kwargs in _arange_cases(rng):
        got = forward(_arange_of(args, kwargs))
        # start + i * step in extended precision (np.arange's float fill accumulates the rounding of
        # its first step)
        first, step = (0, 1) if len(args) == 1 else (args[0], args[2] if len(args) > 2 else 1)
        count = len(np.arange(*args, dtype=np.float64))
        want = (np.arange(count, dtype=np.longdouble) * step + first).astype(np.float64)
        all_int = all(isinstance(a, int) for a in args)
        dtype = kwargs.get("dtype", ms.int64 if all_int else ms.float32)
        assert got.dtype == dtype and got.shape == want.shape, (args, kwargs, got.dtype, got.shape)
        if dtype in (ms.int32, ms.int64):
            assert np.array_equal(got.asnumpy(), want.astype(np.int64)), (args, kwargs)
        else:  # start + i * step in the result's precision: two roundings
            eps = np.finfo(np.float64 if dtype == ms.float64 else np.float32).eps
            bound = 4 * eps * (abs(first) + want.size * abs(step))
            np.testing.assert_allclose(got.asnumpy().astype(np.float64), want, rtol=0, atol=bound,
                                       err_msg=str(args))


def test_arange_errors() -> None:
    with pytest.raises(ValueError, match="arange: no sequence goes from start 5 to end 1 by step 1"):
        mint.arange(5, 1)
    with pytest.raises(TypeError, match="arange: 'end' must be an int or a float"):
        mint.arange(0, "3")


@pytest.mark.parametrize(("value", "dtype", "np_dtype"), [
    (float("-inf"), ms.float32, np.float32), (-1, ms.int32, np.int32), (2.5, None, np.float32),
    (7, None, np.int64), (True, None, np.bool_), (1e-3, ms.bfloat16, None), (-3.25, ms.float16, np.float16)])
def test_full(exec_mode: str, rng: np.random.Generator, value: object, dtype: ms.dtype | None,
              np_dtype: type | None) -> None:
    size = tuple(int(n) for n in rng.integers(1, 6, int(rng.integers(1, 4))))

    def full() -> Tensor:
        return mint.full(size, value, dtype=dtype)

    got = forward(full)
    want_dtype = dtype or {float: ms.float32, int: ms.int64, bool: ms.bool_}[type(value)]
    assert got.dtype == want_dtype and got.shape == size
    if dtype == ms.bfloat16:
        assert np.array_equal(to_np(got), np.full(size, quantize(np.array([value]), "bfloat16")[0]))
    else:
        assert np.array_equal(got.asnumpy(), np.full(size, value, np_dtype))


def test_full_tensor_value(rng: np.random.Generator) -> None:
    value = float(rng.standard_normal())
    got = mint.full((2, 3), Tensor([value], ms.float32))
    assert got.dtype == ms.float32 and np.array_equal(got.asnumpy(), np.full((2, 3), value, np.float32))
    with pytest.raises(ValueError, match="full: 'size' must be a tuple or list of non-negative ints"):
        mint.full((2, -1), 1.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("like", ["ones_like", "zeros_like"])
def test_ones_zeros_like_and_their_backward(exec_mode: str, rng: np.random.Generator, dtype: str, like: str) -> None:
    """Values, dtypes, and the gradient through ``x * ones_like(x) + zeros_like(x)`` (their own
    gradient is zero: the gradient is ``dy`` exactly)."""
    shape = tuple(int(n) for n in rng.integers(1, 7, 3))
    x = quantize(rng.standard_normal(shape), dtype)
    fill = getattr(mint, like)
    got = forward(fill, Tensor(x.astype(np.float32), MS_DTYPES[dtype]))
    assert got.dtype == MS_DTYPES[dtype] and got.shape == shape
    assert np.array_equal(to_np(got), np.full(shape, 1.0 if like == "ones_like" else 0.0))

    def through(a: Tensor) -> Tensor:
        return a * mint.ones_like(a) + mint.zeros_like(a)

    dy = quantize(rng.standard_normal(shape), dtype)
    (dx,), _ = upstream(through, [x], [], dtype, dy)
    assert np.array_equal(dx, dy)


def test_like_dtype_argument() -> None:
    x = Tensor(np.ones((2, 2), np.float32))
    assert mint.ones_like(x, dtype=ms.int32).dtype == ms.int32
    assert np.array_equal(mint.zeros_like(x, dtype=ms.bool_).asnumpy(), np.zeros((2, 2), bool))
