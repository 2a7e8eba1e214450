"""CPU kernel of ``dense_lightning_indexer_grad_kl_loss`` vs the float64 reference, and vs the sparse path at
top-k = S (docs/contract.md section 4.4)."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest
from _dense_indexer_cases import make_dense_case, ms_grad_args, ms_lse_args
from _paths import SUPPORT
from _util import Fn, assert_close, to_np

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

OP = "dense_lightning_indexer_grad_kl_loss"
LOSS_TOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 1e-3}
COMBOS = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"),
          ("bfloat16", "float32")]
NAMES = ("d_query_index", "d_key_index", "d_weights")


def run_kernel(case, dtype: str, wdtype: str, **kw) -> list[np.ndarray]:  # noqa: ANN001
    out = ops.dense_lightning_indexer_grad_kl_loss(*ms_grad_args(case, dtype, wdtype), **case.grad_attrs(), **kw)
    assert out[3].dtype == ms.float32 and out[0].dtype == ms.float32 if dtype == "float32" else True
    return [to_np(t) for t in out]


def check(case, dtype: str, wdtype: str) -> list[np.ndarray]:  # noqa: ANN001
    got = run_kernel(case, dtype, wdtype)
    want = ref.dense_lightning_indexer_grad_kl_loss(*case.ref_grad_args(), **case.grad_attrs())
    for name, g, w in zip(NAMES, got[:3], want[:3]):
        assert g.shape == w.shape, name
        assert_close(g, w, dtype if name != "d_weights" else (wdtype if wdtype != "float32" else dtype),
                     "attention", name)
    assert got[3].shape == (1,)
    assert abs(got[3][0] - want[3]) <= LOSS_TOL[dtype] * max(abs(want[3]), 1e-6), (got[3], want[3])
    return got


@pytest.mark.parametrize("dtype,wdtype", COMBOS)
@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_matches_reference(dtype: str, wdtype: str, layout: str) -> None:
    check(make_dense_case(np.random.default_rng(1), dtype, wdtype, layout), dtype, wdtype)


@pytest.mark.parametrize("dtype,layout", [("float32", "TND"), ("bfloat16", "BSND"), ("float16", "TND")])
def test_mha_key_heads(dtype: str, layout: str) -> None:
    """N2 = N1 (CANN's plain MHA main attention), statistics [N1, T1, 1] / [B, N1, S1, 1]."""
    case = make_dense_case(np.random.default_rng(2), dtype, "float32", layout, n1=4, n2=4, d=16, dr=8)
    assert case.arrays["softmax_max"].shape[-1] == 1
    check(case, dtype, "float32")


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_long_rows_odd_sizes_and_modes_without_rope(sparse_mode: int) -> None:
    """Rows of up to 700 keys span three key blocks; odd head and head-dim sizes."""
    case = make_dense_case(np.random.default_rng(3), "float32", "float32", "TND", sparse_mode, lens_q=[1, 13, 2],
                           lens_k=[5, 11, 700], n1=3, d=33, dr=0, nidx=5, didx=19)
    check(case, "float32", "float32")


def test_rows_without_visible_keys_are_zero() -> None:
    """TND: batch 0 has S1 > S2 (causal rows 0..3 see no key), batch 1 has no key; BSND: padding rows and a
    batch without queries. Their statistics are never read (NaN here) and their gradients are exact zeros."""
    case = make_dense_case(np.random.default_rng(4), "float32", "float32", "TND", lens_q=[6, 2, 3], lens_k=[2, 0, 5])
    for name in ("softmax_max", "softmax_sum", "softmax_max_index", "softmax_sum_index"):
        case.arrays[name][:, [0, 1, 2, 3, 6, 7]] = np.nan  # rows without a visible key: never read
    got = check(case, "float32", "float32")
    for row in (0, 1, 2, 3, 6, 7):
        assert not got[0][row].any() and not got[2][row].any(), row
    case = make_dense_case(np.random.default_rng(5), "bfloat16", "float32", "BSND", b=3, s1=5, s2=6,
                           bsnd_lens=([5, 2, 0], [6, 3, 4]))
    got = check(case, "bfloat16", "float32")
    assert not got[0][1, 2:].any() and not got[0][2].any() and not got[1][1, 3:].any()


def _sparse_at_top_k_s(case, dtype: str, wdtype: str) -> list[np.ndarray]:  # noqa: ANN001
    """The sparse path at top-k = S: lightning_indexer selecting every visible key, the main attention's
    statistics from sparse_flash_attention over them, then sparse_lightning_indexer_grad_kl_loss."""
    a = case.arrays
    s2 = max(np.diff([0, *case.lens_k])) if case.layout == "TND" else a["key"].shape[1]
    lens = case.lens()
    q, k, qr, kr = (ms_grad_args(case, dtype, wdtype)[i] for i in (0, 1, 9, 10))
    qi, ki, w = ms_lse_args(case, dtype, wdtype)[:3]
    indices, _ = ops.lightning_indexer(qi, ki, w, *lens, sparse_count=int(s2), **case.attrs())
    _, mx, sm = ops.sparse_flash_attention(q, k, None, indices, qr, kr, *lens, scale_value=case.scale,
                                           **case.attrs())
    out = ops.sparse_lightning_indexer_grad_kl_loss(q, k, qi, ki, w, indices, mx, sm, qr, kr, *lens,
                                                    scale_value=case.scale, **case.attrs())
    return [to_np(x) for x in (*out, mx, sm)]


@pytest.mark.parametrize("dtype,wdtype,layout", [("float32", "float32", "TND"), ("bfloat16", "float32", "BSND"),
                                                 ("float16", "float16", "TND")])
def test_agrees_with_the_sparse_path_at_top_k_s(dtype: str, wdtype: str, layout: str) -> None:
    """Same loss and gradients as the sparse ops with every visible key selected, fed the same main-attention
    statistics (sparse_flash_attention's) and the dense pair's own indexer statistics."""
    case = make_dense_case(np.random.default_rng(6), dtype, wdtype, layout, lens_q=[5, 0, 30], lens_k=[7, 3, 300],
                           s2=70)
    *sparse, mx, sm = _sparse_at_top_k_s(case, dtype, wdtype)
    args = ms_grad_args(case, dtype, wdtype)
    args[5], args[6] = ms.Tensor(mx.astype(np.float32)), ms.Tensor(sm.astype(np.float32))
    args[7:9] = ops.dense_lightning_indexer_softmax_lse(*ms_lse_args(case, dtype, wdtype), **case.attrs())
    dense = [to_np(x) for x in ops.dense_lightning_indexer_grad_kl_loss(*args, **case.grad_attrs())]
    for name, d, s in zip(NAMES, dense[:3], sparse[:3]):
        assert_close(d, s.astype(np.float64), dtype if name != "d_weights" else (
            wdtype if wdtype != "float32" else dtype), "attention", name)
    assert abs(dense[3][0] - sparse[3][0]) <= LOSS_TOL[dtype] * abs(sparse[3][0]), (dense[3], sparse[3])
    assert sparse[3][0] > 0


def test_graph_mode_and_dynamic_shapes() -> None:
    case = make_dense_case(np.random.default_rng(7), "bfloat16", "float32", "TND")
    args = ms_grad_args(case, "bfloat16", "float32", lens_as_tensor=True)
    want = run_kernel(case, "bfloat16", "float32")
    fn = Fn(_graph_call)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        fn.set_inputs(*[ms.Tensor(shape=[None] * t.ndim, dtype=t.dtype) for t in args])
        for g, w in zip(fn(*args), want):  # exact: the same kernel and path in one process, as in PyNative
            np.testing.assert_array_equal(to_np(g), w)
        other = make_dense_case(np.random.default_rng(8), "bfloat16", "float32", "TND", lens_q=[4, 4], lens_k=[6, 2])
        got = fn(*ms_grad_args(other, "bfloat16", "float32", lens_as_tensor=True))
        want2 = ref.dense_lightning_indexer_grad_kl_loss(*other.ref_grad_args(), **other.grad_attrs())
        assert_close(to_np(got[1]), want2[1], "bfloat16", "attention", "d_key_index")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def _graph_call(*args: ms.Tensor) -> tuple:
    return ops.dense_lightning_indexer_grad_kl_loss(*args, scale_value=1.0 / np.sqrt(32.0), layout="TND")


_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np, mindspore as ms
    ms.set_device("CPU")
    sys.path.insert(0, {tests!r})
    from _dense_indexer_cases import make_dense_case, ms_grad_args
    from ms_grad_ops import ops
    case = make_dense_case(np.random.default_rng(9), "{dtype}", "float32", "TND", lens_q=[40, 33], lens_k=[50, 300],
                           n1=8, n2={n2}, d=40, dr=8, nidx=8, didx=32)
    out = ops.dense_lightning_indexer_grad_kl_loss(*ms_grad_args(case, "{dtype}", "float32"), **case.grad_attrs())
    print(hashlib.sha256(b"".join(t.asnumpy().tobytes() for t in out)).hexdigest())
""")


@pytest.mark.parametrize("dtype,n2", [("float32", 1), ("bfloat16", 1), ("float32", 8)])
def test_bitwise_identical_for_1_and_2_threads(dtype: str, n2: int) -> None:
    script = _DETERMINISM_SCRIPT.format(tests=str(SUPPORT), dtype=dtype, n2=n2)
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digests.append(res.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]
    assert len(hashlib.sha256().hexdigest()) == len(digests[0])


def _args() -> list:
    case = make_dense_case(np.random.default_rng(10), "float16", "float16", "TND", lens_q=[3], lens_k=[5])
    return ms_grad_args(case, "float16", "float16")


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda a: a.__setitem__(1, ms.Tensor(np.zeros((5, 2, 24)), ms.float16)), ValueError,
     "argument 'key' dim 1 (N2) must be 1 (MQA) or N1 = 4 of 'query' (MHA), got shape [5, 2, 24]"),
    (lambda a: a.__setitem__(3, ms.Tensor(np.zeros((5, 2, 16)), ms.float16)), ValueError,
     "argument 'key_index' dim 1 must be the key head count N2 = 1, got shape [5, 2, 16]"),
    (lambda a: a.__setitem__(4, ms.Tensor(np.zeros((3, 4)), ms.bfloat16)), TypeError,
     "argument 'weights' must have the dtype of 'query_index' (float16), got bfloat16"),
    (lambda a: a.__setitem__(5, ms.Tensor(np.zeros((1, 3, 5)), ms.float32)), ValueError,
     "argument 'softmax_max' dim 2 must be N1 of 'query' = 4, got shape [1, 3, 5]"),
    (lambda a: a.__setitem__(6, ms.Tensor(np.zeros((1, 3, 4)), ms.float16)), TypeError,
     "argument 'softmax_sum' must be float32, got float16"),
    (lambda a: a.__setitem__(7, ms.Tensor(np.zeros((1, 4)), ms.float32)), ValueError,
     "argument 'softmax_max_index' dim 1 must be T1 of 'query' = 3, got shape [1, 4]"),
    (lambda a: a.__setitem__(8, ms.Tensor(np.zeros((3,)), ms.float32)), ValueError,
     "argument 'softmax_sum_index' must have the shape of 'softmax_max_index' [1, 3], got [3]"),
    (lambda a: a.__setitem__(9, None), ValueError, "'query_rope' and 'key_rope' must be given together"),
    (lambda a: a.__setitem__(11, [2]), ValueError, "the last entry of 'actual_seq_lengths_query' (2) must equal"),
])
def test_bad_inputs(mutate, exc, match) -> None:  # noqa: ANN001
    args = _args()
    mutate(args)
    with pytest.raises(exc, match=f"^{OP}: .*" + re.escape(match)):
        ops.dense_lightning_indexer_grad_kl_loss(*args, scale_value=0.5, layout="TND")


def test_mha_statistics_shape_is_checked() -> None:
    case = make_dense_case(np.random.default_rng(11), "float32", "float32", "BSND", n1=4, n2=4)
    args = ms_grad_args(case, "float32", "float32")
    args[5] = args[6] = ms.Tensor(np.zeros((2, 1, 7, 4), np.float32))  # the MQA layout
    with pytest.raises(ValueError, match=re.escape(f"{OP}: argument 'softmax_max' dim 1 must be N2 = 4, got shape")):
        ops.dense_lightning_indexer_grad_kl_loss(*args, **case.grad_attrs())
