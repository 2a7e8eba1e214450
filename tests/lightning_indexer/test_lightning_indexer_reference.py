"""The float64 references of docs/contract.md section 4 checked against themselves: finite differences of the
loss, the teacher's normalisation, and hand-computable cases."""
from __future__ import annotations

import numpy as np
import pytest
from _indexer_cases import make_case

from ms_grad_ops import reference as ref


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_finite_differences_of_the_loss(layout: str) -> None:
    rng = np.random.default_rng(11)
    case = make_case(rng, "float32", "float32", layout, lens_q=[3, 4], lens_k=[4, 6], b=2, s1=3, s2=5, n1=2,
                     d=6, dr=2, nidx=3, didx=5, k=4, drop=0.25)
    args, kw = list(case.ref_args()), case.ref_kwargs()
    grads = ref.sparse_lightning_indexer_grad_kl_loss(*args, **kw)
    for pos, grad in ((2, grads[0]), (3, grads[1]), (4, grads[2])):
        base = args[pos]
        num = np.zeros_like(base)
        eps = 1e-6
        for i in np.ndindex(base.shape):
            for sign in (1, -1):
                x = base.copy()
                x[i] += sign * eps
                args[pos] = x
                num[i] += sign * ref.indexer_kl_loss(*args, **kw) / (2 * eps)
        args[pos] = base
        np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-7)


def test_teacher_from_real_statistics_is_normalised() -> None:
    """With statistics from attention over the same selected keys, sum_j p_j = 1, so CANN's
    dI = y - p is the exact gradient (both reference variants agree)."""
    rng = np.random.default_rng(12)
    case = make_case(rng, "float32", "float32", "TND")
    a = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    b = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs(), return_kl_grad=True)
    for x, y in zip(a[:3], b[:3]):  # statistics rounded to float32: sum(p) = 1 up to ~1e-7
        assert np.linalg.norm(x - y) <= 1e-5 * np.linalg.norm(y)


def test_one_visible_key_gives_zero_gradient_and_zero_loss() -> None:
    """One visible key: y = p = 1 (after the 1/N1 head average of one-key softmaxes)."""
    rng = np.random.default_rng(13)
    case = make_case(rng, "float32", "float32", "TND", lens_q=[1], lens_k=[1], n1=3, k=3)
    case.arrays["sparse_indices"][:] = np.array([-1, 0, -1])
    case.arrays["softmax_max"], case.arrays["softmax_sum"] = ref.attention_softmax_stats(
        case.arrays["query"], case.arrays["key"], case.arrays["sparse_indices"], case.arrays["query_rope"],
        case.arrays["key_rope"], case.lens_q, case.lens_k, scale_value=case.scale, layout="TND")
    dqi, dki, dw, loss = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    assert abs(loss) < 1e-12
    assert np.abs(dqi).max() < 1e-12 and np.abs(dki).max() < 1e-12 and np.abs(dw).max() < 1e-12


def test_index_scores_by_hand() -> None:
    q = np.array([[1.0, 0.0], [0.0, -1.0]])
    k = np.array([[2.0, 1.0], [-1.0, 3.0]])
    w = np.array([0.5, 2.0])
    # relu(q k^T) = [[2, 0], [0, 0]] -> I = [1, 0]
    np.testing.assert_allclose(ref.lightning_indexer.__globals__["index_scores"](q, k, w), [1.0, 0.0])
