"""The Cells behind upstream layers in the variants the training matrix
(tests/training/test_cell_matrix.py: every Cell x mode x layout x dtype) does not vary: lengths as
lists and int32/int64 tensors, with and without rope, key and value separate / one tensor twice /
``value=None``, the indexer chain. An ``nn.Dense`` in front of each float input; gradients of the
Dense parameters against the float64 reference, the chain rule through the Dense done in NumPy.

Differentiating only a Cell's own inputs missed issue 9's GRAPH abort (a bprop whose branches
returned different structures): these tests differentiate parameters upstream of the Cells.
"""
from __future__ import annotations

from collections.abc import Iterator

import mindspore as ms
import numpy as np
import pytest
from _upstream import Upstream, check_param_grads, geometry, sfa_indices, weighted
from _util import assert_close, quantize, to_ms
from mindspore import Tensor, nn

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref


@pytest.fixture
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """The execution mode given by the test's parameters (restored to PyNative after)."""
    ms.set_context(mode=ms.GRAPH_MODE if request.param == "graph" else ms.PYNATIVE_MODE)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)


def _lengths(kind: str, cum: list[int]) -> object:
    """Lengths as a Python list, an int32 or an int64 tensor."""
    return {"list": list(cum), "int32": Tensor(np.asarray(cum, np.int32)),
            "int64": Tensor(np.asarray(cum, np.int64))}[kind]


# ----------------------------------------------------------------------------------- rope


class _RopeBody(nn.Cell):
    def __init__(self, cos: Tensor, sin: Tensor, lens: object) -> None:
        super().__init__()
        self.rope = mgo.nn.RotaryEmbedding()
        self.cos, self.sin, self.lens = cos, sin, lens

    def construct(self, xs: tuple, ws: tuple) -> Tensor:
        yq, yk = self.rope(xs[0], xs[1], self.cos, self.sin, self.lens)
        return weighted(yq, ws[0]) + weighted(yk, ws[1])


@pytest.mark.parametrize("mode,dtype,lens_kind", [("graph", "float16", "list"), ("graph", "bfloat16", "int64"),
                                                  ("pynative", "float32", "int32")], indirect=["mode"])
def test_rotary_embedding(mode: str, dtype: str, lens_kind: str) -> None:
    rng = np.random.default_rng(1)
    lens, hidden = [3, 4], 256
    t = sum(lens)
    up = Upstream.make(rng, [(t, hidden), (t, hidden)], dtype)
    cos, sin = (quantize(rng.standard_normal((5, 128)), dtype) for _ in range(2))
    ws = [rng.standard_normal((t, hidden)).astype(np.float32) for _ in range(2)]
    want = ref.rope_grad(quantize(ws[0], dtype), quantize(ws[1], dtype), cos, sin, lens, mode="vjp")
    body = _RopeBody(to_ms(cos, dtype), to_ms(sin, dtype), lens if lens_kind == "list" else
                     Tensor(np.asarray(lens, np.int32 if lens_kind == "int32" else np.int64)))
    check_param_grads(up, body, ws, list(want), f"RotaryEmbedding {mode} {dtype}")


# ----------------------------------------------------------------------------------- sparse attention


class _SfaBody(nn.Cell):
    """``kv``: "separate" (x = q, k, v[, qr, kr]), "none" (value=None) or "twice" (k passed twice)."""

    def __init__(self, attrs: dict, kv: str, rope: bool, idx: Tensor, lens: tuple) -> None:
        super().__init__()
        self.attn = mgo.nn.SparseFlashAttention(**attrs)
        self.kv = kv
        self.rope = rope
        self.rope_at = 3 if kv == "separate" else 2
        self.idx = idx
        self.lq, self.lkv = lens

    def construct(self, xs: tuple, ws: tuple) -> Tensor:
        q = xs[0]
        k = xs[1]
        value = None
        qr = None
        kr = None
        if self.kv == "separate":
            value = xs[2]
        if self.kv == "twice":
            value = k
        if self.rope:
            qr = xs[self.rope_at]
            kr = xs[self.rope_at + 1]
        return weighted(self.attn(q, k, value, self.idx, qr, kr, self.lq, self.lkv), ws[0])


SFA_CASES = [
    # mode, layout, dtype, rope, kv, lengths
    ("graph", "TND", "bfloat16", True, "none", "list"),
    ("graph", "BSND", "float16", True, "twice", None),
    ("graph", "BSND", "bfloat16", False, "twice", None),
    ("graph", "TND", "float16", False, "separate", "int64"),
    ("graph", "BSND", "bfloat16", False, "none", None),
    ("pynative", "BSND", "float16", True, "none", None),
    ("pynative", "TND", "float32", False, "twice", "int32"),
    ("pynative", "TND", "bfloat16", True, "separate", "list"),
]


@pytest.mark.parametrize("mode,layout,dtype,rope,kv,lens_kind", SFA_CASES, indirect=["mode"])
def test_sparse_flash_attention(mode: str, layout: str, dtype: str, rope: bool, kv: str, lens_kind: str | None
                                ) -> None:
    rng = np.random.default_rng(3)
    n1, d, dr, k = 4, 16, 8, 5
    batches, tq, tk, cum = geometry(layout, [4, 5], [6, 3])
    shapes = [(*tq, n1, d), (*tk, 1, d)] + ([(*tk, 1, d)] if kv == "separate" else [])
    shapes += [(*tq, n1, dr), (*tk, 1, dr)] if rope else []
    up = Upstream.make(rng, shapes, dtype)
    idx = sfa_indices(rng, batches, k).reshape(*tq, 1, k)
    attrs = {"scale_value": 1.0 / np.sqrt(d + dr), "layout": layout}
    q, key = up.x[0], up.x[1]
    value = up.x[2] if kv == "separate" else key
    qr, kr = (up.x[-2], up.x[-1]) if rope else (None, None)
    out, smax, ssum = ref.sparse_flash_attention(q, key, value, idx, qr, kr, *cum, **attrs)
    w = rng.standard_normal(out.shape).astype(np.float32)
    dq, dk, dv, dqr, dkr = ref.sparse_flash_attention_grad(q, key, value, idx, quantize(w, dtype),
                                                           quantize(out, dtype), smax, ssum, *cum, qr, kr, **attrs)
    want = [dq, dk] if kv == "separate" else [dq, dk + dv]
    want += [dv] if kv == "separate" else []
    want += [dqr, dkr] if rope else []
    lens = (None, None) if lens_kind is None else tuple(_lengths(lens_kind, c) for c in cum)
    body = _SfaBody(attrs, kv, rope, Tensor(idx), lens)
    check_param_grads(up, body, [w], want, f"SparseFlashAttention {mode} {layout} {dtype} rope={rope} kv={kv}")


# ----------------------------------------------------------------------------------- indexer loss


class _KLBody(nn.Cell):
    """x = query, key, query_index, key_index, weights[, query_rope, key_rope]."""

    def __init__(self, scale: float, layout: str, rope: bool, consts: tuple, lens: tuple) -> None:
        super().__init__()
        self.loss = mgo.nn.IndexerKLLoss(scale, layout=layout)
        self.rope = rope
        self.idx, self.smax, self.ssum = consts
        self.lq, self.lk = lens

    def construct(self, xs: tuple, ws: tuple) -> Tensor:
        qr = None
        kr = None
        if self.rope:
            qr = xs[5]
            kr = xs[6]
        loss = self.loss(xs[0], xs[1], xs[2], xs[3], xs[4], self.idx, self.smax, self.ssum, qr, kr, self.lq,
                         self.lk)
        return loss.sum() * ws[0]


@pytest.mark.parametrize("mode,layout,dtype,rope,lens_kind", [
    ("graph", "TND", "bfloat16", True, "list"), ("pynative", "TND", "float16", False, "int64"),
    ("pynative", "BSND", "float32", True, None)],
    indirect=["mode"])
def test_indexer_kl_loss(mode: str, layout: str, dtype: str, rope: bool, lens_kind: str | None) -> None:
    rng = np.random.default_rng(4)
    n1, d, dr, nidx, didx, k = 4, 16, 8, 2, 8, 5
    batches, tq, tk, cum = geometry(layout, [4, 5], [6, 3])
    shapes = [(*tq, n1, d), (*tk, 1, d), (*tq, nidx, didx), (*tk, 1, didx), (*tq, nidx)]
    shapes += [(*tq, n1, dr), (*tk, 1, dr)] if rope else []
    up = Upstream.make(rng, shapes, dtype)
    q, key, qi, ki, wts = up.x[:5]
    qr, kr = (up.x[5], up.x[6]) if rope else (None, None)
    idx = sfa_indices(rng, batches, k).reshape(*tq, 1, k)
    scale = 1.0 / np.sqrt(d + dr)
    kw = {"scale_value": scale, "layout": layout}
    smax, ssum = (s.astype(np.float32) for s in ref.attention_softmax_stats(q, key, idx, qr, kr, *cum, **kw))
    dqi, dki, dw, _ = ref.sparse_lightning_indexer_grad_kl_loss(q, key, qi, ki, wts, idx, smax, ssum, qr, kr, *cum,
                                                                 **kw)
    scale_out = np.float32(3.0)
    zeros = [np.zeros(s) for s in shapes]
    want = [zeros[0], zeros[1], 3.0 * dqi, 3.0 * dki, 3.0 * dw] + zeros[5:]
    lens = (None, None) if lens_kind is None else tuple(_lengths(lens_kind, c) for c in cum)
    body = _KLBody(scale, layout, rope, (Tensor(idx), Tensor(smax), Tensor(ssum)), lens)
    check_param_grads(up, body, [np.asarray(scale_out)], want, f"IndexerKLLoss {mode} {layout} {dtype} rope={rope}")


# ----------------------------------------------------------------------------------- the DSA chain


class _DsaBody(nn.Cell):
    """Indexer -> top-k -> sparse attention over a shared latent kv (value=None) with rope ->
    weighted output, plus the indexer's KL loss on the attention's statistics (the layer of
    issue 9). x = q, kv, q_rope, k_rope, query_index, key_index, weights."""

    def __init__(self, scale: float, layout: str, k: int, lens: tuple) -> None:
        super().__init__()
        self.indexer = mgo.nn.LightningIndexer(k, layout=layout)
        self.attn = mgo.nn.SparseFlashAttention(scale, layout=layout, return_softmax_lse=True)
        self.kl = mgo.nn.IndexerKLLoss(scale, layout=layout)
        self.lq, self.lk = lens

    def construct(self, xs: tuple, ws: tuple) -> Tensor:
        q, kv, qr, kr, qi, ki, wts = xs
        idx, _ = self.indexer(qi, ki, wts, self.lq, self.lk)
        out, smax, ssum = self.attn(q, kv, None, idx, qr, kr, self.lq, self.lk)
        kl = self.kl(q, kv, qi, ki, wts, idx, smax, ssum, qr, kr, self.lq, self.lk)
        return weighted(out, ws[0]) + kl.sum()


@pytest.mark.parametrize("mode,layout,dtype,lens_kind", [
    ("graph", "BSND", "bfloat16", None), ("pynative", "TND", "float32", "list"),
    ("pynative", "TND", "float16", "int32"), ("pynative", "TND", "bfloat16", "int64")], indirect=["mode"])
def test_dsa_chain(mode: str, layout: str, dtype: str, lens_kind: str | None) -> None:
    """LightningIndexer's selection has no gradient; the Dense layers in front of the attention get
    the attention gradient, those in front of the indexer the KL gradient only. Lengths as Python
    lists and int32/int64 tensors pass through all three Cells, forward and backward."""
    rng = np.random.default_rng(5)
    n1, d, dr, nidx, didx, k = 4, 16, 8, 2, 8, 4
    _, tq, _, cum = geometry(layout, [5, 6], [5, 6])
    shapes = [(*tq, n1, d), (*tq, 1, d), (*tq, n1, dr), (*tq, 1, dr), (*tq, nidx, didx), (*tq, 1, didx),
              (*tq, nidx)]
    up = Upstream.make(rng, shapes, dtype)
    q, kv, qr, kr, qi, ki, wts = up.x
    scale = 1.0 / np.sqrt(d + dr)
    kw = {"scale_value": scale, "layout": layout}
    # The selection the kernel makes (float32 scores of the same inputs; checked against the
    # reference elsewhere) is the one both gradients depend on.
    idx, _ = mgo.ops.lightning_indexer(to_ms(qi, dtype), to_ms(ki, dtype), to_ms(wts, dtype), *cum, sparse_count=k,
                                       layout=layout)
    idx = idx.asnumpy()
    out, smax, ssum = ref.sparse_flash_attention(q, kv, kv, idx, qr, kr, *cum, **kw)
    w = rng.standard_normal(out.shape).astype(np.float32)
    dq, dk, dv, dqr, dkr = ref.sparse_flash_attention_grad(q, kv, kv, idx, quantize(w, dtype), quantize(out, dtype),
                                                           smax, ssum, *cum, qr, kr, **kw)
    stats = [s.astype(np.float32).astype(np.float64) for s in ref.attention_softmax_stats(q, kv, idx, qr, kr, *cum,
                                                                                          **kw)]
    dqi, dki, dw, _ = ref.sparse_lightning_indexer_grad_kl_loss(q, kv, qi, ki, wts, idx, *stats, qr, kr, *cum, **kw)
    lens = (None, None) if lens_kind is None else tuple(_lengths(lens_kind, c) for c in cum)
    body = _DsaBody(scale, layout, k, lens)
    check_param_grads(up, body, [w], [dq, dk + dv, dqr, dkr, dqi, dki, dw], f"DSA chain {mode} {layout} {dtype}")


# ----------------------------------------------------------------------------------- issue 9 reproducer


class _ReproNet(nn.Cell):
    def __init__(self, b: int, s: int, n1: int, dr: int) -> None:
        super().__init__()
        self.sfa = mgo.nn.SparseFlashAttention(0.2)
        self.shape = (b, s, n1, dr)

    def construct(self, x: Tensor, q: Tensor, kv: Tensor, kr: Tensor, idx: Tensor) -> Tensor:
        return self.sfa(q, kv, kv, idx, (x * 2.0).reshape(self.shape), kr).sum()


@pytest.mark.parametrize("mode", ["graph", "pynative"], indirect=True)
def test_issue9_reproducer(mode: str) -> None:
    """Issue 9's reproducer: the GRAPH run aborted (exit 134) or returned a wrongly shaped gradient."""
    b, s, n1, d, dr, k = 1, 8, 2, 16, 4, 4
    r = np.random.default_rng(0)
    arrays = [r.standard_normal(shape).astype(np.float32) for shape in
              [(b * s, n1 * dr), (b, s, n1, d), (b, s, 1, d), (b, s, 1, dr)]]
    idx = np.tile(np.arange(k, dtype=np.int32), (b, s, 1, 1))
    g = ms.grad(_ReproNet(b, s, n1, dr), grad_position=0)(*(Tensor(a) for a in arrays), Tensor(idx))
    assert g.shape == (8, 8)
    x, q, kv, kr = (a.astype(np.float64) for a in arrays)
    qr = (2.0 * x).reshape(b, s, n1, dr)
    out, smax, ssum = ref.sparse_flash_attention(q, kv, kv, idx, qr, kr, scale_value=0.2)
    grads = ref.sparse_flash_attention_grad(q, kv, kv, idx, np.ones_like(out), out, smax, ssum, None, None, qr, kr,
                                            scale_value=0.2)
    assert_close(g.asnumpy(), 2.0 * grads[3].reshape(8, 8), "float32", "attention", "d x")

