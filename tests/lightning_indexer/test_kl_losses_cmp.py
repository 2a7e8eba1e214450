"""The V3.2-style indexer losses over compressed keys (docs/contract.md section 9.1): the dense warm-up pair
(``dense_lightning_indexer_softmax_lse``, ``dense_lightning_indexer_grad_kl_loss``) and
``sparse_lightning_indexer_grad_kl_loss`` with ``cmp_ratio`` / ``cmp_residual_k``, against the float64
reference, the two paths against each other at top-k = every visible compressed key, and the Cells."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _util import assert_close, quantize, to_ms
from mindspore import Tensor

import ms_grad_ops as mgo
from ms_grad_ops import ops
from ms_grad_ops import reference as ref

NAMES = ("d_query_index", "d_key_index", "d_weights")
SCALE = 0.25


class Case:
    """TND: three sequences of compressed keys with residuals (ratio 4): the first rows of each see no
    compressed key. Main attention N1 = 4, D = 16 over the same compressed keys (one key head)."""

    def __init__(self, dtype: str, wdtype: str, seed: int, ratio: int = 4) -> None:
        rng = np.random.default_rng(seed)
        lens_q, lens_k = [14, 6, 9], [3, 4, 2]
        self.lens = [int(x) for x in np.cumsum(lens_q)], [int(x) for x in np.cumsum(lens_k)]
        self.residual = [1, 3, 0]
        self.ratio, self.dtype, self.wdtype = ratio, dtype, wdtype
        t1, t2 = sum(lens_q), sum(lens_k)
        self.q = quantize(rng.standard_normal((t1, 4, 16)), dtype)
        self.k = quantize(rng.standard_normal((t2, 1, 16)), dtype)
        self.qi = quantize(0.5 * rng.standard_normal((t1, 2, 8)), dtype)
        self.ki = quantize(rng.standard_normal((t2, 1, 8)), dtype)
        self.w = quantize(rng.standard_normal((t1, 2)), wdtype)
        self.cmp = {"cmp_ratio": ratio}
        self.k_all = max(lens_k)

    def ms(self, *arrays: np.ndarray) -> list[Tensor]:
        return [to_ms(a, self.dtype) for a in arrays]


@pytest.mark.parametrize("dtype,wdtype", [("float32", "float32"), ("bfloat16", "float32"), ("float16", "float16")])
def test_dense_pair_matches_reference(dtype: str, wdtype: str) -> None:
    c = Case(dtype, wdtype, 1)
    qi, ki = c.ms(c.qi, c.ki)
    w = to_ms(c.w, wdtype)
    got_lse = ops.dense_lightning_indexer_softmax_lse(qi, ki, w, *c.lens, c.residual, layout="TND", **c.cmp)
    want_lse = ref.dense_lightning_indexer_softmax_lse(c.qi, c.ki, c.w, *c.lens, c.residual, layout="TND", **c.cmp)
    assert (want_lse[1] == 0).any() and (want_lse[1] > 0).any(), "rows with and without a visible compressed key"
    for g, wnt in zip(got_lse, want_lse):
        np.testing.assert_allclose(g.asnumpy(), wnt, rtol=2e-5, atol=1e-5)
    mx, sm = ref.dense_attention_softmax_stats(c.q, c.k, None, None, *c.lens, c.residual, scale_value=SCALE,
                                               layout="TND", **c.cmp)
    stats = [Tensor(np.asarray(x, np.float32)) for x in (mx, sm, *want_lse)]
    got = ops.dense_lightning_indexer_grad_kl_loss(*c.ms(c.q, c.k), qi, ki, w, *stats, None, None, *c.lens,
                                                   c.residual, scale_value=SCALE, layout="TND", **c.cmp)
    want = ref.dense_lightning_indexer_grad_kl_loss(c.q, c.k, c.qi, c.ki, c.w, mx, sm, *want_lse, None, None,
                                                    *c.lens, c.residual, scale_value=SCALE, layout="TND", **c.cmp)
    for name, g, wnt, tol in zip(NAMES, got, want, (dtype, dtype, wdtype if wdtype != "float32" else dtype)):
        assert_close(g.asnumpy().astype(np.float64), wnt, tol, "attention", f"dense {name}")
    assert abs(got[3].asnumpy()[0] - want[3]) <= 1e-4 * abs(want[3])


@pytest.mark.parametrize("dtype,wdtype", [("float32", "float32"), ("bfloat16", "float32")])
def test_sparse_kl_loss_matches_reference_and_the_dense_path(dtype: str, wdtype: str) -> None:
    """Indices from lightning_indexer over every visible compressed key (K = the longest key length), the
    main attention's statistics over them: the sparse op equals its reference, and the dense pair's loss and
    gradients (section 4.4's agreement, now on compressed keys)."""
    c = Case(dtype, wdtype, 2)
    qi, ki = c.ms(c.qi, c.ki)
    w = to_ms(c.w, wdtype)
    idx, _ = ops.lightning_indexer(qi, ki, w, *c.lens, c.residual, sparse_count=c.k_all, layout="TND", **c.cmp)
    si = idx.asnumpy()
    mx, sm = ref.attention_softmax_stats(c.q, c.k, si, None, None, *c.lens, None, c.residual, scale_value=SCALE,
                                         layout="TND", **c.cmp)
    stats = [Tensor(np.asarray(x, np.float32)) for x in (mx, sm)]
    got = ops.sparse_lightning_indexer_grad_kl_loss(*c.ms(c.q, c.k), qi, ki, w, Tensor(si), *stats, None, None,
                                                    *c.lens, None, c.residual, scale_value=SCALE, layout="TND",
                                                    **c.cmp)
    want = ref.sparse_lightning_indexer_grad_kl_loss(c.q, c.k, c.qi, c.ki, c.w, si, mx, sm, None, None, *c.lens,
                                                     None, c.residual, scale_value=SCALE, layout="TND", **c.cmp)
    for name, g, wnt, tol in zip(NAMES, got, want, (dtype, dtype, wdtype if wdtype != "float32" else dtype)):
        assert_close(g.asnumpy().astype(np.float64), wnt, tol, "attention", f"sparse {name}")
    assert abs(got[3].asnumpy()[0] - want[3]) <= 1e-4 * abs(want[3])
    dmx, dsm = ref.dense_attention_softmax_stats(c.q, c.k, None, None, *c.lens, c.residual, scale_value=SCALE,
                                                 layout="TND", **c.cmp)
    lse = ref.dense_lightning_indexer_softmax_lse(c.qi, c.ki, c.w, *c.lens, c.residual, layout="TND", **c.cmp)
    dense = ref.dense_lightning_indexer_grad_kl_loss(c.q, c.k, c.qi, c.ki, c.w, dmx, dsm, *lse, None, None, *c.lens,
                                                     c.residual, scale_value=SCALE, layout="TND", **c.cmp)
    for name, a, b in zip(NAMES, want[:3], dense[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)
    assert abs(want[3] - dense[3]) <= 1e-9 * abs(dense[3])


def test_sparse_kl_loss_skips_slots_the_compressed_mask_hides() -> None:
    """Slots whose compressed key is visible at ratio 1 but not at ratio 4 are skipped: the result is the one
    of the same row without them."""
    c = Case("float32", "float32", 3)
    rng = np.random.default_rng(4)
    si = np.concatenate([rng.integers(0, n, (q, 1, 5)) for q, n in ((14, 3), (6, 4), (9, 2))]).astype(np.int32)
    mx, sm = ref.attention_softmax_stats(c.q, c.k, si, None, None, *c.lens, None, c.residual, scale_value=SCALE,
                                         layout="TND", **c.cmp)
    args = [*c.ms(c.q, c.k, c.qi, c.ki, c.w), Tensor(si), *(Tensor(np.asarray(x, np.float32)) for x in (mx, sm))]
    got = ops.sparse_lightning_indexer_grad_kl_loss(*args, None, None, *c.lens, None, c.residual, scale_value=SCALE,
                                                    layout="TND", **c.cmp)
    hidden = si.copy()
    # Visible compressed keys per row: floor((S2 * 4 + residual - S1 + t + 1) / 4), capped at S2.
    visible = [min(3, max(3 * 4 + 1 - 14 + t + 1, 0) // 4) for t in range(14)]
    visible += [min(4, max(4 * 4 + 3 - 6 + t + 1, 0) // 4) for t in range(6)]
    visible += [min(2, max(2 * 4 + 0 - 9 + t + 1, 0) // 4) for t in range(9)]
    hidden[si >= np.asarray(visible)[:, None, None]] = -1
    assert (hidden != si).any()
    args[5] = Tensor(hidden)
    plain = ops.sparse_lightning_indexer_grad_kl_loss(*args, None, None, *c.lens, None, c.residual,
                                                      scale_value=SCALE, layout="TND", **c.cmp)
    for g, p in zip(got, plain):
        np.testing.assert_array_equal(g.asnumpy(), p.asnumpy())


def test_cells_take_cmp_ratio() -> None:
    """nn.IndexerKLLoss and nn.DenseIndexerKLLoss with cmp_ratio: the loss is the op's, the gradients the op's
    scaled by the incoming gradient."""
    c = Case("float32", "float32", 5)
    qi, ki, w = c.ms(c.qi, c.ki, c.w)
    lse = ref.dense_lightning_indexer_softmax_lse(c.qi, c.ki, c.w, *c.lens, c.residual, layout="TND", **c.cmp)
    mx, sm = ref.dense_attention_softmax_stats(c.q, c.k, None, None, *c.lens, c.residual, scale_value=SCALE,
                                               layout="TND", **c.cmp)
    stats = [Tensor(np.asarray(x, np.float32)) for x in (mx, sm, *lse)]
    cell = mgo.nn.DenseIndexerKLLoss(SCALE, "TND", 3, False, 4)
    q, k = c.ms(c.q, c.k)
    res = Tensor(np.asarray(c.residual, np.int32))

    def loss(a: Tensor, b: Tensor, cw: Tensor) -> Tensor:
        return cell(q, k, a, b, cw, *stats, None, None, *c.lens, res).sum() * 3.0

    grads = ms.grad(loss, grad_position=(0, 1, 2))(qi, ki, w)
    want = ops.dense_lightning_indexer_grad_kl_loss(q, k, qi, ki, w, *stats, None, None, *c.lens, c.residual,
                                                    scale_value=SCALE, layout="TND", cmp_ratio=4)
    for g, wnt in zip(grads, want[:3]):
        np.testing.assert_allclose(g.asnumpy(), 3.0 * wnt.asnumpy(), rtol=1e-6, atol=1e-7)
    sparse = mgo.nn.IndexerKLLoss(SCALE, "TND", 3, False, 4)
    idx, _ = ops.lightning_indexer(qi, ki, w, *c.lens, c.residual, sparse_count=c.k_all, layout="TND", cmp_ratio=4)
    smx, ssm = ref.attention_softmax_stats(c.q, c.k, idx.asnumpy(), None, None, *c.lens, None, c.residual,
                                           scale_value=SCALE, layout="TND", cmp_ratio=4)
    sstats = [Tensor(np.asarray(x, np.float32)) for x in (smx, ssm)]
    got = sparse(q, k, qi, ki, w, idx, *sstats, None, None, *c.lens, None, res)
    want_s = ops.sparse_lightning_indexer_grad_kl_loss(q, k, qi, ki, w, idx, *sstats, None, None, *c.lens, None,
                                                       c.residual, scale_value=SCALE, layout="TND", cmp_ratio=4)
    np.testing.assert_array_equal(got.asnumpy(), want_s[3].asnumpy())


@pytest.mark.parametrize("op", ["sparse_lightning_indexer_grad_kl_loss", "dense_lightning_indexer_softmax_lse",
                                "dense_lightning_indexer_grad_kl_loss"])
def test_ascend_takes_cmp_ratios_whole_range(op: str) -> None:
    """Their Ascend C kernels take compressed keys (tests/ascend/test_ascendc_indexer_cmp.py,
    test_ascendc_dense_indexer_cmp.py): CANN's range only."""
    from ms_grad_ops._specs import OP_SPECS
    attr = OP_SPECS[op].attr("cmp_ratio")
    assert attr.error(op, 128, "Ascend") is None
    assert attr.error(op, 129, "Ascend") == f"{op}: attribute 'cmp_ratio' must be an integer in [1, 128], got 129"
