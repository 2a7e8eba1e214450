"""Sinks (docs/contract.md section 0.7) on sparse_flash_attention(_grad): the float64 reference against
an independent dense definition differentiated by central finite differences, the CPU kernels against
the reference (fp16/bf16/fp32, TND/BSND, lengths, empty rows, -inf and large sinks, PyNative and
GRAPH), -inf sinks bitwise equal to none, d_sinks bitwise across thread counts, every output written,
and nn.SparseFlashAttention learning its sinks."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from _paths import SUPPORT
from _sfa_data import Case, make_case
from _util import DTYPES, TOLERANCES, Fn, assert_close, quantize, rel_l2, to_ms, to_np

import ms_grad_ops as mgo
from ms_grad_ops import ops
from ms_grad_ops import reference as ref

# name -> make_case kwargs: empty rows (S1 > S2, an empty batch), N2 = 2 groups with odd blocks,
# BSND, more visible keys than one kernel block (the online softmax across blocks), dense selections
# (grouped rows).
CASES = {
    "tnd_uneven": dict(layout="TND", lens_q=[5, 0, 7, 3], lens_kv=[9, 4, 4, 12], n1=4, d=16, dr=8, k=6,
                       pattern="mixed"),
    "bsnd_mode0_n2": dict(layout="BSND", batch=2, s1=6, s2=11, n1=4, n2=2, d=12, dr=4, k=5, bs=3, mode=0,
                          pattern="mixed"),
    "tnd_odd_norope": dict(layout="TND", lens_q=[7, 2], lens_kv=[3, 9], n1=3, d=5, dr=None, k=4, bs=2),
    "tnd_chunks": dict(layout="TND", lens_q=[2], lens_kv=[700], n1=2, d=8, dr=4, k=20, bs=64, mode=0),
    "tnd_dense": dict(layout="TND", lens_q=[30], lens_kv=[30], n1=2, d=8, dr=4, k=30),
}
SINKS = ("random", "half_neg_inf", "large")


def _sinks(rng: np.random.Generator, n1: int, kind: str) -> np.ndarray:
    """float32-exact sinks [N1] of one kind: N(0, 2), half of them -inf, or large positive (30, 1e4)."""
    x = rng.standard_normal(n1) * 2.0
    if kind == "half_neg_inf":
        x[rng.permutation(n1)[: max(1, n1 // 2)]] = -np.inf
    elif kind == "large":
        x = np.where(np.arange(n1) % 2 == 0, 30.0, 1e4) + rng.standard_normal(n1)
    elif kind == "neg_inf":
        x[:] = -np.inf
    return x.astype(np.float32).astype(np.float64)


def _case(name: str, seed: int) -> Case:
    kw = dict(CASES[name])
    case = make_case(np.random.default_rng(seed), **kw)
    if name == "tnd_dense":  # every row selects all its visible keys: the kernels group rows
        case.sparse_indices[:, 0, :] = np.where(np.arange(30)[None] <= np.arange(30)[:, None], np.arange(30), -1)
    return case


# ---------------------------------------------------------------- independent definition, finite differences

def _visible_counts(case: Case, n_q: int, n_k: int) -> np.ndarray:
    """[T1, N2, T2] times each key row is a visible selected key of each (query row, group), from the
    definition of docs/contract.md sections 0.3-0.5 (flattened token axes)."""
    idx = case.sparse_indices.reshape(n_q, case.sparse_indices.shape[-2], -1)
    if case.layout == "TND":
        cq, ck = [0, *case.lens_q], [0, *case.lens_kv]
        spans = [(cq[b], cq[b + 1] - cq[b], ck[b], ck[b + 1] - ck[b]) for b in range(len(cq) - 1)]
    else:
        s1, s2 = case.query.shape[1], case.key.shape[1]
        spans = [(b * s1, s1, b * s2, s2) for b in range(case.query.shape[0])]
    counts = np.zeros((n_q, idx.shape[1], n_k))
    bs = case.sparse_block_size
    for q0, s1, k0, s2 in spans:
        for i in range(s1):
            last = s2 - 1 if case.sparse_mode == 0 else min(s2 - 1, i + s2 - s1)
            for grp in range(idx.shape[1]):
                for block in idx[q0 + i, grp]:
                    if block >= 0:
                        for key in range(block * bs, min(block * bs + bs, last + 1)):
                            counts[q0 + i, grp, k0 + key] += 1
    return counts


def _dense(x: dict, counts: np.ndarray, sinks: np.ndarray, scale: float) -> np.ndarray:
    """out [T1, N1, D] of attention over every key row weighted by ``counts``, with one more logit
    column per head (the sink, unscaled, value 0) in the softmax: the definition, written densely."""
    qf = np.concatenate([x["query"], x["query_rope"]], -1) if x.get("query_rope") is not None else x["query"]
    kf = np.concatenate([x["key"], x["key_rope"]], -1) if x.get("key_rope") is not None else x["key"]
    n1, n2 = qf.shape[1], kf.shape[1]
    grp = np.arange(n1) // (n1 // n2)
    logits = scale * np.einsum("thd,jhd->thj", qf, kf[:, grp])            # [T1, N1, T2]
    c = counts[:, grp, :]
    sink = np.broadcast_to(sinks[None, :, None], (*logits.shape[:2], 1))
    full = np.concatenate([np.where(c > 0, logits, -np.inf), sink], -1)   # the sink column appended
    weights = np.concatenate([c, np.ones_like(sink)], -1)
    e = weights * np.exp(full - full.max(-1, keepdims=True))
    probs = (e / e.sum(-1, keepdims=True))[..., :-1]                      # the sink column dropped
    return np.einsum("thj,jhd->thd", probs, x["value"][:, grp])


def _flat_inputs(case: Case, sinks: np.ndarray) -> dict:
    """The case's float inputs on flattened token axes (TND shapes)."""
    def flat(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a.reshape(-1, *a.shape[-2:]).copy()
    return {"query": flat(case.query), "key": flat(case.key), "value": flat(case.value),
            "query_rope": flat(case.query_rope), "key_rope": flat(case.key_rope), "sinks": sinks.copy()}


@pytest.mark.parametrize("layout", ["TND", "BSND"])
def test_reference_matches_an_independent_definition_and_its_finite_differences(layout: str) -> None:
    """The float64 reference (forward, statistics and every gradient, d_sinks included) against the
    dense definition above and central finite differences of L = sum(W * out)."""
    rng = np.random.default_rng(40)
    kw = dict(n1=2, n2=1, d=3, dr=2, k=3, bs=2, pattern="mixed")
    case = (make_case(rng, layout="TND", lens_q=[4, 3], lens_kv=[2, 6], **kw) if layout == "TND"
            else make_case(rng, layout="BSND", batch=2, s1=3, s2=4, mode=0, **kw))
    case.sparse_indices.reshape(-1, 1, 3)[1] = -1  # flattened row 1 selects nothing
    sinks = _sinks(rng, 2, "random")
    x = _flat_inputs(case, sinks)
    n_q, n_k = x["query"].shape[0], x["key"].shape[0]
    counts = _visible_counts(case, n_q, n_k)
    assert (counts.sum(-1) == 0).any() and (counts.sum(-1) > 0).any(), "the case must have an empty row"
    out, smax, ssum = ref.sparse_flash_attention(case.query, case.key, case.value, case.sparse_indices,
                                                 case.query_rope, case.key_rope, case.lens_q, case.lens_kv, sinks,
                                                 **case.attrs())
    np.testing.assert_allclose(out.reshape(n_q, 2, -1), _dense(x, counts, sinks, case.scale_value), rtol=1e-12,
                               atol=1e-14)
    w = rng.standard_normal(out.shape)
    grads = ref.sparse_flash_attention_grad(case.query, case.key, case.value, case.sparse_indices, w, out, smax, ssum,
                                            case.lens_q, case.lens_kv, case.query_rope, case.key_rope, sinks,
                                            **case.attrs())
    names = ("query", "key", "value", "query_rope", "key_rope", "sinks")
    assert len(grads) == 6
    w_flat = w.reshape(n_q, 2, -1)
    for name, got in zip(names, grads):
        fd = np.zeros_like(x[name])
        for i in np.ndindex(fd.shape):
            plus, minus = dict(x), dict(x)
            plus[name], minus[name] = x[name].copy(), x[name].copy()
            plus[name][i] += 1e-6
            minus[name][i] -= 1e-6
            fd[i] = (np.sum(w_flat * _dense(plus, counts, plus["sinks"], case.scale_value))
                     - np.sum(w_flat * _dense(minus, counts, minus["sinks"], case.scale_value))) / 2e-6
        np.testing.assert_allclose(got.reshape(fd.shape), fd, rtol=1e-6, atol=1e-8, err_msg=f"d_{name}")
    # The statistics include the sink; an empty row has max sigma, sum 1.
    empty = counts.sum(-1) == 0
    m = (smax.transpose(0, 2, 1, 3) if layout == "BSND" else smax.transpose(1, 0, 2)).reshape(n_q, 2)
    s = (ssum.transpose(0, 2, 1, 3) if layout == "BSND" else ssum.transpose(1, 0, 2)).reshape(n_q, 2)
    rows = np.nonzero(empty[:, 0])[0]
    assert (m[rows] == sinks).all() and (s[rows] == 1).all()


# ---------------------------------------------------------------- the kernels vs the reference

def _inputs(case: Case, dtype: str) -> dict:
    return {n: None if getattr(case, n) is None else quantize(getattr(case, n), dtype)
            for n in ("query", "key", "value", "query_rope", "key_rope")}


def _ms(x: np.ndarray | None, dtype: str) -> ms.Tensor | None:
    return None if x is None else to_ms(x, dtype)


def _lens(case: Case) -> tuple:
    if case.layout != "TND":
        return None, None
    return ms.Tensor(np.asarray(case.lens_q, np.int32)), ms.Tensor(np.asarray(case.lens_kv, np.int64))


def _run(fn: object, exec_mode: str, *args: object) -> object:
    return Fn(fn)(*args) if exec_mode == "graph" else fn(*args)


def kernels(case: Case, dtype: str, sinks: np.ndarray | None, exec_mode: str, d_out: np.ndarray
            ) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """(out, softmax_max, softmax_sum) of the forward kernel and the six gradients of the grad kernel
    fed that forward's results (None for absent ones), as float64."""
    x = _inputs(case, dtype)
    rope = x["query_rope"] is not None
    lq, lkv = _lens(case)
    attrs = case.attrs()
    tensors = [_ms(x[n], dtype) for n in ("query", "key", "value", "query_rope", "key_rope")]
    sk = None if sinks is None else ms.Tensor(sinks.astype(np.float32))

    def step(q: ms.Tensor, k: ms.Tensor, v: ms.Tensor, idx: ms.Tensor, do: ms.Tensor, *rest: ms.Tensor) -> tuple:
        qr, kr = (rest[0], rest[1]) if rope else (None, None)
        sinks_t = rest[-1] if sk is not None else None
        out, mx, sm = ops.sparse_flash_attention(q, k, v, idx, qr, kr, lq, lkv, sinks_t, **attrs)
        grads = ops.sparse_flash_attention_grad(q, k, v, idx, do, out, mx, sm, lq, lkv, qr, kr, sinks_t, **attrs)
        return (out, mx, sm, *(g for g in grads if g is not None))

    args = [*tensors[:3], ms.Tensor(case.sparse_indices), to_ms(d_out, dtype)]
    args += tensors[3:] if rope else []
    args += [sk] if sk is not None else []
    got = [to_np(t) for t in _run(step, exec_mode, *args)]
    grads: list[np.ndarray | None] = got[3:5] + [got[5]]
    rest = got[6:]
    grads += [rest.pop(0), rest.pop(0)] if rope else [None, None]
    grads.append(rest.pop(0) if sinks is not None else None)
    return got[:3], grads


def references(case: Case, dtype: str, sinks: np.ndarray | None, forward: list[np.ndarray], d_out: np.ndarray
               ) -> tuple[tuple, tuple]:
    """The reference forward, and the reference grads at the kernel forward's out and statistics."""
    x = _inputs(case, dtype)
    want_fwd = ref.sparse_flash_attention(x["query"], x["key"], x["value"], case.sparse_indices, x["query_rope"],
                                          x["key_rope"], case.lens_q, case.lens_kv, sinks, **case.attrs())
    want_grad = ref.sparse_flash_attention_grad(x["query"], x["key"], x["value"], case.sparse_indices, d_out,
                                                forward[0], forward[1], forward[2], case.lens_q, case.lens_kv,
                                                x["query_rope"], x["key_rope"], sinks, **case.attrs())
    return want_fwd, want_grad


def check(name: str, dtype: str, kind: str, exec_mode: str) -> None:
    case = _case(name, 11)
    rng = np.random.default_rng(12)
    sinks = _sinks(rng, case.query.shape[-2], kind)
    d_out = quantize(rng.standard_normal(case.query.shape[:-1] + (case.value.shape[-1],)), dtype)
    fwd, grads = kernels(case, dtype, sinks, exec_mode, d_out)
    want_fwd, want_grad = references(case, dtype, sinks, fwd, d_out)

    def close(got: np.ndarray, want: np.ndarray, tol_dtype: str, what: str) -> None:
        assert np.isfinite(got).all(), what
        # Large sinks leave the keys ~1e-13 of the mass: out and the gradients are that small, below
        # float16's range, so they are compared on the scale of unit values (RMS error).
        scale = np.sqrt(want.size) if kind == "large" and what != "softmax_max" else 0.0
        err = rel_l2(got, want, scale)
        assert err <= TOLERANCES["attention"][tol_dtype], f"{what}: relative L2 error {err:.3g} ({tol_dtype})"

    for got, want, what in zip(fwd, want_fwd, ("out", "softmax_max", "softmax_sum")):
        close(got, want, dtype if what == "out" else "float32", what)
    names = ("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope", "d_sinks")
    for got, want, what in zip(grads, want_grad, names):
        if want is None:
            assert got is None, what
            continue
        close(got, want, dtype, what)


@pytest.mark.parametrize("kind", SINKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_kernels_match_reference(name: str, dtype: str, kind: str) -> None:
    check(name, dtype, kind, "pynative")


@pytest.mark.parametrize("name,dtype,kind", [("tnd_uneven", "bfloat16", "random"),
                                             ("bsnd_mode0_n2", "float16", "half_neg_inf"),
                                             ("tnd_chunks", "float32", "large")])
def test_kernels_match_reference_graph(exec_mode: str, name: str, dtype: str, kind: str) -> None:
    check(name, dtype, kind, exec_mode)


@pytest.mark.parametrize("name", ["tnd_uneven", "bsnd_mode0_n2", "tnd_dense"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_neg_inf_sinks_are_bitwise_no_sinks(name: str, dtype: str) -> None:
    """sinks all -inf: out, statistics and every gradient bitwise those of absent sinks; d_sinks 0."""
    case = _case(name, 13)
    d_out = quantize(np.random.default_rng(14).standard_normal(case.query.shape[:-1] + (case.value.shape[-1],)),
                     dtype)
    fwd_none, grads_none = kernels(case, dtype, None, "pynative", d_out)
    fwd_inf, grads_inf = kernels(case, dtype, _sinks(np.random.default_rng(0), case.query.shape[-2], "neg_inf"),
                                 "pynative", d_out)
    for a, b in zip(fwd_none + grads_none[:5], fwd_inf + grads_inf[:5]):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.tobytes() == b.tobytes()
    assert (grads_inf[5] == 0).all() and grads_none[5] is None


def test_empty_rows_statistics_with_sinks() -> None:
    """A row with no visible key: out 0, max sigma, sum 1 for heads with a sink, 0 / 0 for a -inf one;
    a BSND padding row 0 / 0 whatever the sinks."""
    case = make_case(np.random.default_rng(15), layout="BSND", batch=2, s1=4, s2=6, n1=2, d=8, dr=None, k=3)
    case.sparse_indices[0, 1] = -1                       # row (0, 1) selects nothing
    sinks = np.array([1.5, -np.inf])
    lens_q = [4, 2]                                      # rows (1, 2) and (1, 3) are padding
    x = _inputs(case, "float32")
    out, mx, sm = ops.sparse_flash_attention(*(to_ms(x[n], "float32") for n in ("query", "key", "value")),
                                             ms.Tensor(case.sparse_indices), None, None, lens_q, None,
                                             ms.Tensor(sinks.astype(np.float32)), **case.attrs())
    out, mx, sm = to_np(out), mx.asnumpy(), sm.asnumpy()
    assert (out[0, 1] == 0).all() and (out[1, 2:] == 0).all()
    assert mx[0, 0, 1].tolist() == [1.5, 0.0] and sm[0, 0, 1].tolist() == [1.0, 0.0]
    assert (mx[1, 0, 2:] == 0).all() and (sm[1, 0, 2:] == 0).all()
    want = ref.sparse_flash_attention(x["query"], x["key"], x["value"], case.sparse_indices, None, None, lens_q,
                                      None, sinks, **case.attrs())
    assert_close(out, want[0], "float32", "attention", "out")
    assert_close(mx.astype(np.float64), want[1], "float32", "attention", "softmax_max")
    assert_close(sm.astype(np.float64), want[2], "float32", "attention", "softmax_sum")


def test_sinks_shape_and_dtype_errors() -> None:
    case = make_case(np.random.default_rng(16), layout="TND", lens_q=[3], lens_kv=[4], n1=4, d=8, dr=None, k=2)
    t = [to_ms(getattr(case, n), "float32") for n in ("query", "key", "value")]
    idx = ms.Tensor(case.sparse_indices)
    attrs = case.attrs()
    with pytest.raises(ValueError, match=r"sparse_flash_attention: argument 'sinks' must have shape \[N1\] = \[4\]"
                                         r".*got shape \[3\]"):
        ops.sparse_flash_attention(*t, idx, sinks=ms.Tensor(np.zeros(3, np.float32)), **attrs)
    with pytest.raises(ValueError, match=r"sparse_flash_attention_grad: argument 'sinks' must have shape"):
        ops.sparse_flash_attention_grad(*t, idx, t[0], t[0], ms.Tensor(np.ones((1, 3, 4), np.float32)),
                                        ms.Tensor(np.ones((1, 3, 4), np.float32)),
                                        sinks=ms.Tensor(np.zeros((4, 1), np.float32)), **attrs)
    with pytest.raises(TypeError, match="sparse_flash_attention: argument 'sinks' must be float32, got float16"):
        ops.sparse_flash_attention(*t, idx, sinks=ms.Tensor(np.zeros(4, np.float16)), **attrs)


# ---------------------------------------------------------------- determinism across thread counts

_THREADS_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    import numpy as np, mindspore as ms
    ms.set_device("CPU")
    sys.path.insert(0, sys.argv[1])
    from _sfa_data import make_case
    from _util import quantize, to_ms
    from ms_grad_ops import ops
    for dtype in ("bfloat16", "float32"):
        c = make_case(np.random.default_rng(0), layout="TND", lens_q=[300, 90, 40], lens_kv=[300, 90, 30], n1=4,
                      d=32, dr=8, k=64, bs=1, pattern="mixed")
        t = {n: to_ms(quantize(getattr(c, n), dtype), dtype) for n in ("query", "key", "query_rope", "key_rope")}
        sinks = ms.Tensor(np.array([0.5, -1.0, 3.0, -np.inf], np.float32))
        idx = ms.Tensor(c.sparse_indices)
        out, m, s = ops.sparse_flash_attention(t["query"], t["key"], None, idx, t["query_rope"], t["key_rope"],
                                               c.lens_q, c.lens_kv, sinks, **c.attrs())
        do = to_ms(np.random.default_rng(1).standard_normal(out.shape), dtype)
        g = ops.sparse_flash_attention_grad(t["query"], t["key"], None, idx, do, out, m, s, c.lens_q, c.lens_kv,
                                            t["query_rope"], t["key_rope"], sinks, **c.attrs())
        print(dtype, hashlib.sha256(g[5].asnumpy().tobytes()).hexdigest(),
              hashlib.sha256(g[0].float().asnumpy().tobytes() + g[1].float().asnumpy().tobytes()).hexdigest())
""")


def test_d_sinks_bitwise_for_1_2_and_3_threads(tmp_path: Path) -> None:
    script = tmp_path / "threads.py"
    script.write_text(_THREADS_SCRIPT)
    digests = []
    for threads in ("1", "2", "3"):
        res = subprocess.run([sys.executable, str(script), str(SUPPORT)], env=dict(os.environ, OMP_NUM_THREADS=threads),
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        digests.append([line for line in res.stdout.splitlines() if line.startswith(("bfloat16", "float32"))])
    assert len(digests[0]) == 2 and digests[0] == digests[1] == digests[2]


# ---------------------------------------------------------------- every output element written

def test_every_output_element_is_written(tmp_path: Path) -> None:
    """The grad kernel called directly with outputs starting as NaN (all bytes 0xFF): d_sinks and the
    other gradients come out as the reference's values (zeros included)."""
    from _aot import call_aot_kernel

    case = make_case(np.random.default_rng(17), layout="TND", lens_q=[4, 3], lens_kv=[2, 6], n1=2, d=8, dr=4, k=3)
    sinks = np.array([0.25, -2.0])
    x = _inputs(case, "float32")
    out, mx, sm = ref.sparse_flash_attention(x["query"], x["key"], x["value"], case.sparse_indices, x["query_rope"],
                                             x["key_rope"], case.lens_q, case.lens_kv, sinks, **case.attrs())
    d_out = np.random.default_rng(18).standard_normal(out.shape)
    want = ref.sparse_flash_attention_grad(x["query"], x["key"], x["value"], case.sparse_indices, d_out, out, mx, sm,
                                           case.lens_q, case.lens_kv, x["query_rope"], x["key_rope"], sinks,
                                           **case.attrs())
    f32 = "float32"
    ins = [(x["query"], f32), (x["key"], f32), (x["value"], f32), (case.sparse_indices, "int32"), (d_out, f32),
           (out, f32), (mx, f32), (sm, f32), (np.asarray(case.lens_q), "int32"), (np.asarray(case.lens_kv), "int32"),
           (x["query_rope"], f32), (x["key_rope"], f32), (sinks, f32)]
    outs = [(w.shape, f32) for w in want]
    attrs = {**case.attrs(), "pre_tokens": 2147483647, "next_tokens": 2147483647, "deterministic": False}
    got = call_aot_kernel(tmp_path, "SparseFlashAttentionGrad", ins, outs, attrs)
    for g, w, name in zip(got, want, ("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope", "d_sinks")):
        assert_close(g, w, f32, "attention", f"poisoned {name}")


# ---------------------------------------------------------------- training

class _Model(ms.nn.Cell):
    """A Dense in front of nn.SparseFlashAttention(sinks=N1), key is value."""

    def __init__(self, n1: int, d: int, attrs: dict) -> None:
        super().__init__()
        self.n1, self.d = n1, d
        self.proj = ms.nn.Dense(d, n1 * d, weight_init="normal", bias_init="zeros")
        self.attn = mgo.nn.SparseFlashAttention(**attrs, sinks=n1)

    def construct(self, x: ms.Tensor, key: ms.Tensor, idx: ms.Tensor, target: ms.Tensor) -> ms.Tensor:
        q = self.proj(x).reshape(x.shape[0], self.n1, self.d)
        out = self.attn(q, key, None, idx, None, None, [x.shape[0]], [key.shape[0]])
        return ((out - target) ** 2).sum()


def test_sparse_flash_attention_cell_learns_its_sinks(exec_mode: str) -> None:
    """GRAPH and PyNative: value_and_grad + optimizer; the sinks' gradient is the reference's d_sinks
    (d_out = 2 (out - target)) and a step moves the sinks."""
    rng = np.random.default_rng(19)
    t, n1, d = 6, 4, 8
    attrs = {"scale_value": 0.3, "layout": "TND"}
    model = _Model(n1, d, attrs)
    x = ms.Tensor(rng.standard_normal((t, d)).astype(np.float32))
    key = ms.Tensor(rng.standard_normal((t, 1, d)).astype(np.float32))
    idx = ms.Tensor(np.where(np.arange(t)[None] <= np.arange(t)[:, None], np.arange(t), -1)[:, None].astype(np.int32))
    target = ms.Tensor(rng.standard_normal((t, n1, d)).astype(np.float32))
    params = model.trainable_params()
    assert [p.name for p in params if p.name.endswith("sinks")] == ["attn.sinks"]
    grad_fn = ms.value_and_grad(model, None, params)
    loss, grads = grad_fn(x, key, idx, target)
    d_sinks = dict(zip([p.name for p in params], grads))["attn.sinks"].asnumpy()
    q = (x.asnumpy() @ model.proj.weight.asnumpy().T).reshape(t, n1, d)
    k = key.asnumpy().astype(np.float64)
    sinks = model.attn.sinks.asnumpy().astype(np.float64)
    out, mx, sm = ref.sparse_flash_attention(q, k, k, idx.asnumpy(), None, None, [t], [t], sinks, **attrs)
    want = ref.sparse_flash_attention_grad(q, k, k, idx.asnumpy(), 2 * (out - target.asnumpy()), out, mx, sm, [t],
                                           [t], None, None, sinks, **attrs)[5]
    assert np.abs(want).max() > 1e-3, "the case must give the sinks a gradient"
    assert_close(d_sinks, want, "float32", "attention", "d_sinks")
    before = model.attn.sinks.asnumpy().copy()
    optimizer = ms.nn.SGD(params, learning_rate=0.1)
    optimizer(grads)
    np.testing.assert_allclose(model.attn.sinks.asnumpy(), before - 0.1 * d_sinks, rtol=1e-5, atol=1e-7)


def test_sparse_flash_attention_cell_sinks_arguments() -> None:
    cell = mgo.nn.SparseFlashAttention(0.5, sinks=np.array([1.0, -2.0]))
    assert cell.sinks.dtype == ms.float32 and cell.sinks.asnumpy().tolist() == [1.0, -2.0]
    assert mgo.nn.SparseFlashAttention(0.5).sinks is None
    assert (mgo.nn.SparseFlashAttention(0.5, sinks=3).sinks.asnumpy() == 0).all()
    with pytest.raises(ValueError, match="SparseFlashAttention: argument 'sinks'"):
        mgo.nn.SparseFlashAttention(0.5, sinks=0)
    with pytest.raises(TypeError, match="SparseFlashAttention: argument 'sinks'"):
        mgo.nn.SparseFlashAttention(0.5, sinks=1.5)
    with pytest.raises(ValueError, match="must be None when the Cell learns its own sinks"):
        q = ms.Tensor(np.ones((2, 2, 4), np.float32))
        cell(q, q[:, :1], None, ms.Tensor(np.zeros((2, 1, 1), np.int32)), sinks=ms.Tensor(np.zeros(2, np.float32)))
