"""``mint.stack`` and ``mint.roll`` on CPU (ms_grad_ops.cpu_gaps.joining) against NumPy, PyNative and
GRAPH, float32/float16/bfloat16, on fresh random data: values (data movement: equal) and the
gradients through parameters in front. MindSpore has no CPU kernel for either in PyNative
(test_gap_creation.py probes it) nor in GRAPH mode."""
from __future__ import annotations

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


def _random(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    return quantize(rng.standard_normal(shape), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("count", "dim"), [(2, 0), (3, -1), (4, 1)])
def test_stack(exec_mode: str, rng: np.random.Generator, dtype: str, count: int, dim: int) -> None:
    shape = tuple(int(n) for n in rng.integers(1, 6, 2))
    xs = [_random(rng, shape, dtype) for _ in range(count)]
    want = np.stack(xs, dim)

    def stack(*parts: Tensor) -> Tensor:
        return mint.stack(parts, dim)

    got = forward(stack, *[Tensor(x.astype(np.float32), MS_DTYPES[dtype]) for x in xs])
    assert got.dtype == MS_DTYPES[dtype]
    assert np.array_equal(to_np(got), want)

    dy = _random(rng, want.shape, dtype)
    dxs, _ = upstream(stack, xs, [], dtype, dy)
    for i, dx in enumerate(dxs):
        assert np.array_equal(dx, np.take(dy, i, dim)), f"piece {i}"


def test_stack_rejects_out_of_range_dim() -> None:
    x = Tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="stack: dim 3 is out of range for a tensor of rank 3"):
        mint.stack([x, x], 3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shifts", "dims"), [(1, 0), (-2, -1), ((3, 1), (0, 2)), (5, None), (7, 1)])
def test_roll(exec_mode: str, rng: np.random.Generator, dtype: str, shifts: object, dims: object) -> None:
    """mindformers' compressor rolls by 1 along the block axis; other shifts, negative, past the
    size, several dims and the flattened roll (``dims=None``) too."""
    shape = (int(rng.integers(2, 6)), int(rng.integers(3, 7)), int(rng.integers(1, 5)))
    x = _random(rng, shape, dtype)
    want = np.roll(x, shifts, dims)

    def roll(a: Tensor) -> Tensor:
        return mint.roll(a, shifts, dims)

    got = forward(roll, Tensor(x.astype(np.float32), MS_DTYPES[dtype]))
    assert got.dtype == MS_DTYPES[dtype]
    assert np.array_equal(to_np(got), want)

    dy = _random(rng, shape, dtype)
    (dx,), (ux,) = upstream(roll, [x], [], dtype, dy)
    want_dx = np.roll(dy, np.negative(shifts), dims)
    assert np.array_equal(dx, want_dx)
    assert np.array_equal(ux, quantize(want_dx * x, "float32"))


def test_roll_errors() -> None:
    x = Tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="roll: 'shifts' 1 and 'dims' \\(0, 1\\) must have the same length"):
        mint.roll(x, 1, (0, 1))
    with pytest.raises(ValueError, match="roll: dim 2 is out of range"):
        mint.roll(x, 1, 2)
