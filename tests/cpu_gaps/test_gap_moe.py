"""``MoeTokenPermute`` and ``MoeTokenUnpermute`` on CPU (ms_grad_ops.cpu_gaps.moe) against the
float64 reference (CANN's formulas: a stable sort of the flattened expert ids; ``sorted_indices``
is the row each slot went to), MindSpore's documented example, gradients through parameters in
front, PyNative and GRAPH, float32/float16/bfloat16."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _gaps import forward, random, upstream
from _util import DTYPES, MS_DTYPES, assert_close, to_np
from mindspore import Tensor, ops
from mindspore.ops import auto_generate as gen

from ms_grad_ops.reference import cpu_gaps as ref


def test_documented_example() -> None:
    """``ops.moe_token_permute``'s docstring example, and unpermute inverting it."""
    tokens = np.array([[1, 1, 1], [7, 7, 7], [2, 2, 2], [1, 1, 1], [2, 2, 2], [3, 3, 3]], np.float32)
    indices = np.array([5, 0, 3, 1, 2, 4], np.int32)
    permuted, sorted_indices = forward(ops.moe_token_permute, Tensor(tokens, ms.bfloat16), Tensor(indices))
    assert permuted.dtype == ms.bfloat16 and sorted_indices.dtype == ms.int32
    assert np.array_equal(to_np(permuted)[:, 0], [7, 1, 2, 2, 3, 1])
    assert np.array_equal(sorted_indices.asnumpy(), [5, 0, 3, 1, 2, 4])
    back = forward(ops.moe_token_unpermute, permuted, sorted_indices)
    assert np.array_equal(to_np(back), tokens)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_out_tokens", [None, 9, -4])
def test_moe_token_permute(exec_mode: str, dtype: str, num_out_tokens: int | None) -> None:
    rng = np.random.default_rng(3)
    tokens = random(rng, (7, 5), dtype)
    indices = rng.integers(0, 4, (7, 2)).astype(np.int64)
    permuted, sorted_indices = forward(ops.moe_token_permute, Tensor(tokens.astype(np.float32), MS_DTYPES[dtype]),
                                       Tensor(indices), num_out_tokens)
    want, want_sorted = ref.moe_token_permute(tokens, indices, num_out_tokens)
    assert permuted.dtype == MS_DTYPES[dtype] and sorted_indices.dtype == ms.int32
    assert np.array_equal(sorted_indices.asnumpy(), want_sorted)
    assert np.array_equal(to_np(permuted), want)

    def permute(a: Tensor, i: Tensor) -> Tensor:
        return gen.MoeTokenPermute()(a, i, num_out_tokens)[0]

    dy = random(rng, want.shape, dtype)
    (dx,), (ux,) = upstream(permute, [tokens], [Tensor(indices)], dtype, dy)
    want_dx = ref.moe_token_permute_vjp(tokens.shape, indices, dy, num_out_tokens)
    assert_close(dx, want_dx, dtype, what="dtokens")
    assert_close(ux, want_dx * tokens, dtype, what="upstream")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dropped", [0, 3])
def test_moe_token_unpermute(exec_mode: str, dtype: str, dropped: int) -> None:
    """With probs (top-3), rows of the permute output; ``dropped`` rows cut off (their slots add 0)."""
    rng = np.random.default_rng(dropped)
    n_tokens, topk, hidden = 6, 3, 4
    sorted_indices = rng.permutation(n_tokens * topk).astype(np.int32)
    permuted = random(rng, (n_tokens * topk - dropped, hidden), dtype)
    probs = random(rng, (n_tokens, topk), dtype)
    got = forward(ops.moe_token_unpermute, Tensor(permuted.astype(np.float32), MS_DTYPES[dtype]),
                  Tensor(sorted_indices), Tensor(probs.astype(np.float32), MS_DTYPES[dtype]))
    want = ref.moe_token_unpermute(permuted, sorted_indices, probs)
    assert got.dtype == MS_DTYPES[dtype] and got.shape == (n_tokens, hidden)
    assert_close(to_np(got), want, dtype)

    def unpermute(a: Tensor, p: Tensor, s: Tensor) -> Tensor:
        return gen.MoeTokenUnpermute()(a, s, p)

    dy = random(rng, want.shape, dtype)
    (d_permuted, d_probs), (u_permuted, u_probs) = upstream(unpermute, [permuted, probs], [Tensor(sorted_indices)],
                                                            dtype, dy)
    want_permuted, want_probs = ref.moe_token_unpermute_vjp(permuted, sorted_indices, probs, dy)
    assert_close(d_permuted, want_permuted, dtype, what="dpermuted")
    assert_close(d_probs, want_probs, dtype, what="dprobs")
    assert_close(u_permuted, want_permuted * permuted, dtype, what="upstream permuted")
    assert_close(u_probs, want_probs * probs, dtype, what="upstream probs")


def test_errors() -> None:
    tokens, indices = Tensor(np.ones((4, 3), np.float32)), Tensor(np.zeros((4, 2), np.int32))
    with pytest.raises(ValueError, match="MoeTokenPermute: padded_mode=True is not supported"):
        forward(ops.moe_token_permute, tokens, indices, None, True)
    with pytest.raises(ValueError, match=r"MoeTokenPermute: needs tokens \[T, H\] and indices"):
        forward(ops.moe_token_permute, tokens, Tensor(np.zeros((3, 2), np.int32)))
    with pytest.raises(ValueError, match=r"MoeTokenUnpermute: probs must be \[T, topk\]"):
        forward(ops.moe_token_unpermute, tokens, Tensor(np.arange(4, dtype=np.int32)), Tensor(np.ones((4, 2))))
