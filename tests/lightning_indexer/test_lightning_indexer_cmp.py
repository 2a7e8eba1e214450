"""``lightning_indexer`` and its value gradient over compressed keys (``cmp_ratio``, ``cmp_residual_k``;
docs/contract.md section 9.1) vs the float64 reference (selections checked with ``_selection``, which holds
on every CPU), DeepSeek-V4's own visibility rule, and ``cmp_ratio=1`` against the op without it."""
from __future__ import annotations

import importlib

import mindspore as ms
import numpy as np
import pytest
from _selection import assert_same_selection, indexer_scores
from _util import DTYPES, assert_close, quantize, to_ms
from mindspore import Tensor

import ms_grad_ops as mgo
from ms_grad_ops import builtins, ops
from ms_grad_ops import reference as ref

# The module (the package exports its function of the same name): its row plan, tested directly.
ref_li = importlib.import_module("ms_grad_ops.reference.lightning_indexer")


def _inputs(rng: np.random.Generator, dtype: str, wdtype: str, tq: tuple, tk: tuple, nidx: int = 4,
            didx: int = 16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    qi = quantize(rng.standard_normal((*tq, nidx, didx)), dtype)
    ki = quantize(rng.standard_normal((*tk, 1, didx)), dtype)
    w = quantize(rng.standard_normal((*tq, nidx)), wdtype)
    return qi, ki, w


def _run(qi: np.ndarray, ki: np.ndarray, w: np.ndarray, dtype: str, wdtype: str, *args: object, **kw: object
         ) -> tuple[np.ndarray, np.ndarray]:
    idx, val = ops.lightning_indexer(to_ms(qi, dtype), to_ms(ki, dtype), to_ms(w, wdtype), *args, **kw)
    return idx.asnumpy(), val.asnumpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("ratio", [4, 128])
def test_matches_reference(dtype: str, layout: str, ratio: int) -> None:
    """Random residuals; TND: a sequence whose first queries see no compressed key, one without
    queries, one with more compressed keys than its queries see; BSND: full rows."""
    rng = np.random.default_rng(31 + ratio)
    if layout == "TND":
        lens_q, lens_k = ([40, 0, 13, 9], [11, 2, 3, 9]) if ratio == 4 else ([300, 0, 5], [2, 1, 2])
        tq, tk = (sum(lens_q),), (sum(lens_k),)
        lens = (list(np.cumsum(lens_q)), list(np.cumsum(lens_k)))
    else:
        tq, tk = ((2, 37), (2, 9)) if ratio == 4 else ((2, 260), (2, 2))
        lens = (None, None)
    residual = [int(x) for x in rng.integers(0, ratio, len(lens_q))] if layout == "TND" else [0, ratio - 1]
    for wdtype in dict.fromkeys((dtype, "float32")):
        qi, ki, w = _inputs(rng, dtype, wdtype, tq, tk)
        scores = indexer_scores(qi, ki, w, *lens, layout=layout, sparse_mode=3, cmp_ratio=ratio,
                                cmp_residual_k=residual)
        assert (scores.visible == 0).any() and (scores.visible > 0).any()
        for k in (1, 5, 16):
            got = _run(qi, ki, w, dtype, wdtype, *lens, residual, sparse_count=k, layout=layout, cmp_ratio=ratio)
            assert_same_selection(*got, scores, f"{dtype}/{wdtype} ratio {ratio} K={k}")


@pytest.mark.parametrize("ratio", [4, 128])
def test_visible_count_is_deepseeks(ratio: int) -> None:
    """A whole sequence (S_orig = S1, so S2 = S1 // r and residual S1 % r): row t selects
    min(K, (t + 1) // r) keys, DeepSeek-V4's ``(t + 1) // ratio``."""
    s1 = 3 * ratio + ratio // 2 + 1
    s2, residual = s1 // ratio, s1 % ratio
    qi, ki, w = _inputs(np.random.default_rng(32), "float32", "float32", (s1,), (s2,))
    idx, _ = _run(qi, ki, w, "float32", "float32", None, None, [residual], sparse_count=s2, layout="TND",
                  cmp_ratio=ratio)
    assert [int((idx[t] >= 0).sum()) for t in range(s1)] == [(t + 1) // ratio for t in range(s1)]


def test_no_mask_sees_every_compressed_key() -> None:
    qi, ki, w = _inputs(np.random.default_rng(33), "float32", "float32", (6,), (3,))
    idx, _ = _run(qi, ki, w, "float32", "float32", None, None, [1], sparse_count=4, layout="TND", sparse_mode=0,
                  cmp_ratio=4)
    assert ((idx >= 0).sum(axis=-1) == 3).all()


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_ratio_1_is_the_plain_op(layout: str) -> None:
    """cmp_ratio 1 with zero residuals is the op without compressed keys, bit for bit (the visible counts
    are the same integers: docs/contract.md section 9.1)."""
    rng = np.random.default_rng(34)
    tq, tk = ((29,), (41,)) if layout == "TND" else ((2, 9), (2, 12))
    lens = ([20, 29], [25, 41]) if layout == "TND" else ([9, 4], [12, 7])
    qi, ki, w = _inputs(rng, "bfloat16", "float32", tq, tk)
    plain = _run(qi, ki, w, "bfloat16", "float32", *lens, sparse_count=16, layout=layout)
    ratio_1 = _run(qi, ki, w, "bfloat16", "float32", *lens, [0, 0], sparse_count=16, layout=layout, cmp_ratio=1)
    for a, b in zip(plain, ratio_1):
        np.testing.assert_array_equal(a, b)


def test_ratio_1_rule_is_the_causal_rule() -> None:
    """The reference's visibility at ratio 1 is section 0.4's ``i + S2 - S1 + 1`` (clipped) on every
    shape of a grid, including S1 > S2 and empty batches (the CPU kernel computes the same integers)."""
    for s1 in range(0, 7):
        for s2 in range(0, 7):
            rows = ref_li._rows(s1, [(0, s1, 0, s2)], 3, 1, [0])
            want = np.clip(np.arange(s1) + s2 - s1 + 1, 0, s2)
            np.testing.assert_array_equal(rows.limit, want)


def _grad_case(rng: np.random.Generator) -> tuple:
    lens_q, lens_k, residual = [13, 7], [4, 3], [1, 3]
    qi, ki, w = _inputs(rng, "float32", "float32", (20,), (7,))
    return qi, ki, w, (list(np.cumsum(lens_q)), list(np.cumsum(lens_k))), residual


def test_value_gradient_through_the_bprop(exec_mode: str) -> None:
    """ms.grad through ops.lightning_indexer with cmp_ratio 4: the bprop (lightning_indexer_grad) gets the
    residuals and cmp_ratio, so its gradients are the reference's for the selected compressed keys."""
    qi, ki, w, lens, residual = _grad_case(np.random.default_rng(35))
    c = np.random.default_rng(36).standard_normal((20, 1, 3)).astype(np.float32)
    res_t = Tensor(np.asarray(residual, np.int32))
    lens_t = [Tensor(np.asarray(x, np.int32)) for x in lens]

    def loss(q: Tensor, k: Tensor, wt: Tensor) -> Tensor:
        idx, val = ops.lightning_indexer(q, k, wt, *lens_t, res_t, sparse_count=3, layout="TND", cmp_ratio=4)
        return (ms.ops.where(idx >= 0, val, 0.0) * Tensor(c)).sum()

    fn = ms.jit(ms.grad(loss, grad_position=(0, 1, 2))) if exec_mode == "graph" else ms.grad(loss, (0, 1, 2))
    got = fn(to_ms(qi, "float32"), to_ms(ki, "float32"), to_ms(w, "float32"))
    idx, _ = ref.lightning_indexer(qi, ki, w, *lens, residual, sparse_count=3, layout="TND", cmp_ratio=4)
    assert (idx < 0).any() and (idx >= 0).any()
    dv = np.where(idx >= 0, c, np.nan)
    want = ref.lightning_indexer_grad(qi, ki, w, idx, dv, *lens, residual, layout="TND", cmp_ratio=4)
    for name, g, wnt in zip(("d_query_index", "d_key_index", "d_weights"), got, want):
        assert_close(g.asnumpy(), wnt, "float32", "attention", name)


def test_grad_skips_slots_the_compressed_mask_hides() -> None:
    """Indices visible at ratio 1 but hidden at ratio 4 carry NaN d_values: never read."""
    qi, ki, w, lens, residual = _grad_case(np.random.default_rng(37))
    rng = np.random.default_rng(38)
    si = np.concatenate([rng.integers(0, 4, (13, 1, 5)), rng.integers(0, 3, (7, 1, 5))]).astype(np.int32)
    rows = ref_li._prepare("TND", qi, ki, *lens, 3, 4, residual)[1]
    read = si < rows.limit[:, None, None]
    assert (~read).any() and read.any()
    dv = np.where(read, rng.standard_normal(si.shape), np.nan).astype(np.float32)
    got = ops.lightning_indexer_grad(to_ms(qi, "float32"), to_ms(ki, "float32"), to_ms(w, "float32"), Tensor(si),
                                     Tensor(dv), *lens, residual, layout="TND", cmp_ratio=4)
    want = ref.lightning_indexer_grad(qi, ki, w, si, dv, *lens, residual, layout="TND", cmp_ratio=4)
    for g, wnt in zip(got, want):
        assert_close(g.asnumpy(), wnt, "float32", "attention", "lightning_indexer_grad cmp_ratio 4")


def test_cell_takes_cmp_ratio() -> None:
    qi, ki, w, lens, residual = _grad_case(np.random.default_rng(39))
    cell = mgo.nn.LightningIndexer(3, "TND", 3, 4)
    idx, _ = cell(to_ms(qi, "float32"), to_ms(ki, "float32"), to_ms(w, "float32"),
                  *[Tensor(np.asarray(x, np.int32)) for x in lens], Tensor(np.asarray(residual, np.int32)))
    want, _ = ref.lightning_indexer(qi, ki, w, *lens, residual, sparse_count=3, layout="TND", cmp_ratio=4)
    np.testing.assert_array_equal(idx.asnumpy() >= 0, want >= 0)


@pytest.mark.parametrize("residual,exc,match", [
    ([4, 0], RuntimeError, r"lightning_indexer: cmp_residual_k\[0\] = 4 must be in \[0, cmp_ratio = 4\)"),
    ([0], ValueError, r"lightning_indexer: argument 'cmp_residual_k' dim 0 must be the batch count of "
                      r"'actual_seq_lengths_query' = 2"),
])
def test_bad_residuals(residual: list[int], exc: type, match: str) -> None:
    qi, ki, w, lens, _ = _grad_case(np.random.default_rng(40))
    with pytest.raises(exc, match=match):
        _run(qi, ki, w, "float32", "float32", *lens, Tensor(np.asarray(residual, np.int32)), sparse_count=3,
             layout="TND", cmp_ratio=4)


def test_ascend_takes_cmp_ratios_whole_range() -> None:
    """The Ascend C kernels of the indexer and its value gradient take compressed keys over CANN's whole
    range (tests/ascend/test_ascendc_indexer_cmp.py): no narrower Ascend limit (docs/ops/lightning_indexer.md)."""
    from ms_grad_ops._specs import OP_SPECS
    for op in ("lightning_indexer", "lightning_indexer_grad"):
        attr = OP_SPECS[op].attr("cmp_ratio")
        assert attr.error(op, 128, "Ascend") is None
        assert attr.error(op, 129, "Ascend") == f"{op}: attribute 'cmp_ratio' must be an integer in [1, 128], got 129"


def test_npu_lightning_indexer_builtin() -> None:
    """hyper-parallel's signature: cu_seq_lens with their leading 0, sparse_count positional."""
    qi, ki, w, lens, residual = _grad_case(np.random.default_rng(41))
    args = (to_ms(qi, "bfloat16"), to_ms(ki, "bfloat16"), to_ms(w, "float32"))
    got = builtins.npu_lightning_indexer(*args, 3, cu_seq_lens_q=[0, *lens[0]], cu_seq_lens_k=[0, *lens[1]],
                                         cmp_residual_k=residual, layout="TND", sparse_mode=3, cmp_ratio=4,
                                         return_value=True)
    want = ops.lightning_indexer(*args, *lens, residual, sparse_count=3, layout="TND", cmp_ratio=4)
    for g, wnt in zip(got, want):
        np.testing.assert_array_equal(g.asnumpy(), wnt.asnumpy())
    assert got[1].dtype == ms.float32
    with pytest.raises(ValueError, match="lightning_indexer: argument 'block_table'"):
        builtins.npu_lightning_indexer(*args, 3, block_table=Tensor(np.zeros((1, 1), np.int32)))
