"""Gradients through nn.RotaryEmbedding and nn.ClaGateMerge (fused bprop kernels) and MindSpore
autodiff of float32 composites built from mindspore.ops, in PyNative and GRAPH mode, each
against the float64 reference gradient (not against each other: the kernels' element-wise path
depends on the CPU and MGO_CPU_ISA, the composite's on MindSpore's CPU ops).

The kernels' gradients must lie within the worst-case error of their float32 arithmetic
(``_util.sum_error_bound`` over the float64 magnitude of each sum's terms, plus the rounding to
the output dtype), which holds on every CPU path. The composite's are held to the float32
attention tolerance: MindSpore's sigmoid derivative ``s * (1 - s)`` loses bits to cancellation for
large |z| (4.6e-7 relative L2 seen on an AVX2 EPYC), which the kernels avoid."""
from __future__ import annotations

import mindspore as ms
import numpy as np
from _util import assert_close, assert_within, sum_error_bound, to_np
from mindspore import Tensor, nn

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref
from ms_grad_ops.composite import CompositeClaGateMerge, CompositeRope

# Roundings of one float32 sigmoid (exp counted as two, the add and the divide) and of the products
# after the D-term dot in dz = dot * s(z) * s(-z).
_SIGMOID = 4
_DZ_EXTRA = 2 * _SIGMOID + 2


class RopeLoss(nn.Cell):
    def __init__(self, rope: nn.Cell) -> None:
        super().__init__()
        self.rope = rope

    def construct(self, q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, lens_or_pos: Tensor, wq: Tensor,
                  wk: Tensor) -> Tensor:
        yq, yk = self.rope(q, k, cos, sin, lens_or_pos)
        return (yq * wq).sum() + (yk * wk).sum()


def _rope_reference(wq: np.ndarray, wk: np.ndarray, cos: np.ndarray, sin: np.ndarray, lens: list[int]
                    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """d q, d k of sum(rope(q) * wq) + sum(rope(k) * wk) (the VJP of wq, wk) and the error bound of
    each element, a float32 sum of two products: lo = g_lo c + g_hi s, hi = g_hi c - g_lo s. Its
    magnitude |g_lo||c| + |g_hi||s| (and |g_hi||c| + |g_lo||s|) is the reference VJP of |g|, |c|
    with sin replaced by (-|s_lo|, |s_hi|), which turns both signs positive."""
    want = ref.rope_grad(wq, wk, cos, sin, lens, mode="vjp")
    s_abs = np.concatenate([-np.abs(sin[:, :64]), np.abs(sin[:, 64:])], axis=1)
    mag = ref.rope_grad(np.abs(wq), np.abs(wk), np.abs(cos), s_abs, lens, mode="vjp")
    return list(want), [sum_error_bound(2, m, "float32", w) for m, w in zip(mag, want)]


def test_rotary_embedding_grads_match_autodiff(exec_mode: str) -> None:
    rng = np.random.default_rng(21)
    lens = [3, 1, 5]
    t, hidden, m = sum(lens), 256, 6
    q, k, wq, wk = (Tensor(rng.standard_normal((t, hidden)), ms.float32) for _ in range(4))
    cos, sin = (Tensor(rng.standard_normal((m, 128)), ms.float32) for _ in range(2))
    pos = Tensor(np.concatenate([np.arange(n) for n in lens]).astype(np.int32))
    grad = ms.grad(RopeLoss(mgo.nn.RotaryEmbedding()), grad_position=(0, 1))
    autodiff = ms.grad(RopeLoss(CompositeRope()), grad_position=(0, 1))
    got = grad(q, k, cos, sin, Tensor(np.array(lens, np.int32)), wq, wk)
    comp = autodiff(q, k, cos, sin, pos, wq, wk)
    want, bounds = _rope_reference(*(to_np(x) for x in (wq, wk, cos, sin)), lens)
    for g, c, w, b in zip(got, comp, want, bounds):
        assert_within(to_np(g), w, b, "RotaryEmbedding grad (kernel)")
        assert_within(to_np(c), w, b, "RotaryEmbedding grad (composite autodiff)")


class ClaLoss(nn.Cell):
    def __init__(self, merge: nn.Cell) -> None:
        super().__init__()
        self.merge = merge

    def construct(self, og: Tensor, ol: Tensor, zg: Tensor, zl: Tensor, w: Tensor) -> Tensor:
        # bf16 reductions are not implemented on CPU: reduce in float32.
        return (self.merge(og, ol, zg, zl).astype(ms.float32) * w.astype(ms.float32)).sum()


def _cla_reference(og: Tensor, ol: Tensor, zg: Tensor, zl: Tensor, w: Tensor, dtype: str
                   ) -> tuple[tuple[np.ndarray, ...], list[np.ndarray]]:
    """The float64 gradients of sum(merge * w) for the values the tensors hold, and the error bound
    of the kernels' float32 evaluation stored as ``dtype``: dO = w * s (one sigmoid, one product),
    dz = (D-term dot of w and O) * s(z) * s(-z); magnitudes are the reference gradients of |w|,
    |O| (the sigmoid factors are positive)."""
    w_, og_, ol_, zg_, zl_ = (to_np(x) for x in (w, og, ol, zg, zl))
    want = ref.cla_gate_backward(w_, og_, ol_, zg_, zl_)
    mag = ref.cla_gate_backward(np.abs(w_), np.abs(og_), np.abs(ol_), zg_, zl_)
    d = og_.shape[-1]
    terms = (_SIGMOID + 1, _SIGMOID + 1, d + _DZ_EXTRA, d + _DZ_EXTRA)
    return want, [sum_error_bound(n, m, dtype, v) for n, m, v in zip(terms, mag, want)]


def test_cla_gate_merge_grads_match_autodiff(exec_mode: str) -> None:
    rng = np.random.default_rng(22)
    og, ol, w = (Tensor(rng.standard_normal((6, 3, 128)), ms.float32) for _ in range(3))
    zg, zl = (Tensor(2 * rng.standard_normal((6, 3)), ms.float32) for _ in range(2))
    got = ms.grad(ClaLoss(mgo.nn.ClaGateMerge()), grad_position=(0, 1, 2, 3))(og, ol, zg, zl, w)
    comp = ms.grad(ClaLoss(CompositeClaGateMerge()), grad_position=(0, 1, 2, 3))(og, ol, zg, zl, w)
    want, bounds = _cla_reference(og, ol, zg, zl, w, "float32")
    for g, c, r, b in zip(got, comp, want, bounds):
        assert_within(to_np(g), r, b, "ClaGateMerge grad (kernel)")
        assert_close(to_np(c), r, "float32", "attention", "ClaGateMerge grad (composite autodiff)")


def test_cla_gate_merge_trains_in_bfloat16(exec_mode: str) -> None:
    """bf16 grads through the Cell: the float64 gradient of the bf16 values within the kernel's
    float32 error plus the rounding to bf16; the float32 autodiff of the same values agrees."""
    rng = np.random.default_rng(23)
    arrays = [rng.standard_normal((4, 2, 128)) for _ in range(3)] + [rng.standard_normal((4, 2)) for _ in range(2)]
    og, ol, w, zg, zl = (Tensor(a, ms.bfloat16) for a in arrays)
    f32 = [Tensor(to_np(x), ms.float32) for x in (og, ol, zg, zl, w)]
    got = ms.grad(ClaLoss(mgo.nn.ClaGateMerge()), grad_position=(0, 1, 2, 3))(og, ol, zg, zl, w)
    comp = ms.grad(ClaLoss(CompositeClaGateMerge()), grad_position=(0, 1, 2, 3))(*f32)
    want, bounds = _cla_reference(og, ol, zg, zl, w, "bfloat16")
    for g, c, r, b in zip(got, comp, want, bounds):
        assert g.dtype == ms.bfloat16
        assert_within(to_np(g), r, b, "ClaGateMerge bf16 grad (kernel)")
        assert_close(to_np(c), r, "float32", "attention", "ClaGateMerge grad (composite autodiff, float32)")
