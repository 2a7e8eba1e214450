"""CPU kernel of ``dense_lightning_indexer_softmax_lse`` vs the float64 reference and vs ``lightning_indexer``
(docs/contract.md section 4.3)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest
from _dense_indexer_cases import make_dense_case, ms_lse_args
from _paths import SUPPORT
from _util import Fn, to_np

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

OP = "dense_lightning_indexer_softmax_lse"
COMBOS = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"),
          ("bfloat16", "float32")]


def run_kernel(case, dtype: str, wdtype: str) -> list[np.ndarray]:  # noqa: ANN001
    out = ops.dense_lightning_indexer_softmax_lse(*ms_lse_args(case, dtype, wdtype), **case.attrs())
    assert all(t.dtype == ms.float32 for t in out)
    return [to_np(t) for t in out]


def check(case, dtype: str, wdtype: str) -> list[np.ndarray]:  # noqa: ANN001
    """Inputs are exact in their dtype, so the kernel differs from the float64 reference only by float32
    sums: the max by a few ulps of the logits' magnitude, the sum of exponentials by as many of its value."""
    got = run_kernel(case, dtype, wdtype)
    want = ref.dense_lightning_indexer_softmax_lse(*case.ref_lse_args(), **case.attrs())
    for g, w in zip(got, want):
        assert g.shape == w.shape
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=0)
    return got


@pytest.mark.parametrize("dtype,wdtype", COMBOS)
@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_matches_reference(dtype: str, wdtype: str, layout: str) -> None:
    check(make_dense_case(np.random.default_rng(1), dtype, wdtype, layout), dtype, wdtype)


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_long_rows_odd_sizes_and_modes(sparse_mode: int) -> None:
    """Rows of up to 1300 keys span three key blocks of the online max/sum."""
    case = make_dense_case(np.random.default_rng(2), "float32", "float32", "TND", sparse_mode, lens_q=[3, 40, 1],
                           lens_k=[1300, 41, 7], nidx=5, didx=19)
    check(case, "float32", "float32")


def test_rows_without_visible_keys_are_zero() -> None:
    """TND: batch 0 has S1 > S2 (causal rows 0..3 see no key), batch 1 no keys at all; BSND: padding rows."""
    case = make_dense_case(np.random.default_rng(3), "float32", "float32", "TND", lens_q=[6, 2, 3], lens_k=[2, 0, 5])
    got = check(case, "float32", "float32")
    empty = [0, 1, 2, 3, 6, 7]
    assert not got[0][0, empty].any() and not got[1][0, empty].any()
    assert (got[1][0, [4, 5, 8, 9, 10]] >= 1).all()
    case = make_dense_case(np.random.default_rng(4), "bfloat16", "float32", "BSND", b=3, s1=5, s2=6,
                           bsnd_lens=([5, 2, 0], [6, 3, 4]))
    got = check(case, "bfloat16", "float32")
    assert not got[1][1, 0, 2:].any() and not got[1][2].any() and (got[1][0] >= 1).all()


@pytest.mark.parametrize("dtype,layout", [("float32", "TND"), ("bfloat16", "BSND"), ("float16", "TND")])
def test_logits_are_lightning_indexers(dtype: str, layout: str) -> None:
    """The statistics are over exactly the logits lightning_indexer ranks: its best value is the max bit for bit,
    and the sum of exponentials of all its values (top-k = every key) is the sum."""
    case = make_dense_case(np.random.default_rng(5), dtype, "float32", layout, lens_q=[4, 30], lens_k=[9, 700],
                           s2=600)
    got = run_kernel(case, dtype, "float32")
    s2 = 700 if layout == "TND" else 600
    _, values = ops.lightning_indexer(*ms_lse_args(case, dtype, "float32"), sparse_count=s2, **case.attrs())
    values = to_np(values).reshape(got[0].size, s2)
    np.testing.assert_array_equal(got[0].reshape(-1), values[:, 0])
    visible = np.isfinite(values)
    sums = np.where(visible, np.exp(np.where(visible, values, 0) - values[:, :1]), 0).sum(axis=1)
    np.testing.assert_allclose(got[1].reshape(-1), sums, rtol=2e-6)


def test_graph_mode_and_dynamic_shapes() -> None:
    case = make_dense_case(np.random.default_rng(6), "bfloat16", "float32", "TND")
    args = [ms.Tensor(np.asarray(x, np.int64)) if isinstance(x, list) else x
            for x in ms_lse_args(case, "bfloat16", "float32")]
    want = run_kernel(case, "bfloat16", "float32")
    fn = Fn(_graph_call)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        fn.set_inputs(*[ms.Tensor(shape=[None] * t.ndim, dtype=t.dtype) for t in args])
        for g, w in zip(fn(*args), want):
            np.testing.assert_array_equal(to_np(g), w)
        other = make_dense_case(np.random.default_rng(7), "bfloat16", "float32", "TND", lens_q=[4, 4], lens_k=[6, 2])
        got = fn(*[ms.Tensor(np.asarray(x, np.int64)) if isinstance(x, list) else x
                   for x in ms_lse_args(other, "bfloat16", "float32")])
        want2 = ref.dense_lightning_indexer_softmax_lse(*other.ref_lse_args(), **other.attrs())
        np.testing.assert_allclose(to_np(got[1]), want2[1], rtol=1e-4)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _graph_call(*args: ms.Tensor) -> tuple:
    return ops.dense_lightning_indexer_softmax_lse(*args, layout="TND", sparse_mode=3)


_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np, mindspore as ms
    ms.set_device("CPU")
    sys.path.insert(0, {tests!r})
    from _dense_indexer_cases import make_dense_case, ms_lse_args
    from ms_grad_ops import ops
    case = make_dense_case(np.random.default_rng(8), "{dtype}", "float32", "TND", lens_q=[40, 33], lens_k=[50, 700],
                           nidx=8, didx=32)
    out = ops.dense_lightning_indexer_softmax_lse(*ms_lse_args(case, "{dtype}", "float32"), **case.attrs())
    print(hashlib.sha256(b"".join(t.asnumpy().tobytes() for t in out)).hexdigest())
""")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bitwise_identical_for_1_and_2_threads(dtype: str) -> None:
    script = _DETERMINISM_SCRIPT.format(tests=str(SUPPORT), dtype=dtype)
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digests.append(res.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]
    assert len(hashlib.sha256().hexdigest()) == len(digests[0])


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda a: a.__setitem__(1, ms.Tensor(np.zeros((9, 2, 16)), ms.float16)), ValueError,
     "argument 'key_index' dim 1 must be the key head count N2 = 1, got shape [9, 2, 16]"),
    (lambda a: a.__setitem__(2, ms.Tensor(np.zeros((7, 4)), ms.bfloat16)), TypeError,
     "argument 'weights' must have the dtype of 'query_index' (float16), got bfloat16"),
    (lambda a: a.__setitem__(2, ms.Tensor(np.zeros((6, 4)), ms.float32)), ValueError,
     "argument 'weights' dim 0 must be tokens of 'query_index' = 7, got shape [6, 4]"),
    (lambda a: a.__setitem__(3, [2]), ValueError, "the last entry of 'actual_seq_lengths_query' (2) must equal"),
])
def test_bad_inputs(mutate, exc, match) -> None:  # noqa: ANN001
    case = make_dense_case(np.random.default_rng(9), "float16", "float16", "TND", lens_q=[7], lens_k=[9])
    args = ms_lse_args(case, "float16", "float16")
    mutate(args)
    with pytest.raises(exc, match=f"^{OP}: .*" + _escape(match)):
        ops.dense_lightning_indexer_softmax_lse(*args, layout="TND")


def test_bad_attributes() -> None:
    case = make_dense_case(np.random.default_rng(10), "float32", "float32", "TND", lens_q=[3], lens_k=[5])
    with pytest.raises(ValueError, match=rf"^{OP}: attribute 'sparse_mode' must be one of 0 \(no mask\), 3 "
                                         r"\(rightDownCausal\), got 1"):
        ops.dense_lightning_indexer_softmax_lse(*ms_lse_args(case, "float32", "float32"), layout="TND", sparse_mode=1)


def _escape(s: str) -> str:
    import re
    return re.escape(s)
