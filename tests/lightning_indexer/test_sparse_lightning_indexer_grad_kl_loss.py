"""CPU kernel of ``sparse_lightning_indexer_grad_kl_loss`` vs the float64 reference (docs/contract.md section 4.2)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest
from _indexer_cases import Case, make_case, ms_args
from _paths import SUPPORT
from _util import Fn, assert_close, rel_l2, to_np

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

OP = "sparse_lightning_indexer_grad_kl_loss"
LOSS_TOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 1e-3}
COMBOS = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"),
          ("bfloat16", "float32")]


def run_kernel(case: Case, dtype: str, wdtype: str, **kw) -> list[np.ndarray]:
    out = ops.sparse_lightning_indexer_grad_kl_loss(*ms_args(case, dtype, wdtype), **case.ref_kwargs(), **kw)
    return [to_np(t) for t in out]


def check(case: Case, dtype: str, wdtype: str) -> None:
    got = run_kernel(case, dtype, wdtype)
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    for name, g, w in zip(("d_query_index", "d_key_index", "d_weights"), got[:3], want[:3]):
        assert_close(g, w, dtype if name != "d_weights" else (wdtype if wdtype != "float32" else dtype),
                     "attention", name)
    assert got[3].shape == (1,)
    assert abs(got[3][0] - want[3]) <= LOSS_TOL[dtype] * max(abs(want[3]), 1e-6), (got[3], want[3])


@pytest.mark.parametrize("dtype,wdtype", COMBOS)
@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_matches_reference(dtype: str, wdtype: str, layout: str) -> None:
    check(make_case(np.random.default_rng(1), dtype, wdtype, layout), dtype, wdtype)


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_sparse_modes_without_rope_and_odd_sizes(sparse_mode: int) -> None:
    rng = np.random.default_rng(2)
    case = make_case(rng, "float32", "float32", "TND", sparse_mode, lens_q=[1, 13, 2], lens_k=[5, 11, 70], n1=3,
                     d=33, dr=0, nidx=5, didx=19, k=67, drop=0.1)
    check(case, "float32", "float32")


def test_rows_without_visible_keys_are_zero() -> None:
    """Batch 0 has S1 > S2: causal rows 0..3 see no key; row 4 sees one; all -1 rows too."""
    rng = np.random.default_rng(3)
    case = make_case(rng, "float32", "float32", "TND", lens_q=[6, 3], lens_k=[2, 5], k=4, drop=0.0)
    case.arrays["sparse_indices"][6] = -1
    got = run_kernel(case, "float32", "float32")
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    for g, w in zip(got[:3], want[:3]):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
    for row in (0, 1, 2, 3, 4, 6):  # row 4: a single visible key -> y = p = 1, zero gradient
        assert not got[0][row].any() and not got[2][row].any(), row


def test_float32_keys_in_place_read_only_selected_rows() -> None:
    """float32 rows that select every visible key (a causal prefix shorter than K) multiply the key
    tensors in place, unpadded: a key row nobody selects, just past them, holds NaN and must reach no
    output (a padded in-place GEMM would read it, or run past the end of the tensor)."""
    rng = np.random.default_rng(5)
    case = make_case(rng, "float32", "float32", "TND", lens_q=[70, 6], lens_k=[70, 9], k=80, drop=0.0)
    a = case.arrays
    batch1 = a["sparse_indices"][70:]
    batch1[batch1 == 8] = -1  # local key 8 of batch 1 (global row 78, the last) is never selected
    for name in ("key", "key_rope", "key_index"):
        a[name][78] = np.nan
    got = run_kernel(case, "float32", "float32")
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
    for g, w in zip(got, want):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, np.reshape(w, np.shape(g)), rtol=1e-4, atol=1e-6)


def test_float32_duplicate_indices_are_gathered_not_used_in_place() -> None:
    """Sorted duplicates [0, 0, 0, 3] span four rows without being rows 0..3: a span-only check
    multiplied rows 0..3 in place (silently wrong gradients and loss)."""
    case = make_case(np.random.default_rng(11), "float32", "float32", "TND", 0, lens_q=[3], lens_k=[6], k=4, drop=0.0)
    a = case.arrays
    a["sparse_indices"][:, 0] = [[0, 0, 0, 3], [5, 1, 1, 4], [2, 3, 4, 5]]
    stats = ref.attention_softmax_stats(a["query"], a["key"], a["sparse_indices"], a["query_rope"], a["key_rope"],
                                        case.lens_q, case.lens_k, scale_value=case.scale, layout="TND", sparse_mode=0)
    a["softmax_max"], a["softmax_sum"] = (x.astype(np.float32).astype(np.float64) for x in stats)
    check(case, "float32", "float32")


def test_relu_boundary_exact_zeros() -> None:
    """Integer-valued index tensors make many q.k exactly 0: the mask is strictly Sx > 0."""
    rng = np.random.default_rng(4)
    case = make_case(rng, "float32", "float32", "TND", lens_q=[9], lens_k=[9], nidx=6, didx=4, k=9, drop=0.0)
    a = case.arrays
    a["query_index"] = rng.integers(-1, 2, a["query_index"].shape).astype(np.float64)
    a["key_index"] = rng.integers(-1, 2, a["key_index"].shape).astype(np.float64)
    sx = np.einsum("tgd,jd->tgj", a["query_index"], a["key_index"][:, 0])
    assert (sx == 0).mean() > 0.2
    for dtype in ("float32", "bfloat16"):
        got = run_kernel(case, dtype, "float32")
        want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), **case.ref_kwargs())
        for g, w in zip(got[:3], want[:3]):
            assert rel_l2(g, w) < (1e-5 if dtype == "float32" else 1e-2)


def test_graph_mode_and_dynamic_shapes() -> None:
    rng = np.random.default_rng(5)
    case = make_case(rng, "bfloat16", "float32", "TND")
    args = ms_args(case, "bfloat16", "float32", lens_as_tensor=True)
    want = run_kernel(case, "bfloat16", "float32")
    fn = Fn(_graph_call)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        fn.set_inputs(*[ms.Tensor(shape=[None] * t.ndim, dtype=t.dtype) for t in args])
        got = fn(*args)
        for g, w in zip(got, want):  # exact: the same kernel and path in one process, as in PyNative
            np.testing.assert_array_equal(to_np(g), w)
        other = make_case(np.random.default_rng(6), "bfloat16", "float32", "TND", lens_q=[4, 4], lens_k=[6, 2])
        got2 = fn(*ms_args(other, "bfloat16", "float32", lens_as_tensor=True))
        want2 = ref.sparse_lightning_indexer_grad_kl_loss(*other.ref_args(), **other.ref_kwargs())
        assert_close(to_np(got2[1]), want2[1], "bfloat16", "attention", "d_key_index")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _graph_call(*args: ms.Tensor) -> tuple:
    return ops.sparse_lightning_indexer_grad_kl_loss(*args, scale_value=1.0 / np.sqrt(32.0), layout="TND",
                                                     sparse_mode=3)


_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np, mindspore as ms
    ms.set_device("CPU")
    sys.path.insert(0, {tests!r})
    from _indexer_cases import make_case, ms_args
    from ms_grad_ops import ops
    case = make_case(np.random.default_rng(7), "{dtype}", "float32", "TND", lens_q=[40, 33], lens_k=[50, 60],
                     n1=8, d=40, dr=8, nidx=8, didx=32, k=48)
    out = ops.sparse_lightning_indexer_grad_kl_loss(*ms_args(case, "{dtype}", "float32"), **case.ref_kwargs())
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


@pytest.mark.parametrize("bad", [-2, 5, 100])
def test_out_of_range_index_is_runtime_error(bad: int) -> None:
    case = make_case(np.random.default_rng(8), "float32", "float32", "TND", lens_q=[3], lens_k=[5], k=4)
    case.arrays["sparse_indices"][1, 0, 2] = bad
    with pytest.raises(RuntimeError, match=f"{OP}: sparse_indices value {bad} at query row 1"):
        run_kernel(case, "float32", "float32")


def _args():
    case = make_case(np.random.default_rng(9), "float16", "float16", "TND", lens_q=[3], lens_k=[5], k=4)
    return case, ms_args(case, "float16", "float16")


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda a: a.__setitem__(3, ms.Tensor(np.zeros((5, 2, 16)), ms.float16)), ValueError,
     "argument 'key_index' dim 1 must be the key head count N2 = 1, got shape [5, 2, 16]"),
    (lambda a: a.__setitem__(4, ms.Tensor(np.zeros((3, 4)), ms.bfloat16)), TypeError,
     "argument 'weights' must have the dtype of 'query_index' (float16), got bfloat16"),
    (lambda a: a.__setitem__(5, ms.Tensor(np.zeros((3, 1, 4)), ms.int64)), TypeError,
     "argument 'sparse_indices' must be int32, got int64"),
    (lambda a: a.__setitem__(6, ms.Tensor(np.zeros((1, 3, 5)), ms.float32)), ValueError,
     "argument 'softmax_max' dim 2 must be N1 of 'query' = 4, got shape [1, 3, 5]"),
    (lambda a: a.__setitem__(9, None), ValueError, "'query_rope' and 'key_rope' must be given together"),
    (lambda a: a.__setitem__(10, [2]), ValueError, "the last entry of 'actual_seq_lengths_query' (2) must equal"),
    (lambda a: a.__setitem__(11, [3, 5]), ValueError, "'actual_seq_lengths_key' dim 0 must be"),
])
def test_bad_inputs(mutate, exc, match) -> None:  # noqa: ANN001
    _, args = _args()
    mutate(args)
    with pytest.raises(exc, match=f"^{OP}: .*" + _escape(match)):
        ops.sparse_lightning_indexer_grad_kl_loss(*args, scale_value=0.5, layout="TND")


@pytest.mark.parametrize("attrs,match", [
    ({"layout": "BNSD"}, "attribute 'layout' must be one of \"BSND\", \"TND\", got \"BNSD\""),
    ({"sparse_mode": 1}, "attribute 'sparse_mode' must be one of 0 (no mask), 3 (rightDownCausal), got 1"),
])
def test_bad_attributes(attrs: dict, match: str) -> None:
    _, args = _args()
    with pytest.raises(ValueError, match=_escape(match)):
        ops.sparse_lightning_indexer_grad_kl_loss(*args, scale_value=0.5, **{"layout": "TND", **attrs})


def test_bsnd_lengths_are_per_batch() -> None:
    # BSND lengths are the valid rows of each batch (S1 = 7, S2 = 9), not cumulative: [7, 14] is
    # cumulative, its 14 no valid length of a batch (docs/contract.md section 0.3).
    case = make_case(np.random.default_rng(10), "float32", "float32", "BSND")
    args = ms_args(case, "float32", "float32")
    args[10], args[11] = [7, 14], [9, 18]
    with pytest.raises(ValueError, match=r"actual_seq_lengths_query\[1\] = 14 must be in \[0, 7\] in BSND layout"):
        ops.sparse_lightning_indexer_grad_kl_loss(*args, scale_value=0.5, layout="BSND")
    args[10], args[11] = ms.Tensor(np.array([7, 14])), ms.Tensor(np.array([9, 18]))
    with pytest.raises(RuntimeError, match=r"actual_seq_lengths_query\[1\] = 14 must be in \[0, 7\] in BSND layout"):
        ops.sparse_lightning_indexer_grad_kl_loss(*args, scale_value=0.5, layout="BSND")[3].asnumpy()


def _escape(s: str) -> str:
    import re
    return re.escape(s)
