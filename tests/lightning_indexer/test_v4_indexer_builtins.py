"""hyper-parallel's DeepSeek-V4 indexer wrappers in ``ms_grad_ops.builtins`` (CANN's argument conventions:
``cu_seq_lens`` with a leading 0 in TND, ``seqused`` per batch in BSND, ``mask_mode``) against the functional
ops they call, and their refusals."""
from __future__ import annotations

import numpy as np
import pytest
from _util import assert_close
from mindspore import Tensor
from test_sparse_lightning_indexer_kl_loss_grad import Case

from ms_grad_ops import builtins, ops
from ms_grad_ops import reference as ref

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


def _v4_target(q: np.ndarray, ori: np.ndarray, cmp: np.ndarray, si: np.ndarray, sinks: np.ndarray, window: int,
               ratio: int, scale: float) -> np.ndarray:
    """DeepSeek-V4's attention probabilities, float64, one whole sequence (BSND, B = 1): query t attends the raw
    tokens [t - window + 1, t], its selected compressed keys (visible: j < (t + 1) // ratio) and a sink per
    head; the target per slot is the head mean of P on that slot's compressed key (``cmp_softmax_l1_norm``,
    0 in -1 slots): the window and the sink hold the rest, so a row sums to less than 1."""
    s1 = q.shape[1]
    p = np.zeros(si.shape)
    for t in range(s1):
        raw = np.arange(max(0, t - window + 1), t + 1)
        slots = np.flatnonzero((si[0, t, 0] >= 0) & (si[0, t, 0] < (t + 1) // ratio))
        keys = np.concatenate([ori[0, raw, 0], cmp[0, si[0, t, 0, slots], 0]])
        logits = scale * q[0, t] @ keys.T                                  # [N1, n]
        m = np.maximum(logits.max(axis=1), sinks)
        e = np.exp(logits - m[:, None])
        probs = e / (e.sum(axis=1) + np.exp(sinks - m))[:, None]
        p[0, t, 0, slots] = probs[:, raw.size:].mean(axis=0)
    return p


def test_v4_indexer_chain_forward_and_kl_backward() -> None:
    """The order of mindformers' fused V4 attention (BSND, one sequence of 37 tokens, ratio 4): the indexer's
    top-k over compressed keys (npu_lightning_indexer), the main attention's target on those slots
    (float64 here; sparse_flash_mla_grad's cmp_softmax_l1_norm there), then the KL gradient
    (npu_sparse_lightning_indexer_kl_loss_grad) against the float64 reference with dI = y * sum(p) - p."""
    rng = np.random.default_rng(5)
    s1, ratio, k, n1, d, nidx, didx = 37, 4, 5, 4, 16, 4, 8
    s2, residual = s1 // ratio, s1 % ratio
    q, ori = rng.standard_normal((1, s1, n1, d)), rng.standard_normal((1, s1, 1, d))
    cmp = rng.standard_normal((1, s2, 1, d))
    qi = rng.standard_normal((1, s1, nidx, didx)).astype(np.float32).astype(np.float64)
    ki = rng.standard_normal((1, s2, 1, didx)).astype(np.float32).astype(np.float64)
    w = rng.standard_normal((1, s1, nidx)).astype(np.float32).astype(np.float64)
    args = [Tensor(x.astype(np.float32)) for x in (qi, ki, w)]
    idx, _ = builtins.npu_lightning_indexer(*args, k, cmp_residual_k=[residual], layout="BSND", sparse_mode=3,
                                            cmp_ratio=ratio)
    si = idx.asnumpy()
    assert [int((si[0, t, 0] >= 0).sum()) for t in range(s1)] == [min(k, (t + 1) // ratio) for t in range(s1)]
    p = _v4_target(q, ori, cmp, si, rng.uniform(-1, 1, n1), 4, ratio, d ** -0.5)
    sums = p.sum(axis=-1)[0, :, 0]
    assert (sums[ratio:] > 0).all() and (sums < 0.99).all()
    got = builtins.npu_sparse_lightning_indexer_kl_loss_grad(*args, idx, Tensor(p.astype(np.float32)),
                                                             cmp_residual_k=[residual], layout="BSND", mask_mode=3,
                                                             cmp_ratio=ratio)
    want = ref.sparse_lightning_indexer_kl_loss_grad(qi, ki, w, si, p.astype(np.float32), None, None, [residual],
                                                     layout="BSND", cmp_ratio=ratio)
    for name, g, wnt in zip(("d_query", "d_key", "d_weights"), got[:3], want[:3]):
        assert_close(g.asnumpy().astype(np.float64), wnt, "float32", "attention", name)
    np.testing.assert_allclose(got[3].asnumpy(), want[3], rtol=1e-5, atol=1e-6)
