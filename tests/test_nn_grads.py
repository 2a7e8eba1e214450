"""Gradients through nn.RotaryEmbedding and nn.ClaGateMerge (fused bprop kernels) vs MindSpore
autodiff of float32 composites built from mindspore.ops, in PyNative and GRAPH mode."""
from __future__ import annotations

import mindspore as ms
import numpy as np
from _util import assert_close, to_np
from mindspore import Tensor, nn

import ms_grad_ops as mgo
from ms_grad_ops.composite import CompositeClaGateMerge, CompositeRope


class RopeLoss(nn.Cell):
    def __init__(self, rope: nn.Cell) -> None:
        super().__init__()
        self.rope = rope

    def construct(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, lens_or_pos: Tensor, wq: Tensor,
                  wk: Tensor) -> Tensor:
        yq, yk = self.rope(q, k, cos, sin, lens_or_pos)
        return (yq * wq).sum() + (yk * wk).sum()


def test_rotary_embedding_grads_match_autodiff(exec_mode: str) -> None:
    rng = np.random.default_rng(21)
    lens = [3, 1, 5]
    t, hidden, m = sum(lens), 256, 6
    q, k, wq, wk = (Tensor(rng.standard_normal((t, hidden)), ms.float32) for _ in range(4))
    cos, sin = (Tensor(rng.standard_normal((m, 128)), ms.float32) for _ in range(2))
    pos = Tensor(np.concatenate([np.arange(n) for n in lens]).astype(np.int32))
    grad = ms.grad(RopeLoss(mgo.nn.RotaryEmbedding()), grad_position=(0, 1))
    want = ms.grad(RopeLoss(CompositeRope()), grad_position=(0, 1))
    got = grad(q, k, cos, sin, Tensor(np.array(lens, np.int32)), wq, wk)
    ref = want(q, k, cos, sin, pos, wq, wk)
    for g, r in zip(got, ref):
        assert_close(to_np(g), to_np(r), "float32", what="RotaryEmbedding grad")




class ClaLoss(nn.Cell):
    def __init__(self, merge: nn.Cell) -> None:
        super().__init__()
        self.merge = merge

    def construct(self, og: Tensor, ol: Tensor, zg: Tensor, zl: Tensor, w: Tensor) -> Tensor:
        # bf16 reductions are not implemented on CPU: reduce in float32.
        return (self.merge(og, ol, zg, zl).astype(ms.float32) * w.astype(ms.float32)).sum()


def test_cla_gate_merge_grads_match_autodiff(exec_mode: str) -> None:
    rng = np.random.default_rng(22)
    og, ol, w = (Tensor(rng.standard_normal((6, 3, 128)), ms.float32) for _ in range(3))
    zg, zl = (Tensor(2 * rng.standard_normal((6, 3)), ms.float32) for _ in range(2))
    got = ms.grad(ClaLoss(mgo.nn.ClaGateMerge()), grad_position=(0, 1, 2, 3))(og, ol, zg, zl, w)
    ref = ms.grad(ClaLoss(CompositeClaGateMerge()), grad_position=(0, 1, 2, 3))(og, ol, zg, zl, w)
    for g, r in zip(got, ref):
        assert_close(to_np(g), to_np(r), "float32", what="ClaGateMerge grad")


def test_cla_gate_merge_trains_in_bfloat16(exec_mode: str) -> None:
    """bf16 grads through the Cell stay within the bf16 bound of the float32 autodiff grads."""
    rng = np.random.default_rng(23)
    arrays = [rng.standard_normal((4, 2, 128)) for _ in range(3)] + [rng.standard_normal((4, 2)) for _ in range(2)]
    og, ol, w, zg, zl = (Tensor(a, ms.bfloat16) for a in arrays)
    f32 = [Tensor(to_np(x), ms.float32) for x in (og, ol, zg, zl, w)]
    got = ms.grad(ClaLoss(mgo.nn.ClaGateMerge()), grad_position=(0, 1, 2, 3))(og, ol, zg, zl, w)
    ref = ms.grad(ClaLoss(CompositeClaGateMerge()), grad_position=(0, 1, 2, 3))(*f32)
    for g, r in zip(got, ref):
        assert g.dtype == ms.bfloat16
        assert_close(to_np(g), to_np(r), "bfloat16", what="ClaGateMerge bf16 grad")
