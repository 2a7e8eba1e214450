"""``nn.DSAttention``'s dense warm-up path (``dense_warmup``): the dense pair gives the same output, indexer loss
and gradients of every parameter as the top-k path selecting every key (K = max_seq_len), in BSND and TND with
lengths, PyNative and GRAPH; the switch and the indices it attends to."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _cell_matrix import DSA_CFG as CFG
from _cell_matrix import DSA_EXTRA as EXTRA
from _cell_matrix import KL_WEIGHT
from mindspore import Tensor, nn

import ms_grad_ops as mgo

MAX_SEQ_LEN = 16


def _layer(layout: str, dense_warmup: bool | None, topk: int = MAX_SEQ_LEN) -> mgo.nn.DSAttention:
    ms.set_seed(1)
    return mgo.nn.DSAttention(**{**CFG, "index_topk": topk}, max_seq_len=MAX_SEQ_LEN, layout=layout,
                              dense_warmup=dense_warmup, **EXTRA)


def _inputs(layout: str, rng: np.random.Generator) -> tuple[Tensor, object]:
    if layout == "BSND":
        return Tensor(rng.standard_normal((2, 7, CFG["dim"])).astype(np.float32)), [7, 5]
    return Tensor(rng.standard_normal((13, CFG["dim"])).astype(np.float32)), Tensor(np.array([4, 9, 13], np.int32))


class _Objective(nn.Cell):
    def __init__(self, layer: nn.Cell, d_out: Tensor) -> None:
        super().__init__()
        self.layer, self.d_out = layer, d_out

    def construct(self, x: Tensor, lengths: object) -> tuple[Tensor, Tensor, Tensor]:
        out, loss = self.layer(x, lengths)
        return (out * self.d_out).sum() + KL_WEIGHT * loss.sum(), out, loss


def _run(layer: mgo.nn.DSAttention, x: Tensor, lengths: object, d_out: Tensor) -> tuple:
    objective = _Objective(layer, d_out)
    params = layer.trainable_params()
    (_, out, loss), grads = ms.value_and_grad(objective, None, params, has_aux=True)(x, lengths)
    return out.asnumpy(), loss.asnumpy(), [g.asnumpy() for g in grads], [p.name for p in params]


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_dense_pair_equals_the_top_k_path_at_k_s(exec_mode: str, layout: str) -> None:
    rng = np.random.default_rng(21)
    x, lengths = _inputs(layout, rng)
    d_out = Tensor(rng.standard_normal(x.shape).astype(np.float32))
    dense, sparse = _layer(layout, True), _layer(layout, False)
    dense.load_deepseek_state_dict(sparse.deepseek_state_dict())
    got, want = _run(dense, x, lengths, d_out), _run(sparse, x, lengths, d_out)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    assert want[1][0] > 0
    indexer_grads = 0
    for name, g, w in zip(got[3], got[2], want[2]):
        scale = max(np.abs(w).max(), 1e-6)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale, err_msg=name)
        indexer_grads += ("idx" in name or "weights_proj" in name or "k_norm" in name) and bool(np.abs(w).max() > 0)
    assert indexer_grads >= 4, "the KL loss must train the indexer"


def test_the_switch() -> None:
    assert _layer("BSND", None, topk=MAX_SEQ_LEN).dense_warmup
    assert _layer("BSND", None, topk=MAX_SEQ_LEN + 5).dense_warmup
    assert not _layer("BSND", None, topk=MAX_SEQ_LEN - 1).dense_warmup
    assert _layer("BSND", True, topk=3).dense_warmup and not _layer("BSND", False).dense_warmup
    with pytest.raises(TypeError, match="DSAttention: dense_warmup must be None, True or False, got 1"):
        _layer("BSND", 1)


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_select_is_every_causal_key(layout: str) -> None:
    rng = np.random.default_rng(22)
    x, lengths = _inputs(layout, rng)
    got = _layer(layout, True, topk=3).select(x, lengths).asnumpy()
    if layout == "BSND":
        assert got.shape == (2, 7, 1, 7)
        rows, positions = got.reshape(14, 7), np.tile(np.arange(7), 2)
    else:
        assert got.shape == (13, 1, 13)
        rows, positions = got.reshape(13, 13), np.concatenate([np.arange(n) for n in (4, 5, 4)])
    for row, p in zip(rows, positions):
        np.testing.assert_array_equal(row, np.where(np.arange(row.size) <= p, np.arange(row.size), -1))


def test_dense_warmup_with_a_small_top_k_trains_on_the_dense_target() -> None:
    """Asked for (dense_warmup=True) with index_topk < S: the loss is the dense one (the top-k path's at K = S),
    not the top-k path's at the layer's K."""
    rng = np.random.default_rng(23)
    x, lengths = _inputs("TND", rng)
    small, full = _layer("TND", True, topk=3), _layer("TND", False, topk=MAX_SEQ_LEN)
    small.load_deepseek_state_dict(full.deepseek_state_dict())
    np.testing.assert_allclose(small(x, lengths)[1].asnumpy(), full(x, lengths)[1].asnumpy(), rtol=1e-5)


def test_attn_sink_takes_the_top_k_path() -> None:
    """The dense pair takes no sinks (nor does CANN's): with attn_sink the default switch keeps the top-k
    path even at index_topk >= max_seq_len, and asking for the dense path is a ValueError."""
    args = {**CFG, "index_topk": MAX_SEQ_LEN, "max_seq_len": MAX_SEQ_LEN, **EXTRA, "attn_sink": True}
    sink = mgo.nn.DSAttention(**args)
    assert not sink.dense_warmup and sink.attn_sink is not None
    with pytest.raises(ValueError, match="DSAttention: attn_sink=True needs the top-k path"):
        mgo.nn.DSAttention(**args, dense_warmup=True)
