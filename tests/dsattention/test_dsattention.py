"""``nn.DSAttention`` beside its training matrix: the float64 oracle in ``_dsa_oracle`` (dense
attention with mask = selected & causal, the selection taken from the layer's forward) against
itself, the split of the two losses, lengths and bad arguments. Every parameter's gradient against
that oracle, in each mode, layout and dtype, is ``tests/training/test_cell_matrix.py``: a gradient
sums one term per token and the terms cancel, so its error is measured against the terms'
magnitude (``_dsa_oracle.term_magnitude``) where that exceeds the gradient's norm."""
from __future__ import annotations

import _dsa_oracle as oracle
import mindspore as ms
import numpy as np
import pytest
from _cell_matrix import DSA_CFG as CFG
from _cell_matrix import DSA_EXTRA as EXTRA
from _cell_matrix import DSA_INDEXER as INDEXER
from _cell_matrix import KL_WEIGHT
from _util import MS_DTYPES
from mindspore import Tensor, nn

import ms_grad_ops as mgo


def _layer(layout: str, dtype: str) -> mgo.nn.DSAttention:
    ms.set_seed(1)
    return mgo.nn.DSAttention(**CFG, max_seq_len=16, layout=layout, dtype=MS_DTYPES[dtype], **EXTRA)


def _inputs(layout: str, rng: np.random.Generator) -> tuple[Tensor, object, np.ndarray, np.ndarray]:
    """x, lengths argument, and per flat token its sequence id and position."""
    if layout == "BSND":
        x = rng.standard_normal((2, 7, CFG["dim"]))
        return Tensor(x.astype(np.float32)), None, *oracle.tokens(layout, (2, 7))
    lens = [4, 9, 13]
    x = rng.standard_normal((lens[-1], CFG["dim"]))
    return Tensor(x.astype(np.float32)), Tensor(np.array(lens, np.int64)), *oracle.tokens(layout, lens)


class _Objective(nn.Cell):
    """``sum(out * d_out) + KL_WEIGHT * indexer_loss`` (or only the first term)."""

    def __init__(self, layer: nn.Cell, d_out: Tensor, with_kl: bool) -> None:
        super().__init__()
        self.layer, self.d_out, self.with_kl = layer, d_out, with_kl

    def construct(self, x: Tensor, lengths: object) -> Tensor:
        out, loss = self.layer(x, lengths)
        main = (out * self.d_out).sum()
        return main + KL_WEIGHT * loss.sum() if self.with_kl else main


def _short(name: str) -> str:
    """The parameter's name inside DSAttention (the wrapper Cell prefixes it with "layer.")."""
    return name[len("layer."):] if name.startswith("layer.") else name


def test_gradient_terms_sum_to_the_gradients() -> None:
    """The oracle's per-token terms (the tolerance scale of the matrix) add up to its gradients, and they
    cancel: for k_norm.beta their magnitude exceeds the gradient more than twice."""
    rng = np.random.default_rng(11)
    layer = _layer("TND", "float32")
    x, lengths, seq, pos = _inputs("TND", rng)
    values = {_short(p.name): p.asnumpy().astype(np.float64) for p in layer.trainable_params()}
    cfg = {**CFG, **EXTRA, "scale": 0.3}
    case = (values, x.asnumpy().astype(np.float64), seq, pos, layer.select(x, lengths).asnumpy().reshape(seq.size, -1),
            cfg, rng.standard_normal(x.shape))
    _, _, main, kl = oracle.gradients(*case)
    _, _, main_terms, kl_terms = oracle.gradient_terms(*case)
    for name, value in values.items():
        for grads, terms in ((main, main_terms), (kl, kl_terms)):
            assert terms[name].shape == (seq.size, *value.shape)
            scale = np.abs(terms[name]).max()
            np.testing.assert_allclose(terms[name].sum(0), grads[name], rtol=1e-12, atol=1e-12 * scale)
    assert oracle.term_magnitude(kl_terms["k_norm.beta"]) > 2 * np.linalg.norm(kl["k_norm.beta"])


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_main_loss_never_reaches_the_indexer(layout: str) -> None:
    rng = np.random.default_rng(3)
    layer = _layer(layout, "float32")
    x, lengths, _, _ = _inputs(layout, rng)
    objective = _Objective(layer, Tensor(rng.standard_normal(x.shape).astype(np.float32)), False)
    indexer = [p for p in layer.trainable_params() if _short(p.name).startswith(INDEXER)]
    assert len(indexer) == 5
    for p, g in zip(indexer, ms.grad(objective, None, indexer)(x, lengths)):
        assert not g.asnumpy().any(), p.name


def test_lengths_as_list_and_defaults() -> None:
    rng = np.random.default_rng(5)
    layer = _layer("TND", "float32")
    x, lengths, _, _ = _inputs("TND", rng)
    out_tensor, loss_tensor = layer(x, lengths)
    out_list, loss_list = layer(x, [int(v) for v in lengths.asnumpy()])
    assert np.array_equal(out_tensor.asnumpy(), out_list.asnumpy())
    assert np.array_equal(loss_tensor.asnumpy(), loss_list.asnumpy())
    one, _ = layer(x[:5])
    assert np.array_equal(one.asnumpy(), layer(x[:5], [5])[0].asnumpy())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="DSAttention: attribute 'layout' must be one of"):
        mgo.nn.DSAttention(**CFG, max_seq_len=8, layout="BNSD")
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        mgo.nn.DSAttention(**{**CFG, "qk_rope_head_dim": 3}, max_seq_len=8)
    layer = _layer("BSND", "float32")
    with pytest.raises(ValueError, match=r"DSAttention: actual_seq_lengths\[0\] = 5 must be in \[0, 4\] in BSND"):
        layer(Tensor(np.zeros((1, 4, CFG["dim"]), np.float32)), [5])   # BSND lengths: per batch, <= S
