"""NaN/Inf in the inputs reach the outputs they feed as NaN, exactly where the float64 reference
(IEEE arithmetic) has NaN; rows with no visible key still give 0 / 0 / 0, never NaN.

Max- and compare-based code drops NaN (``a > b ? a : b`` returns b for a NaN a; a select
``x > 0 ? d : 0`` turns a NaN d into 0): these tests catch that in every attention/indexer op.
"""
from __future__ import annotations

import _indexer_cases as ic
import numpy as np
import pytest
from _selection import assert_same_selection, indexer_scores
from _sfa_data import make_case
from _util import to_ms, to_np
from mindspore import Tensor

from ms_grad_ops import ops
from ms_grad_ops import reference as ref
from ms_grad_ops.reference.sparse_flash_attention import visible_keys

# The float64 reference meets the NaN too (inf - inf, NaN @ x): NumPy warns, as IEEE allows.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def _assert_same_nan(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """NaN exactly where the reference has NaN; elsewhere close (float32 inputs, loose bound)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN pattern differs")
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4, err_msg=what)


def _sfa_case() -> tuple:
    """TND, two batches (the first rows of the second see nothing), NaN in one query row, +Inf in a
    query_rope row (its scores are +-Inf or NaN) and NaN in one key."""
    c = make_case(np.random.default_rng(7), layout="TND", lens_q=[4, 6], lens_kv=[5, 3], n1=2, d=8, dr=4, k=4,
                  pattern="mixed")
    c.query[1, 0, 3] = np.nan          # row 1, head 0 only
    c.query_rope[2, 1, 0] = np.inf     # row 2, head 1 only
    c.key[6, 0, 2] = np.nan            # a key of batch 2
    vis = [visible_keys(c.sparse_indices[t, 0], *_local(c, t), 1, 3) for t in range(10)]
    assert any(not v for v in vis), "the case must have rows with no visible key"
    return c, vis


def _local(c: object, t: int) -> tuple[int, int, int]:
    """(s1, S1_b, S2_b) of token t in the case above."""
    return (t, 4, 5) if t < 4 else (t - 4, 6, 3)


def _sfa_inputs(c: object) -> dict:
    f32 = "float32"
    return dict(query=to_ms(c.query, f32), key=to_ms(c.key, f32), value=to_ms(c.value, f32),
                sparse_indices=Tensor(c.sparse_indices), query_rope=to_ms(c.query_rope, f32),
                key_rope=to_ms(c.key_rope, f32), actual_seq_lengths_query=c.lens_q, actual_seq_lengths_kv=c.lens_kv)


def test_sparse_flash_attention_forward_propagates_nan() -> None:
    c, vis = _sfa_case()
    got = ops.sparse_flash_attention(**_sfa_inputs(c), **c.attrs())
    want = ref.sparse_flash_attention(c.query, c.key, c.value, c.sparse_indices, c.query_rope, c.key_rope, c.lens_q,
                                      c.lens_kv, **c.attrs())
    for name, g, w in zip(("out", "softmax_max", "softmax_sum"), got, want):
        _assert_same_nan(to_np(g), w, f"sparse_flash_attention {name}")
    m = to_np(got[1])
    assert np.isnan(m[0, 1, 0]) and np.isnan(to_np(got[0])[1, 0]).all(), "row 1 head 0: NaN max and output"
    for t in (t for t, v in enumerate(vis) if not v):   # no visible key: 0 / 0 / 0
        assert (to_np(got[0])[t] == 0).all() and (m[0, t] == 0).all() and (to_np(got[2])[0, t] == 0).all()


def test_sparse_flash_attention_grad_propagates_nan() -> None:
    c, _ = _sfa_case()
    out, mx, sm = ref.sparse_flash_attention(c.query, c.key, c.value, c.sparse_indices, c.query_rope, c.key_rope,
                                             c.lens_q, c.lens_kv, **c.attrs())
    d_out = np.random.default_rng(1).standard_normal(out.shape)
    want = ref.sparse_flash_attention_grad(c.query, c.key, c.value, c.sparse_indices, d_out, out, mx, sm, c.lens_q,
                                           c.lens_kv, c.query_rope, c.key_rope, **c.attrs())
    a = _sfa_inputs(c)
    got = ops.sparse_flash_attention_grad(
        a["query"], a["key"], a["value"], a["sparse_indices"], to_ms(d_out, "float32"), to_ms(out, "float32"),
        Tensor(mx.astype(np.float32)), Tensor(sm.astype(np.float32)), c.lens_q, c.lens_kv, a["query_rope"],
        a["key_rope"], **c.attrs())
    for name, g, w in zip(("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope"), got, want):
        _assert_same_nan(to_np(g), w, f"sparse_flash_attention_grad {name}")
    assert np.isnan(want[0]).any() and not np.isnan(want[0]).all(), "the case must mix NaN and finite rows"


@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_indexer_grad_gives_nan_for_heads_with_nan_query_index(poison: float) -> None:
    c = ic.make_case(np.random.default_rng(3), "float32", "float32", layout="TND", lens_q=[4, 5], lens_k=[6, 7],
                     k=5, drop=0.0)
    a = c.arrays
    a["query_index"][6, 1, 2] = poison   # row 6, index head 1
    args = ic.ms_args(c, "float32", "float32")
    got = ops.sparse_lightning_indexer_grad_kl_loss(*args, **c.ref_kwargs())
    want = ref.sparse_lightning_indexer_grad_kl_loss(*c.ref_args(), **c.ref_kwargs())
    for name, g, w in zip(("d_query_index", "d_key_index", "d_weights", "loss"), got, want):
        _assert_same_nan(to_np(g).reshape(np.shape(w)), w, f"sparse_lightning_indexer_grad_kl_loss {name}")
    if np.isnan(poison):  # (an Inf whose scores are all -Inf after the dot is cut off by the ReLU)
        assert np.isnan(to_np(got[0])[6]).all() and np.isnan(to_np(got[3])).all()
    assert np.isfinite(to_np(got[0])[:4]).all(), "rows of the other batch stay finite"


def test_lightning_indexer_grad_nan_reaches_what_it_feeds() -> None:
    """NaN in one index head of a query row, in one key row, in one weight and in one read
    d_values slot; NaN in unread slots (-1, hidden keys) reaches nothing."""
    c = ic.make_case(np.random.default_rng(5), "float32", "float32", layout="TND", lens_q=[4, 5], lens_k=[6, 7],
                     k=5, drop=0.2)
    a = c.arrays
    si = a["sparse_indices"]
    a["query_index"][6, 1, 2] = np.nan     # row 6, index head 1
    a["key_index"][2, 0, 3] = np.nan       # key 2 of batch 1
    a["weights"][7, 0] = np.nan            # row 7, head 0
    dv = np.random.default_rng(6).standard_normal(si.shape)
    dv[si < 0] = np.nan
    dv[8, 0, np.flatnonzero(si[8, 0] >= 0)[0]] = np.nan   # one read slot of row 8
    args = (to_ms(a["query_index"], "float32"), to_ms(a["key_index"], "float32"), to_ms(a["weights"], "float32"),
            Tensor(si.astype(np.int32)), Tensor(dv.astype(np.float32)), c.lens_q, c.lens_k)
    got = ops.lightning_indexer_grad(*args, layout="TND", sparse_mode=3)
    want = ref.lightning_indexer_grad(a["query_index"], a["key_index"], a["weights"], si, dv, c.lens_q, c.lens_k,
                                      layout="TND", sparse_mode=3)
    for name, g, w in zip(("d_query_index", "d_key_index", "d_weights"), got, want):
        _assert_same_nan(to_np(g), w, f"lightning_indexer_grad {name}")
        assert np.isnan(w).any() and not np.isnan(w).all(), f"{name}: the case must mix NaN and finite values"


def test_lightning_indexer_forward_with_nan_scores_matches_reference() -> None:
    """NaN scores rank below every number (documented); their values are NaN, other rows unchanged."""
    c = ic.make_case(np.random.default_rng(4), "float32", "float32", layout="TND", lens_q=[3, 4], lens_k=[5, 6])
    a = c.arrays
    a["key_index"][7, 0, 0] = np.nan    # key 2 of batch 2
    a["weights"][1, 0] = np.nan         # every score of row 1
    got = ops.lightning_indexer(to_ms(a["query_index"], "float32"), to_ms(a["key_index"], "float32"),
                                to_ms(a["weights"], "float32"), c.lens_q, c.lens_k, sparse_count=6, layout="TND")
    scores = indexer_scores(a["query_index"], a["key_index"], a["weights"], c.lens_q, c.lens_k, layout="TND",
                            sparse_mode=3)
    # the float64 ordered top-6 (NaN last, in key order; near ties within float32 rounding aside),
    # values NaN exactly where the reference's are
    assert_same_selection(got[0].asnumpy(), got[1].asnumpy(), scores, "lightning_indexer")
    assert np.isnan(got[1].asnumpy()[1, 0, :4]).all(), "row 1: every score NaN"
