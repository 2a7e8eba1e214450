"""sparse_flash_attention / sparse_flash_attention_grad kernels vs the float64 reference, PyNative and GRAPH."""
from __future__ import annotations

from collections.abc import Iterator

import mindspore as ms
import numpy as np
import pytest
from _sfa_data import Case, make_case
from _util import DTYPES, Fn, assert_close, quantize, to_ms, to_np

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

# name -> make_case kwargs. Each exercises a docs/contract.md section 3 rule (see the comments).
CASES = {
    # uneven TND batches, an empty batch, S1 > S2 (first rows see nothing), -1 slots everywhere
    "tnd_uneven": dict(layout="TND", lens_q=[5, 0, 7, 3], lens_kv=[9, 4, 4, 12], n1=4, d=16, dr=8, k=6,
                       pattern="mixed"),
    # blocks of 16 with the diagonal block partly masked, S1 != S2, no rope
    "tnd_block16": dict(layout="TND", lens_q=[20, 9], lens_kv=[40, 33], n1=2, d=16, dr=None, k=3, bs=16),
    # BSND, no mask, N2 = 2 groups, odd block size
    "bsnd_mode0_n2": dict(layout="BSND", batch=2, s1=6, s2=11, n1=4, n2=2, d=12, dr=4, k=5, bs=3, mode=0,
                          pattern="mixed"),
    # BSND, N1 = 16, no rope
    "bsnd_n16": dict(layout="BSND", batch=1, s1=12, s2=12, n1=16, d=32, dr=None, k=8),
    # N1 = 1, K larger than the visible keys
    "tnd_n1": dict(layout="TND", lens_q=[4, 6], lens_kv=[4, 10], n1=1, d=16, dr=8, k=12, pattern="start"),
    # the Ascend head shape D = 512, Dr = 64 at small T
    "tnd_mla": dict(layout="TND", lens_q=[3, 2], lens_kv=[5, 2], n1=2, d=512, dr=64, k=4),
    # more visible keys than one kernel block (online softmax across blocks)
    "tnd_chunks": dict(layout="TND", lens_q=[2], lens_kv=[2600], n1=2, d=8, dr=4, k=41, bs=64, mode=0),
    # The cases above select random key subsets: consecutive rows share few keys, so the kernels
    # process them one by one (R = 1). The "dense" ones below select every visible block, so
    # consecutive rows share almost all keys and the kernels group up to R = min(16, 512 / G) rows
    # over the union of their keys (sparse_flash_attention_groups.h); "dense_dup" also repeats a
    # block in every third row (it counts twice).
    # causal, uneven batches (one empty, S1 < S2), G = 2: groups of up to 16 rows
    "dense_tnd": dict(layout="TND", lens_q=[37, 0, 21], lens_kv=[37, 5, 30], n1=2, d=16, dr=8, k=40,
                      select="dense_dup"),
    # blocks of 4 (the diagonal block partly masked), N2 = 2, no rope, S1 > S2 (first rows see nothing)
    "dense_block4_n2": dict(layout="TND", lens_q=[30], lens_kv=[23], n1=4, n2=2, d=8, dr=None, k=9, bs=4,
                            select="dense"),
    # BSND, no mask: every row of a batch has the same keys, groups of 16 rows of G = 8 heads
    "dense_bsnd_mode0": dict(layout="BSND", batch=2, s1=20, s2=13, n1=8, d=8, dr=4, k=15, mode=0,
                             select="dense_dup"),
}


def _select_every_visible_block(case: Case, rng: np.random.Generator, duplicates: bool) -> None:
    """Rewrites case.sparse_indices: every row selects all its visible blocks (each group in its own
    random slot order, -1 in the spare slots); with ``duplicates`` every third row repeats one."""
    idx = case.sparse_indices
    flat = idx.reshape(-1, idx.shape[-2], idx.shape[-1])
    if case.layout == "TND":
        cq, ckv = [0, *case.lens_q], [0, *case.lens_kv]
        batches = [(cq[i + 1] - cq[i], ckv[i + 1] - ckv[i]) for i in range(len(cq) - 1)]
    else:
        batches = [(idx.shape[1], case.key.shape[1])] * idx.shape[0]
    bs, k = case.sparse_block_size, idx.shape[-1]
    row = 0
    for s1_len, s2_len in batches:
        for i in range(s1_len):
            limit = s2_len - 1 if case.sparse_mode == 0 else min(s2_len - 1, i + s2_len - s1_len)
            flat[row] = -1
            for grp in range(flat.shape[1]):
                blocks = rng.permutation(limit // bs + 1) if limit >= 0 else np.zeros(0, np.int32)
                if duplicates and i % 3 == 0 and len(blocks):
                    blocks = np.append(blocks, blocks[-1])
                assert len(blocks) <= k
                flat[row, grp, np.sort(rng.choice(k, size=len(blocks), replace=False))] = blocks
            row += 1


def _case(name: str, seed: int) -> Case:
    kw = dict(CASES[name])
    select = kw.pop("select", "random")
    rng = np.random.default_rng(seed)
    case = make_case(rng, **kw)
    if select != "random":
        _select_every_visible_block(case, rng, duplicates=select == "dense_dup")
    return case


def _quantized(case: Case, dtype: str) -> dict:
    q = {n: None if getattr(case, n) is None else quantize(getattr(case, n), dtype)
         for n in ("query", "key", "value", "query_rope", "key_rope")}
    return q


def _ms(x: np.ndarray | None, dtype: str) -> ms.Tensor | None:
    return None if x is None else to_ms(x, dtype)


def _lens(case: Case) -> tuple:
    if case.layout != "TND":
        return None, None
    return ms.Tensor(np.asarray(case.lens_q, np.int32)), ms.Tensor(np.asarray(case.lens_kv, np.int64))


def _call(fn: object, exec_mode: str, *args: object) -> object:
    return Fn(fn)(*args) if exec_mode == "graph" else fn(*args)


def run_forward(case: Case, dtype: str, exec_mode: str) -> tuple[np.ndarray, ...]:
    x = _quantized(case, dtype)
    attrs = case.attrs()
    lq, lkv = _lens(case)

    if x["query_rope"] is None:
        def fwd(q: ms.Tensor, k: ms.Tensor, v: ms.Tensor, idx: ms.Tensor, a: ms.Tensor, b: ms.Tensor) -> tuple:
            return ops.sparse_flash_attention(q, k, v, idx, None, None, a, b, **attrs)
        args = [_ms(x["query"], dtype), _ms(x["key"], dtype), _ms(x["value"], dtype), ms.Tensor(case.sparse_indices)]
    else:
        def fwd(q: ms.Tensor, k: ms.Tensor, v: ms.Tensor, idx: ms.Tensor, qr: ms.Tensor, kr: ms.Tensor,
                a: ms.Tensor, b: ms.Tensor) -> tuple:
            return ops.sparse_flash_attention(q, k, v, idx, qr, kr, a, b, **attrs)
        args = [_ms(x[n], dtype) for n in ("query", "key", "value")] + [ms.Tensor(case.sparse_indices)] + \
            [_ms(x["query_rope"], dtype), _ms(x["key_rope"], dtype)]
    if case.layout == "TND":
        args += [lq, lkv]
        out, smax, ssum = _call(fwd, exec_mode, *args)
    else:
        # BSND: no lengths (None, bound in a closure)
        def bsnd(*a: ms.Tensor) -> tuple:
            return fwd(*a, None, None)
        out, smax, ssum = _call(bsnd, exec_mode, *args)
    return to_np(out), smax.asnumpy().astype(np.float64), ssum.asnumpy().astype(np.float64)


def reference_forward(case: Case, dtype: str) -> tuple[np.ndarray, ...]:
    x = _quantized(case, dtype)
    return ref.sparse_flash_attention(x["query"], x["key"], x["value"], case.sparse_indices, x["query_rope"],
                                      x["key_rope"], case.lens_q, case.lens_kv, **case.attrs())


def _check_stats(got_max: np.ndarray, got_sum: np.ndarray, ref_max: np.ndarray, ref_sum: np.ndarray,
                 dtype: str) -> None:
    empty = ref_sum == 0
    assert (got_sum[empty] == 0).all() and (got_max[empty] == 0).all(), "rows with no visible key: 0 / 0"
    assert_close(got_max[~empty], ref_max[~empty], dtype, "attention", "softmax_max")
    assert_close(got_sum[~empty], ref_sum[~empty], dtype, "attention", "softmax_sum")


# GRAPH mode compiles for several seconds per test: it runs a subset (the kernel is the same).
GRAPH_SUBSET = [("tnd_uneven", "bfloat16"), ("bsnd_mode0_n2", "float16"), ("tnd_block16", "float32"),
                ("dense_tnd", "bfloat16")]


@pytest.fixture
def graph_mode() -> Iterator[str]:
    ms.set_context(mode=ms.GRAPH_MODE)
    yield "graph"
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_forward_matches_reference(name: str, dtype: str) -> None:
    check_forward(name, dtype, "pynative")


@pytest.mark.parametrize("name,dtype", GRAPH_SUBSET)
def test_forward_matches_reference_graph(graph_mode: str, name: str, dtype: str) -> None:
    check_forward(name, dtype, graph_mode)


def check_forward(name: str, dtype: str, exec_mode: str) -> None:
    case = _case(name, 10)
    out, smax, ssum = run_forward(case, dtype, exec_mode)
    r_out, r_max, r_sum = reference_forward(case, dtype)
    assert_close(out, r_out, dtype, "attention", "out")
    _check_stats(smax, ssum, r_max, r_sum, dtype)
    empty_rows = (r_sum == 0)
    if empty_rows.any():
        # forward output of rows with no visible key is exactly 0
        n2 = case.key.shape[-2]
        flat = out.reshape(-1, n2, out.shape[-2] // n2, out.shape[-1])
        mask = empty_rows.transpose(0, 2, 1, 3).reshape(flat.shape[:3]) if case.layout == "BSND" else \
            empty_rows.transpose(1, 0, 2)
        assert (flat[mask] == 0).all()


def run_grad(case: Case, dtype: str, exec_mode: str, rng: np.random.Generator) -> tuple[list, tuple]:
    """Grad kernel fed the reference statistics and the (quantized) reference out; returns
    (kernel grads as float64 or None, reference grads)."""
    x = _quantized(case, dtype)
    r_out, r_max, r_sum = reference_forward(case, dtype)
    d_out = quantize(rng.standard_normal(r_out.shape), dtype)
    out_q = quantize(r_out, dtype)
    smax, ssum = r_max.astype(np.float32), r_sum.astype(np.float32)
    attrs = case.attrs()
    rope = x["query_rope"] is not None
    lq, lkv = _lens(case)
    tnd = case.layout == "TND"

    def grad(q: ms.Tensor, k: ms.Tensor, v: ms.Tensor, idx: ms.Tensor, do: ms.Tensor, o: ms.Tensor,
             m: ms.Tensor, s: ms.Tensor, *rest: ms.Tensor) -> tuple:
        lens = (rest[0], rest[1]) if tnd else (None, None)
        ropes = (rest[-2], rest[-1]) if rope else (None, None)
        g = ops.sparse_flash_attention_grad(q, k, v, idx, do, o, m, s, lens[0], lens[1], ropes[0], ropes[1],
                                            **attrs)
        return g[:5] if rope else g[:3]

    args = [_ms(x[n], dtype) for n in ("query", "key", "value")] + [ms.Tensor(case.sparse_indices)] + \
        [to_ms(d_out, dtype), to_ms(out_q, dtype), ms.Tensor(smax), ms.Tensor(ssum)]
    if tnd:
        args += [lq, lkv]
    if rope:
        args += [_ms(x["query_rope"], dtype), _ms(x["key_rope"], dtype)]
    got = list(_call(grad, exec_mode, *args))
    got = [to_np(g) for g in got] + [None] * (5 - len(got))
    want = ref.sparse_flash_attention_grad(x["query"], x["key"], x["value"], case.sparse_indices, d_out, out_q,
                                           smax, ssum, case.lens_q, case.lens_kv, x["query_rope"], x["key_rope"],
                                           **attrs)
    return got, want


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_grad_matches_reference(name: str, dtype: str) -> None:
    check_grad(name, dtype, "pynative")


@pytest.mark.parametrize("name,dtype", GRAPH_SUBSET)
def test_grad_matches_reference_graph(graph_mode: str, name: str, dtype: str) -> None:
    check_grad(name, dtype, graph_mode)


def check_grad(name: str, dtype: str, exec_mode: str) -> None:
    case = _case(name, 20)
    got, want = run_grad(case, dtype, exec_mode, np.random.default_rng(21))
    for what, g, w in zip(("d_query", "d_key", "d_value", "d_query_rope", "d_key_rope"), got, want):
        if w is None:
            assert g is None, what
            continue
        assert_close(g, w, dtype, "attention", what)


def test_rows_without_visible_keys_give_zero_grads() -> None:
    """Rows that see nothing (S1 > S2 head rows, all -1 rows) get exactly zero d_query and add
    nothing to d_key/d_value; no NaN anywhere."""
    rng = np.random.default_rng(3)
    case = make_case(rng, layout="TND", lens_q=[6, 3], lens_kv=[3, 5], n1=2, d=8, dr=4, k=3)
    case.sparse_indices[7] = -1  # batch 1, row 1: every slot unused
    got, want = run_grad(case, "float32", "pynative", rng)
    dq = got[0]
    for t in (0, 1, 2, 7):  # rows 0..2 of batch 0 see no key (s1 + 3 - 6 < 0)
        assert (dq[t] == 0).all() and (got[3][t] == 0).all()
    for g, w in zip(got, want):
        assert np.isfinite(g).all()
        assert_close(g, w, "float32", "attention")


def test_python_sequence_lengths_and_int64_tensors() -> None:
    case = _case("tnd_uneven", 4)
    x = _quantized(case, "float32")
    args = [to_ms(x[n], "float32") for n in ("query", "key", "value")] + [ms.Tensor(case.sparse_indices),
                                                                           to_ms(x["query_rope"], "float32"),
                                                                           to_ms(x["key_rope"], "float32")]
    a = ops.sparse_flash_attention(*args, case.lens_q, tuple(case.lens_kv), **case.attrs())
    b = ops.sparse_flash_attention(*args, ms.Tensor(np.asarray(case.lens_q, np.int64)),
                                   ms.Tensor(np.asarray(case.lens_kv, np.int32)), **case.attrs())
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u.asnumpy(), v.asnumpy())


@pytest.mark.parametrize("name,dtype,exec_mode", [("tnd_uneven", "bfloat16", "pynative"),
                                                   ("bsnd_mode0_n2", "float16", "pynative"),
                                                   ("tnd_mla", "float32", "pynative"),
                                                   ("dense_tnd", "bfloat16", "pynative"),
                                                   ("dense_bsnd_mode0", "float32", "pynative"),
                                                   ("tnd_block16", "bfloat16", "graph")])
def test_shared_kv_value_none(name: str, dtype: str, exec_mode: str) -> None:
    """value=None (key is value): the forward reads the values from key, the grad kernel returns
    d_key = dK + dV (summed in float32, rounded once) and d_value None."""
    case = _case(name, 30)
    case.value = case.key
    x = _quantized(case, dtype)
    r_out, r_max, r_sum = reference_forward(case, dtype)
    rng = np.random.default_rng(31)
    d_out = quantize(rng.standard_normal(r_out.shape), dtype)
    attrs = case.attrs()
    lq, lkv = _lens(case)
    rope = x["query_rope"] is not None

    def fwd_bwd(q: ms.Tensor, kv: ms.Tensor, idx: ms.Tensor, do: ms.Tensor, *ropes: ms.Tensor) -> tuple:
        qr, kr = ropes if rope else (None, None)
        out, m, s = ops.sparse_flash_attention(q, kv, None, idx, qr, kr, lq, lkv, **attrs)
        g = ops.sparse_flash_attention_grad(q, kv, None, idx, do, out, m, s, lq, lkv, qr, kr, **attrs)
        return out, g[0], g[1], g[2] is None, (g[3] if rope else g[0]), (g[4] if rope else g[1])

    ms.set_context(mode=ms.GRAPH_MODE if exec_mode == "graph" else ms.PYNATIVE_MODE)
    try:
        args = [_ms(x["query"], dtype), _ms(x["key"], dtype), ms.Tensor(case.sparse_indices), to_ms(d_out, dtype)]
        args += [_ms(x["query_rope"], dtype), _ms(x["key_rope"], dtype)] if rope else []
        out, dq, dkv, no_dv, dqr, dkr = _call(fwd_bwd, exec_mode, *args)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert no_dv
    assert_close(to_np(out), r_out, dtype, "attention", "out")
    out_q = quantize(to_np(out), dtype)
    want = ref.sparse_flash_attention_grad(x["query"], x["key"], x["key"], case.sparse_indices, d_out, out_q,
                                           r_max, r_sum, case.lens_q, case.lens_kv, x["query_rope"], x["key_rope"],
                                           **attrs)
    assert_close(to_np(dq), want[0], dtype, "attention", "d_query")
    assert_close(to_np(dkv), want[1] + want[2], dtype, "attention", "d_key (fused dK + dV)")
    if rope:
        assert_close(to_np(dqr), want[3], dtype, "attention", "d_query_rope")
        assert_close(to_np(dkr), want[4], dtype, "attention", "d_key_rope")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_grouped_rows_keep_nan_where_the_reference_has_it() -> None:
    """Grouped rows (dense selection) with NaN in one query row, +Inf in one d_out row and NaN in one
    key: a pair a row did not select must not turn the other rows of its group NaN (0 * NaN), so
    NaN appears exactly where the float64 reference has it."""
    case = _case("dense_tnd", 40)
    case.query[10, 1, 3] = np.nan      # batch 0 row 10, head 1
    case.key[45, 0, 2] = np.nan        # batch 2 key 8 (rows 8.. of that batch select it)
    x = _quantized(case, "float32")
    lq, lkv = _lens(case)
    args = [to_ms(x[n], "float32") for n in ("query", "key", "value")] + [ms.Tensor(case.sparse_indices)]
    ropes = [to_ms(x["query_rope"], "float32"), to_ms(x["key_rope"], "float32")]
    got_f = ops.sparse_flash_attention(*args, *ropes, lq, lkv, **case.attrs())
    want_f = reference_forward(case, "float32")
    r_out, r_max, r_sum = want_f
    d_out = np.random.default_rng(41).standard_normal(r_out.shape)
    d_out[20, 0, 5] = np.inf           # batch 0 row 20, head 0
    got_g = ops.sparse_flash_attention_grad(*args, to_ms(d_out, "float32"), to_ms(r_out, "float32"),
                                            ms.Tensor(r_max.astype(np.float32)), ms.Tensor(r_sum.astype(np.float32)),
                                            lq, lkv, *ropes, **case.attrs())
    want_g = ref.sparse_flash_attention_grad(x["query"], x["key"], x["value"], case.sparse_indices, d_out, r_out,
                                             r_max.astype(np.float32), r_sum.astype(np.float32), case.lens_q,
                                             case.lens_kv, x["query_rope"], x["key_rope"], **case.attrs())
    for what, g, w in zip(("out", "softmax_max", "softmax_sum", "d_query", "d_key", "d_value", "d_query_rope",
                           "d_key_rope"), [*got_f, *got_g], [*want_f, *want_g]):
        g = to_np(g).astype(np.float64)
        w = np.asarray(w, np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaN pattern differs")
        inf = np.isinf(w)
        np.testing.assert_array_equal(g[inf], w[inf], err_msg=f"{what}: Inf pattern differs")
        assert_close(g[np.isfinite(w)], w[np.isfinite(w)], "float32", "attention", what)
    assert np.isnan(want_g[1]).any() and not np.isnan(want_g[1]).all(), "d_key must mix NaN and finite rows"
