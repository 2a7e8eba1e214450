"""hyper-parallel's DeepSeek-V4 indexer wrappers in ``ms_grad_ops.builtins`` (CANN's argument conventions:
``cu_seq_lens`` with a leading 0 in TND, ``seqused`` per batch in BSND, ``mask_mode``) against the functional
ops they call, and their refusals."""
from __future__ import annotations

import numpy as np
import pytest
from mindspore import Tensor
from test_sparse_lightning_indexer_kl_loss_grad import Case

from ms_grad_ops import builtins, ops

KL = "sparse_lightning_indexer_kl_loss_grad"


def _same(got: tuple, want: tuple) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.asnumpy(), w.asnumpy())


@pytest.mark.parametrize("as_tensor", [False, True])
def test_kl_grad_tnd_cu_seq_lens(as_tensor: bool) -> None:
    case = Case(np.random.default_rng(1), "bfloat16", "float32", "TND")
    qi, ki, w, si, p, cum_q, cum_k, res = case.ms_args()
    cu_q, cu_k = [0, *cum_q], [0, *cum_k]
    if as_tensor:
        cu_q, cu_k = Tensor(np.asarray(cu_q, np.int32)), Tensor(np.asarray(cu_k, np.int32))
    got = builtins.npu_sparse_lightning_indexer_kl_loss_grad(qi, ki, w, si, p, cu_seq_lens_q=cu_q,
                                                             cu_seq_lens_k=cu_k, cmp_residual_k=res, layout="TND",
                                                             mask_mode=3, cmp_ratio=4)
    want = ops.sparse_lightning_indexer_kl_loss_grad(qi, ki, w, si, p, cum_q, cum_k, res, layout="TND", cmp_ratio=4)
    _same(got, want[:4])


def test_kl_grad_bsnd_seqused() -> None:
    case = Case(np.random.default_rng(2), "float16", "float16", "BSND", bsnd_lens=([9, 6], [3, 2]))
    qi, ki, w, si, p, lq, lk, res = case.ms_args()
    got = builtins.npu_sparse_lightning_indexer_kl_loss_grad(qi, ki, w, si, p, seqused_q=lq, seqused_k=lk,
                                                             cmp_residual_k=res, cmp_ratio=4)
    _same(got, ops.sparse_lightning_indexer_kl_loss_grad(qi, ki, w, si, p, lq, lk, res, cmp_ratio=4)[:4])


@pytest.mark.parametrize("kw,match", [
    (dict(layout="TND", cu_seq_lens_q=[9, 23], cu_seq_lens_k=[0, 2]),
     "argument 'cu_seq_lens_q' = \\[9, 23\\] .* cu_seq_lens need B \\+ 1 entries starting with 0"),
    (dict(layout="TND", seqused_q=[9]), "argument 'seqused_q' .* seqused in TND"),
    (dict(layout="BSND", cu_seq_lens_k=[0, 2]), "argument 'cu_seq_lens_k' .* cu_seq_lens are TND's"),
])
def test_kl_grad_refuses_what_it_cannot_honour(kw: dict, match: str) -> None:
    qi, ki, w, si, p, *_ = Case(np.random.default_rng(3), "float32", "float32", "TND").ms_args()
    with pytest.raises(ValueError, match=f"^{KL}: {match}"):
        builtins.npu_sparse_lightning_indexer_kl_loss_grad(qi, ki, w, si, p, **kw)


def test_kl_grad_tensor_cu_seq_lens_without_leading_zero_fail_in_the_kernel() -> None:
    case = Case(np.random.default_rng(4), "float32", "float32", "TND")
    qi, ki, w, si, p, cum_q, cum_k, res = case.ms_args()
    with pytest.raises(RuntimeError, match=f"{KL}: the last entry of actual_seq_lengths_query"):
        builtins.npu_sparse_lightning_indexer_kl_loss_grad(
            qi, ki, w, si, p, cu_seq_lens_q=Tensor(np.asarray([5, *cum_q], np.int32)),
            cu_seq_lens_k=Tensor(np.asarray([0, *cum_k], np.int32)), cmp_residual_k=res, layout="TND",
            cmp_ratio=4)[0].asnumpy()
