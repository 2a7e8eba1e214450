"""CPU kernel of ``sparse_lightning_indexer_kl_loss_grad`` (CANN's V4 indexer KL gradient against a given
target, docs/contract.md section 9.2) vs the float64 reference and vs central differences of an independent
float64 definition of the loss, in PyNative and GRAPH mode.

The target of every slot the kernel must not read (``-1``, keys the compressed causal mask hides, BSND
padding rows) is NaN: one read would make an output NaN."""
from __future__ import annotations

from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from _aot_call import build_call_aot, call
from _util import OpCell, assert_close, quantize, to_ms, to_np
from mindspore import Tensor

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

OP = "sparse_lightning_indexer_kl_loss_grad"
COMBOS = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"),
          ("bfloat16", "float32")]
NAMES = ("d_query_index", "d_key_index", "d_weights")
MS = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}


def visible(i: int, s1: int, s2: int, ratio: int, residual: int, sparse_mode: int) -> int:
    """Compressed keys query i of a batch sees (CANN's golden: valid_k_count, capped by S2)."""
    if sparse_mode == 0:
        return s2
    return int(np.clip(max(s2 * ratio + residual - s1 + i + 1, 0) // ratio, 0, s2))


class Case:
    """Inputs (float64 values exact in their dtypes), lengths and attributes. TND ``lens_q``/``lens_k``:
    per-sequence query and compressed-key counts; BSND: ``b`` rows of ``s1``/``s2`` with per-batch
    lengths ``bsnd_lens`` (or full rows)."""

    def __init__(self, rng: np.random.Generator, dtype: str, wdtype: str, layout: str = "TND", sparse_mode: int = 3,
                 cmp_ratio: int = 4, *, lens_q: list[int] | None = None, lens_k: list[int] | None = None,
                 residual: list[int] | None = None, b: int = 2, s1: int = 9, s2: int = 3,
                 bsnd_lens: tuple[list[int], list[int]] | None = None, nidx: int = 4, didx: int = 16, k: int = 6,
                 drop: float = 0.2, hidden: float = 0.2) -> None:
        if layout == "TND":
            lens_q, lens_k = lens_q or [9, 0, 14, 5], lens_k or [2, 3, 4, 1]
            tq, tk = (sum(lens_q),), (sum(lens_k),)
            seq = list(zip(lens_q, lens_k))
            self.lens = [int(x) for x in np.cumsum(lens_q)], [int(x) for x in np.cumsum(lens_k)]
            q0 = np.concatenate([[0], np.cumsum(lens_q)[:-1]])
            starts = [int(x) for x in q0]
        else:
            tq, tk = (b, s1), (b, s2)
            lq, lk = bsnd_lens or ([s1] * b, [s2] * b)
            seq = list(zip(lq, lk))
            self.lens = (list(lq), list(lk)) if bsnd_lens else (None, None)
            starts = [i * s1 for i in range(b)]
        residual = residual if residual is not None else [int(rng.integers(0, cmp_ratio)) for _ in seq]
        self.residual = residual
        self.dtype, self.wdtype = dtype, wdtype
        self.attrs = {"layout": layout, "sparse_mode": sparse_mode, "cmp_ratio": cmp_ratio}
        self.qi = quantize(0.5 * rng.standard_normal((*tq, nidx, didx)), dtype)
        self.ki = quantize(rng.standard_normal((*tk, 1, didx)), dtype)
        self.w = quantize(rng.standard_normal((*tq, nidx)) / np.sqrt(nidx), wdtype)
        t1 = int(np.prod(tq))
        si = np.full((t1, k), 99, np.int32)  # padding rows (BSND): garbage, never read
        read = np.zeros((t1, k), bool)
        for (s1_b, s2_b), q0, res in zip(seq, starts, residual):
            for i in range(s1_b):
                n = visible(i, s1_b, s2_b, cmp_ratio, res, sparse_mode)
                # Visible indices, some hidden ones (>= n, < S2_b) and -1 anywhere; duplicates likely.
                r = rng.integers(0, max(n, 1), k) if n else np.full(k, -1)
                if s2_b > n:
                    r = np.where(rng.random(k) < hidden, rng.integers(n, s2_b, k), r)
                r = np.where(rng.random(k) < drop, -1, r)
                si[q0 + i] = r
                read[q0 + i] = (r >= 0) & (r < n)
        self.si = si.reshape(*tq, 1, k)
        self.read = read.reshape(self.si.shape)
        # A target of any sum below 1 (the window and the sink take the rest), NaN where never read.
        p = rng.uniform(0.05, 1.0, self.si.shape) * rng.uniform(0.3, 0.9, (*tq, 1, 1)) / k
        self.p = np.where(self.read, p, np.nan).astype(np.float32)

    def ms_args(self, lens_as_tensor: bool = False) -> list:
        lens = [None if x is None else (Tensor(np.asarray(x, np.int64)) if lens_as_tensor else x) for x in self.lens]
        return [to_ms(self.qi, self.dtype), to_ms(self.ki, self.dtype), to_ms(self.w, self.wdtype), Tensor(self.si),
                Tensor(self.p), *lens, self.residual]

    def run(self, graph: bool = False, **kw: object) -> list[np.ndarray]:
        attrs = {**self.attrs, **kw}
        args = self.ms_args()
        if graph:
            tensors = args[:5]
            lens = dict(zip(("actual_seq_lengths_query", "actual_seq_lengths_key", "cmp_residual_k"), args[5:]))
            out = OpCell(ops.sparse_lightning_indexer_kl_loss_grad, {**lens, **attrs})(*tensors)
        else:
            out = ops.sparse_lightning_indexer_kl_loss_grad(*args, **attrs)
        for o, like in zip(out, (self.dtype, self.dtype, self.wdtype, "float32", "float32")):
            assert o.dtype == MS[like]
        return [to_np(o) for o in out]

    def reference(self) -> tuple:
        return ref.sparse_lightning_indexer_kl_loss_grad(self.qi, self.ki, self.w, self.si, self.p, *self.lens,
                                                         self.residual, **self.attrs)

    def check(self, graph: bool = False) -> list[np.ndarray]:
        got = self.run(graph)
        want = self.reference()
        tols = (self.dtype, self.dtype, self.wdtype if self.wdtype != "float32" else self.dtype)
        for name, g, w, tol in zip(NAMES, got, want, tols):
            assert_close(g, w, tol, "attention", f"{name} {self.dtype}/{self.wdtype} {self.attrs}")
        np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-6)
        assert np.all(got[3][~self.read] == 0), "softmax_out of an unread slot must be 0"
        assert abs(got[4][0] - want[4]) <= 1e-5 * max(1.0, abs(want[4])), (got[4], want[4])
        return got


@pytest.mark.parametrize("dtype,wdtype", COMBOS)
@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_matches_reference(dtype: str, wdtype: str, layout: str) -> None:
    """cmp_ratio 4 with random residuals: TND four sequences (one without queries), BSND with lengths
    (padding rows and keys); -1 slots anywhere, duplicates, hidden compressed keys, first rows that see
    no compressed key."""
    case = Case(np.random.default_rng(1), dtype, wdtype, layout, bsnd_lens=([9, 5], [3, 2]))
    assert case.read.any() and (~case.read & (case.si >= 0)).any()
    case.check()


@pytest.mark.parametrize("ratio,sparse_mode", [(1, 3), (1, 0), (4, 0), (128, 3), (5, 3)])
def test_ratios_and_masks(ratio: int, sparse_mode: int) -> None:
    """ratio 128 (HCA's) with hundreds of queries per compressed key, an odd ratio, no mask."""
    rng = np.random.default_rng(2 + ratio + sparse_mode)
    lens_q = [300, 17] if ratio == 128 else [11, 6, 9]
    lens_k = [3, 1] if ratio == 128 else [max(1, 11 // ratio), 2, 9 // ratio]
    Case(rng, "float32", "float32", "TND", sparse_mode, ratio, lens_q=lens_q, lens_k=lens_k, k=5).check()


def test_graph_mode() -> None:
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        Case(np.random.default_rng(3), "bfloat16", "float32", "TND").check(graph=True)
        Case(np.random.default_rng(4), "float16", "float16", "BSND", bsnd_lens=([7, 9], [2, 3])).check(graph=True)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_lengths_as_tensors() -> None:
    case = Case(np.random.default_rng(5), "float32", "float32", "TND")
    args = case.ms_args(lens_as_tensor=True)
    args[7] = Tensor(np.asarray(case.residual, np.int64))
    got = ops.sparse_lightning_indexer_kl_loss_grad(*args, **case.attrs)
    np.testing.assert_allclose(to_np(got[3]), case.reference()[3], rtol=1e-5, atol=1e-6)


def test_rows_without_a_visible_compressed_key_are_zero() -> None:
    """ratio 4, residual 0, S_orig = S1: rows 0..2 of each sequence see no compressed key (their
    slots hold indices, all hidden), row 5 is all -1; everything of theirs is an exact zero."""
    case = Case(np.random.default_rng(6), "float32", "float32", "TND", lens_q=[8, 12], lens_k=[2, 3],
                residual=[0, 0], drop=0.0, hidden=0.0)
    case.si[0:3, 0] = [0, 1, 0, 1, 1, 0]  # hidden keys of the first sequence (S2 = 2)
    case.si[8:11, 0] = [2, 1, 0, 0, 1, 2]  # and of the second (S2 = 3)
    case.si[5] = -1
    case.read[5] = False
    case.p[5] = np.nan
    got = case.check()
    for row in (0, 1, 2, 5, 8, 9, 10):
        assert not case.read[row].any()
        assert np.all(got[0][row] == 0) and np.all(got[2][row] == 0) and np.all(got[3][row] == 0), row
    assert case.read[3].any() and case.read[11].any()


def test_residual_shifts_the_mask() -> None:
    """The same tokens with residual 0 and 3 see different compressed keys (S_orig = S2 * 4 + r)."""
    a = Case(np.random.default_rng(7), "float32", "float32", "TND", lens_q=[10], lens_k=[3], residual=[3], k=3,
             drop=0.0, hidden=0.0)
    a.si[:, 0] = [0, 1, 2]
    a.p = np.full(a.si.shape, 0.2, np.float32)
    got3 = a.run()
    want0 = ref.sparse_lightning_indexer_kl_loss_grad(a.qi, a.ki, a.w, a.si, a.p, *a.lens, [0], **a.attrs)
    want3 = a.reference()
    # residual 3: S_orig = 15, row t sees floor((t + 6) / 4) keys; residual 0: floor((t + 3) / 4).
    assert [int((got3[3][t] > 0).sum()) for t in range(10)] == [min(3, (t + 6) // 4) for t in range(10)]
    assert not np.allclose(want0[3], want3[3])
    np.testing.assert_allclose(got3[3], want3[3], rtol=1e-5, atol=1e-6)


def test_duplicates_are_two_slots() -> None:
    """Slots [j, j] take y_j each from a softmax over both: two entries of the softmax, as CANN's golden."""
    case = Case(np.random.default_rng(8), "float32", "float32", "TND", 0, lens_q=[3], lens_k=[4], k=3, drop=0.0)
    case.si[:, 0] = [[2, 2, 1], [0, 3, 0], [1, 1, 1]]
    case.read[:] = True
    case.p = np.random.default_rng(9).uniform(0.05, 0.3, case.si.shape).astype(np.float32)
    got = case.check()
    np.testing.assert_allclose(got[3][2, 0], [1 / 3] * 3, rtol=1e-6)


def _definition_loss(qi: np.ndarray, ki: np.ndarray, w: np.ndarray, si: np.ndarray, p: np.ndarray,
                     limit: np.ndarray) -> float:
    """The loss written from CANN's formula, independently of the reference: float64, one sequence
    (TND without lengths), rows' visible slots from ``limit``."""
    loss = 0.0
    for t in range(qi.shape[0]):
        s = [k for k in range(si.shape[-1]) if 0 <= si[t, 0, k] < limit[t]]
        if not s:
            continue
        keys = ki[si[t, 0, s], 0]
        logits = np.array([sum(w[t, g] * max(qi[t, g] @ kj, 0.0) for g in range(qi.shape[1])) for kj in keys])
        log_y = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
        pt = p[t, 0, s].astype(np.float64)
        loss += float(np.sum(pt * (np.log(pt) - log_y)))
    return loss


def test_gradients_are_the_derivative_of_the_loss() -> None:
    """Central differences of the loss's definition (target summing to < 1, so dI = y * sum(p) - p,
    not y - p) agree with the kernel's float32 gradients."""
    rng = np.random.default_rng(10)
    case = Case(rng, "float32", "float32", "TND", 3, 4, lens_q=[7], lens_k=[2], residual=[2], nidx=3, didx=5, k=4,
                drop=0.2, hidden=0.0)
    case.lens = (None, None)
    case.si[case.si >= 0] = np.minimum(case.si[case.si >= 0], 1)
    limit = np.array([visible(i, 7, 2, 4, 2, 3) for i in range(7)])
    case.read = (case.si >= 0) & (case.si < limit[:, None, None])
    p = np.where(case.read, rng.uniform(0.05, 0.25, case.si.shape), np.nan).astype(np.float32)
    case.p = p
    got = case.run()
    assert abs(got[4][0] - _definition_loss(case.qi, case.ki, case.w, case.si, p, limit)) < 1e-5
    eps = 1e-6
    for name, x, g in zip(NAMES, (case.qi, case.ki, case.w), got[:3]):
        num = np.zeros(x.shape)
        for i in np.ndindex(x.shape):
            hi, lo = x.copy(), x.copy()
            hi[i] += eps
            lo[i] -= eps
            args = {"qi": case.qi, "ki": case.ki, "w": case.w}
            key = {"d_query_index": "qi", "d_key_index": "ki", "d_weights": "w"}[name]
            f_hi = _definition_loss(**{**args, key: hi}, si=case.si, p=p, limit=limit)
            f_lo = _definition_loss(**{**args, key: lo}, si=case.si, p=p, limit=limit)
            num[i] = (f_hi - f_lo) / (2 * eps)
        assert np.abs(num).max() > 1e-3, name
        np.testing.assert_allclose(g, num, rtol=1e-3, atol=1e-5, err_msg=name)


def test_normalised_target_gives_the_v32_gradient() -> None:
    """With a target that sums to 1 (the head-mean teacher of the V3.2 op over the same keys) the
    gradients are those of sparse_lightning_indexer_grad_kl_loss (dI = y - p), cmp_ratio 1."""
    rng = np.random.default_rng(11)
    case = Case(rng, "float32", "float32", "TND", 3, 1, lens_q=[6, 5], lens_k=[8, 5], residual=[0, 0], k=5,
                drop=0.1, hidden=0.0)
    n1, d = 4, 8
    q = quantize(rng.standard_normal((11, n1, d)), "float32")
    kv = quantize(rng.standard_normal((13, 1, d)), "float32")
    mx, sm = ref.attention_softmax_stats(q, kv, case.si, None, None, *case.lens, scale_value=0.3, layout="TND")
    want = ref.sparse_lightning_indexer_grad_kl_loss(q, kv, case.qi, case.ki, case.w, case.si, mx, sm, None, None,
                                                     *case.lens, scale_value=0.3, layout="TND")
    # The teacher per slot: the head mean of P at that slot's key (duplicates: each slot its key's value).
    p = np.zeros(case.si.shape)
    for t in range(11):
        for s in range(case.si.shape[-1]):
            j = case.si[t, 0, s]
            if case.read[t, 0, s]:
                base = 0 if t < 6 else 8
                logit = 0.3 * q[t] @ kv[base + j, 0]
                p[t, 0, s] = np.mean(np.exp(logit - mx[0, t]) / sm[0, t])
    case.p = np.where(case.read, p, np.nan).astype(np.float32)
    got = case.run()
    for name, g, w in zip(NAMES, got[:3], want[:3]):
        assert_close(g, w, "float32", "attention", name)
    assert abs(got[4][0] - want[3]) <= 1e-4 * abs(want[3])


@pytest.fixture(scope="module")
def call_aot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_call_aot(tmp_path_factory.mktemp("call_aot"))


@pytest.mark.parametrize("dtype,wdtype,layout", [("float32", "float32", "TND"), ("bfloat16", "float32", "BSND")])
def test_every_output_element_is_written(call_aot: Path, tmp_path: Path, dtype: str, wdtype: str,
                                         layout: str) -> None:
    """Outputs poisoned with NaN before the kernel (tests/cpu/cpp/call_aot.cc): rows without a valid
    slot, padding rows, unread slots and keys no row selects must come out as exact zeros. (They are
    found from the indices and the mask: where one key fills every valid slot of a row, its gradient
    cancels to an exact 0 in float64 but to ~1e-9 in float32.)"""
    case = Case(np.random.default_rng(12), dtype, wdtype, layout, bsnd_lens=([9, 4], [3, 1]))
    want = case.reference()
    lens = [(np.asarray(x if x is not None else [], np.int32), "int32") for x in case.lens]
    ins = [(case.qi, dtype), (case.ki, dtype), (case.w, wdtype), (case.si, "int32"), (case.p, "float32"), *lens,
           (np.asarray(case.residual, np.int32), "int32")]
    outs = [(case.qi.shape, dtype), (case.ki.shape, dtype), (case.w.shape, wdtype), (case.si.shape, "float32"),
            ((1,), "float32")]
    attrs = [f"attr str layout {layout}", "attr int sparse_mode 3", "attr int cmp_ratio 4"]
    got = call(call_aot, tmp_path, "SparseLightningIndexerKLLossGrad", attrs, ins, outs)
    tols = (dtype, dtype, wdtype if wdtype != "float32" else dtype)
    for name, g, w, tol in zip(NAMES, got, want, tols):
        assert_close(np.asarray(g, np.float64), w, tol, "attention", f"poisoned {name}")
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-6)
    assert abs(got[4][0] - want[4]) <= 1e-5 * abs(want[4])
    read = case.read.reshape(-1, case.read.shape[-1])
    idle_rows = ~read.any(axis=1)
    selected = np.zeros(case.ki.size // case.ki.shape[-1], bool)
    starts = np.concatenate([[0], case.lens[1][:-1]]) if layout == "TND" else np.arange(2) * case.ki.shape[1]
    q_starts = np.concatenate([[0], case.lens[0][:-1]]) if layout == "TND" else np.arange(2) * case.qi.shape[1]
    q_ends = case.lens[0] if layout == "TND" else q_starts + np.asarray(case.lens[0])
    for b, (q0, q1) in enumerate(zip(q_starts, q_ends)):
        for t in range(q0, q1):
            selected[starts[b] + case.si.reshape(read.shape)[t][read[t]]] = True
    assert idle_rows.any() and (~selected).any()
    assert np.all(got[0].reshape(len(read), -1)[idle_rows] == 0)
    assert np.all(got[2].reshape(len(read), -1)[idle_rows] == 0)
    assert np.all(got[3][~case.read] == 0)
    assert np.all(got[1].reshape(len(selected), -1)[~selected] == 0)


def _small() -> list:
    return Case(np.random.default_rng(13), "float16", "float16", "TND", lens_q=[5], lens_k=[2], residual=[1],
                k=4).ms_args()


@pytest.mark.parametrize("index,value,exc,match", [
    (4, Tensor(np.zeros((5, 1, 5), np.float32)), ValueError,
     "argument 'attn_softmax_l1_norm' must have the shape of 'sparse_indices' [5, 1, 4], got [5, 1, 5]"),
    (4, Tensor(np.zeros((5, 1, 4), np.float16)), TypeError,
     "argument 'attn_softmax_l1_norm' must be float32, got float16"),
    (3, Tensor(np.zeros((5, 1, 4), np.int64)), TypeError, "argument 'sparse_indices' must be int32, got int64"),
    (3, Tensor(np.zeros((4, 1, 4), np.int32)), ValueError,
     "argument 'sparse_indices' dim 0 must be tokens of 'query_index' = 5, got shape [4, 1, 4]"),
    (1, Tensor(np.zeros((2, 2, 16)), ms.float16), ValueError,
     "argument 'key_index' dim 1 must be the key head count N2 = 1, got shape [2, 2, 16]"),
    (2, Tensor(np.zeros((5, 4)), ms.bfloat16), TypeError,
     "argument 'weights' must have the dtype of 'query_index' (float16), got bfloat16"),
    (7, [1, 2], ValueError,
     "argument 'cmp_residual_k' dim 0 must be the batch count of 'actual_seq_lengths_query' = 1"),
    (7, Tensor(np.zeros((1, 1), np.int32)), ValueError, "argument 'cmp_residual_k' must be 1-D"),
    (7, Tensor(np.zeros(1, np.float32)), TypeError, "argument 'cmp_residual_k' must be int32 or int64, got float32"),
    (6, None, ValueError, "must both be given or both be None"),
])
def test_bad_inputs(index: int, value: object, exc: type, match: str) -> None:
    import re
    args = _small()
    args[index] = value
    with pytest.raises(exc, match=f"^{OP}: .*" + re.escape(match)):
        ops.sparse_lightning_indexer_kl_loss_grad(*args, layout="TND", cmp_ratio=4)


@pytest.mark.parametrize("ratio", [0, 129])
def test_cmp_ratio_domain(ratio: int) -> None:
    match = rf"^{OP}: attribute 'cmp_ratio' must be an integer in \[1, 128\], got {ratio}"
    with pytest.raises(ValueError, match=match):
        ops.sparse_lightning_indexer_kl_loss_grad(*_small(), layout="TND", cmp_ratio=ratio)


@pytest.mark.parametrize("residual,match", [([4], r"cmp_residual_k\[0\] = 4 must be in \[0, cmp_ratio = 4\)"),
                                            ([-1], r"cmp_residual_k\[0\] = -1 must be in \[0, cmp_ratio = 4\)")])
def test_residual_values_are_checked_by_the_kernel(residual: list[int], match: str) -> None:
    args = _small()
    args[7] = Tensor(np.asarray(residual, np.int32))
    with pytest.raises(RuntimeError, match=f"{OP}: {match}"):
        ops.sparse_lightning_indexer_kl_loss_grad(*args, layout="TND", cmp_ratio=4)[0].asnumpy()


@pytest.mark.parametrize("bad", [-2, 2, 1000])
def test_out_of_range_index_is_runtime_error(bad: int) -> None:
    """2 is S2 of the only batch: indices are local compressed-key positions."""
    args = _small()
    si = args[3].asnumpy().copy()
    si[4, 0, 1] = bad
    args[3] = Tensor(si)
    with pytest.raises(RuntimeError, match=f"{OP}: sparse_indices value {bad} at query row 4, slot 1 is out of range"):
        ops.sparse_lightning_indexer_kl_loss_grad(*args, layout="TND", cmp_ratio=4)[0].asnumpy()


def test_no_gradient() -> None:
    args = _small()

    def f(qi: Tensor) -> Tensor:
        return ops.sparse_lightning_indexer_kl_loss_grad(qi, *args[1:], layout="TND", cmp_ratio=4)[4]

    with pytest.raises(RuntimeError, match=f"{OP} has no gradient"):
        ms.grad(f)(args[0])


_DETERMINISM_SCRIPT = """
import hashlib, sys
sys.path[:0] = {tests!r}
import mindspore as ms
ms.set_device("CPU")
import numpy as np
from test_sparse_lightning_indexer_kl_loss_grad import Case
case = Case(np.random.default_rng(14), {dtype!r}, "float32", "TND", lens_q=[300, 200], lens_k=[80, 50], k=64,
            drop=0.1, hidden=0.1)
print(hashlib.sha256(b"".join(np.ascontiguousarray(o).tobytes() for o in case.run())).hexdigest())
"""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bitwise_identical_for_1_and_2_threads(dtype: str) -> None:
    """Many rows select the same compressed keys: d_key_index sums rows in a fixed order, the loss too."""
    import os
    import subprocess
    import sys

    from _paths import SUPPORT
    script = _DETERMINISM_SCRIPT.format(tests=[str(Path(__file__).parent), str(SUPPORT)], dtype=dtype)
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digests.append(res.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1] and len(digests[0]) == 64
