"""``SliceExt``, ``IndexSelect`` and the embedding lookup with ``EmbeddingDenseBackward``'s gradient
on CPU (ms_grad_ops.cpu_gaps.indexing) against the float64 reference, PyNative and GRAPH,
float32/float16/bfloat16 (and integer data for the slices)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, random, upstream
from _util import DTYPES, MS_DTYPES, assert_close, to_np
from mindspore import Tensor, mint
from mindspore.ops import auto_generate as gen

from ms_grad_ops.reference import cpu_gaps as ref

SLICES = [(1, 1, 6, 2), (-1, -5, 100, 1), (0, -100, -1, 3), (2, 4, 2, 1)]  # (dim, start, end, step); the last empty


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(SLICES)))
def test_slice_ext(exec_mode: str, dtype: str, case: int) -> None:
    dim, start, end, step = SLICES[case]
    rng = np.random.default_rng(case)
    x = random(rng, (3, 7, 6), dtype)

    def slice_ext(a: Tensor) -> Tensor:
        return gen.SliceExt()(a, dim, start, end, step)

    got = forward(slice_ext, Tensor(x.astype(np.float32), MS_DTYPES[dtype]))
    want = ref.slice_ext(x, dim, start, end, step)
    assert got.dtype == MS_DTYPES[dtype] and got.shape == want.shape
    assert np.array_equal(to_np(got), want)
    if want.size:
        dy = random(rng, want.shape, dtype)
        (dx,), (ux,) = upstream(slice_ext, [x], [], dtype, dy)
        want_dx = ref.slice_ext_vjp(x.shape, dim, start, end, step, dy)
        assert np.array_equal(dx, want_dx)
        assert_close(ux, want_dx * x, dtype, what="upstream")


def test_slice_ext_integers_and_errors() -> None:
    x = np.arange(24, dtype=np.int64).reshape(4, 6)
    got = forward(gen.SliceExt(), Tensor(x), 1, -4, 5, 2)
    assert got.dtype == ms.int64 and np.array_equal(got.asnumpy(), x[:, 2:5:2])
    with pytest.raises(ValueError, match="SliceExt: step must be positive"):
        forward(gen.SliceExt(), Tensor(x), 1, 0, 5, 0)
    with pytest.raises(ValueError, match=r"SliceExt: dim 2 is out of range for an input of shape \(4, 6\)"):
        forward(gen.SliceExt(), Tensor(x), 2, 0, 5, 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("dim", "index_dtype"), [(0, np.int32), (-1, np.int64)])
def test_index_select(exec_mode: str, dtype: str, dim: int, index_dtype: type) -> None:
    rng = np.random.default_rng(dim + 3)
    x = random(rng, (5, 3, 4), dtype)
    index = np.array([3, 0, 3, 1, 3], index_dtype)  # repeats: the gradient sums them
    got = forward(mint.index_select, Tensor(x.astype(np.float32), MS_DTYPES[dtype]), dim, Tensor(index))
    want = np.take(x, index, dim)
    assert got.dtype == MS_DTYPES[dtype]
    assert np.array_equal(to_np(got), want)

    def index_select(a: Tensor, i: Tensor) -> Tensor:
        return gen.IndexSelect()(a, dim, i)

    dy = random(rng, want.shape, dtype)
    (dx,), (ux,) = upstream(index_select, [x], [Tensor(index)], dtype, dy)
    want_dx = ref.index_select_vjp(x.shape, dim % 3, index, dy)
    assert_close(dx, want_dx, dtype, what="dx")
    assert_close(ux, want_dx * x, dtype, what="upstream")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("padding_idx", "scale_grad_by_freq"), [(None, False), (-2, True)])
def test_embedding(exec_mode: str, dtype: str, padding_idx: int | None,
                   scale_grad_by_freq: bool) -> None:
    rng = np.random.default_rng(11)
    weight = random(rng, (7, 4), dtype)
    ids = np.array([[1, 5, 5, 0], [5, 2, 1, 6]], np.int32)  # 5 = padding_idx -2 appears three times

    def embedding(w: Tensor, i: Tensor) -> Tensor:
        return mint.nn.functional.embedding(i, w, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)

    got = forward(embedding, Tensor(weight.astype(np.float32), MS_DTYPES[dtype]), Tensor(ids))
    assert got.dtype == MS_DTYPES[dtype] and got.shape == (2, 4, 4)
    assert np.array_equal(to_np(got), weight[ids])
    dy = random(rng, (2, 4, 4), dtype)
    (dw,), (uw,) = upstream(embedding, [weight], [Tensor(ids)], dtype, dy)
    want = ref.embedding_dense_backward(dy, ids, 7, padding_idx, scale_grad_by_freq)
    assert_close(dw, want, dtype, what="dweight")
    assert_close(uw, want * weight, dtype, what="upstream")
    if padding_idx is not None:
        assert not dw[padding_idx].any()


def test_embedding_primitive_and_errors() -> None:
    weight, ids = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)), Tensor(np.array([3, 1], np.int64))
    assert np.array_equal(forward(gen.Embedding(), ids, weight).asnumpy(), np.arange(12).reshape(4, 3)[[3, 1]])
    with pytest.raises(ValueError, match="embedding: 'max_norm'"):
        forward(mint.nn.functional.embedding, ids, weight, None, 1.0)
    with pytest.raises(ValueError, match=r"embedding: padding_idx 4 is out of range for 'weight' of shape \(4, 3\)"):
        forward(mint.nn.functional.embedding, ids, weight, 4)
