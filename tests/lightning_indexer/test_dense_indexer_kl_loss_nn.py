"""``nn.DenseIndexerKLLoss``: PyNative and GRAPH; the loss is the op's raw sum (as ``nn.IndexerKLLoss``'s, so the
dense and sparse paths give one training loss at top-k = S), the gradients of the indexer tensors are the fused
kernel's scaled by dout, everything else gets zero."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _dense_indexer_cases import make_dense_case, ms_grad_args
from _indexer_cases import make_case, ms_args
from _util import assert_close, to_np
from mindspore import nn

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref


class _ScaledLoss(nn.Cell):
    """3 * loss, so the bprop's dout is 3."""

    def __init__(self, cell: nn.Cell) -> None:
        super().__init__()
        self.loss = cell

    def construct(self, *args: ms.Tensor) -> ms.Tensor:
        return self.loss(*args) * 3.0


@pytest.mark.parametrize("layout,dtype,n2", [("TND", "bfloat16", 1), ("BSND", "float32", 4), ("BSND", "float16", 1)])
def test_dense_indexer_kl_loss_grads(exec_mode: str, layout: str, dtype: str, n2: int) -> None:
    case = make_dense_case(np.random.default_rng(31), dtype, "float32", layout, n2=n2)
    args = ms_grad_args(case, dtype, "float32", lens_as_tensor=True)
    if layout == "BSND":
        args = args[:11]
    net = _ScaledLoss(mgo.nn.DenseIndexerKLLoss(case.scale, layout=layout))
    loss, grads = ms.value_and_grad(net, grad_position=tuple(range(len(args))))(*args)
    dqi, dki, dw, want_loss = ref.dense_lightning_indexer_grad_kl_loss(*case.ref_grad_args(), **case.grad_attrs())
    assert abs(float(to_np(loss)[0]) - 3 * want_loss) <= 1e-3 * abs(3 * want_loss)
    assert_close(to_np(grads[2]), 3 * dqi, dtype, "attention", "d_query_index")
    assert_close(to_np(grads[3]), 3 * dki, dtype, "attention", "d_key_index")
    assert_close(to_np(grads[4]), 3 * dw, "float32" if dtype == "float32" else dtype, "attention", "d_weights")
    for i in (0, 1, 5, 6, 7, 8, 9, 10):
        assert not to_np(grads[i]).any(), i


def test_same_loss_and_gradients_as_indexer_kl_loss_at_top_k_s() -> None:
    """The normalisation: both Cells return the raw sum over tokens, so with every visible key selected and
    self-consistent statistics the dense warm-up and the sparse stage train on one loss."""
    case = make_case(np.random.default_rng(32), "float32", "float32", "TND", lens_q=[5, 9], lens_k=[7, 12], k=12,
                     drop=0.0)
    a = case.arrays
    lens = (case.lens_q, case.lens_k)
    kw = {"layout": "TND", "sparse_mode": 3}
    a["sparse_indices"], _ = ref.lightning_indexer(a["query_index"], a["key_index"], a["weights"], *lens,
                                                   sparse_count=12, **kw)
    a["softmax_max"], a["softmax_sum"] = (x.astype(np.float32).astype(np.float64) for x in ref.attention_softmax_stats(
        a["query"], a["key"], a["sparse_indices"], a["query_rope"], a["key_rope"], *lens, scale_value=case.scale, **kw))
    sparse_args = ms_args(case, "float32", "float32")
    mxi, smi = ref.dense_lightning_indexer_softmax_lse(a["query_index"], a["key_index"], a["weights"], *lens, **kw)
    dense_args = [*sparse_args[:5], *sparse_args[6:8], ms.Tensor(mxi.astype(np.float32)),
                  ms.Tensor(smi.astype(np.float32)), *sparse_args[8:]]
    pos = (2, 3, 4)
    sparse_loss, sparse_grads = ms.value_and_grad(mgo.nn.IndexerKLLoss(case.scale, **kw), grad_position=pos)(
        *sparse_args)
    dense_loss, dense_grads = ms.value_and_grad(mgo.nn.DenseIndexerKLLoss(case.scale, **kw), grad_position=pos)(
        *dense_args)
    np.testing.assert_allclose(to_np(dense_loss), to_np(sparse_loss), rtol=1e-5)
    for d, s in zip(dense_grads, sparse_grads):
        np.testing.assert_allclose(to_np(d), to_np(s), rtol=1e-4, atol=1e-6)
    assert float(to_np(dense_loss)[0]) > 0
