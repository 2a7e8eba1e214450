"""ms.grad through the functional ops (their primitives carry the fused grad kernel as bprop), in
PyNative and GRAPH mode, vs the float64 reference; the grad ops say they have none."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _util import assert_close, quantize, to_ms, to_np
from mindspore import Tensor

import ms_grad_ops as mgo
from ms_grad_ops import reference as ref


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_rope(exec_mode: str) -> None:
    rng = np.random.default_rng(1)
    q, k, wq, wk = (_f32(rng, 6, 256) for _ in range(4))
    cos, sin = _f32(rng, 4, 128), _f32(rng, 4, 128)
    lens = [4, 2]

    def loss(q: Tensor, k: Tensor) -> Tensor:
        yq, yk = mgo.ops.rope(q, k, Tensor(cos), Tensor(sin), lens)
        return (yq * Tensor(wq)).sum() + (yk * Tensor(wk)).sum()

    got = ms.grad(loss, grad_position=(0, 1))(Tensor(q), Tensor(k))
    want = ref.rope_grad(wq, wk, cos, sin, lens, mode="vjp")
    for g, w in zip(got, want):
        assert_close(to_np(g), w, "float32", "attention", "rope grad")


def test_cla_gate_merge(exec_mode: str) -> None:
    rng = np.random.default_rng(2)
    og, ol, w = (_f32(rng, 5, 2, 16) for _ in range(3))
    zg, zl = _f32(rng, 5, 2), _f32(rng, 5, 2)

    def loss(*x: Tensor) -> Tensor:
        return (mgo.ops.cla_gate_merge(*x) * Tensor(w)).sum()

    got = ms.grad(loss, grad_position=(0, 1, 2, 3))(*(Tensor(a) for a in (og, ol, zg, zl)))
    for g, want in zip(got, ref.cla_gate_backward(w, og, ol, zg, zl)):
        assert_close(to_np(g), want, "float32", "attention", "cla_gate_merge grad")


def test_sparse_flash_attention(exec_mode: str) -> None:
    """TND without lengths (one sequence), shared kv (value=None), rope."""
    rng = np.random.default_rng(3)
    q, qr, w = _f32(rng, 7, 2, 8), _f32(rng, 7, 2, 4), _f32(rng, 7, 2, 8)
    kv, kr = _f32(rng, 9, 1, 8), _f32(rng, 9, 1, 4)
    idx = np.stack([rng.permutation(9)[:4] for _ in range(7)]).astype(np.int32).reshape(7, 1, 4)
    attrs = {"scale_value": 0.3, "layout": "TND"}

    def loss(q: Tensor, kv: Tensor, qr: Tensor, kr: Tensor) -> Tensor:
        out, _, _ = mgo.ops.sparse_flash_attention(q, kv, None, Tensor(idx), qr, kr, **attrs)
        return (out * Tensor(w)).sum()

    got = ms.grad(loss, grad_position=(0, 1, 2, 3))(*(Tensor(a) for a in (q, kv, qr, kr)))
    out, smax, ssum = ref.sparse_flash_attention(q, kv, kv, idx, qr, kr, [7], [9], **attrs)
    dq, dk, dv, dqr, dkr = ref.sparse_flash_attention_grad(q, kv, kv, idx, w, out, smax, ssum, [7], [9], qr, kr,
                                                           **attrs)
    for g, want, what in zip(got, (dq, dk + dv, dqr, dkr), ("d_query", "d_kv", "d_query_rope", "d_key_rope")):
        assert_close(to_np(g), want, "float32", "attention", what)


def test_sparse_flash_attention_bf16_kv_passed_twice(exec_mode: str) -> None:
    """One bfloat16 tensor as key and as value: MindSpore adds the two gradients (no bfloat16 AddN
    on CPU), so they reach it in float32."""
    rng = np.random.default_rng(5)
    q, w = quantize(_f32(rng, 2, 5, 4, 8), "bfloat16"), _f32(rng, 2, 5, 4, 8)
    kv = quantize(_f32(rng, 2, 6, 1, 8), "bfloat16")
    idx = np.stack([rng.permutation(6)[:3] for _ in range(10)]).astype(np.int32).reshape(2, 5, 1, 3)
    attrs = {"scale_value": 0.35, "layout": "BSND"}

    def loss(q: Tensor, kv: Tensor) -> Tensor:
        out, _, _ = mgo.ops.sparse_flash_attention(q, kv, kv, Tensor(idx), **attrs)
        return (out.astype(ms.float32) * Tensor(w)).sum()

    got = ms.grad(loss, grad_position=(0, 1))(to_ms(q, "bfloat16"), to_ms(kv, "bfloat16"))
    assert got[1].dtype == ms.float32
    out, smax, ssum = ref.sparse_flash_attention(q, kv, kv, idx, **attrs)
    dq, dk, dv, _, _ = ref.sparse_flash_attention_grad(q, kv, kv, idx, quantize(w, "bfloat16"), out, smax, ssum,
                                                       **attrs)
    assert_close(to_np(got[0]), dq, "bfloat16", "attention", "d_query")
    assert_close(to_np(got[1]), dk + dv, "bfloat16", "attention", "d_key + d_value")


def test_lightning_indexer_values(exec_mode: str) -> None:
    """The values' gradient flows to the selected keys (test_lightning_indexer_grad.py has the rest)."""
    rng = np.random.default_rng(4)
    qi, ki, w, dv = _f32(rng, 6, 2, 4), _f32(rng, 6, 1, 4), _f32(rng, 6, 2), _f32(rng, 6, 1, 3)

    def loss(qi: Tensor, ki: Tensor, w: Tensor) -> Tensor:
        idx, val = mgo.ops.lightning_indexer(qi, ki, w, sparse_count=3, layout="TND")
        return (ms.ops.where(idx >= 0, val, 0.0) * Tensor(dv)).sum()

    got = ms.grad(loss, grad_position=(0, 1, 2))(Tensor(qi), Tensor(ki), Tensor(w))
    idx, _ = mgo.ops.lightning_indexer(Tensor(qi), Tensor(ki), Tensor(w), sparse_count=3, layout="TND")
    want = ref.lightning_indexer_grad(qi, ki, w, idx.asnumpy(), dv, layout="TND")
    for g, wv, what in zip(got, want, ("d_query_index", "d_key_index", "d_weights")):
        assert_close(to_np(g), wv, "float32", "attention", what)


def test_grad_op_has_no_gradient(exec_mode: str) -> None:
    rng = np.random.default_rng(6)
    cos, sin = Tensor(_f32(rng, 3, 128)), Tensor(_f32(rng, 3, 128))

    def loss(g: Tensor) -> Tensor:
        return mgo.ops.rope_grad(g, g, cos, sin, [3], mode="vjp")[0].sum()

    with pytest.raises(RuntimeError, match="rope_grad has no gradient: it is a backward op itself"):
        ms.grad(loss, grad_position=0)(Tensor(_f32(rng, 3, 128))).asnumpy()
