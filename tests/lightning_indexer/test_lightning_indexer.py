"""CPU kernel of ``lightning_indexer`` (top-k selection) vs the float64 reference and NumPy argsort.

Selections are compared with the float64 scores at the error bound of a float32 evaluation
(``_selection``), which holds whatever summation order this CPU's GEMM takes; small-integer data
(exact arithmetic on every path) is compared exactly."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from _selection import assert_same_selection, indexer_scores
from _util import DTYPES, Fn, OpCell, quantize, to_ms

import ms_grad_ops as mgo
from ms_grad_ops import ops
from ms_grad_ops import reference as ref

OP = "lightning_indexer"


def _inputs(rng: np.random.Generator, dtype: str, wdtype: str, layout: str, lens_q: list[int], lens_k: list[int],
            nidx: int = 4, didx: int = 16) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if layout == "TND":
        tq, tk = [sum(lens_q)], [sum(lens_k)]
    else:
        tq, tk = [len(lens_q), lens_q[0]], [len(lens_k), lens_k[0]]
    qi = quantize(rng.standard_normal((*tq, nidx, didx)), dtype)
    ki = quantize(rng.standard_normal((*tk, 1, didx)), dtype)
    w = quantize(rng.standard_normal((*tq, nidx)), wdtype)
    return qi, ki, w


def _run(qi: np.ndarray, ki: np.ndarray, w: np.ndarray, dtype: str, wdtype: str, lens: tuple, **kw: object
         ) -> tuple[np.ndarray, np.ndarray]:
    idx, val = ops.lightning_indexer(to_ms(qi, dtype), to_ms(ki, dtype), to_ms(w, wdtype), *lens, **kw)
    assert idx.dtype == ms.int32 and val.dtype == ms.float32
    return idx.asnumpy(), val.asnumpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout,sparse_mode", [("TND", 3), ("TND", 0), ("BSND", 3), ("BSND", 0)])
def test_matches_reference(dtype: str, layout: str, sparse_mode: int) -> None:
    rng = np.random.default_rng(21)
    lens_q, lens_k = ([5, 0, 30, 3], [9, 4, 700, 1]) if layout == "TND" else ([17] * 2, [600] * 2)
    for wdtype in dict.fromkeys((dtype, "float32")):
        qi, ki, w = _inputs(rng, dtype, wdtype, layout, lens_q, lens_k)
        lens = (list(np.cumsum(lens_q)), list(np.cumsum(lens_k))) if layout == "TND" else ()
        scores = indexer_scores(qi, ki, w, *lens, layout=layout, sparse_mode=sparse_mode)
        for k in (1, 13, 600):
            got = _run(qi, ki, w, dtype, wdtype, lens, sparse_count=k, layout=layout, sparse_mode=sparse_mode)
            assert_same_selection(*got, scores, f"{dtype}/{wdtype} K={k}")


def test_selection_vs_numpy_argsort() -> None:
    """Random float32 scores over 2000 keys: the kernel's ordered top-256 is NumPy's stable argsort
    of the float64 scores at every position whose score is further from both neighbours' than
    their error bounds (a float32 evaluation in any order cannot move those keys), and a valid
    top-256 within the bounds elsewhere (near ties may swap on another CPU's summation order)."""
    rng = np.random.default_rng(22)
    qi, ki, w = _inputs(rng, "float32", "float32", "TND", [1], [2000], nidx=8, didx=32)
    idx, val = _run(qi, ki, w, "float32", "float32", ([1], [2000]), sparse_count=256, layout="TND", sparse_mode=0)
    ref_scores = indexer_scores(qi, ki, w, [1], [2000], layout="TND", sparse_mode=0)
    assert_same_selection(idx, val, ref_scores, "top-256 of 2000")
    scores, bound = ref_scores.score[0], ref_scores.bound[0]
    top = np.argsort(-scores, kind="stable")[:257]
    apart = scores[top[:-1]] - scores[top[1:]] > bound[top[:-1]] + bound[top[1:]]  # position i vs i + 1
    fixed = apart & np.r_[True, apart[:-1]]  # apart from both neighbours
    assert fixed.sum() >= 240, "the data must pin most positions for this test to mean something"
    np.testing.assert_array_equal(idx.reshape(-1)[fixed], top[:256][fixed])


def test_ties_go_to_the_lower_index() -> None:
    """Integer-valued inputs give exact ties (duplicated key rows, all-negative rows -> 0). Every
    product and sum is a small integer, exact in float32 in any order, so the kernel must equal the
    reference exactly on every CPU path."""
    rng = np.random.default_rng(23)
    ki_rows = rng.integers(-2, 3, (6, 8)).astype(np.float64)
    ki = ki_rows[rng.integers(0, 6, 40)][:, None, :]
    qi = rng.integers(-2, 3, (5, 3, 8)).astype(np.float64)
    w = rng.integers(0, 3, (5, 3)).astype(np.float64)
    for k in (4, 11, 40):
        idx, val = _run(qi, ki, w, "bfloat16", "float32", ([5], [40]), sparse_count=k, layout="TND", sparse_mode=0)
        ridx, rval = ref.lightning_indexer(qi, ki, w, [5], [40], sparse_count=k, layout="TND", sparse_mode=0)
        np.testing.assert_array_equal(idx, ridx)
        np.testing.assert_array_equal(val, rval.astype(np.float32))
        for r in range(5):  # ties really occur, each tie ordered by index
            v, i = val[r, 0], idx[r, 0]
            tied = v[1:] == v[:-1]
            assert np.all(i[1:][tied] > i[:-1][tied])
    assert (val[:, 0, 1:] == val[:, 0, :-1]).any()


def test_rows_with_one_or_no_visible_key() -> None:
    rng = np.random.default_rng(24)
    qi, ki, w = _inputs(rng, "float32", "float32", "TND", [4], [2])
    idx, val = _run(qi, ki, w, "float32", "float32", ([4], [2]), sparse_count=3, layout="TND", sparse_mode=3)
    # causal with S1 = 4 > S2 = 2: rows 0, 1 see nothing, row 2 sees key 0, row 3 keys 0 and 1
    np.testing.assert_array_equal(idx[:3, 0], [[-1, -1, -1], [-1, -1, -1], [0, -1, -1]])
    assert sorted(idx[3, 0][:2]) == [0, 1] and idx[3, 0, 2] == -1
    assert np.isneginf(val[:2]).all() and np.isneginf(val[2, 0, 1:]).all()


def test_graph_mode_and_dynamic_shapes() -> None:
    rng = np.random.default_rng(25)
    fn = Fn(_graph_call)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        fn.set_inputs(ms.Tensor(shape=[None, None, 4, 16], dtype=ms.bfloat16),
                      ms.Tensor(shape=[None, None, 1, 16], dtype=ms.bfloat16),
                      ms.Tensor(shape=[None, None, 4], dtype=ms.bfloat16))
        for b, s1, s2 in ((2, 5, 9), (1, 12, 30)):
            qi, ki, w = _inputs(rng, "bfloat16", "bfloat16", "BSND", [s1] * b, [s2] * b)
            idx, val = fn(to_ms(qi, "bfloat16"), to_ms(ki, "bfloat16"), to_ms(w, "bfloat16"))
            assert_same_selection(idx.asnumpy(), val.asnumpy(),
                                  indexer_scores(qi, ki, w, layout="BSND", sparse_mode=3), f"GRAPH {b}x{s1}x{s2}")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _graph_call(qi: ms.Tensor, ki: ms.Tensor, w: ms.Tensor) -> tuple:
    return ops.lightning_indexer(qi, ki, w, sparse_count=7, layout="BSND", sparse_mode=3)


@pytest.mark.parametrize("kw,lens,exc,match", [
    ({"sparse_count": 0}, (), ValueError, "attribute 'sparse_count' must be an integer in [1, 1048576], got 0"),
    ({"sparse_count": 4, "layout": "SBH"}, (), ValueError,
     "attribute 'layout' must be one of \"BSND\", \"TND\", got \"SBH\""),
    ({"sparse_count": 4, "sparse_mode": 2}, (), ValueError,
     "attribute 'sparse_mode' must be one of 0 (no mask), 3 (rightDownCausal), got 2"),
    ({"sparse_count": 4}, ([2, 1], [3, 5]), ValueError, "must be non-decreasing cumulative lengths"),
    ({"sparse_count": 4}, ([3], [3, 5]), ValueError, "'actual_seq_lengths_key' dim 0 must be"),
    ({"sparse_count": 4}, ([3], None), ValueError, "must both be given or both be None"),
])
def test_bad_inputs(kw: dict, lens: tuple, exc: type, match: str) -> None:
    rng = np.random.default_rng(26)
    qi, ki, w = _inputs(rng, "float32", "float32", "TND", [3], [5])
    import re
    with pytest.raises(exc, match=f"^{OP}: .*{re.escape(match)}"):
        _run(qi, ki, w, "float32", "float32", lens, **{"layout": "TND", **kw})


def test_bad_dtypes_and_shapes() -> None:
    rng = np.random.default_rng(27)
    qi, ki, w = _inputs(rng, "float16", "float16", "TND", [3], [5])
    with pytest.raises(TypeError, match="argument 'weights' must have the dtype of 'query_index' \\(float16\\)"):
        _run(qi, ki, w, "float16", "bfloat16", (), sparse_count=2, layout="TND")
    with pytest.raises(ValueError, match=r"argument 'key_index' dim 2 must be Didx of 'query_index' = 16"):
        ops.lightning_indexer(to_ms(qi, "float16"), to_ms(ki[..., :8], "float16"), to_ms(w, "float16"),
                              sparse_count=2, layout="TND")


def test_lengths_tensor_errors_are_runtime_errors() -> None:
    rng = np.random.default_rng(28)
    qi, ki, w = _inputs(rng, "float32", "float32", "TND", [3], [5])
    lq, lk = ms.Tensor(np.array([3], np.int64)), ms.Tensor(np.array([4], np.int64))
    with pytest.raises(RuntimeError, match=f"{OP}: the last entry of actual_seq_lengths_key \\(4\\) must equal"):
        _run(qi, ki, w, "float32", "float32", (lq, lk), sparse_count=2, layout="TND")


# ---------------------------------------------------------------- the sparse_count size rule
# K in sparse_count's domain (the table's, 2**20 at most) and T1 * K <= 2**31 - 1
# (infer_shape/lightning_indexer.h): both outputs are allocated before the kernel runs, so a K
# nothing can hold is a ValueError naming the op and sparse_count, not MindSpore's "Allocate output
# memory failed".
_CAP = r"^lightning_indexer: attribute 'sparse_count' must be an integer in \[1, 1048576\], got 2147483647"
_SLOTS = r"^lightning_indexer: attribute 'sparse_count' = 1048576 gives outputs sparse_indices/sparse_values of " \
         r"4096 x 1048576 slots each for 'query_index' \[4096, 1, 4\], more than 2147483647"


def _size_case(t1: int) -> list[ms.Tensor]:
    """TND, T1 query rows of one sequence over 5 keys, Nidx = 1, Didx = 4."""
    rng = np.random.default_rng(29)
    qi, ki, w = _inputs(rng, "float32", "float32", "TND", [t1], [5], nidx=1, didx=4)
    return [to_ms(qi, "float32"), to_ms(ki, "float32"), to_ms(w, "float32")]


@pytest.mark.parametrize(("sparse_count", "match"), [(2**31 - 1, _CAP), (2**20, _SLOTS)])
def test_sparse_count_size_rule(exec_mode: str, sparse_count: int, match: str) -> None:
    """PyNative (eager) and GRAPH (at compile): the cap, and T1 * K beyond int32 for T1 = 4096."""
    with pytest.raises(ValueError, match=match):
        OpCell(ops.lightning_indexer, {"sparse_count": sparse_count, "layout": "TND"})(*_size_case(4096))


def test_sparse_count_size_rule_with_dynamic_shapes() -> None:
    """GRAPH with T1 unknown at compile: the cap is a ValueError at compile; the T1 part, known only
    when the graph runs, a RuntimeError from the C++ infer (MindSpore's wrapper, the rule's message)."""
    dyn = [ms.Tensor(shape=[None, 1, 4], dtype=ms.float32), ms.Tensor(shape=[None, 1, 4], dtype=ms.float32),
           ms.Tensor(shape=[None, 1], dtype=ms.float32)]
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        for sparse_count, exc, match, t1 in ((2**31 - 1, ValueError, _CAP, 3),
                                             (2**20, RuntimeError, "For LightningIndexer.*" + _SLOTS[1:], 4096)):
            cell = OpCell(ops.lightning_indexer, {"sparse_count": sparse_count, "layout": "TND"})
            cell.set_inputs(*dyn)
            with pytest.raises(exc, match=match):
                cell(*_size_case(t1))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_large_sane_sparse_count_still_works() -> None:
    """K = 2**20 (the cap) for 3 query rows over 5 keys: the visible keys, then -1 / -inf padding."""
    idx, val = ops.lightning_indexer(*_size_case(3), sparse_count=2**20, layout="TND", sparse_mode=3)
    idx, val = idx.asnumpy(), val.asnumpy()
    assert idx.shape == val.shape == (3, 1, 2**20)
    assert [sorted(idx[t, 0, :t + 3]) for t in range(3)] == [[0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]
    assert all((idx[t, 0, t + 3:] == -1).all() and np.isneginf(val[t, 0, t + 3:]).all() for t in range(3))


def test_cells_check_sparse_count_when_built() -> None:
    """nn.LightningIndexer and nn.DSAttention (its index_topk) reject the cap in their constructor;
    the T1 part when the Cell is called."""
    with pytest.raises(ValueError, match=_CAP):
        mgo.nn.LightningIndexer(2**31 - 1, layout="TND")
    with pytest.raises(ValueError, match=_CAP):
        mgo.nn.DSAttention(dim=8, n_heads=1, q_lora_rank=4, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2,
                           v_head_dim=2, index_n_heads=1, index_head_dim=2, index_topk=2**31 - 1, max_seq_len=8)
    with pytest.raises(ValueError, match=_SLOTS):
        mgo.nn.LightningIndexer(2**20, layout="TND")(*_size_case(4096))
