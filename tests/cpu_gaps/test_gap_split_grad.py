"""MindSpore 2.10's silently wrong PyNative gradient of ``mint.split`` on CPU, and the stand-in
(ms_grad_ops.cpu_gaps.joining.split_view) that ``install()`` binds in its place.

In PyNative, the backward of ``mint.split`` (``split_view``; ``split_ext`` too, both in
``mindspore.ops.function.array_func``) reads each piece's incoming gradient as if it were
contiguous from the start of its storage. The backward of ``mint.cat``/``ops.cat`` and of
``permute`` hands back strided views, so
``mint.cat(mint.split(x, [6, 2], dim=-1), dim=-1)`` back-propagates a wrong gradient (no error).
``test_mindspore_split_gradient_is_wrong`` asserts that it IS wrong without the stand-in (it fails
once MindSpore fixes it: then the stand-in can go); the others check the stand-in's values and
gradients against NumPy for every split form and consumer, PyNative and GRAPH (where MindSpore's
own split is kept), and that ``mint.chunk``, ``ops.split`` are right without help.
"""
from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
import pytest
from _util import Fn
from mindspore import Tensor, mint, ops
from mindspore.ops.function import array_func

from ms_grad_ops import cpu_gaps
from ms_grad_ops.cpu_gaps import joining


# The split forms (GRAPH mode parses them: functions, not lambdas) and the dimension they cut.
def split_sizes_last(x: Tensor) -> tuple:
    return mint.split(x, [6, 2], dim=-1)


def split_size_last(x: Tensor) -> tuple:
    return mint.split(x, 4, dim=-1)


def split_uneven_last(x: Tensor) -> tuple:
    return mint.split(x, 3, dim=-1)


def split_sizes_middle(x: Tensor) -> tuple:
    return mint.split(x, (2, 3), dim=1)


def split_sizes_first(x: Tensor) -> tuple:
    return mint.split(x, [1, 3], dim=0)


def split_size_first(x: Tensor) -> tuple:
    return mint.split(x, 2)


def split_ext_sizes_last(x: Tensor) -> tuple:
    return array_func.split_ext(x, [6, 2], -1)


SPLITS = {
    "sizes [6, 2] dim -1": (split_sizes_last, -1),
    "size 4 dim -1": (split_size_last, -1),
    "size 3 dim -1 (uneven)": (split_uneven_last, -1),
    "sizes (2, 3) dim 1": (split_sizes_middle, 1),
    "sizes [1, 3] dim 0": (split_sizes_first, 0),
    "size 2 dim 0": (split_size_first, 0),
    "split_ext [6, 2]": (split_ext_sizes_last, -1),
}


def cat(pieces: tuple, dim: int) -> Tensor:
    return mint.cat(pieces, dim=dim)


def cat_reversed(pieces: tuple, dim: int) -> Tensor:
    return ops.cat(pieces[::-1], dim)


def permute_then_cat(pieces: tuple, dim: int) -> Tensor:
    return mint.cat([p.permute(2, 1, 0) for p in pieces], dim=2 - dim % 3)


CONSUMERS = {"mint.cat": cat, "ops.cat reversed": cat_reversed, "permute each, then cat": permute_then_cat}
SHAPE = (4, 5, 8)


@pytest.fixture
def rng() -> np.random.Generator:
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print(f"seed {seed}")  # shown when a test fails
    return np.random.default_rng(seed)


def _split_cat(split: Callable, consume: Callable, dim: int) -> Callable[[Tensor], Tensor]:
    def f(x: Tensor) -> Tensor:
        return consume(split(x), dim)
    return f


def _reference_vjp(split: Callable, consume: Callable, dim: int, dy: np.ndarray) -> np.ndarray:
    """The gradient of ``sum(f(x) * dy)``: f only moves entries, so each entry of x receives the
    entries of dy that f put its value in (found by running f on the entries' numbers in NumPy)."""
    labels = np.arange(np.prod(SHAPE)).reshape(SHAPE)
    sizes = [p.shape[dim] for p in split(Tensor(np.zeros(SHAPE, np.float32)))]
    pieces = np.split(labels, np.cumsum(sizes)[:-1], axis=dim)
    if consume is CONSUMERS["mint.cat"]:
        out = np.concatenate(pieces, dim)
    elif consume is CONSUMERS["ops.cat reversed"]:
        out = np.concatenate(pieces[::-1], dim)
    else:
        out = np.concatenate([p.transpose(2, 1, 0) for p in pieces], 2 - dim % 3)
    dx = np.zeros(labels.size)
    np.add.at(dx, out.ravel(), dy.ravel())
    return dx.reshape(SHAPE)


def _gradient(f: Callable[[Tensor], Tensor], x: np.ndarray, dy: np.ndarray, graph: bool) -> np.ndarray:
    g = Tensor(dy)

    def loss(a: Tensor) -> Tensor:
        return (f(a) * g).sum()

    grad = ms.grad(Fn(loss))
    return (ms.jit(grad) if graph else grad)(Tensor(x)).asnumpy()


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("split", ["sizes [6, 2] dim -1", "size 4 dim -1", "sizes [1, 3] dim 0",
                                   "split_ext [6, 2]"])
@pytest.mark.parametrize("consumer", ["mint.cat", "permute each, then cat"])
def test_mindspore_split_gradient_is_wrong(rng: np.random.Generator, split: str, consumer: str) -> None:
    """MindSpore 2.10 alone, PyNative, CPU: the forward is right, the gradient is not (relative
    error of order 1). When this fails, MindSpore has fixed it (docs/cpu.md)."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    cpu_gaps.uninstall()
    try:
        split_fn, dim = SPLITS[split]
        f = _split_cat(split_fn, CONSUMERS[consumer], dim)
        x = rng.standard_normal(SHAPE).astype(np.float32)
        dy = rng.standard_normal(f(Tensor(x)).shape).astype(np.float32)
        assert mint.split is not joining.split_view
        want = _reference_vjp(split_fn, CONSUMERS[consumer], dim, dy)
        assert _relative_error(_gradient(f, x, dy, graph=False), want) > 0.1
    finally:
        cpu_gaps.install()


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_split_gradient_right_with_install(exec_mode: str, rng: np.random.Generator, split: str,
                                          consumer: str) -> None:
    """With the stand-in (PyNative) / MindSpore's own split (GRAPH): pieces and gradient exact."""
    assert mint.split is joining.split_view and array_func.split_ext is joining.split_ext
    split_fn, dim = SPLITS[split]
    f = _split_cat(split_fn, CONSUMERS[consumer], dim)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    pieces = Fn(split_fn)(Tensor(x))
    sizes = [p.shape[dim] for p in pieces]
    for piece, want in zip(pieces, np.split(x, np.cumsum(sizes)[:-1], axis=dim)):
        assert np.array_equal(piece.asnumpy(), want)
    dy = rng.standard_normal(f(Tensor(x)).shape).astype(np.float32)
    got = _gradient(f, x, dy, graph=exec_mode == "graph")
    assert np.array_equal(got, _reference_vjp(split_fn, CONSUMERS[consumer], dim, dy))


@pytest.mark.parametrize("form", ["mint.chunk", "ops.split", "Tensor.split"])
def test_other_splits_right_without_help(rng: np.random.Generator, form: str) -> None:
    """``mint.chunk`` (even and uneven), ``ops.split`` and ``Tensor.split`` back-propagate right in
    PyNative without a stand-in (none is bound to them)."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    split_fn = {"mint.chunk": lambda x: mint.chunk(x, 3, dim=-1), "ops.split": lambda x: ops.split(x, [6, 2], -1),
                "Tensor.split": lambda x: x.split([6, 2], -1)}[form]
    for consumer in CONSUMERS.values():
        f = _split_cat(split_fn, consumer, -1)
        x = rng.standard_normal(SHAPE).astype(np.float32)
        dy = rng.standard_normal(f(Tensor(x)).shape).astype(np.float32)
        assert np.array_equal(_gradient(f, x, dy, graph=False), _reference_vjp(split_fn, consumer, -1, dy))


def test_split_errors() -> None:
    x = Tensor(np.ones((2, 8), np.float32))
    with pytest.raises(ValueError, match="split: the sections \\[6, 3\\] must sum to the dimension's size 8"):
        mint.split(x, [6, 3], dim=-1)
    with pytest.raises(ValueError, match="split: the split size must be positive, got 0"):
        mint.split(x, 0, dim=-1)
    with pytest.raises(ValueError, match="split: dim 2 is out of range"):
        mint.split(x, 2, dim=2)
