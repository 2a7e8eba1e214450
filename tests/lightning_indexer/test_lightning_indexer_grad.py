"""CPU kernel of ``lightning_indexer_grad`` (the gradient of lightning_indexer's sparse_values) vs
the float64 reference, and ``ms.grad`` through ``ops.lightning_indexer`` / ``nn.LightningIndexer``
(whose bprop it is) with ``nn.Dense`` layers in front, in PyNative and GRAPH mode.

The d_values of every slot the kernel must not read (``-1``, keys the mask hides) are NaN: one
read would make an output NaN."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from _aot_call import build_call_aot
from _aot_call import call as aot_call
from _paths import SUPPORT
from _upstream import Upstream, check_param_grads
from _util import Fn, assert_close, quantize, to_ms, to_np
from mindspore import Tensor, nn

import ms_grad_ops as mgo
from ms_grad_ops import ops
from ms_grad_ops import reference as ref

OP = "lightning_indexer_grad"
COMBOS = [("float32", "float32"), ("float16", "float16"), ("float16", "float32"), ("bfloat16", "bfloat16"),
          ("bfloat16", "float32")]
NAMES = ("d_query_index", "d_key_index", "d_weights")


class Case:
    """Inputs (float64 values exact in their dtypes), cumulative lengths (TND) and attributes."""

    def __init__(self, rng: np.random.Generator, dtype: str, wdtype: str, layout: str = "TND", sparse_mode: int = 3,
                 *, lens_q: list[int] | None = None, lens_k: list[int] | None = None, b: int = 2, s1: int = 5,
                 s2: int = 7, nidx: int = 4, didx: int = 16, k: int = 9, drop: float = 0.2) -> None:
        if layout == "TND":
            lens_q, lens_k = lens_q or [5, 0, 8, 3], lens_k or [7, 4, 11, 0]
            tq, tk, seq = (sum(lens_q),), (sum(lens_k),), list(zip(lens_q, lens_k))
            self.lens = [int(x) for x in np.cumsum(lens_q)], [int(x) for x in np.cumsum(lens_k)]
        else:
            tq, tk, seq = (b, s1), (b, s2), [(s1, s2)] * b
            self.lens = None, None
        self.dtype, self.wdtype = dtype, wdtype
        self.attrs = {"layout": layout, "sparse_mode": sparse_mode}
        self.qi = quantize(0.5 * rng.standard_normal((*tq, nidx, didx)), dtype)
        self.ki = quantize(rng.standard_normal((*tk, 1, didx)), dtype)
        self.w = quantize(rng.standard_normal((*tq, nidx)) / np.sqrt(nidx), wdtype)
        rows, read = [], []
        for s1_b, s2_b in seq:
            for i in range(s1_b):
                # Duplicates are likely (K may exceed S2_b); -1 anywhere.
                r = rng.integers(0, s2_b, k) if s2_b else np.full(k, -1)
                r = np.where(rng.random(k) < drop, -1, r)
                limit = min(max(i + s2_b - s1_b + 1, 0), s2_b) if sparse_mode == 3 else s2_b
                rows.append(r)
                read.append((r >= 0) & (r < limit))
        self.si = np.asarray(rows, np.int32).reshape(*tq, 1, k)
        self.read = np.asarray(read, bool).reshape(self.si.shape)
        dv = rng.standard_normal(self.si.shape).astype(np.float32)
        self.dv = np.where(self.read, dv, np.nan).astype(np.float32)

    def ms_args(self, lens_as_tensor: bool = False) -> list:
        lens = [None if x is None else (Tensor(np.asarray(x, np.int64)) if lens_as_tensor else x) for x in self.lens]
        return [to_ms(self.qi, self.dtype), to_ms(self.ki, self.dtype), to_ms(self.w, self.wdtype), Tensor(self.si),
                Tensor(self.dv), *lens]

    def run(self, **kw: object) -> list[np.ndarray]:
        out = ops.lightning_indexer_grad(*self.ms_args(), **{**self.attrs, **kw})
        for o, like in zip(out, (self.dtype, self.dtype, self.wdtype)):
            assert o.dtype == {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}[like]
        return [to_np(o) for o in out]

    def reference(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return ref.lightning_indexer_grad(self.qi, self.ki, self.w, self.si, self.dv, *self.lens, **self.attrs)

    def check(self) -> list[np.ndarray]:
        got = self.run()
        tols = (self.dtype, self.dtype, self.wdtype if self.wdtype != "float32" else self.dtype)
        for name, g, want, tol in zip(NAMES, got, self.reference(), tols):
            assert_close(g, want, tol, "attention", f"{name} {self.dtype}/{self.wdtype} {self.attrs}")
        return got


@pytest.mark.parametrize("dtype,wdtype", COMBOS)
@pytest.mark.parametrize("layout", ["TND", "BSND"])
@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_matches_reference(dtype: str, wdtype: str, layout: str, sparse_mode: int) -> None:
    """TND: uneven lengths with an empty query batch and an empty key batch; -1 slots anywhere,
    duplicates, keys the causal mask hides (mode 3)."""
    case = Case(np.random.default_rng(1), dtype, wdtype, layout, sparse_mode)
    assert (case.si >= 0).any() and (~case.read & (case.si >= 0)).any() == (sparse_mode == 3)
    case.check()


@pytest.mark.parametrize("sparse_mode", [0, 3])
def test_odd_sizes(sparse_mode: int) -> None:
    """Nidx 5, Didx 19, K 67 (above the padding quantum of 64), lengths with S1 > S2 and empty ones."""
    case = Case(np.random.default_rng(2), "float32", "float32", "TND", sparse_mode, lens_q=[1, 13, 0, 9],
                lens_k=[5, 11, 3, 70], nidx=5, didx=19, k=67, drop=0.1)
    case.check()
    Case(np.random.default_rng(3), "bfloat16", "float32", "BSND", sparse_mode, b=3, s1=6, s2=2, nidx=1, didx=3,
         k=1).check()


def test_rows_without_visible_keys_are_zero() -> None:
    """Batch 0 has S1 > S2: causal rows 0..3 see no key; row 6 is all -1. All their d_values are
    NaN; their outputs must be exact zeros."""
    case = Case(np.random.default_rng(4), "float32", "float32", "TND", lens_q=[6, 3], lens_k=[2, 5], k=4, drop=0.0)
    case.si[6] = -1
    case.read[6] = False
    case.dv[6] = np.nan
    got = case.check()
    for row in (0, 1, 2, 3, 6):
        assert not case.read[row].any()
        assert np.all(got[0][row] == 0) and np.all(got[2][row] == 0), row


def test_duplicates_each_count() -> None:
    """Slots [j, j, j] with d_values a, b, c give the gradient of one slot j with a + b + c."""
    rng = np.random.default_rng(5)
    case = Case(rng, "float32", "float32", "TND", 0, lens_q=[4], lens_k=[6], k=3, drop=0.0)
    case.si[:] = np.array([2, 2, 2], np.int32)
    case.read[:] = True
    got = case.check()
    single = Case(np.random.default_rng(5), "float32", "float32", "TND", 0, lens_q=[4], lens_k=[6], k=3, drop=0.0)
    single.si[:] = np.array([2, -1, -1], np.int32)
    single.dv = np.full(case.dv.shape, np.nan, np.float32)
    single.dv[..., 0] = case.dv.astype(np.float64).sum(axis=-1)
    for g, s in zip(got, single.run()):
        np.testing.assert_allclose(g, s, rtol=1e-5, atol=1e-6)


def test_float32_keys_in_place_only_for_consecutive_distinct_rows() -> None:
    """float32 key rows are multiplied in place when the selected rows are consecutive. Sorted
    duplicates ([0, 0, 0, 3]) span rows 0..3 without being them; and a key row nobody selects, just
    past a consecutive run, holds NaN and must reach no output."""
    case = Case(np.random.default_rng(6), "float32", "float32", "TND", 0, lens_q=[3, 2], lens_k=[5, 4], k=4)
    case.si[:, 0] = [[0, 0, 0, 3], [3, 2, 1, 3], [4, 3, 2, 1], [0, 1, 2, -1], [2, 1, 1, 1]]
    case.read = case.si >= 0
    case.dv = np.where(case.read, np.random.default_rng(7).uniform(0.5, 1.5, case.si.shape), np.nan).astype(np.float32)
    case.ki[8] = np.nan  # local key 3 of batch 1: never selected there
    case.check()


@pytest.mark.parametrize("bad", [-2, 5, 7, 1000])
def test_out_of_range_index_is_runtime_error(bad: int) -> None:
    """5 and 7 are below T2 = 9 but not below S2 = 5 of row 1's batch: indices are local."""
    case = Case(np.random.default_rng(8), "float32", "float32", "TND", lens_q=[3, 2], lens_k=[5, 4], k=4)
    case.si[1, 0, 2] = bad
    with pytest.raises(RuntimeError, match=f"{OP}: sparse_indices value {bad} at query row 1, slot 2 is out of range"):
        case.run()


def _escape_all(s: str) -> str:
    return re.escape(s)


def _small() -> list:
    case = Case(np.random.default_rng(9), "float16", "float16", "TND", lens_q=[3], lens_k=[5], k=4)
    return case.ms_args()


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda a: a.__setitem__(4, Tensor(np.zeros((3, 1, 5), np.float32))), ValueError,
     "argument 'd_values' must have the shape of 'sparse_indices' [3, 1, 4], got [3, 1, 5]"),
    (lambda a: a.__setitem__(4, Tensor(np.zeros((3, 1, 4), np.float16))), TypeError,
     "argument 'd_values' must be float32, got float16"),
    (lambda a: a.__setitem__(3, Tensor(np.zeros((3, 1, 4), np.int64))), TypeError,
     "argument 'sparse_indices' must be int32, got int64"),
    (lambda a: a.__setitem__(3, Tensor(np.zeros((2, 1, 4), np.int32))), ValueError,
     "argument 'sparse_indices' dim 0 must be tokens of 'query_index' = 3, got shape [2, 1, 4]"),
    (lambda a: a.__setitem__(3, Tensor(np.zeros((3, 2, 4), np.int32))), ValueError,
     "argument 'sparse_indices' dim 1 must be N2 = 1, got shape [3, 2, 4]"),
    (lambda a: a.__setitem__(1, Tensor(np.zeros((5, 2, 16)), ms.float16)), ValueError,
     "argument 'key_index' dim 1 must be the key head count N2 = 1, got shape [5, 2, 16]"),
    (lambda a: a.__setitem__(2, Tensor(np.zeros((3, 4)), ms.bfloat16)), TypeError,
     "argument 'weights' must have the dtype of 'query_index' (float16), got bfloat16"),
    (lambda a: a.__setitem__(5, [2]), ValueError, "the last entry of 'actual_seq_lengths_query' (2) must equal"),
    (lambda a: a.__setitem__(6, None), ValueError, "must both be given or both be None"),
])
def test_bad_inputs(mutate, exc, match) -> None:  # noqa: ANN001
    args = _small()
    mutate(args)
    with pytest.raises(exc, match=f"^{OP}: .*" + _escape_all(match)):
        ops.lightning_indexer_grad(*args, layout="TND")


def test_bsnd_lengths_are_per_batch() -> None:
    # BSND lengths are the valid rows of each batch (S1 = 5, S2 = 7), not cumulative.
    args = Case(np.random.default_rng(10), "float32", "float32", "BSND").ms_args()
    args[5], args[6] = Tensor(np.array([5, 10])), Tensor(np.array([7, 14]))
    with pytest.raises(RuntimeError, match=rf"{OP}: actual_seq_lengths_query\[1\] = 10 must be in \[0, 5\] in BSND"):
        ops.lightning_indexer_grad(*args, layout="BSND")[0].asnumpy()
    args[5], args[6] = [5], [7]
    with pytest.raises(ValueError, match=rf"^{OP}: argument 'actual_seq_lengths_query' dim 0 must be the batch size B"):
        ops.lightning_indexer_grad(*args, layout="BSND")


def test_has_no_gradient(exec_mode: str) -> None:
    args = Case(np.random.default_rng(11), "float32", "float32", "TND", lens_q=[3], lens_k=[5], k=4).ms_args()

    def loss(qi: Tensor) -> Tensor:
        return ops.lightning_indexer_grad(qi, *args[1:5], layout="TND")[0].sum()

    with pytest.raises(RuntimeError, match=f"{OP} has no gradient: it is a backward op itself"):
        ms.grad(loss, grad_position=0)(args[0]).asnumpy()


def _graph_call(*args: Tensor) -> tuple:
    return ops.lightning_indexer_grad(*args, layout="TND", sparse_mode=3)


def test_graph_mode_and_dynamic_shapes() -> None:
    """One compiled graph (every dim dynamic) for two sizes; the first equals PyNative bitwise."""
    case = Case(np.random.default_rng(12), "bfloat16", "float32", "TND")
    args = case.ms_args(lens_as_tensor=True)
    want = case.run()
    fn = Fn(_graph_call)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        fn.set_inputs(*[Tensor(shape=[None] * t.ndim, dtype=t.dtype) for t in args])
        for g, w in zip(fn(*args), want):
            np.testing.assert_array_equal(to_np(g), w)
        other = Case(np.random.default_rng(13), "bfloat16", "float32", "TND", lens_q=[4, 4], lens_k=[6, 2], k=5)
        got = fn(*other.ms_args(lens_as_tensor=True))
        for name, g, w in zip(NAMES, got, other.reference()):
            assert_close(to_np(g), w, "bfloat16", "attention", f"dynamic {name}")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


_DETERMINISM_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np, mindspore as ms
    ms.set_device("CPU")
    sys.path[:0] = {tests!r}
    from test_lightning_indexer_grad import Case
    case = Case(np.random.default_rng(14), "{dtype}", "float32", "TND", 3, lens_q=[40, 33], lens_k=[50, 60],
                nidx=8, didx=32, k=48)
    from ms_grad_ops import ops
    out = ops.lightning_indexer_grad(*case.ms_args(), **case.attrs)
    print(hashlib.sha256(b"".join(t.asnumpy().tobytes() for t in out)).hexdigest())
""")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bitwise_identical_for_1_and_2_threads(dtype: str) -> None:
    """Many rows select the same keys: the key gradient sums across rows in a fixed order."""
    script = _DETERMINISM_SCRIPT.format(tests=[str(Path(__file__).parent), str(SUPPORT)], dtype=dtype)
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        digests.append(res.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]
    assert len(hashlib.sha256().hexdigest()) == len(digests[0])


# ------------------------------------------------------------ the bprop of lightning_indexer's values


def _selected(qi: np.ndarray, ki: np.ndarray, w: np.ndarray, dtype: str, lens: tuple, k: int, layout: str
              ) -> np.ndarray:
    """The kernel's own selection (its float32 ranking; checked against the reference elsewhere):
    the gradient flows to these keys."""
    idx, _ = ops.lightning_indexer(to_ms(qi, dtype), to_ms(ki, dtype), to_ms(w, dtype), *lens, sparse_count=k,
                                   layout=layout)
    return idx.asnumpy()


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_ms_grad_through_lightning_indexer(exec_mode: str, layout: str) -> None:
    """loss = sum(sparse_values * W) with the -1 slots (value -inf) included: the kernel skips them."""
    rng = np.random.default_rng(15)
    tq, tk, lens = ((9,), (11,), ([4, 9], [5, 11])) if layout == "TND" else ((2, 5), (2, 6), (None, None))
    qi, ki = rng.standard_normal((*tq, 3, 8)), rng.standard_normal((*tk, 1, 8))
    w = rng.standard_normal((*tq, 3))
    k = 4
    idx = _selected(qi, ki, w, "float32", lens, k, layout)
    assert (idx == -1).any()
    dv = rng.standard_normal(idx.shape).astype(np.float32)

    def loss(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        _, values = ops.lightning_indexer(a, b, c, *lens, sparse_count=k, layout=layout)
        return (values * Tensor(dv)).sum()  # -inf at -1 slots: the loss is not finite, its gradient is

    got = ms.grad(loss, grad_position=(0, 1, 2))(*(to_ms(x, "float32") for x in (qi, ki, w)))
    dv_read = np.where(idx >= 0, dv, np.nan)
    want = ref.lightning_indexer_grad(qi, ki, w, idx, dv_read, *lens, layout=layout)
    for name, g, wv in zip(NAMES, got, want):
        assert_close(to_np(g), wv, "float32", "attention", name)


class _IndexerBody(nn.Cell):
    """sum(sparse_values * W) over the used slots, through ops.lightning_indexer or nn.LightningIndexer."""

    def __init__(self, k: int, layout: str, lens: tuple, cell: bool) -> None:
        super().__init__()
        self.indexer = mgo.nn.LightningIndexer(k, layout=layout) if cell else None
        self.k, self.layout, self.lens = k, layout, lens

    def construct(self, xs: tuple, ws: tuple) -> Tensor:
        qi, ki, w = xs
        if self.indexer is None:
            idx, val = ops.lightning_indexer(qi, ki, w, self.lens[0], self.lens[1], sparse_count=self.k,
                                             layout=self.layout)
        else:
            idx, val = self.indexer(qi, ki, w, self.lens[0], self.lens[1])
        return (ms.ops.where(idx >= 0, val, 0.0) * ws[0]).sum()


@pytest.mark.parametrize("cell", [False, True], ids=["ops", "nn"])
@pytest.mark.parametrize("layout,dtype", [("TND", "float32"), ("BSND", "bfloat16"), ("TND", "float16")])
def test_dense_in_front_of_the_indexer(exec_mode: str, cell: bool, layout: str, dtype: str) -> None:
    """ms.grad of nn.Dense parameters in front of query_index, key_index and weights, through the
    indexer's values, vs the chain rule with the float64 reference."""
    rng = np.random.default_rng(16)
    nidx, didx, k = 2, 8, 3
    tq, tk, lens = ((10,), (10,), ([4, 10], [4, 10])) if layout == "TND" else ((2, 5), (2, 5), (None, None))
    up = Upstream.make(rng, [(*tq, nidx, didx), (*tk, 1, didx), (*tq, nidx)], dtype)
    qi, ki, w = up.x
    idx = _selected(qi, ki, w, dtype, lens, k, layout)
    dv = rng.standard_normal(idx.shape).astype(np.float32)
    dv_read = np.where(idx >= 0, dv, np.nan)
    want = ref.lightning_indexer_grad(qi, ki, w, idx, dv_read, *lens, layout=layout)
    body = _IndexerBody(k, layout, lens, cell)
    what = f"indexer values {exec_mode} {layout} {dtype} {'nn' if cell else 'ops'}"
    check_param_grads(up, body, [dv], list(want), what)


def test_nn_lightning_indexer_grad_with_dynamic_shapes() -> None:
    """GRAPH mode, every dim dynamic: the values' gradient for two sizes."""
    net = mgo.nn.LightningIndexer(4, layout="BSND")

    def loss(qi: Tensor, ki: Tensor, w: Tensor, dv: Tensor) -> Tensor:
        idx, val = net(qi, ki, w)
        return (ms.ops.where(idx >= 0, val, 0.0) * dv).sum()

    grad_fn = Fn(ms.grad(loss, grad_position=(0, 1, 2)))
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        grad_fn.set_inputs(*(Tensor(shape=[None] * r, dtype=ms.float32) for r in (4, 4, 3, 4)))
        for seed, (b, s1, s2) in enumerate(((2, 5, 7), (1, 9, 6))):
            rng = np.random.default_rng(17 + seed)
            qi, ki = rng.standard_normal((b, s1, 2, 8)), rng.standard_normal((b, s2, 1, 8))
            w = rng.standard_normal((b, s1, 2))
            idx = _selected(qi, ki, w, "float32", (None, None), 4, "BSND")
            dv = rng.standard_normal(idx.shape).astype(np.float32)
            got = grad_fn(*(to_ms(x, "float32") for x in (qi, ki, w, dv)))
            want = ref.lightning_indexer_grad(qi, ki, w, idx, np.where(idx >= 0, dv, np.nan))
            for name, g, wv in zip(NAMES, got, want):
                assert_close(to_np(g), wv, "float32", "attention", f"dynamic {(b, s1, s2)} {name}")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


# ------------------------------------------------------------ poisoned outputs (direct kernel call)

@pytest.fixture(scope="module")
def call_aot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_call_aot(tmp_path_factory.mktemp("call_aot"))


@pytest.mark.parametrize("dtype,wdtype,layout", [("float32", "float32", "TND"), ("float16", "float32", "TND"),
                                                 ("bfloat16", "bfloat16", "BSND")])
def test_every_output_element_is_written(call_aot: Path, tmp_path: Path, dtype: str, wdtype: str,
                                         layout: str) -> None:
    """Outputs start as NaN (all bytes 0xFF). Rows without a visible key, keys nobody selects and
    whole empty batches must come out as the reference's zeros, every other element as its value."""
    case = Case(np.random.default_rng(18), dtype, wdtype, layout, 3, lens_q=[6, 0, 3, 4], lens_k=[2, 5, 0, 9],
                b=2, s1=4, s2=9, k=3, drop=0.3)
    lens = [np.asarray(x if x is not None else [], np.int32) for x in case.lens]
    ins = [(case.qi, dtype), (case.ki, dtype), (case.w, wdtype), (case.si, "int32"), (case.dv, "float32"),
           (lens[0], "int32"), (lens[1], "int32"), (np.zeros(0, np.int32), "int32")]
    outs = [(case.qi.shape, dtype), (case.ki.shape, dtype), (case.w.shape, wdtype)]
    attrs = [f"attr str layout {layout}", "attr int sparse_mode 3", "attr int cmp_ratio 1"]
    got_all = aot_call(call_aot, tmp_path, "LightningIndexerGrad", attrs, ins, outs)
    want = case.reference()
    for i, ((_, dt), name) in enumerate(zip(outs, NAMES)):
        got = got_all[i].astype(np.float64)
        assert_close(got, want[i], dt if dt != "float32" else dtype, "attention", f"poisoned {name}")
        assert np.all(got[want[i] == 0] == 0), name
    key_rows = want[1].reshape(-1, want[1].shape[-1])
    assert (key_rows == 0).all(axis=1).any(), "the case must have a key row without gradient"
    assert (want[0].reshape(-1, want[0].shape[-1]) == 0).all(axis=1).any(), "and a query row without"
