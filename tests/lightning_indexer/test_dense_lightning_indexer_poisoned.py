"""Every output element of the dense pair's CPU kernels is written: the AOT entry points called directly into
outputs poisoned with NaN (tests/cpu/cpp/call_aot.cc), on cases with rows without a visible key, BSND padding
rows and keys no row sees; such elements must come out as the reference's exact zeros."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _aot_call import build_call_aot, call
from _dense_indexer_cases import GRAD_INPUTS, make_dense_case
from _util import assert_close

from ms_grad_ops import reference as ref

CASES = [("float32", "float32", "TND", 1), ("float16", "float32", "TND", 4), ("bfloat16", "bfloat16", "BSND", 1)]


@pytest.fixture(scope="module")
def call_aot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_call_aot(tmp_path_factory.mktemp("call_aot"))


def _case(dtype: str, wdtype: str, layout: str, n2: int):  # noqa: ANN202
    # TND: batch 0 has S1 > S2 (rows 0..3 see no key), batch 1 keys but no query, batch 3 queries but no key;
    # BSND: padding rows, a batch without queries, and keys beyond each batch's key length (seen by no row).
    return make_dense_case(np.random.default_rng(51), dtype, wdtype, layout, lens_q=[6, 0, 3, 2], lens_k=[2, 4, 9, 0],
                           b=3, s1=5, s2=7, n1=4, n2=n2, bsnd_lens=([5, 2, 0], [7, 3, 4]))


def _lens(case) -> list[tuple[np.ndarray, str]]:  # noqa: ANN001
    """The lengths, then cmp_residual_k absent (plain keys)."""
    return [(np.asarray(x if x is not None else [], np.int32), "int32") for x in (*case.lens(), None)]


@pytest.mark.parametrize("dtype,wdtype,layout,n2", CASES)
def test_softmax_lse_writes_every_element(call_aot: Path, tmp_path: Path, dtype: str, wdtype: str, layout: str,
                                          n2: int) -> None:
    case = _case(dtype, wdtype, layout, n2)
    a = case.arrays
    want = ref.dense_lightning_indexer_softmax_lse(*case.ref_lse_args(), **case.attrs())
    ins = [(a["query_index"], dtype), (a["key_index"], dtype), (a["weights"], wdtype), *_lens(case)]
    attrs = [f"attr str layout {layout}", "attr int sparse_mode 3", "attr int cmp_ratio 1"]
    got = call(call_aot, tmp_path, "DenseLightningIndexerSoftmaxLse", attrs,
               ins, [(want[0].shape, "float32"), (want[1].shape, "float32")])
    for g, w in zip(got, want):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)
        assert np.all(g[w == 0] == 0)
    assert (want[1] == 0).any(), "the case must have a row without a visible key"


@pytest.mark.parametrize("dtype,wdtype,layout,n2", CASES)
def test_grad_kl_loss_writes_every_element(call_aot: Path, tmp_path: Path, dtype: str, wdtype: str, layout: str,
                                           n2: int) -> None:
    case = _case(dtype, wdtype, layout, n2)
    a = case.arrays
    want = ref.dense_lightning_indexer_grad_kl_loss(*case.ref_grad_args(), **case.grad_attrs())
    kinds = {"weights": wdtype, "softmax_max": "float32", "softmax_sum": "float32", "softmax_max_index": "float32",
             "softmax_sum_index": "float32"}
    ins = [(a[n], kinds.get(n, dtype)) for n in GRAD_INPUTS] + _lens(case)
    outs = [(a["query_index"].shape, dtype), (a["key_index"].shape, dtype), (a["weights"].shape, wdtype),
            ((1,), "float32")]
    attrs = [f"attr float scale_value {case.scale!r}", f"attr str layout {layout}", "attr int sparse_mode 3",
             "attr bool deterministic 0", "attr int cmp_ratio 1"]
    got = call(call_aot, tmp_path, "DenseLightningIndexerGradKLLoss", attrs, ins, outs)
    for (_, dt), name, g, w in zip(outs, ("d_query_index", "d_key_index", "d_weights"), got, want):
        g = g.astype(np.float64)
        assert_close(g, w, dt if dt != "float32" else dtype, "attention", f"poisoned {name}")
        assert np.all(g[w == 0] == 0), name
    assert abs(got[3][0] - want[3]) <= 1e-3 * abs(want[3])
    assert (want[1].reshape(-1, want[1].shape[-1]) == 0).all(axis=1).any(), "the case must have a key without gradient"
    assert (want[0].reshape(-1, want[0].shape[-1]) == 0).all(axis=1).any(), "and a query row without"
