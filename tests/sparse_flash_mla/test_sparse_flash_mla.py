"""sparse_flash_mla / sparse_flash_mla_grad kernels vs the float64 reference (docs/contract.md section 8),
PyNative and GRAPH, float32/float16/bfloat16, TND and BSND; ms.grad through the forward."""
from __future__ import annotations

from collections.abc import Iterator

import mindspore as ms
import numpy as np
import pytest
from _smla_cases import SmlaCase, make_case
from _util import DTYPES, OpCell, assert_close, quantize, to_ms, to_np

from ms_grad_ops import ops
from ms_grad_ops import reference as ref

# name -> make_case kwargs; each exercises a rule of docs/contract.md section 8.
CASES = {
    # CSA, several TND sequences (one with S1 < S2, one whose first rows have no complete compressed block),
    # window 5 (rows past the first tokens see a full band, the first ones a shorter one), residual given
    "csa_tnd": dict(layout="TND", lens=[(9, 9), (5, 13), (3, 3)], kind="csa", n1=4, k=6, ratio=2),
    # HCA, BSND with padding rows and seqused, N2 = 2 groups, the window unbounded on the left
    "hca_bsnd_n2": dict(layout="BSND", lens=[(7, 11), (4, 4)], kind="hca", n1=4, n2=2, ratio=3, win_left=-1),
    # SWA (no compressed keys), S1 > S2: the first rows see nothing (out 0, lse = the sink)
    "swa_empty_rows": dict(layout="TND", lens=[(6, 3), (4, 8)], kind="swa", n1=2, win_left=2),
    # CSA with ori_sparse_indices (ori_softmax_l1_norm), no residual (L = S2), no sinks
    "csa_ori_idx": dict(layout="TND", lens=[(8, 12)], kind="csa", n1=2, k=5, ratio=4, ori_k=7, residual=False,
                        sinks=False),
    # TND with seqused_*: 2 unused rows at the end of every sequence of every source (never read)
    "tnd_seqused": dict(layout="TND", lens=[(6, 10), (4, 4)], kind="csa", n1=2, k=4, ratio=2, pad=2),
    # more keys than one kernel block (the online softmax across blocks), HCA ratio 1 over a long band
    "long_hca": dict(layout="TND", lens=[(3, 700)], kind="hca", n1=2, d=8, ratio=1, win_left=300),
    # masks: causal original tokens, no compressed mask, window to the right
    "masks_bsnd": dict(layout="BSND", lens=[(6, 9)], kind="csa", n1=2, k=4, ratio=2, ori_mask_mode=3,
                       cmp_mask_mode=0),
    "band_right": dict(layout="TND", lens=[(7, 7)], kind="hca", n1=2, ratio=2, win_left=1, win_right=2),
    # DeepSeek-V4's head shape (D 512) at a small length
    "v4_head": dict(layout="BSND", lens=[(5, 9)], kind="csa", n1=8, d=512, k=4, ratio=4, win_left=127, pad=0),
}
GRAPH_SUBSET = [("csa_tnd", "bfloat16"), ("hca_bsnd_n2", "float16"), ("csa_ori_idx", "float32")]


def case_of(name: str, seed: int = 7) -> SmlaCase:
    return make_case(np.random.default_rng(seed), **CASES[name])


def _ms_ints(case: SmlaCase) -> dict:
    return {n: None if v is None else ms.Tensor(v) for n, v in case.ints.items()}


def quantized(case: SmlaCase, dtype: str) -> dict[str, np.ndarray | None]:
    return {n: None if case.arrays[n] is None else quantize(case.arrays[n], dtype) for n in ("query", "ori_kv",
                                                                                               "cmp_kv")}


def _tensors(case: SmlaCase, dtype: str) -> dict:
    x = quantized(case, dtype)
    out = {n: None if v is None else to_ms(v, dtype) for n, v in x.items()}
    out["sinks"] = None if case.arrays["sinks"] is None else ms.Tensor(case.arrays["sinks"])
    return out


def run_forward(case: SmlaCase, dtype: str, mode: str) -> tuple[np.ndarray, np.ndarray]:
    t = _tensors(case, dtype)
    kw = {**_ms_ints(case), "cmp_kv": t["cmp_kv"], "sinks": t["sinks"]}
    if mode == "graph":
        out, lse = OpCell(ops.sparse_flash_mla, case.attrs)(t["query"], t["ori_kv"], *[kw[n] for n in (
            "cmp_kv", "ori_sparse_indices", "cmp_sparse_indices", "cu_seqlens_q", "cu_seqlens_ori_kv",
            "cu_seqlens_cmp_kv", "seqused_q", "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv", "sinks")])
    else:
        out, lse = ops.sparse_flash_mla(t["query"], t["ori_kv"], **kw, **case.attrs)
    return to_np(out), lse.asnumpy().astype(np.float64)


def reference_forward(case: SmlaCase, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    x = quantized(case, dtype)
    return ref.sparse_flash_mla(x["query"], x["ori_kv"], **{**case.kwargs(), "cmp_kv": x["cmp_kv"]}, **case.attrs)


def _padding_rows(case: SmlaCase, lse_shape: tuple) -> np.ndarray:
    """Mask of the lse entries of rows no batch uses (beyond seqused_q)."""
    mask = np.zeros(lse_shape, bool)
    for b, (s1, _, _) in enumerate(case.lens):
        if case.layout == "BSND":
            mask[b, :, s1:] = True
        else:
            q0 = case.starts[b][0]
            mask[:, q0 + s1:q0 + case.rows[b][0]] = True
    return mask


def check_lse(got: np.ndarray, want: np.ndarray, case: SmlaCase) -> None:
    pad = _padding_rows(case, want.shape)
    assert (got[pad] == 0).all(), "padding rows: lse 0"
    assert np.array_equal(np.isneginf(got), np.isneginf(want)), "rows without keys nor sink: -inf"
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-5, atol=2e-5)


@pytest.fixture
def graph_mode() -> Iterator[str]:
    ms.set_context(mode=ms.GRAPH_MODE)
    yield "graph"
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_forward_matches_reference(name: str, dtype: str) -> None:
    case = case_of(name)
    out, lse = run_forward(case, dtype, "pynative")
    r_out, r_lse = reference_forward(case, dtype)
    assert_close(out, r_out, dtype, "attention", "attn_out")
    check_lse(lse, r_lse, case)


@pytest.mark.parametrize("name,dtype", GRAPH_SUBSET)
def test_forward_matches_reference_graph(graph_mode: str, name: str, dtype: str) -> None:
    case = case_of(name)
    out, lse = run_forward(case, dtype, graph_mode)
    r_out, r_lse = reference_forward(case, dtype)
    assert_close(out, r_out, dtype, "attention", "attn_out")
    check_lse(lse, r_lse, case)


def test_empty_rows_and_first_tokens() -> None:
    """Rows that see nothing give out 0 and lse = their head's sink (and -inf without sinks); the first rows of
    a CSA sequence see no compressed entry (fewer than cmp_ratio tokens) and only part of the band."""
    case = case_of("swa_empty_rows")
    out, lse = run_forward(case, "float32", "pynative")
    sinks = case.arrays["sinks"].astype(np.float64)
    # batch 0: S1 = 6 > S2 = 3, rows 0..2 see no original token
    assert (out[:3] == 0).all()
    np.testing.assert_array_equal(lse[0, :3], np.broadcast_to(sinks, (3, 2)).astype(np.float32))
    no_sink = make_case(np.random.default_rng(3), **{**CASES["swa_empty_rows"], "sinks": False})
    _, lse2 = run_forward(no_sink, "float32", "pynative")
    assert np.isneginf(lse2[0, :3]).all() and np.isfinite(lse2[0, 3:]).all()


def run_grad(case: SmlaCase, dtype: str, mode: str, rng: np.random.Generator) -> tuple[list, tuple]:
    """The grad kernel fed the reference lse and the (quantized) reference out; (kernel outputs, reference)."""
    x = quantized(case, dtype)
    r_out, r_lse = reference_forward(case, dtype)
    d_out = quantize(rng.standard_normal(r_out.shape), dtype)
    out_q = quantize(r_out, dtype)
    want = ref.sparse_flash_mla_grad(x["query"], d_out, out_q, r_lse.astype(np.float32), x["ori_kv"],
                                     **{**case.kwargs(), "cmp_kv": x["cmp_kv"]}, **case.attrs)
    t = _tensors(case, dtype)
    args = [t["query"], to_ms(d_out, dtype), to_ms(out_q, dtype), ms.Tensor(r_lse.astype(np.float32)), t["ori_kv"],
            t["cmp_kv"], *[_ms_ints(case)[n] for n in ("ori_sparse_indices", "cmp_sparse_indices", "cu_seqlens_q",
                                                        "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q",
                                                        "seqused_ori_kv", "seqused_cmp_kv", "cmp_residual_kv")],
            t["sinks"]]
    fn = OpCell(ops.sparse_flash_mla_grad, case.attrs) if mode == "graph" else \
        (lambda *a: ops.sparse_flash_mla_grad(*a, **case.attrs))
    got = fn(*args)
    return [None if g is None else to_np(g) for g in got], want


GRAD_NAMES = ("d_query", "d_ori_kv", "d_cmp_kv", "d_sinks", "ori_softmax_l1_norm", "cmp_softmax_l1_norm")


def check_grads(got: list, want: tuple, dtype: str) -> None:
    for name, g, w in zip(GRAD_NAMES, got, want):
        assert (g is None) == (w is None), name
        if g is None:
            continue
        if name in ("d_sinks", "ori_softmax_l1_norm", "cmp_softmax_l1_norm"):  # float32 outputs
            scale = max(np.abs(w).max(), 1e-30)
            np.testing.assert_allclose(g, w, rtol=0, atol=(2e-5 if dtype == "float32" else 3e-3) * scale,
                                       err_msg=name)
            if name.endswith("l1_norm"):
                assert (g[w == 0] == 0).all(), f"{name}: -1 and masked slots are 0"
        else:
            assert_close(g, w, dtype, "attention", name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_grad_matches_reference(name: str, dtype: str) -> None:
    got, want = run_grad(case_of(name), dtype, "pynative", np.random.default_rng(1))
    check_grads(got, want, dtype)


@pytest.mark.parametrize("name,dtype", GRAPH_SUBSET)
def test_grad_matches_reference_graph(graph_mode: str, name: str, dtype: str) -> None:
    got, want = run_grad(case_of(name), dtype, graph_mode, np.random.default_rng(1))
    check_grads(got, want, dtype)


def test_l1_norm_is_the_head_mean_of_p() -> None:
    """cmp_softmax_l1_norm sums, with the band's and the sink's probabilities, to 1 per row (float32)."""
    case = case_of("csa_tnd")
    got, _ = run_grad(case, "float32", "pynative", np.random.default_rng(2))
    cmp_l1 = got[5]
    assert cmp_l1.shape == case.ints["cmp_sparse_indices"].shape
    row_sums = cmp_l1.sum(axis=-1)
    assert (row_sums < 1).all() and (row_sums >= 0).all()


@pytest.mark.parametrize("mode,name", [("pynative", "csa_tnd"), ("graph", "csa_tnd"),
                                       ("pynative", "swa_empty_rows"), ("pynative", "hca_bsnd_n2")])
def test_ms_grad_through_the_forward(mode: str, name: str) -> None:
    """ms.grad of sum(w * attn_out) reaches query, ori_kv, cmp_kv and sinks through the grad kernel, as the
    reference's backward with d_out = w computes it (cmp_kv None: SWA, its gradient absent)."""
    case = case_of(name)
    dtype = "float32"
    x = quantized(case, dtype)
    w = np.random.default_rng(5).standard_normal(x["query"].shape)
    ints = _ms_ints(case)
    swa = x["cmp_kv"] is None

    def loss(q: ms.Tensor, o: ms.Tensor, c: ms.Tensor, s: ms.Tensor) -> ms.Tensor:
        out, _ = ops.sparse_flash_mla(q, o, None if swa else c, ints["ori_sparse_indices"],
                                      ints["cmp_sparse_indices"], ints["cu_seqlens_q"], ints["cu_seqlens_ori_kv"],
                                      ints["cu_seqlens_cmp_kv"], ints["seqused_q"], ints["seqused_ori_kv"],
                                      ints["seqused_cmp_kv"], ints["cmp_residual_kv"], s, **case.attrs)
        return (out * ms.Tensor(w, ms.float32)).sum()

    if mode == "graph":
        ms.set_context(mode=ms.GRAPH_MODE)
    try:
        fn = ms.jit(ms.grad(loss, grad_position=(0, 1, 2, 3))) if mode == "graph" else \
            ms.grad(loss, grad_position=(0, 1, 2, 3))
        got = fn(to_ms(x["query"], dtype), to_ms(x["ori_kv"], dtype),
                 to_ms(x["ori_kv"] if swa else x["cmp_kv"], dtype), ms.Tensor(case.arrays["sinks"]))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    r_out, r_lse = reference_forward(case, dtype)
    want = ref.sparse_flash_mla_grad(x["query"], w, r_out, r_lse, x["ori_kv"],
                                     **{**case.kwargs(), "cmp_kv": x["cmp_kv"]}, **case.attrs)
    for g, wnt, name_ in zip(got, want[:4], GRAD_NAMES):
        if wnt is None:  # SWA: cmp_kv is not an input of the op, its gradient is zero
            assert not to_np(g).any(), name_
            continue
        assert_close(to_np(g), wnt, dtype, "attention", name_)
