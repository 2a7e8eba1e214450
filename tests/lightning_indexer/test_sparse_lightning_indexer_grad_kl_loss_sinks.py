"""Sinks on sparse_lightning_indexer_grad_kl_loss (docs/contract.md section 4.2): the teacher is
renormalised by CANN's 1 / (N1 - sum_h P_sink). The float64 reference against an independent
definition (CANN's formula, literally) and central finite differences of its loss; the CPU kernel
against the reference; -inf sinks bitwise equal to none; large sinks finite; bitwise across thread
counts; nn.IndexerKLLoss with sinks."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from _indexer_cases import Case, make_case, ms_args
from _paths import SUPPORT
from _util import Fn, assert_close, to_ms, to_np

import ms_grad_ops as mgo
from ms_grad_ops import ops
from ms_grad_ops import reference as ref

OP = "sparse_lightning_indexer_grad_kl_loss"
LOSS_TOL = {"float32": 1e-4, "float16": 1e-3, "bfloat16": 1e-3}
COMBOS = [("float32", "float32"), ("float16", "float16"), ("bfloat16", "float32")]


def _sinks(rng: np.random.Generator, n1: int, kind: str) -> np.ndarray:
    x = rng.standard_normal(n1) * 2.0
    if kind == "half_neg_inf":
        x[rng.permutation(n1)[: max(1, n1 // 2)]] = -np.inf
    elif kind == "large":
        x = np.where(np.arange(n1) % 2 == 0, 30.0, 1e4) + rng.standard_normal(n1)
    elif kind == "neg_inf":
        x[:] = -np.inf
    return x.astype(np.float32).astype(np.float64)


def with_sinks(case: Case, sinks: np.ndarray | None) -> Case:
    """The case with the main attention's statistics recomputed over the same keys with ``sinks``."""
    a = case.arrays
    mx, sm = ref.attention_softmax_stats(a["query"], a["key"], a["sparse_indices"], a.get("query_rope"),
                                         a.get("key_rope"), case.lens_q, case.lens_k, sinks, scale_value=case.scale,
                                         layout=case.layout, sparse_mode=case.sparse_mode)
    a["softmax_max"] = mx.astype(np.float32).astype(np.float64)
    a["softmax_sum"] = sm.astype(np.float32).astype(np.float64)
    return case


# ---------------------------------------------------------------- independent definition

def _visible(case: Case, t: int) -> np.ndarray:
    """Global key rows visible to TND query row t (cumulative lengths, causal or not)."""
    cq, ck = [0, *case.lens_q], [0, *case.lens_k]
    b = next(i for i in range(len(cq) - 1) if cq[i] <= t < cq[i + 1])
    s1, s2, i = cq[b + 1] - cq[b], ck[b + 1] - ck[b], t - cq[b]
    last = s2 - 1 if case.sparse_mode == 0 else min(s2 - 1, i + s2 - s1)
    idx = case.arrays["sparse_indices"][t, 0]
    return ck[b] + idx[(idx >= 0) & (idx <= last)]


def _definition(case: Case, sinks: np.ndarray, qi: np.ndarray, ki: np.ndarray, w: np.ndarray
                ) -> tuple[float, np.ndarray, np.ndarray]:
    """(loss, softmax_max, softmax_sum) from the definition: per row, the main attention's softmax
    over the visible keys plus one unscaled sink logit per head; teacher p = sum_h P[h] / (N1 -
    sum_h P_sink[h]) (CANN's V2 formula, literally); y = softmax of the index scores; loss =
    sum p (ln max(p, 1e-8) - ln max(y, 1e-8))."""
    a = case.arrays
    q = np.concatenate([a["query"], a["query_rope"]], -1)
    k = np.concatenate([a["key"], a["key_rope"]], -1)[:, 0]
    n1 = q.shape[1]
    loss, mxs, sms = 0.0, np.zeros((q.shape[0], n1)), np.zeros((q.shape[0], n1))
    for t in range(q.shape[0]):
        j = _visible(case, t)
        if j.size == 0:
            mxs[t], sms[t] = sinks, 1.0
            continue
        logits = np.concatenate([case.scale * q[t] @ k[j].T, sinks[:, None]], 1)   # the sink column last
        mxs[t] = logits.max(1)
        e = np.exp(logits - mxs[t][:, None])
        sms[t] = e.sum(1)
        probs = e / sms[t][:, None]
        p = probs[:, :-1].sum(0) / (n1 - probs[:, -1].sum())
        scores = (w[t][:, None] * np.maximum(qi[t] @ ki[j, 0].T, 0)).sum(0)
        y = np.exp(scores - scores.max())
        y /= y.sum()
        loss += float(np.sum(p * (np.log(np.maximum(p, 1e-8)) - np.log(np.maximum(y, 1e-8)))))
    return loss, mxs, sms


def test_reference_matches_the_definition_and_its_finite_differences() -> None:
    """Statistics with sinks, the loss with CANN's renormalised target, and the three gradients of
    the reference (dI = y - p, exact because p sums to 1) against central finite differences."""
    rng = np.random.default_rng(30)
    case = make_case(rng, "float32", "float32", "TND", lens_q=[3, 4], lens_k=[2, 6], n1=3, d=4, dr=2, nidx=2,
                     didx=3, k=4, drop=0.2)
    case.arrays["sparse_indices"][1] = -1  # a row without a visible key
    sinks = _sinks(rng, 3, "random")
    with_sinks(case, sinks)
    a = case.arrays
    loss, mx, sm = _definition(case, sinks, a["query_index"], a["key_index"], a["weights"])
    np.testing.assert_allclose(a["softmax_max"][0], mx, rtol=1e-6)
    np.testing.assert_allclose(a["softmax_sum"][0], sm, rtol=1e-6)
    a["softmax_max"], a["softmax_sum"] = mx[None], sm[None]  # exact float64 statistics from here
    got = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), sinks, **case.ref_kwargs())
    assert got[3] == pytest.approx(loss, rel=1e-12)
    for i, name in enumerate(("query_index", "key_index", "weights")):
        x = a[name]
        fd = np.zeros_like(x)
        for e in np.ndindex(x.shape):
            args = {"qi": a["query_index"], "ki": a["key_index"], "w": a["weights"]}
            key = ("qi", "ki", "w")[i]
            plus, minus = x.copy(), x.copy()
            plus[e] += 1e-6
            minus[e] -= 1e-6
            fd[e] = (_definition(case, sinks, **{**args, key: plus})[0]
                     - _definition(case, sinks, **{**args, key: minus})[0]) / 2e-6
        np.testing.assert_allclose(got[i], fd, rtol=1e-5, atol=1e-8, err_msg=f"d_{name}")


# ---------------------------------------------------------------- the kernel vs the reference

def run_kernel(case: Case, dtype: str, wdtype: str, sinks: np.ndarray | None, exec_mode: str = "pynative"
               ) -> list[np.ndarray]:
    args = ms_args(case, dtype, wdtype, lens_as_tensor=True)
    sk = None if sinks is None else ms.Tensor(sinks.astype(np.float32))
    kw = case.ref_kwargs()
    present = [x for x in args if x is not None]
    names = [i for i, x in enumerate(args) if x is not None]

    def call(*tensors: ms.Tensor) -> tuple:
        full = list(args)
        for i, t in zip(names, tensors):
            full[i] = t
        return ops.sparse_lightning_indexer_grad_kl_loss(*full, tensors[-1] if sk is not None else None, **kw)

    out = (Fn(call) if exec_mode == "graph" else call)(*present, *([sk] if sk is not None else []))
    return [to_np(t) for t in out]


def check(case: Case, dtype: str, wdtype: str, kind: str, exec_mode: str = "pynative") -> None:
    sinks = _sinks(np.random.default_rng(31), case.arrays["query"].shape[-2], kind)
    with_sinks(case, sinks)
    got = run_kernel(case, dtype, wdtype, sinks, exec_mode)
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), sinks, **case.ref_kwargs())
    for name, g, w in zip(("d_query_index", "d_key_index", "d_weights"), got[:3], want[:3]):
        assert_close(g, w, dtype if name != "d_weights" else (wdtype if wdtype != "float32" else dtype),
                     "attention", name)
    assert got[3].shape == (1,) and np.isfinite(got[3]).all()
    assert abs(got[3][0] - want[3]) <= LOSS_TOL[dtype] * max(abs(want[3]), 1e-6), (got[3], want[3])


@pytest.mark.parametrize("kind", ["random", "half_neg_inf", "large"])
@pytest.mark.parametrize("dtype,wdtype", COMBOS)
@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_kernel_matches_reference(layout: str, dtype: str, wdtype: str, kind: str) -> None:
    check(make_case(np.random.default_rng(32), dtype, wdtype, layout), dtype, wdtype, kind)


def test_kernel_matches_reference_graph_odd_sizes(exec_mode: str) -> None:
    case = make_case(np.random.default_rng(33), "bfloat16", "float32", "TND", 0, lens_q=[1, 13, 2],
                     lens_k=[5, 11, 300], n1=3, d=33, dr=5, nidx=5, didx=19, k=267, drop=0.1)
    check(case, "bfloat16", "float32", "random", exec_mode)


def test_large_sinks_stay_finite() -> None:
    """Sinks of 1e4 on every head leave every P[h, j] (and N1 - sum P_sink) below float64's range, so
    CANN's formula is 0 / 0; the limit is finite (P[h, j] ~ exp(S[h, j] - sigma): the keys' softmax
    pooled over the heads) and the kernel gives it: its loss is the definition's at sinks of 20,
    where the formula still holds in float64 and is that limit to ~1e-8."""
    case = make_case(np.random.default_rng(34), "float32", "float32", "TND", n1=2)
    sinks = np.full(2, 1e4)
    with_sinks(case, sinks)
    got = run_kernel(case, "float32", "float32", sinks)
    assert all(np.isfinite(g).all() for g in got)
    a = case.arrays
    loss = _definition(case, np.full(2, 20.0), a["query_index"], a["key_index"], a["weights"])[0]
    assert got[3][0] == pytest.approx(loss, rel=1e-4)
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), sinks, **case.ref_kwargs())
    assert want[3] == pytest.approx(loss, rel=1e-6)


@pytest.mark.parametrize("dtype,wdtype", COMBOS)
def test_neg_inf_sinks_are_bitwise_no_sinks(dtype: str, wdtype: str) -> None:
    case = make_case(np.random.default_rng(35), dtype, wdtype, "TND")
    none = run_kernel(case, dtype, wdtype, None)
    neg_inf = run_kernel(case, dtype, wdtype, _sinks(np.random.default_rng(0), 4, "neg_inf"))
    for a, b in zip(none, neg_inf):
        assert a.tobytes() == b.tobytes()


def test_sinks_shape_error() -> None:
    case = make_case(np.random.default_rng(36), "float32", "float32", "TND")
    with pytest.raises(ValueError, match=rf"{OP}: argument 'sinks' must have shape \[N1\] = \[4\]"):
        ops.sparse_lightning_indexer_grad_kl_loss(*ms_args(case, "float32", "float32"),
                                                  ms.Tensor(np.zeros(2, np.float32)), **case.ref_kwargs())


_THREADS_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np, mindspore as ms
    ms.set_device("CPU")
    sys.path.insert(0, sys.argv[1])
    from _indexer_cases import make_case, ms_args
    from ms_grad_ops import ops
    case = make_case(np.random.default_rng(3), "bfloat16", "float32", "TND", lens_q=[200, 70], lens_k=[300, 90],
                     k=64)
    sinks = ms.Tensor(np.array([0.5, -1.0, 3.0, -np.inf], np.float32))
    out = ops.sparse_lightning_indexer_grad_kl_loss(*ms_args(case, "bfloat16", "float32"), sinks,
                                                    **case.ref_kwargs())
    print("digest", hashlib.sha256(b"".join(t.float().asnumpy().tobytes() for t in out)).hexdigest())
""")


def test_bitwise_for_1_2_and_3_threads(tmp_path: Path) -> None:
    script = tmp_path / "threads.py"
    script.write_text(_THREADS_SCRIPT)
    digests = []
    for threads in ("1", "2", "3"):
        res = subprocess.run([sys.executable, str(script), str(SUPPORT)], env=dict(os.environ, OMP_NUM_THREADS=threads),
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        digests.append([line for line in res.stdout.splitlines() if line.startswith("digest")])
    assert len(digests[0]) == 1 and digests[0] == digests[1] == digests[2]


def test_indexer_kl_loss_cell_takes_sinks(exec_mode: str) -> None:
    """nn.IndexerKLLoss(sinks=...): the loss and the indexer gradients of the op with those sinks,
    scaled by the incoming gradient; sinks (a constant of the indexer loss) get a zero gradient."""
    case = make_case(np.random.default_rng(37), "float32", "float32", "TND")
    sinks = _sinks(np.random.default_rng(38), 4, "random")
    with_sinks(case, sinks)
    want = ref.sparse_lightning_indexer_grad_kl_loss(*case.ref_args(), sinks, **case.ref_kwargs())
    args = ms_args(case, "float32", "float32")
    cell = mgo.nn.IndexerKLLoss(case.scale, layout="TND")
    sk = ms.Tensor(sinks.astype(np.float32))

    def loss_fn(qi: ms.Tensor, ki: ms.Tensor, w: ms.Tensor, s: ms.Tensor) -> ms.Tensor:
        return 3.0 * cell(args[0], args[1], qi, ki, w, *args[5:10], case.lens_q, case.lens_k, s)

    grad_fn = ms.value_and_grad(Fn(loss_fn) if exec_mode == "graph" else loss_fn, (0, 1, 2, 3))
    loss, grads = grad_fn(to_ms(case.arrays["query_index"], "float32"), to_ms(case.arrays["key_index"], "float32"),
                          to_ms(case.arrays["weights"], "float32"), sk)
    assert float(loss.asnumpy()[0]) == pytest.approx(3.0 * want[3], rel=1e-4)
    for g, w, name in zip(grads[:3], want[:3], ("d_query_index", "d_key_index", "d_weights")):
        assert_close(to_np(g), 3.0 * w, "float32", "attention", name)
    assert not grads[3].asnumpy().any()
