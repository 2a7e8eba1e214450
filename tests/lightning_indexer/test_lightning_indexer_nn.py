"""``nn.IndexerKLLoss`` and ``nn.LightningIndexer``: PyNative, GRAPH and dynamic shapes; gradients
of the indexer tensors are the fused kernel's scaled by dout, the main-attention inputs get zero."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _indexer_cases import make_case, ms_args
from _selection import assert_same_selection, indexer_scores
from _util import assert_close, to_ms, to_np
from mindspore import nn

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref


class _ScaledLoss(nn.Cell):
    """3 * loss, so the bprop's dout is 3."""

    def __init__(self, scale_value: float, layout: str) -> None:
        super().__init__()
        self.loss = mgo.nn.IndexerKLLoss(scale_value, layout=layout)

    def construct(self, *args: ms.Tensor) -> ms.Tensor:
        return self.loss(*args) * 3.0


@pytest.mark.parametrize("layout,dtype,rope", [("TND", "bfloat16", True), ("BSND", "float32", False),
                                                ("BSND", "float16", True)])
def test_indexer_kl_loss_grads(exec_mode: str, layout: str, dtype: str, rope: bool) -> None:
    case = make_case(np.random.default_rng(31), dtype, "float32", layout, dr=8 if rope else 0)
    args = ms_args(case, dtype, "float32", lens_as_tensor=True)
    if layout == "BSND":
        args = args[:10]
    net = _ScaledLoss(case.scale, layout)
    loss, grads = ms.value_and_grad(net, grad_position=tuple(range(len(args) if rope else 8)))(*args)
    dqi, dki, dw, want_loss = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    assert abs(float(to_np(loss)[0]) - 3 * want_loss) <= 1e-3 * abs(3 * want_loss)
    assert_close(to_np(grads[2]), 3 * dqi, dtype, "attention", "d_query_index")
    assert_close(to_np(grads[3]), 3 * dki, dtype, "attention", "d_key_index")
    assert_close(to_np(grads[4]), 3 * dw, "float32" if dtype == "float32" else dtype, "attention", "d_weights")
    for i in (0, 1, 6, 7) + ((8, 9) if rope else ()):
        assert not to_np(grads[i]).any(), i


def test_indexer_kl_loss_dynamic_shapes() -> None:
    net = mgo.nn.IndexerKLLoss(1.0 / np.sqrt(32.0), layout="BSND")
    grad_fn = ms.grad(net, grad_position=(2, 3, 4))
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        dyn = [ms.Tensor(shape=[None, None, 4, 24], dtype=ms.float32), ms.Tensor(shape=[None, None, 1, 24],
                                                                                  dtype=ms.float32),
               ms.Tensor(shape=[None, None, 4, 16], dtype=ms.float32), ms.Tensor(shape=[None, None, 1, 16],
                                                                                  dtype=ms.float32),
               ms.Tensor(shape=[None, None, 4], dtype=ms.float32), ms.Tensor(shape=[None, None, 1, 8], dtype=ms.int32),
               ms.Tensor(shape=[None, 1, None, 4], dtype=ms.float32),
               ms.Tensor(shape=[None, 1, None, 4], dtype=ms.float32),
               ms.Tensor(shape=[None, None, 4, 8], dtype=ms.float32), ms.Tensor(shape=[None, None, 1, 8],
                                                                                 dtype=ms.float32)]
        net.set_inputs(*dyn)
        for b, s1, s2 in ((2, 7, 9), (1, 10, 12)):
            case = make_case(np.random.default_rng(b * 100 + s1), "float32", "float32", "BSND", b=b, s1=s1, s2=s2)
            args = ms_args(case, "float32", "float32")[:10]
            grads = grad_fn(*args)
            want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
            for g, w in zip(grads, want[:3]):
                assert_close(to_np(g), w, "float32", "attention")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_lightning_indexer_cell(exec_mode: str) -> None:
    rng = np.random.default_rng(33)
    qi = rng.standard_normal((2, 6, 4, 16))
    ki = rng.standard_normal((2, 9, 1, 16))
    w = rng.standard_normal((2, 6, 4))
    cell = mgo.nn.LightningIndexer(5, layout="BSND", sparse_mode=3)
    idx, val = cell(to_ms(qi, "float32"), to_ms(ki, "float32"), to_ms(w, "float32"))
    assert idx.shape == val.shape == (2, 6, 1, 5)
    # the float64 top-5 up to near ties within float32 rounding (which this CPU's GEMM order decides)
    f32 = [x.astype(np.float32).astype(np.float64) for x in (qi, ki, w)]
    assert_same_selection(idx.asnumpy(), val.asnumpy(), indexer_scores(*f32, layout="BSND", sparse_mode=3), "cell")
