"""nn.SparseFlashAttention: forward + bprop (the fused grad kernel) vs the float64 reference,
PyNative, GRAPH and GRAPH with dynamic shapes; key is value (value=None, or one tensor twice)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _sfa_data import Case, make_case
from _util import MS_DTYPES, assert_close, quantize, to_ms, to_np
from mindspore import Tensor, nn
from mindspore import ops as msops

from ms_grad_ops import nn as mgo_nn
from ms_grad_ops import reference as ref


class _Loss(nn.Cell):
    """sum(float32(out) * w) of the attention Cell. kv: "separate" (key, value), "none" (value=None:
    key is value) or "twice" (one tensor passed as key and as value)."""

    def __init__(self, attn: nn.Cell, rope: bool, kv: str, tnd: bool) -> None:
        super().__init__()
        self.attn = attn
        self.rope = rope
        self.kv = kv
        self.tnd = tnd

    def construct(self, q: Tensor, k: Tensor, v: Tensor, idx: Tensor, qr: Tensor, kr: Tensor, lq: Tensor,
                  lkv: Tensor, w: Tensor) -> Tensor:
        value = v
        if self.kv == "none":
            value = None
        if self.kv == "twice":
            value = k
        if not self.rope:
            qr = None
            kr = None
        if not self.tnd:
            lq = None
            lkv = None
        out = self.attn(q, k, value, idx, qr, kr, lq, lkv)
        return (msops.cast(out, ms.float32) * w).sum()


def _inputs(case: Case, dtype: str, rng: np.random.Generator, kv_shared: bool) -> tuple[list, dict]:
    if kv_shared:
        case.value = case.key
    x = {n: quantize(getattr(case, n), dtype) if getattr(case, n) is not None else None
         for n in ("query", "key", "value", "query_rope", "key_rope")}
    out_shape = case.query.shape
    w = rng.standard_normal(out_shape).astype(np.float32)
    dummy = np.zeros((1, 1, 1) if case.layout == "TND" else (1, 1, 1, 1))
    # BSND: the Loss passes None for the lengths; these stand-ins only fill the argument list.
    lq = Tensor(np.asarray(case.lens_q if case.lens_q else [0], np.int32))
    lkv = Tensor(np.asarray(case.lens_kv if case.lens_kv else [0], np.int32))
    args = [to_ms(x["query"], dtype), to_ms(x["key"], dtype), to_ms(x["value"], dtype),
            Tensor(case.sparse_indices),
            to_ms(x["query_rope"] if x["query_rope"] is not None else dummy, dtype),
            to_ms(x["key_rope"] if x["key_rope"] is not None else dummy, dtype), lq, lkv, Tensor(w)]
    return args, x


def _reference_grads(case: Case, x: dict, w: np.ndarray, dtype: str) -> tuple:
    out, smax, ssum = ref.sparse_flash_attention(x["query"], x["key"], x["value"], case.sparse_indices,
                                                 x["query_rope"], x["key_rope"], case.lens_q, case.lens_kv,
                                                 **case.attrs())
    return ref.sparse_flash_attention_grad(x["query"], x["key"], x["value"], case.sparse_indices,
                                           quantize(w, dtype), out, smax, ssum, case.lens_q, case.lens_kv,
                                           x["query_rope"], x["key_rope"], **case.attrs())


def _check_cell_grads(case: Case, dtype: str, kv: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rope = case.query_rope is not None
    kv_shared = kv != "separate"
    args, x = _inputs(case, dtype, rng, kv_shared)
    attn = mgo_nn.SparseFlashAttention(case.scale_value, case.sparse_block_size, case.layout, case.sparse_mode)
    loss = _Loss(attn, rope, kv, case.layout == "TND")
    positions = (0, 1, 4, 5) if rope else (0, 1)
    if not kv_shared:
        positions = positions + (2,)
    grads = ms.grad(loss, grad_position=positions)(*args)
    want = _reference_grads(case, x, args[-1].asnumpy(), dtype)
    got = dict(zip(positions, grads))
    assert_close(to_np(got[0]), want[0], dtype, "attention", "d_query")
    if kv_shared:
        assert_close(to_np(got[1]), want[1] + want[2], dtype, "attention", "d_key + d_value")
    else:
        assert_close(to_np(got[1]), want[1], dtype, "attention", "d_key")
        assert_close(to_np(got[2]), want[2], dtype, "attention", "d_value")
    if rope:
        assert_close(to_np(got[4]), want[3], dtype, "attention", "d_query_rope")
        assert_close(to_np(got[5]), want[4], dtype, "attention", "d_key_rope")


@pytest.mark.parametrize("dtype,kv,layout,rope", [
    ("float32", "separate", "TND", True), ("bfloat16", "none", "TND", True), ("float16", "separate", "BSND", False),
    ("bfloat16", "twice", "BSND", True), ("float16", "none", "BSND", False)])
def test_cell_grads_match_reference(exec_mode: str, dtype: str, kv: str, layout: str, rope: bool) -> None:
    case = make_case(np.random.default_rng(5), layout=layout, lens_q=[5, 6], lens_kv=[9, 4], batch=2, s1=5, s2=7,
                     n1=4, d=16, dr=8 if rope else None, k=5, bs=2, pattern="mixed")
    _check_cell_grads(case, dtype, kv, 6)


def test_cell_forward_matches_functional() -> None:
    case = make_case(np.random.default_rng(7), layout="TND", lens_q=[4, 3], lens_kv=[6, 3], n1=2, d=8, dr=4, k=3)
    args, x = _inputs(case, "float32", np.random.default_rng(8), False)
    attn = mgo_nn.SparseFlashAttention(case.scale_value, 1, "TND", 3)
    out = attn(*args[:8])
    want, _, _ = ref.sparse_flash_attention(x["query"], x["key"], x["value"], case.sparse_indices, x["query_rope"],
                                            x["key_rope"], case.lens_q, case.lens_kv, **case.attrs())
    assert_close(to_np(out), want, "float32", "attention")


def test_graph_dynamic_shapes() -> None:
    """GRAPH mode with None dims (Cell.set_inputs): one compiled graph, two token counts."""
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        dtype = "bfloat16"
        n1, d, dr, k = 4, 16, 8, 5
        attn = mgo_nn.SparseFlashAttention(1.0 / np.sqrt(d + dr), 1, "TND", 3)
        loss = _Loss(attn, True, "none", True)
        f = MS_DTYPES[dtype]
        loss.set_inputs(Tensor(shape=[None, n1, d], dtype=f), Tensor(shape=[None, 1, d], dtype=f),
                        Tensor(shape=[None, 1, d], dtype=f), Tensor(shape=[None, 1, k], dtype=ms.int32),
                        Tensor(shape=[None, n1, dr], dtype=f), Tensor(shape=[None, 1, dr], dtype=f),
                        Tensor(shape=[None], dtype=ms.int32), Tensor(shape=[None], dtype=ms.int32),
                        Tensor(shape=[None, n1, d], dtype=ms.float32))
        grad_fn = ms.grad(loss, grad_position=(0, 1, 4, 5))
        for seed, (lq, lkv) in enumerate([([5, 6], [9, 4]), ([3, 2, 7], [3, 8, 7])]):
            case = make_case(np.random.default_rng(seed), layout="TND", lens_q=lq, lens_kv=lkv, n1=n1, d=d, dr=dr,
                             k=k)
            rng = np.random.default_rng(100 + seed)
            args, x = _inputs(case, dtype, rng, True)
            grads = grad_fn(*args)
            want = _reference_grads(case, x, args[-1].asnumpy(), dtype)
            assert_close(to_np(grads[0]), want[0], dtype, "attention", "d_query")
            assert_close(to_np(grads[1]), want[1] + want[2], dtype, "attention", "d_key + d_value")
            assert_close(to_np(grads[2]), want[3], dtype, "attention", "d_query_rope")
            assert_close(to_np(grads[3]), want[4], dtype, "attention", "d_key_rope")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_cell_tnd_without_lengths_is_one_sequence(exec_mode: str) -> None:
    """The lengths rule: TND without lengths = one sequence of T1 queries and T2 keys."""
    case = make_case(np.random.default_rng(9), layout="TND", lens_q=[6], lens_kv=[9], n1=2, d=8, dr=4, k=4)
    args, x = _inputs(case, "float32", np.random.default_rng(10), False)
    attn = mgo_nn.SparseFlashAttention(case.scale_value, 1, "TND", 3, return_softmax_lse=True)
    out, smax, ssum = attn(*args[:6])
    want = ref.sparse_flash_attention(x["query"], x["key"], x["value"], case.sparse_indices, x["query_rope"],
                                      x["key_rope"], [6], [9], **case.attrs())
    for got, w, what in zip((out, smax, ssum), want, ("out", "softmax_max", "softmax_sum")):
        assert_close(to_np(got), w, "float32", "attention", what)


def test_cell_bsnd_lengths_are_per_batch() -> None:
    attn = mgo_nn.SparseFlashAttention(0.5, layout="BSND")
    q = Tensor(np.zeros((1, 3, 2, 4), np.float32))
    kv = Tensor(np.zeros((1, 3, 1, 4), np.float32))
    with pytest.raises(ValueError, match=r"sparse_flash_attention: actual_seq_lengths_query\[0\] = 4 must be in "
                                         r"\[0, 3\] in BSND layout"):
        attn(q, kv, None, Tensor(np.zeros((1, 3, 1, 2), np.int32)), None, None, [4], [3])
