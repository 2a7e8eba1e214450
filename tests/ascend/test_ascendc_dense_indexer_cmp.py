"""The dense pair's Ascend C kernels with compressed keys (cmp_ratio, cmp_residual_k; docs/contract.md
section 9.1) on the CPU twin: dense_lightning_indexer_softmax_lse and dense_lightning_indexer_grad_kl_loss
(main attention N2 = 1 and N2 = N1) against the float64 references under the same rule (the grad's
statistics from the references too), TND and BSND, residuals given or absent, rows that see no
compressed key; poisoned outputs written once; the same bits for 1, 8 and 24 cores."""
from __future__ import annotations

import numpy as np
import pytest
from _dense_indexer_cases import DenseCase, make_dense_case
from ascendc_harness import twin_dense_indexer as dense
from test_ascendc_dense_lightning_indexer_grad_kl_loss import NAMES, check_against

from ms_grad_ops import reference as ref

# (layout, ratio, residuals or None, sizes): compressed key counts S2 with S2 * ratio + residual >= S1
# for the last rows, so early rows see no key and later ones a growing prefix.
CASES = [
    ("TND", 4, [3, 0, 1], {"lens_q": [20, 0, 9], "lens_k": [4, 2, 6]}),
    ("BSND", 3, None, {"b": 2, "s1": 20, "s2": 5}),
    ("BSND", 128, [5, 127], {"b": 2, "s1": 300, "s2": 3}),
]


def cmp_case(seed: int, dtype: str, layout: str, ratio: int, residual: list[int] | None, n2: int,
             sizes: dict) -> tuple[DenseCase, dict]:
    """A dense case whose four statistics follow the compressed rule (float32-rounded)."""
    case = make_dense_case(np.random.default_rng(seed), dtype, "float32", layout, n1=4, n2=n2, d=32, dr=16,
                           nidx=4, didx=16, **sizes)
    a, rule = case.arrays, {"layout": layout, "sparse_mode": 3, "cmp_ratio": ratio}
    mx, sm = ref.dense_attention_softmax_stats(a["query"], a["key"], a["query_rope"], a["key_rope"], *case.lens(),
                                               residual, scale_value=case.scale, **rule)
    mxi, smi = ref.dense_lightning_indexer_softmax_lse(*case.ref_lse_args(), residual, **rule)
    for name, x in zip(("softmax_max", "softmax_sum", "softmax_max_index", "softmax_sum_index"), (mx, sm, mxi, smi)):
        a[name] = x.astype(np.float32).astype(np.float64)
    return case, rule


@pytest.mark.parametrize(("layout", "ratio", "residual", "sizes"), CASES)
def test_softmax_lse(layout: str, ratio: int, residual: list[int] | None, sizes: dict) -> None:
    case, rule = cmp_case(ratio, "bfloat16", layout, ratio, residual, 1, sizes)
    a = case.arrays
    p = dense.DliProblem("bfloat16", "float32", a["query_index"], a["key_index"], a["weights"], *case.lens(), rule,
                         cmp_residual_k=residual)
    want = ref.dense_lightning_indexer_softmax_lse(*case.ref_lse_args(), residual, **rule)
    assert (want[1] == 0).any() and (want[1] > 0).any(), "some rows see no compressed key, others do"
    first = None
    for cores in (1, 8, 24):
        run = dense.dense_lightning_indexer_softmax_lse(p, cores, cores)
        assert run.info.min_writes == 1 and run.info.max_writes == 1, "every output byte written exactly once"
        got_max, got_sum = run.outputs
        np.testing.assert_allclose(got_max, want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_sum, want[1], rtol=1e-4, atol=1e-6)
        if first is None:
            first = run.outputs
        for x, y in zip(first, run.outputs):
            np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))


@pytest.mark.parametrize("n2", [1, 4])
@pytest.mark.parametrize(("layout", "ratio", "residual", "sizes"), CASES)
def test_grad_kl_loss(layout: str, ratio: int, residual: list[int] | None, sizes: dict, n2: int) -> None:
    dtype = "float16" if n2 == 1 else "bfloat16"
    case, rule = cmp_case(ratio + n2, dtype, layout, ratio, residual, n2, sizes)
    p = dense.DligProblem(dtype, "float32", dict(case.arrays), *case.lens(), {"scale_value": case.scale, **rule},
                          cmp_residual_k=residual)
    want = ref.dense_lightning_indexer_grad_kl_loss(*case.ref_grad_args(), residual, scale_value=case.scale, **rule)
    first = dense.dense_lightning_indexer_grad_kl_loss(p, 1)
    check_against(first, want, dtype)
    for cores in (8, 24):
        again = dense.dense_lightning_indexer_grad_kl_loss(p, cores, cores).outputs[4:]
        for name, x, y in zip((*NAMES, "loss"), first.outputs[4:], again):
            np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8), err_msg=name)

