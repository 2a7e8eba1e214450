"""``Outer``, ``BatchMatMul`` with batch broadcasting and ``GroupedMatmul`` on CPU
(ms_grad_ops.cpu_gaps.matmul) against the float64 reference: forward and the gradients through
parameters in front, PyNative and GRAPH, float32/float16/bfloat16."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, random, upstream
from _util import DTYPES, MS_DTYPES, assert_close, to_np
from mindspore import Tensor, mint
from mindspore.ops import auto_generate as gen
from mindspore.ops import operations as P

from ms_grad_ops.reference import cpu_gaps as ref


def outer(a: Tensor, b: Tensor) -> Tensor:
    return gen.Outer()(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_outer(exec_mode: str, dtype: str) -> None:
    rng = np.random.default_rng(0)
    a, b = random(rng, (7,), dtype), random(rng, (5,), dtype)
    got = forward(mint.outer, Tensor(a.astype(np.float32), MS_DTYPES[dtype]),
                  Tensor(b.astype(np.float32), MS_DTYPES[dtype]))
    assert got.dtype == MS_DTYPES[dtype]
    assert_close(to_np(got), np.outer(a, b), dtype)
    dy = random(rng, (7, 5), dtype)
    (da, db), _ = upstream(outer, [a, b], [], dtype, dy)
    assert_close(da, dy @ b, dtype, what="d input")
    assert_close(db, dy.T @ a, dtype, what="d vec2")


def test_outer_int() -> None:
    got = forward(outer, Tensor(np.arange(3, dtype=np.int64)), Tensor(np.array([4, 5], np.int64)))
    assert got.dtype == ms.int64 and (got.asnumpy() == np.outer(np.arange(3), [4, 5])).all()


BMM_CASES = [  # (x shape, y shape, transpose_a, transpose_b): mindformers' shapes, then others
    ((4, 3, 2, 1, 8), (2, 8, 6), False, False),
    ((2, 4, 3, 8), (2, 1, 8, 4), False, False),
    ((5, 8, 3), (5, 8, 6), True, False),
    ((3, 2, 5, 8), (8, 8), False, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(BMM_CASES)))
def test_batch_matmul_broadcasts(exec_mode: str, dtype: str, case: int) -> None:
    x_shape, y_shape, ta, tb = BMM_CASES[case]
    rng = np.random.default_rng(case)
    x, y = random(rng, x_shape, dtype), random(rng, y_shape, dtype)

    def bmm(a: Tensor, b: Tensor) -> Tensor:
        return P.BatchMatMul(ta, tb)(a, b)

    got = forward(bmm, Tensor(x.astype(np.float32), MS_DTYPES[dtype]), Tensor(y.astype(np.float32), MS_DTYPES[dtype]))
    want = ref.batch_matmul(x, y, ta, tb)
    assert got.dtype == MS_DTYPES[dtype]
    assert_close(to_np(got), want, dtype)
    dy = random(rng, want.shape, dtype)
    (dx, dyy), (wx, wy) = upstream(bmm, [x, y], [], dtype, dy)
    want_dx, want_dy = ref.batch_matmul_vjp(x, y, dy, ta, tb)
    assert_close(dx, want_dx, dtype, what="dx")
    assert_close(dyy, want_dy, dtype, what="dy")
    assert_close(wx, want_dx * x, dtype, what="upstream x")
    assert_close(wy, want_dy * y, dtype, what="upstream y")


def test_batch_matmul_rejects_shapes() -> None:
    with pytest.raises(ValueError, match=r"BatchMatMul: batch dimensions of \(3, 2, 4\) and \(2, 4, 5\)"):
        forward(P.BatchMatMul(), Tensor(np.ones((3, 2, 4), np.float32)), Tensor(np.ones((2, 4, 5), np.float32)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_grouped_matmul(exec_mode: str, dtype: str, transpose_b: bool) -> None:
    rng = np.random.default_rng(int(transpose_b))
    rows, k, n = 11, 8, 6
    group_list = np.array([3, 3, 9, 10], np.int64)  # an empty group; row 10 belongs to none
    x = random(rng, (rows, k), dtype)
    w = random(rng, (4, n, k) if transpose_b else (4, k, n), dtype)
    g = Tensor(group_list)

    def gmm(a: Tensor, b: Tensor, groups: Tensor) -> Tensor:
        return gen.GroupedMatmul(split_item=3, group_type=0, transpose_b=transpose_b)(
            [a], [b], None, None, None, None, None, groups)[0]

    got = forward(gmm, Tensor(x.astype(np.float32), MS_DTYPES[dtype]), Tensor(w.astype(np.float32), MS_DTYPES[dtype]),
                  g)
    want = ref.grouped_matmul(x, w, group_list, transpose_b=transpose_b)
    assert got.dtype == MS_DTYPES[dtype]
    assert_close(to_np(got), want, dtype)
    assert not to_np(got)[10].any()
    dy = random(rng, want.shape, dtype)
    (dx, dw), (ux, uw) = upstream(gmm, [x, w], [g], dtype, dy)
    want_dx, want_dw = ref.grouped_matmul_vjp(x, w, group_list, dy, transpose_b)
    assert_close(dx, want_dx, dtype, what="dx")
    assert_close(dw, want_dw, dtype, what="dw")
    assert_close(ux, want_dx * x, dtype, what="upstream x")
    assert_close(uw, want_dw * w, dtype, what="upstream w")


def test_grouped_matmul_lists_and_bias(exec_mode: str) -> None:
    """split_item=0 (a product per pair, bias added) and the functional form with a bias per expert."""
    rng = np.random.default_rng(5)
    xs = [random(rng, (3, 4), "float32"), random(rng, (2, 5, 6), "float32")]
    ws = [random(rng, (4, 2), "float32"), random(rng, (6, 3), "float32")]
    bs = [random(rng, (2,), "float32"), random(rng, (3,), "float32")]

    def pairs(x0: Tensor, x1: Tensor, w0: Tensor, w1: Tensor, b0: Tensor, b1: Tensor) -> tuple:
        return gen.GroupedMatmul()([x0, x1], [w0, w1], [b0, b1])

    got = forward(pairs, *[Tensor(a.astype(np.float32)) for a in xs + ws + bs])
    for i in range(2):
        assert_close(to_np(got[i]), xs[i] @ ws[i] + bs[i], "float32", what=f"pair {i}")

    x, w, b = random(rng, (6, 4), "float32"), random(rng, (2, 4, 3), "float32"), random(rng, (2, 3), "float32")
    group_list = np.array([2, 6], np.int64)

    def grouped(x: Tensor, w: Tensor, b: Tensor, g: Tensor) -> Tensor:
        return gen.grouped_matmul([x], [w], [b], group_list=g, split_item=3, group_type=0)[0]

    got = forward(grouped, Tensor(x.astype(np.float32)), Tensor(w.astype(np.float32)), Tensor(b.astype(np.float32)),
                  Tensor(group_list))
    assert_close(to_np(got), ref.grouped_matmul(x, w, group_list, b), "float32", what="grouped with bias")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"split_item": 3, "group_type": 0, "transpose_a": True}, "transpose_a=True"),
    ({"split_item": 1, "group_type": 0}, r"\(split_item, group_type\) = \(1, 0\)"),
])
def test_grouped_matmul_rejects(kwargs: dict, message: str) -> None:
    def call(x: Tensor, w: Tensor, g: Tensor) -> tuple:
        return gen.GroupedMatmul(**kwargs)([x], [w], None, None, None, None, None, g)

    with pytest.raises(ValueError, match=f"GroupedMatmul: .*{message}"):
        forward(call, Tensor(np.ones((4, 3), np.float32)), Tensor(np.ones((2, 3, 5), np.float32)),
                Tensor(np.array([1, 4], np.int64)))
