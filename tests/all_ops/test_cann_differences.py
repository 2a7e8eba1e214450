"""Where CANN's operators behave differently from this package (docs/contract.md section 6), each with
inputs built to tell them apart, and the opt-in check that flags inputs outside CANN's rules
(``MGO_CANN_STRICT=1``, docs/contract.md section 0.12).

CANN's behaviour is written here from its documentation and test goldens (ops-transformer), not
run: ``cann_reading`` is CANN's documented reading of a sparse_indices row, used to show that the
package's result differs from what CANN computes on the same inputs."""
from __future__ import annotations

import inspect
from collections.abc import Iterator

import mindspore as ms
import mindspore.ops.auto_generate as auto_generate
import numpy as np
import pytest
from _util import OpCell, assert_close, quantize, rel_l2, to_ms, to_np
from mindspore import Tensor
from mindspore import ops as msops

from ms_grad_ops import builtins, ops
from ms_grad_ops import reference as ref

T1, T2, N1, D, SCALE = 4, 6, 2, 8, 0.4   # one TND sequence; sparse_mode 3: query t sees keys <= t + 2


def _data(seed: int, dtype: str = "float32") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"q": (T1, N1, D), "k": (T2, 1, D), "qi": (T1, 2, D), "ki": (T2, 1, D), "w": (T1, 2), "d_out": (T1, N1, D)}
    data = {n: quantize(rng.standard_normal(shape), dtype) for n, shape in shapes.items()}
    data["dv"] = rng.standard_normal((T1, 1, 4)).astype(np.float32).astype(np.float64)
    return data


def cann_reading(row: np.ndarray, visible: int, block: int = 1) -> list[int]:
    """The blocks CANN's kernels attend to in one sparse_indices row (its docs: valid entries first;
    its golden: at most min(K, ceil(visible / block)) slots read, stopping at the first -1, blocks
    beyond the visible keys skipped)."""
    out = []
    for i in row[:min(len(row), -(-visible // block))]:
        if i == -1:
            break
        if i * block < visible:
            out.append(int(i))
    return out


def _as_row(blocks: list[int], k: int) -> np.ndarray:
    return np.array(blocks + [-1] * (k - len(blocks)), np.int32)


def _sfa(d: dict, idx: np.ndarray) -> list[np.ndarray]:
    return [to_np(x) for x in ops.sparse_flash_attention(to_ms(d["q"], "float32"), to_ms(d["k"], "float32"), None,
                                                         Tensor(idx), scale_value=SCALE, layout="TND")]


def _sfa_ref(d: dict, idx: np.ndarray) -> tuple[np.ndarray, ...]:
    return ref.sparse_flash_attention(d["q"], d["k"], d["k"], idx, scale_value=SCALE, layout="TND")


@pytest.fixture()
def strict(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("MGO_CANN_STRICT", "1")   # read by the kernels at every launch
    yield


def _sync(outs: object) -> None:
    for o in outs if isinstance(outs, tuple) else (outs,):
        if o is not None:
            o.asnumpy()   # PyNative runs kernels asynchronously: an error surfaces here


# --------------------------------------------------------------------------------- section 6.1: -1 slots

def test_minus_one_before_a_valid_entry() -> None:
    """The package skips a -1 anywhere; CANN stops reading a row at its first -1."""
    d = _data(0)
    idx = np.stack([_as_row([0], 4), [-1, 1, 0, 2], _as_row([3, 1], 4), [2, -1, 4, 5]]).astype(np.int32)[:, None]
    got = _sfa(d, idx)
    for g, w in zip(got, _sfa_ref(d, idx)):
        assert_close(g, w, "float32", "attention")
    cann = np.stack([_as_row(cann_reading(r[0], t + 3), 4) for t, r in enumerate(idx)])[:, None]
    cann_out = _sfa_ref(d, cann)[0]
    assert (cann_out[1] == 0).all(), "CANN reads nothing of row 1 (its first slot is -1)"
    assert rel_l2(got[0][1], cann_out[1]) > 0.5 and rel_l2(got[0][3], cann_out[3]) > 0.05
    np.testing.assert_allclose(got[0][[0, 2]], cann_out[[0, 2]], rtol=1e-6, atol=1e-6)


def test_more_valid_entries_than_cann_reads() -> None:
    """Row 0 sees keys 0..2 (sparse_mode 3); CANN reads its first min(K, 3) slots only, and the
    masked block 4 in slot 0 takes one of them: key 2 is read by the package, not by CANN."""
    d = _data(1)
    idx = np.stack([[4, 0, 1, 2]] + [_as_row([0, 1], 4)] * 3).astype(np.int32)[:, None]
    got = _sfa(d, idx)[0]
    assert_close(got, _sfa_ref(d, idx)[0], "float32", "attention")
    assert cann_reading(idx[0, 0], 3) == [0, 1]
    cann = idx.copy()
    cann[0, 0] = _as_row([0, 1], 4)
    assert rel_l2(got[0], _sfa_ref(d, cann)[0][0]) > 0.05


def test_duplicates_count_twice() -> None:
    """An index given twice weighs twice in the softmax (so does CANN's golden, within the slots it
    reads; CANN's docs specify no repeats, and a top-k never makes one)."""
    d = _data(2)
    idx = np.stack([_as_row([0, 0], 3)] + [_as_row([1, 0], 3)] * 3).astype(np.int32)[:, None]
    got = _sfa(d, idx)[0]
    once = _sfa_ref(d, np.stack([_as_row([0], 3)] * T1)[:, None])[0]
    np.testing.assert_allclose(got[0], once[0], rtol=1e-6, atol=1e-6)   # one key twice: still that key's value
    idx[1, 0] = [1, 0, 0]
    s = SCALE * np.einsum("hd,jd->hj", d["q"][1], d["k"][[1, 0, 0], 0])
    p = np.exp(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ d["k"][[1, 0, 0], 0]
    np.testing.assert_allclose(_sfa(d, idx)[0][1], want, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------- section 0.12: strict mode

STRICT_CASES = [
    ([[-1, 1, 0, 2]], r"slot 1 = 1 is outside CANN's rules \(MGO_CANN_STRICT=1\): a valid entry after the -1 in "
                         r"slot 0"),
    ([[1, 0, 1, -1]], r"slot 2 = 1 is outside CANN's rules \(MGO_CANN_STRICT=1\): an index given twice"),
    ([[4, 0, 1, 2]], r"slot 3 = 2 is outside CANN's rules \(MGO_CANN_STRICT=1\): more valid entries than the 3 "
                        r"slots CANN reads"),
]


def _strict_indices(bad_row: list[list[int]]) -> np.ndarray:
    """Row 0 is the bad row; the others keep CANN's rules."""
    return np.stack([np.array(bad_row[0], np.int32)] + [_as_row([t, 0], 4) for t in range(1, T1)])[:, None]


def _all_index_ops(d: dict, idx: np.ndarray) -> list[tuple]:
    """(op, args, attributes) of the four ops that read sparse_indices, on one TND sequence (token
    indices)."""
    q, k, qi, ki, w = (to_ms(d[n], "float32") for n in ("q", "k", "qi", "ki", "w"))
    it = Tensor(idx)
    out, mx, sm = ops.sparse_flash_attention(q, k, None, it, scale_value=SCALE, layout="TND")
    attn = {"scale_value": SCALE, "layout": "TND"}
    stats = Tensor(np.zeros((1, T1, N1), np.float32)), Tensor(np.ones((1, T1, N1), np.float32))
    return [(ops.sparse_flash_attention, (q, k, None, it), attn),
            (ops.sparse_flash_attention_grad, (q, k, None, it, to_ms(d["d_out"], "float32"), out, mx, sm), attn),
            (ops.lightning_indexer_grad, (qi, ki, w, it, Tensor(d["dv"].astype(np.float32))), {"layout": "TND"}),
            (ops.sparse_lightning_indexer_grad_kl_loss, (q, k, qi, ki, w, it, *stats), attn)]


@pytest.mark.parametrize(("bad_row", "match"), STRICT_CASES, ids=["minus_one_first", "duplicate", "slots"])
def test_strict_mode_flags_inputs_outside_cann_rules(monkeypatch: pytest.MonkeyPatch, bad_row: list,
                                                     match: str) -> None:
    d = _data(3)
    idx = _strict_indices(bad_row)
    for op, args, kw in _all_index_ops(d, idx):
        _sync(op(*args, **kw))   # the contract accepts them
        monkeypatch.setenv("MGO_CANN_STRICT", "1")
        with pytest.raises(RuntimeError, match=rf"{op.__name__}: sparse_indices row 0 \(key group 0\), {match}"):
            _sync(op(*args, **kw))
        monkeypatch.delenv("MGO_CANN_STRICT")


def _sfa_tnd(q: Tensor, k: Tensor, idx: Tensor) -> tuple:
    return ops.sparse_flash_attention(q, k, None, idx, scale_value=SCALE, layout="TND")


def test_strict_mode_in_graph_mode(strict: None) -> None:
    d = _data(4)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(RuntimeError, match="outside CANN's rules"):
            _sync(OpCell(_sfa_tnd, {})(to_ms(d["q"], "float32"), to_ms(d["k"], "float32"),
                                        Tensor(_strict_indices(STRICT_CASES[0][0]))))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_strict_mode_accepts_the_indexer_selection(strict: None) -> None:
    """lightning_indexer's output keeps CANN's rules (valid entries first, distinct, at most the
    visible count), so a DSA step passes strict mode unchanged; BSND padding rows are not read."""
    rng = np.random.default_rng(5)
    lens_q, lens_k, k = [3, 5], [4, 5], 4
    qi, ki, w = rng.standard_normal((2, 5, 2, 8)), rng.standard_normal((2, 5, 1, 8)), rng.standard_normal((2, 5, 2))
    q, kk = rng.standard_normal((2, 5, N1, 8)), rng.standard_normal((2, 5, 1, 8))
    t = {n: to_ms(x, "float32") for n, x in (("qi", qi), ("ki", ki), ("w", w), ("q", q), ("k", kk))}
    lq, lk = Tensor(np.array(lens_q, np.int32)), Tensor(np.array(lens_k, np.int32))
    idx, _ = ops.lightning_indexer(t["qi"], t["ki"], t["w"], lq, lk, sparse_count=k, layout="BSND")
    out, mx, sm = ops.sparse_flash_attention(t["q"], t["k"], None, idx, None, None, lq, lk, scale_value=SCALE)
    d_out = Tensor(rng.standard_normal(out.shape).astype(np.float32))
    _sync(ops.sparse_flash_attention_grad(t["q"], t["k"], None, idx, d_out, out, mx, sm, lq, lk, scale_value=SCALE))
    d_values = Tensor(rng.standard_normal(idx.shape).astype(np.float32))
    _sync(ops.lightning_indexer_grad(t["qi"], t["ki"], t["w"], idx, d_values, lq, lk))
    mx1, sm1 = (Tensor(x.astype(np.float32)) for x in ref.attention_softmax_stats(
        q, kk, idx.asnumpy(), None, None, lens_q, lens_k, scale_value=SCALE))
    _sync(ops.sparse_lightning_indexer_grad_kl_loss(t["q"], t["k"], t["qi"], t["ki"], t["w"], idx, mx1, sm1,
                                                    None, None, lq, lk, scale_value=SCALE))


# --------------------------------------------------------------------------------- section 6.2: rows with no key

def test_rows_without_a_visible_key_statistics_and_backward() -> None:
    """Empty rows give out 0 and statistics 0 / 0 (CANN's SFA golden's); the backward never reads
    their statistics, so CANN's SFAG golden's 0 / 1, NaN or the package's former lowest / 0 give the
    same gradients, and those rows' query gradients are 0."""
    d = _data(6)
    idx = np.stack([_as_row([], 3), [4, 5, -1], _as_row([0, 2], 3), _as_row([1, 3], 3)]).astype(np.int32)[:, None]
    out, mx, sm = _sfa(d, idx)        # row 0: all -1; row 1: only masked keys (4, 5 > 1 + 2)
    empty = [0, 1]
    assert (out[empty] == 0).all() and (mx[:, empty] == 0).all() and (sm[:, empty] == 0).all()
    args = [to_ms(d["q"], "float32"), to_ms(d["k"], "float32"), None, Tensor(idx), to_ms(d["d_out"], "float32"),
            to_ms(out, "float32")]
    grads = []
    for m0, s0 in ((0.0, 0.0), (0.0, 1.0), (np.nan, np.nan), (float(np.finfo(np.float32).min), 0.0)):
        m, s = mx.copy(), sm.copy()
        m[:, empty], s[:, empty] = m0, s0
        g = ops.sparse_flash_attention_grad(*args, Tensor(m.astype(np.float32)), Tensor(s.astype(np.float32)),
                                            scale_value=SCALE, layout="TND")
        grads.append([g[0].asnumpy(), g[1].asnumpy()])
        assert (grads[-1][0][empty] == 0).all()
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            np.testing.assert_array_equal(a, b)
    want = ref.sparse_flash_attention_grad(d["q"], d["k"], d["k"], idx, d["d_out"], out, mx, sm, scale_value=SCALE,
                                           layout="TND")
    assert_close(grads[0][0], want[0], "float32", "attention", "d_query")
    assert_close(grads[0][1], want[1] + want[2], "float32", "attention", "d_key")


# --------------------------------------------------------------------------------- section 6.3: indexer ranking

def test_indexer_ranks_float32_scores_of_bfloat16_inputs() -> None:
    """bfloat16 inputs whose float32 scores differ below bfloat16's precision: CANN's golden ranks the
    bfloat16-rounded scores (a tie, lower index first: key 0); the package ranks the float32 scores
    (key 1 scores 1 + 2**-8 > 1 + 2**-9)."""
    q = np.ones((1, 1, 2))
    k = np.array([[[1.0, 2.0**-9]], [[1.0, 2.0**-8]]])
    w = np.ones((1, 1))
    scores = (q[0] @ k[:, 0].T)[0]
    assert quantize(scores, "bfloat16")[0] == quantize(scores, "bfloat16")[1], "a tie in bfloat16"
    idx, val = ops.lightning_indexer(to_ms(q, "bfloat16"), to_ms(k, "bfloat16"), to_ms(w, "bfloat16"), sparse_count=1,
                                     layout="TND", sparse_mode=0)
    assert idx.asnumpy().reshape(-1).tolist() == [1] and to_np(val).reshape(-1)[0] == 1 + 2.0**-8
    cann_first = int(np.argsort(-quantize(scores, "bfloat16"), kind="stable")[0])
    assert cann_first == 0
    assert ref.lightning_indexer(q, k, w, sparse_count=1, layout="TND", sparse_mode=0)[0].reshape(-1).tolist() == [1]
    _, values = builtins.lightning_indexer(to_ms(q[None], "bfloat16"), to_ms(k[None], "bfloat16"),
                                           to_ms(w[None], "bfloat16"), sparse_count=2, sparse_mode=0)
    assert (to_np(values) == 1.0).all(), "the built-in's values in the query dtype: the tie CANN ranks on"


# --------------------------------------------------------------------------------- section 6.4: LIG's order

def test_builtin_lightning_indexer_grad_takes_cann_order() -> None:
    want = inspect.signature(auto_generate.LightningIndexerGrad.__call__)
    params = [(p.name, p.default) for p in want.parameters.values()][1:]   # without self
    got = inspect.signature(builtins.lightning_indexer_grad)
    assert [(p.name, p.default) for p in got.parameters.values()] == params
    assert params[:5] == [("query", inspect.Parameter.empty), ("key", inspect.Parameter.empty),
                          ("dy", inspect.Parameter.empty), ("sparse_indices", inspect.Parameter.empty),
                          ("weights", inspect.Parameter.empty)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_builtin_lightning_indexer_grad_matches_the_op(exec_mode: str, dtype: str) -> None:
    d = _data(7, dtype)
    idx = np.stack([_as_row(list(range(min(t + 3, 4))), 4) for t in range(T1)]).astype(np.int32)[:, None]
    dy = quantize(d["dv"], dtype)
    args = [to_ms(d["qi"], dtype), to_ms(d["ki"], dtype), to_ms(dy, dtype), Tensor(idx), to_ms(d["w"], dtype)]
    fn = builtins.lightning_indexer_grad
    got = fn(*args, layout="TND") if exec_mode == "pynative" else OpCell(fn, {"layout": "TND"})(*args)
    same = ops.lightning_indexer_grad(args[0], args[1], args[4], args[3], Tensor(dy.astype(np.float32)),
                                      layout="TND")
    want = ref.lightning_indexer_grad(d["qi"], d["ki"], d["w"], idx, dy, layout="TND")
    for g, s, w in zip(got, same, want):
        assert g.dtype == args[0].dtype
        np.testing.assert_array_equal(to_np(g), to_np(s))    # dy widened to float32 exactly
        assert_close(to_np(g), w, dtype, "attention")


# --------------------------------------------------------------------------------- section 0.3: CANN's BSND call

def test_cann_style_bsnd_call_through_the_builtins(exec_mode: str) -> None:
    """A call as written for Ascend: BSND, one batch row of S1 = 5 queries of which 4 are real, and
    a batch without keys (per-batch lengths), through the installed ``mindspore.ops`` names; equal to
    the packed TND call, the padding row's outputs 0 / -1 / -inf."""
    rng = np.random.default_rng(8)
    lens_q, lens_k, s1, s2, k = [4, 3], [7, 0], 5, 7, 3
    q, kk, qr, kr = (rng.standard_normal(s) for s in ((2, s1, N1, D), (2, s2, 1, D), (2, s1, N1, 4), (2, s2, 1, 4)))
    qi, ki, w = rng.standard_normal((2, s1, 2, D)), rng.standard_normal((2, s2, 1, D)), rng.standard_normal((2, s1, 2))
    rows = [np.arange(n) + b * s1 for b, n in enumerate(lens_q)]
    keys = [np.arange(n) + b * s2 for b, n in enumerate(lens_k)]
    pq, pk = np.concatenate(rows), np.concatenate(keys)

    def packed(x: np.ndarray, at: np.ndarray) -> np.ndarray:
        return x.reshape(-1, *x.shape[2:])[at]

    lq, lk = Tensor(np.array(lens_q, np.int32)), Tensor(np.array(lens_k, np.int32))
    tensors = [to_ms(x, "float32") for x in (qi, ki, w, q, kk, qr, kr)] + [lq, lk]

    def step(qi: Tensor, ki: Tensor, w: Tensor, q: Tensor, kk: Tensor, qr: Tensor, kr: Tensor, lq: Tensor,
             lk: Tensor) -> tuple:
        # mindspore.ops' names, as code written for Ascend calls them (resolved at graph compile)
        idx, val = msops.lightning_indexer(qi, ki, w, actual_seq_lengths_query=lq, actual_seq_lengths_key=lk,
                                           sparse_count=k, return_value=True)
        out, mx, sm = msops.sparse_flash_attention(q, kk, kk, idx, SCALE, actual_seq_lengths_query=lq,
                                                   actual_seq_lengths_kv=lk, query_rope=qr, key_rope=kr,
                                                   attention_mode=2, return_softmax_lse=True)
        return idx, val, out, mx, sm

    assert builtins.install()
    try:
        idx, val, out, mx, sm = step(*tensors) if exec_mode == "pynative" else OpCell(step, {})(*tensors)
    finally:
        builtins.uninstall()
    idx, val, out = idx.asnumpy(), to_np(val), to_np(out)
    pad = np.setdiff1d(np.arange(2 * s1), pq)
    assert (idx.reshape(-1, k)[pad] == -1).all() and np.isneginf(val.reshape(-1, k)[pad]).all()
    assert (out.reshape(-1, N1, D)[pad] == 0).all()
    cq, ck = np.cumsum(lens_q).tolist(), np.cumsum(lens_k).tolist()
    want_idx, _ = ref.lightning_indexer(packed(qi, pq), packed(ki, pk), packed(w, pq), cq, ck, sparse_count=k,
                                        layout="TND")
    np.testing.assert_array_equal(packed(idx, pq), want_idx)
    want = ref.sparse_flash_attention(packed(q, pq), packed(kk, pk), packed(kk, pk), want_idx, packed(qr, pq),
                                      packed(kr, pk), cq, ck, scale_value=SCALE, layout="TND")
    assert_close(packed(out, pq), want[0], "float32", "attention", "attention_out")
    assert (to_np(mx)[:, :, 4] == 0).all() and (to_np(sm)[:, :, 4] == 0).all(), "the padding row's statistics"


# ---------------------------------------------------------------- section 6.7: sink rows above the diagonal

def test_sink_statistics_of_rows_above_the_diagonal() -> None:
    """Sinks, sparse_mode 3, more queries than keys (S1 = 6 > S2 = 3): rows 0-2 are above the diagonal
    (query s1 sees keys <= s1 - 3, none). This package gives them, as every row without a visible key
    with a sink, statistics sigma / 1 (the softmax over the sink alone); CANN's golden gives them 0 / 0
    and sigma / 1 only to a row whose selection is empty (row 4). out is 0 in both, and the backward
    never reads these statistics: CANN's 0 / 0 there gives the same gradients, d_sinks included."""
    rng = np.random.default_rng(7)
    t1, t2 = 6, 3
    q, k = rng.standard_normal((t1, N1, D)), rng.standard_normal((t2, 1, D))
    d_out, sinks = rng.standard_normal((t1, N1, D)), np.array([0.7, -1.2])
    idx = np.array([[0, 1], [0, 2], [1, -1], [0, -1], [-1, -1], [2, 1]], np.int32)[:, None]
    q32, k32, s32 = (to_ms(x, "float32") for x in (q, k, sinks))
    out, mx, sm = (to_np(x) for x in ops.sparse_flash_attention(q32, k32, None, Tensor(idx), sinks=s32,
                                                                 scale_value=SCALE, layout="TND"))
    above, empty = [0, 1, 2], [4]
    for rows in (above, empty):   # this package: sigma / 1 for both kinds of rows; out 0
        assert (out[rows] == 0).all()
        np.testing.assert_array_equal(mx[0, rows], np.broadcast_to(sinks.astype(np.float32), (len(rows), N1)))
        assert (sm[0, rows] == 1).all()
    cann_mx, cann_sm = mx.copy(), sm.copy()
    cann_mx[0, above], cann_sm[0, above] = 0.0, 0.0       # CANN's golden above the diagonal
    grads = [[to_np(g) for g in ops.sparse_flash_attention_grad(
        q32, k32, None, Tensor(idx), to_ms(d_out, "float32"), to_ms(out, "float32"), Tensor(m.astype(np.float32)),
        Tensor(s.astype(np.float32)), sinks=s32, scale_value=SCALE, layout="TND") if g is not None]
        for m, s in ((mx, sm), (cann_mx, cann_sm))]
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)
    assert all(np.isfinite(g).all() for g in grads[0])
