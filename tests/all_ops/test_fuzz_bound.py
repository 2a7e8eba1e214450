"""The fuzz comparison (tests/support/_fuzz_cases.py) bounds each output element by the size of the
terms that make it (the reference with ``terms=True``): an element whose terms cancel to 0 is held to
their rounding, an error beyond it still fails, and the bound is never below the element itself."""
from __future__ import annotations

import numpy as np
from _fuzz_cases import _compare

from ms_grad_ops import reference as ref

CFG = {"dtype": "float32"}


def test_cancelling_element_is_held_to_its_terms() -> None:
    want, terms = [np.array([0.0, 1.0])], [np.array([1.0, 1.0])]
    assert _compare("sparse_flash_attention_grad", CFG, [np.array([5e-5, 1.0])], want, terms) is None
    assert "output 0: element (0,)" in _compare("sparse_flash_attention_grad", CFG, [np.array([2e-4, 1.0])], want,
                                                terms)
    # without terms the bound is the element itself: 0 takes no error
    assert _compare("sparse_flash_attention_grad", CFG, [np.array([5e-5, 1.0])], want, None) is not None
    # terms below the element (never from the reference): the element bounds
    assert _compare("sparse_flash_attention_grad", CFG, [np.array([0.0, 1.00005])], want, [np.zeros(2)]) is None


def test_one_visible_key_cancels_exactly_and_its_terms_do_not() -> None:
    """One visible key: P = 1, dS = P (dP - dO . O) = 0, so d_query is 0 in float64 (and ~1e-7 in
    a float32 kernel), while its terms are the size of the key times dO . v."""
    rng = np.random.default_rng(0)
    q, k, d_out = rng.standard_normal((2, 1, 4)), rng.standard_normal((2, 1, 4)), rng.standard_normal((2, 1, 4))
    idx = np.array([[[0]], [[0]]], np.int32)          # both rows select key 0 only
    out, mx, sm = ref.sparse_flash_attention(q, k, k, idx, scale_value=0.5, layout="TND")
    kw = {"scale_value": 0.5, "layout": "TND"}
    dq = ref.sparse_flash_attention_grad(q, k, k, idx, d_out, out, mx, sm, **kw)[0]
    terms = ref.sparse_flash_attention_grad(q, k, k, idx, d_out, out, mx, sm, **kw, terms=True)[0]
    np.testing.assert_allclose(dq, 0.0, atol=1e-15)
    assert (terms > 0.1 * np.abs(k).min()).all()
